//! The typed Rust API of locks and semaphores.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::sync::Arc;

use crate::api::backend::LockBackend;
use crate::api::lease::RawLease;
use crate::engine::locks::{Holder, Kind, Terms};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::{DEFAULT_TTL, DEFAULT_WAIT, check_name, check_positive, check_ttl, semaphore_limit};
use crate::runtime;
use crate::api::store::Store;

static NEXT_HOLDER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_HOLDER: Cell<u64> = const { Cell::new(0) };
}

/// The holder a Rust thread is: a `hold` nested in a `hold` of the same key
/// on one thread would wait on itself, so it fails at once (LOCK-08).
fn thread_holder() -> Holder {
    THREAD_HOLDER.with(|h| {
        if h.get() == 0 {
            h.set(Holder::unique().0);
        }
        Holder(h.get())
    })
}

impl Holder {
    /// A holder id no other call of this process got.
    pub fn unique() -> Holder {
        Holder(NEXT_HOLDER.fetch_add(1, Ordering::Relaxed) | (1 << 63))
    }
}

/// LockOptions of a lock or semaphore handle, checked when the handle is made
/// (NAMES): ttl 1 s to 1 h (default 30 s), `max_hold` positive (default
/// none), `wait` positive (default 10 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease ttl over a connection.
    pub ttl: Duration,
    /// No lease outlasts this.
    pub max_hold: Option<Duration>,
    /// How long `hold` waits for the key.
    pub wait: Duration,
}

impl LockOptions {
    /// Checks the ranges; errors with `invalid` and an example.
    pub fn check(self) -> Result<LockOptions> {
        check_ttl(self.ttl)?;
        if let Some(m) = self.max_hold {
            check_positive("maxHold", m)?;
        }
        check_positive("wait", self.wait)?;
        Ok(self)
    }
}

impl LockOptions {
    /// The lease terms these options give a hold.
    pub fn terms(&self) -> Terms {
        Terms { ttl: Some(self.ttl), max_hold: self.max_hold }
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions { ttl: DEFAULT_TTL, max_hold: None, wait: DEFAULT_WAIT }
    }
}

// Here, next to the builders it makes, so the store module does not
// import this one (no import circle: core/tests/layers.rs).
impl Store {
    /// A lock: one holder of a key at a time, with fences.
    pub fn lock(&self, name: &str) -> LockBuilder {
        LockBuilder::new(self.clone(), name)
    }

    /// A semaphore: up to `limit` holders of a key at a time.
    pub fn semaphore(&self, name: &str) -> SemaphoreBuilder {
        SemaphoreBuilder::new(self.clone(), name)
    }

    /// The engine's handle to the lock or semaphore `name` (the bindings'
    /// boundary). Over a connection this asks the owner (one round trip), so
    /// another limit is refused here too. Errors: `invalid`, `conflict`
    /// (another kind or limit), `closed`.
    pub fn lock_raw(&self, name: &str, kind: Kind) -> Result<RawLock> {
        runtime::block_on(self.lock_raw_async(name, kind))
    }

    /// As [`lock_raw`](Self::lock_raw), without blocking the calling thread:
    /// for event loops, over a connection.
    pub async fn lock_raw_async(&self, name: &str, kind: Kind) -> Result<RawLock> {
        self.check_open()?;
        check_kind(name, kind)?;
        let inner = self.backend().lock(name, kind).await?;
        Ok(RawLock::new(inner, self.clone()))
    }
}

/// Checks a lock's or semaphore's name, and a semaphore's limit (1 or more).
fn check_kind(name: &str, kind: Kind) -> Result<()> {
    match kind {
        Kind::Lock => check_name("lock", name),
        Kind::Semaphore { limit } => {
            check_name("semaphore", name)?;
            semaphore_limit(f64::from(limit), limit).map(drop)
        }
    }
}

/// Builds a [`Lock`]: `store.lock("summaries").ttl(..).max_hold(..).wait(..).open()?`.
#[must_use = "call .open() to get the lock"]
pub struct LockBuilder {
    store: Store,
    name: String,
    s: LockOptions,
}

impl LockBuilder {
    pub(crate) fn new(store: Store, name: &str) -> LockBuilder {
        LockBuilder { store, name: name.to_owned(), s: LockOptions::default() }
    }
    /// A lease over a connection lasts this long from its last renewal, and
    /// is renewed every third of it (LOCK-05). 1 s to 1 h; default 30 s. In
    /// the owning process a lease ends only with its function (LOCK-07).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.s.ttl = ttl;
        self
    }
    /// No lease outlasts this, in-process or connected (LOCK-06). Positive;
    /// default none.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.s.max_hold = Some(max_hold);
        self
    }
    /// How long `hold` waits for the key. Positive; default 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.s.wait = wait;
        self
    }
    /// Checks the name and durations and gives the lock. Errors: `invalid`
    /// (name out of rule, ttl outside 1 s to 1 h, a zero wait or maxHold),
    /// `conflict` (the name is a semaphore), `closed`.
    pub fn open(self) -> Result<Lock> {
        check_name("lock", &self.name)?;
        let s = self.s.check()?;
        let raw = self.store.lock_raw(&self.name, Kind::Lock)?;
        Ok(Lock { raw, s })
    }
}

/// A lock: one holder of a key at a time, each lease with a fence.
#[derive(Clone)]
pub struct Lock {
    raw: RawLock,
    s: LockOptions,
}

/// The lease a `hold` function gets.
pub struct Lease {
    raw: RawLease,
}

impl Lease {
    /// The lease's fence: larger than every fence the store gave before,
    /// across restarts too (LOCK-02).
    pub fn fence(&self) -> Fence {
        self.raw.fence().expect("a lock's lease has a fence")
    }
    /// The key held.
    pub fn key(&self) -> &Key {
        self.raw.key()
    }
    /// True once the lease was lost (`maxHold`, ttl, the store closed): stop
    /// writing; the `hold` will end with a `lost` error.
    pub fn is_lost(&self) -> bool {
        self.raw.is_lost()
    }
    /// Time until the lease runs out, where it can.
    pub fn time_left(&self) -> Option<Duration> {
        self.raw.time_left()
    }
    /// The engine's lease underneath.
    pub fn raw(&self) -> &RawLease {
        &self.raw
    }
}

impl Lock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.raw.name()
    }

    /// The engine's lock underneath (the bindings' boundary): the name,
    /// options and kind were checked when this handle was made.
    pub fn raw(&self) -> &RawLock {
        &self.raw
    }

    /// Waits for `key` (up to the lock's `wait`, 10 s by default), runs `f`
    /// with the lease, and lets the key go when `f` returns, returns an error
    /// or panics. Returns what `f` returns; `f`'s own error reaches the caller
    /// unchanged (LOCK-04).
    ///
    /// Errors (as `E`): `timeout` when the key stayed held for the whole wait
    /// (`f` does not run), `lost` when the lease was lost while `f` ran,
    /// `conflict` when this thread already holds `key`, `invalid` for a key
    /// out of rule, `closed`.
    pub fn hold<T, E: From<Error>>(&self, key: impl Into<Key>, f: impl FnOnce(&Lease) -> Result<T, E>) -> Result<T, E> {
        let key = key.into();
        key.check()?;
        let raw = acquire(&self.raw, key, self.terms(), self.s.wait)?;
        run(Lease { raw }, |l| l.raw, f)
    }

    /// Like [`hold`](Self::hold) with another `wait` for this call.
    pub fn hold_wait<T, E: From<Error>>(
        &self,
        key: impl Into<Key>,
        wait: Duration,
        f: impl FnOnce(&Lease) -> Result<T, E>,
    ) -> Result<T, E> {
        check_positive("wait", wait)?;
        Lock { raw: self.raw.clone(), s: LockOptions { wait, ..self.s } }.hold(key, f)
    }

    /// Runs `f` only if `key` is free now: `Ok(Some(value))` when it ran,
    /// `Ok(None)` at once when the key is held (also by this thread). Never
    /// waits. Errors as [`hold`](Self::hold), without `timeout`.
    pub fn try_hold<T, E: From<Error>>(
        &self,
        key: impl Into<Key>,
        f: impl FnOnce(&Lease) -> Result<T, E>,
    ) -> Result<Option<T>, E> {
        let key = key.into();
        key.check()?;
        match runtime::block_on(self.raw.try_acquire(key, thread_holder(), self.terms()))? {
            None => Ok(None),
            Some(raw) => run(Lease { raw }, |l| l.raw, f).map(Some),
        }
    }

    fn terms(&self) -> Terms {
        Terms { ttl: Some(self.s.ttl), max_hold: self.s.max_hold }
    }
}

/// Takes the key on this thread: at once when free, else waiting in line.
fn acquire(raw: &RawLock, key: Key, terms: Terms, wait: Duration) -> Result<RawLease> {
    let holder = thread_holder();
    match raw.acquire_now(&key, holder, terms)? {
        Some(lease) => Ok(lease),
        None => runtime::block_on(raw.acquire(key, holder, terms, wait)),
    }
}

/// Runs `f` under the lease, then ends it ([`end_of_hold`]).
fn run<L, T, E: From<Error>>(lease: L, raw: impl FnOnce(L) -> RawLease, f: impl FnOnce(&L) -> Result<T, E>) -> Result<T, E> {
    let out = f(&lease);
    let ended = end_of_hold(raw(lease), out.is_err());
    let v = out?;
    ended?;
    Ok(v)
}

/// Ends a hold, for every binding alike: lets the key go, and gives the
/// error the hold ends with. A lease lost while the body ran is a `lost`
/// error even if the body succeeded (a release never pretends a lost lease
/// was held); when the body failed, its own error wins and this is `Ok`
/// (LOCK-04). Returns once the store let the key go (LOCK-01); blocks: from
/// async code or a host's event loop use [`end_of_hold_async`].
pub fn end_of_hold(lease: RawLease, body_failed: bool) -> Result<()> {
    let released = lease.release();
    if body_failed { Ok(()) } else { released }
}

/// As [`end_of_hold`], without blocking: the release is sent within this
/// call (later requests on the connection follow it, none waits for it), and
/// the future resolves with the hold's outcome once the store let the key go.
pub fn end_of_hold_async(lease: RawLease, body_failed: bool) -> impl Future<Output = Result<()>> + Send + 'static {
    let released = lease.release_async();
    async move {
        let released = released.await;
        if body_failed { Ok(()) } else { released }
    }
}

/// Builds a [`Semaphore`]: `store.semaphore("exports").limit(3).open()?`.
#[must_use = "call .open() to get the semaphore"]
pub struct SemaphoreBuilder {
    store: Store,
    name: String,
    limit: u32,
    s: LockOptions,
}

impl SemaphoreBuilder {
    pub(crate) fn new(store: Store, name: &str) -> SemaphoreBuilder {
        SemaphoreBuilder { store, name: name.to_owned(), limit: 1, s: LockOptions::default() }
    }
    /// How many permits of a key at once: 1 or more; default 1. It belongs to
    /// the semaphore: opening the name again with another limit is a
    /// `conflict` error (LOCK-08).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
    /// As [`LockBuilder::ttl`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.s.ttl = ttl;
        self
    }
    /// As [`LockBuilder::max_hold`].
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.s.max_hold = Some(max_hold);
        self
    }
    /// As [`LockBuilder::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.s.wait = wait;
        self
    }
    /// Checks and gives the semaphore. Errors: `invalid` (as for locks, or a
    /// limit of 0), `conflict` (another limit, or the name is a lock), `closed`.
    pub fn open(self) -> Result<Semaphore> {
        check_kind(&self.name, Kind::Semaphore { limit: self.limit })?;
        let s = self.s.check()?;
        let raw = self.store.lock_raw(&self.name, Kind::Semaphore { limit: self.limit })?;
        Ok(Semaphore { raw, s })
    }
}

/// A semaphore: up to `limit` holders of a key at once; permits carry no
/// fence (three valid holders would refuse each other).
#[derive(Clone)]
pub struct Semaphore {
    raw: RawLock,
    s: LockOptions,
}

/// The permit a semaphore's `hold` function gets.
pub struct Permit {
    raw: RawLease,
}

impl Permit {
    /// The key held.
    pub fn key(&self) -> &Key {
        self.raw.key()
    }
    /// True once the permit was lost (`maxHold`, ttl, the store closed).
    pub fn is_lost(&self) -> bool {
        self.raw.is_lost()
    }
}

impl Semaphore {
    /// The engine's semaphore underneath (the bindings' boundary): the name,
    /// limit and options were checked when this handle was made.
    pub fn raw(&self) -> &RawLock {
        &self.raw
    }

    /// As [`Lock::hold`], with a permit.
    pub fn hold<T, E: From<Error>>(&self, key: impl Into<Key>, f: impl FnOnce(&Permit) -> Result<T, E>) -> Result<T, E> {
        let key = key.into();
        key.check()?;
        let terms = Terms { ttl: Some(self.s.ttl), max_hold: self.s.max_hold };
        let raw = acquire(&self.raw, key, terms, self.s.wait)?;
        run(Permit { raw }, |p| p.raw, f)
    }

    /// As [`Lock::try_hold`], with a permit.
    pub fn try_hold<T, E: From<Error>>(
        &self,
        key: impl Into<Key>,
        f: impl FnOnce(&Permit) -> Result<T, E>,
    ) -> Result<Option<T>, E> {
        let key = key.into();
        key.check()?;
        let terms = Terms { ttl: Some(self.s.ttl), max_hold: self.s.max_hold };
        match runtime::block_on(self.raw.try_acquire(key, thread_holder(), terms))? {
            None => Ok(None),
            Some(raw) => run(Permit { raw }, |p| p.raw, f).map(Some),
        }
    }
}

/// Where a lease a binding holds is: held, let go, or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held: its body may go on.
    Held,
    /// Let go by its holder, before anything took it away.
    Released,
    /// Lost (ttl, `maxHold`, the store closed), whether ended since or not.
    Lost,
}

/// A lease as a binding keeps it for its host's lease object: the state,
/// the end of the hold and why it was lost all come from here, so no
/// binding rebuilds them. `&self` throughout: share it behind an `Arc`.
pub struct HeldLease {
    raw: parking_lot::Mutex<Option<RawLease>>,
    fence: Option<Fence>,
    key: Key,
    state: Arc<StateCell>,
    /// Why it was lost, kept once the lease is ended.
    lost: parking_lot::Mutex<Option<Error>>,
}

/// A [`HeldLease`]'s state, shared with the lease's on-lost callback. An
/// atomic and one `Notify` rather than a `watch` channel: a hold pays for a
/// state change on every end, and `watch` wakes eight `Notify`s each time
/// (docs/performance.md, "HeldLease's state").
struct StateCell {
    state: std::sync::atomic::AtomicU8,
    changed: tokio::sync::Notify,
    /// Whether the lease's on-lost callback was asked for: only by
    /// [`HeldLease::ended`], so a hold nobody watches registers none.
    watched: std::sync::atomic::AtomicBool,
}

impl StateCell {
    const HELD: u8 = 0;
    const RELEASED: u8 = 1;
    const LOST: u8 = 2;

    fn get(&self) -> LeaseState {
        match self.state.load(std::sync::atomic::Ordering::SeqCst) {
            Self::HELD => LeaseState::Held,
            Self::RELEASED => LeaseState::Released,
            _ => LeaseState::Lost,
        }
    }

    /// Leaves `Held` for `to`; nothing if it has left already.
    fn leave_held(&self, to: LeaseState) {
        let to = match to {
            LeaseState::Held => return,
            LeaseState::Released => Self::RELEASED,
            LeaseState::Lost => Self::LOST,
        };
        use std::sync::atomic::Ordering::SeqCst;
        if self.state.compare_exchange(Self::HELD, to, SeqCst, SeqCst).is_ok() {
            self.changed.notify_waiters();
        }
    }
}

impl HeldLease {
    /// Keeps `raw`, and follows it to its end.
    pub fn new(raw: RawLease) -> HeldLease {
        let state = Arc::new(StateCell { state: StateCell::HELD.into(), changed: tokio::sync::Notify::new(), watched: false.into() });
        HeldLease {
            fence: raw.fence(),
            key: raw.key().clone(),
            raw: parking_lot::Mutex::new(Some(raw)),
            state,
            lost: parking_lot::Mutex::new(None),
        }
    }

    /// The fence; `None` for a semaphore's permit.
    pub fn fence(&self) -> Option<Fence> {
        self.fence
    }

    /// The key held.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Held, released or lost. A lease over a connection past its deadline
    /// is lost now, even before its timer ran.
    pub fn state(&self) -> LeaseState {
        if let Some(raw) = self.raw.lock().as_ref()
            && raw.is_lost()
        {
            self.state.leave_held(LeaseState::Lost);
        }
        self.state.get()
    }

    /// True once lost (see [`state`](Self::state)).
    pub fn is_lost(&self) -> bool {
        self.state() == LeaseState::Lost
    }

    /// True until the hold was ended ([`end`](Self::end)), lost or not.
    pub fn is_held(&self) -> bool {
        self.raw.lock().is_some()
    }

    /// The `lost` error of this lease, once lost (also after it was ended).
    pub fn lost_error(&self) -> Option<Error> {
        if let Some(e) = self.lost.lock().clone() {
            return Some(e);
        }
        self.raw.lock().as_ref().filter(|r| r.is_lost()).map(RawLease::lost_error)
    }

    /// Time until the lease runs out, where it can; `None` once ended.
    pub fn time_left(&self) -> Option<Duration> {
        self.raw.lock().as_ref().and_then(RawLease::time_left)
    }

    /// Calls `f` once, when the lease is lost (at once if it is); never for
    /// a lease let go first (then `f` is dropped uncalled when it ends).
    pub fn on_lost(&self, f: impl FnOnce() + Send + 'static) {
        if let Some(raw) = self.raw.lock().as_ref() {
            raw.on_lost(f)
        }
    }

    /// Ends the hold ([`end_of_hold`]): the error to raise when the body
    /// ended, given whether the body itself failed. Returns once the store
    /// let the key go (LOCK-01); blocks, so a binding on an event loop uses
    /// [`end_async`](Self::end_async). Later calls do nothing.
    pub fn end(&self, body_failed: bool) -> Result<()> {
        let Some(raw) = self.take() else { return Ok(()) };
        let released = raw.release();
        self.ended_with(&released);
        if body_failed { Ok(()) } else { released }
    }

    /// As [`end`](Self::end), without blocking: the release is sent within
    /// this call, and the future resolves with the hold's outcome once the
    /// store let the key go (LOCK-01). A release cut off before its answer
    /// is sent again after a reconnect with the lease id and fence; past the
    /// request timeout it ends with `closed`, saying when the ttl lets the
    /// key go. Later calls resolve to `Ok` at once.
    pub fn end_async(self: &Arc<Self>, body_failed: bool) -> impl Future<Output = Result<()>> + Send + 'static {
        let released = self.take().map(RawLease::release_async);
        let me = self.clone();
        async move {
            let Some(released) = released else { return Ok(()) };
            let released = released.await;
            me.ended_with(&released);
            if body_failed { Ok(()) } else { released }
        }
    }

    /// Takes the lease to end it, noting first whether it was lost.
    fn take(&self) -> Option<RawLease> {
        let raw = self.raw.lock().take()?;
        if raw.is_lost() {
            *self.lost.lock() = Some(raw.lost_error());
        }
        Some(raw)
    }

    /// The state once the release was answered: lost if it was, or the
    /// store said so, else released.
    fn ended_with(&self, released: &Result<()>) {
        if let Err(e) = released
            && e.kind() == ErrorKind::Lost
        {
            self.lost.lock().get_or_insert_with(|| e.clone());
        }
        let lost = self.lost.lock().is_some();
        self.state.leave_held(if lost { LeaseState::Lost } else { LeaseState::Released });
    }

    /// Resolves when the lease is no longer held: `Lost` or `Released`.
    pub async fn ended(&self) -> LeaseState {
        if !self.state.watched.swap(true, Ordering::AcqRel)
            && let Some(raw) = self.raw.lock().as_ref()
        {
            let told = self.state.clone();
            raw.on_lost(move || told.leave_held(LeaseState::Lost));
        }
        loop {
            // Enabled before the state is read, so a change between the two
            // still wakes it.
            let mut changed = std::pin::pin!(self.state.changed.notified());
            changed.as_mut().enable();
            match self.state() {
                LeaseState::Held => changed.await,
                s => return s,
            }
        }
    }
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease").field("key", &self.key).field("fence", &self.fence).field("state", &self.state()).finish()
    }
}

/// A lock or semaphore handle as the bindings make it: its name, kind and
/// options checked when made (NAMES), and declared to the store once, on
/// first use. In the owning process the declare is made at once (no round
/// trip); over a connection it is started in the background when the handle
/// is made, and the first [`get`](Self::get) awaits its answer, so making a
/// handle never waits for the owner, and a `conflict` (another kind or
/// limit) surfaces at the first hold at the latest. A declare that failed
/// otherwise (the connection was down, a timeout) is asked again at the
/// next use.
pub struct LockHandle {
    store: Store,
    name: String,
    kind: Kind,
    opts: LockOptions,
    raw: tokio::sync::OnceCell<RawLock>,
    /// The declare started when the handle was made; taken by the first use.
    declare: parking_lot::Mutex<Option<tokio::task::JoinHandle<Result<RawLock>>>>,
}

impl LockHandle {
    /// Checks `name`, `kind` (a semaphore's limit: 1 or more), `opts` and
    /// that `store` is open, then declares (owned) or starts declaring
    /// (connected). Errors: `invalid`, `conflict` (owned: another kind or
    /// limit), `closed`.
    pub fn new(store: &Store, name: &str, kind: Kind, opts: LockOptions) -> Result<LockHandle> {
        check_kind(name, kind)?;
        let opts = opts.check()?;
        store.check_open()?;
        let mut h = LockHandle {
            store: store.clone(),
            name: name.to_owned(),
            kind,
            opts,
            raw: tokio::sync::OnceCell::new(),
            declare: parking_lot::Mutex::new(None),
        };
        if store.is_owner() {
            h.raw = tokio::sync::OnceCell::new_with(Some(store.lock_raw(name, kind)?));
        } else {
            let (store, name) = (store.clone(), name.to_owned());
            *h.declare.get_mut() = Some(runtime::spawn(async move { store.lock_raw_async(&name, kind).await }));
        }
        Ok(h)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lock or semaphore, and its limit.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The checked options.
    pub fn options(&self) -> LockOptions {
        self.opts
    }

    /// The engine's lock, declared once: at once when made, else the
    /// declare's answer.
    pub async fn get(&self) -> Result<&RawLock> {
        if let Some(raw) = self.raw.get() {
            return Ok(raw);
        }
        self.raw
            .get_or_try_init(|| async {
                let started = self.declare.lock().take();
                if let Some(task) = started {
                    match task.await {
                        Ok(Ok(raw)) => return Ok(raw),
                        // A conflict is final; anything else is asked once more, now.
                        Ok(Err(e)) if e.kind() == ErrorKind::Conflict => return Err(e),
                        Ok(Err(_)) | Err(_) => {}
                    }
                }
                self.store.lock_raw_async(&self.name, self.kind).await
            })
            .await
    }

    /// The engine's lock if it was declared already (no wait).
    pub fn declared(&self) -> Option<&RawLock> {
        self.raw.get()
    }

    /// As [`get`](Self::get), blocking the calling thread (not an event
    /// loop's): for bindings whose open waits for the owner's answer.
    pub fn get_blocking(&self) -> Result<&RawLock> {
        runtime::block_on(self.get())
    }
}

/// A lock or semaphore of a store, as the bindings reach it.
#[derive(Clone)]
pub struct RawLock {
    inner: Arc<dyn LockBackend>,
    _store: Store,
}

impl RawLock {
    pub(crate) fn new(inner: Arc<dyn LockBackend>, store: Store) -> RawLock {
        RawLock { inner, _store: store }
    }
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }
    /// Lock or semaphore, and its limit.
    pub fn kind(&self) -> Kind {
        self.inner.kind()
    }
    /// Takes `key`, waiting up to `wait` in line (LOCK-03). In the owning
    /// process `terms.ttl` does not apply: a lease ends with its holder's
    /// function, or at `terms.max_hold` (LOCK-07, LOCK-06). Over a
    /// connection the lease lasts its ttl from its last renewal, renewed by
    /// the engine every third of it (LOCK-05).
    pub async fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> Result<RawLease> {
        key.check()?;
        self.inner.acquire(key, holder, terms, wait).await.map(RawLease::new)
    }
    /// Takes `key` at once if it is free and nobody waits for it; `None` when
    /// the caller must wait in line through [`acquire`](Self::acquire). A
    /// fast path that never waits and never yields (over a connection it
    /// always says `None`). Errors: `conflict` when `holder` already holds or
    /// waits for the key, `invalid`, `closed`.
    pub fn acquire_now(&self, key: &Key, holder: Holder, terms: Terms) -> Result<Option<RawLease>> {
        key.check()?;
        Ok(self.inner.acquire_now(key, holder, terms)?.map(RawLease::new))
    }
    /// Takes `key` if it is free now; `None` otherwise. Never waits.
    pub async fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> Result<Option<RawLease>> {
        key.check()?;
        Ok(self.inner.try_acquire(key, holder, terms).await?.map(RawLease::new))
    }
}
