//! Status codes and errors crossing the C ABI, and the wrapper every
//! `extern "C"` body runs in.

use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The call succeeded.
pub const TS_OK: i32 = 0;
/// The call failed: `*err` holds a [`TsError`].
pub const TS_ERR: i32 = 1;
/// The call goes on: its outcome comes later, through the completion
/// queue (see [`ts_publish_start`](crate::channels::ts_publish_start)).
pub const TS_PENDING: i32 = 2;

/// An error: the core's stable code (`timeout`, `invalid`, `limit`,
/// `closed`, `lost`, `owned`, `conflict`, `busy`, `sql`, `auth`, `io`,
/// `protocol`, `internal`, or this ABI's `cancelled`) and a message saying
/// what was wrong and what to do. Both NUL-terminated; free with
/// [`ts_error_free`].
#[repr(C)]
pub struct TsError {
    pub code: *mut c_char,
    pub message: *mut c_char,
}

/// Why a call failed, before it crosses the ABI.
pub(crate) enum Failure {
    /// An error of the engine, with its code.
    Core(tinystore::Error),
    /// The caller's [`TsCancel`](crate::TsCancel) fired while the call waited.
    Cancelled,
}

impl From<tinystore::Error> for Failure {
    fn from(e: tinystore::Error) -> Failure {
        Failure::Core(e)
    }
}

pub(crate) type Res<T> = Result<T, Failure>;

fn c_text(s: &str) -> *mut c_char {
    CString::new(s.replace('\0', " ")).expect("NULs were replaced").into_raw()
}

unsafe fn set_error(err: *mut *mut TsError, code: &str, message: &str) {
    if err.is_null() {
        return;
    }
    let e = Box::new(TsError { code: c_text(code), message: c_text(message) });
    unsafe { *err = Box::into_raw(e) };
}

/// Runs `f` as the body of an `extern "C"` function: its result becomes a
/// status and `*err`; a panic becomes the code `internal`.
pub(crate) fn call(err: *mut *mut TsError, f: impl FnOnce() -> Res<()>) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(f));
    let (code, message) = match outcome {
        Ok(Ok(())) => return TS_OK,
        Ok(Err(Failure::Core(e))) => (e.code().to_owned(), e.message().to_owned()),
        Ok(Err(Failure::Cancelled)) => ("cancelled".to_owned(), "the caller cancelled the call".to_owned()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            ("internal".to_owned(), format!("a bug in tinystore ({what}): please report it"))
        }
    };
    unsafe { set_error(err, &code, &message) };
    TS_ERR
}

/// Runs `f` as the body of an `extern "C"` function that cannot fail but for
/// a panic, which it swallows, giving `fallback`.
pub(crate) fn quiet<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Frees an error a call stored in `*err`. Null is fine.
///
/// # Safety
/// `err` is null or an error this library stored in a caller's `*err`, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_error_free(err: *mut TsError) {
    quiet((), || {
        if err.is_null() {
            return;
        }
        let e = unsafe { Box::from_raw(err) };
        for p in [e.code, e.message] {
            if !p.is_null() {
                drop(unsafe { CString::from_raw(p) });
            }
        }
    })
}
