//! A lease as a store gives it: the boundary the bindings build on.

use std::sync::Arc;
use std::time::Duration;

use crate::api::backend::LeaseBackend;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;

/// A lease as the engine gives it: the boundary the bindings build on. Rust
/// programs get a [`Lease`](crate::Lease) inside `hold` instead.
///
/// In the owning process it is the engine's own; over a connection, the
/// client's, renewed every third of its ttl by the engine's threads.
/// Dropping a held lease lets the key go.
pub struct RawLease {
    inner: Arc<dyn LeaseBackend>,
}

impl RawLease {
    pub(crate) fn new(inner: Arc<dyn LeaseBackend>) -> RawLease {
        RawLease { inner }
    }

    /// The lease's id in the store.
    pub fn id(&self) -> u64 {
        self.inner.id()
    }
    /// The fence: larger than every fence given before (LOCK-02). `None` for
    /// a semaphore's permit.
    pub fn fence(&self) -> Option<Fence> {
        self.inner.fence()
    }
    /// The key held.
    pub fn key(&self) -> &Key {
        self.inner.key()
    }
    /// True once the lease ran out (ttl, `maxHold`) or the store closed.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }
    /// Resolves when the lease is lost; never while it is held.
    pub async fn lost(&self) {
        self.inner.lost().await
    }
    /// Calls `f` once, when the lease is lost (at once if it already is).
    /// Never called for a lease let go normally.
    pub fn on_lost(&self, f: impl FnOnce() + Send + 'static) {
        self.inner.on_lost(Box::new(f))
    }
    /// Moves the ttl's deadline to now + ttl (over a connection: renews at
    /// once). Errors with `lost` when the lease already ran out: a late
    /// renewal never revives it (LOCK-05).
    pub fn renew(&self) -> Result<()> {
        self.inner.renew()
    }
    /// Time until the lease runs out, where it can.
    pub fn time_left(&self) -> Option<Duration> {
        self.inner.time_left()
    }
    /// Lets the key go. Errors with `lost` if the lease had been lost: a
    /// release never pretends a lost lease was held (LOCK-04).
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }

    /// The error a holder gets for this lease once lost.
    pub fn lost_error(&self) -> Error {
        self.inner.lost_error()
    }
}

impl Drop for RawLease {
    fn drop(&mut self) {
        let _ = self.inner.release();
    }
}

impl std::fmt::Debug for RawLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLease").field("id", &self.id()).field("fence", &self.fence()).field("key", self.key()).finish()
    }
}
