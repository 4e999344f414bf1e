//! The completion queue: what the library has to tell its caller later (a
//! subscription has something to read, a lease was lost) is a token pushed
//! here, and one caller thread drains it with [`ts_completions_wait`]. Nothing calls
//! into the caller's runtime, and no thread waits per subscription or lease.

use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use crate::error::quiet;

struct CompletionQueue {
    ready: Mutex<Vec<u64>>,
    cv: Condvar,
}

static QUEUE: CompletionQueue = CompletionQueue { ready: Mutex::new(Vec::new()), cv: Condvar::new() };

thread_local! {
    /// Set while this thread runs a call whose caller takes the queue itself
    /// right after ([`deferring`]).
    static DEFER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread pushed a token while [`DEFER`] was set.
    static DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Pushes `token` on the completion queue. Only a push onto an empty queue
/// wakes the drain thread: one that finds tokens there was woken for the
/// first of them and takes them all (a notify is a futex syscall even with
/// nobody waiting; per answer of a pipelined burst it was a third of the
/// reading thread's time).
pub(crate) fn push(token: u64) {
    let was_empty = {
        let mut ready = QUEUE.ready.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = ready.is_empty();
        ready.push(token);
        was_empty
    };
    if DEFER.get() {
        DEFERRED.set(true);
    } else if was_empty {
        QUEUE.cv.notify_one();
    }
}

/// Signals the tokens this thread pushed within [`deferring`], for a call
/// whose caller will not take them itself (a publish left pending).
pub(crate) fn signal_deferred() {
    if DEFERRED.replace(false) {
        QUEUE.cv.notify_one();
    }
}

/// Runs `f` with the tokens this thread pushes left unsignalled: the caller
/// takes them with [`ts_completions_try`] as soon as the call returns. A publish that
/// reads its own message along with its answer (one subscriber in the same
/// process) hands it to the subscription's goroutine from the publishing
/// goroutine, without waking the thread that waits in [`ts_completions_wait`].
pub(crate) fn deferring<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFER.set(false);
        }
    }
    DEFER.set(true);
    DEFERRED.set(false);
    let _reset = Reset;
    f()
}

/// Moves up to `max` tokens to `out` without waiting; returns how many.
/// Called after a call made with [`deferring`] (publish).
///
/// # Safety
/// `out` is null or points to room for `max` tokens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_completions_try(out: *mut u64, max: usize) -> usize {
    quiet(0, || {
        if out.is_null() || max == 0 {
            return 0;
        }
        let mut ready = QUEUE.ready.lock().unwrap_or_else(|e| e.into_inner());
        let n = unsafe { take(&mut ready, out, max) };
        // What is left may have been pushed by others while a deferred
        // token kept the queue from being empty: they woke nobody.
        if !ready.is_empty() {
            drop(ready);
            QUEUE.cv.notify_one();
        }
        n
    })
}

/// Moves up to `max` tokens from `ready` to `out`, oldest first.
///
/// # Safety
/// `out` points to room for `max` tokens.
unsafe fn take(ready: &mut Vec<u64>, out: *mut u64, max: usize) -> usize {
    let n = ready.len().min(max);
    let out = unsafe { std::slice::from_raw_parts_mut(out, n) };
    out.copy_from_slice(&ready[..n]);
    ready.drain(..n);
    n
}

/// A waker that pushes its token on the completion queue.
pub(crate) fn waker(token: u64) -> Waker {
    struct Pusher(u64);
    impl Wake for Pusher {
        fn wake(self: Arc<Self>) {
            push(self.0);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            push(self.0);
        }
    }
    Waker::from(Arc::new(Pusher(token)))
}

/// Waits until tokens are on the completion queue, then moves up to `max` of
/// them to `out` (oldest first) and returns how many. Waits at most
/// `timeout_ms` milliseconds (forever when negative); returns 0 on timeout.
/// A token may come more than once: the caller treats each as "look again".
///
/// # Safety
/// `out` is null or points to room for `max` tokens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_completions_wait(out: *mut u64, max: usize, timeout_ms: i64) -> usize {
    quiet(0, || {
        if out.is_null() || max == 0 {
            return 0;
        }
        let deadline = (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        let mut ready = QUEUE.ready.lock().unwrap_or_else(|e| e.into_inner());
        while ready.is_empty() {
            ready = match deadline {
                None => QUEUE.cv.wait(ready).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return 0;
                    }
                    QUEUE.cv.wait_timeout(ready, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
        unsafe { take(&mut ready, out, max) }
    })
}
