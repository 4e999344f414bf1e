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
///
/// # Safety
/// `(dir, dir_len)` readable; `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_open(dir: *const u8, dir_len: usize, out: *mut *mut TsStore, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let store = Store::open(unsafe { text(dir, dir_len) }?)?;
        unsafe { *out = Box::into_raw(Box::new(TsStore { store })) };
        Ok(())
    })
}

/// The options of [`ts_store_connect`]. Each option not given keeps the
/// core's default.
#[repr(C)]
pub struct TsConnectOptions {
    /// The token (when `has_token` is not 0) instead of `TINYSTORE_TOKEN`.
    pub token: *const u8,
    /// Its length in bytes.
    pub token_len: usize,
    /// 1 when `token` is given.
    pub has_token: u8,
    /// The CA's PEM file (when `has_ca_file` is not 0) instead of `TINYSTORE_CA`.
    pub ca_file: *const u8,
    /// Its length in bytes.
    pub ca_file_len: usize,
    /// 1 when `ca_file` is given.
    pub has_ca_file: u8,
    /// How long a request may go unanswered, in milliseconds; 0 keeps 10 s.
    pub request_timeout_ms: u64,
    /// etcd's user (when `has_etcd_user` is not 0) instead of `TINYSTORE_ETCD_USER`.
    pub etcd_user: *const u8,
    /// Its length in bytes.
    pub etcd_user_len: usize,
    /// 1 when `etcd_user` is given.
    pub has_etcd_user: u8,
    /// Its password (when `has_etcd_password` is not 0) instead of `TINYSTORE_ETCD_PASSWORD`.
    pub etcd_password: *const u8,
    /// Its length in bytes.
    pub etcd_password_len: usize,
    /// 1 when `etcd_password` is given.
    pub has_etcd_password: u8,
    /// The client certificate's PEM file (when `has_etcd_cert` is not 0) instead of `TINYSTORE_ETCD_CERT`.
    pub etcd_cert: *const u8,
    /// Its length in bytes.
    pub etcd_cert_len: usize,
    /// 1 when `etcd_cert` is given.
    pub has_etcd_cert: u8,
    /// Its private key's PEM file (when `has_etcd_key` is not 0) instead of `TINYSTORE_ETCD_KEY`.
    pub etcd_key: *const u8,
    /// Its length in bytes.
    pub etcd_key_len: usize,
    /// 1 when `etcd_key` is given.
    pub has_etcd_key: u8,
    /// NATS's user (when `has_nats_user` is not 0) instead of `TINYSTORE_NATS_USER`.
    pub nats_user: *const u8,
    /// Its length in bytes.
    pub nats_user_len: usize,
    /// 1 when `nats_user` is given.
    pub has_nats_user: u8,
    /// Its password (when `has_nats_password` is not 0) instead of `TINYSTORE_NATS_PASSWORD`.
    pub nats_password: *const u8,
    /// Its length in bytes.
    pub nats_password_len: usize,
    /// 1 when `nats_password` is given.
    pub has_nats_password: u8,
    /// NATS's token (when `has_nats_token` is not 0) instead of `TINYSTORE_NATS_TOKEN`.
    pub nats_token: *const u8,
    /// Its length in bytes.
    pub nats_token_len: usize,
    /// 1 when `nats_token` is given.
    pub has_nats_token: u8,
    /// A NATS credentials file (when `has_nats_credentials` is not 0) instead of `TINYSTORE_NATS_CREDS`.
    pub nats_credentials: *const u8,
    /// Its length in bytes.
    pub nats_credentials_len: usize,
    /// 1 when `nats_credentials` is given.
    pub has_nats_credentials: u8,
    /// For `tls://` NATS servers, the client certificate's PEM file (when `has_nats_cert` is not 0) instead of `TINYSTORE_NATS_CERT`.
    pub nats_cert: *const u8,
    /// Its length in bytes.
    pub nats_cert_len: usize,
    /// 1 when `nats_cert` is given.
    pub has_nats_cert: u8,
    /// Its private key's PEM file (when `has_nats_key` is not 0) instead of `TINYSTORE_NATS_KEY`.
    pub nats_key: *const u8,
    /// Its length in bytes.
    pub nats_key_len: usize,
    /// 1 when `nats_key` is given.
    pub has_nats_key: u8,
}

/// Connects to a store owned by another process at `address`
/// (`unix:PATH`, `tcp:HOST:PORT`, `tls:HOST:PORT`, `etcd://`, `etcds://`),
/// as `Store::connect_with`, with the options `opts` (null: every default).
/// Errors: `invalid` (also half of the etcd or NATS user and password, or
/// of a certificate and key), `io`, `auth`, `protocol`, `unavailable`.
///
/// # Safety
/// `(address, address_len)` readable; `opts` null or readable, with each of
/// its strings readable where given; `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_connect(
    address: *const u8,
    address_len: usize,
    opts: *const TsConnectOptions,
    out: *mut *mut TsStore,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let mut options = ConnectOptions::new();
        if let Some(o) = unsafe { opts.as_ref() } {
            if o.has_token != 0 {
                options = options.token(unsafe { text(o.token, o.token_len) }?);
            }
            if o.has_ca_file != 0 {
                options = options.ca_file(unsafe { text(o.ca_file, o.ca_file_len) }?);
            }
            if o.request_timeout_ms != 0 {
                options = options.request_timeout(Duration::from_millis(o.request_timeout_ms));
            }
            let given = |has: u8, p: *const u8, n: usize| -> crate::error::Res<Option<String>> {
                if has == 0 { Ok(None) } else { unsafe { text(p, n) }.map(|t| Some(t.to_owned())) }
            };
            // The core refuses half a pair, naming the missing one.
            options = options
                .etcd_user_parts(given(o.has_etcd_user, o.etcd_user, o.etcd_user_len)?, given(o.has_etcd_password, o.etcd_password, o.etcd_password_len)?)
                .etcd_identity_parts(
                    given(o.has_etcd_cert, o.etcd_cert, o.etcd_cert_len)?.map(Into::into),
                    given(o.has_etcd_key, o.etcd_key, o.etcd_key_len)?.map(Into::into),
                );
            if let Some(t) = given(o.has_nats_token, o.nats_token, o.nats_token_len)? {
                options = options.nats_token(t);
            }
            if let Some(f) = given(o.has_nats_credentials, o.nats_credentials, o.nats_credentials_len)? {
                options = options.nats_credentials(f);
            }
            options = options
                .nats_user_parts(given(o.has_nats_user, o.nats_user, o.nats_user_len)?, given(o.has_nats_password, o.nats_password, o.nats_password_len)?)
                .nats_identity_parts(
                    given(o.has_nats_cert, o.nats_cert, o.nats_cert_len)?.map(Into::into),
                    given(o.has_nats_key, o.nats_key, o.nats_key_len)?.map(Into::into),
                );
        }
        let store = Store::connect_with(unsafe { text(address, address_len) }?, options)?;
        unsafe { *out = Box::into_raw(Box::new(TsStore { store })) };
        Ok(())
    })
}

/// Serves the store on one more `address` as well (`tcp:HOST:PORT` needs
/// `<dir>/tokens`), as `Store::serve`. Errors: `invalid` (the address, or a
/// connected store: only the owner serves), `io`, `auth`.
///
/// # Safety
/// `s` is live; `(address, address_len)` readable; `err` writable.
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
///
/// # Safety
/// `s` is null or live.
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
///
/// # Safety
/// `s` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_free(s: *mut TsStore) {
    quiet((), || {
        if !s.is_null() {
            drop(unsafe { Box::from_raw(s) });
        }
    })
}

/// The store's epoch: the high 64 bits of every fence it gives.
///
/// # Safety
/// `s` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_store_epoch(s: *const TsStore) -> u64 {
    quiet(0, || unsafe { s.as_ref() }.map_or(0, |s| s.store.epoch()))
}

/// What the store holds now, as JSON (the core's `StoreStatus`: its
/// directory, owner pid, epoch, subscriptions, branches, held keys with
/// their fences and waiters). `*out` is NUL-terminated; free it with
/// [`ts_string_free`]. Errors: `closed` (this handle's store was closed),
/// `io` or `timeout` (a connected store's owner could not be asked).
///
/// # Safety
/// `s` is live; `out` and `err` writable.
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
///
/// # Safety
/// `p` is null or a string this library gave, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_string_free(p: *mut c_char) {
    quiet((), || {
        if !p.is_null() {
            drop(unsafe { CString::from_raw(p) });
        }
    })
}
