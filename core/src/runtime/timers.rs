//! The deadlines of every lease and waiter of the process, kept by one task
//! of the runtime.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::spawn;

/// Something to do at an instant, run by [`Timers`]' one task. It must not
/// block: it runs between other deadlines.
pub(crate) trait Due: Send + Sync {
    fn due(self: Arc<Self>, now: Instant);
}

/// A scheduled deadline, for [`cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerKey(Instant, u64);

/// Deadlines for every lease and waiter of the process, kept by one task.
///
/// A task and a tokio sleep per lease would cost a spawn (waking a worker
/// thread) at every grant and an abort at every release: most leases are let
/// go long before their ttl, so they pay nothing here but a map insert and
/// removal. The task sleeps until the earliest deadline; it is woken only
/// when a new deadline is earlier than the one it sleeps for.
struct Timers {
    s: Mutex<TimerState>,
    wake: Notify,
}

struct TimerState {
    map: BTreeMap<(Instant, u64), Weak<dyn Due>>,
    next_id: u64,
    /// When the task will look next (None: it waits to be woken).
    armed: Option<Instant>,
}

static TIMERS: OnceLock<Arc<Timers>> = OnceLock::new();

fn timers() -> &'static Arc<Timers> {
    TIMERS.get_or_init(|| {
        let t = Arc::new(Timers { s: Mutex::new(TimerState { map: BTreeMap::new(), next_id: 0, armed: None }), wake: Notify::new() });
        spawn(t.clone().run());
        t
    })
}

/// Calls `what.due(now)` at `at` or soon after (the timer's 1 ms grain),
/// unless cancelled or dropped first.
pub(crate) fn schedule(at: Instant, what: Weak<dyn Due>) -> TimerKey {
    let t = timers();
    let mut s = t.s.lock();
    s.next_id += 1;
    let key = TimerKey(at, s.next_id);
    s.map.insert((at, key.1), what);
    if s.armed.is_none_or(|a| at < a) {
        s.armed = Some(at);
        drop(s);
        t.wake.notify_one();
    }
    key
}

/// Forgets a deadline; nothing happens if it already ran. The task stays
/// armed for it: waking once for nothing costs less than being woken for
/// the next lease's deadline, which is usually later.
pub(crate) fn cancel(key: TimerKey) {
    if let Some(t) = TIMERS.get() {
        t.s.lock().map.remove(&(key.0, key.1));
    }
}

impl Timers {
    async fn run(self: Arc<Self>) {
        loop {
            let now = Instant::now();
            let due: Vec<Weak<dyn Due>> = {
                let mut s = self.s.lock();
                let later = s.map.split_off(&(now, u64::MAX));
                std::mem::replace(&mut s.map, later).into_values().collect()
            };
            for w in due {
                if let Some(d) = w.upgrade() {
                    d.due(now);
                }
            }
            let next = {
                let mut s = self.s.lock();
                let first = s.map.first_key_value().map(|(k, _)| k.0);
                s.armed = first;
                first
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Mark(&'static str, Arc<Mutex<Vec<(&'static str, Instant)>>>);
    impl Due for Mark {
        fn due(self: Arc<Self>, now: Instant) {
            self.1.lock().push((self.0, now));
        }
    }

    #[test]
    fn an_earlier_deadline_wakes_the_timer_task_and_a_cancelled_one_never_runs() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mk = |name| Arc::new(Mark(name, seen.clone()));
        let (late, early, gone) = (mk("late"), mk("early"), mk("gone"));
        let t0 = Instant::now();
        schedule(t0 + Duration::from_millis(400), Arc::downgrade(&late) as Weak<dyn Due>);
        let k = schedule(t0 + Duration::from_millis(50), Arc::downgrade(&gone) as Weak<dyn Due>);
        cancel(k);
        schedule(t0 + Duration::from_millis(100), Arc::downgrade(&early) as Weak<dyn Due>);
        std::thread::sleep(Duration::from_millis(600));
        let seen = seen.lock().clone();
        let names: Vec<_> = seen.iter().map(|s| s.0).collect();
        assert_eq!(names, ["early", "late"]);
        assert!(seen[0].1 >= t0 + Duration::from_millis(100) && seen[0].1 < t0 + Duration::from_millis(350), "the early one ran on time");
        assert!(seen[1].1 >= t0 + Duration::from_millis(400));
    }
}

