//! Cancellable waits: the caller makes a [`TsCancel`], passes it to a call
//! that may wait, and fires it from another thread to end the wait. The
//! wait's future is then dropped, which undoes it in the core (a waiter
//! leaves the queue of a key).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures::future::{Either, select};
use futures::task::AtomicWaker;

use crate::error::{Failure, Res, quiet};

/// A cancel switch for calls that may wait.
pub struct TsCancel {
    fired: AtomicBool,
    waker: AtomicWaker,
}

/// A new, unfired cancel switch; free it with [`ts_cancel_free`].
#[unsafe(no_mangle)]
pub extern "C" fn ts_cancel_new() -> *mut TsCancel {
    quiet(std::ptr::null_mut(), || Box::into_raw(Box::new(TsCancel { fired: AtomicBool::new(false), waker: AtomicWaker::new() })))
}

/// Fires the switch: a call waiting with it ends with the code `cancelled`
/// (or with its own result, if that came first). Any thread; idempotent.
///
/// # Safety
/// `c` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_cancel_fire(c: *const TsCancel) {
    quiet((), || {
        if let Some(c) = unsafe { c.as_ref() } {
            c.fired.store(true, Ordering::Release);
            c.waker.wake();
        }
    })
}

/// Frees the switch, once no call uses it.
///
/// # Safety
/// `c` is null or live, and no call still waits with it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_cancel_free(c: *mut TsCancel) {
    quiet((), || {
        if !c.is_null() {
            drop(unsafe { Box::from_raw(c) });
        }
    })
}

/// Blocks on `fut` on the engine's runtime; when `cancel` fires first, drops
/// `fut` and fails with [`Failure::Cancelled`].
pub(crate) fn block_on<T>(cancel: *const TsCancel, fut: impl Future<Output = tinystore::Result<T>>) -> Res<T> {
    let Some(c) = (unsafe { cancel.as_ref() }) else {
        return tinystore::runtime::block_on(fut).map_err(Failure::from);
    };
    let fired = std::future::poll_fn(|cx| {
        c.waker.register(cx.waker());
        if c.fired.load(Ordering::Acquire) { Poll::Ready(()) } else { Poll::Pending }
    });
    let fut = std::pin::pin!(fut);
    let fired = std::pin::pin!(fired);
    match tinystore::runtime::block_on(select(fut, fired)) {
        Either::Left((r, _)) => r.map_err(Failure::from),
        Either::Right(((), _)) => Err(Failure::Cancelled),
    }
}
