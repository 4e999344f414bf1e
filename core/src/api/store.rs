//! The store: a directory, its epoch, and the engine that serves it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::api::backend::Backend;
use crate::api::backend::cluster::Cluster;
use crate::api::backend::connected::Connected;
use crate::api::backend::owned::Owned;
use crate::api::publish::Publish;
use crate::api::subscription::RawSubscription;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::check_name;
use crate::engine::channels::{Resume, Scope, check_json, check_message};
use crate::engine::{Engine, StoreStatus};
use crate::net::client::{Client, TakenOver, Takeover};
use crate::net::etcd::{Etcd, EtcdAddress, EtcdOptions};
use crate::net::files::{OWNED_ADVICE, SOCKET_PATH_MAX, absolute, next_epoch, socket_path, take_dir_lock};
use crate::net::wire::Address;
use crate::runtime;

/// How to open a store.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    clock_ms: Option<u64>,
    exclusive: bool,
}

impl OpenOptions {
    /// Default options.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }
    /// Own the directory or fail with `owned`, instead of connecting to the
    /// process that owns it (STORE-01).
    pub fn exclusive(mut self) -> OpenOptions {
        self.exclusive = true;
        self
    }
    /// Uses `ms` as the wall clock for the epoch (tests of LOCK-02: fences grow even when the clock goes back).
    #[doc(hidden)]
    pub fn clock_ms(mut self, ms: u64) -> OpenOptions {
        self.clock_ms = Some(ms);
        self
    }
}

/// How to connect to a store owned by another process
/// ([`Store::connect_with`]).
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    token: Option<String>,
    ca_file: Option<PathBuf>,
    request_timeout: Option<Duration>,
    /// User and password, each as given (a half pair is refused at connect).
    etcd_user: (Option<String>, Option<String>),
    /// Client certificate and key, each as given (likewise).
    etcd_identity: (Option<PathBuf>, Option<PathBuf>),
    sql_dir: Option<PathBuf>,
    nats_creds: Option<PathBuf>,
    /// NATS user and password, each as given (likewise).
    nats_user: (Option<String>, Option<String>),
    nats_token: Option<String>,
    /// NATS client certificate and key, each as given (likewise).
    nats_identity: (Option<PathBuf>, Option<PathBuf>),
}

impl ConnectOptions {
    /// Default options: the token from `TINYSTORE_TOKEN`, the CA from
    /// `TINYSTORE_CA`; for `etcd://` addresses the user and password from
    /// `TINYSTORE_ETCD_USER` and `TINYSTORE_ETCD_PASSWORD`, the client
    /// certificate and key from `TINYSTORE_ETCD_CERT` and
    /// `TINYSTORE_ETCD_KEY`, the SQL directory from
    /// `TINYSTORE_CLUSTER_SQL_DIR`, when set.
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }
    /// The token for `tcp:` and `tls:` addresses (a line of the owner's
    /// `<dir>/tokens`), instead of `TINYSTORE_TOKEN`.
    pub fn token(mut self, token: impl Into<String>) -> ConnectOptions {
        self.token = Some(token.into());
        self
    }
    /// For `etcd://` and `etcds://` addresses: etcd's user and password
    /// (etcd's own authentication), instead of `TINYSTORE_ETCD_USER` and
    /// `TINYSTORE_ETCD_PASSWORD`.
    pub fn etcd_user(mut self, user: impl Into<String>, password: impl Into<String>) -> ConnectOptions {
        self.etcd_user = (Some(user.into()), Some(password.into()));
        self
    }
    /// [`etcd_user`](ConnectOptions::etcd_user) for a binding whose user and
    /// password arrive as two optional arguments: `None` for both keeps the
    /// environment's; one without the other makes the connect fail with
    /// `invalid`, saying which is missing.
    pub fn etcd_user_parts(mut self, user: Option<String>, password: Option<String>) -> ConnectOptions {
        self.etcd_user = (user, password);
        self
    }
    /// For `etcds://` addresses whose members ask for client certificates:
    /// this process's certificate and private key, PEM files, instead of
    /// `TINYSTORE_ETCD_CERT` and `TINYSTORE_ETCD_KEY`.
    pub fn etcd_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> ConnectOptions {
        self.etcd_identity = (Some(cert.into()), Some(key.into()));
        self
    }
    /// [`etcd_identity`](ConnectOptions::etcd_identity) for a binding whose
    /// certificate and key arrive as two optional arguments: `None` for both
    /// keeps the environment's; one without the other makes the connect
    /// fail with `invalid`, saying which is missing.
    pub fn etcd_identity_parts(mut self, cert: Option<PathBuf>, key: Option<PathBuf>) -> ConnectOptions {
        self.etcd_identity = (cert, key);
        self
    }
    /// For `etcd://` addresses: the directory on this machine where
    /// `store.database(name)` keeps `<name>.db`, instead of
    /// `TINYSTORE_CLUSTER_SQL_DIR` or the default
    /// `$XDG_DATA_HOME/tinystore/cluster/<prefix>` (`~/.local/share/...`).
    /// A cluster store does not share its SQL databases between machines.
    pub fn sql_dir(mut self, dir: impl Into<PathBuf>) -> ConnectOptions {
        self.sql_dir = Some(dir.into());
        self
    }
    /// For cluster addresses with `?nats=`: a NATS credentials file (its
    /// JWT and nkey seed), instead of `TINYSTORE_NATS_CREDS`.
    pub fn nats_credentials(mut self, path: impl Into<PathBuf>) -> ConnectOptions {
        self.nats_creds = Some(path.into());
        self
    }
    /// For cluster addresses with `?nats=`: NATS's user and password,
    /// instead of `TINYSTORE_NATS_USER` and `TINYSTORE_NATS_PASSWORD`.
    pub fn nats_user(mut self, user: impl Into<String>, password: impl Into<String>) -> ConnectOptions {
        self.nats_user = (Some(user.into()), Some(password.into()));
        self
    }
    /// [`nats_user`](ConnectOptions::nats_user) for a binding whose user and
    /// password arrive as two optional arguments: `None` for both keeps the
    /// environment's; one without the other makes the connect fail with
    /// `invalid`, saying which is missing.
    pub fn nats_user_parts(mut self, user: Option<String>, password: Option<String>) -> ConnectOptions {
        self.nats_user = (user, password);
        self
    }
    /// For cluster addresses with `?nats=`: the token the NATS servers'
    /// `authorization { token: ... }` asks for, instead of `TINYSTORE_NATS_TOKEN`.
    pub fn nats_token(mut self, token: impl Into<String>) -> ConnectOptions {
        self.nats_token = Some(token.into());
        self
    }
    /// For `tls://` NATS servers that verify clients (`tls { verify: true }`):
    /// this process's certificate and private key, PEM files, instead of
    /// `TINYSTORE_NATS_CERT` and `TINYSTORE_NATS_KEY`. The CA is
    /// [`ca_file`](ConnectOptions::ca_file)'s.
    pub fn nats_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> ConnectOptions {
        self.nats_identity = (Some(cert.into()), Some(key.into()));
        self
    }
    /// [`nats_identity`](ConnectOptions::nats_identity) as two optional
    /// arguments, as [`nats_user_parts`](ConnectOptions::nats_user_parts).
    pub fn nats_identity_parts(mut self, cert: Option<PathBuf>, key: Option<PathBuf>) -> ConnectOptions {
        self.nats_identity = (cert, key);
        self
    }
    /// For `tls:` and `etcds://` addresses (and `tls://` NATS servers): a PEM file of the CA certificate(s) that signed
    /// the store's certificate (for a self-signed one, that certificate),
    /// instead of `TINYSTORE_CA`. Only these are trusted: no public roots.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> ConnectOptions {
        self.ca_file = Some(path.into());
        self
    }
    /// How long a request may go unanswered (beyond a hold's `wait`)
    /// before it fails with `timeout`. Default
    /// [`REQUEST_TIMEOUT`](crate::base::limits::REQUEST_TIMEOUT), 10 s; checked
    /// every 250 ms.
    pub fn request_timeout(mut self, t: Duration) -> ConnectOptions {
        self.request_timeout = Some(t);
        self
    }
}

impl ConnectOptions {
    /// The parsed `etcd://` address, the options for etcd (these, else the
    /// environment's) and the directory of its SQL databases on this machine.
    pub(crate) fn for_cluster(self, address: &str) -> Result<(EtcdAddress, EtcdOptions, PathBuf)> {
        let addr = EtcdAddress::parse(address)?;
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let user = both(self.etcd_user, ("etcd user", "etcd password"), "TINYSTORE_ETCD_USER and TINYSTORE_ETCD_PASSWORD")?.or_else(|| {
            match (std::env::var("TINYSTORE_ETCD_USER"), std::env::var("TINYSTORE_ETCD_PASSWORD")) {
                (Ok(u), Ok(p)) if !u.is_empty() => Some((u, p)),
                _ => None,
            }
        });
        let identity = both(self.etcd_identity, ("etcd client certificate", "etcd client key"), "TINYSTORE_ETCD_CERT and TINYSTORE_ETCD_KEY")?
            .or_else(|| Some((env("TINYSTORE_ETCD_CERT")?, env("TINYSTORE_ETCD_KEY")?)));
        let ca_file = self.ca_file.or_else(|| env("TINYSTORE_CA"));
        let request_timeout = self.request_timeout.unwrap_or(crate::base::limits::REQUEST_TIMEOUT);
        let nats = crate::net::nats::NatsOptions {
            creds_file: self.nats_creds.or_else(|| env("TINYSTORE_NATS_CREDS")),
            user: both(self.nats_user, ("NATS user", "NATS password"), "TINYSTORE_NATS_USER and TINYSTORE_NATS_PASSWORD")?.or_else(|| {
                match (std::env::var("TINYSTORE_NATS_USER"), std::env::var("TINYSTORE_NATS_PASSWORD")) {
                    (Ok(u), Ok(p)) if !u.is_empty() => Some((u, p)),
                    _ => None,
                }
            }),
            token: self.nats_token.or_else(|| std::env::var("TINYSTORE_NATS_TOKEN").ok().filter(|t| !t.is_empty())),
            identity: both(self.nats_identity, ("NATS client certificate", "NATS client key"), "TINYSTORE_NATS_CERT and TINYSTORE_NATS_KEY")?
                .or_else(|| Some((env("TINYSTORE_NATS_CERT")?, env("TINYSTORE_NATS_KEY")?))),
            ca_file: ca_file.clone(),
            request_timeout,
        };
        let eo = EtcdOptions { user, ca_file, identity, request_timeout, nats };
        let dir = self.sql_dir.or_else(|| env("TINYSTORE_CLUSTER_SQL_DIR")).unwrap_or_else(|| {
            let data = env("XDG_DATA_HOME").or_else(|| env("HOME").map(|h| h.join(".local/share"))).unwrap_or_else(std::env::temp_dir);
            data.join("tinystore").join("cluster").join(addr.prefix.replace('/', "_"))
        });
        Ok((addr, eo, dir))
    }
}

/// Both halves of a connect option given in two (user and password,
/// certificate and key), or neither (`None`: the environment's); one alone
/// is `invalid`.
fn both<T>(pair: (Option<T>, Option<T>), names: (&str, &str), env: &str) -> Result<Option<(T, T)>> {
    match pair {
        (Some(a), Some(b)) => Ok(Some((a, b))),
        (None, None) => Ok(None),
        (a, _) => {
            let (given, missing) = if a.is_some() { names } else { (names.1, names.0) };
            Err(Error::invalid(format!("the {given} was given without the {missing}: give both, or neither to take them from {env}")))
        }
    }
}

/// A store: channels, locks, semaphores and SQL databases in one directory.
///
/// `Store::open(dir)` makes this process the store's owner when no live
/// process owns the directory: it takes an OS lock on the directory, writes
/// the new epoch to `kv.db`, keeps channels and locks in memory, and serves
/// the store to other processes on `<dir>/tinystore.sock`. When another
/// process owns it, `open` connects to that one instead, and takes the store
/// over if the owner goes away (STORE-01). Either way the API is the same.
/// Cheap to clone; the store closes when the last clone is dropped or
/// [`close`](Store::close) is called.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    closed: AtomicBool,
    /// Set by [`Store::close_settled`] while it waits: no new call starts.
    closing: AtomicBool,
    /// Chosen once, at open or connect: every call below goes through it.
    backend: Box<dyn Backend>,
}

impl Store {
    /// Opens (creating it if needed) the store directory `dir`: owns it if
    /// no live process does, else connects to its owner (STORE-01).
    ///
    /// A cluster store's address (`etcd://...` or `etcds://...`, see
    /// [`connect`](Store::connect)) given as `dir` is connected to, with the
    /// connect options' defaults from the environment: so an app that opens
    /// a directory runs unchanged on a cluster store when given its address.
    ///
    /// Errors: `owned` with [`OpenOptions::exclusive`] when another process
    /// owns the directory, `io` when the directory cannot be made, locked or
    /// reached, `sql` when `kv.db` is unreadable.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir, OpenOptions::default())
    }

    /// Like [`open`](Store::open), with options.
    pub fn open_with(dir: impl AsRef<Path>, opts: OpenOptions) -> Result<Store> {
        let dir = dir.as_ref();
        if let Some(address) = dir.to_str().filter(|d| EtcdAddress::is_etcd(d)) {
            if opts.exclusive {
                return Err(Error::invalid(format!("{address} is a cluster store: nobody owns it, so it cannot be opened exclusively; open it without `exclusive`")));
            }
            return Store::connect_cluster(address, ConnectOptions::default());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match Store::open_owned(dir, &opts) {
                Err(e) if e.kind() == ErrorKind::Owned && !opts.exclusive => {
                    let sock = socket_path(&absolute(dir)?);
                    match Client::connect(Address::Unix(sock), None, None, Some(takeover(dir)), Duration::from_millis(100), None) {
                        Ok(client) => return Ok(Store::connected(client)),
                        // The owner is starting, or just went away: try both again.
                        Err(c) if Instant::now() >= deadline => {
                            // Connecting was tried: the advice is about that process.
                            let owner = e.message().strip_suffix(OWNED_ADVICE).unwrap_or(e.message());
                            return Err(Error::new(
                                ErrorKind::Owned,
                                format!("{owner}, which did not serve this process within 5 s: {}; if it is stuck, stop it, and this open will own the store", c.message()),
                            ));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                r => return r,
            }
        }
    }

    fn open_owned(dir: &Path, opts: &OpenOptions) -> Result<Store> {
        if dir.as_os_str().is_empty() {
            return Err(Error::invalid("the store directory is an empty path: give a directory, like \"./data\" (it is made if missing)"));
        }
        if dir.exists() && !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{} is not a directory: a store is a directory of its own (made if missing); give another path", dir.display()),
            ));
        }
        // Before anything is made: its socket's path must fit the OS's limit.
        let sock = socket_path(&absolute(dir)?);
        let len = sock.as_os_str().len();
        if len >= SOCKET_PATH_MAX {
            return Err(Error::invalid(format!(
                "the store directory {} is too deep: its socket {} would be {len} bytes, and a Unix socket's path must be under {SOCKET_PATH_MAX}; use a shorter path (a symbolic link to the directory works)",
                dir.display(),
                sock.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(&format!("could not make the store directory {}", dir.display()), e))?;
        let dir = absolute(dir)?;
        let lock = take_dir_lock(&dir)?;
        let epoch = next_epoch(&dir, opts.clock_ms)?;
        let engine = Engine::start(epoch);
        // Leases of a dead owner's connected holders may still be alive.
        engine.start_lock_graces(crate::net::files::remote_lock_ttls(&dir)?);
        let backend = Owned::new(engine, &dir, lock);
        let store = Store { inner: Arc::new(Inner { dir: dir.clone(), closed: AtomicBool::new(false),
            closing: AtomicBool::new(false), backend: Box::new(backend) }) };
        store.serve_with(&Address::Unix(socket_path(&dir)), None)?;
        Ok(store)
    }

    fn connected(client: Arc<Client>) -> Store {
        let dir = client.hello().map(|h| PathBuf::from(h.dir)).unwrap_or_default();
        Store { inner: Arc::new(Inner { dir, closed: AtomicBool::new(false),
            closing: AtomicBool::new(false), backend: Box::new(Connected::new(client)) }) }
    }

    /// Connects to a store owned by another process, at `address`:
    /// `unix:PATH` (an owner serves `unix:<dir>/tinystore.sock`),
    /// `tcp:HOST:PORT` with the token in `TINYSTORE_TOKEN`, or
    /// `tls:HOST:PORT` with the token and, in `TINYSTORE_CA`, the PEM file of
    /// the CA that signed the store's certificate (checked for HOST). The
    /// same API as an owned store; the client reconnects by itself when the
    /// connection drops.
    ///
    /// `etcd://HOST:PORT,.../PREFIX` (`etcds://` for TLS) is a cluster
    /// store: its locks, semaphores and fences in an etcd cluster, every
    /// key under `/PREFIX/` (docs/cluster.md); its channels on NATS
    /// JetStream when the address names NATS servers
    /// (`?nats=nats://HOST:PORT,...`, `&replicas=N`), else none; its SQL
    /// databases are files on this machine. Errors there: `invalid` (the
    /// address, or TLS without a CA), `unavailable` (no etcd member or
    /// NATS server answered within the request timeout), `auth` (etcd's
    /// user or password). Errors: `invalid` (address, or `tls:` without a CA),
    /// `io` (nobody listens, or the CA file is unreadable), `auth` (token,
    /// or a certificate the CA does not vouch for), `protocol` (TLS on one
    /// side only).
    pub fn connect(address: &str) -> Result<Store> {
        Store::connect_with(address, ConnectOptions::default())
    }

    /// Like [`connect`](Store::connect), with a token or CA file given
    /// instead of read from the environment.
    pub fn connect_with(address: &str, opts: ConnectOptions) -> Result<Store> {
        if EtcdAddress::is_etcd(address) {
            return Store::connect_cluster(address, opts);
        }
        let addr = Address::parse(address).map_err(|_| {
            Error::invalid(format!(
                "address {address:?} is not understood: write unix:PATH (like unix:data/tinystore.sock), tcp:HOST:PORT (like tcp:127.0.0.1:7070), tls:HOST:PORT (like tls:db.example.com:7443), or etcd://HOST:PORT,.../PREFIX for a cluster store (like etcd://h1:2379,h2:2379/myapp; docs/cluster.md)"
            ))
        })?;
        let token = opts.token.or_else(|| std::env::var("TINYSTORE_TOKEN").ok());
        let tls = match &addr {
            Address::Tls(_) => {
                let ca = opts.ca_file.or_else(|| std::env::var_os("TINYSTORE_CA").filter(|v| !v.is_empty()).map(PathBuf::from));
                Some(crate::net::tls::ClientTls::load(address, ca)?)
            }
            _ => None,
        };
        let client = Client::connect(addr, token, tls, None, Duration::from_millis(500), opts.request_timeout)?;
        Ok(Store::connected(client))
    }

    /// A cluster store: its locks, semaphores and fences in etcd
    /// (docs/cluster.md).
    fn connect_cluster(address: &str, opts: ConnectOptions) -> Result<Store> {
        let (addr, eo, dir) = opts.for_cluster(address)?;
        let nats_opts = eo.nats.clone();
        let (etcd, jet) = runtime::block_on(async {
            let etcd = Etcd::connect(&addr, eo).await?;
            let jet = match &addr.nats {
                Some(n) => Some(crate::net::nats::Jet::connect(n, &addr.prefix, nats_opts).await?),
                None => None,
            };
            Ok::<_, crate::base::error::Error>((etcd, jet))
        })?;
        Ok(Store { inner: Arc::new(Inner { dir, closed: AtomicBool::new(false),
            closing: AtomicBool::new(false), backend: Box::new(Cluster::new(etcd, jet)) }) })
    }

    /// Serves this store on another address as well. `tcp:HOST:PORT` needs
    /// `<dir>/tokens` (see `tinystore token new`); `tls:HOST:PORT` needs the
    /// tokens and a certificate and its key in PEM at `<dir>/tls/cert.pem`
    /// and `<dir>/tls/key.pem` ([`serve_tls`](Store::serve_tls) takes other
    /// files). Errors: `invalid` on a connected store (only the owner
    /// serves) or a bad certificate or key, `io`, `auth` (no tokens).
    pub fn serve(&self, address: &str) -> Result<()> {
        self.serve_with(&Address::parse(address)?, None)
    }

    /// Serves `tls:HOST:PORT` with the certificate chain in `cert` (PEM,
    /// the store's certificate first) and its private key in `key` (PEM:
    /// PKCS#8, PKCS#1 or SEC1). Clients need a token from `<dir>/tokens` and
    /// the CA that signed `cert`. Errors as [`serve`](Store::serve), and
    /// `invalid` for an address that is not `tls:`.
    pub fn serve_tls(&self, address: &str, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<()> {
        self.serve_tls_with(&Address::parse(address)?, cert.as_ref(), key.as_ref(), None)
    }

    /// Serves `address`; `shutdown` is notified when a client asks the owner to stop.
    #[doc(hidden)]
    pub fn serve_with(&self, address: &Address, shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        self.listen_on(address, None, shutdown)
    }

    /// [`serve_tls`](Store::serve_tls) for `tinystore serve`.
    #[doc(hidden)]
    pub fn serve_tls_with(&self, address: &Address, cert: &Path, key: &Path, shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        if !matches!(address, Address::Tls(_)) {
            return Err(Error::invalid(format!("a certificate and key are for tls:HOST:PORT addresses, not {address}")));
        }
        self.listen_on(address, Some((cert, key)), shutdown)
    }

    fn listen_on(&self, address: &Address, tls_files: Option<(&Path, &Path)>, shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        self.inner.backend.serve(address, tls_files, shutdown)
    }

    /// Lets clients stop this owner (`tinystore stop`): `n` is notified then.
    #[doc(hidden)]
    pub fn on_shutdown(&self, n: Arc<tokio::sync::Notify>) {
        self.inner.backend.on_shutdown(n)
    }

    /// True when this process owns the store (it did not connect to another).
    pub fn is_owner(&self) -> bool {
        self.inner.backend.is_owner()
    }

    /// Over a Unix socket, the current connection's socket for a language's
    /// event loop to read ([`LoopReader`](crate::LoopReader));
    /// `None` in the owning process, over TCP or TLS, and while
    /// disconnected.
    pub fn loop_reader(&self) -> Option<crate::net::client::LoopReader> {
        self.inner.backend.loop_reader()
    }

    /// The store directory; for a cluster store, the directory of its SQL
    /// databases on this machine ([`ConnectOptions::sql_dir`]).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// This open's epoch: milliseconds since 1970 at open, or the previous
    /// epoch plus one if that is larger. The high 64 bits of every fence.
    pub fn epoch(&self) -> u64 {
        self.inner.backend.epoch()
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire) || self.inner.closing.load(Ordering::Acquire)
    }

    /// Closes the store: subscriptions end, held keys are let go (their
    /// holders see their leases lost), waiters get `closed`, and the directory
    /// is free for another owner. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Closes, first letting the publishes already sent over a connection
    /// get their answers (up to 2 s; an owner that does not answer by then
    /// leaves them `closed`), so a program that publishes and then closes
    /// sees its publishes resolve. The bindings' `close` is this.
    ///
    /// From the call on, the store counts as closed: new calls fail with
    /// `closed` at once and send nothing. A publish still unanswered at the
    /// end fails with `closed` saying it may have been delivered.
    pub async fn close_settled(&self) {
        self.inner.closing.store(true, Ordering::Release);
        self.inner.backend.settle(Duration::from_secs(2)).await;
        self.close();
    }

    /// What the store holds now: subscribers and their branches, held keys
    /// with fences and waiters. Over a connection, asks the owner. Errors:
    /// `closed` once this handle was closed; over a connection, what the
    /// request met (`timeout` when the owner does not answer).
    pub fn status(&self) -> Result<StoreStatus> {
        let v = self.status_json()?;
        serde_json::from_value(v).map_err(|e| Error::new(ErrorKind::Protocol, format!("the store's status is not in the expected shape: {e}")))
    }

    /// [`status`](Store::status) as JSON, with the owner's connections.
    /// Errors: `closed` once this handle was closed.
    pub fn status_json(&self) -> Result<serde_json::Value> {
        self.inner.backend.status_json(&self.inner.dir)
    }

    /// Asks the owner to stop (a `tinystore serve` process). Errors: `invalid`
    /// when the owner is an application process, `auth`.
    #[doc(hidden)]
    pub fn shutdown_owner(&self) -> Result<()> {
        self.inner.backend.shutdown_owner()
    }

    /// The store's files are reachable from here: always for the owner; for
    /// a connected store, only where its owner holds `<dir>/owner.lock` on
    /// this machine. Over `tcp:` or `tls:` from another machine the same
    /// path would be another file, or none (SQL runs next to the store).
    pub(crate) fn check_files_here(&self) -> Result<()> {
        self.inner.backend.check_files_here(&self.inner.dir)
    }

    /// True for two handles of one `open` or `connect` (clones).
    pub fn same_handle(&self, other: &Store) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        runtime::check_not_forked()?;
        if self.is_closed() { Err(Error::closed()) } else { Ok(()) }
    }

    /// Ok once a publish could leave: open, and connected if a client (a
    /// reconnect is waited for up to the request timeout: STORE-02).
    pub(crate) fn check_can_publish(&self) -> Result<()> {
        self.check_open()?;
        self.inner.backend.check_can_publish()
    }

    /// Publishes JSON bytes to a branch (the bindings' boundary). The
    /// message leaves at this call, so publishes called one after another
    /// keep their order even when their futures are awaited together (CHAN-01);
    /// the future resolves once the store has it. Connected, while the
    /// connection is re-established it waits in the client, in order (up to
    /// the request timeout and 8 MiB: STORE-02). Errors: `invalid` (name or
    /// key out of rule, or `data` not one JSON value), `limit` (over 1 MiB,
    /// or nested over 100 deep), `closed` (this store was closed),
    /// `unavailable` (connected: the store stayed out of reach past the
    /// request timeout, or the connection was cut before its answer).
    pub fn publish_raw(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish {
        match self.check_raw(&data) {
            Err(e) => Publish::done(Err(e)),
            Ok(()) => self.publish_serialized(channel, branch, data),
        }
    }

    /// Publishes a burst of JSON values to one branch, in their order, and
    /// resolves once the store has every one (the bindings' boundary for a
    /// language without futures of its own, Go's `PublishMany`): they leave
    /// together (connected, in requests of up to 1,024 messages and 1 MiB,
    /// each answered once) and arrive in order, as [`Store::publish_raw`]
    /// calls made one after another do. Every message is checked before any leaves:
    /// `invalid` or `limit` (as for `publish_raw`), naming the message by
    /// its index from 0, and then nothing is published. After they left,
    /// the call resolves once every message has its outcome (nothing of the
    /// burst is published after it), with the first failure
    /// (`unavailable`, `timeout`, `closed`, as for one publish), naming its
    /// message and, when more failed, how many and the last of them.
    pub fn publish_raw_many(&self, channel: &str, branch: &[Key], data: Vec<Box<[u8]>>) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        self.publish_many(channel, branch, data, true)
    }

    /// [`Store::publish_raw_many`]; `raw`: the bytes came from a caller
    /// (checked as JSON), not from serde.
    pub(crate) fn publish_many(&self, channel: &str, branch: &[Key], data: Vec<Box<[u8]>>, raw: bool) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let count = data.len();
        let named = move |i: usize, e: Error| e.of_burst(i, count);
        let checked = self
            .check_open()
            .and_then(|_| check_name("channel", channel))
            .and_then(|_| branch.iter().try_for_each(Key::check))
            .and_then(|_| data.iter().enumerate().try_for_each(|(i, d)| check_message(d).and_then(|_| if raw { self.check_raw(d) } else { Ok(()) }).map_err(|e| named(i, e))));
        // Checked once above: the burst goes to the backend as it is.
        let parts = checked.and_then(|_| self.inner.backend.publish_burst(channel, branch, data).map_err(|(i, e)| named(i, e)));
        async move {
            // Every outcome is awaited, so that none of them is published
            // after the call returned (a cut connection's queued ones leave
            // on the reconnect): the first failure is given, with how many.
            let (mut first, mut failed, mut last) = (None, 0usize, 0usize);
            for (i, n, p) in parts? {
                if let Err(e) = p.await {
                    first.get_or_insert((i, e));
                    failed += n;
                    last = i + n - 1;
                }
            }
            match first {
                None => Ok(()),
                Some((i, e)) if failed == 1 => Err(named(i, e)),
                Some((i, e)) => Err(Error::new(
                    e.kind(),
                    format!("messages {i} to {last} of the {count} given had {failed} failures, the others were published; message {i}: {}", e.message()),
                )),
            }
        }
    }

    /// [`Store::publish_raw`] of bytes a JSON encoder made (serde's): one
    /// JSON value already.
    pub(crate) fn publish_serialized(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish {
        let checked = self.check_open().and_then(|_| check_name("channel", channel)).and_then(|_| branch.iter().try_for_each(Key::check));
        match checked {
            Err(e) => Publish::done(Err(e)),
            Ok(()) => self.inner.backend.publish(channel, branch, data),
        }
    }

    /// Raw bytes are one JSON value, checked here unless the backend checks
    /// them itself (a connected client does, as it writes them in its frame).
    pub(crate) fn check_raw(&self, data: &[u8]) -> Result<()> {
        if self.inner.backend.checks_json() { Ok(()) } else { check_json(data) }
    }

    /// [`Store::publish_raw`] for an event loop of a binding: `done` is
    /// given the outcome, instead of a future to poll for it.
    ///
    /// Gives `Some` when the publish ended within this call (always in the
    /// owning process; connected, on an error before the message left):
    /// `done` is then dropped uncalled. Else `None`, and `done` is called
    /// once, with the store's answer or the error that cut it off (as
    /// `publish_raw`'s future would end), on the thread that reads the
    /// answer: an engine thread, or one in [`crate::LoopReader::readable`].
    /// It must not block.
    pub fn publish_raw_then(
        &self,
        channel: &str,
        branch: &[Key],
        data: &[u8],
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Option<Result<()>> {
        let checked = self.check_open().and_then(|_| check_name("channel", channel)).and_then(|_| branch.iter().try_for_each(Key::check));
        if let Err(e) = checked.and_then(|_| self.check_raw(data)) {
            return Some(Err(e));
        }
        // Boxed only by a backend that keeps it: the owned one answers at once.
        let mut done = Some(done);
        let mut keep = || Box::new(done.take().expect("a backend keeps `done` once")) as Box<dyn FnOnce(Result<()>) + Send>;
        self.inner.backend.publish_then(channel, branch, data, &mut keep)
    }

    /// The backend chosen at open or connect, for the handles' own calls.
    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.inner.backend
    }

    /// A ticket for a transaction that published to `channels` (checked),
    /// taken before its commit (CHAN-03). Errors: `closed`.
    pub(crate) fn take_ticket(&self, channels: Vec<Arc<str>>) -> Result<u64> {
        self.check_open()?;
        self.inner.backend.take_ticket(channels)
    }

    /// Ends a ticket: delivers `msgs` (checked) after the earlier tickets',
    /// or gives it up (`None`). Errors: `timeout` (past the bound: dropped),
    /// `closed`.
    pub(crate) fn end_ticket(&self, ticket: u64, msgs: Option<Vec<crate::engine::tickets::Held>>) -> Result<()> {
        self.check_open()?;
        self.inner.backend.end_ticket(ticket, msgs)
    }

    /// Subscribes to a branch and gives a subscription to pull from (the
    /// bindings' boundary); returns once the store has it. Errors:
    /// `invalid`, `limit` (10,000 subscriptions), `closed`.
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
        self.inner.backend.subscribe(channel, branch, scope, resume).await.map(RawSubscription::new)
    }

}

impl Inner {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.backend.close(&self.dir);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

/// The hook a client made by `open(dir)` is given: when the owner went
/// away, this process tries to own `dir` itself (STORE-01). The store taken over serves the `tcp:`/`tls:` listeners its owners
/// served too (recorded in `kv.db` when they served them).
fn takeover(dir: &Path) -> Takeover {
    let dir = dir.to_path_buf();
    Box::new(move || {
        let s = Store::open_owned(&dir, &OpenOptions::default()).ok()?;
        s.serve_recorded();
        Some(Box::new(s) as Box<dyn TakenOver>)
    })
}

impl Store {
    /// Serves again the listeners owners of this directory served; one that
    /// cannot be served (its port taken, its files gone) is said on stderr,
    /// as the store goes on over its Unix socket.
    fn serve_recorded(&self) {
        let listeners = match crate::net::files::recorded_listeners(self.dir()) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tinystore: took over {} but could not read its listeners: {e}", self.dir().display());
                return;
            }
        };
        for l in listeners {
            let served = Address::parse(&l.address).and_then(|a| match (&l.cert, &l.key) {
                (Some(c), Some(k)) => self.serve_tls_with(&a, c, k, None),
                _ => self.serve_with(&a, None),
            });
            if let Err(e) = served {
                eprintln!("tinystore: took over {} but could not serve {} again: {e}", self.dir().display(), l.address);
            }
        }
    }
}

impl TakenOver for Store {
    fn close(&self) {
        Store::close(self)
    }
}

/// Milliseconds since 1970 of `t`: for timestamps in SQL rows.
pub fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
