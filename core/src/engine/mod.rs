//! The engine: channels and locks in memory, with their fences and timers.
//! No socket, file or client: the layers above reach it (the api layer in
//! the owning process, the server for its connections).

pub(crate) mod channels;
pub(crate) mod locks;
pub(crate) mod tickets;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::channels::{BranchStatus, Channels, LocalSubscription, Resume, Scope};
use self::locks::{KeyStatus, Kind, Locks, Table};
use self::tickets::{Held, Tickets};
use crate::base::error::{Error, Result};
use crate::base::key::Key;
use crate::base::limits::check_name;
use crate::runtime;

/// The engine of one owned store: its channels, its locks, and the epoch
/// its fences start from.
pub(crate) struct Engine {
    epoch: u64,
    opened: Instant,
    channels: Arc<Channels>,
    tickets: Arc<Tickets>,
    locks: Locks,
    closed: AtomicBool,
    sweeper: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What [`Store::status`](crate::Store::status) reports.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoreStatus {
    /// The store directory.
    pub dir: PathBuf,
    /// The owner's process id.
    pub pid: u32,
    /// The owner's epoch.
    pub epoch: u64,
    /// Milliseconds since the owner opened the store.
    pub uptime_ms: u64,
    /// Subscriptions now (at most 10,000).
    pub subscriptions: usize,
    /// Bytes all channels keep (at most 64 MiB).
    pub channel_bytes: usize,
    /// Every branch the store knows.
    pub branches: Vec<BranchStatus>,
    /// Every key held or waited for.
    pub locks: Vec<KeyStatus>,
}

impl Engine {
    /// An engine whose fences start from `epoch`; forgets idle branches
    /// every 30 s on the runtime.
    pub(crate) fn start(epoch: u64) -> Arc<Engine> {
        let channels = Arc::new(Channels::new());
        let engine = Arc::new(Engine {
            epoch,
            opened: Instant::now(),
            tickets: Tickets::new(channels.clone()),
            channels,
            locks: Locks::new(epoch),
            closed: AtomicBool::new(false),
            sweeper: Mutex::new(None),
        });
        let weak = Arc::downgrade(&engine.channels);
        let sweeper = runtime::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let Some(ch) = weak.upgrade() else { return };
                ch.sweep(Instant::now());
            }
        });
        *engine.sweeper.lock() = Some(sweeper.abort_handle());
        engine
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Ok while open, and not in a child forked after the engine started.
    pub(crate) fn check_open(&self) -> Result<()> {
        runtime::check_not_forked()?;
        if self.closed.load(Ordering::Acquire) { Err(Error::closed()) } else { Ok(()) }
    }

    /// Publishes JSON bytes to a branch, names and keys already checked:
    /// at once, or behind the transactions' tickets open for its channel.
    /// Never waits for a subscriber. Errors with `limit` past 1 MiB.
    pub(crate) fn publish_checked(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.tickets.publish(channel, branch, data)
    }

    /// A ticket for a transaction about to commit that published to
    /// `channels` (names checked): its messages will go out after those of
    /// every ticket taken before, in commit order (CHAN-03). Errors: `closed`.
    pub(crate) fn take_ticket(&self, channels: Vec<Arc<str>>) -> Result<u64> {
        self.check_open()?;
        Ok(self.tickets.take(channels))
    }

    /// Ends a ticket: `Some` delivers its messages (checked) in their turn,
    /// `None` gives it up (a rollback, a failed commit). Errors: `timeout`
    /// (given up at the bound: the messages are dropped), `invalid`, `closed`.
    pub(crate) fn end_ticket(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        let r = self.tickets.end(ticket, msgs);
        self.check_open()?;
        r
    }

    /// Publishes JSON bytes to a branch. Errors: `invalid` (name or key out
    /// of rule), `limit` (over 1 MiB), `closed`.
    pub(crate) fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.check_open()?;
        check_name("channel", channel)?;
        branch.iter().try_for_each(Key::check)?;
        self.publish_checked(channel, branch, data)
    }

    /// Subscribes to a branch. A `resume` from a log the store no longer
    /// has is told first as a miss of unknown count. Errors: `invalid`,
    /// `limit` (10,000 subscriptions), `closed`.
    pub(crate) fn subscribe(&self, channel: &str, branch: &[Key], scope: Scope, resume: Option<Resume>) -> Result<LocalSubscription> {
        self.check_open()?;
        check_name("channel", channel)?;
        branch.iter().try_for_each(Key::check)?;
        let (sub, told) = self.channels.subscribe(channel, branch, scope, resume)?;
        if let Some(m) = told {
            sub.tell_first(m);
        }
        Ok(sub)
    }

    /// The table of the lock or semaphore `name`, made on first use.
    /// Errors: `conflict` (another kind or limit), `closed`.
    pub(crate) fn lock_table(&self, name: &str, kind: Kind) -> Result<Arc<Table>> {
        self.check_open()?;
        self.locks.table(name, kind)
    }

    /// See [`Locks::leases_over_connections`].
    pub(crate) fn leases_over_connections(&self) -> bool {
        self.locks.leases_over_connections()
    }

    /// See [`Locks::start_graces`].
    pub(crate) fn start_lock_graces(&self, remote: Vec<(String, Duration)>) {
        self.locks.start_graces(remote)
    }

    /// See [`Locks::note_remote_ttl`].
    pub(crate) fn note_remote_ttl(&self, name: &str, ttl: Duration) -> bool {
        self.locks.note_remote_ttl(name, ttl)
    }

    /// What the engine holds now, for the store in `dir`. Errors: `closed`.
    pub(crate) fn status(&self, dir: &Path) -> Result<StoreStatus> {
        self.check_open()?;
        Ok(StoreStatus {
            dir: dir.to_path_buf(),
            pid: std::process::id(),
            epoch: self.epoch,
            uptime_ms: self.opened.elapsed().as_millis() as u64,
            subscriptions: self.channels.subscription_count(),
            channel_bytes: self.channels.kept_bytes(),
            branches: self.channels.status(),
            locks: self.locks.status(),
        })
    }

    /// Subscriptions end, held keys are lost, waiters get `closed`. Idempotent.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(s) = self.sweeper.lock().take() {
            s.abort();
        }
        self.channels.close();
        self.locks.close();
    }
}
