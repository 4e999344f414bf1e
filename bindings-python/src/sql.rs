//! SQL databases of the store and transactions that publish at commit.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use tinystore::sql::{Rows, SharedTx, SqlValue, Statement};
use tinystore::{Database, Error, ErrorKind, Tx, runtime};

use crate::channels::NativeBranch;
use crate::pending::{Convert, Outcome, none, run_blocking, run_future, value};
use crate::convert;

fn statement(sql: String, params: &Bound<'_, PyTuple>) -> PyResult<Statement> {
    let params = params.iter().map(|p| convert::sql_value(&p)).collect::<PyResult<Vec<SqlValue>>>()?;
    Ok(Statement { sql, params })
}

fn done(d: tinystore::Done) -> Convert {
    value((d.changes, d.last_insert_rowid))
}

/// Rows as a list of dicts, column name to value.
fn rows(r: Rows) -> Convert {
    Box::new(move |py| {
        let names: Vec<Bound<'_, PyString>> = r.columns.iter().map(|c| PyString::intern(py, c)).collect();
        let out = PyList::empty(py);
        for row in &r.rows {
            let d = PyDict::new(py);
            for (name, v) in names.iter().zip(row) {
                d.set_item(name, convert::sql_to_py(py, v)?)?;
            }
            out.append(d)?;
        }
        Ok(out.into_any().unbind())
    })
}

/// Runs `f` on the runtime's blocking threads and waits for it.
async fn blocking(f: impl FnOnce() -> Outcome + Send + 'static) -> Outcome {
    runtime::handle().spawn_blocking(f).await.unwrap_or_else(|e| Err(Error::new(ErrorKind::Internal, format!("a blocking call failed: {e}"))))
}

/// A SQL database of the store.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeDatabase {
    pub db: Database,
}

#[pymethods]
impl NativeDatabase {
    /// Runs a statement that writes: a `Pending` of `(changes, last_insert_rowid)`.
    #[pyo3(signature = (sql, *params))]
    fn exec(&self, py: Python<'_>, sql: String, params: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let (db, stmt) = (self.db.clone(), statement(sql, params)?);
        // Queue for the writer here, not on a blocking thread (see writer_turn).
        run_future(py, async move {
            let turn = db.writer_turn().await?;
            blocking(move || {
                let _turn = turn;
                db.exec(stmt).map(done)
            })
            .await
        })
    }

    /// Runs a query: a `Pending` of a list of dicts.
    #[pyo3(signature = (sql, *params))]
    fn query(&self, py: Python<'_>, sql: String, params: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let (db, stmt) = (self.db.clone(), statement(sql, params)?);
        run_blocking(py, move || db.query_rows(stmt).map(rows))
    }

    /// Begins a transaction: a `Pending` of a `NativeTx`.
    fn begin(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let db = self.db.clone();
        run_future(py, async move {
            let turn = db.writer_turn().await?;
            blocking(move || {
                let _turn = turn;
                db.begin().map(|tx| value(NativeTx { tx: Arc::new(SharedTx::new(tx)) }))
            })
            .await
        })
    }

    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.db.path().to_path_buf()
    }
}

/// A transaction in progress; dropped unfinished, it rolls back.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeTx {
    /// The core's: `invalid` for a call once it ended.
    tx: Arc<SharedTx>,
}

impl NativeTx {
    /// Runs `f` with the transaction on the blocking pool.
    fn with<F>(&self, py: Python<'_>, f: F) -> PyResult<Py<PyAny>>
    where
        F: FnOnce(&Tx) -> tinystore::Result<Convert> + Send + 'static,
    {
        let tx = self.tx.clone();
        run_blocking(py, move || tx.with(f))
    }

    /// Ends the transaction with `f` (commit or rollback) on the blocking pool.
    fn end<F>(&self, py: Python<'_>, f: F) -> PyResult<Py<PyAny>>
    where
        F: FnOnce(Tx) -> tinystore::Result<()> + Send + 'static,
    {
        let tx = self.tx.clone();
        run_blocking(py, move || tx.end(f).map(|()| none()))
    }
}

#[pymethods]
impl NativeTx {
    #[pyo3(signature = (sql, *params))]
    fn exec(&self, py: Python<'_>, sql: String, params: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let stmt = statement(sql, params)?;
        self.with(py, move |tx| tx.exec(stmt).map(done))
    }

    #[pyo3(signature = (sql, *params))]
    fn query(&self, py: Python<'_>, sql: String, params: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let stmt = statement(sql, params)?;
        self.with(py, move |tx| tx.query_rows(stmt).map(rows))
    }

    /// Holds JSON bytes for `branch` until the commit.
    fn publish(&self, py: Python<'_>, branch: &NativeBranch, data: &[u8]) -> PyResult<Py<PyAny>> {
        let (store, channel, keys, data) = (branch.store().clone(), branch.channel().to_owned(), branch.keys().to_vec(), Box::<[u8]>::from(data));
        self.with(py, move |tx| tx.publish_raw(&store, &channel, &keys, data).map(|()| none()))
    }

    fn commit(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.end(py, Tx::commit)
    }

    fn rollback(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.end(py, Tx::rollback)
    }
}
