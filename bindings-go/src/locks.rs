//! Locks and semaphores: holding a key, its lease and fence.

use tinystore::RawLock;
use tinystore::limits::{duration_from_nanos, semaphore_limit};
use tinystore::locks::{HeldLease, Holder, Kind, LockHandle, LockOptions, RawLease};

use crate::args::{TsValue, Values, text};
use crate::cancel::{TsCancel, block_on};
use crate::error::{Res, TsError, call, quiet};
use crate::completions;
use crate::store::TsStore;

/// A fence: the store's epoch in `hi`, a count in `lo`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TsFence {
    pub hi: u64,
    pub lo: u64,
}

/// What a lock or semaphore handle is opened with. An option whose `has_`
/// flag is 0 takes the core's default (ttl 30 s, wait 10 s, no maxHold).
/// Durations in nanoseconds; the core refuses a negative one.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TsLockOptions {
    pub has_ttl: u8,
    pub ttl_ns: i64,
    pub has_max_hold: u8,
    pub max_hold_ns: i64,
    pub has_wait: u8,
    pub wait_ns: i64,
}

/// A lock or semaphore handle: the core's [`LockHandle`], declared when
/// opened.
pub struct TsLock {
    handle: LockHandle,
}

impl TsLock {
    fn raw(&self) -> &RawLock {
        self.handle.declared().expect("declared when the handle was opened")
    }
}

/// A lease (or a semaphore's permit), held until [`ts_lease_end`]: its
/// state and end are the core's [`HeldLease`].
pub struct TsLease {
    held: HeldLease,
}


/// Opens the lock `name` (`semaphore` 0) or the semaphore `name` of `limit`
/// permits (`semaphore` 1; Go's int, which the core checks is 1 to
/// 4294967295), checking the name and options as the core's builders do.
/// Errors: `invalid` (name, a negative duration, ttl outside 1 s to 1 h, a
/// zero wait or maxHold, a limit out of range), `conflict` (the name is of
/// another kind or limit), `closed`.
///
/// # Safety
/// `s` is live; `(name, name_len)` readable; `opts` null or readable; `out` and
/// `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lock_open(
    s: *const TsStore,
    name: *const u8,
    name_len: usize,
    semaphore: u8,
    limit: i64,
    opts: *const TsLockOptions,
    out: *mut *mut TsLock,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let store = &unsafe { &*s }.store;
        let name = unsafe { text(name, name_len) }?;
        let o = unsafe { opts.as_ref() }.copied().unwrap_or_default();
        let mut opts = LockOptions::default();
        if o.has_ttl != 0 {
            opts.ttl = duration_from_nanos("ttl", o.ttl_ns)?;
        }
        if o.has_max_hold != 0 {
            opts.max_hold = Some(duration_from_nanos("maxHold", o.max_hold_ns)?);
        }
        if o.has_wait != 0 {
            opts.wait = duration_from_nanos("wait", o.wait_ns)?;
        }
        let kind = if semaphore != 0 { Kind::Semaphore { limit: semaphore_limit(limit as f64, limit)? } } else { Kind::Lock };
        // The core's handle checks the name, limit and options; Go's open
        // then waits for the declare (over a connection, one round trip), so
        // a conflict is OpenLock's error.
        let handle = LockHandle::new(store, name, kind, opts)?;
        handle.get_blocking()?;
        unsafe { *out = Box::into_raw(Box::new(TsLock { handle })) };
        Ok(())
    })
}

/// Frees a lock handle (leases taken through it stay held until released).
///
/// # Safety
/// `l` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lock_free(l: *mut TsLock) {
    quiet((), || {
        if !l.is_null() {
            drop(unsafe { Box::from_raw(l) });
        }
    })
}

/// A holder id no other call of this process got: one per logical holder.
/// A hold of a key its holder already holds fails at once (LOCK-08).
#[unsafe(no_mangle)]
pub extern "C" fn ts_holder_unique() -> u64 {
    quiet(0, || Holder::unique().0)
}

unsafe fn one_key(key: *const TsValue, buf: *const u8, buf_len: usize) -> Res<tinystore::Key> {
    let mut keys = unsafe { Values::new(key, 1, buf, buf_len) }.keys()?;
    Ok(keys.pop().expect("one key"))
}

unsafe fn give(lease: RawLease, lost_token: u64, out: *mut *mut TsLease, fence: *mut TsFence) {
    if lost_token != 0 {
        lease.on_lost(move || completions::push(lost_token));
    }
    let (hi, lo) = lease.fence().map_or((0, 0), |f| f.halves());
    unsafe {
        if !fence.is_null() {
            *fence = TsFence { hi, lo };
        }
        *out = Box::into_raw(Box::new(TsLease { held: HeldLease::new(lease) }));
    }
}

/// Takes `key` for `holder`, waiting up to the handle's `wait` in line
/// (LOCK-03). On success `*out` is the lease and `*fence` its fence (zero
/// for a permit); when the lease is lost (maxHold, ttl, the store closed),
/// `lost_token` (unless 0) is pushed on the completion queue. Errors:
/// `timeout` (nothing was taken), `conflict` (this holder already holds or
/// waits for the key), `invalid` (key), `closed`, `cancelled` (the wait was
/// left; nothing is held).
///
/// # Safety
/// `l` and `cancel` (or null) are live; `key` points to one readable value whose
/// text lies in the readable `(buf, buf_len)`; `out` and `err` writable, `fence` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lock_hold(
    l: *const TsLock,
    key: *const TsValue,
    buf: *const u8,
    buf_len: usize,
    holder: u64,
    lost_token: u64,
    cancel: *const TsCancel,
    out: *mut *mut TsLease,
    fence: *mut TsFence,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let l = unsafe { &*l };
        let key = unsafe { one_key(key, buf, buf_len) }?;
        let o = l.handle.options();
        let lease = block_on(cancel, l.raw().acquire(key, Holder(holder), o.terms(), o.wait))?;
        unsafe { give(lease, lost_token, out, fence) };
        Ok(())
    })
}

/// Takes `key` for `holder` if it is free now, never waiting in line: `*out`
/// is the lease, or null when the key is held. Over a connection it waits
/// for the owner's answer, which `cancel` (or null) ends with `cancelled`
/// (nothing is held then). Otherwise as [`ts_lock_hold`].
///
/// # Safety
/// As [`ts_lock_hold`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lock_try_hold(
    l: *const TsLock,
    key: *const TsValue,
    buf: *const u8,
    buf_len: usize,
    holder: u64,
    lost_token: u64,
    cancel: *const TsCancel,
    out: *mut *mut TsLease,
    fence: *mut TsFence,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let l = unsafe { &*l };
        let key = unsafe { one_key(key, buf, buf_len) }?;
        unsafe { *out = std::ptr::null_mut() };
        if let Some(lease) = block_on(cancel, l.raw().try_acquire(key, Holder(holder), l.handle.options().terms()))? {
            unsafe { give(lease, lost_token, out, fence) };
        }
        Ok(())
    })
}

/// 1 once the lease was lost (maxHold, ttl, the store closed).
///
/// # Safety
/// `lease` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lease_is_lost(lease: *const TsLease) -> u8 {
    quiet(0, || unsafe { lease.as_ref() }.is_some_and(|l| l.held.is_lost()) as u8)
}

/// Ends the hold and frees the lease: the error its function's caller gets
/// besides the function's own. Errors with `lost` when the lease had been
/// lost while the function ran and `body_failed` is 0 (the function
/// returned no error); when it is 1 the function's error wins and this
/// succeeds (LOCK-04, the core's rule).
///
/// # Safety
/// `lease` is null or live; it is freed by this call, whatever its result.
/// `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lease_end(lease: *mut TsLease, body_failed: u8, err: *mut *mut TsError) -> i32 {
    call(err, || {
        if lease.is_null() {
            return Ok(());
        }
        let lease = unsafe { Box::from_raw(lease) };
        lease.held.end(body_failed != 0)?;
        Ok(())
    })
}

/// Lets the key go and frees the lease: [`ts_lease_end`] of a function that
/// returned no error. Errors with `lost` when the lease had been lost: a
/// release never pretends a lost lease was held (LOCK-04).
///
/// # Safety
/// As [`ts_lease_end`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_lease_release(lease: *mut TsLease, err: *mut *mut TsError) -> i32 {
    unsafe { ts_lease_end(lease, 0, err) }
}
