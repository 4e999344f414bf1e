//! Locks, semaphores and their leases.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use tinystore::locks::{Holder, Kind, LockOptions, RawLease};
use tinystore::{ErrorKind, RawLock, Store, runtime};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use crate::pending::{run_future, value};
use crate::{convert, error};

/// A holder id no other call of this process got: one per asyncio task.
#[pyfunction]
pub fn holder_unique() -> u64 {
    Holder::unique().0
}

/// The engine's handle of a lock or semaphore. Owned, it is made with the
/// Python handle (no round trip). Connected, the owner is asked in the
/// background (`lock_raw_async`) and the first hold or try_hold awaits the
/// answer, so making a handle never waits for the owner, and a conflict
/// (another kind or limit) surfaces at the first hold at the latest.
struct Engine {
    raw: OnceCell<RawLock>,
    /// The declare started when the handle was made; taken by the first use.
    declare: Mutex<Option<JoinHandle<tinystore::Result<RawLock>>>>,
    store: Store,
    name: String,
    kind: Kind,
}

impl Engine {
    fn new(store: Store, name: String, kind: Kind) -> tinystore::Result<Engine> {
        let mut engine = Engine { raw: OnceCell::new(), declare: Mutex::new(None), store, name, kind };
        if engine.store.is_owner() {
            let raw = engine.store.lock_raw(&engine.name, kind)?;
            engine.raw = OnceCell::new_with(Some(raw));
        } else {
            let (store, name) = (engine.store.clone(), engine.name.clone());
            *engine.declare.get_mut() = Some(runtime::spawn(async move { store.lock_raw_async(&name, kind).await }));
        }
        Ok(engine)
    }

    /// The engine's handle: at once when made, else the declare's answer.
    async fn get(&self) -> tinystore::Result<&RawLock> {
        if let Some(raw) = self.raw.get() {
            return Ok(raw);
        }
        self.raw
            .get_or_try_init(|| async {
                let started = self.declare.lock().take();
                if let Some(task) = started {
                    match task.await {
                        Ok(Ok(raw)) => return Ok(raw),
                        // A conflict is final; anything else (the connection
                        // was down, a timeout) is asked once more, now.
                        Ok(Err(e)) if e.kind() == ErrorKind::Conflict => return Err(e),
                        Ok(Err(_)) | Err(_) => {}
                    }
                }
                self.store.lock_raw_async(&self.name, self.kind).await
            })
            .await
    }
}

/// A lock or semaphore handle: its name, limit and options checked when made.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLock {
    engine: Arc<Engine>,
    opts: LockOptions,
}

impl NativeLock {
    /// Checks the name, options and store now (NAMES), and makes the
    /// engine's handle (owned) or starts asking the owner for it (connected).
    pub fn new(store: Store, name: String, kind: Kind, opts: LockOptions) -> tinystore::Result<NativeLock> {
        let what = match kind {
            Kind::Lock => "lock",
            Kind::Semaphore { .. } => "semaphore",
        };
        tinystore::limits::check_name(what, &name)?;
        let opts = opts.check()?;
        if store.is_closed() {
            return Err(error::closed());
        }
        Ok(NativeLock { engine: Arc::new(Engine::new(store, name, kind)?), opts })
    }
}

fn lease(raw: RawLease) -> NativeLease {
    NativeLease { fence: raw.fence().map(|f| f.get()), key: raw.key().to_string(), raw: Mutex::new(Some(raw)) }
}

#[pymethods]
impl NativeLock {
    #[getter]
    fn name(&self) -> &str {
        &self.engine.name
    }
    #[getter]
    fn ttl(&self) -> f64 {
        self.opts.ttl.as_secs_f64()
    }
    #[getter]
    fn max_hold(&self) -> Option<f64> {
        self.opts.max_hold.map(|d| d.as_secs_f64())
    }
    #[getter]
    fn wait(&self) -> f64 {
        self.opts.wait.as_secs_f64()
    }

    /// Takes `key` for `holder`, waiting up to `wait` (the handle's when
    /// None): a `NativeLease` at once, or a `Pending`.
    #[pyo3(signature = (key, holder, wait=None))]
    fn acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, holder: u64, wait: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let key = convert::key(key)?;
        let wait: Duration = match convert::opt_duration(wait)? {
            Some(w) => error::check(py, tinystore::limits::check_positive("wait", w))?,
            None => self.opts.wait,
        };
        let (engine, terms) = (self.engine.clone(), self.opts.terms());
        run_future(py, async move {
            let raw = engine.get().await?;
            Ok(value(lease(raw.acquire(key, Holder(holder), terms, wait).await?)))
        })
    }

    /// Takes `key` for `holder` if it is free now: a `NativeLease` or None.
    fn try_acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, holder: u64) -> PyResult<Py<PyAny>> {
        let key = convert::key(key)?;
        let (engine, terms) = (self.engine.clone(), self.opts.terms());
        run_future(py, async move {
            let raw = engine.get().await?;
            Ok(value(raw.try_acquire(key, Holder(holder), terms).await?.map(lease)))
        })
    }
}

/// A lease (or a semaphore's permit) as the engine gave it.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLease {
    raw: Mutex<Option<RawLease>>,
    fence: Option<u128>,
    key: String,
}

#[pymethods]
impl NativeLease {
    /// The fence (an int below 2**128), None for a permit.
    #[getter]
    fn fence(&self) -> Option<u128> {
        self.fence
    }
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }
    /// True once the lease was lost (ttl, maxHold, the store closed).
    #[getter]
    fn lost(&self) -> bool {
        self.raw.lock().as_ref().is_some_and(RawLease::is_lost)
    }
    /// Seconds until the lease runs out, where it can.
    #[getter]
    fn time_left(&self) -> Option<f64> {
        self.raw.lock().as_ref().and_then(RawLease::time_left).map(|d| d.as_secs_f64())
    }
    /// True until released.
    #[getter]
    fn held(&self) -> bool {
        self.raw.lock().is_some()
    }

    /// Lets the key go; raises `LostError` if the lease had been lost.
    /// None once the store let the key go (LOCK-01), or a `Pending` of it.
    /// Idempotent.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let raw = self.raw.lock().take();
        // Started in the first poll, on this thread: a waiter of this
        // process granted by it completes here.
        run_future(py, async move {
            if let Some(raw) = raw {
                raw.release_async().await?;
            }
            Ok(value(()))
        })
    }

    /// Resolves when the lease ends: True if it was lost, False if it was
    /// let go first. A `Pending` (or a bool at once).
    fn wait_lost(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        match self.raw.lock().as_ref() {
            Some(raw) => raw.on_lost(move || {
                let _ = tx.send(());
            }),
            None => return run_future(py, async { Ok(value(false)) }),
        }
        // The sender is dropped, unsent, when the lease is let go.
        run_future(py, async move { Ok(value(rx.await.is_ok())) })
    }
}
