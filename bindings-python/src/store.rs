//! Opening a store, and the store's handles: branches, locks, databases.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tinystore::locks::{Kind, LockOptions};
use tinystore::{ConnectOptions, Key, Store};

use crate::channels::NativeBranch;
use crate::locks::NativeLock;
use crate::loopread::NativeLoopReader;
use crate::pending::{none, run_blocking, run_future, value};
use crate::sql::NativeDatabase;
use crate::{convert, error};

/// A store, owned by this process or connected to another.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeStore {
    pub store: Store,
}

/// Opens (making it if needed) the store directory `dir`: a `Pending`.
#[pyfunction]
pub fn open(py: Python<'_>, dir: PathBuf) -> PyResult<Py<PyAny>> {
    run_blocking(py, move || Store::open(dir).map(|store| value(NativeStore { store })))
}

/// Connects to a store served at `address`: a `Pending`. The token, CA file,
/// request timeout, etcd user and password, etcd client certificate and
/// key, and NATS user and password, token, credentials file, client
/// certificate and key given override the core's defaults (the environment's, 10 s); the
/// core checks them (half a pair is `invalid`).
#[pyfunction]
#[pyo3(signature = (address, token=None, ca_file=None, request_timeout=None, etcd_user=None, etcd_password=None, etcd_cert=None, etcd_key=None, nats_user=None, nats_password=None, nats_token=None, nats_credentials=None, nats_cert=None, nats_key=None))]
#[allow(clippy::too_many_arguments)]
pub fn connect(
    py: Python<'_>,
    address: String,
    token: Option<String>,
    ca_file: Option<PathBuf>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    etcd_user: Option<String>,
    etcd_password: Option<String>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    nats_user: Option<String>,
    nats_password: Option<String>,
    nats_token: Option<String>,
    nats_credentials: Option<PathBuf>,
    nats_cert: Option<PathBuf>,
    nats_key: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let mut opts = ConnectOptions::new();
    if let Some(t) = token {
        opts = opts.token(t);
    }
    if let Some(f) = ca_file {
        opts = opts.ca_file(f);
    }
    if let Some(t) = convert::opt_duration("request_timeout", request_timeout)? {
        opts = opts.request_timeout(t);
    }
    if let Some(t) = nats_token {
        opts = opts.nats_token(t);
    }
    if let Some(f) = nats_credentials {
        opts = opts.nats_credentials(f);
    }
    let opts = opts
        .etcd_user_parts(etcd_user, etcd_password)
        .etcd_identity_parts(etcd_cert, etcd_key)
        .nats_user_parts(nats_user, nats_password)
        .nats_identity_parts(nats_cert, nats_key);
    run_blocking(py, move || Store::connect_with(&address, opts).map(|store| value(NativeStore { store })))
}

/// Runs the `tinystore` command with `args` (the first, the program's name)
/// in this process, the GIL released, and returns its exit status.
#[pyfunction]
pub fn cli(py: Python<'_>, args: Vec<String>) -> i32 {
    py.detach(move || tinystore::cli::run(args))
}

#[pymethods]
impl NativeStore {
    /// Closes the store (idempotent).
    fn close(&self, py: Python<'_>) {
        let store = self.store.clone();
        py.detach(move || store.close());
    }

    /// Closes the store once the publishes already sent have their answers
    /// (connected; up to 2 s): `None`, or a `Pending` of it.
    fn close_settled(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let store = self.store.clone();
        run_future(py, async move {
            store.close_settled().await;
            Ok(none())
        })
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// False in the process that owns the store.
    #[getter]
    fn connected(&self) -> bool {
        !self.store.is_owner()
    }

    /// Over a Unix socket, the current connection's socket for the running
    /// loop to read; None when owned, over TCP or TLS, or disconnected.
    fn loop_reader(&self) -> Option<NativeLoopReader> {
        self.store.loop_reader().map(NativeLoopReader::new)
    }

    #[getter]
    fn epoch(&self) -> u64 {
        self.store.epoch()
    }

    #[getter]
    fn dir(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    /// `status()` as JSON text (over a connection, asked of the owner).
    /// Errors: `closed` once the store is closed (the core's check), never
    /// the figures from before.
    fn status_json(&self, py: Python<'_>) -> PyResult<String> {
        let store = self.store.clone();
        let status = py.detach(move || serde_json::to_string(&store.status_json()?).map_err(tinystore::Error::from));
        error::check(py, status)
    }

    /// The branch `keys` of `channel` (the root for no keys); checks the name and keys.
    #[pyo3(signature = (channel, *keys))]
    fn branch(&self, py: Python<'_>, channel: &str, keys: &Bound<'_, PyTuple>) -> PyResult<NativeBranch> {
        error::check(py, tinystore::limits::check_name("channel", channel))?;
        let keys = keys.iter().map(|k| convert::key(&k)).collect::<PyResult<Vec<Key>>>()?;
        Ok(NativeBranch::new(self.store.clone(), Arc::from(channel), keys))
    }

    /// A lock (`limit` None) or a semaphore (`limit` permits): checks the
    /// name, the limit and the durations (core defaults where None) now.
    /// Never waits for the owner: over a connection, the kind and limit are
    /// checked by the owner by the first hold (`conflict` from there).
    #[pyo3(signature = (name, limit=None, ttl=None, max_hold=None, wait=None))]
    fn lock(
        &self,
        py: Python<'_>,
        name: String,
        limit: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        max_hold: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeLock> {
        let kind = match limit {
            Some(l) if !l.is_none() => Kind::Semaphore { limit: convert::limit(l)? },
            _ => Kind::Lock,
        };
        let d = LockOptions::default();
        let opts = LockOptions {
            ttl: convert::opt_duration("ttl", ttl)?.unwrap_or(d.ttl),
            max_hold: convert::opt_duration("max_hold", max_hold)?,
            wait: convert::opt_duration("wait", wait)?.unwrap_or(d.wait),
        };
        error::check(py, NativeLock::new(self.store.clone(), name, kind, opts))
    }

    /// Opens the database `<dir>/<name>.db`, applying `migrations`: a `Pending`.
    #[pyo3(signature = (name, migrations=None, busy_timeout=None))]
    fn database(
        &self,
        py: Python<'_>,
        name: String,
        migrations: Option<PathBuf>,
        busy_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let busy = convert::opt_duration("busy_timeout", busy_timeout)?;
        let store = self.store.clone();
        run_blocking(py, move || {
            let mut b = store.database(&name);
            if let Some(m) = migrations {
                b = b.migrations(m);
            }
            if let Some(t) = busy {
                b = b.busy_timeout(t);
            }
            b.open().map(|db| value(NativeDatabase { db }))
        })
    }
}
