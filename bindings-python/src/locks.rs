//! Locks, semaphores and their leases.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use tinystore::Store;
use tinystore::locks::{HeldLease, Holder, Kind, LeaseState, LockHandle, LockOptions, RawLease};

use crate::pending::{run_future, value};
use crate::{convert, error};

/// A holder id no other call of this process got: one per asyncio task.
#[pyfunction]
pub fn holder_unique() -> u64 {
    Holder::unique().0
}

/// A lock or semaphore handle: its name, limit and options checked when made.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLock {
    handle: Arc<LockHandle>,
}

impl NativeLock {
    /// Checks the name, options and store now (NAMES), and declares the
    /// lock (owned) or starts declaring it (connected): the core's
    /// [`LockHandle`].
    pub fn new(store: Store, name: String, kind: Kind, opts: LockOptions) -> tinystore::Result<NativeLock> {
        Ok(NativeLock { handle: Arc::new(LockHandle::new(&store, &name, kind, opts)?) })
    }
}

fn lease(raw: RawLease) -> NativeLease {
    let held = HeldLease::new(raw);
    NativeLease { key: held.key().to_string(), held: Arc::new(held) }
}

#[pymethods]
impl NativeLock {
    #[getter]
    fn name(&self) -> &str {
        self.handle.name()
    }
    #[getter]
    fn ttl(&self) -> f64 {
        self.handle.options().ttl.as_secs_f64()
    }
    #[getter]
    fn max_hold(&self) -> Option<f64> {
        self.handle.options().max_hold.map(|d| d.as_secs_f64())
    }
    #[getter]
    fn wait(&self) -> f64 {
        self.handle.options().wait.as_secs_f64()
    }

    /// Takes `key` for `holder`, waiting up to `wait` (the handle's when
    /// None): a `NativeLease` at once, or a `Pending`.
    #[pyo3(signature = (key, holder, wait=None))]
    fn acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, holder: u64, wait: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let key = convert::key(key)?;
        let wait: Duration = match convert::opt_duration("wait", wait)? {
            Some(w) => error::check(py, tinystore::limits::check_positive("wait", w))?,
            None => self.handle.options().wait,
        };
        let (handle, terms) = (self.handle.clone(), self.handle.options().terms());
        run_future(py, async move {
            let raw = handle.get().await?;
            Ok(value(lease(raw.acquire(key, Holder(holder), terms, wait).await?)))
        })
    }

    /// Takes `key` for `holder` if it is free now: a `NativeLease` or None.
    fn try_acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, holder: u64) -> PyResult<Py<PyAny>> {
        let key = convert::key(key)?;
        let (handle, terms) = (self.handle.clone(), self.handle.options().terms());
        run_future(py, async move {
            let raw = handle.get().await?;
            Ok(value(raw.try_acquire(key, Holder(holder), terms).await?.map(lease)))
        })
    }
}

/// A lease (or a semaphore's permit) as the engine gave it: its state and
/// end are the core's [`HeldLease`].
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLease {
    held: Arc<HeldLease>,
    key: String,
}

#[pymethods]
impl NativeLease {
    /// The fence (an int below 2**128), None for a permit.
    #[getter]
    fn fence(&self) -> Option<u128> {
        self.held.fence().map(|f| f.get())
    }
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }
    /// True once the lease was lost (ttl, maxHold, the store closed).
    #[getter]
    fn lost(&self) -> bool {
        self.held.is_held() && self.held.is_lost()
    }
    /// Seconds until the lease runs out, where it can.
    #[getter]
    fn time_left(&self) -> Option<f64> {
        self.held.time_left().map(|d| d.as_secs_f64())
    }
    /// True until the hold ended.
    #[getter]
    fn held(&self) -> bool {
        self.held.is_held()
    }

    /// Ends the hold when its block ended (`body_failed`: the block raised):
    /// raises `LostError` if the lease had been lost, unless the block's own
    /// error is on its way (LOCK-04, the core's rule). None once the store
    /// let the key go (LOCK-01), or a `Pending` of it: the loop is never
    /// blocked on the owner's answer. Idempotent.
    #[pyo3(signature = (body_failed=false))]
    fn end(&self, py: Python<'_>, body_failed: bool) -> PyResult<Py<PyAny>> {
        if !self.held.is_held() {
            return Ok(py.None());
        }
        let held = self.held.clone();
        // Sent in the first poll, on this thread: a waiter of this process
        // granted by it completes here.
        run_future(py, async move {
            held.end_async(body_failed).await?;
            Ok(value(()))
        })
    }

    /// Lets the key go: `end` of a block that did not raise.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.end(py, false)
    }

    /// Resolves when the lease ends: True if it was lost, False if it was
    /// let go first. A `Pending` (or a bool at once).
    fn wait_lost(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let held = self.held.clone();
        run_future(py, async move { Ok(value(held.ended().await == LeaseState::Lost)) })
    }
}
