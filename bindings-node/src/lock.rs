//! Locks, semaphores and their leases.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, PromiseRaw};
use napi_derive::napi;
use tinystore::RawLock;
use tinystore::locks::{Holder, LockOptions, RawLease};
use tokio::sync::watch;

use crate::convert::{self, JsDuration, JsKey};
use crate::errors::{IntoNapi, blocking, invalid, to_napi};
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

/// Makes the engine's handle: checks the name (and a semaphore's limit),
/// and over a connection declares the lock to the owner (a round trip).
pub type MakeLock = Box<dyn Fn() -> tinystore::Result<RawLock> + Send + Sync>;

/// A lock or semaphore handle with its checked options.
#[napi]
pub struct NativeLock {
    name: String,
    raw: Arc<OnceLock<RawLock>>,
    make: Arc<MakeLock>,
    opts: LockOptions,
    uv: Option<Arc<UvReader>>,
}

impl NativeLock {
    /// A handle made now when `now` (the owning process: no round trip),
    /// else at its first use, off the event loop.
    pub fn new(name: String, opts: LockOptions, now: bool, uv: Option<Arc<UvReader>>, make: MakeLock) -> napi::Result<NativeLock> {
        let raw = Arc::new(OnceLock::new());
        if now {
            let _ = raw.set(make().napi()?);
        }
        Ok(NativeLock { name, raw, make: Arc::new(make), opts, uv })
    }

    /// The engine's handle, made first if needed.
    fn raw(&self) -> impl Future<Output = napi::Result<RawLock>> + Send + 'static {
        let (raw, make) = (self.raw.clone(), self.make.clone());
        async move {
            if let Some(r) = raw.get() {
                return Ok(r.clone());
            }
            let made = blocking(move || make()).await?;
            Ok(raw.get_or_init(|| made).clone())
        }
    }
}

#[napi]
impl NativeLock {
    /// The lock's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
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
            None => self.opts.wait,
        };
        let (raw, terms) = (self.raw(), self.opts.terms());
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
        let (raw, terms) = (self.raw(), self.opts.terms());
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        now_or_promise(env, async move { Ok(raw.await?.try_acquire(key, holder, terms).await.napi()?.map(NativeLease::new)) })
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

    /// Why the lease was lost; null while it is held or after it was let go.
    #[napi(getter)]
    pub fn lost_message(&self) -> Option<String> {
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        lease.as_ref().filter(|l| l.is_lost()).map(|l| l.lost_error().message().to_owned())
    }

    /// Resolves when the lease ends: with the lost-lease message if it was
    /// lost, with null if it was let go first.
    #[napi]
    pub async fn ended(&self) -> Option<String> {
        let mut rx = self.state.subscribe();
        let end = rx.wait_for(|s| *s != HELD).await.map(|s| *s).unwrap_or(RELEASED);
        if end == LOST { self.lost_message() } else { None }
    }

    /// Lets the key go: undefined once the store let it go (LOCK-01), or a
    /// promise of that. Errors with `lost` when the lease had been lost: a
    /// release never pretends a lost lease was held. Idempotent.
    #[napi(ts_return_type = "void | Promise<void>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        let mut slot = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            None => Ok(Either::A(())),
            // Kept, so `ended` can still tell why.
            Some(l) if l.is_lost() => Err(to_napi(l.lost_error())),
            Some(_) => {
                let raw = slot.take().expect("looked at");
                drop(slot);
                self.state.send_if_modified(|s| {
                    let held = *s == HELD;
                    if held {
                        *s = RELEASED;
                    }
                    held
                });
                // Started in the first poll, on this thread.
                now_or_promise(env, async move { raw.release_async().await.napi() })
            }
        }
    }
}
