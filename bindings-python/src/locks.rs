//! Locks, semaphores and their leases.

use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use tinystore::RawLock;
use tinystore::locks::{Holder, LockOptions, RawLease};

use crate::pending::{run_future, value};
use crate::{convert, error};

/// A holder id no other call of this process got: one per asyncio task.
#[pyfunction]
pub fn holder_unique() -> u64 {
    Holder::unique().0
}

/// A lock or semaphore handle, its name and options checked by the core.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLock {
    raw: RawLock,
    opts: LockOptions,
}

impl NativeLock {
    pub fn new(raw: RawLock, opts: LockOptions) -> NativeLock {
        NativeLock { raw, opts }
    }
}

fn lease(raw: RawLease) -> NativeLease {
    NativeLease { fence: raw.fence().map(|f| f.get()), key: raw.key().to_string(), raw: Mutex::new(Some(raw)) }
}

#[pymethods]
impl NativeLock {
    #[getter]
    fn name(&self) -> &str {
        self.raw.name()
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
        let (raw, terms) = (self.raw.clone(), self.opts.terms());
        run_future(py, async move { Ok(value(lease(raw.acquire(key, Holder(holder), terms, wait).await?))) })
    }

    /// Takes `key` for `holder` if it is free now: a `NativeLease` or None.
    fn try_acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, holder: u64) -> PyResult<Py<PyAny>> {
        let key = convert::key(key)?;
        let (raw, terms) = (self.raw.clone(), self.opts.terms());
        run_future(py, async move { Ok(value(raw.try_acquire(key, Holder(holder), terms).await?.map(lease))) })
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
    /// Idempotent.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let raw = self.raw.lock().take();
        match raw {
            Some(raw) => error::check(py, py.detach(move || raw.release())),
            None => Ok(()),
        }
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
