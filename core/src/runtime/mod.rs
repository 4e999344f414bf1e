//! The engine's own background runtime: timers (waits, `maxHold`, ttl),
//! subscription delivery for the Rust API, the server and the client.
//!
//! It starts lazily, at the first thing that needs it, so a process that
//! forks before opening a store forks no engine threads. Threads do not
//! survive `fork()`: open stores in the child, not before forking.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

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
/// connection itself (see [`ReadWhileBlocked`]) for a short while before it parks: the
/// kernel then wakes it directly when the answer comes, instead of waking a
/// runtime thread that would wake it in turn (a wake-up of an idle core
/// costs about as much as a round trip: docs/performance.md, "Spinning").
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
        flush_held_until_blocked();
        if let Some(reader) = READ_WHILE_BLOCKED.take()
            && !signal.woken.load(Ordering::Acquire)
        {
            reader.read_until(&|| signal.woken.load(Ordering::Acquire), READ_WHILE_BLOCKED_WINDOW);
        }
        while !signal.woken.swap(false, Ordering::AcqRel) {
            std::thread::park();
        }
    }
}

/// How long a blocked thread reads its connection before it parks.
const READ_WHILE_BLOCKED_WINDOW: Duration = Duration::from_millis(20);

struct Restore(bool);

impl Drop for Restore {
    fn drop(&mut self) {
        flush_held_until_blocked();
        IN_BLOCK_ON.set(self.0);
        READ_WHILE_BLOCKED.take();
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
pub(crate) trait ReadWhileBlocked: Send + Sync {
    /// Reads and dispatches what comes until `done()` or `window` passed.
    fn read_until(&self, done: &dyn Fn() -> bool, window: Duration);
}

thread_local! {
    static IN_BLOCK_ON: Cell<bool> = const { Cell::new(false) };
    static HELD_UNTIL_BLOCKED: RefCell<Vec<Arc<dyn FlushWhenBlocked>>> = const { RefCell::new(Vec::new()) };
    static READ_WHILE_BLOCKED: RefCell<Option<Arc<dyn ReadWhileBlocked>>> = const { RefCell::new(None) };
}

/// Frames a thread wrote and holds until it blocks ([`hold_until_blocked`]).
pub(crate) trait FlushWhenBlocked: Send + Sync {
    /// Writes what this thread held back.
    fn flush_held(&self);
}

/// True when this thread runs [`block_on`]: a frame it writes may wait
/// until the future it runs yields or returns, and `what` is flushed then.
/// Publishes made inside one poll leave in one write that way (a burst is
/// one batch on the wire, not a lone frame and then the rest), and a lone
/// publish leaves before its caller waits for the answer.
pub(crate) fn hold_until_blocked<T: FlushWhenBlocked + 'static>(what: &Arc<T>) -> bool {
    if !IN_BLOCK_ON.get() {
        return false;
    }
    HELD_UNTIL_BLOCKED.with_borrow_mut(|held| {
        if !held.iter().any(|h| std::ptr::addr_eq(Arc::as_ptr(h), Arc::as_ptr(what))) {
            held.push(what.clone());
        }
    });
    true
}

fn flush_held_until_blocked() {
    HELD_UNTIL_BLOCKED.with_borrow_mut(|held| held.drain(..).for_each(|h| h.flush_held()));
}

/// Called by a future about to return `Pending` for an answer on `conn`:
/// a [`block_on`] polling it will read the connection before parking.
pub(crate) fn read_while_blocked(conn: impl FnOnce() -> Option<Arc<dyn ReadWhileBlocked>>) {
    if IN_BLOCK_ON.get()
        && let Some(l) = conn()
    {
        READ_WHILE_BLOCKED.set(Some(l));
    }
}

mod host_loop;
mod timers;

pub use self::host_loop::{LoopTask, on_loop};
pub(crate) use self::host_loop::{RunOnWaker, OneAtATime, defer_to_waker, collect_woken, run_woken};
pub(crate) use self::timers::{Due, TimerKey, cancel, schedule};
