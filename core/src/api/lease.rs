//! A lease as a store gives it: the boundary the bindings build on.

use std::sync::Arc;
use std::time::Duration;

use crate::api::backend::LeaseBackend;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::runtime;

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
    /// Lets the key go, and returns once the store did (LOCK-01): another
    /// process told by any path then finds the key free. Errors with `lost`
    /// if the lease had been lost: a release never pretends a lost lease was
    /// held (LOCK-04); `closed` when the store could not be reached within
    /// the request timeout (the store then lets the key go at the lease's
    /// ttl). Blocks: from async code use [`release_async`](Self::release_async).
    pub fn release(self) -> Result<()> {
        let done = self.inner.release();
        if tokio::task::try_id().is_some() {
            // Inside an async task, blocking could stall the thread that
            // reads the answer: the release goes on in the background.
            runtime::spawn(done);
            return Ok(());
        }
        runtime::block_on(done)
    }

    /// As [`release`](Self::release), without blocking: the release is sent
    /// within this call, the future resolves once the store let the key go.
    pub fn release_async(self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        self.inner.release()
    }

    /// The error a holder gets for this lease once lost.
    pub fn lost_error(&self) -> Error {
        self.inner.lost_error()
    }
}

impl Drop for RawLease {
    /// Lets the key go without waiting (a no-op after `release`): the
    /// release still gets its answer and is retried after a reconnect.
    fn drop(&mut self) {
        // Inside the runtime: a release made while reconnecting arms its timers.
        let _rt = runtime::handle().enter();
        let mut done = self.inner.release();
        // Polled once here: an owned release, or one already made, is done.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if done.as_mut().poll(&mut cx).is_pending() {
            runtime::spawn(done);
        }
    }
}

impl std::fmt::Debug for RawLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLease").field("id", &self.id()).field("fence", &self.fence()).field("key", self.key()).finish()
    }
}
