//! Locks, semaphores and their leases.

use std::future::Future;
use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, PromiseRaw};
use napi_derive::napi;
use tinystore::locks::{HeldLease, Holder, Kind, LeaseState, LockHandle, LockOptions, RawLease};
use tinystore::{RawLock, Store};

use crate::convert::{self, JsDuration, JsKey};
use crate::errors::{IntoNapi, invalid};
use crate::ready::now_or_promise;
use crate::uvread::UvReader;

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

/// A lock or semaphore handle: the core's [`LockHandle`] (checked when
/// made, declared once on first use).
#[napi]
pub struct NativeLock {
    handle: Arc<LockHandle>,
    uv: Option<Arc<UvReader>>,
}

impl NativeLock {
    /// Checks the name, kind and options, and declares the lock (owned) or
    /// starts declaring it (connected), never blocking the event loop.
    pub fn new(store: &Store, name: &str, kind: Kind, opts: LockOptions, uv: Option<Arc<UvReader>>) -> napi::Result<NativeLock> {
        let handle = LockHandle::new(store, name, kind, opts).napi()?;
        Ok(NativeLock { handle: Arc::new(handle), uv })
    }

    /// The engine's lock, declared once.
    fn raw(&self) -> impl Future<Output = napi::Result<RawLock>> + Send + 'static {
        let handle = self.handle.clone();
        async move { handle.get().await.cloned().napi() }
    }

    fn opts(&self) -> LockOptions {
        self.handle.options()
    }
}

#[napi]
impl NativeLock {
    /// The lock's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.handle.name().to_owned()
    }

    /// Takes `key` for `holder`, waiting up to `wait` (the handle's when not
    /// given): the lease now when the key is free, else a promise of it.
    /// Errors: `timeout`, `conflict` (the holder already holds the key),
    /// `invalid`, `closed`.
    #[napi(ts_return_type = "NativeLease | Promise<NativeLease>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        key: JsKey,
        holder_id: BigInt,
        wait: Option<JsDuration>,
    ) -> napi::Result<Either<NativeLease, PromiseRaw<'env, NativeLease>>> {
        let key = convert::key(key)?;
        let holder = holder(holder_id)?;
        let wait = match convert::opt_duration("wait", wait)? {
            Some(w) => tinystore::limits::check_positive("wait", w).napi()?,
            None => self.opts().wait,
        };
        let (raw, terms) = (self.raw(), self.opts().terms());
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        now_or_promise(env, async move { raw.await?.acquire(key, holder, terms, wait).await.napi().map(NativeLease::new) })
    }

    /// Takes `key` for `holder` if it is free now; null otherwise. Never waits.
    #[napi(ts_return_type = "NativeLease | null | Promise<NativeLease | null>")]
    pub fn try_acquire<'env>(
        &self,
        env: &'env Env,
        key: JsKey,
        holder_id: BigInt,
    ) -> napi::Result<Either<Option<NativeLease>, PromiseRaw<'env, Option<NativeLease>>>> {
        let key = convert::key(key)?;
        let holder = holder(holder_id)?;
        let (raw, terms) = (self.raw(), self.opts().terms());
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        now_or_promise(env, async move { Ok(raw.await?.try_acquire(key, holder, terms).await.napi()?.map(NativeLease::new)) })
    }
}

/// A lease (or a semaphore's permit) while its function runs: its state
/// and end are the core's [`HeldLease`].
#[napi]
pub struct NativeLease {
    held: Arc<HeldLease>,
}

impl NativeLease {
    fn new(lease: RawLease) -> NativeLease {
        NativeLease { held: Arc::new(HeldLease::new(lease)) }
    }
}

#[napi]
impl NativeLease {
    /// The lease's fence (a bigint); null for a semaphore's permit.
    #[napi(getter)]
    pub fn fence(&self) -> Option<u128> {
        self.held.fence().map(|f| f.get())
    }

    /// True once the lease was lost (`maxHold`, ttl, the store closed).
    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Why the lease was lost; null while it is held or after it was let go.
    #[napi(getter)]
    pub fn lost_message(&self) -> Option<String> {
        self.held.lost_error().map(|e| e.message().to_owned())
    }

    /// Resolves when the lease ends: with the lost-lease message if it was
    /// lost, with null if it was let go first.
    #[napi]
    pub async fn ended(&self) -> Option<String> {
        match self.held.ended().await {
            LeaseState::Lost => self.lost_message(),
            _ => None,
        }
    }

    /// Ends the hold when its function ended (`bodyFailed`: it threw):
    /// errors with `lost` when the lease had been lost, unless the
    /// function's own error is on its way (LOCK-04, the core's rule).
    /// Undefined once the store let the key go (LOCK-01), or a promise of
    /// that: the event loop never waits on the owner's answer. Idempotent.
    #[napi(ts_return_type = "void | Promise<void>")]
    pub fn end<'env>(&self, env: &'env Env, body_failed: bool) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        if !self.held.is_held() {
            return Ok(Either::A(()));
        }
        // Sent in the first poll, on this thread.
        let held = self.held.clone();
        now_or_promise(env, async move { held.end_async(body_failed).await.napi() })
    }

    /// Lets the key go: `end` of a function that did not throw.
    #[napi(ts_return_type = "void | Promise<void>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        self.end(env, false)
    }
}
