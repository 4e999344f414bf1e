//! Locks, semaphores and their leases.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::BigInt;
use napi_derive::napi;
use tinystore::RawLock;
use tinystore::locks::{Holder, LockOptions, RawLease};
use tokio::sync::watch;

use crate::convert::{self, JsDuration, JsKey};
use crate::errors::{IntoNapi, invalid, to_napi};

/// A fresh holder id: one per logical holder (one `hold` call and the
/// asynchronous work it starts), so a nested `hold` of the same key fails at
/// once instead of waiting on itself (LOCK-08).
#[napi]
pub fn new_holder() -> BigInt {
    BigInt::from(Holder::unique().0)
}

fn holder(h: BigInt) -> napi::Result<Holder> {
    let (negative, v, lossless) = h.get_u64();
    if negative || !lossless {
        return Err(invalid("a holder id comes from newHolder()"));
    }
    Ok(Holder(v))
}

/// A lock or semaphore handle with its checked options.
#[napi]
pub struct NativeLock {
    raw: RawLock,
    opts: LockOptions,
}

impl NativeLock {
    pub fn new(raw: RawLock, opts: LockOptions) -> NativeLock {
        NativeLock { raw, opts }
    }
}

#[napi]
impl NativeLock {
    /// The lock's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.raw.name().to_owned()
    }

    /// Takes `key` for `holder`, waiting up to `wait` (the handle's when not
    /// given). Errors: `timeout`, `conflict` (the holder already holds the
    /// key), `invalid`, `closed`.
    #[napi]
    pub async fn acquire(&self, key: JsKey, holder_id: BigInt, wait: Option<JsDuration>) -> napi::Result<NativeLease> {
        let key = convert::key(key)?;
        let holder = holder(holder_id)?;
        let wait = match convert::opt_duration(wait)? {
            Some(w) => tinystore::limits::check_positive("wait", w).napi()?,
            None => self.opts.wait,
        };
        let lease = self.raw.acquire(key, holder, self.opts.terms(), wait).await.napi()?;
        Ok(NativeLease::new(lease))
    }

    /// Takes `key` for `holder` if it is free now; null otherwise. Never waits.
    #[napi]
    pub async fn try_acquire(&self, key: JsKey, holder_id: BigInt) -> napi::Result<Option<NativeLease>> {
        let key = convert::key(key)?;
        let holder = holder(holder_id)?;
        let lease = self.raw.try_acquire(key, holder, self.opts.terms()).await.napi()?;
        Ok(lease.map(NativeLease::new))
    }
}

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// A lease (or a semaphore's permit) while its function runs.
#[napi]
pub struct NativeLease {
    lease: Arc<Mutex<Option<RawLease>>>,
    fence: Option<u128>,
    state: Arc<watch::Sender<u8>>,
}

impl NativeLease {
    fn new(lease: RawLease) -> NativeLease {
        let state = Arc::new(watch::Sender::new(HELD));
        let told = state.clone();
        lease.on_lost(move || {
            told.send_replace(LOST);
        });
        NativeLease { fence: lease.fence().map(|f| f.get()), lease: Arc::new(Mutex::new(Some(lease))), state }
    }
}

#[napi]
impl NativeLease {
    /// The lease's fence (a bigint); null for a semaphore's permit.
    #[napi(getter)]
    pub fn fence(&self) -> Option<u128> {
        self.fence
    }

    /// True once the lease was lost (`maxHold`, ttl, the store closed).
    #[napi(getter)]
    pub fn lost(&self) -> bool {
        *self.state.borrow() == LOST
    }

    /// Resolves when the lease ends: with the lost-lease message if it was
    /// lost, with null if it was let go first.
    #[napi]
    pub async fn ended(&self) -> Option<String> {
        let mut rx = self.state.subscribe();
        let end = rx.wait_for(|s| *s != HELD).await.map(|s| *s).unwrap_or(RELEASED);
        if end != LOST {
            return None;
        }
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        Some(match &*lease {
            Some(l) => l.lost_error().message().to_owned(),
            None => "the lease was lost: another holder may have the key now".to_owned(),
        })
    }

    /// Lets the key go. Errors with `lost` when the lease had been lost:
    /// a release never pretends a lost lease was held. Idempotent.
    #[napi]
    pub fn release(&self) -> napi::Result<()> {
        let mut slot = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            None => Ok(()),
            // Kept, so `ended` can still tell why.
            Some(l) if l.is_lost() => Err(to_napi(l.lost_error())),
            Some(_) => {
                let r = slot.take().map_or(Ok(()), RawLease::release);
                drop(slot);
                self.state.send_if_modified(|s| {
                    let held = *s == HELD;
                    if held {
                        *s = RELEASED;
                    }
                    held
                });
                r.map_err(to_napi)
            }
        }
    }
}
