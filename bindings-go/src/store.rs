//! Opening, connecting to and closing a store.

use std::ffi::{CString, c_char};
use std::time::Duration;

use tinystore::{ConnectOptions, Store};

use crate::args::text;
use crate::error::{TsError, call, quiet};

/// A store, owned by this process or connected to another's.
pub struct TsStore {
    pub(crate) store: Store,
}

/// Opens (creating it if needed) the store directory `dir` and owns it
/// (`Store::open`). Blocking I/O. Errors: `owned`, `io`, `sql`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_open(dir: *const u8, dir_len: usize, out: *mut *mut TsStore, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let store = Store::open(unsafe { text(dir, dir_len) }?)?;
        unsafe { *out = Box::into_raw(Box::new(TsStore { store })) };
        Ok(())
    })
}

/// Connects to a store owned by another process at `address`
/// (`unix:PATH`, `tcp:HOST:PORT`, `tls:HOST:PORT`), as
/// `Store::connect_with`. Each option not given keeps the core's default:
/// `token` (when `has_token` is not 0) instead of `TINYSTORE_TOKEN`,
/// `ca_file` (when `has_ca_file` is not 0) instead of `TINYSTORE_CA`,
/// `request_timeout_ms` (when not 0) instead of 10 s. Errors: `invalid`, `io`, `auth`, `protocol`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_connect(
    address: *const u8,
    address_len: usize,
    token: *const u8,
    token_len: usize,
    has_token: u8,
    ca_file: *const u8,
    ca_file_len: usize,
    has_ca_file: u8,
    request_timeout_ms: u64,
    out: *mut *mut TsStore,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let mut opts = ConnectOptions::new();
        if has_token != 0 {
            opts = opts.token(unsafe { text(token, token_len) }?);
        }
        if has_ca_file != 0 {
            opts = opts.ca_file(unsafe { text(ca_file, ca_file_len) }?);
        }
        if request_timeout_ms != 0 {
            opts = opts.request_timeout(Duration::from_millis(request_timeout_ms));
        }
        let store = Store::connect_with(unsafe { text(address, address_len) }?, opts)?;
        unsafe { *out = Box::into_raw(Box::new(TsStore { store })) };
        Ok(())
    })
}

/// Serves the store on one more `address` as well (`tcp:HOST:PORT` needs
/// `<dir>/tokens`), as `Store::serve`. Errors: `invalid` (the address, or a
/// connected store: only the owner serves), `io`, `auth`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_serve(s: *const TsStore, address: *const u8, address_len: usize, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        s.store.serve(unsafe { text(address, address_len) }?)?;
        Ok(())
    })
}

/// Closes the store: subscriptions end, held keys go (their holders see
/// their leases lost), waiters get `closed`. Over a connection, publishes
/// already sent get their answers first (up to 2 s); calls made meanwhile
/// fail with `closed`. Idempotent; the handle stays valid until
/// [`ts_store_free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_close(s: *const TsStore) {
    quiet((), || {
        if let Some(s) = unsafe { s.as_ref() } {
            tinystore::runtime::block_on(s.store.close_settled());
        }
    })
}

/// Frees the handle. The store closes once nothing else holds it (locks,
/// subscriptions and databases opened from it each hold it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_free(s: *mut TsStore) {
    quiet((), || {
        if !s.is_null() {
            drop(unsafe { Box::from_raw(s) });
        }
    })
}

/// The store's epoch: the high 64 bits of every fence it gives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_epoch(s: *const TsStore) -> u64 {
    quiet(0, || unsafe { s.as_ref() }.map_or(0, |s| s.store.epoch()))
}

/// What the store holds now, as JSON (the core's `StoreStatus`: its
/// directory, owner pid, epoch, subscriptions, branches, held keys with
/// their fences and waiters). `*out` is NUL-terminated; free it with
/// [`ts_string_free`]. Errors: `closed` (this handle's store was closed),
/// `io` or `timeout` (a connected store's owner could not be asked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_status(s: *const TsStore, out: *mut *mut c_char, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        // An owned store still has its tables after close: without this, its
        // status would describe a store that is gone.
        if s.store.is_closed() {
            return Err(tinystore::Error::new(tinystore::ErrorKind::Closed, "the store is closed: open it again to ask its status").into());
        }
        let json = serde_json::to_string(&s.store.status_json()?).map_err(tinystore::Error::from)?;
        unsafe { *out = CString::new(json).expect("JSON has no NUL").into_raw() };
        Ok(())
    })
}

/// Frees a string the library gave. Null is fine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_string_free(p: *mut c_char) {
    quiet((), || {
        if !p.is_null() {
            drop(unsafe { CString::from_raw(p) });
        }
    })
}
