//! The engine's own background runtime: timers (waits, `maxHold`, ttl),
//! subscription delivery for the Rust API, the server and the client.
//!
//! It starts lazily, at the first thing that needs it, so a process that
//! forks before opening a store forks no engine threads. Threads do not
//! survive `fork()`: open stores in the child, not before forking.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// True in a child forked after this process started the engine: its
/// threads did not survive the fork, so nothing of it may be used there.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::Release);
}

/// An error when this process is a child forked after its parent started
/// the engine: its stores, leases and subscriptions stayed in the parent.
pub(crate) fn check_not_forked() -> crate::base::error::Result<()> {
    if FORKED.load(Ordering::Acquire) {
        return Err(crate::base::error::Error::new(
            crate::base::error::ErrorKind::Closed,
            "this process was forked after its parent opened a store: the store, its leases and subscriptions stay with the parent (threads do not survive fork()); open stores in processes that did not inherit an open engine (multiprocessing's 'spawn' or 'forkserver', or open only in the children)",
        ));
    }
    Ok(())
}

/// The engine's runtime handle, started on first use (two worker threads).
pub fn handle() -> &'static Handle {
    RUNTIME
        .get_or_init(|| {
            // SAFETY: the handler only stores to an atomic, which is
            // async-signal-safe as fork's child handlers must be.
            unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("tinystore")
                .enable_all()
                .build()
                .expect("tinystore could not start its runtime threads")
        })
        .handle()
}

/// Runs `fut` in the background on the engine's runtime.
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(fut)
}

/// Blocks the calling thread until `fut` completes, with the engine's runtime
/// entered so timers work. Must not be called from inside an async task.
///
/// While `fut` waits on a connection's answer, this thread reads that
/// connection itself (see [`Lead`]) for a short while before it parks: the
/// kernel then wakes it directly when the answer comes, instead of waking a
/// runtime thread that would wake it in turn (on these machines each
/// wake-up of an idle core costs as much as a round trip).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let _guard = handle().enter();
    let signal = Arc::new(Signal { woken: AtomicBool::new(false), thread: std::thread::current() });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let outer = IN_BLOCK_ON.replace(true);
    let _restore = Restore(outer);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        if let Some(lead) = LEAD.take()
            && !signal.woken.load(Ordering::Acquire)
        {
            lead.lead(&|| signal.woken.load(Ordering::Acquire), LEAD_WINDOW);
        }
        while !signal.woken.swap(false, Ordering::AcqRel) {
            std::thread::park();
        }
    }
}

/// How long a blocked thread reads its connection before it parks.
const LEAD_WINDOW: Duration = Duration::from_millis(20);

struct Restore(bool);

impl Drop for Restore {
    fn drop(&mut self) {
        IN_BLOCK_ON.set(self.0);
        LEAD.take();
    }
}

struct Signal {
    woken: AtomicBool,
    thread: std::thread::Thread,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }
}

/// A connection a blocked thread may read while it waits.
pub(crate) trait Lead: Send + Sync {
    /// Reads and dispatches what comes until `done()` or `window` passed.
    fn lead(&self, done: &dyn Fn() -> bool, window: Duration);
}

thread_local! {
    static IN_BLOCK_ON: Cell<bool> = const { Cell::new(false) };
    static LEAD: RefCell<Option<Arc<dyn Lead>>> = const { RefCell::new(None) };
}

/// Called by a future about to return `Pending` for an answer on `conn`:
/// a [`block_on`] polling it will read the connection before parking.
pub(crate) fn want_lead(conn: impl FnOnce() -> Option<Arc<dyn Lead>>) {
    if IN_BLOCK_ON.get()
        && let Some(l) = conn()
    {
        LEAD.set(Some(l));
    }
}

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

/// Work run by whichever thread asks, one thread at a time: an ask while
/// another thread runs it makes that thread run it once more, so nothing
/// asked for is missed and no thread waits for another.
pub(crate) struct Turn(std::sync::atomic::AtomicU8);

const RUNNING: u8 = 1;
const NOTIFIED: u8 = 2;

impl Turn {
    pub(crate) const fn new() -> Turn {
        Turn(std::sync::atomic::AtomicU8::new(0))
    }

    /// Runs `f` now on this thread, unless another thread is in `f`, which
    /// then runs it again when done.
    pub(crate) fn run(&self, mut f: impl FnMut()) {
        if self.0.fetch_or(RUNNING | NOTIFIED, Ordering::AcqRel) & RUNNING != 0 {
            return;
        }
        loop {
            self.0.fetch_and(!NOTIFIED, Ordering::AcqRel);
            f();
            if self.0.compare_exchange(RUNNING, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
        }
    }
}

/// Something woken that would rather run on the thread that woke it, at the
/// end of what that thread is doing ([`gathering`]), than on another thread.
pub(crate) trait Gathered: Send + Sync {
    /// Set while it is in a thread's gathered list.
    fn listed(&self) -> &AtomicBool;
    /// Runs it (on the gathering thread).
    fn run_gathered(self: Arc<Self>);
}

thread_local! {
    /// Set while this thread gathers what it wakes ([`gathering`]).
    static GATHERED: RefCell<Option<Vec<Arc<dyn Gathered>>>> = const { RefCell::new(None) };
}

/// Puts `me` in this thread's gathered list when it gathers (true), else
/// gives it back to be woken another way.
pub(crate) fn gather(me: Arc<dyn Gathered>) -> Option<Arc<dyn Gathered>> {
    GATHERED.with_borrow_mut(|w| match w {
        Some(list) => {
            if !me.listed().swap(true, Ordering::AcqRel) {
                list.push(me);
            }
            None
        }
        None => Some(me),
    })
}

/// Runs `f`, gathering what it wakes into `into` (with what was there).
pub(crate) fn gathering<R>(into: &mut Vec<Arc<dyn Gathered>>, f: impl FnOnce() -> R) -> R {
    let outer = GATHERED.with_borrow_mut(|w| w.replace(std::mem::take(into)));
    let r = f();
    *into = GATHERED.with_borrow_mut(|w| std::mem::replace(w, outer)).unwrap_or_default();
    r
}

/// Runs, on this thread, what was gathered.
pub(crate) fn run_gathered(list: &mut Vec<Arc<dyn Gathered>>) {
    for g in list.drain(..) {
        g.listed().store(false, Ordering::Release);
        g.run_gathered();
    }
}

type LoopFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A future a language binding runs for its event loop: a call's answer
/// that settles a promise or an asyncio future when it comes.
///
/// It is polled first on the thread that starts it. Woken by a runtime
/// thread, a runtime task polls it, as [`spawn`] would. Woken on the event
/// loop's own thread while that thread reads its connection ([`on_loop`]),
/// it is polled right there: the answer read by the loop's thread settles
/// the call with no other thread woken, the way a client written in the
/// language itself would (node-redis, redis-py's asyncio client).
pub struct LoopTask {
    fut: Mutex<Option<LoopFuture>>,
    turn: Turn,
    listed: AtomicBool,
}

impl LoopTask {
    /// Starts `fut` by polling it on this thread now.
    pub fn start(fut: impl Future<Output = ()> + Send + 'static) -> Arc<LoopTask> {
        let t = Arc::new(LoopTask { fut: Mutex::new(Some(Box::pin(fut))), turn: Turn::new(), listed: AtomicBool::new(false) });
        t.run();
        t
    }

    /// Drops the future unfinished (a cancelled call); idempotent.
    pub fn cancel(&self) {
        let fut = self.fut.lock().take();
        drop(fut);
    }

    /// True once the future finished or was cancelled.
    pub fn is_done(&self) -> bool {
        self.fut.lock().is_none()
    }

    fn run(self: &Arc<Self>) {
        let _rt = handle().enter();
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        self.turn.run(|| {
            let mut slot = self.fut.lock();
            if let Some(f) = slot.as_mut()
                && f.as_mut().poll(&mut cx).is_ready()
            {
                *slot = None;
            }
        });
    }
}

impl Gathered for LoopTask {
    fn listed(&self) -> &AtomicBool {
        &self.listed
    }
    fn run_gathered(self: Arc<Self>) {
        self.run();
    }
}

impl Wake for LoopTask {
    fn wake(self: Arc<Self>) {
        if gather(self.clone()).is_some() {
            // Polled by a runtime thread: the waker's caller may hold locks
            // the future needs.
            spawn(async move { self.run() });
        }
    }
}

/// Runs `read` (the event loop's thread reading its connection), then polls
/// the [`LoopTask`]s it woke, on this thread.
pub fn on_loop<R>(read: impl FnOnce() -> R) -> R {
    let mut woken = Vec::new();
    let r = gathering(&mut woken, read);
    run_gathered(&mut woken);
    r
}
