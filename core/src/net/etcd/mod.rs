//! A store on an etcd cluster: the address `etcd://HOST:PORT,.../PREFIX`,
//! the connection (one `etcd_client::Client`, its calls bounded by the
//! request timeout), the epoch kept under the prefix, the declared kinds of
//! locks, and the status. Locks and their leases are in `lock.rs` and
//! `lease.rs`. docs/cluster.md describes the keys this writes.

mod lease;
mod lock;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};

pub(crate) use self::lease::ClusterLease;
pub(crate) use self::lock::ClusterLock;
use crate::net::nats::NatsAddress;
use self::lease::Session;
use crate::base::error::{Error, ErrorKind, Result};
use crate::engine::locks::Kind;

/// The port of an endpoint written without one (etcd's client port).
const DEFAULT_PORT: u16 = 2379;

/// A parsed `etcd://` or `etcds://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdAddress {
    /// `HOST:PORT` of each member given.
    pub(crate) endpoints: Vec<String>,
    /// The key prefix, without slashes at its ends: `myapp` or `team/app`.
    pub(crate) prefix: String,
    /// `etcds://`: TLS to every member.
    pub(crate) tls: bool,
    /// `?nats=...`: the NATS servers the store's channels are on.
    pub(crate) nats: Option<NatsAddress>,
}

const EXAMPLE: &str = "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp";
const NATS_EXAMPLE: &str = "etcd://10.0.0.1:2379,10.0.0.2:2379/myapp?nats=nats://10.0.0.1:4222,10.0.0.2:4222";

impl EtcdAddress {
    /// True when `address` is meant for etcd (its scheme is `etcd` or `etcds`).
    pub(crate) fn is_etcd(address: &str) -> bool {
        address.starts_with("etcd://") || address.starts_with("etcds://")
    }

    /// Parses `etcd://HOST[:PORT][,HOST[:PORT]...]/PREFIX` (`etcds://` for
    /// TLS), optionally followed by `?nats=nats://HOST[:PORT],...` (the
    /// NATS servers of its channels; `&replicas=N`, default 3). Errors with
    /// `invalid`, naming what is wrong and an example.
    pub(crate) fn parse(address: &str) -> Result<EtcdAddress> {
        let bad = |what: &str| Error::invalid(format!("the cluster address {address:?} {what}; write it like {EXAMPLE} (etcds:// for TLS), or with channels on NATS like {NATS_EXAMPLE}"));
        let (address_part, query) = match address.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (address, None),
        };
        let mut nats = None;
        let mut replicas = None;
        if let Some(q) = query {
            for kv in q.split('&') {
                match kv.split_once('=') {
                    Some(("nats", v)) if nats.is_none() => nats = Some(NatsAddress::parse(v, &bad)?),
                    Some(("replicas", v)) => {
                        replicas = Some(v.parse::<usize>().ok().filter(|n| (1..=5).contains(n)).ok_or_else(|| bad(&format!("has replicas={v}: a stream has 1 to 5 replicas")))?)
                    }
                    _ => return Err(bad(&format!("has the option {kv:?}: the options are nats=nats://HOST:PORT,... and replicas=N"))),
                }
            }
            match (&mut nats, replicas) {
                (None, _) => return Err(bad("has options but no nats=: name the NATS servers of its channels")),
                (Some(n), Some(r)) => n.replicas = r,
                _ => {}
            }
        }
        let address = address_part;
        let (tls, rest) = if let Some(r) = address.strip_prefix("etcds://") {
            (true, r)
        } else if let Some(r) = address.strip_prefix("etcd://") {
            (false, r)
        } else {
            return Err(bad("does not start with etcd:// or etcds://"));
        };
        let (hosts, prefix) = rest.split_once('/').ok_or_else(|| bad("has no key prefix after the members (the path, like /myapp)"))?;
        let prefix = prefix.trim_end_matches('/');
        if prefix.is_empty() {
            return Err(bad("has an empty key prefix: every key of the store lives under it, so name one, like /myapp"));
        }
        if prefix.split('/').any(str::is_empty) {
            return Err(bad("has an empty part in its key prefix (\"//\")"));
        }
        if let Some(c) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-./".contains(*c))) {
            return Err(bad(&format!("has {c:?} in its key prefix: use letters, digits, '_', '-', '.' and '/'")));
        }
        let mut endpoints = Vec::new();
        for h in hosts.split(',') {
            if h.is_empty() {
                return Err(bad("names an empty member (two commas, or none before the prefix)"));
            }
            if h.contains('@') || h.contains('?') {
                return Err(bad("has a user or options in it: give the user and password as connect options (or TINYSTORE_ETCD_USER and TINYSTORE_ETCD_PASSWORD)"));
            }
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(']') || h.starts_with('[') => {
                    let port: u16 = port.parse().map_err(|_| bad(&format!("has the port {port:?} for {host}: a port is a number from 1 to 65535")))?;
                    (host, port)
                }
                _ => (h, DEFAULT_PORT),
            };
            if host.is_empty() || port == 0 {
                return Err(bad(&format!("has the member {h:?} without a host or with port 0")));
            }
            endpoints.push(format!("{host}:{port}"));
        }
        Ok(EtcdAddress { endpoints, prefix: prefix.to_owned(), tls, nats })
    }
}

impl std::fmt::Display for EtcdAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/{}", if self.tls { "etcds" } else { "etcd" }, self.endpoints.join(","), self.prefix)?;
        if let Some(n) = &self.nats {
            write!(f, "?{n}")?;
        }
        Ok(())
    }
}

/// How to reach the cluster: authentication, TLS, the request timeout.
#[derive(Debug, Clone, Default)]
pub(crate) struct EtcdOptions {
    /// etcd's user and password (etcd's own authentication).
    pub(crate) user: Option<(String, String)>,
    /// For `etcds://`: the CA certificate(s) in PEM that signed the members'.
    pub(crate) ca_file: Option<PathBuf>,
    /// For `etcds://` with client certificates: the certificate and key in PEM.
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
    /// How long one call to etcd may take before it fails with `unavailable`.
    pub(crate) request_timeout: Duration,
    /// How to reach the NATS servers of `?nats=`.
    pub(crate) nats: crate::net::nats::NatsOptions,
}

/// A connection to the cluster, for one store (one prefix).
pub(crate) struct Etcd {
    client: etcd_client::Client,
    address: EtcdAddress,
    /// `/PREFIX/`: every key of the store starts with it.
    root: String,
    timeout: Duration,
    /// The newest epoch seen (fences read it in their own transaction).
    epoch: AtomicU64,
    /// One etcd lease per ttl, shared by this process's holds of that ttl.
    sessions: tokio::sync::Mutex<HashMap<u128, Arc<Session>>>,
    /// Makes each waiter's key unique within its session.
    seq: AtomicU64,
    closed: AtomicBool,
    /// This connection made the epoch (the prefix had none).
    made: AtomicBool,
    opened: std::time::Instant,
}

/// Milliseconds since 1970 now.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// How a TLS handshake with a member failed, if one did.
enum TlsRefusal {
    /// This client did not trust the member's certificate.
    Untrusted(String),
    /// The member refused this client (an alert: no or a wrong client certificate).
    Refused(String),
}

/// The TLS failure under an etcd error. tonic carries rustls's error in
/// private wrappers whose sources do not all lead to it, so its text is
/// read too (rustls's own variant names).
fn tls_refusal(e: &etcd_client::Error) -> Option<TlsRefusal> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let t = err.downcast_ref::<rustls::Error>().or_else(|| err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|i| i.downcast_ref::<rustls::Error>()));
        match t {
            Some(rustls::Error::InvalidCertificate(why)) => return Some(TlsRefusal::Untrusted(format!("{why:?}"))),
            Some(rustls::Error::AlertReceived(alert)) => return Some(TlsRefusal::Refused(format!("{alert:?}"))),
            _ => {}
        }
        next = err.source();
    }
    let text = format!("{e:?}");
    let after = |name: &str| text.split_once(name).map(|(_, rest)| rest.split(')').next().unwrap_or("").to_owned());
    if let Some(why) = after("InvalidCertificate(") {
        return Some(TlsRefusal::Untrusted(why));
    }
    if let Some(alert) = after("AlertReceived(") {
        return Some(TlsRefusal::Refused(alert));
    }
    // Sometimes only rustls's message is left, in an io::Error's text.
    let alert = text.split_once("received fatal alert: ")?.1;
    Some(TlsRefusal::Refused(alert.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_owned()))
}

/// An etcd error as ours: what could not be done, and why.
pub(crate) fn etcd_error(what: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match tls_refusal(&e) {
        Some(TlsRefusal::Untrusted(why)) => {
            return Error::new(
                ErrorKind::Auth,
                format!(
                    "{what}: the etcd member showed a TLS certificate this client does not trust ({why}): give the PEM file of the CA that signed the members' certificates as the CA option (or TINYSTORE_CA), and name members by a host or IP their certificates list"
                ),
            );
        }
        Some(TlsRefusal::Refused(alert)) => {
            return Error::new(
                ErrorKind::Auth,
                format!(
                    "{what}: the etcd member refused this client's TLS handshake ({alert}): it asks for a client certificate signed by its CA (--client-cert-auth); give this process's certificate and key as the etcd identity option (or TINYSTORE_ETCD_CERT and TINYSTORE_ETCD_KEY)"
                ),
            );
        }
        None => {}
    }
    let kind = match &e {
        // etcd says a wrong password with InvalidArgument.
        E::GRpcStatus(s) if s.message().contains("authentication failed") || s.message().contains("user name is empty") || s.message().contains("invalid auth token") => ErrorKind::Auth,
        E::GRpcStatus(s) => match s.code() {
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => ErrorKind::Auth,
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => ErrorKind::Invalid,
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Aborted | tonic::Code::Cancelled => ErrorKind::Unavailable,
            // A connection cut under a call (a broken pipe, a member that
            // closed it after the handshake) comes as Unknown "transport error".
            tonic::Code::Unknown if s.message().contains("transport error") => ErrorKind::Unavailable,
            _ => ErrorKind::Protocol,
        },
        E::TransportError(_) | E::IoError(_) => ErrorKind::Unavailable,
        E::InvalidArgs(_) | E::InvalidUri(_) => ErrorKind::Invalid,
        _ => ErrorKind::Protocol,
    };
    Error::new(kind, format!("{what}: etcd said: {e}"))
}

impl Etcd {
    /// Connects to the members of `address` and reads (or first writes)
    /// the store's epoch. Errors: `invalid` (TLS files), `unavailable` (no
    /// member answered within the request timeout), `auth`.
    pub(crate) async fn connect(address: &EtcdAddress, opts: EtcdOptions) -> Result<Arc<Etcd>> {
        let mut o = etcd_client::ConnectOptions::new()
            .with_connect_timeout(opts.request_timeout)
            .with_keep_alive(Duration::from_secs(2), opts.request_timeout)
            // A member cut off from the leader refuses at once, instead of
            // serving a stale read or holding a call past the timeout.
            .with_require_leader(true);
        if let Some((u, p)) = &opts.user {
            o = o.with_user(u.clone(), p.clone());
        }
        let scheme = if address.tls { "https" } else { "http" };
        if address.tls {
            let read = |p: &PathBuf| std::fs::read(p).map_err(|e| Error::invalid(format!("could not read {} for the etcd connection's TLS: {e}", p.display())));
            let mut t = etcd_client::TlsOptions::new();
            match &opts.ca_file {
                Some(ca) => t = t.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?)),
                None => {
                    return Err(Error::invalid(format!(
                        "{address} is TLS (etcds://) but no CA was given: pass the PEM file of the CA that signed the members' certificates as the CA option, or set TINYSTORE_CA"
                    )));
                }
            }
            if let Some((c, k)) = &opts.identity {
                t = t.identity(etcd_client::Identity::from_pem(read(c)?, read(k)?));
            }
            o = o.with_tls(t);
        }
        let endpoints: Vec<String> = address.endpoints.iter().map(|e| format!("{scheme}://{e}")).collect();
        let hint = |e: Error| {
            // A member that requires client certificates closes a TLS 1.3
            // connection without one only after the handshake: no alert says
            // why, and where it fails (connect or first call) varies.
            if address.tls && opts.identity.is_none() && !matches!(e.kind(), ErrorKind::Auth | ErrorKind::Invalid) && !e.message().contains("client certificate") {
                Error::new(
                    e.kind(),
                    format!(
                        "{}; if the members ask for client certificates (--client-cert-auth), give this process's certificate and key as the etcd identity option (or TINYSTORE_ETCD_CERT and TINYSTORE_ETCD_KEY)",
                        e.message()
                    ),
                )
            } else {
                e
            }
        };
        let client = bounded(opts.request_timeout, &format!("connecting to {address}"), || etcd_client::Client::connect(endpoints.clone(), Some(o.clone()))).await.map_err(&hint)?;
        let etcd = Arc::new(Etcd {
            client,
            address: address.clone(),
            root: format!("/{}/", address.prefix),
            timeout: opts.request_timeout,
            epoch: AtomicU64::new(0),
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            seq: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            made: AtomicBool::new(false),
            opened: std::time::Instant::now(),
        });
        etcd.init().await.map_err(&hint)?;
        Ok(etcd)
    }

    fn epoch_key(&self) -> String {
        format!("{}epoch", self.root)
    }

    /// The newest epoch seen.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn saw_epoch(&self, e: u64) {
        self.epoch.fetch_max(e, Ordering::AcqRel);
    }

    /// Reads the epoch, writing it first if the prefix has none (the
    /// store's first connect, or `tinystore cluster init`): milliseconds
    /// since 1970, so larger than the epoch of a store on one machine made
    /// before. Gives the epoch and whether this call made it.
    pub(crate) async fn init(&self) -> Result<(u64, bool)> {
        let key = self.epoch_key();
        let made = now_ms().max(1).to_string();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), made, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let r = self.txn("making the store's epoch", txn).await?;
        let e = if r.succeeded() { now_ms().max(1) } else { epoch_of(&r.op_responses(), 0)? };
        let e = if r.succeeded() { self.read_epoch().await.unwrap_or(e) } else { e };
        self.saw_epoch(e);
        if r.succeeded() {
            self.made.store(true, Ordering::Release);
        }
        Ok((e, r.succeeded()))
    }

    /// True when this connection made the store's epoch.
    pub(crate) fn made_epoch(&self) -> bool {
        self.made.load(Ordering::Acquire)
    }

    async fn read_epoch(&self) -> Result<u64> {
        let r = self.txn("reading the store's epoch", Txn::new().and_then([TxnOp::get(self.epoch_key(), None)])).await?;
        epoch_of(&r.op_responses(), 0)
    }

    /// Raises the epoch to max(epoch + 1, milliseconds since 1970), so
    /// every fence after is larger than every fence before, also after a
    /// restore from a snapshot took etcd's revisions back. Gives (old, new).
    pub(crate) async fn bump_epoch(&self) -> Result<(u64, u64)> {
        self.raise_epoch(|old| Some((old + 1).max(now_ms()))).await
    }

    /// Raises the epoch above `floor` (an epoch of the same store on one
    /// machine) to max(floor + 1, milliseconds since 1970), unless it is
    /// above already. Gives (old, new); new == old when it was above.
    pub(crate) async fn raise_epoch_above(&self, floor: u64) -> Result<(u64, u64)> {
        self.raise_epoch(|old| (old <= floor).then(|| (floor + 1).max(now_ms()))).await
    }

    /// Writes `next(old)` as the epoch, if it gives one, in a transaction
    /// that fails and is made again when another process wrote it meanwhile.
    async fn raise_epoch(&self, next: impl Fn(u64) -> Option<u64>) -> Result<(u64, u64)> {
        loop {
            let key = self.epoch_key();
            let mut r = bounded(self.timeout, "reading the store's epoch", || async { self.client.kv_client().get(key.clone(), None).await }).await?;
            let kvs = r.take_kvs();
            let (old, rev) = match kvs.first() {
                Some(kv) => (parse_epoch(kv.value())?, kv.mod_revision()),
                None => (0, 0),
            };
            let Some(new) = next(old) else {
                self.saw_epoch(old);
                return Ok((old, old));
            };
            let cmp = if rev == 0 { Compare::create_revision(key.clone(), CompareOp::Equal, 0) } else { Compare::mod_revision(key.clone(), CompareOp::Equal, rev) };
            let t = Txn::new().when([cmp]).and_then([TxnOp::put(key, new.to_string(), None)]);
            if self.txn("raising the store's epoch", t).await?.succeeded() {
                self.saw_epoch(new);
                return Ok((old, new));
            }
        }
    }

    /// Declares lock `name` as `kind` for every process of the store: the
    /// first to declare it sets the kind; another kind or limit is `conflict`.
    pub(crate) async fn declare(&self, name: &str, kind: Kind) -> Result<()> {
        let key = format!("{}decl/{name}", self.root);
        let want = kind_text(kind);
        let t = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), want.clone(), None)])
            .or_else([TxnOp::get(key, None)]);
        let r = self.txn(&format!("declaring {name:?}"), t).await?;
        if r.succeeded() {
            return Ok(());
        }
        let had = match r.op_responses().first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()).unwrap_or_default(),
            _ => String::new(),
        };
        if had == want {
            return Ok(());
        }
        Err(Error::conflict(format!(
            "{name:?} is a {} on this cluster store, not a {}: use another name, or the same kind and limit",
            describe_kind(&had),
            describe_kind(&want)
        )))
    }

    /// A lock or semaphore of this store (declared first).
    pub(crate) async fn lock(self: &Arc<Self>, name: &str, kind: Kind) -> Result<Arc<ClusterLock>> {
        self.check_open()?;
        self.declare(name, kind).await?;
        Ok(ClusterLock::new(self.clone(), name, kind))
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) { Err(Error::closed()) } else { Ok(()) }
    }

    /// One transaction, bounded by the request timeout.
    pub(crate) async fn txn(&self, what: &str, t: Txn) -> Result<etcd_client::TxnResponse> {
        bounded(self.timeout, what, || async { self.client.kv_client().txn(t.clone()).await }).await
    }

    /// The session (etcd lease) of ttl `ttl` for this process, granted on
    /// first use and renewed every third of the ttl until it is lost.
    pub(crate) async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        let mut s = self.sessions.lock().await;
        self.check_open()?;
        if let Some(x) = s.get(&ttl.as_millis())
            && !x.is_lost()
        {
            return Ok(x.clone());
        }
        let x = Session::grant(self.client.clone(), ttl, self.timeout).await?;
        s.insert(ttl.as_millis(), x.clone());
        Ok(x)
    }

    /// What the store holds, in the shape of `StoreStatus` (owner fields
    /// zero), with `cluster`: its members and leader.
    pub(crate) async fn status(&self) -> Result<serde_json::Value> {
                let members = bounded(self.timeout, "listing the cluster's members", || async { self.client.cluster_client().member_list().await }).await?;
        let mut leader = None;
                if let Ok(st) = bounded(self.timeout, "asking a member for the leader", || async { self.client.maintenance_client().status().await }).await {
            leader = Some(st.leader());
        }
        let members: Vec<serde_json::Value> = members
            .members()
            .iter()
            .map(|m| serde_json::json!({"id": format!("{:x}", m.id()), "name": m.name(), "client_urls": m.client_urls(), "leader": Some(m.id()) == leader}))
            .collect();
        let epoch = self.read_epoch().await.unwrap_or(self.epoch());
        let locks = self.locks_status().await?;
        Ok(serde_json::json!({
            "dir": self.address.to_string(),
            "pid": 0,
            "epoch": epoch,
            "uptime_ms": self.opened.elapsed().as_millis() as u64,
            "subscriptions": 0,
            "channel_bytes": 0,
            "branches": [],
            "locks": locks,
            "connections": [],
            "cluster": {"address": self.address.to_string(), "members": members, "leader": leader.map(|l| format!("{l:x}"))},
        }))
    }

    async fn locks_status(&self) -> Result<Vec<serde_json::Value>> {
        let decl = format!("{}decl/", self.root);
        let opts = GetOptions::new().with_prefix();
        let mut r = bounded(self.timeout, "reading the store's locks", || async { self.client.kv_client().get(decl.clone(), Some(opts.clone())).await }).await?;
        let kinds: HashMap<String, u32> = r
            .take_kvs()
            .iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(kv.key()).ok()?.strip_prefix(&decl)?.to_owned();
                Some((name, parse_limit(&String::from_utf8_lossy(kv.value()))))
            })
            .collect();
        let locks = format!("{}locks/", self.root);
        let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
        let mut r = bounded(self.timeout, "reading the store's held keys", || async { self.client.kv_client().get(locks.clone(), Some(opts.clone())).await }).await?;
        let epoch = self.read_epoch().await.unwrap_or(self.epoch());
        // (lock, key) -> its waiters' keys in create order
        let mut groups: Vec<((String, String), Vec<etcd_client::KeyValue>)> = Vec::new();
        for kv in r.take_kvs() {
            let Some(rest) = std::str::from_utf8(kv.key()).ok().and_then(|k| k.strip_prefix(&locks)) else { continue };
            let mut parts = rest.splitn(3, '/');
            let (Some(name), Some(key)) = (parts.next(), parts.next()) else { continue };
            let id = (name.to_owned(), lock::decode_key(key));
            match groups.iter_mut().find(|(g, _)| *g == id) {
                Some((_, v)) => v.push(kv),
                None => groups.push((id, vec![kv])),
            }
        }
        let mut ttls: HashMap<i64, Option<u64>> = HashMap::new();
        let mut out = Vec::new();
        for ((name, key), kvs) in groups {
            // 0 for a lock (one holder, fences), else a semaphore's limit.
            let limit = kinds.get(&name).copied().unwrap_or(0);
            let slots = limit.max(1) as usize;
            let mut holders = Vec::new();
            let mut waiting = Vec::new();
            for (i, kv) in kvs.iter().enumerate() {
                let v: serde_json::Value = serde_json::from_slice(kv.value()).unwrap_or_default();
                if let std::collections::hash_map::Entry::Vacant(e) = ttls.entry(kv.lease()) {
                    let left = bounded(self.timeout, "reading a lease's ttl", || async { self.client.lease_client().time_to_live(kv.lease(), None).await }).await.ok().and_then(|t| (t.ttl() >= 0).then(|| t.ttl() as u64 * 1000));
                    e.insert(left);
                }
                let since = v["granted_ms"].as_u64().or(v["asked_ms"].as_u64()).map(|t| now_ms().saturating_sub(t));
                let mut h = serde_json::json!({
                    "lease": kv.create_revision(),
                    "holder": v["holder"].as_u64().unwrap_or(0),
                    "process": v["process"],
                    "etcd_lease": format!("{:x}", kv.lease()),
                    "held_ms": since.unwrap_or(0),
                    "left_ms": ttls[&kv.lease()],
                    "fence": serde_json::Value::Null,
                });
                if i < slots {
                    if limit == 0 {
                        h["fence"] = lock::fence_of(epoch, kv).to_string().into();
                    }
                    holders.push(h);
                } else {
                    waiting.push(h);
                }
            }
            out.push(serde_json::json!({"lock": name, "key": key, "holders": holders, "waiters": waiting.len(), "waiting": waiting}));
        }
        Ok(out)
    }

    /// Closes: this process's sessions are revoked (etcd lets their keys
    /// go at once), their holders told their leases were lost. Idempotent.
    pub(crate) async fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let sessions: Vec<Arc<Session>> = self.sessions.lock().await.drain().map(|(_, s)| s).collect();
        for s in sessions {
            s.end("the store closed").await;
        }
    }
}

/// Calls `call` until it answers, within `limit`: a call that met no
/// member (the one the client picked is down, or is between leaders) is
/// made again after 50 ms; past `limit` it fails with `unavailable`. Every
/// call made through this is safe to repeat (compare-guarded, or read-only).
pub(crate) async fn bounded<T, F, Fut>(limit: Duration, what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let end = std::time::Instant::now() + limit;
    let out = async {
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if retryable(&e) && std::time::Instant::now() + Duration::from_millis(50) < end => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(etcd_error(what, e)),
            }
        }
    };
    match tokio::time::timeout(limit, out).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "{what}: etcd did not answer within {} (fewer than a quorum of its members reachable?); the call may or may not have taken effect: retry",
                crate::base::limits::format_duration(limit)
            ),
        )),
    }
}

/// True for an error that says no member took the call (or it may be
/// made again): down, unreachable, between leaders.
fn retryable(e: &etcd_client::Error) -> bool {
    if tls_refusal(e).is_some() {
        // Refused by TLS: the same again would be refused again.
        return false;
    }
    match e {
        etcd_client::Error::GRpcStatus(s) => matches!(s.code(), tonic::Code::Unavailable),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

fn parse_epoch(v: &[u8]) -> Result<u64> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::new(ErrorKind::Protocol, format!("the store's epoch in etcd is not a number: {:?}; run `tinystore cluster bump-epoch`", String::from_utf8_lossy(v))))
}

/// The epoch from the get at `i` of a transaction's answers (0 when absent).
fn epoch_of(ops: &[TxnOpResponse], i: usize) -> Result<u64> {
    match ops.get(i) {
        Some(TxnOpResponse::Get(g)) => match g.kvs().first() {
            Some(kv) => parse_epoch(kv.value()),
            None => Ok(0),
        },
        _ => Err(Error::new(ErrorKind::Protocol, "etcd's answer to a transaction lacks the epoch's read")),
    }
}

fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Lock => "lock".into(),
        Kind::Semaphore { limit } => format!("semaphore {limit}"),
    }
}

/// 0 for a lock, else a semaphore's limit.
fn parse_limit(text: &str) -> u32 {
    text.strip_prefix("semaphore ").and_then(|l| l.parse().ok()).unwrap_or(0)
}

fn describe_kind(text: &str) -> String {
    match text.strip_prefix("semaphore ") {
        Some(l) => format!("semaphore of limit {l}"),
        None => "lock".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_names_members_and_a_prefix() {
        let a = EtcdAddress::parse("etcd://h1:2379,h2,10.0.0.3:3000/myapp/").unwrap();
        assert_eq!(a.endpoints, ["h1:2379", "h2:2379", "10.0.0.3:3000"]);
        assert_eq!(a.prefix, "myapp");
        assert!(!a.tls);
        assert!(EtcdAddress::parse("etcds://h1/team/app").unwrap().tls);
        assert_eq!(EtcdAddress::parse("etcds://h1/team/app").unwrap().prefix, "team/app");
    }

    #[test]
    fn a_malformed_address_says_what_is_wrong() {
        for (a, says) in [
            ("etcd://h1:2379", "no key prefix"),
            ("etcd://h1:2379/", "empty key prefix"),
            ("etcd://h1:x/app", "port \"x\""),
            ("etcd://h1,,h2/app", "empty member"),
            ("etcd://u:p@h1/app", "user"),
            ("etcd://h1/a b", "' '"),
            ("etcd://h1/a//b", "empty part"),
        ] {
            let e = EtcdAddress::parse(a).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid);
            assert!(e.message().contains(says) && e.message().contains(EXAMPLE), "{a}: {}", e.message());
        }
    }

    #[test]
    fn an_address_may_name_nats_servers_for_its_channels() {
        let a = EtcdAddress::parse("etcd://h1:2379,h2/myapp?nats=nats://h1:4222,h2:4223").unwrap();
        assert_eq!(a.endpoints, ["h1:2379", "h2:2379"]);
        assert_eq!(a.prefix, "myapp");
        let n = a.nats.clone().unwrap();
        assert_eq!(n.urls, ["nats://h1:4222", "nats://h2:4223"]);
        assert_eq!(n.replicas, 3);
        assert!(!n.tls);
        assert_eq!(a.to_string(), "etcd://h1:2379,h2:2379/myapp?nats=nats://h1:4222,nats://h2:4223");
        assert_eq!(EtcdAddress::parse(&a.to_string()).unwrap(), a);
        let b = EtcdAddress::parse("etcd://h1/app?nats=nats://h1,nats://h2&replicas=1").unwrap();
        assert_eq!(b.nats.as_ref().unwrap().urls, ["nats://h1:4222", "nats://h2:4222"]);
        assert_eq!(b.nats.unwrap().replicas, 1);
        assert!(EtcdAddress::parse("etcd://h1/app?nats=tls://h1:4222").unwrap().nats.unwrap().tls);
        assert!(EtcdAddress::parse("etcd://h1/app").unwrap().nats.is_none());
    }

    #[test]
    fn a_malformed_nats_part_says_what_is_wrong_and_shows_a_valid_one() {
        for (a, says) in [
            ("etcd://h1/app?nats=h1:4222", "nats://HOST:PORT"),
            ("etcd://h1/app?nats=nats://h1:x", "port \"x\""),
            ("etcd://h1/app?nats=nats://h1,,h2", "empty NATS server"),
            ("etcd://h1/app?nats=nats://u:p@h1", "credentials"),
            ("etcd://h1/app?nats=nats://h1,tls://h2", "mixes"),
            ("etcd://h1/app?natz=nats://h1", "options are"),
            ("etcd://h1/app?replicas=3", "no nats="),
            ("etcd://h1/app?nats=nats://h1&replicas=9", "1 to 5"),
        ] {
            let e = EtcdAddress::parse(a).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid);
            assert!(e.message().contains(says) && e.message().contains(NATS_EXAMPLE), "{a}: {}", e.message());
        }
    }
}
