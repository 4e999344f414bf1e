//! Promises settled straight on the JavaScript thread.
//!
//! napi-rs's deferred makes a threadsafe function per promise and settles
//! through it, even from the JavaScript thread itself: a handle made and
//! closed per call, and an extra turn of the event loop (an eventfd write,
//! a poll, a read) per answer. Here a promise is settled where its call
//! completes: on the JavaScript thread (its answer read by this thread's
//! loop, see `uvread`) at once, inside a callback scope so its reactions
//! run before the loop goes on; from an engine thread, through one libuv
//! async handle per thread, which keeps the event loop alive while any
//! promise is outstanding, as napi-rs's does.

use std::cell::RefCell;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use napi::bindgen_prelude::ToNapiValue;
use napi::sys;

/// Makes the settled value (or the error) on the JavaScript thread.
type Job = Box<dyn FnOnce(sys::napi_env) -> Result<sys::napi_value, napi::Error> + Send>;

unsafe extern "C" {
    fn uv_async_init(lp: *mut c_void, handle: *mut c_void, cb: extern "C" fn(*mut c_void)) -> i32;
    fn uv_async_send(handle: *mut c_void) -> i32;
    fn uv_close(handle: *mut c_void, cb: extern "C" fn(*mut c_void));
    fn uv_ref(handle: *mut c_void);
    fn uv_unref(handle: *mut c_void);
}

/// Room for a `uv_async_t` (128 bytes on 64-bit Linux); `data` comes first.
const HANDLE_WORDS: usize = 64;

/// The part engine threads reach: the queue and the async handle.
pub struct Remote {
    js: ThreadId,
    /// `None` once the environment is torn down: settles are dropped.
    queue: Mutex<Option<Vec<(Deferred, Job)>>>,
    handle: Handle,
}

#[derive(Clone, Copy)]
struct Handle(*mut c_void);
// SAFETY: uv_async_send is the one libuv call that is safe from any
// thread; everything else on the handle happens on the JavaScript thread.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

#[derive(Clone, Copy)]
struct Deferred(sys::napi_deferred);
// SAFETY: only used (settled) on the JavaScript thread.
unsafe impl Send for Deferred {}

/// This thread's settler (one per JavaScript thread, made at its first promise).
struct Local {
    env: sys::napi_env,
    remote: Arc<Remote>,
    /// Promises made and not settled yet; the handle is referenced while > 0.
    outstanding: std::cell::Cell<usize>,
    resource: sys::napi_ref,
    context: sys::napi_async_context,
}

thread_local! {
    static LOCAL: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

fn local(env: sys::napi_env) -> napi::Result<Rc<Local>> {
    if let Some(l) = LOCAL.with_borrow(|l| l.clone()) {
        return Ok(l);
    }
    let mut lp = std::ptr::null_mut();
    check(unsafe { sys::napi_get_uv_event_loop(env, &mut lp) })?;
    let handle = Box::into_raw(Box::new([0u64; HANDLE_WORDS])).cast::<c_void>();
    // SAFETY: zeroed room for a uv_async_t on this loop's thread.
    if unsafe { uv_async_init(lp.cast(), handle, on_async) } != 0 {
        unsafe { drop(Box::from_raw(handle.cast::<[u64; HANDLE_WORDS]>())) };
        return Err(napi::Error::from_reason("could not make the event loop's async handle"));
    }
    unsafe { uv_unref(handle) };
    let remote = Arc::new(Remote { js: std::thread::current().id(), queue: Mutex::new(Some(Vec::new())), handle: Handle(handle) });
    let (mut obj, mut name, mut resource, mut context) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    unsafe {
        check(sys::napi_create_object(env, &mut obj))?;
        check(sys::napi_create_reference(env, obj, 1, &mut resource))?;
        check(sys::napi_create_string_utf8(env, c"tinystore".as_ptr(), 9, &mut name))?;
        check(sys::napi_async_init(env, obj, name, &mut context))?;
    }
    let l = Rc::new(Local { env, remote, outstanding: std::cell::Cell::new(0), resource, context });
    LOCAL.with_borrow_mut(|s| *s = Some(l.clone()));
    unsafe { check(sys::napi_add_env_cleanup_hook(env, Some(cleanup), std::ptr::null_mut()))? };
    Ok(l)
}

fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok { Ok(()) } else { Err(napi::Error::from_reason(format!("a napi call failed with status {status}"))) }
}

/// A new promise and what settles it (from any thread).
pub fn promise(env: sys::napi_env) -> napi::Result<(Settle, sys::napi_value)> {
    let l = local(env)?;
    let (mut deferred, mut promise) = (std::ptr::null_mut(), std::ptr::null_mut());
    check(unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) })?;
    let n = l.outstanding.get();
    l.outstanding.set(n + 1);
    if n == 0 {
        unsafe { uv_ref(l.remote.handle.0) };
    }
    Ok((Settle { deferred: Deferred(deferred), remote: l.remote.clone() }, promise))
}

/// Settles one promise, once.
pub struct Settle {
    deferred: Deferred,
    remote: Arc<Remote>,
}

impl Settle {
    /// Resolves with `v`, or rejects with the error.
    pub fn done<T: ToNapiValue + Send + 'static>(self, r: napi::Result<T>) {
        let job: Job = Box::new(move |env| match r {
            Ok(v) => unsafe { T::to_napi_value(env, v) },
            Err(e) => Err(e),
        });
        if std::thread::current().id() == self.remote.js
            && let Some(l) = LOCAL.with_borrow(|l| l.clone())
        {
            // This thread is in a call from JavaScript or in one of our
            // callbacks, which open the scopes around it.
            settle(&l, self.deferred, job);
            return;
        }
        let mut q = self.remote.queue.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = q.as_mut() {
            q.push((self.deferred, job));
            unsafe { uv_async_send(self.remote.handle.0) };
        }
    }
}

fn settle(l: &Local, d: Deferred, job: Job) {
    let env = l.env;
    unsafe {
        let _ = match job(env) {
            Ok(v) => sys::napi_resolve_deferred(env, d.0, v),
            Err(e) => match ToNapiValue::to_napi_value(env, e) {
                Ok(err) => sys::napi_reject_deferred(env, d.0, err),
                Err(_) => sys::Status::napi_generic_failure,
            },
        };
    }
    let n = l.outstanding.get() - 1;
    l.outstanding.set(n);
    if n == 0 {
        unsafe { uv_unref(l.remote.handle.0) };
    }
}

/// Runs `f` from a libuv callback of this thread with a handle scope and a
/// callback scope open: the promises it settles have their reactions (and
/// `process.nextTick`s) run when it returns, as after any Node callback.
pub fn in_scope<R>(f: impl FnOnce() -> R) -> R {
    let Some(l) = LOCAL.with_borrow(|l| l.clone()) else { return f() };
    let env = l.env;
    let (mut hs, mut cs, mut resource) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    unsafe {
        sys::napi_open_handle_scope(env, &mut hs);
        sys::napi_get_reference_value(env, l.resource, &mut resource);
        sys::napi_open_callback_scope(env, resource, l.context, &mut cs);
    }
    let r = f();
    unsafe {
        sys::napi_close_callback_scope(env, cs);
        sys::napi_close_handle_scope(env, hs);
    }
    r
}

extern "C" fn on_async(_handle: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        let Some(l) = LOCAL.with_borrow(|l| l.clone()) else { return };
        let jobs = {
            let mut q = l.remote.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.as_mut().map(std::mem::take).unwrap_or_default()
        };
        if jobs.is_empty() {
            return;
        }
        in_scope(|| {
            for (d, job) in jobs {
                settle(&l, d, job);
            }
        });
    });
}

unsafe extern "C" fn cleanup(_: *mut c_void) {
    if let Some(l) = LOCAL.with_borrow_mut(|l| l.take()) {
        l.remote.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        unsafe { uv_close(l.remote.handle.0, freed) };
    }
}

extern "C" fn freed(handle: *mut c_void) {
    // SAFETY: made in `local` from a Box of words; libuv is done with it.
    unsafe { drop(Box::from_raw(handle.cast::<[u64; HANDLE_WORDS]>())) };
}
