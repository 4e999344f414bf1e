//! Work handed to the thread that woke it: a connection's publishes
//! forwarded at the end of what it read, and a language's event loop
//! settling its calls on its own thread ([`LoopTask`], [`on_loop`]).

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use parking_lot::Mutex;

use super::{handle, spawn};

/// Work run by whichever thread asks, one thread at a time: an ask while
/// another thread runs it makes that thread run it once more, so nothing
/// asked for is missed and no thread waits for another.
pub(crate) struct OneAtATime(std::sync::atomic::AtomicU8);

const RUNNING: u8 = 1;
const NOTIFIED: u8 = 2;

impl OneAtATime {
    pub(crate) const fn new() -> OneAtATime {
        OneAtATime(std::sync::atomic::AtomicU8::new(0))
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
/// end of what that thread is doing ([`collect_woken`]), than on another thread.
pub(crate) trait RunOnWaker: Send + Sync {
    /// Set while it is in the list of a thread running what it wakes.
    fn listed(&self) -> &AtomicBool;
    /// Runs it (on the thread that woke it).
    fn run_on_waker(self: Arc<Self>);
}

thread_local! {
    /// Set while this thread keeps what it wakes ([`collect_woken`]).
    static WOKEN_HERE: RefCell<Option<Vec<Arc<dyn RunOnWaker>>>> = const { RefCell::new(None) };
}

/// Puts `me` in the list of what this thread wakes, when it keeps one
/// (then `None`); else gives it back to be woken another way.
pub(crate) fn defer_to_waker(me: Arc<dyn RunOnWaker>) -> Option<Arc<dyn RunOnWaker>> {
    WOKEN_HERE.with_borrow_mut(|w| match w {
        Some(list) => {
            if !me.listed().swap(true, Ordering::AcqRel) {
                list.push(me);
            }
            None
        }
        None => Some(me),
    })
}

/// Runs `f`, keeping what it wakes in `into` (with what was there).
pub(crate) fn collect_woken<R>(into: &mut Vec<Arc<dyn RunOnWaker>>, f: impl FnOnce() -> R) -> R {
    let outer = WOKEN_HERE.with_borrow_mut(|w| w.replace(std::mem::take(into)));
    let r = f();
    *into = WOKEN_HERE.with_borrow_mut(|w| std::mem::replace(w, outer)).unwrap_or_default();
    r
}

/// Runs, on this thread, what it woke ([`collect_woken`]).
pub(crate) fn run_woken(list: &mut Vec<Arc<dyn RunOnWaker>>) {
    for g in list.drain(..) {
        g.listed().store(false, Ordering::Release);
        g.run_on_waker();
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
    runs: OneAtATime,
    listed: AtomicBool,
}

impl LoopTask {
    /// Starts `fut` by polling it on this thread now.
    pub fn start(fut: impl Future<Output = ()> + Send + 'static) -> Arc<LoopTask> {
        let t = Arc::new(LoopTask { fut: Mutex::new(Some(Box::pin(fut))), runs: OneAtATime::new(), listed: AtomicBool::new(false) });
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
        self.runs.run(|| {
            let mut slot = self.fut.lock();
            if let Some(f) = slot.as_mut()
                && f.as_mut().poll(&mut cx).is_ready()
            {
                *slot = None;
            }
        });
    }
}

impl RunOnWaker for LoopTask {
    fn listed(&self) -> &AtomicBool {
        &self.listed
    }
    fn run_on_waker(self: Arc<Self>) {
        self.run();
    }
}

impl Wake for LoopTask {
    fn wake(self: Arc<Self>) {
        if defer_to_waker(self.clone()).is_some() {
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
    let r = collect_woken(&mut woken, read);
    run_woken(&mut woken);
    r
}
