//! Locks and semaphores: one holder of a key at a time (or `limit` permits).
//!
//! Per (lock, key) the engine keeps the current holders and a FIFO queue of
//! waiters. Giving a lease is a change in memory; its fence comes from a
//! counter under the store's epoch. Expiry (ttl of a connected lease,
//! `maxHold`, a waiter's `wait`) is driven by timers on the engine's runtime,
//! not by someone happening to call in.

mod lease;

use std::collections::VecDeque;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::oneshot;

pub(crate) use self::lease::LocalLease;
pub(crate) use self::lease::{LeaseShared, LostReason};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::format_duration;
use crate::runtime;

/// Who holds or waits: the engine refuses a `hold` of a key its holder
/// already holds (LOCK-08). `Holder(0)` is nobody in particular.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Holder(pub u64);

/// How long a lease may last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terms {
    /// Renew within this or lose the lease (leases over a connection). `None`
    /// in the owning process, where a lease ends only with its function.
    pub ttl: Option<Duration>,
    /// No lease outlasts this, renewed or not (LOCK-06).
    pub max_hold: Option<Duration>,
}

/// A lock (one holder) or a semaphore (`limit` permits, no fences).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One holder at a time; every lease has a fence.
    Lock,
    /// Up to `limit` holders at a time; permits have no fence.
    Semaphore {
        /// How many permits at once.
        limit: u32,
    },
}

impl Kind {
    /// The wire's `limit`: 0 for a lock, else a semaphore's limit.
    pub(crate) fn wire_limit(self) -> u32 {
        match self {
            Kind::Lock => 0,
            Kind::Semaphore { limit } => limit,
        }
    }

    /// The kind a wire `limit` names (absent or 0: a lock).
    pub(crate) fn from_wire(limit: Option<u32>) -> Kind {
        match limit.unwrap_or(0) {
            0 => Kind::Lock,
            limit => Kind::Semaphore { limit },
        }
    }

    fn limit(self) -> usize {
        match self {
            Kind::Lock => 1,
            Kind::Semaphore { limit } => limit as usize,
        }
    }
    fn describe(self) -> String {
        match self {
            Kind::Lock => "a lock".into(),
            Kind::Semaphore { limit } => format!("a semaphore of limit {limit}"),
        }
    }
}

/// Gives fences: the epoch in the high 64 bits, a count in the low.
pub(crate) struct Fences {
    epoch: u64,
    count: AtomicU64,
}

impl Fences {
    pub(crate) fn new(epoch: u64) -> Fences {
        Fences { epoch, count: AtomicU64::new(0) }
    }
    fn next(&self) -> Fence {
        Fence::new(self.epoch, self.count.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// The locks and semaphores of one store.
pub(crate) struct Locks {
    tables: Mutex<HashMap<String, Arc<Table>>>,
    fences: Arc<Fences>,
    ids: Arc<AtomicU64>,
    /// Locks whose leases over a connection may outlive a dead owner, with
    /// the longest ttl given (STORE-01): the grace a new owner waits.
    remote_ttls: Mutex<HashMap<String, Duration>>,
    /// Until when each such lock grants only re-presented leases.
    graces: Mutex<HashMap<String, Instant>>,
}

struct Waiter {
    id: u64,
    holder: Holder,
    terms: Terms,
    tx: Granted,
    timer: Option<WaitTimer>,
    /// The end of its wait: past it, the waiter is told `timeout` even if
    /// the key comes free before its timer runs (a process frozen past it,
    /// then resumed, reads the release first).
    until: Instant,
    wait: Duration,
}

/// Called with the lease when a waiter's turn comes (or with why not): gives
/// the lease back when its waiter is gone, so the next one is served.
pub(crate) type OnGrant = Box<dyn FnOnce(Result<LocalLease>) -> Option<LocalLease> + Send>;

/// How a waiter learns its turn came.
enum Granted {
    /// A task awaits it.
    Oneshot(oneshot::Sender<Result<LocalLease>>),
    /// Called at once, under the key's lock (the server answers from there,
    /// with no task to wake in between).
    Call(OnGrant),
}

impl Granted {
    /// Gives the result; the lease comes back when nobody took it.
    fn send(self, r: Result<LocalLease>) -> Option<LocalLease> {
        match self {
            Granted::Oneshot(tx) => match tx.send(r) {
                Err(Ok(lease)) => Some(lease),
                _ => None,
            },
            Granted::Call(f) => f(r),
        }
    }
}

/// What [`Table::acquire_or_queue`] did.
pub(crate) enum Queued {
    /// The key was free: here is the lease.
    Now(LocalLease),
    /// In line with this waiter id; the callback will be called.
    InLine(u64),
}

/// A waiter's `wait` running out: kept alive by its [`Waiter`].
struct WaitTimer {
    // What the timer calls: alive while the waiter is in line.
    _due: Arc<WaitDue>,
    key: runtime::TimerKey,
}

impl WaitTimer {
    fn cancel(self) {
        runtime::cancel(self.key);
    }
}

struct WaitDue {
    table: std::sync::Weak<Table>,
    key: Key,
    id: u64,
    wait: Duration,
}

impl runtime::Due for WaitDue {
    fn due(self: Arc<Self>, _now: Instant) {
        if let Some(t) = self.table.upgrade() {
            t.waiter_timed_out(&self.key, self.id, self.wait);
        }
    }
}

#[derive(Default)]
struct KeyState {
    holders: SmallVec<[Arc<LeaseShared>; 1]>,
    waiters: VecDeque<Waiter>,
}

/// One lock or semaphore name: its keys.
pub(crate) struct Table {
    name: Arc<str>,
    kind: Kind,
    keys: Mutex<HashMap<Key, KeyState>>,
    fences: Arc<Fences>,
    ids: Arc<AtomicU64>,
    closed: std::sync::atomic::AtomicBool,
    /// Until then only re-presented leases are granted (STORE-01).
    grace: Mutex<Option<Instant>>,
    grace_timer: Mutex<Option<(Arc<GraceDue>, runtime::TimerKey)>>,
}

/// The end of a table's grace: its keys go to their waiters.
struct GraceDue(std::sync::Weak<Table>);

impl runtime::Due for GraceDue {
    fn due(self: Arc<Self>, _now: Instant) {
        if let Some(t) = self.0.upgrade() {
            t.end_grace();
        }
    }
}

/// What `status` shows of one key.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeyStatus {
    /// The lock's or semaphore's name.
    pub lock: String,
    /// The key.
    pub key: Key,
    /// Its current leases.
    pub holders: Vec<HolderStatus>,
    /// Holds waiting in line.
    pub waiters: usize,
}

/// What `status` shows of one lease.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HolderStatus {
    /// The lease's id.
    pub lease: u64,
    /// Its fence (none for a permit).
    pub fence: Option<Fence>,
    /// Who holds it.
    pub holder: Holder,
    /// Milliseconds since it was given.
    pub held_ms: u64,
    /// Milliseconds until the lease runs out, where it can (ttl or maxHold).
    pub left_ms: Option<u64>,
}

impl Locks {
    pub(crate) fn new(epoch: u64) -> Locks {
        Locks {
            tables: Mutex::new(HashMap::default()),
            fences: Arc::new(Fences::new(epoch)),
            ids: Arc::new(AtomicU64::new(1)),
            remote_ttls: Mutex::new(HashMap::default()),
            graces: Mutex::new(HashMap::default()),
        }
    }

    /// Whether a lease held over a connection is held now: its holder will
    /// re-present it to the next owner, so a clean close keeps the record
    /// of the longest ttls for that owner's grace (STORE-01).
    pub(crate) fn leases_over_connections(&self) -> bool {
        let tables: Vec<Arc<Table>> = self.tables.lock().values().cloned().collect();
        tables.iter().any(|t| t.holds_over_connections())
    }

    /// A new owner's start (STORE-01): each lock that gave leases over a
    /// connection, with the longest ttl given, grants only re-presented
    /// leases of its keys until that ttl (and a little) has passed, since
    /// a holder of the dead owner may still hold one.
    pub(crate) fn start_graces(&self, remote: Vec<(String, Duration)>) {
        let now = Instant::now();
        let mut graces = self.graces.lock();
        let mut ttls = self.remote_ttls.lock();
        for (name, ttl) in remote {
            graces.insert(name.clone(), now + ttl + Duration::from_millis(100));
            ttls.insert(name, ttl);
        }
    }

    /// Notes a ttl given over a connection; true when it is the longest yet
    /// for `name` (to be written down: only then, not per hold).
    pub(crate) fn note_remote_ttl(&self, name: &str, ttl: Duration) -> bool {
        let mut ttls = self.remote_ttls.lock();
        match ttls.get(name) {
            Some(t) if *t >= ttl => false,
            _ => {
                ttls.insert(name.to_owned(), ttl);
                true
            }
        }
    }

    /// The table for `name`, made on first use. Errors with `conflict` when
    /// the name is already a lock of another kind or a semaphore of another limit.
    pub(crate) fn table(&self, name: &str, kind: Kind) -> Result<Arc<Table>> {
        let mut tables = self.tables.lock();
        if let Some(t) = tables.get(name) {
            if t.kind != kind {
                return Err(Error::conflict(format!(
                    "{name:?} is already {} in this store; open it as such, or pick another name",
                    t.kind.describe()
                )));
            }
            return Ok(t.clone());
        }
        let grace = self.graces.lock().get(name).copied().filter(|g| *g > Instant::now());
        let t = Arc::new(Table {
            name: Arc::from(name),
            kind,
            keys: Mutex::new(HashMap::default()),
            fences: self.fences.clone(),
            ids: self.ids.clone(),
            closed: Default::default(),
            grace: Mutex::new(grace),
            grace_timer: Mutex::new(None),
        });
        if let Some(g) = grace {
            let due = Arc::new(GraceDue(Arc::downgrade(&t)));
            let key = runtime::schedule(g, Arc::downgrade(&due) as std::sync::Weak<dyn runtime::Due>);
            *t.grace_timer.lock() = Some((due, key));
        }
        tables.insert(name.to_owned(), t.clone());
        Ok(t)
    }

    /// Every lease is lost and every waiter told the store closed.
    pub(crate) fn close(&self) {
        let tables: Vec<_> = self.tables.lock().values().cloned().collect();
        for t in tables {
            t.close();
        }
    }

    pub(crate) fn status(&self) -> Vec<KeyStatus> {
        let tables: Vec<_> = self.tables.lock().values().cloned().collect();
        let now = Instant::now();
        let mut out = Vec::new();
        for t in tables {
            for (key, ks) in t.keys.lock().iter() {
                out.push(KeyStatus {
                    lock: t.name.to_string(),
                    key: key.clone(),
                    holders: ks.holders.iter().map(|l| l.status(now)).collect(),
                    waiters: ks.waiters.len(),
                });
            }
        }
        out.sort_by(|a, b| (&a.lock, &a.key).cmp(&(&b.lock, &b.key)));
        out
    }
}

impl Table {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Takes `key` now if it is free (and nobody waits), else gives `None`.
    /// A key this `holder` already holds is simply not acquired.
    pub(crate) fn try_acquire(self: &Arc<Self>, key: Key, holder: Holder, terms: Terms) -> Result<Option<LocalLease>> {
        self.check_open()?;
        let mut keys = self.keys.lock();
        let ks = keys.entry(key.clone()).or_default();
        let mine = holder != Holder(0) && ks.holders.iter().any(|l| l.holder == holder);
        if !mine && ks.holders.len() < self.kind.limit() && ks.waiters.is_empty() && !self.in_grace() {
            return Ok(Some(self.grant(&key, ks, holder, terms)));
        }
        if ks.holders.is_empty() && ks.waiters.is_empty() {
            keys.remove(&key);
        }
        Ok(None)
    }

    /// Takes `key` at once if it is free and nobody waits: `Some(lease)`;
    /// `None` when the caller must wait in line. Errors with `conflict` when
    /// `holder` already holds or waits for the key.
    pub(crate) fn acquire_now(self: &Arc<Self>, key: &Key, holder: Holder, terms: Terms) -> Result<Option<LocalLease>> {
        self.check_open()?;
        if self.in_grace() {
            return Ok(None);
        }
        let mut keys = self.keys.lock();
        match keys.get_mut(key) {
            None => {
                let ks = keys.entry(key.clone()).or_default();
                Ok(Some(self.grant(key, ks, holder, terms)))
            }
            Some(ks) => {
                self.check_not_mine(key, ks, holder)?;
                if ks.holders.len() < self.kind.limit() && ks.waiters.is_empty() {
                    return Ok(Some(self.grant(key, ks, holder, terms)));
                }
                Ok(None)
            }
        }
    }

    fn check_not_mine(&self, key: &Key, ks: &KeyState, holder: Holder) -> Result<()> {
        if holder != Holder(0)
            && (ks.holders.iter().any(|l| l.holder == holder) || ks.waiters.iter().any(|w| w.holder == holder))
        {
            return Err(Error::conflict(format!(
                "this holder already holds key {key} of {:?}: a hold inside a hold of the same key would wait on itself; use the lease you have",
                &*self.name
            )));
        }
        Ok(())
    }

    /// Takes `key`, waiting up to `wait` in line behind earlier waiters
    /// (LOCK-03). Errors: `timeout` when `wait` ran out, `conflict` when
    /// `holder` already holds or waits for the key, `closed`.
    pub(crate) async fn acquire(self: &Arc<Self>, key: Key, holder: Holder, terms: Terms, wait: Duration) -> Result<LocalLease> {
        let (tx, rx) = oneshot::channel();
        let id = match self.take_or_queue(&key, holder, terms, wait, Granted::Oneshot(tx))? {
            Queued::Now(lease) => return Ok(lease),
            Queued::InLine(id) => id,
        };
        // Leaves the queue if this future is dropped while waiting.
        let guard = LeaveQueue { table: self, key: &key, id, armed: true };
        let r = rx.await;
        let mut guard = guard;
        guard.armed = false;
        r.unwrap_or_else(|_| Err(Error::closed()))
    }

    /// Takes `key` now if free, else puts `on_grant` in line for up to
    /// `wait` (LOCK-03): it is called with the lease when its turn comes, or
    /// with `timeout` or `closed`. Leave the line with [`Table::leave_queue`].
    pub(crate) fn acquire_or_queue(self: &Arc<Self>, key: &Key, holder: Holder, terms: Terms, wait: Duration, on_grant: OnGrant) -> Result<Queued> {
        self.take_or_queue(key, holder, terms, wait, Granted::Call(on_grant))
    }

    fn take_or_queue(self: &Arc<Self>, key: &Key, holder: Holder, terms: Terms, wait: Duration, tx: Granted) -> Result<Queued> {
        self.check_open()?;
        let mut keys = self.keys.lock();
        let ks = keys.entry(key.clone()).or_default();
        self.check_not_mine(key, ks, holder)?;
        if ks.holders.len() < self.kind.limit() && ks.waiters.is_empty() && !self.in_grace() {
            return Ok(Queued::Now(self.grant(key, ks, holder, terms)));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let due = Arc::new(WaitDue { table: Arc::downgrade(self), key: key.clone(), id, wait });
        let until = Instant::now() + wait;
        let timer_key = runtime::schedule(until, Arc::downgrade(&due) as std::sync::Weak<dyn runtime::Due>);
        ks.waiters.push_back(Waiter { id, holder, terms, tx, timer: Some(WaitTimer { _due: due, key: timer_key }), until, wait });
        Ok(Queued::InLine(id))
    }

    fn waiter_timed_out(self: &Arc<Self>, key: &Key, id: u64, wait: Duration) {
        let w = {
            let mut keys = self.keys.lock();
            let Some(ks) = keys.get_mut(key) else { return };
            let Some(i) = ks.waiters.iter().position(|w| w.id == id) else { return };
            let w = ks.waiters.remove(i).expect("waiter index is valid");
            let held = !ks.holders.is_empty();
            if !held && ks.waiters.is_empty() {
                keys.remove(key);
            }
            (w, held)
        };
        let (w, held) = w;
        let e = match *self.grace.lock() {
            Some(until) if !held && Instant::now() < until => self.kept_for_the_previous_owner(key, wait, until),
            _ => self.waited_too_long(key, wait),
        };
        let _ = w.tx.send(Err(e));
    }

    fn waited_too_long(&self, key: &Key, wait: Duration) -> Error {
        waited_too_long(&self.name, key, wait)
    }

    /// A wait that ended with nobody holding the key, in the grace of a new
    /// owner (STORE-01), which lasts until `until`.
    fn kept_for_the_previous_owner(&self, key: &Key, wait: Duration, until: Instant) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "key {key} of {:?} was not given within the wait of {}: nobody holds it, but the store's owner changed, and for {} more it keeps this lock's keys for the previous owner's holders to take back (STORE-01: the longest ttl it granted them): nothing ran; retry after that, or give hold a longer wait",
                &*self.name,
                format_duration(wait),
                format_duration(until.saturating_duration_since(Instant::now()))
            ),
        )
    }

    /// True while waiter `id` is in line for `key`.
    pub(crate) fn is_waiting(&self, key: &Key, id: u64) -> bool {
        self.keys.lock().get(key).is_some_and(|ks| ks.waiters.iter().any(|w| w.id == id))
    }

    pub(crate) fn leave_queue(self: &Arc<Self>, key: &Key, id: u64) {
        let mut keys = self.keys.lock();
        let Some(ks) = keys.get_mut(key) else { return };
        if let Some(i) = ks.waiters.iter().position(|w| w.id == id) {
            let w = ks.waiters.remove(i).expect("waiter index is valid");
            if let Some(t) = w.timer {
                t.cancel();
            }
        }
        // The head of the line may have left: serve the next ones.
        self.serve(key, ks);
        if ks.holders.is_empty() && ks.waiters.is_empty() {
            keys.remove(key);
        }
    }

    fn grant(self: &Arc<Self>, key: &Key, ks: &mut KeyState, holder: Holder, terms: Terms) -> LocalLease {
        let fence = matches!(self.kind, Kind::Lock).then(|| self.fences.next());
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let shared = LeaseShared::new(self.clone(), id, key.clone(), fence, holder, terms);
        ks.holders.push(shared.clone());
        if terms.ttl.is_some() || terms.max_hold.is_some() {
            shared.start_timer();
        }
        LocalLease::new(shared)
    }

    /// Gives the key to waiters in order while there is room (after the grace).
    fn serve(self: &Arc<Self>, key: &Key, ks: &mut KeyState) {
        if self.in_grace() {
            return;
        }
        while ks.holders.len() < self.kind.limit() {
            let Some(w) = ks.waiters.pop_front() else { break };
            if let Some(t) = w.timer {
                t.cancel();
            }
            if Instant::now() >= w.until {
                // Its wait ran out before its timer could say so.
                let _ = w.tx.send(Err(self.waited_too_long(key, w.wait)));
                continue;
            }
            let lease = self.grant(key, ks, w.holder, w.terms);
            if let Some(lease) = w.tx.send(Ok(lease)) {
                // The waiter went away between asking and now.
                lease.shared().mark_released();
                ks.holders.retain(|l| !Arc::ptr_eq(l, lease.shared()));
            }
        }
    }

    /// Removes `lease` from the key's holders and serves the waiters.
    pub(crate) fn remove(self: &Arc<Self>, lease: &LeaseShared) {
        let mut keys = self.keys.lock();
        let Some(ks) = keys.get_mut(&lease.key) else { return };
        let before = ks.holders.len();
        ks.holders.retain(|l| !std::ptr::eq(&**l, lease));
        if ks.holders.len() != before {
            self.serve(&lease.key, ks);
        }
        if ks.holders.is_empty() && ks.waiters.is_empty() {
            keys.remove(&lease.key);
        }
    }

    fn check_open(&self) -> Result<()> {
        runtime::check_not_forked()?;
        if self.closed.load(Ordering::Acquire) { Err(Error::closed()) } else { Ok(()) }
    }

    /// True while leases of a dead owner may still be alive (STORE-01).
    fn in_grace(&self) -> bool {
        let mut g = self.grace.lock();
        match *g {
            Some(until) if Instant::now() < until => true,
            Some(_) => {
                *g = None;
                false
            }
            None => false,
        }
    }

    /// The grace is over: keys nobody re-presented go to their waiters.
    fn end_grace(self: &Arc<Self>) {
        *self.grace.lock() = None;
        self.grace_timer.lock().take();
        let mut keys = self.keys.lock();
        let names: Vec<Key> = keys.keys().cloned().collect();
        for k in names {
            if let Some(ks) = keys.get_mut(&k) {
                self.serve(&k, ks);
                if ks.holders.is_empty() && ks.waiters.is_empty() {
                    keys.remove(&k);
                }
            }
        }
    }

    /// Takes back a lease a holder of the dead owner re-presents, with its
    /// fence unchanged (STORE-01): only within the grace, and only while
    /// the key has room. Errors with `lost` otherwise.
    pub(crate) fn adopt(self: &Arc<Self>, key: &Key, holder: Holder, fence: Option<Fence>, terms: Terms) -> Result<LocalLease> {
        self.check_open()?;
        let refused = |why: &str| {
            Error::lost(format!("the store's owner changed and key {key} of {:?} could not be kept: {why}; take the key again", &*self.name))
        };
        if let Some(f) = fence
            && f.epoch() >= self.fences.epoch
        {
            // Taken back, it would stand above every fence given from now on.
            return Err(Error::invalid(format!(
                "fence {f} of key {key} of {:?} was not given by a previous owner of this store: its epoch {} is not below this owner's {}; a lease is taken back with the fence it was given",
                &*self.name,
                f.epoch(),
                self.fences.epoch
            )));
        }
        if !self.in_grace() {
            return Err(refused("the new owner takes leases back only for the longest ttl the previous one granted, and that time is over, or there was none"));
        }
        let mut keys = self.keys.lock();
        let ks = keys.entry(key.clone()).or_default();
        if ks.holders.len() >= self.kind.limit() {
            return Err(refused("it is held by another lease"));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let shared = LeaseShared::new(self.clone(), id, key.clone(), fence, holder, terms);
        ks.holders.push(shared.clone());
        if terms.ttl.is_some() || terms.max_hold.is_some() {
            shared.start_timer();
        }
        Ok(LocalLease::new(shared))
    }

    fn holds_over_connections(&self) -> bool {
        self.keys.lock().values().any(|ks| ks.holders.iter().any(|l| l.over_connection()))
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let drained: Vec<KeyState> = self.keys.lock().drain().map(|(_, ks)| ks).collect();
        for ks in drained {
            for l in ks.holders {
                l.mark_lost(LostReason::Closed);
            }
            for w in ks.waiters {
                if let Some(t) = w.timer {
                    t.cancel();
                }
                let _ = w.tx.send(Err(Error::closed()));
            }
        }
    }
}

struct LeaveQueue<'a> {
    table: &'a Arc<Table>,
    key: &'a Key,
    id: u64,
    armed: bool,
}

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.table.leave_queue(self.key, self.id);
        }
    }
}

/// The `timeout` of a hold whose key stayed held for its whole `wait`.
pub(crate) fn waited_too_long(lock: &str, key: &Key, wait: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("key {key} of {lock:?} {STAYED_HELD}{}: nothing ran; retry later, or give hold a longer wait", format_duration(wait)),
    )
}

/// How [`waited_too_long`]'s message names the wait, so a client that sent
/// its hold again with what was left of the wait can name the whole wait.
pub(crate) const STAYED_HELD: &str = "stayed held for the whole wait of ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_03_a_waiter_past_its_wait_is_told_timeout_even_when_its_timer_is_late() {
        let locks = Locks::new(1);
        let t = locks.table("l", Kind::Lock).expect("a lock");
        let key = Key::from("k");
        let held = t.try_acquire(key.clone(), Holder(1), Terms::default()).expect("free").expect("taken");
        let (tx, rx) = std::sync::mpsc::channel();
        let on_grant: OnGrant = Box::new(move |r| match r {
            Ok(lease) => {
                let _ = tx.send(Ok(()));
                Some(lease) // given back: nobody holds it
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                None
            }
        });
        let queued = t.acquire_or_queue(&key, Holder(2), Terms::default(), Duration::from_millis(20), on_grant).expect("queued");
        assert!(matches!(queued, Queued::InLine(_)));
        // Its timer is late (its process was frozen): it has not run when
        // the key comes free after the wait.
        let timer = t.keys.lock().get_mut(&key).and_then(|ks| ks.waiters.front_mut()).and_then(|w| w.timer.take());
        timer.expect("a wait timer").cancel();
        std::thread::sleep(Duration::from_millis(40));
        held.release().expect("released");
        let told = rx.recv_timeout(Duration::from_secs(5)).expect("the waiter was told");
        assert_eq!(told.map_err(|e| e.kind()), Err(ErrorKind::Timeout), "granted after its wait");
        assert!(t.try_acquire(key, Holder(3), Terms::default()).expect("open").is_some(), "the key is free");
    }

    /// A lease taken back must carry a fence a previous owner gave (a lower
    /// epoch): one from this owner's epoch or later would stand above the
    /// fences it gives from now on, and refuse their writers for good.
    #[test]
    fn store_01_lock_02_a_lease_taken_back_with_a_fence_no_previous_owner_gave_is_refused() {
        let locks = Locks::new(10);
        locks.start_graces(vec![("l".into(), Duration::from_secs(30))]);
        let t = locks.table("l", Kind::Lock).expect("a lock");
        let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
        for forged in [Fence::new(10, 1), Fence::new(u64::MAX, 1), Fence::new(1 << 62, 0)] {
            let e = t.adopt(&Key::from("a"), Holder(1), Some(forged), terms).map(drop).expect_err("a forged fence is refused");
            assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
            assert!(e.message().contains(&forged.to_string()) && e.message().contains("epoch"), "{e}");
        }
        let kept = t.adopt(&Key::from("a"), Holder(1), Some(Fence::new(9, u64::MAX)), terms).expect("a previous owner's fence is taken back");
        assert_eq!(kept.fence(), Some(Fence::new(9, u64::MAX)));
        assert!(locks.fences.next() > Fence::new(9, u64::MAX));
    }

    #[test]
    fn store_01_lock_03_a_wait_that_ends_in_a_new_owners_grace_says_so_not_that_the_key_stayed_held() {
        let locks = Locks::new(1);
        locks.start_graces(vec![("l".into(), Duration::from_secs(30))]);
        let t = locks.table("l", Kind::Lock).expect("a lock");
        let (tx, rx) = std::sync::mpsc::channel();
        let on_grant: OnGrant = Box::new(move |r| {
            let _ = tx.send(r.map(drop));
            None
        });
        let queued = t.acquire_or_queue(&Key::from("k"), Holder(2), Terms::default(), Duration::from_millis(20), on_grant).expect("queued");
        assert!(matches!(queued, Queued::InLine(_)), "nobody gets a key in the grace");
        let e = rx.recv_timeout(Duration::from_secs(5)).expect("the waiter was told").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(!e.message().contains("stayed held"), "{e}");
        assert!(e.message().contains("nobody holds it") && e.message().contains("owner changed") && e.message().contains("STORE-01"), "{e}");
    }
}
