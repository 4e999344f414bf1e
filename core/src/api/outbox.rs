//! A database's outbox, for the transactions of a cluster store with NATS
//! channels (CHAN-03, docs/cluster.md). `tx.publish` inserts a row into
//! `_tinystore_outbox` of the transaction's own SQLite database, so a
//! rollback drops it and a commit keeps it with the user's rows. After the
//! commit the rows are published in outbox order (SQLite serializes a
//! database's writers, so that is commit order, across processes), each
//! under `Nats-Msg-Id` `DBID:SEQ` (DBID: random, made once per database
//! file, in `_tinystore_meta`), then deleted. One process at a time
//! publishes a database's outbox: it holds the claim row (5 s, renewed
//! every second while it publishes). Rows a dead process left are
//! published at the next commit or open of the database by any process of
//! the store: at once if it died before claiming, once its claim expired
//! otherwise.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension};

use crate::api::store::unix_millis;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::net::nats::{Finish, Jet};
use crate::runtime;

/// How long a claim on a database's outbox lasts unless renewed.
pub const CLAIM_TTL: Duration = Duration::from_secs(5);
/// How often its holder renews it while it publishes.
const CLAIM_RENEW: Duration = Duration::from_secs(1);
/// Within this of its row's insert, a message a dead holder may have
/// published is dropped by the stream as a duplicate of its
/// `Nats-Msg-Id` (the streams' duplicate window is 2 min); older, the
/// branch is looked through first.
const TRUST_MSG_ID: Duration = Duration::from_secs(90);
/// Rows read at a time.
const ROWS_AT_A_TIME: i64 = 64;

/// For tests of CHAN-03 across processes: a function the publisher of an
/// outbox calls after each message is in its stream, before its row is
/// deleted (a child that stops there stands for a process killed after its
/// publish, whose acknowledgement nobody kept).
static AFTER_PUBLISH: OnceLock<fn()> = OnceLock::new();

#[doc(hidden)]
pub fn after_publish_hook(f: fn()) {
    let _ = AFTER_PUBLISH.set(f);
}

/// Makes the outbox's tables if missing; gives the database's DBID.
fn prepare(c: &Connection) -> Result<String> {
    c.execute_batch(
        "create table if not exists _tinystore_meta (name text primary key, value text not null);
         create table if not exists _tinystore_outbox (id integer primary key autoincrement, channel text not null, branch text not null, payload blob not null, at integer not null);
         create table if not exists _tinystore_outbox_claim (one integer primary key check (one = 1), holder text not null, expires integer not null);",
    )?;
    c.execute("insert or ignore into _tinystore_meta (name, value) values ('dbid', ?1)", [random_hex()])?;
    Ok(c.query_row("select value from _tinystore_meta where name = 'dbid'", [], |r| r.get(0))?)
}

fn random_hex() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    format!("{:016x}", u64::from_le_bytes(b))
}

fn now_ms() -> i64 {
    unix_millis(SystemTime::now())
}

/// Keeps a message in the outbox, inside the caller's transaction on `c`;
/// gives its row's id.
pub(crate) fn insert(c: &Connection, channel: &str, branch: &[Key], data: &[u8]) -> Result<i64> {
    let branch = serde_json::to_string(branch)?;
    c.prepare_cached("insert into _tinystore_outbox (channel, branch, payload, at) values (?1, ?2, ?3, ?4)")?.execute(rusqlite::params![channel, branch, data, now_ms()])?;
    Ok(c.last_insert_rowid())
}

/// True when the outbox has rows (read inside the caller's transaction).
pub(crate) fn has_rows(c: &Connection) -> Result<bool> {
    Ok(c.prepare_cached("select exists (select 1 from _tinystore_outbox)")?.query_row([], |r| r.get(0))?)
}

/// What trying to claim the outbox found.
enum Claim {
    /// Nothing to publish.
    Empty,
    /// Another publisher holds it, until its claim expires.
    Held,
    /// Ours; `recovering`: taken from a claim that expired, whose holder
    /// may have published rows it did not delete (up to this row id).
    Taken { recovering: Option<i64> },
}

/// The outbox of one database, publishing to a cluster store's NATS channels.
pub(crate) struct Outbox {
    path: PathBuf,
    busy: Duration,
    dbid: String,
    jet: Arc<Jet>,
    /// Its own connection: claims and deletes do not wait for the writer
    /// of the user's transactions (SQLite serializes them with the busy timeout).
    conn: Mutex<Option<Connection>>,
}

impl Outbox {
    /// Makes the tables on `c` (the database's writer, before any
    /// transaction) and the outbox.
    pub(crate) fn open(c: &Connection, path: &Path, busy: Duration, jet: Arc<Jet>) -> Result<Arc<Outbox>> {
        let dbid = prepare(c)?;
        Ok(Arc::new(Outbox { path: path.to_path_buf(), busy, dbid, jet, conn: Mutex::new(None) }))
    }

    /// At open: publishes what a process left (at once unless a live claim
    /// holds it; then in the background, once the holder emptied it or its
    /// claim expired).
    pub(crate) fn recover(self: &Arc<Self>) -> Result<()> {
        match self.publish(None, false) {
            Ok(true) => Ok(()),
            Ok(false) => {
                let me = self.clone();
                std::thread::spawn(move || {
                    let _ = me.publish(None, true);
                });
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Publishes the outbox, oldest row first. `upto`: returns once the
    /// rows up to this id are gone (published, by this process or the
    /// one holding the claim). `wait`: while another holds the claim,
    /// waits for it to end; without, gives `false` then. Errors: those of
    /// the publish (the rows stay, for the next commit or open).
    pub(crate) fn publish(&self, upto: Option<i64>, wait: bool) -> Result<bool> {
        let mut guard = self.conn.lock();
        if guard.is_none() {
            let c = Connection::open(&self.path)?;
            c.busy_timeout(self.busy)?;
            *guard = Some(c);
        }
        self.publish_on(guard.as_ref().expect("just made"), upto, wait)
    }

    /// [`publish`](Outbox::publish) on `c`: a commit gives the database's
    /// writer, which it keeps until its messages are in (a second
    /// connection of this process would wait on SQLite's lock behind the
    /// transactions queued for the writer, and could starve for the whole
    /// busy timeout).
    pub(crate) fn publish_on(&self, c: &Connection, upto: Option<i64>, wait: bool) -> Result<bool> {
        let holder = random_hex();
        // Past the claim of a holder that died mid-publish, and the
        // publish's own time.
        let deadline = Instant::now() + CLAIM_TTL + self.jet.timeout() + self.busy;
        loop {
            match claim(c, &holder)? {
                Claim::Empty => return Ok(true),
                Claim::Taken { recovering } => {
                    let r = self.publish_claimed(c, &holder, recovering);
                    if r.is_err() {
                        // Left to the next publisher, which looks in the
                        // streams for what this one may have published.
                        let _ = c.execute("update _tinystore_outbox_claim set expires = 0 where holder = ?1", [&holder]);
                    }
                    return r.map(|_| true);
                }
                Claim::Held => {
                    if let Some(u) = upto {
                        let left: bool = c.query_row("select exists (select 1 from _tinystore_outbox where id <= ?1)", [u], |r| r.get(0))?;
                        if !left {
                            return Ok(true);
                        }
                    }
                    if !wait && upto.is_none() {
                        return Ok(false);
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!("another process held the outbox of {} for {:?} without publishing these messages", self.path.display(), CLAIM_TTL + self.jet.timeout()),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// Publishes rows until the outbox is empty, holding the claim.
    fn publish_claimed(&self, c: &Connection, holder: &str, recovering: Option<i64>) -> Result<()> {
        let renewed = Mutex::new(Instant::now());
        let renew = || -> Result<()> {
            if renewed.lock().elapsed() < CLAIM_RENEW {
                return Ok(());
            }
            let n = c.execute("update _tinystore_outbox_claim set expires = ?1 where holder = ?2", rusqlite::params![now_ms() + CLAIM_TTL.as_millis() as i64, holder])?;
            if n == 0 {
                return Err(Error::new(ErrorKind::Timeout, "this process's claim on the outbox expired while it published (another process publishes the rest)"));
            }
            *renewed.lock() = Instant::now();
            Ok(())
        };
        loop {
            renew()?;
            let rows: Vec<(i64, String, String, Vec<u8>, i64)> = {
                let mut st = c.prepare_cached("select id, channel, branch, payload, at from _tinystore_outbox order by id limit ?1")?;
                st.query_map([ROWS_AT_A_TIME], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?.collect::<rusqlite::Result<_>>()?
            };
            if rows.is_empty() {
                if release(c, holder)? {
                    return Ok(());
                }
                continue;
            }
            let mut done = None;
            for (id, channel, branch, payload, at) in rows {
                let branch: Vec<Key> = serde_json::from_str(&branch).map_err(|e| Error::internal(format!("outbox row {id} has a bad branch: {e}")))?;
                let msg_id = format!("{}:{id}", self.dbid);
                let r = runtime::block_on(async {
                    // Its holder may have died after the stream took it, so
                    // long ago that the stream forgot its id.
                    let old = now_ms() - at > TRUST_MSG_ID.as_millis() as i64;
                    if old && recovering.is_some_and(|u| id <= u) && self.jet.holds_outbox(&channel, &branch, &msg_id).await? {
                        return Ok(());
                    }
                    let (tx, mut rx) = tokio::sync::oneshot::channel();
                    self.jet.publish_outbox(&channel, &branch, payload.into_boxed_slice(), msg_id, Finish::Oneshot(tx));
                    loop {
                        tokio::select! {
                            r = &mut rx => return r.map_err(|_| Error::closed())?.map(|_| ()),
                            _ = tokio::time::sleep(CLAIM_RENEW) => renew()?,
                        }
                    }
                });
                if let Err(e) = r {
                    if let Some(d) = done {
                        let _ = c.execute("delete from _tinystore_outbox where id <= ?1", [d]);
                    }
                    return Err(e);
                }
                if let Some(f) = AFTER_PUBLISH.get() {
                    f();
                }
                done = Some(id);
            }
            if let Some(d) = done {
                c.execute("delete from _tinystore_outbox where id <= ?1", [d])?;
            }
        }
    }
}

/// Claims the outbox for `holder` when it has rows and no live claim.
fn claim(c: &Connection, holder: &str) -> Result<Claim> {
    let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)?;
    if !has_rows(&tx)? {
        return Ok(Claim::Empty);
    }
    let now = now_ms();
    let held: Option<i64> = tx.query_row("select expires from _tinystore_outbox_claim where one = 1", [], |r| r.get(0)).optional()?;
    if held.is_some_and(|expires| expires > now) {
        return Ok(Claim::Held);
    }
    let recovering = match held {
        Some(_) => tx.query_row("select max(id) from _tinystore_outbox", [], |r| r.get(0))?,
        None => None,
    };
    tx.execute("insert or replace into _tinystore_outbox_claim (one, holder, expires) values (1, ?1, ?2)", rusqlite::params![holder, now + CLAIM_TTL.as_millis() as i64])?;
    tx.commit()?;
    Ok(Claim::Taken { recovering })
}

/// Lets the claim go if the outbox is empty (checked in the same
/// transaction, so rows committed before are never left unclaimed); false
/// when rows came in meanwhile.
fn release(c: &Connection, holder: &str) -> Result<bool> {
    let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)?;
    if has_rows(&tx)? {
        return Ok(false);
    }
    tx.execute("delete from _tinystore_outbox_claim where holder = ?1", [holder])?;
    tx.commit()?;
    Ok(true)
}
