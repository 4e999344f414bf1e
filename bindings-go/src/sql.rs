//! SQL databases of a store, transactions, and publishing inside them.


use tinystore::sql::{Rows, SharedTx, Statement, Tx};
use tinystore::{Database, Done};

use crate::args::{OutValues, TsValue, Values, bytes, text};
use crate::error::{Res, TsError, call, quiet};
use crate::store::TsStore;

/// A database: `<dir>/<name>.db`.
pub struct TsDb {
    db: Database,
}

/// A transaction in progress, ended by [`ts_tx_commit`] or [`ts_tx_rollback`].
pub struct TsTx {
    /// The core's: `invalid` for a call once it ended.
    tx: SharedTx,
}

/// Rows a query gave, viewed with [`ts_rows_view`].
pub struct TsRows {
    ncols: usize,
    nrows: usize,
    /// The column names, then the values row by row.
    out: OutValues,
}

/// What a write did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TsDone {
    /// Rows changed.
    pub changes: u64,
    /// The rowid of the last row inserted on the writing connection.
    pub last_insert_rowid: i64,
}

/// A view of [`TsRows`]: `ncols` column names (text values), then
/// `ncols * nrows` values row by row, their text and bytes in `buf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TsRowsView {
    pub ncols: usize,
    pub nrows: usize,
    pub values: *const TsValue,
    pub buf: *const u8,
    pub buf_len: usize,
}

/// Opens the database `name` of the store and applies the numbered `.sql`
/// files of `migrations` (unless `migrations_len` is 0) in order, once each.
/// `busy_ns` (when `has_busy` is 1) is how long a writer waits for another.
/// Errors: `invalid`, `sql`, `io`, `busy`, `closed`.
///
/// # Safety
/// `s` is live; `(name, name_len)` and `(migrations, migrations_len)` readable;
/// `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_db_open(
    s: *const TsStore,
    name: *const u8,
    name_len: usize,
    migrations: *const u8,
    migrations_len: usize,
    has_busy: u8,
    busy_ns: i64,
    out: *mut *mut TsDb,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let store = &unsafe { &*s }.store;
        let mut b = store.database(unsafe { text(name, name_len) }?);
        if migrations_len > 0 {
            b = b.migrations(unsafe { text(migrations, migrations_len) }?);
        }
        if has_busy != 0 {
            b = b.busy_timeout(tinystore::limits::duration_from_nanos("busyTimeout", busy_ns)?);
        }
        let db = b.open()?;
        unsafe { *out = Box::into_raw(Box::new(TsDb { db })) };
        Ok(())
    })
}

/// Frees a database handle.
///
/// # Safety
/// `db` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_db_free(db: *mut TsDb) {
    quiet((), || {
        if !db.is_null() {
            drop(unsafe { Box::from_raw(db) });
        }
    })
}

unsafe fn statement(sql: *const u8, sql_len: usize, params: *const TsValue, n: usize, buf: *const u8, buf_len: usize) -> Res<Statement> {
    let sql = unsafe { text(sql, sql_len) }?.to_owned();
    let params = unsafe { Values::new(params, n, buf, buf_len) }.sql()?;
    Ok(Statement { sql, params })
}

fn done_out(d: Done, out: *mut TsDone) {
    if !out.is_null() {
        unsafe { *out = TsDone { changes: d.changes, last_insert_rowid: d.last_insert_rowid } };
    }
}

fn rows_out(r: Rows, out: *mut *mut TsRows) {
    let mut o = OutValues::default();
    r.columns.iter().for_each(|c| o.push_text(c));
    r.rows.iter().flatten().for_each(|v| o.push_sql(v));
    let rows = TsRows { ncols: r.columns.len(), nrows: r.rows.len(), out: o };
    unsafe { *out = Box::into_raw(Box::new(rows)) };
}

/// Runs one statement that writes. Errors: `sql`, `busy`, `invalid`, `closed`.
///
/// # Safety
/// `db` is live; `(sql, sql_len)`, `(params, nparams)` and `(buf, buf_len)`
/// readable; `out` null or writable; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_db_exec(
    db: *const TsDb,
    sql: *const u8,
    sql_len: usize,
    params: *const TsValue,
    nparams: usize,
    buf: *const u8,
    buf_len: usize,
    out: *mut TsDone,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let db = unsafe { &*db };
        let st = unsafe { statement(sql, sql_len, params, nparams, buf, buf_len) }?;
        done_out(db.db.exec(st)?, out);
        Ok(())
    })
}

/// Runs a query; `*out` holds its rows until [`ts_rows_free`]. Errors as
/// [`ts_db_exec`].
///
/// # Safety
/// `db` is live; `(sql, sql_len)`, `(params, nparams)` and `(buf, buf_len)`
/// readable; `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_db_query(
    db: *const TsDb,
    sql: *const u8,
    sql_len: usize,
    params: *const TsValue,
    nparams: usize,
    buf: *const u8,
    buf_len: usize,
    out: *mut *mut TsRows,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let db = unsafe { &*db };
        let st = unsafe { statement(sql, sql_len, params, nparams, buf, buf_len) }?;
        rows_out(db.db.query_rows(st)?, out);
        Ok(())
    })
}

/// Views rows; valid until [`ts_rows_free`].
///
/// # Safety
/// `rows` is live; `out` writable. The view is read only until [`ts_rows_free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_rows_view(rows: *const TsRows, out: *mut TsRowsView) {
    quiet((), || {
        let r = unsafe { &*rows };
        unsafe {
            *out = TsRowsView {
                ncols: r.ncols,
                nrows: r.nrows,
                values: crate::args::ptr_of(&r.out.vals),
                buf: crate::args::ptr_of(&r.out.buf),
                buf_len: r.out.buf.len(),
            }
        };
    })
}

/// Frees rows.
///
/// # Safety
/// `rows` is null or live; its views are not read after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_rows_free(rows: *mut TsRows) {
    quiet((), || {
        if !rows.is_null() {
            drop(unsafe { Box::from_raw(rows) });
        }
    })
}

/// Begins a transaction; it holds the database's writer until it ends.
/// Errors: `busy`, `sql`, `closed`.
///
/// # Safety
/// `db` is live; `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_db_begin(db: *const TsDb, out: *mut *mut TsTx, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let tx = unsafe { &*db }.db.begin()?;
        unsafe { *out = Box::into_raw(Box::new(TsTx { tx: SharedTx::new(tx) })) };
        Ok(())
    })
}

fn with_tx<T>(tx: *const TsTx, f: impl FnOnce(&Tx) -> Res<T>) -> Res<T> {
    let mut out = None;
    unsafe { &*tx }.tx.with(|t| {
        out = Some(f(t));
        Ok(())
    })?;
    out.expect("with ran f")
}

/// As [`ts_db_exec`], inside the transaction.
///
/// # Safety
/// `tx` is live (begun and not yet committed or rolled back); otherwise as
/// [`ts_db_exec`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_tx_exec(
    tx: *const TsTx,
    sql: *const u8,
    sql_len: usize,
    params: *const TsValue,
    nparams: usize,
    buf: *const u8,
    buf_len: usize,
    out: *mut TsDone,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let st = unsafe { statement(sql, sql_len, params, nparams, buf, buf_len) }?;
        with_tx(tx, |tx| {
            done_out(tx.exec(st)?, out);
            Ok(())
        })
    })
}

/// As [`ts_db_query`], inside the transaction (it sees its own writes).
///
/// # Safety
/// `tx` is live (begun and not yet committed or rolled back); otherwise as
/// [`ts_db_query`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_tx_query(
    tx: *const TsTx,
    sql: *const u8,
    sql_len: usize,
    params: *const TsValue,
    nparams: usize,
    buf: *const u8,
    buf_len: usize,
    out: *mut *mut TsRows,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let st = unsafe { statement(sql, sql_len, params, nparams, buf, buf_len) }?;
        with_tx(tx, |tx| {
            rows_out(tx.query_rows(st)?, out);
            Ok(())
        })
    })
}

/// Holds `data` (JSON) for the branch `keys` of `channel` of the store `s`
/// until the commit; a rollback drops it (CHAN-03). Checked now: `invalid`
/// (also for a store other than the transaction's), `limit`.
///
/// # Safety
/// `tx` and `s` are live; `(channel, channel_len)`, `(keys, nkeys)`, `(buf, buf_len)`
/// and `(data, data_len)` readable; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_tx_publish(
    tx: *const TsTx,
    s: *const TsStore,
    channel: *const u8,
    channel_len: usize,
    keys: *const TsValue,
    nkeys: usize,
    buf: *const u8,
    buf_len: usize,
    data: *const u8,
    data_len: usize,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        let channel = unsafe { text(channel, channel_len) }?;
        let keys = unsafe { Values::new(keys, nkeys, buf, buf_len) }.keys()?;
        let data: Box<[u8]> = unsafe { bytes(data, data_len) }.into();
        with_tx(tx, |tx| Ok(tx.publish_raw(&s.store, channel, &keys, data)?))
    })
}

fn end(tx: *mut TsTx, commit: bool) -> Res<()> {
    let t = unsafe { Box::from_raw(tx) };
    Ok(t.tx.end(if commit { Tx::commit } else { Tx::rollback })?)
}

/// Commits, then delivers what was published in it, in order; frees the
/// transaction. Errors: `sql`, `busy` (then nothing is delivered).
///
/// # Safety
/// `tx` is live; it is freed by this call, whatever its result. `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_tx_commit(tx: *mut TsTx, err: *mut *mut TsError) -> i32 {
    call(err, || end(tx, true))
}

/// Rolls back and frees the transaction: nothing written or published in it remains.
///
/// # Safety
/// `tx` is live; it is freed by this call, whatever its result. `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_tx_rollback(tx: *mut TsTx, err: *mut *mut TsError) -> i32 {
    call(err, || end(tx, false))
}
