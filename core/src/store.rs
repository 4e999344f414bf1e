//! The store: a directory, its epoch, and the engine that serves it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::channels::{BranchStatus, ChannelBuilder, Channels, RawSubscription, Resume, Scope};
use crate::error::{Error, ErrorKind, Result};
use crate::key::Key;
use crate::limits::check_name;
use crate::locks::{Holder, Kind, KeyStatus, LockBuilder, Locks, RawLease, SemaphoreBuilder, Table, Terms};
use crate::runtime;
use crate::sql::DatabaseBuilder;

/// How to open a store.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    clock_ms: Option<u64>,
}

impl OpenOptions {
    /// Default options.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }
    /// Uses `ms` as the wall clock for the epoch (tests of LOCK-02 and L8).
    #[doc(hidden)]
    pub fn clock_ms(mut self, ms: u64) -> OpenOptions {
        self.clock_ms = Some(ms);
        self
    }
}

/// A store: channels, locks, semaphores and SQL databases in one directory.
///
/// `Store::open(dir)` makes this process the store's owner: it takes an OS
/// lock on the directory, writes the new epoch to `kv.db`, and keeps channels
/// and locks in memory. Cheap to clone; the store closes when the last clone
/// is dropped or [`close`](Store::close) is called.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    epoch: u64,
    opened: Instant,
    channels: Arc<Channels>,
    locks: Locks,
    closed: AtomicBool,
    dir_lock: Mutex<Option<File>>,
    sweeper: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What [`Store::status`] reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreStatus {
    pub dir: PathBuf,
    pub pid: u32,
    pub epoch: u64,
    pub uptime_ms: u64,
    pub subscriptions: usize,
    pub channel_bytes: usize,
    pub branches: Vec<BranchStatus>,
    pub locks: Vec<KeyStatus>,
}

impl Store {
    /// Opens (creating it if needed) the store directory `dir` and owns it.
    ///
    /// Errors: `owned` when another live process owns the directory (it is
    /// free again once that process exits or is killed), `io` when the
    /// directory cannot be made or locked, `sql` when `kv.db` is unreadable.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir, OpenOptions::default())
    }

    /// Like [`open`](Store::open), with options.
    pub fn open_with(dir: impl AsRef<Path>, opts: OpenOptions) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&format!("could not make the store directory {}", dir.display()), e))?;
        let lock = take_dir_lock(&dir)?;
        let epoch = next_epoch(&dir, opts.clock_ms)?;
        let inner = Arc::new(Inner {
            dir,
            epoch,
            opened: Instant::now(),
            channels: Arc::new(Channels::new()),
            locks: Locks::new(epoch),
            closed: AtomicBool::new(false),
            dir_lock: Mutex::new(Some(lock)),
            sweeper: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner.channels);
        let sweeper = runtime::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let Some(ch) = weak.upgrade() else { return };
                ch.sweep(Instant::now());
            }
        });
        *inner.sweeper.lock() = Some(sweeper.abort_handle());
        Ok(Store { inner })
    }

    /// Connects to a store owned by another process, at `address`:
    /// `unix:PATH` (the owner serves `unix:<dir>/tinystore.sock`) or
    /// `tcp:HOST:PORT` with a token. The same API as an owned store.
    ///
    /// Not available yet: errors with `invalid` until the server lands.
    pub fn connect(address: &str) -> Result<Store> {
        Err(Error::invalid(format!("connect({address:?}): connecting to another process's store is not built yet; open the directory instead")))
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// This open's epoch: milliseconds since 1970 at open, or the previous
    /// epoch plus one if that is larger. The high 64 bits of every fence.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Closes the store: subscriptions end, held keys are let go (their
    /// holders see their leases lost), waiters get `closed`, and the directory
    /// is free for another owner. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// A channel of messages of type `T`, carried as JSON.
    pub fn channel<T>(&self, name: &str) -> ChannelBuilder<T> {
        ChannelBuilder::new(self.clone(), name)
    }

    /// A lock: one holder of a key at a time, with fences.
    pub fn lock(&self, name: &str) -> LockBuilder {
        LockBuilder::new(self.clone(), name)
    }

    /// A semaphore: up to `limit` holders of a key at a time.
    pub fn semaphore(&self, name: &str) -> SemaphoreBuilder {
        SemaphoreBuilder::new(self.clone(), name)
    }

    /// A SQL database of the store: the file `<dir>/<name>.db`.
    pub fn database(&self, name: &str) -> DatabaseBuilder {
        DatabaseBuilder::new(self.clone(), name)
    }

    /// What the store holds now: subscribers and their branches, held keys
    /// with fences and waiters.
    pub fn status(&self) -> StoreStatus {
        let i = &self.inner;
        StoreStatus {
            dir: i.dir.clone(),
            pid: std::process::id(),
            epoch: i.epoch,
            uptime_ms: i.opened.elapsed().as_millis() as u64,
            subscriptions: i.channels.subscription_count(),
            channel_bytes: i.channels.kept_bytes(),
            branches: i.channels.status(),
            locks: i.locks.status(),
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() { Err(Error::closed()) } else { Ok(()) }
    }

    /// Publishes JSON bytes to a branch (the bindings' boundary). Errors:
    /// `invalid` (name or key out of rule), `limit` (over 1 MiB), `closed`.
    pub async fn publish_raw(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.publish_now(channel, branch, data)
    }

    /// Publishes at once, in this process.
    pub(crate) fn publish_now(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.check_open()?;
        check_name("channel", channel)?;
        branch.iter().try_for_each(Key::check)?;
        self.inner.channels.publish(channel, branch, data).map(|_| ())
    }

    /// Subscribes to a branch and gives a subscription to pull from (the
    /// bindings' boundary). Errors: `invalid`, `limit` (10,000 subscriptions), `closed`.
    pub async fn subscribe_raw(
        &self,
        channel: &str,
        branch: &[Key],
        scope: Scope,
        resume: Option<Resume>,
    ) -> Result<RawSubscription> {
        self.check_open()?;
        check_name("channel", channel)?;
        branch.iter().try_for_each(Key::check)?;
        let (sub, told) = self.inner.channels.subscribe(channel, branch, scope, resume)?;
        if let Some(m) = told {
            sub.tell_first(m);
        }
        Ok(sub)
    }

    /// The engine's handle to the lock or semaphore `name` (the bindings'
    /// boundary). Errors: `invalid`, `conflict` (another kind or limit), `closed`.
    pub fn lock_raw(&self, name: &str, kind: Kind) -> Result<RawLock> {
        self.check_open()?;
        check_name(if kind == Kind::Lock { "lock" } else { "semaphore" }, name)?;
        Ok(RawLock { table: self.inner.locks.table(name, kind)?, _store: self.clone() })
    }
}

impl Inner {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(s) = self.sweeper.lock().take() {
            s.abort();
        }
        self.channels.close();
        self.locks.close();
        self.dir_lock.lock().take();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

/// A lock or semaphore of a store, as the bindings reach it.
#[derive(Clone)]
pub struct RawLock {
    table: Arc<Table>,
    _store: Store,
}

impl RawLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.table.name()
    }
    /// Lock or semaphore, and its limit.
    pub fn kind(&self) -> Kind {
        self.table.kind()
    }
    /// Takes `key`, waiting up to `wait` in line (LOCK-03). In the owning
    /// process `terms.ttl` does not apply: a lease ends with its holder's
    /// function, or at `terms.max_hold` (LOCK-07, LOCK-06).
    pub async fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> Result<RawLease> {
        key.check()?;
        self.table.acquire(key, holder, Terms { ttl: None, ..terms }, wait).await
    }
    /// Takes `key` at once if it is free and nobody waits for it; `None` when
    /// the caller must wait in line through [`acquire`](Self::acquire). A
    /// fast path that never waits and never yields. Errors: `conflict` when
    /// `holder` already holds or waits for the key, `invalid`, `closed`.
    pub fn acquire_now(&self, key: &Key, holder: Holder, terms: Terms) -> Result<Option<RawLease>> {
        key.check()?;
        self.table.acquire_now(key, holder, Terms { ttl: None, ..terms })
    }
    /// Takes `key` if it is free now; `None` otherwise. Never waits.
    pub async fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> Result<Option<RawLease>> {
        key.check()?;
        self.table.try_acquire(key, holder, Terms { ttl: None, ..terms })
    }
}

fn take_dir_lock(dir: &Path) -> Result<File> {
    let path = dir.join("owner.lock");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&format!("could not open {}", path.display()), e))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::Owned,
                format!(
                    "the store {} is owned by another process (pid {}): connect to it, or stop that process first",
                    dir.display(),
                    pid.trim()
                ),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&format!("could not lock {}", path.display()), e)),
    }
    f.set_len(0).and_then(|_| f.write_all(std::process::id().to_string().as_bytes())).map_err(|e| Error::io("could not write owner.lock", e))?;
    Ok(f)
}

/// Writes and returns this open's epoch: `max(now_ms, previous + 1)`, synced
/// to `kv.db` before any lease is given (LOCK-02).
fn next_epoch(dir: &Path, clock_ms: Option<u64>) -> Result<u64> {
    let mut db = rusqlite::Connection::open(dir.join("kv.db"))?;
    db.pragma_update(None, "synchronous", "FULL")?;
    db.busy_timeout(Duration::from_secs(5))?;
    let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute("create table if not exists kv (key text primary key, value any not null)", [])?;
    let prev: Option<i64> = tx
        .query_row("select value from kv where key = 'epoch'", [], |r| r.get(0))
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
    let now = clock_ms.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0));
    let epoch = match prev {
        Some(p) => now.max(p as u64 + 1),
        None => now.max(1),
    };
    tx.execute("insert into kv (key, value) values ('epoch', ?1) on conflict (key) do update set value = excluded.value", [epoch as i64])?;
    tx.commit()?;
    Ok(epoch)
}

/// Milliseconds since 1970 of `t`: for timestamps in SQL rows.
pub fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
