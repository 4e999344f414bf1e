//! A lease: one holder's claim on a key, with its fence and its deadlines.

use std::sync::{Arc, Weak};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Holder, HolderStatus, Table, Terms};
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::format_duration;
use crate::runtime::{self, Due};

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostReason {
    Ttl,
    MaxHold,
    Closed,
}

type LostFn = Box<dyn FnOnce() + Send>;

pub(crate) struct LeaseShared {
    table: Arc<Table>,
    pub(super) id: u64,
    pub(super) key: Key,
    fence: Option<Fence>,
    pub(super) holder: Holder,
    terms: Terms,
    granted: Instant,
    /// The ttl's deadline, moved on by each renewal.
    renewed_until: Mutex<Option<Instant>>,
    state: AtomicU8,
    lost_reason: Mutex<Option<LostReason>>,
    lost: Notify,
    on_lost: Mutex<Vec<LostFn>>,
    timer: Mutex<Option<runtime::TimerKey>>,
}

impl LeaseShared {
    pub(super) fn new(table: Arc<Table>, id: u64, key: Key, fence: Option<Fence>, holder: Holder, terms: Terms) -> Arc<LeaseShared> {
        let granted = Instant::now();
        Arc::new(LeaseShared {
            table,
            id,
            key,
            fence,
            holder,
            terms,
            granted,
            renewed_until: Mutex::new(terms.ttl.map(|t| granted + t)),
            state: AtomicU8::new(HELD),
            lost_reason: Mutex::new(None),
            lost: Notify::new(),
            on_lost: Mutex::new(Vec::new()),
            timer: Mutex::new(None),
        })
    }

    fn max_deadline(&self) -> Option<Instant> {
        self.terms.max_hold.map(|m| self.granted + m)
    }

    fn deadline(&self) -> Option<Instant> {
        match (*self.renewed_until.lock(), self.max_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires the lease at its deadline, following renewals (a monotonic
    /// clock: wall-clock jumps change nothing, L18).
    pub(super) fn start_timer(self: &Arc<Self>) {
        let Some(d) = self.deadline() else { return };
        let me: Weak<dyn Due> = Arc::downgrade(self) as Weak<LeaseShared>;
        let mut t = self.timer.lock();
        // Held under the lock so a release racing the grant cancels it.
        if self.state.load(Ordering::Acquire) == HELD {
            *t = Some(runtime::schedule(d, me));
        }
    }

    fn expire(self: &Arc<Self>, why: LostReason) {
        if self.mark_lost(why) {
            self.table.remove(self);
        }
    }

    /// Marks the lease lost and tells its holder; false if it was not held.
    pub(super) fn mark_lost(&self, why: LostReason) -> bool {
        if self.state.compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        *self.lost_reason.lock() = Some(why);
        if let Some(t) = self.timer.lock().take() {
            runtime::cancel(t);
        }
        let fns = std::mem::take(&mut *self.on_lost.lock());
        for f in fns {
            f();
        }
        self.lost.notify_waiters();
        true
    }

    pub(super) fn mark_released(&self) -> bool {
        let ok = self.state.compare_exchange(HELD, RELEASED, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if ok && let Some(t) = self.timer.lock().take() {
            runtime::cancel(t);
        }
        ok
    }

    pub(super) fn status(&self, now: Instant) -> HolderStatus {
        HolderStatus {
            lease: self.id,
            fence: self.fence,
            holder: self.holder,
            held_ms: now.duration_since(self.granted).as_millis() as u64,
            left_ms: self.deadline().map(|d| d.saturating_duration_since(now).as_millis() as u64),
        }
    }

    fn lost_error(&self) -> Error {
        let what = match self.fence {
            Some(f) => format!("the lease on key {} of {:?} (fence {f})", self.key, self.table.name()),
            None => format!("the permit on key {} of {:?}", self.key, self.table.name()),
        };
        let why = match *self.lost_reason.lock() {
            Some(LostReason::MaxHold) => format!(
                "it reached its maxHold of {}",
                self.terms.max_hold.map(format_duration).unwrap_or_default()
            ),
            Some(LostReason::Ttl) => format!(
                "it was not renewed within its ttl of {}",
                self.terms.ttl.map(format_duration).unwrap_or_default()
            ),
            Some(LostReason::Closed) => "the store closed".into(),
            None => "it was taken away".into(),
        };
        Error::lost(format!(
            "{what} was lost because {why}: another holder may have the key now; check fences where you write, and keep work within the lease"
        ))
    }
}

impl Due for LeaseShared {
    /// At the deadline: lost unless renewed meanwhile, then looked at again
    /// at the renewed deadline.
    fn due(self: Arc<Self>, now: Instant) {
        if self.state.load(Ordering::Acquire) != HELD {
            return;
        }
        if self.max_deadline().is_some_and(|m| now >= m) {
            self.expire(LostReason::MaxHold);
        } else if self.renewed_until.lock().is_some_and(|r| now >= r) {
            self.expire(LostReason::Ttl);
        } else {
            self.start_timer();
        }
    }
}

/// A lease as the engine gives it: the boundary the bindings build on. Rust
/// programs get a [`Lease`](crate::Lease) inside `hold` instead.
///
/// In the owning process it is the engine's own; over a connection, the
/// client's, renewed every third of its ttl by the engine's threads.
/// Dropping a held lease lets the key go.
pub struct RawLease {
    inner: Inner,
}

enum Inner {
    Local(Arc<LeaseShared>),
    Remote(crate::net::client::RemoteLeaseHandle),
}

impl RawLease {
    pub(super) fn new(shared: Arc<LeaseShared>) -> RawLease {
        RawLease { inner: Inner::Local(shared) }
    }

    pub(crate) fn remote(h: crate::net::client::RemoteLeaseHandle) -> RawLease {
        RawLease { inner: Inner::Remote(h) }
    }

    pub(super) fn shared(&self) -> &Arc<LeaseShared> {
        match &self.inner {
            Inner::Local(s) => s,
            Inner::Remote(_) => unreachable!("the engine's tables hold only local leases"),
        }
    }

    /// The lease's id in the store.
    pub fn id(&self) -> u64 {
        match &self.inner {
            Inner::Local(s) => s.id,
            Inner::Remote(r) => r.id(),
        }
    }
    /// The fence: larger than every fence given before (LOCK-02). `None` for
    /// a semaphore's permit.
    pub fn fence(&self) -> Option<Fence> {
        match &self.inner {
            Inner::Local(s) => s.fence,
            Inner::Remote(r) => r.fence(),
        }
    }
    /// The key held.
    pub fn key(&self) -> &Key {
        match &self.inner {
            Inner::Local(s) => &s.key,
            Inner::Remote(r) => r.key(),
        }
    }
    /// True once the lease ran out (ttl, `maxHold`) or the store closed.
    pub fn is_lost(&self) -> bool {
        match &self.inner {
            Inner::Local(s) => s.state.load(Ordering::Acquire) == LOST,
            Inner::Remote(r) => r.is_lost(),
        }
    }
    /// Resolves when the lease is lost; never while it is held.
    pub async fn lost(&self) {
        match &self.inner {
            Inner::Local(s) => loop {
                let n = s.lost.notified();
                if self.is_lost() {
                    return;
                }
                n.await;
            },
            Inner::Remote(r) => r.lost().await,
        }
    }
    /// Calls `f` once, when the lease is lost (at once if it already is).
    /// Never called for a lease let go normally.
    pub fn on_lost(&self, f: impl FnOnce() + Send + 'static) {
        match &self.inner {
            Inner::Local(s) => {
                let mut fns = s.on_lost.lock();
                if self.is_lost() {
                    drop(fns);
                    f();
                } else {
                    fns.push(Box::new(f));
                }
            }
            Inner::Remote(r) => r.on_lost(Box::new(f)),
        }
    }
    /// Moves the ttl's deadline to now + ttl (over a connection: renews at
    /// once). Errors with `lost` when the lease already ran out: a late
    /// renewal never revives it (L4).
    pub fn renew(&self) -> Result<()> {
        let s = match &self.inner {
            Inner::Local(s) => s,
            Inner::Remote(r) => return r.renew(),
        };
        let mut until = s.renewed_until.lock();
        if s.state.load(Ordering::Acquire) != HELD {
            return Err(s.lost_error());
        }
        if let Some(ttl) = s.terms.ttl {
            *until = Some(Instant::now() + ttl);
        }
        Ok(())
    }
    /// Time until the lease runs out, where it can.
    pub fn time_left(&self) -> Option<Duration> {
        match &self.inner {
            Inner::Local(s) => s.deadline().map(|d| d.saturating_duration_since(Instant::now())),
            Inner::Remote(r) => r.time_left(),
        }
    }
    /// Lets the key go. Errors with `lost` if the lease had been lost: a
    /// release never pretends a lost lease was held (LOCK-04, P6).
    pub fn release(self) -> Result<()> {
        self.release_ref()
    }

    fn release_ref(&self) -> Result<()> {
        let s = match &self.inner {
            Inner::Local(s) => s,
            Inner::Remote(r) => return r.release(),
        };
        if s.mark_released() {
            s.table.remove(s);
            return Ok(());
        }
        match s.state.load(Ordering::Acquire) {
            LOST => Err(s.lost_error()),
            _ => Ok(()),
        }
    }

    /// The error a holder gets for this lease once lost.
    pub fn lost_error(&self) -> Error {
        match &self.inner {
            Inner::Local(s) => s.lost_error(),
            Inner::Remote(r) => r.lost_error(),
        }
    }
}

impl Drop for RawLease {
    fn drop(&mut self) {
        let _ = self.release_ref();
    }
}

impl std::fmt::Debug for RawLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLease").field("id", &self.id()).field("fence", &self.fence()).field("key", self.key()).finish()
    }
}
