//! A lease held over the wire: renewed every third of its ttl from the
//! engine's timers, and lost by its own deadline on this side.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Answer, Client};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::net::wire::Request;
use crate::runtime;

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A lease held over the wire, renewed every third of its ttl by the engine.
pub(crate) struct RemoteLease {
    pub(super) client: std::sync::Weak<Client>,
    /// The owner's id for it: a new owner that took it back gives another.
    pub(super) id: AtomicU64,
    pub(super) fence: Option<Fence>,
    pub(super) key: Key,
    /// What it is re-presented with to a new owner (STORE-01).
    pub(super) lock: String,
    pub(super) limit: u32,
    pub(super) holder: u64,
    /// Re-presented to a new owner, not yet answered: no renewal goes out
    /// under the old id meanwhile.
    pub(super) adopting: AtomicBool,
    pub(super) ttl: Duration,
    /// Lost by this instant unless a renewal moves it: the last renewal
    /// sent (acknowledged) plus the ttl, capped by maxHold.
    pub(super) deadline: Mutex<Instant>,
    pub(super) max_deadline: Option<Instant>,
    /// Its maxHold, for the message once it is reached.
    pub(super) max_hold: Option<Duration>,
    pub(super) lost: AtomicBool,
    pub(super) released: AtomicBool,
    pub(super) why: Mutex<Option<LostWhy>>,
    pub(super) notify: Notify,
    pub(super) on_lost: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    pub(super) sched: Mutex<Sched>,
}

/// Why a lease held over the wire was lost.
pub(super) enum LostWhy {
    /// Seen by this process (its deadline passed, the owner could not take
    /// it back): a cause, put in a sentence naming the lease.
    Cause(String),
    /// Told by the owner, in a whole sentence of its own (the lease's key,
    /// lock, fence and cause, and the advice): given as it is.
    Told(String),
}

/// The `lost` error's message for the lease `what` ("the lease on key k
/// (fence f)"): the owner's own sentence when it told, else one made here.
fn lost_message(what: &str, why: Option<&LostWhy>) -> String {
    match why {
        Some(LostWhy::Told(m)) => m.clone(),
        Some(LostWhy::Cause(why)) => lost_sentence(what, why),
        None => lost_sentence(what, "it ran out"),
    }
}

fn lost_sentence(what: &str, why: &str) -> String {
    format!("{what} was lost: {why}; another holder may have the key now: check fences where you write, and keep work within the lease")
}

/// When the lease's next renewal goes out, and the timer armed for it.
pub(super) struct Sched {
    pub(super) next_send: Instant,
    pub(super) timer: Option<runtime::TimerKey>,
}

impl runtime::Due for RemoteLease {
    fn due(self: Arc<Self>, now: Instant) {
        let mut s = self.sched.lock();
        s.timer = None;
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return;
        }
        let deadline = *self.deadline.lock();
        if now >= deadline {
            drop(s);
            self.mark_lost(LostWhy::Cause(self.why_past_deadline(now, "the connection was cut or the store stalled")));
            return;
        }
        if now >= s.next_send && self.adopting.load(Ordering::Acquire) {
            // Its re-presentation stands for a renewal: look again soon.
            s.next_send = now + Duration::from_millis(50);
        } else if now >= s.next_send {
            s.next_send = now + self.ttl / 3;
            if let Some(c) = self.client.upgrade()
                && let Ok(conn) = c.current()
            {
                let mut r = Request::new(0, "renew");
                r.lease = Some(self.id());
                r.fence = self.fence;
                let _ = c.send_with(&conn, &mut r, Some(Answer::Renewal(Arc::downgrade(&self), now)));
            }
        }
        self.arm(&mut s);
    }
}

impl RemoteLease {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        client: &Arc<Client>,
        id: u64,
        fence: Option<Fence>,
        key: Key,
        (lock, limit, holder): (String, u32, u64),
        ttl: Duration,
        granted: Instant,
        max_hold: Option<Duration>,
    ) -> Arc<RemoteLease> {
        let max_deadline = max_hold.map(|m| granted + m - safety(m));
        let first = granted + ttl - safety(ttl);
        Arc::new(RemoteLease {
            client: Arc::downgrade(client),
            id: AtomicU64::new(id),
            fence,
            key,
            lock,
            limit,
            holder,
            adopting: AtomicBool::new(false),
            ttl,
            deadline: Mutex::new(max_deadline.map_or(first, |m| m.min(first))),
            max_deadline,
            max_hold,
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            why: Mutex::new(None),
            notify: Notify::new(),
            on_lost: Mutex::new(Vec::new()),
            sched: Mutex::new(Sched { next_send: granted, timer: None }),
        })
    }

    pub(super) fn id(&self) -> u64 {
        self.id.load(Ordering::Acquire)
    }

    /// The request that re-presents this lease to a new owner (STORE-01):
    /// its lock, key, fence, ttl and what is left of its maxHold; `None`
    /// once lost, released or past its deadline.
    pub(super) fn adopt_request(&self, hold: u64) -> Option<Request<'static>> {
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) || Instant::now() >= *self.deadline.lock() {
            return None;
        }
        let mut r = Request::new(0, "adopt");
        r.lock = Some(self.lock.clone());
        r.limit = Some(self.limit);
        r.key = Some(self.key.clone());
        r.hold = Some(hold);
        r.holder = Some(self.holder);
        r.fence = self.fence;
        r.ttl_ms = Some(self.ttl.as_millis() as u64);
        r.max_hold_ms = self.max_deadline.map(|m| m.saturating_duration_since(Instant::now()).as_millis().max(1) as u64);
        Some(r)
    }

    /// The new owner's answer to the re-presentation sent at `sent`: the
    /// lease goes on under its new id (a renewal at `sent`), or is lost.
    pub(super) fn adopted(self: &Arc<Self>, sent: Instant, v: Result<Box<[u8]>>) {
        let ok = v.and_then(|b| serde_json::from_slice::<crate::net::wire::AcquireOk>(&b).map_err(|e| Error::new(ErrorKind::Protocol, e.to_string())));
        match ok {
            Ok(crate::net::wire::AcquireOk { lease: Some(new), .. }) => {
                let old = self.id.swap(new, Ordering::AcqRel);
                if let Some(c) = self.client.upgrade() {
                    let mut leases = c.leases.lock();
                    if leases.remove(&old).is_some() {
                        leases.insert(new, self.clone());
                    }
                }
                self.adopting.store(false, Ordering::Release);
                self.renewed(sent, Ok(Box::default()));
                self.kick();
            }
            Ok(_) => self.mark_lost(LostWhy::Cause("the store's new owner did not take it back".into())),
            Err(e) if e.kind() == ErrorKind::Lost => self.mark_lost(LostWhy::Told(e.message().to_owned())),
            // Cut off: re-presented again on the next connection.
            Err(_) => self.adopting.store(false, Ordering::Release),
        }
    }

    /// Renews every third of the ttl; marks the lease lost at its deadline.
    /// Renewals go out on schedule whether or not the last one was answered,
    /// so one lost renewal costs a third of the ttl, never the lease (LOCK-05).
    pub(super) fn start(self: &Arc<Self>) {
        let first = Instant::now() + self.ttl / 3;
        let mut s = self.sched.lock();
        s.next_send = first;
        self.arm(&mut s);
    }

    /// Schedules the next look: the next renewal or the deadline.
    pub(super) fn arm(self: &Arc<Self>, s: &mut Sched) {
        if let Some(k) = s.timer.take() {
            runtime::cancel(k);
        }
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return;
        }
        let at = s.next_send.min(*self.deadline.lock());
        s.timer = Some(runtime::schedule(at, Arc::downgrade(self) as std::sync::Weak<dyn runtime::Due>));
    }

    /// Renews at once (after a reconnect, or when asked).
    pub(super) fn kick(self: &Arc<Self>) {
        let mut s = self.sched.lock();
        s.next_send = Instant::now();
        self.arm(&mut s);
    }

    /// The store's answer to a renewal sent at `sent`.
    pub(super) fn renewed(&self, sent: Instant, v: Result<Box<[u8]>>) {
        match v {
            Ok(_) => {
                let mut d = self.deadline.lock();
                let next = sent + self.ttl - safety(self.ttl);
                *d = self.max_deadline.map_or(next, |m| m.min(next)).max(*d);
            }
            Err(e) if e.kind() == ErrorKind::Lost => self.mark_lost(LostWhy::Told(e.message().to_owned())),
            Err(_) => {}
        }
    }

    /// Why a lease past its deadline is lost: its maxHold when that was
    /// reached (also when the holder only looks late, its loop blocked),
    /// else its ttl, for the `likely` cause given.
    fn why_past_deadline(&self, now: Instant, likely: &str) -> String {
        if let Some(m) = self.max_hold.filter(|_| self.max_deadline.is_some_and(|m| now >= m)) {
            format!("it reached its maxHold of {}", crate::base::limits::format_duration(m))
        } else {
            format!("no renewal reached the store within its ttl ({likely})")
        }
    }

    pub(super) fn mark_lost(&self, why: LostWhy) {
        if self.released.load(Ordering::Acquire) || self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.why.lock() = Some(why);
        if let Some(t) = self.sched.lock().timer.take() {
            runtime::cancel(t);
        }
        let fns = std::mem::take(&mut *self.on_lost.lock());
        for f in fns {
            f();
        }
        self.notify.notify_waiters();
        if let Some(c) = self.client.upgrade() {
            c.leases.lock().remove(&self.id());
        }
    }

    pub(crate) fn lost_error(&self) -> Error {
        let what = match self.fence {
            Some(f) => format!("the lease on key {} of {:?} (fence {f})", self.key, self.lock),
            None => format!("the permit on key {} of {:?}", self.key, self.lock),
        };
        Error::lost(lost_message(&what, self.why.lock().as_ref()))
    }
}

/// How much earlier than the store a holder counts its lease lost, so that
/// timer granularity and scheduling never let it run past the moment the
/// store could give the key to another (LOCK-01, LOCK-05): a fiftieth of the span plus 5 ms.
pub(super) fn safety(span: Duration) -> Duration {
    span / 50 + Duration::from_millis(5)
}

/// The engine's handle on a lease held over the wire.
pub(crate) struct RemoteLeaseHandle {
    pub(super) lease: Arc<RemoteLease>,
}

impl RemoteLeaseHandle {
    pub(crate) fn id(&self) -> u64 {
        self.lease.id()
    }
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.lease.fence
    }
    pub(crate) fn key(&self) -> &Key {
        &self.lease.key
    }
    /// Lost once told so, or once its deadline passed: a process that was
    /// frozen past it knows at once on waking, before its timer runs (LOCK-04).
    pub(crate) fn is_lost(&self) -> bool {
        let l = &self.lease;
        if l.lost.load(Ordering::Acquire) {
            return true;
        }
        if !l.released.load(Ordering::Acquire) && Instant::now() >= *l.deadline.lock() {
            l.mark_lost(LostWhy::Cause(l.why_past_deadline(Instant::now(), "this process was frozen, or the connection was cut or stalled")));
            return true;
        }
        false
    }
    pub(crate) async fn lost(&self) {
        loop {
            let n = self.lease.notify.notified();
            if self.is_lost() {
                return;
            }
            n.await;
        }
    }
    pub(crate) fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        let mut fns = self.lease.on_lost.lock();
        if self.is_lost() {
            drop(fns);
            f();
        } else {
            fns.push(f);
        }
    }
    pub(crate) fn renew(&self) -> Result<()> {
        if self.is_lost() {
            return Err(self.lease.lost_error());
        }
        self.lease.kick();
        Ok(())
    }
    pub(crate) fn time_left(&self) -> Option<Duration> {
        Some(self.lease.deadline.lock().saturating_duration_since(Instant::now()))
    }
    pub(crate) fn lost_error(&self) -> Error {
        self.lease.lost_error()
    }
    /// Lets the lease go: sent now (order is kept on the connection, and
    /// other requests need not wait), and the future resolves once the
    /// owner answered that the key is free (LOCK-01). Errors with `lost`
    /// when the lease had been lost.
    pub(crate) fn release(&self) -> BoxFuture<'static, Result<()>> {
        let l = &self.lease;
        if self.is_lost() {
            return Box::pin(std::future::ready(Err(l.lost_error())));
        }
        if l.released.swap(true, Ordering::AcqRel) {
            return Box::pin(std::future::ready(Ok(())));
        }
        if let Some(t) = l.sched.lock().timer.take() {
            runtime::cancel(t);
        }
        let Some(c) = l.client.upgrade() else { return Box::pin(std::future::ready(Ok(()))) };
        c.leases.lock().remove(&l.id());
        let first = c.send_release(l.id(), l.fence);
        let (id, fence, key, deadline) = (l.id(), l.fence, l.key.clone(), *l.deadline.lock());
        Box::pin(async move { c.released(first, id, fence, key, deadline).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_05_a_loss_the_owner_told_is_given_in_its_own_words_once() {
        let told = "the lease on key k of \"l\" (fence 7) was lost because it was not renewed within its ttl of 2s: another holder may have the key now; check fences where you write, and keep work within the lease";
        let m = lost_message("the lease on key k (fence 7)", Some(&LostWhy::Told(told.into())));
        assert_eq!(m, told);
        let m = lost_message("the lease on key k (fence 7)", Some(&LostWhy::Cause("it reached its maxHold".into())));
        assert_eq!(m.matches("was lost").count(), 1, "{m}");
        assert!(m.starts_with("the lease on key k (fence 7) was lost: it reached its maxHold;"), "{m}");
    }
}
