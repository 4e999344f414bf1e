//! Leases on a cluster store. A [`Session`] is one etcd lease of this
//! process, one per ttl, that every hold of that ttl puts its key with; the
//! background runtime renews it every third of the ttl. A [`ClusterLease`]
//! is one hold: its key under the lock's, its fence, its maxHold.
//!
//! A lease is lost here by its own deadline: the last renewal etcd
//! acknowledged, counted from when it was sent, plus the ttl, a little
//! early. etcd counts the ttl from when its leader got the renewal (later),
//! and a new leader gives every lease a whole ttl again, so etcd never
//! gives the key to another holder before this side has said lost (LOCK-05).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::bounded;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::format_duration;
use crate::runtime;

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// How early a deadline is called, for the clocks' rates and the delays
/// of this side's timers.
pub(super) fn safety(span: Duration) -> Duration {
    span / 50 + Duration::from_millis(5)
}

/// One etcd lease of this process, shared by its holds of one ttl.
pub(crate) struct Session {
    pub(super) id: i64,
    ttl: Duration,
    /// Lost at this instant unless a renewal moves it on.
    deadline: Mutex<Instant>,
    lost: AtomicBool,
    why: Mutex<String>,
    notify: Notify,
    stop: Notify,
    /// The holds to tell when it is lost.
    leases: Mutex<Vec<Weak<ClusterLease>>>,
    client: etcd_client::Client,
    timeout: Duration,
}

impl Session {
    /// Grants an etcd lease of `ttl` (rounded up to whole seconds, as etcd
    /// counts; etcd may raise it to its minimum) and starts renewing it.
    pub(super) async fn grant(client: etcd_client::Client, ttl: Duration, timeout: Duration) -> Result<Arc<Session>> {
        let sent = Instant::now();
        let secs = ttl.as_millis().div_ceil(1000) as i64;
        let r = bounded(timeout, "granting an etcd lease for the holds", || async { client.lease_client().grant(secs, None).await }).await?;
        if !r.error().is_empty() {
            return Err(Error::new(ErrorKind::Unavailable, format!("etcd refused a lease of {secs} s: {}", r.error())));
        }
        let s = Arc::new(Session {
            id: r.id(),
            ttl,
            deadline: Mutex::new(sent + ttl - safety(ttl)),
            lost: AtomicBool::new(false),
            why: Mutex::new(String::new()),
            notify: Notify::new(),
            stop: Notify::new(),
            leases: Mutex::new(Vec::new()),
            client,
            timeout,
        });
        runtime::spawn(s.clone().keep());
        Ok(s)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Resolves once the session is lost.
    pub(super) async fn lost(&self) {
        loop {
            let n = self.notify.notified();
            if self.is_lost() {
                return;
            }
            n.await;
        }
    }

    pub(super) fn why(&self) -> String {
        self.why.lock().clone()
    }

    pub(super) fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    pub(super) fn adopt(&self, lease: &Arc<ClusterLease>) {
        let mut l = self.leases.lock();
        l.retain(|w| w.strong_count() > 0);
        l.push(Arc::downgrade(lease));
        drop(l);
        if self.is_lost() {
            lease.mark_lost(self.why());
        }
    }

    fn mark_lost(&self, why: String) {
        if self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.why.lock() = why.clone();
        self.notify.notify_waiters();
        let leases: Vec<_> = self.leases.lock().drain(..).collect();
        for l in leases.iter().filter_map(Weak::upgrade) {
            l.mark_lost(why.clone());
        }
    }

    /// Ends the session: its holds are lost with `why`, and etcd is asked
    /// to revoke the lease, which deletes every key put with it.
    pub(super) async fn end(&self, why: &str) {
        self.mark_lost(why.to_owned());
        self.stop.notify_one();
        let _ = bounded(self.timeout, "revoking a lease", || async { self.client.lease_client().revoke(self.id).await }).await;
    }

    /// Renews every third of the ttl over one keepalive stream (opened
    /// again when it breaks), until the deadline passes unrenewed or etcd
    /// says the lease is gone.
    async fn keep(self: Arc<Self>) {
        let period = self.ttl / 3;
        let mut keeper: Option<etcd_client::LeaseKeeper> = None;
        let mut answers: Option<etcd_client::LeaseKeepAliveStream> = None;
        let mut sent: VecDeque<Instant> = VecDeque::new();
        let mut next = Instant::now() + period;
        let why = loop {
            let deadline = self.deadline();
            let answer = async {
                match answers.as_mut() {
                    Some(a) => a.message().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(next.into()) => {
                    next = Instant::now() + period;
                    let at = Instant::now();
                    match keeper.as_mut() {
                        Some(k) => {
                            if k.keep_alive().await.is_ok() {
                                sent.push_back(at);
                            } else {
                                (keeper, answers) = (None, None);
                                next = Instant::now() + Duration::from_millis(50);
                            }
                        }
                        None => {
                            // Opening the stream renews once and waits for the answer.
                            match tokio::time::timeout(period, self.client.lease_client().keep_alive(self.id)).await {
                                Ok(Ok((k, a))) => {
                                    self.renewed(at);
                                    sent.clear();
                                    (keeper, answers) = (Some(k), Some(a));
                                }
                                Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                                    break "etcd no longer had its lease (it expired there, or was revoked)".to_owned();
                                }
                                // The member picked is down: another, soon.
                                _ => next = Instant::now() + Duration::from_millis(50),
                            }
                        }
                    }
                }
                a = answer => match a {
                    Ok(Some(r)) if r.ttl() > 0 => {
                        if let Some(at) = sent.pop_front() {
                            self.renewed(at);
                        }
                    }
                    Ok(Some(_)) => break "etcd said its lease had expired (renewals did not reach it in time)".to_owned(),
                    _ => {
                        (keeper, answers) = (None, None);
                        sent.clear();
                        next = next.min(Instant::now() + Duration::from_millis(50));
                    }
                },
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if Instant::now() >= self.deadline() {
                        break format!("it was not renewed within its ttl of {} (etcd did not answer the renewals: no quorum reachable, or this process stalled)", format_duration(self.ttl));
                    }
                }
                _ = self.stop.notified() => return,
            }
        };
        self.end(&why).await;
    }

    /// etcd acknowledged the renewal sent at `at`.
    fn renewed(&self, at: Instant) {
        if self.is_lost() {
            return;
        }
        let mut d = self.deadline.lock();
        *d = (*d).max(at + self.ttl - safety(self.ttl));
    }
}

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// The holds (key, holder) this process has of one lock, for re-entry (LOCK-08).
pub(super) type Holding = Arc<Mutex<std::collections::HashSet<(Key, u64)>>>;

/// One hold of a key on the cluster.
pub(crate) struct ClusterLease {
    pub(super) session: Arc<Session>,
    /// The holder's key in etcd and its create revision (what a release compares).
    pub(super) etcd_key: String,
    pub(super) created: i64,
    pub(super) key: Key,
    pub(super) lock: String,
    pub(super) fence: Option<Fence>,
    pub(super) holder: u64,
    pub(super) holding: Holding,
    pub(super) max_deadline: Option<(Instant, Duration)>,
    state: AtomicU8,
    why: Mutex<Option<String>>,
    notify: Notify,
    on_lost: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    max_timer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ClusterLease {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        session: Arc<Session>,
        etcd_key: String,
        created: i64,
        key: Key,
        lock: &str,
        fence: Option<Fence>,
        holder: u64,
        holding: Holding,
        max_hold: Option<(Instant, Duration)>,
    ) -> Arc<ClusterLease> {
        let l = Arc::new(ClusterLease {
            session: session.clone(),
            etcd_key,
            created,
            key,
            lock: lock.to_owned(),
            fence,
            holder,
            holding,
            max_deadline: max_hold.map(|(granted, m)| (granted + m - safety(m), m)),
            state: AtomicU8::new(HELD),
            why: Mutex::new(None),
            notify: Notify::new(),
            on_lost: Mutex::new(Vec::new()),
            max_timer: Mutex::new(None),
        });
        if let Some((at, m)) = l.max_deadline {
            let w = Arc::downgrade(&l);
            *l.max_timer.lock() = Some(runtime::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                if let Some(l) = w.upgrade() {
                    l.mark_lost(format!("it reached its maxHold of {}", format_duration(m)));
                    // The key goes to the next waiter now, not at the ttl.
                    let _ = l.delete().await;
                }
            }));
        }
        session.adopt(&l);
        l
    }

    /// The lease's id: its key's create revision, unique in the cluster.
    pub(crate) fn id(&self) -> u64 {
        self.created as u64
    }
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.fence
    }
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }
    /// True once lost, also when its deadline passed and the runtime's
    /// timer has not run yet (a process just woken from a stop).
    pub(crate) fn is_lost(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            LOST => true,
            HELD => {
                let now = Instant::now();
                if let Some((m, max)) = self.max_deadline
                    && now >= m
                {
                    self.mark_lost(format!("it reached its maxHold of {}", format_duration(max)));
                } else if now >= self.session.deadline() {
                    self.mark_lost(format!("it was not renewed within its ttl of {}", format_duration(self.session.ttl)));
                }
                self.state.load(Ordering::Acquire) == LOST
            }
            _ => false,
        }
    }
    /// Resolves once lost; never while held.
    pub(crate) async fn lost(&self) {
        loop {
            let n = self.notify.notified();
            if self.is_lost() {
                return;
            }
            n.await;
        }
    }
    /// Calls `f` once when the lease is lost (at once if it is).
    pub(crate) fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        let mut fns = self.on_lost.lock();
        if self.is_lost() {
            drop(fns);
            f();
        } else {
            fns.push(f);
        }
    }
    /// Renews the session now. `lost` once lost: a late renewal never revives it.
    pub(crate) fn renew(&self) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }
    /// Until the earlier of the session's deadline and maxHold.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        let mut d = self.session.deadline();
        if let Some((m, _)) = self.max_deadline {
            d = d.min(m);
        }
        Some(d.saturating_duration_since(Instant::now()))
    }

    pub(super) fn mark_lost(&self, why: String) {
        if self.state.compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        *self.why.lock() = Some(why);
        self.notify.notify_waiters();
        let fns: Vec<_> = self.on_lost.lock().drain(..).collect();
        for f in fns {
            f();
        }
    }

    pub(crate) fn lost_error(&self) -> Error {
        let what = match self.fence {
            Some(f) => format!("the lease on key {} of {:?} (fence {f})", self.key, self.lock),
            None => format!("the permit on key {} of {:?}", self.key, self.lock),
        };
        let why = self.why.lock().clone().unwrap_or_else(|| "its key was gone from etcd".into());
        Error::lost(format!(
            "{what} was lost because {why}: another holder may have the key now; check fences where you write, and keep work within the lease"
        ))
    }

    /// Deletes the holder's key if it is still this hold's. True if it was.
    async fn delete(&self) -> Result<bool> {
        let t = Txn::new()
            .when([Compare::create_revision(self.etcd_key.clone(), CompareOp::Equal, self.created)])
            .and_then([TxnOp::delete(self.etcd_key.clone(), None)]);
        let r = bounded(self.session.timeout, "letting the key go", || async { self.session.client.kv_client().txn(t.clone()).await }).await?;
        Ok(r.succeeded())
    }

    /// Lets the key go: deletes the holder's key, started within this call;
    /// resolves once etcd has (LOCK-01). `lost` if the lease was lost or its
    /// key was gone; `unavailable` if etcd did not answer within the request
    /// timeout (it lets the key go when the lease's ttl runs out).
    pub(crate) fn release(self: &Arc<Self>) -> BoxFuture<'static, Result<()>> {
        // A deadline passed unseen is a loss, not a release (LOCK-04).
        self.is_lost();
        let was = match self.state.compare_exchange(HELD, RELEASED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => HELD,
            Err(s) => s,
        };
        if was == RELEASED {
            return Box::pin(std::future::ready(Ok(())));
        }
        if was == HELD {
            // No longer LOST-able: the callbacks will never run.
            self.on_lost.lock().clear();
        }
        self.holding.lock().remove(&(self.key.clone(), self.holder));
        if let Some(t) = self.max_timer.lock().take() {
            t.abort();
        }
        let me = self.clone();
        let job = runtime::spawn(async move {
            let gone = me.delete().await;
            match (was, gone) {
                (HELD, Ok(true)) => Ok(()),
                (HELD, Ok(false)) => Err(me.lost_error()),
                (_, Ok(_)) => Err(me.lost_error()),
                (_, Err(e)) if was == LOST => Err(Error::lost(format!("{} (and letting its key go failed: {})", me.lost_error().message(), e.message()))),
                (_, Err(e)) => Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("{}; etcd lets the key go when the lease's ttl of {} runs out", e.message(), format_duration(me.session.ttl)),
                )),
            }
        });
        Box::pin(async move { job.await.unwrap_or_else(|e| Err(Error::internal(format!("the release's task failed: {e}")))) })
    }
}
