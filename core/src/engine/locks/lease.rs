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
    /// clock: a jump of the wall clock changes nothing).
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

    pub(crate) fn lost_error(&self) -> Error {
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

impl LeaseShared {
    /// The lease's id in the store.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// The fence (`None` for a semaphore's permit).
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.fence
    }
    /// Held over a connection (it has a ttl to renew within), so its holder
    /// re-presents it to the store's next owner (STORE-01).
    pub(super) fn over_connection(&self) -> bool {
        self.terms.ttl.is_some()
    }
    /// The key held.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }
    /// True once the lease ran out (ttl, `maxHold`) or the store closed.
    pub(crate) fn is_lost(&self) -> bool {
        self.state.load(Ordering::Acquire) == LOST
    }
    /// Resolves when the lease is lost; never while it is held.
    pub(crate) async fn lost(&self) {
        loop {
            let n = self.lost.notified();
            if self.is_lost() {
                return;
            }
            n.await;
        }
    }
    /// Calls `f` once, when the lease is lost (at once if it already is).
    pub(crate) fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        let mut fns = self.on_lost.lock();
        if self.is_lost() {
            drop(fns);
            f();
        } else {
            fns.push(f);
        }
    }
    /// Moves the ttl's deadline to now + ttl. Errors with `lost` when the
    /// lease already ran out: a late renewal never revives it (LOCK-05).
    pub(crate) fn renew(&self) -> Result<()> {
        let mut until = self.renewed_until.lock();
        if self.state.load(Ordering::Acquire) != HELD {
            return Err(self.lost_error());
        }
        if let Some(ttl) = self.terms.ttl {
            *until = Some(Instant::now() + ttl);
        }
        Ok(())
    }
    /// Time until the lease runs out, where it can.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.deadline().map(|d| d.saturating_duration_since(Instant::now()))
    }
    /// Lets the key go. Errors with `lost` if the lease had been lost: a
    /// release never pretends a lost lease was held (LOCK-04).
    pub(crate) fn release(&self) -> Result<()> {
        if self.mark_released() {
            self.table.remove(self);
            return Ok(());
        }
        match self.state.load(Ordering::Acquire) {
            LOST => Err(self.lost_error()),
            _ => Ok(()),
        }
    }
}

/// A lease as the engine gives it: its holder's until released or dropped
/// (dropping a held lease lets the key go). The server keeps these for its
/// connections; the api layer turns one into a
/// [`RawLease`](crate::locks::RawLease) with [`into_shared`](Self::into_shared).
pub(crate) struct LocalLease {
    shared: Arc<LeaseShared>,
}

impl LocalLease {
    pub(super) fn new(shared: Arc<LeaseShared>) -> LocalLease {
        LocalLease { shared }
    }

    pub(super) fn shared(&self) -> &Arc<LeaseShared> {
        &self.shared
    }

    /// The lease's state, for a holder that releases it itself.
    pub(crate) fn into_shared(self) -> Arc<LeaseShared> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again, so the Arc moves out once.
        unsafe { std::ptr::read(&me.shared) }
    }

    pub(crate) fn id(&self) -> u64 {
        self.shared.id
    }
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.shared.fence
    }
    pub(crate) fn on_lost(&self, f: impl FnOnce() + Send + 'static) {
        self.shared.on_lost(Box::new(f))
    }
    pub(crate) fn renew(&self) -> Result<()> {
        self.shared.renew()
    }
    pub(crate) fn release(self) -> Result<()> {
        self.into_shared().release()
    }
    pub(crate) fn lost_error(&self) -> Error {
        self.shared.lost_error()
    }
    /// Its lock's name.
    pub(crate) fn lock_name(&self) -> &str {
        self.shared.table.name()
    }
    /// The ttl it was granted with (`None`: held until let go).
    pub(crate) fn ttl(&self) -> Option<Duration> {
        self.shared.terms.ttl
    }
}

impl Drop for LocalLease {
    fn drop(&mut self) {
        let _ = self.shared.release();
    }
}
