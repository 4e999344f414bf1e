//! SQL databases and transactions; every SQLite call runs off the event loop.

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, PromiseRaw};
use napi_derive::napi;
use tinystore::sql::{Rows, SharedTx, Statement};
use tinystore::{Database, Done, Tx};

use crate::convert::{self, JsKey, JsSqlParam, JsSqlValue};
use crate::errors::{IntoNapi, blocking};
use crate::ready::now_or_promise;
use crate::store::NativeStore;

/// What a write did.
#[napi(object)]
pub struct NativeDone {
    /// Rows changed by the statement.
    pub changes: f64,
    /// The rowid of the last row inserted: a bigint past 2^53.
    pub last_insert_rowid: Either<f64, BigInt>,
}

impl From<Done> for NativeDone {
    fn from(d: Done) -> NativeDone {
        NativeDone { changes: d.changes as f64, last_insert_rowid: convert::int(d.last_insert_rowid) }
    }
}

/// Rows as column names and values in column order.
#[napi(object)]
pub struct NativeRows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<JsSqlValue>>,
}

impl From<Rows> for NativeRows {
    fn from(r: Rows) -> NativeRows {
        NativeRows {
            columns: r.columns,
            rows: r.rows.into_iter().map(|row| row.into_iter().map(convert::sql_value).collect()).collect(),
        }
    }
}

fn statement(sql: String, params: Vec<JsSqlParam>) -> napi::Result<Statement> {
    Ok(Statement { sql, params: convert::sql_params(params)? })
}

/// A SQL database of the store.
#[napi]
pub struct NativeDatabase {
    db: Database,
}

impl NativeDatabase {
    pub fn new(db: Database) -> NativeDatabase {
        NativeDatabase { db }
    }
}

#[napi]
impl NativeDatabase {
    /// Runs one statement that writes.
    #[napi]
    pub async fn exec(&self, sql: String, params: Vec<JsSqlParam>) -> napi::Result<NativeDone> {
        let stmt = statement(sql, params)?;
        let db = self.db.clone();
        // Queue for the writer here, not on a blocking thread (see writer_turn).
        let turn = db.writer_turn().await.napi()?;
        Ok(blocking(move || {
            let _turn = turn;
            db.exec(stmt)
        })
        .await?
        .into())
    }

    /// Runs a query.
    #[napi]
    pub async fn query(&self, sql: String, params: Vec<JsSqlParam>) -> napi::Result<NativeRows> {
        let stmt = statement(sql, params)?;
        let db = self.db.clone();
        Ok(blocking(move || db.query_rows(stmt)).await?.into())
    }

    /// Begins a transaction (waiting for the database's writer).
    #[napi]
    pub async fn begin(&self) -> napi::Result<NativeTx> {
        let db = self.db.clone();
        let turn = db.writer_turn().await.napi()?;
        let tx = blocking(move || {
            let _turn = turn;
            db.begin()
        })
        .await?;
        Ok(NativeTx { tx: Arc::new(SharedTx::new(tx)) })
    }
}

/// A transaction in progress; rolled back if dropped without `commit`.
#[napi]
pub struct NativeTx {
    /// The core's: `invalid` for a call once it ended.
    tx: Arc<SharedTx>,
}

impl NativeTx {
    /// Runs `f` on the transaction off the event loop.
    async fn with<T: Send + 'static>(&self, f: impl FnOnce(&Tx) -> tinystore::Result<T> + Send + 'static) -> napi::Result<T> {
        run_on(self.tx.clone(), f).await
    }

    /// Ends the transaction with `f` (commit or rollback).
    async fn end(&self, f: impl FnOnce(Tx) -> tinystore::Result<()> + Send + 'static) -> napi::Result<()> {
        let tx = self.tx.clone();
        blocking(move || tx.end(f)).await
    }
}

async fn run_on<T: Send + 'static>(tx: Arc<SharedTx>, f: impl FnOnce(&Tx) -> tinystore::Result<T> + Send + 'static) -> napi::Result<T> {
    blocking(move || tx.with(f)).await
}

#[napi]
impl NativeTx {
    /// As `NativeDatabase.exec`, inside the transaction.
    #[napi]
    pub async fn exec(&self, sql: String, params: Vec<JsSqlParam>) -> napi::Result<NativeDone> {
        let stmt = statement(sql, params)?;
        Ok(self.with(move |t| t.exec(stmt)).await?.into())
    }

    /// As `NativeDatabase.query`, inside the transaction (it sees its own writes).
    #[napi]
    pub async fn query(&self, sql: String, params: Vec<JsSqlParam>) -> napi::Result<NativeRows> {
        let stmt = statement(sql, params)?;
        Ok(self.with(move |t| t.query_rows(stmt)).await?.into())
    }

    /// Holds JSON text for a branch of `store`'s channel until the commit;
    /// checked now (`invalid` too for a store other than the transaction's:
    /// its commit publishes to its database's store).
    #[napi]
    pub fn publish<'env>(
        &self,
        env: &'env Env,
        store: &NativeStore,
        channel: String,
        branch: Vec<JsKey>,
        json: String,
    ) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        let branch = convert::keys(branch)?;
        let (store, tx) = (store.store().clone(), self.tx.clone());
        now_or_promise(env, async move {
            run_on(tx, move |t| t.publish_raw(&store, &channel, &branch, json.into_bytes().into_boxed_slice())).await
        })
    }

    /// Commits, then delivers what was published in the transaction.
    #[napi]
    pub async fn commit(&self) -> napi::Result<()> {
        self.end(Tx::commit).await
    }

    /// Rolls back: nothing written or published in it remains.
    #[napi]
    pub async fn rollback(&self) -> napi::Result<()> {
        self.end(Tx::rollback).await
    }
}

