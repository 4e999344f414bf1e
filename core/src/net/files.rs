//! The owner's files in the store directory: the directory lock
//! (`owner.lock`, with the owner's pid), the epoch (in `kv.db`), and the
//! path of the Unix socket.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::base::error::{Error, ErrorKind, Result};

/// sockaddr_un's path field on Linux: 108 bytes with the final NUL.
pub(crate) const SOCKET_PATH_MAX: usize = 108;

pub(crate) fn socket_path(dir: &Path) -> PathBuf {
    dir.join("tinystore.sock")
}

pub(crate) fn absolute(dir: &Path) -> Result<PathBuf> {
    std::path::absolute(dir).map_err(|e| Error::io(&format!("could not resolve {}", dir.display()), e))
}

/// `owner.lock` held by this process; unlocked when dropped.
pub(crate) struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        LOCKED_HERE.lock().retain(|d| d != &self.dir);
    }
}

/// The directories whose `owner.lock` this process holds.
static LOCKED_HERE: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

/// How long a lock that names this process, but that it does not hold, is
/// tried again: a child process started by another thread shares the lock's
/// file from fork to exec, so a lock this process just let go can stay
/// taken for that moment.
const SHARED_WITH_A_CHILD_FOR: Duration = Duration::from_secs(1);

/// What ends the `owned` error of [`take_dir_lock`]; an `open` that then
/// failed to connect says something else ([`crate::Store::open`]).
pub(crate) const OWNED_ADVICE: &str = ": connect to it, or stop that process first";

pub(crate) fn take_dir_lock(dir: &Path) -> Result<DirLock> {
    let dir = absolute(dir)?;
    let path = dir.join("owner.lock");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&format!("could not open {}", path.display()), e))?;
    let me = std::process::id().to_string();
    let deadline = std::time::Instant::now() + SHARED_WITH_A_CHILD_FOR;
    loop {
        match f.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = std::fs::read_to_string(&path).unwrap_or_default();
                let pid = pid.trim();
                if pid == me && !LOCKED_HERE.lock().contains(&dir) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                return Err(Error::new(
                    ErrorKind::Owned,
                    format!(
                        "the store {} is owned by another process (pid {pid}){OWNED_ADVICE}",
                        dir.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&format!("could not lock {}", path.display()), e)),
        }
    }
    f.set_len(0).and_then(|_| f.write_all(me.as_bytes())).map_err(|e| Error::io("could not write owner.lock", e))?;
    LOCKED_HERE.lock().push(dir.clone());
    Ok(DirLock { _file: f, dir })
}

/// Writes and returns this open's epoch: `max(now_ms, previous + 1)`, synced
/// to `kv.db` before any lease is given (LOCK-02).
pub(crate) fn next_epoch(dir: &Path, clock_ms: Option<u64>) -> Result<u64> {
    let path = dir.join("kv.db");
    write_epoch(&path, clock_ms).map_err(|e| {
        if e.kind() != ErrorKind::Sql {
            return e;
        }
        Error::new(
            ErrorKind::Sql,
            format!(
                "could not keep the store's epoch in {}: {}; restore the file from a backup, or move it away to start it again (fences then go on from the clock, which must not have gone back)",
                path.display(),
                e.message()
            ),
        )
    })
}

fn write_epoch(path: &Path, clock_ms: Option<u64>) -> Result<u64> {
    let mut db = rusqlite::Connection::open(path)?;
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

/// The epoch of the store's last open in `dir` (from `kv.db`, read only).
/// Errors: `invalid` when `dir` holds no store, `io`.
pub(crate) fn last_epoch(dir: &Path) -> Result<u64> {
    let path = dir.join("kv.db");
    if !path.is_file() {
        return Err(Error::invalid(format!(
            "{} holds no tinystore store (no kv.db): give the directory the store on one machine was opened in",
            dir.display()
        )));
    }
    let db = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    db.busy_timeout(Duration::from_secs(5))?;
    let e: i64 = db.query_row("select value from kv where key = 'epoch'", [], |r| r.get(0)).map_err(|e| {
        Error::invalid(format!("{} has no epoch in kv.db ({e}): was a store ever opened there?", dir.display()))
    })?;
    Ok(e as u64)
}

/// True where an owner holds `<dir>/owner.lock` on this machine.
pub(crate) fn owner_lock_held_here(dir: &Path) -> bool {
    let path = dir.join("owner.lock");
    File::open(&path).is_ok_and(|f| matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)))
}

/// A `tcp:` or `tls:` listener an owner served, kept in `kv.db` so that a
/// process taking the store over serves it again (STORE-01): the address,
/// and for `tls:` the certificate and key files (`None`: `<dir>/tls/`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Listener {
    pub(crate) address: String,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

fn kv(dir: &Path) -> Result<rusqlite::Connection> {
    let db = rusqlite::Connection::open(dir.join("kv.db"))?;
    db.busy_timeout(Duration::from_secs(5))?;
    db.execute("create table if not exists kv (key text primary key, value any not null)", [])?;
    Ok(db)
}

/// The listeners owners of `dir` served (see [`Listener`]).
pub(crate) fn recorded_listeners(dir: &Path) -> Result<Vec<Listener>> {
    let db = kv(dir)?;
    let text: Option<String> = db
        .query_row("select value from kv where key = 'listeners'", [], |r| r.get(0))
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default())
}

/// Adds `l` to the listeners of `dir` (one per address: the newest files win).
pub(crate) fn record_listener(dir: &Path, l: Listener) -> Result<()> {
    let mut all = recorded_listeners(dir)?;
    all.retain(|x| x.address != l.address);
    all.push(l);
    let text = serde_json::to_string(&all)?;
    kv(dir)?.execute("insert into kv (key, value) values ('listeners', ?1) on conflict (key) do update set value = excluded.value", [text])?;
    Ok(())
}

/// The locks that gave leases over a connection, each with the longest ttl
/// given: what a new owner waits out before it grants their keys to anyone
/// but a holder re-presenting its lease (STORE-01).
pub(crate) fn remote_lock_ttls(dir: &Path) -> Result<Vec<(String, Duration)>> {
    let db = kv(dir)?;
    db.execute("create table if not exists lock_ttls (lock text primary key, ttl_ms integer not null)", [])?;
    let mut q = db.prepare("select lock, ttl_ms from lock_ttls")?;
    let rows = q.query_map([], |r| Ok((r.get::<_, String>(0)?, Duration::from_millis(r.get::<_, i64>(1)? as u64))))?;
    Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Writes down `ttl` as the longest given over a connection for `lock`
/// (called when it grows, not per hold).
pub(crate) fn record_remote_lock_ttl(dir: &Path, lock: &str, ttl: Duration) -> Result<()> {
    let db = kv(dir)?;
    db.execute("create table if not exists lock_ttls (lock text primary key, ttl_ms integer not null)", [])?;
    db.execute(
        "insert into lock_ttls (lock, ttl_ms) values (?1, ?2) on conflict (lock) do update set ttl_ms = max(ttl_ms, excluded.ttl_ms)",
        rusqlite::params![lock, ttl.as_millis() as i64],
    )?;
    Ok(())
}

/// A clean close with no lease held over a connection: nothing to wait out.
pub(crate) fn forget_remote_lock_ttls(dir: &Path) -> Result<()> {
    let db = kv(dir)?;
    db.execute("drop table if exists lock_ttls", [])?;
    Ok(())
}
