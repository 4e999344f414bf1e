//! SQL databases in the store, and publishing inside a transaction.
//!
//! `store.database("chat").migrations("migrations").open()?` opens
//! `<dir>/chat.db` (SQLite, WAL, foreign keys on, a busy timeout). A message
//! published inside [`Database::tx`] is held until the commit and dropped by a
//! rollback (CHAN-03).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

pub use rusqlite::types::Value as SqlValue;

use crate::api::channels::{Branch, Channel};
use crate::api::outbox::{self, Outbox};
use crate::engine::channels::{check_json, check_message};
use crate::engine::tickets::Held;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::{check_name, check_positive};
use crate::api::store::Store;

/// For tests of CHAN-03 across processes: a function every commit of this
/// process calls between its commit and its publishes (a child that stops
/// there stands for a process killed or frozen at the worst moment).
static AFTER_COMMIT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

#[doc(hidden)]
pub fn after_commit_hook(f: fn()) {
    let _ = AFTER_COMMIT.set(f);
}

#[doc(hidden)]
pub use crate::api::outbox::after_publish_hook as after_outbox_publish_hook;
/// How long a process's claim on a database's outbox lasts unless renewed
/// (a cluster store with NATS channels, CHAN-03): a process killed while it
/// published has the rest published by another within this.
pub use crate::api::outbox::CLAIM_TTL as OUTBOX_CLAIM_TTL;

/// The default busy timeout: how long a writer waits for another one.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A statement and its parameters; made by [`sql!`](crate::sql!) or from a `&str`.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// The SQL text, with `?` for each parameter.
    pub sql: String,
    /// The parameters, bound in order; never spliced into the text.
    pub params: Vec<SqlValue>,
}

impl Statement {
    /// Checks the parameters, for every binding alike: a real that is NaN or
    /// infinite is refused with `invalid` naming it (SQLite would store NaN
    /// as null, silently).
    pub fn check(&self) -> Result<()> {
        if self.sql.trim().is_empty() {
            return Err(Error::invalid("a statement is SQL text, like \"select id from chats where id = ?\"; got an empty one"));
        }
        if let Some(word) = transaction_control(&self.sql) {
            return Err(Error::invalid(format!(
                "`{word}` is the transaction's to say: a statement run here never starts or ends a transaction, so that one is all or nothing (committed when its function returns, rolled back when it fails, CHAN-03); use db.tx for several statements at once"
            )));
        }
        for (i, p) in self.params.iter().enumerate() {
            if let SqlValue::Real(f) = p
                && !f.is_finite()
            {
                let got = if f.is_nan() { "NaN" } else if *f > 0.0 { "Infinity" } else { "-Infinity" };
                return Err(Error::invalid(format!(
                    "a SQL parameter is a finite number; got {got} for parameter {} (?{}): bind null for no value",
                    i + 1,
                    i + 1
                )));
            }
        }
        Ok(())
    }
}

/// The first word of `sql` (after spaces and comments) when it starts or
/// ends a transaction: `begin`, `commit`, `end`, `rollback`, `savepoint`,
/// `release`.
fn transaction_control(sql: &str) -> Option<String> {
    let mut rest = sql;
    loop {
        rest = rest.trim_start();
        if let Some(line) = rest.strip_prefix("--") {
            rest = line.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(block) = rest.strip_prefix("/*") {
            rest = block.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    let word: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect::<String>().to_ascii_lowercase();
    matches!(word.as_str(), "begin" | "commit" | "end" | "rollback" | "savepoint" | "release").then_some(word)
}

impl From<&str> for Statement {
    fn from(sql: &str) -> Statement {
        Statement { sql: sql.to_owned(), params: Vec::new() }
    }
}

impl From<String> for Statement {
    fn from(sql: String) -> Statement {
        Statement { sql, params: Vec::new() }
    }
}

/// Pairs a statement with its parameters: `sql!("... where id = ?", chat_id)`.
/// Each parameter is anything [`IntoParam`]: integers, floats, text, bytes,
/// `Option`s of those, and references to them.
#[macro_export]
macro_rules! sql {
    ($sql:expr $(, $p:expr)* $(,)?) => {
        $crate::sql::Statement {
            sql: ::std::string::String::from($sql),
            params: ::std::vec![$($crate::sql::IntoParam::into_param($p)),*],
        }
    };
}

/// A value that binds as a SQL parameter: null, integer (i64), real, text or blob.
pub trait IntoParam {
    /// The value as SQLite takes it.
    fn into_param(self) -> SqlValue;
}

macro_rules! param_int {
    ($($t:ty),*) => {$(
        impl IntoParam for $t { fn into_param(self) -> SqlValue { SqlValue::Integer(self as i64) } }
        impl IntoParam for &$t { fn into_param(self) -> SqlValue { SqlValue::Integer(*self as i64) } }
    )*};
}
param_int!(i8, i16, i32, i64, u8, u16, u32, isize);

impl IntoParam for bool {
    fn into_param(self) -> SqlValue {
        SqlValue::Integer(self as i64)
    }
}
impl IntoParam for f64 {
    fn into_param(self) -> SqlValue {
        SqlValue::Real(self)
    }
}
impl IntoParam for &f64 {
    fn into_param(self) -> SqlValue {
        SqlValue::Real(*self)
    }
}
impl IntoParam for &str {
    fn into_param(self) -> SqlValue {
        SqlValue::Text(self.to_owned())
    }
}
impl IntoParam for String {
    fn into_param(self) -> SqlValue {
        SqlValue::Text(self)
    }
}
impl IntoParam for &String {
    fn into_param(self) -> SqlValue {
        SqlValue::Text(self.clone())
    }
}
impl IntoParam for Vec<u8> {
    fn into_param(self) -> SqlValue {
        SqlValue::Blob(self)
    }
}
impl IntoParam for &[u8] {
    fn into_param(self) -> SqlValue {
        SqlValue::Blob(self.to_vec())
    }
}
impl IntoParam for SqlValue {
    fn into_param(self) -> SqlValue {
        self
    }
}
impl IntoParam for crate::base::fence::Fence {
    /// A fence binds as its 40-digit padded text, which compares like the number.
    fn into_param(self) -> SqlValue {
        SqlValue::Text(self.padded())
    }
}
impl<T: IntoParam> IntoParam for Option<T> {
    fn into_param(self) -> SqlValue {
        self.map_or(SqlValue::Null, IntoParam::into_param)
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Done {
    /// Rows changed by the statement.
    pub changes: u64,
    /// The rowid of the last row inserted on this connection.
    pub last_insert_rowid: i64,
}

/// Rows as columns and values, for the bindings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// One vector of values per row, in column order.
    pub rows: Vec<Vec<SqlValue>>,
}

// Here, next to the builder it makes, so the store module does not
// import this one (no import circle: core/tests/layers.rs).
impl Store {
    /// A SQL database of the store: the file `<dir>/<name>.db`.
    pub fn database(&self, name: &str) -> DatabaseBuilder {
        DatabaseBuilder::new(self.clone(), name)
    }
}

/// Builds a [`Database`]: `store.database("chat").migrations("migrations").open()?`.
#[must_use = "call .open() to get the database"]
pub struct DatabaseBuilder {
    store: Store,
    name: String,
    migrations: Option<PathBuf>,
    busy_timeout: Duration,
}

impl DatabaseBuilder {
    pub(crate) fn new(store: Store, name: &str) -> DatabaseBuilder {
        DatabaseBuilder { store, name: name.to_owned(), migrations: None, busy_timeout: DEFAULT_BUSY_TIMEOUT }
    }

    /// A folder of numbered `.sql` files (`0004_summary_fence.sql`, the
    /// extension in any case), applied in order, each once, each in its own
    /// transaction. Other files are left alone.
    pub fn migrations(mut self, dir: impl AsRef<Path>) -> Self {
        self.migrations = Some(dir.as_ref().to_path_buf());
        self
    }

    /// How long a writer waits for another writer before a `busy` error;
    /// default 5 s.
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }

    /// Opens `<dir>/<name>.db` and applies the migrations. Errors: `invalid`
    /// (name out of rule, or `kv`, the store's own), `sql` (a migration failed: nothing of it stays
    /// applied; or an applied file was edited; or a new one is numbered below
    /// one applied), `io`, `busy`, `closed`.
    pub fn open(self) -> Result<Database> {
        check_name("database", &self.name)?;
        if self.name == "kv" {
            // kv.db keeps the store's epoch: writing there could make fences repeat.
            return Err(Error::invalid("the database name \"kv\" is the store's own (kv.db keeps its epoch, which fences grow from): pick another name"));
        }
        check_positive("busy timeout", self.busy_timeout)?;
        self.store.check_open()?;
        self.store.check_files_here()?;
        let path = self.store.dir().join(format!("{}.db", self.name));
        let writer = connect(&path, self.busy_timeout)?;
        if let Some(dir) = &self.migrations {
            migrate(&writer, dir)?;
        }
        // A cluster store's channels are on NATS: a transaction's messages
        // go through the database's outbox (CHAN-03), and what a process
        // left there is published now.
        let outbox = match self.store.backend().nats() {
            Some(jet) => {
                let o = Outbox::open(&writer, &path, self.busy_timeout, jet)?;
                o.recover().map_err(|e| Error::new(e.kind(), format!("{}: the messages a process left in the outbox of {} are not published yet (at the next commit or open)", e.message(), path.display())))?;
                Some(o)
            }
            None => None,
        };
        Ok(Database {
            inner: Arc::new(DbInner {
                store: self.store,
                path,
                busy: self.busy_timeout,
                writer: Mutex::new(Some(writer)),
                writer_back: Condvar::new(),
                turns: Arc::new(tokio::sync::Semaphore::new(1)),
                readers: Mutex::new(Vec::new()),
                outbox,
            }),
        })
    }
}

/// A SQL database of the store. Cheap to clone; share it between threads.
///
/// Writes (`exec`, `tx`) go through one connection, so a process's writers
/// wait for each other up to the busy timeout, then get `busy`; other
/// processes wait through SQLite's own lock. Reads (`query`) use their own
/// connections and never block the writer (WAL).
#[derive(Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

struct DbInner {
    store: Store,
    path: PathBuf,
    busy: Duration,
    /// The one writing connection; taken out by `exec` and by a transaction
    /// for as long as it lasts, put back after.
    writer: Mutex<Option<Connection>>,
    writer_back: Condvar,
    /// One turn at waiting for the writer, for [`Database::writer_turn`].
    turns: Arc<tokio::sync::Semaphore>,
    readers: Mutex<Vec<Connection>>,
    /// On a cluster store with NATS channels: where its transactions' messages go.
    outbox: Option<Arc<Outbox>>,
}

/// A turn at the writer: while it lives, this caller alone may wait for
/// the writing connection (`exec`, `begin`). Drop it once `exec` or
/// `begin` returned.
pub struct WriterTurn {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

fn connect(path: &Path, busy: Duration) -> Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(busy)?;
    c.pragma_update(None, "journal_mode", "wal")?;
    c.pragma_update(None, "foreign_keys", "on")?;
    c.pragma_update(None, "synchronous", "normal")?;
    Ok(c)
}

impl Database {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Waits without a thread for a turn at the writer. Async bindings await
    /// this before they hand `exec` or `begin` to a blocking thread: callers
    /// then queue here, and never fill the blocking threads with waiters
    /// while the transaction that holds the writer needs one for its next
    /// statement. Errors: `closed`.
    pub async fn writer_turn(&self) -> Result<WriterTurn> {
        self.inner.store.check_open()?;
        let permit = self.inner.turns.clone().acquire_owned().await.map_err(|_| Error::closed())?;
        Ok(WriterTurn { _permit: permit })
    }

    /// Takes the writing connection, waiting up to the busy timeout.
    fn take_writer(&self) -> Result<Writer> {
        self.inner.store.check_open()?;
        let deadline = std::time::Instant::now() + self.inner.busy;
        let mut slot = self.inner.writer.lock();
        loop {
            if let Some(c) = slot.take() {
                return Ok(Writer { db: self.inner.clone(), conn: Some(c) });
            }
            if self.inner.writer_back.wait_until(&mut slot, deadline).timed_out() && slot.is_none() {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!(
                        "another writer of {} held the database for the whole busy timeout of {:?}: retry, or keep transactions short",
                        self.inner.path.display(),
                        self.inner.busy
                    ),
                ));
            }
        }
    }

    /// Runs one statement that writes; returns `changes` and `last_insert_rowid`.
    /// Errors: `sql` (the statement failed), `busy`, `closed`.
    pub fn exec(&self, stmt: impl Into<Statement>) -> Result<Done> {
        exec_on(self.take_writer()?.conn(), &stmt.into())
    }

    /// Runs a query and gives each row as a `T` (from the row as a JSON object
    /// of column names; a blob is an array of bytes).
    pub fn query<T: DeserializeOwned>(&self, stmt: impl Into<Statement>) -> Result<Vec<T>> {
        self.read(|c| query_on(c, &stmt.into()))
    }

    /// Runs a query and gives its columns and rows of values.
    pub fn query_rows(&self, stmt: impl Into<Statement>) -> Result<Rows> {
        self.read(|c| rows_on(c, &stmt.into()))
    }

    fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        self.inner.store.check_open()?;
        let conn = self.inner.readers.lock().pop();
        let conn = match conn {
            Some(c) => c,
            None => connect(&self.inner.path, self.inner.busy)?,
        };
        let r = f(&conn);
        let mut pool = self.inner.readers.lock();
        if pool.len() < 8 {
            pool.push(conn);
        }
        r
    }

    /// Runs `f` in one transaction: committed when `f` returns `Ok`, rolled
    /// back when it returns `Err` or panics. Messages published through
    /// `tx.with(&channel)` are delivered after the commit, in the order
    /// published, and dropped by a rollback (CHAN-03). `f`'s own error reaches
    /// the caller unchanged. Errors as `E`: `busy`, `sql` (the commit
    /// failed), `closed`.
    pub fn tx<T, E: From<Error>>(&self, f: impl FnOnce(&Tx) -> Result<T, E>) -> Result<T, E> {
        let tx = self.begin()?;
        let v = f(&tx)?;
        tx.commit()?;
        Ok(v)
    }

    /// Begins a transaction that the caller ends with [`Tx::commit`] or
    /// [`Tx::rollback`]; dropping it rolls back. Holds the database's writer
    /// until then (the bindings' boundary for async transaction functions).
    /// Errors: `busy`, `sql`, `closed`.
    pub fn begin(&self) -> Result<Tx> {
        let w = self.take_writer()?;
        w.conn().execute_batch("begin immediate")?;
        Ok(Tx { w: Some(w), pending: Mutex::new(Vec::new()), outboxed: Mutex::new(None) })
    }
}

/// The writing connection while taken; put back when dropped.
struct Writer {
    db: Arc<DbInner>,
    conn: Option<Connection>,
}

impl Writer {
    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("a writer has its connection until dropped")
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            *self.db.writer.lock() = Some(c);
            self.db.writer_back.notify_one();
        }
    }
}

/// A transaction in progress: see [`Database::tx`] and [`Database::begin`].
/// Dropping it without `commit` rolls it back.
pub struct Tx {
    w: Option<Writer>,
    pending: Mutex<Vec<Held>>,
    /// The newest outbox row this transaction inserted (cluster store).
    outboxed: Mutex<Option<i64>>,
}

impl Tx {
    fn conn(&self) -> &Connection {
        self.w.as_ref().expect("a transaction has its writer until it ends").conn()
    }
    /// As [`Database::exec`], inside the transaction.
    pub fn exec(&self, stmt: impl Into<Statement>) -> Result<Done> {
        exec_on(self.conn(), &stmt.into())
    }
    /// As [`Database::query`], inside the transaction (it sees its own writes).
    pub fn query<T: DeserializeOwned>(&self, stmt: impl Into<Statement>) -> Result<Vec<T>> {
        query_on(self.conn(), &stmt.into())
    }
    /// As [`Database::query_rows`], inside the transaction.
    pub fn query_rows(&self, stmt: impl Into<Statement>) -> Result<Rows> {
        rows_on(self.conn(), &stmt.into())
    }
    /// The channel, publishing into this transaction: `tx.with(&events).under(id).publish(&v)?`.
    pub fn with<'t, T>(&'t self, channel: &Channel<T>) -> TxBranch<'t, T> {
        TxBranch { tx: self, branch: channel.root().clone() }
    }
    /// Refuses a channel of another store handle (`invalid`): the commit
    /// publishes to the database's store, and that one's subscribers would
    /// never hear of it.
    fn check_store(&self, store: &Store) -> Result<()> {
        let own = &self.w.as_ref().expect("a transaction has its writer until it ends").db.store;
        if own.same_handle(store) {
            return Ok(());
        }
        Err(Error::invalid(
            "this channel belongs to another store handle than the database of this transaction: a transaction publishes to its database's store; take the channel from that store (store.channel(...)) with the same handle",
        ))
    }

    /// Holds JSON bytes for `branch` of `channel` of `store` until the
    /// commit (the bindings' boundary). Checked now: `invalid` (also for a
    /// store other than the database's, or `data` not one JSON value), `limit`.
    pub fn publish_raw(&self, store: &Store, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.hold(store, channel, branch, data, true)
    }

    /// [`Tx::publish_raw`] of bytes serde made: one JSON value already.
    pub(crate) fn publish_serialized(&self, store: &Store, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        self.hold(store, channel, branch, data, false)
    }

    /// Checks and holds a message; `raw` bytes are checked as JSON too, even
    /// connected (its client would refuse them only at the commit).
    fn hold(&self, store: &Store, channel: &str, branch: &[Key], data: Box<[u8]>, raw: bool) -> Result<()> {
        self.check_store(store)?;
        check_name("channel", channel)?;
        branch.iter().try_for_each(Key::check)?;
        check_message(&data)?;
        if raw {
            check_json(&data)?;
        }
        let w = self.w.as_ref().expect("a transaction has its writer until it ends");
        if w.db.outbox.is_some() {
            // In the transaction: a rollback drops it, a commit keeps it.
            let id = outbox::insert(self.conn(), channel, branch, &data)?;
            *self.outboxed.lock() = Some(id);
            return Ok(());
        }
        self.pending.lock().push(Held { channel: Arc::from(channel), branch: branch.to_vec(), data });
        Ok(())
    }

    /// Commits, then delivers what was published in it, in order, and
    /// after the messages of every transaction of any process that
    /// committed before it (CHAN-03: a ticket from the store, taken while
    /// this transaction still holds the write lock, keeps its place).
    /// Errors: `sql` or `busy` when the commit failed (then nothing is
    /// delivered); `closed` (this store was closed) or, connected,
    /// `unavailable` or `timeout` (its owner out of reach, or its ticket not
    /// answered) when it published (then it is rolled back);
    /// `closed` or `timeout` saying the rows stand when its messages could
    /// not follow the commit (the owner went away, or they came later than
    /// `limits::TX_ORDER_BOUND` after the ticket).
    ///
    /// On a cluster store with NATS channels the messages are rows of the
    /// database's outbox, committed with the transaction and published
    /// after it, in outbox order (docs/cluster.md); when they could not be
    /// published now, the error says the rows stand and the messages stay
    /// in the outbox for the next commit or open of the database.
    pub fn commit(mut self) -> Result<()> {
        let w = self.w.take().expect("a transaction has its writer until it ends");
        if let Some(o) = w.db.outbox.clone() {
            return commit_outboxed(w, &o, self.outboxed.lock().take());
        }
        let pending = std::mem::take(&mut *self.pending.lock());
        if pending.is_empty() {
            if let Err(e) = w.conn().execute_batch("commit") {
                let _ = w.conn().execute_batch("rollback");
                return Err(e.into());
            }
            return Ok(());
        }
        let store = w.db.store.clone();
        // A closed store (or one whose owner is out of reach) could not
        // deliver what the transaction published: roll back rather than
        // commit rows whose news would be lost (CHAN-03).
        let ticket = match store.check_can_publish().and_then(|_| store.take_ticket(pending.iter().map(|p| p.channel.clone()).collect())) {
            Ok(t) => t,
            Err(e) => {
                let _ = w.conn().execute_batch("rollback");
                return Err(Error::new(
                    e.kind(),
                    format!("{}; the transaction was rolled back, since its messages could not be delivered", e.message()),
                ));
            }
        };
        if let Err(e) = w.conn().execute_batch("commit") {
            let _ = w.conn().execute_batch("rollback");
            let _ = store.end_ticket(ticket, None);
            return Err(e.into());
        }
        if let Some(f) = AFTER_COMMIT.get() {
            f();
        }
        // The ticket keeps the order from here: the next writer may begin.
        drop(w);
        let all = pending.len();
        // Checked when published; what fails now is the way to the owner
        // (it went away since the ticket) or the bound.
        store.end_ticket(ticket, Some(pending)).map_err(|e| {
            // The rows stand: said plainly, so that nobody retries the
            // whole transaction and writes them twice.
            Error::new(
                e.kind(),
                format!(
                    "the transaction was committed, but its {all} messages may not have been delivered ({}): its rows stand; do not run it again, tell readers another way",
                    e.message()
                ),
            )
        })
    }

    /// Rolls back: nothing written or published in it remains.
    pub fn rollback(mut self) -> Result<()> {
        let w = self.w.take().expect("a transaction has its writer until it ends");
        w.conn().execute_batch("rollback")?;
        Ok(())
    }
}

/// Commits a transaction of a cluster store with NATS channels, then
/// publishes its database's outbox: this transaction's messages (`upto`,
/// its newest row) and any left before them (CHAN-03).
fn commit_outboxed(w: Writer, o: &Outbox, upto: Option<i64>) -> Result<()> {
    // Rows left by a process that died: published by this commit too.
    let left = if upto.is_none() { outbox::has_rows(w.conn()) } else { Ok(true) };
    let left = match left {
        Ok(l) => l,
        Err(e) => {
            let _ = w.conn().execute_batch("rollback");
            return Err(e);
        }
    };
    if let Err(e) = w.conn().execute_batch("commit") {
        let _ = w.conn().execute_batch("rollback");
        return Err(e.into());
    }
    if upto.is_some()
        && let Some(f) = AFTER_COMMIT.get()
    {
        f();
    }
    if !left {
        return Ok(());
    }
    // On the writer, kept until the messages are in: the next transaction
    // of this process begins after (its claim, deletes and release would
    // otherwise wait on SQLite's lock behind every transaction queued).
    o.publish_on(w.conn(), upto, upto.is_some()).map(|_| ()).map_err(|e| {
        // The rows stand and so do the messages, in the outbox: said
        // plainly, so that nobody runs the transaction again.
        Error::new(
            e.kind(),
            format!(
                "the transaction was committed, but its messages are not published yet ({}): its rows stand and its messages stay in the outbox, published at the next commit or open of this database; do not run it again",
                e.message()
            ),
        )
    })
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(w) = self.w.take() {
            let _ = w.conn().execute_batch("rollback");
        }
    }
}

/// A transaction a language's handle shares with the function it was given
/// to (the bindings' boundary): usable until committed or rolled back, then
/// every call is `invalid`, the same for every binding. A statement runs
/// holding it, so a commit waits for a statement still running.
pub struct SharedTx(Mutex<Option<Tx>>);

impl SharedTx {
    /// Shares `tx`.
    pub fn new(tx: Tx) -> SharedTx {
        SharedTx(Mutex::new(Some(tx)))
    }

    /// Runs `f` with the transaction. Errors: `invalid` once it ended, else `f`'s.
    pub fn with<R>(&self, f: impl FnOnce(&Tx) -> Result<R>) -> Result<R> {
        self.0.lock().as_ref().map_or_else(|| Err(tx_ended()), f)
    }

    /// Ends the transaction with `f` ([`Tx::commit`] or [`Tx::rollback`]).
    /// Errors: `invalid` when it already ended, else `f`'s.
    pub fn end(&self, f: impl FnOnce(Tx) -> Result<()>) -> Result<()> {
        let tx = self.0.lock().take();
        tx.map_or_else(|| Err(tx_ended()), f)
    }
}

fn tx_ended() -> Error {
    Error::invalid("this transaction has ended: use the tx only inside the function it was given to")
}

/// A branch of a channel seen from inside a transaction.
pub struct TxBranch<'t, T> {
    tx: &'t Tx,
    branch: Branch<T>,
}

impl<'t, T: Serialize> TxBranch<'t, T> {
    /// The branch `key` below this one.
    pub fn under(self, key: impl Into<Key>) -> Self {
        TxBranch { tx: self.tx, branch: self.branch.under(key) }
    }
    /// Publishes `value` when the transaction commits; nothing if it rolls
    /// back. Errors now: `limit` (over 1 MiB, or nested over 100 deep), `invalid`.
    pub fn publish(&self, value: &T) -> Result<()> {
        let data = crate::api::channels::json_bytes(value)?;
        self.tx.publish_serialized(self.branch.store(), self.branch.channel(), self.branch.path(), data)
    }
}

fn exec_on(c: &Connection, s: &Statement) -> Result<Done> {
    s.check()?;
    let mut st = c.prepare_cached(&s.sql)?;
    let before = c.total_changes();
    let changes = st.execute(rusqlite::params_from_iter(s.params.iter()))?;
    // SQLite's count is the last insert, update or delete's: a statement
    // that is none of them (create, alter, attach) changed no rows.
    let changes = if c.total_changes() == before { 0 } else { changes as u64 };
    Ok(Done { changes, last_insert_rowid: c.last_insert_rowid() })
}

fn rows_on(c: &Connection, s: &Statement) -> Result<Rows> {
    s.check()?;
    let mut st = c.prepare_cached(&s.sql)?;
    let columns: Vec<String> = st.column_names().into_iter().map(str::to_owned).collect();
    let n = columns.len();
    let mut rows = Vec::new();
    let mut q = st.query(rusqlite::params_from_iter(s.params.iter()))?;
    while let Some(r) = q.next()? {
        rows.push((0..n).map(|i| r.get::<_, SqlValue>(i)).collect::<rusqlite::Result<Vec<_>>>()?);
    }
    Ok(Rows { columns, rows })
}

fn query_on<T: DeserializeOwned>(c: &Connection, s: &Statement) -> Result<Vec<T>> {
    s.check()?;
    let mut st = c.prepare_cached(&s.sql)?;
    let columns: Vec<String> = st.column_names().into_iter().map(str::to_owned).collect();
    let mut q = st.query(rusqlite::params_from_iter(s.params.iter()))?;
    let mut out = Vec::new();
    while let Some(r) = q.next()? {
        let mut obj = serde_json::Map::with_capacity(columns.len());
        for (i, name) in columns.iter().enumerate() {
            let v = match r.get_ref(i)? {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(n) => n.into(),
                ValueRef::Real(f) => f.into(),
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                ValueRef::Blob(b) => b.to_vec().into(),
            };
            obj.insert(name.clone(), v);
        }
        out.push(serde_json::from_value(serde_json::Value::Object(obj)).map_err(|e| {
            Error::invalid(format!("a row of `{}` does not fit the type asked for: {e}", s.sql))
        })?);
    }
    Ok(out)
}

/// A numbered `.sql` file of a migrations folder.
struct Migration {
    version: i64,
    name: String,
    path: PathBuf,
}

impl Migration {
    /// With its text and that text's checksum.
    fn read(self) -> Result<(Migration, String, String)> {
        let text = std::fs::read_to_string(&self.path).map_err(|e| Error::io(&format!("could not read {}", self.path.display()), e))?;
        let sum = format!("{:x}", Sha256::digest(text.as_bytes()));
        Ok((self, text, sum))
    }
}

/// True when every one of `files` is applied with its text unchanged,
/// found by reads alone.
fn all_applied(c: &Connection, files: &[(Migration, String, String)]) -> Result<bool> {
    let table: i64 = c.query_row("select count(*) from sqlite_master where type = 'table' and name = '_tinystore_migrations'", [], |r| r.get(0))?;
    if table == 0 {
        return Ok(files.is_empty());
    }
    for (m, _, sum) in files {
        let applied: Option<String> = c.query_row("select checksum from _tinystore_migrations where version = ?1", [m.version], |r| r.get(0)).optional()?;
        if applied.as_deref() != Some(sum.as_str()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Applies the numbered `.sql` files of `dir` that are not applied yet.
fn migrate(c: &Connection, dir: &Path) -> Result<()> {
    let mut files = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(&format!("could not read the migrations folder {}", dir.display()), e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("could not read the migrations folder", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.to_ascii_lowercase().ends_with(".sql") {
            continue;
        }
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        let Ok(version) = digits.parse::<i64>() else {
            return Err(Error::invalid(format!(
                "migration {name} has no number: name migrations like 0004_summary_fence.sql"
            )));
        };
        files.push(Migration { version, name, path: entry.path() });
    }
    files.sort_by_key(|m| m.version);
    for w in files.windows(2) {
        if w[0].version == w[1].version {
            return Err(Error::invalid(format!(
                "migrations {} and {} have the same number {}: give each its own",
                w[0].name, w[1].name, w[0].version
            )));
        }
    }
    let files = files.into_iter().map(Migration::read).collect::<Result<Vec<_>>>()?;
    if all_applied(c, &files)? {
        // Read only: a process opening a database whose migrations are all
        // in does not wait for another's long transaction.
        return Ok(());
    }
    c.execute(
        "create table if not exists _tinystore_migrations (version integer primary key, name text not null, checksum text not null, applied_at integer not null)",
        [],
    )?;
    let latest: Option<i64> = c.query_row("select max(version) from _tinystore_migrations", [], |r| r.get(0))?;
    for (Migration { version, name, .. }, text, sum) in files {
        let mut conn_tx = rusqlite::Transaction::new_unchecked(c, TransactionBehavior::Immediate)?;
        conn_tx.set_drop_behavior(rusqlite::DropBehavior::Rollback);
        let applied: Option<(String, String)> = conn_tx
            .query_row("select name, checksum from _tinystore_migrations where version = ?1", [version], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        match applied {
            Some((_, old)) if old == sum => continue,
            Some((old_name, _)) => {
                let was = if old_name == name { "changed since it was applied".to_owned() } else { format!("differs from {old_name}, which was applied") };
                return Err(Error::new(
                    ErrorKind::Sql,
                    format!("migration {name} {was} as number {version}: applied migrations must not change; add a new numbered file instead"),
                ));
            }
            None => {}
        }
        if let Some(latest) = latest.filter(|l| version < *l) {
            // Applied now, it would run after later ones already applied
            // (a teammate's file that came in late).
            return Err(Error::new(
                ErrorKind::Sql,
                format!(
                    "migration {name} is new but numbered {version}, below number {latest}, which is applied already: it would run out of order; number it above {latest}"
                ),
            ));
        }
        conn_tx.execute_batch(&text).map_err(|e| Error::new(ErrorKind::Sql, format!("migration {name} failed, nothing of it was applied: {e}")))?;
        conn_tx.execute(
            "insert into _tinystore_migrations (version, name, checksum, applied_at) values (?1, ?2, ?3, ?4)",
            rusqlite::params![version, name, sum, crate::api::store::unix_millis(std::time::SystemTime::now())],
        )?;
        conn_tx.commit()?;
    }
    Ok(())
}
