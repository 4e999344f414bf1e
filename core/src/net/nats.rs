//! Channels of a cluster store on NATS JetStream (docs/cluster.md): a
//! channel is a memory stream, a branch a subject, each message stamped
//! with a dense per-branch sequence kept dense by
//! `Nats-Expected-Last-Subject-Sequence`; a subscription is an ordered
//! consumer on its branch's subject (or the subjects under it), read into a
//! bounded queue so a reader that falls behind is told exactly how many it
//! missed (CHAN-02), and so is one whose connection dropped (CHAN-04).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use futures::StreamExt;
use parking_lot::Mutex;

use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::MAX_MESSAGE_BYTES;
use crate::engine::channels::{Event, Missed, MissedReason, Msg, Scope};

/// The port of a NATS URL written without one.
const DEFAULT_PORT: u16 = 4222;
/// The messages each branch keeps (`max_msgs_per_subject`) and the
/// messages a subscription's queue keeps before it drops the oldest.
pub(crate) const BRANCH_MESSAGES: usize = 1024;
/// The bytes a subscription's queue keeps (the branch bound of one machine).
const QUEUE_BYTES: usize = 4 << 20;
/// The bytes each channel's stream keeps (the store-wide bound of one machine).
const STREAM_BYTES: i64 = 64 << 20;
/// The header with a message's sequence in its branch.
const SEQ_HEADER: &str = "Tinystore-Seq";
/// The header with the stream sequence of the branch's message before it.
const PREV_HEADER: &str = "Tinystore-Prev";
/// The header of a batch: how many messages its payload holds (each a
/// 4-byte little-endian length, then its bytes), with the branch
/// sequences `Tinystore-Seq`, +1, ... A message alone has no such header.
const COUNT_HEADER: &str = "Tinystore-Count";
/// The header of a message from a database's outbox (CHAN-03): its
/// `DBID:SEQ`, the same on every try and in every process, also its first
/// `Nats-Msg-Id`. Such a message goes alone, never in a batch.
const OUTBOX_HEADER: &str = "Tinystore-Outbox";
/// The header of any other publish: this process's id for it, the same on
/// every try. A try whose outcome is unknown (its ack lost) is looked for
/// by it before the next, instead of with a `Nats-Msg-Id`: the servers'
/// deduplication costs a sixth of the rate of one-at-a-time publishes
/// (docs/performance.md), and the expected last subject sequence already
/// keeps a second copy out unless the branch is read again.
const ID_HEADER: &str = "Tinystore-Id";
/// Publishes of one branch that queued while the one before was in flight
/// go as one JetStream message, up to this many of them...
const BATCH_MESSAGES: usize = 256;
/// ...and this many bytes of payload (a larger message goes alone).
const BATCH_BYTES: usize = 256 << 10;
/// How long an idle ordered consumer's pull waits: a dead server is noticed
/// after two missed heartbeats of half of this.
const PULL_EXPIRES: Duration = Duration::from_secs(2);
/// How long a subscription's consumer may be quiet before it is first
/// checked (then twice as long each time while it has read everything, up
/// to 32 times), and how long a check waits for its answer.
const STALL_CHECK: Duration = Duration::from_secs(2);

/// The `nats=` part of a cluster address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NatsAddress {
    /// `nats://HOST:PORT` (or `tls://`) of each server given.
    pub(crate) urls: Vec<String>,
    /// `tls://`: TLS to every server.
    pub(crate) tls: bool,
    /// Replicas of each channel's stream (`replicas=`, default 3).
    pub(crate) replicas: usize,
}

impl NatsAddress {
    /// Parses `nats://HOST[:PORT][,HOST[:PORT]...]` (each may repeat the
    /// scheme; `tls://` for TLS). `bad` makes the error, naming what is wrong.
    pub(crate) fn parse(text: &str, bad: &dyn Fn(&str) -> Error) -> Result<NatsAddress> {
        let mut urls = Vec::new();
        let mut tls = None;
        for part in text.split(',') {
            let (t, hp) = if let Some(r) = part.strip_prefix("nats://") {
                (false, r)
            } else if let Some(r) = part.strip_prefix("tls://") {
                (true, r)
            } else if urls.is_empty() {
                return Err(bad(&format!("has the NATS server {part:?}: write each as nats://HOST:PORT (tls:// for TLS)")));
            } else {
                (tls.unwrap_or(false), part)
            };
            if tls.is_some_and(|x| x != t) {
                return Err(bad("mixes nats:// and tls:// servers: use one for all"));
            }
            tls = Some(t);
            if hp.is_empty() {
                return Err(bad("names an empty NATS server (two commas, or none after nats=)"));
            }
            if hp.contains('@') || hp.contains('/') {
                return Err(bad("has a user, a path or options in a NATS server: give NATS credentials as connect options (or TINYSTORE_NATS_CREDS)"));
            }
            let (host, port) = match hp.rsplit_once(':') {
                Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad(&format!("has the port {p:?} for the NATS server {h}: a port is a number from 1 to 65535")))?),
                None => (hp, DEFAULT_PORT),
            };
            if host.is_empty() || port == 0 {
                return Err(bad(&format!("has the NATS server {hp:?} without a host or with port 0")));
            }
            urls.push(format!("{}://{host}:{port}", if t { "tls" } else { "nats" }));
        }
        Ok(NatsAddress { urls, tls: tls.unwrap_or(false), replicas: 3 })
    }
}

impl std::fmt::Display for NatsAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nats={}", self.urls.join(","))?;
        if self.replicas != 3 {
            write!(f, "&replicas={}", self.replicas)?;
        }
        Ok(())
    }
}

/// How to reach the NATS servers.
#[derive(Debug, Clone, Default)]
pub(crate) struct NatsOptions {
    /// A NATS credentials file (JWT and nkey seed).
    pub(crate) creds_file: Option<std::path::PathBuf>,
    /// NATS user and password.
    pub(crate) user: Option<(String, String)>,
    /// A NATS token.
    pub(crate) token: Option<String>,
    /// For `tls://` servers that verify clients: this process's
    /// certificate and key (PEM files).
    pub(crate) identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// For `tls://`: the CA (PEM) that signed the servers' certificates.
    pub(crate) ca_file: Option<std::path::PathBuf>,
    /// How long a publish may take (across a failover) before it fails.
    pub(crate) request_timeout: Duration,
}

/// A subject token for any text: letters and digits kept, every other
/// byte `_XX` (hex), so `.`, `*`, `>` and spaces never reach a subject.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'_' {
            out.push(u8::from_str_radix(s.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A key's subject token: `k` and the escaped text, or `x` and its hex when
/// shorter (a key of 1,024 bytes is at most 2,049 characters).
fn key_token(k: &Key) -> String {
    let e = escape(k.as_str());
    if e.len() <= 2 * k.as_str().len() {
        format!("k{e}")
    } else {
        let mut h = String::with_capacity(1 + 2 * k.as_str().len());
        h.push('x');
        for b in k.as_str().bytes() {
            h.push_str(&format!("{b:02x}"));
        }
        h
    }
}

fn key_of_token(t: &str) -> Option<Key> {
    let text = match t.as_bytes().first()? {
        b'k' => unescape(&t[1..])?,
        b'x' => {
            let h = &t[1..];
            let bytes: Option<Vec<u8>> = (0..h.len()).step_by(2).map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok()).collect();
            String::from_utf8(bytes?).ok()?
        }
        _ => return None,
    };
    Key::parse(text).ok()
}

/// The names one store uses in NATS.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The store's prefix as one token.
    prefix: String,
}

impl Names {
    pub(crate) fn new(prefix: &str) -> Names {
        Names { prefix: escape(prefix) }
    }

    /// The stream of `channel`: `ts-PREFIX-CHANNEL`, each part escaped.
    pub(crate) fn stream(&self, channel: &str) -> String {
        format!("ts-{}-{}", self.prefix, escape(channel))
    }

    /// `ts.PREFIX.CHANNEL`: every subject of the channel starts with it.
    fn root(&self, channel: &str) -> String {
        format!("ts.{}.{}", self.prefix, escape(channel))
    }

    /// The subject of a branch: the root, a token per key, then `_` (so a
    /// branch's own subject and those below it are told apart: `KEY._`
    /// against `KEY.>`).
    pub(crate) fn subject(&self, channel: &str, branch: &[Key]) -> String {
        let mut s = self.root(channel);
        for k in branch {
            s.push('.');
            s.push_str(&key_token(k));
        }
        s.push_str("._");
        s
    }

    /// What a subscription of `scope` reads.
    pub(crate) fn filter(&self, channel: &str, branch: &[Key], scope: Scope) -> String {
        match scope {
            Scope::Branch => self.subject(channel, branch),
            Scope::Recursive => {
                let mut s = self.root(channel);
                for k in branch {
                    s.push('.');
                    s.push_str(&key_token(k));
                }
                s.push_str(".>");
                s
            }
        }
    }

    /// The branch a subject names (None: not one of ours).
    pub(crate) fn branch_of(&self, channel: &str, subject: &str) -> Option<Vec<Key>> {
        let rest = subject.strip_prefix(&self.root(channel))?.strip_prefix('.')?;
        let rest = rest.strip_suffix('_')?;
        rest.split('.').filter(|t| !t.is_empty()).map(key_of_token).collect()
    }
}

fn nats_error(what: &str, e: impl std::fmt::Display, kind: ErrorKind) -> Error {
    Error::new(kind, format!("{what}: NATS said: {e}"))
}

/// What a publish is given when it ends.
pub(crate) enum Finish {
    Oneshot(tokio::sync::oneshot::Sender<Result<Box<[u8]>>>),
    Call(Box<dyn FnOnce(Result<()>) + Send>),
}

impl Finish {
    fn finish(self, r: Result<()>) {
        match self {
            Finish::Oneshot(tx) => {
                let _ = tx.send(r.map(|_| Box::default()));
            }
            Finish::Call(f) => f(r),
        }
    }
}

struct Job {
    /// None: a mark of `settle`, ended once those before it have.
    data: Option<Box<[u8]>>,
    finish: Finish,
    /// A message of an outbox: its `DBID:SEQ` ([`OUTBOX_HEADER`]).
    outbox: Option<String>,
}

/// The connection to NATS of one cluster store.
pub(crate) struct Jet {
    client: async_nats::Client,
    js: jetstream::Context,
    names: Names,
    replicas: usize,
    timeout: Duration,
    /// The streams made or found, by channel.
    streams: tokio::sync::Mutex<HashMap<String, stream::Stream>>,
    /// One publishing task per branch subject, so a branch's publishes go
    /// in the order taken, each after the one before is in the stream.
    branches: Mutex<HashMap<String, tokio::sync::mpsc::UnboundedSender<Job>>>,
    /// Counts the client's reconnects: a gap seen after one is `reconnect`.
    reconnects: Arc<AtomicU64>,
    /// Makes each publish's `Nats-Msg-Id` unique (with `process`).
    next_id: AtomicU64,
    process: u64,
    subs: Mutex<Vec<std::sync::Weak<SubShared>>>,
    closing: AtomicBool,
    closed: AtomicBool,
}

impl Jet {
    /// Connects to the servers of `address`. Errors: `unavailable` (none
    /// answered within the request timeout), `invalid` (TLS without a CA,
    /// a client certificate without TLS, an unreadable credentials file),
    /// `auth` (the servers refused the credentials given, or their lack).
    pub(crate) async fn connect(address: &NatsAddress, prefix: &str, opts: NatsOptions) -> Result<Arc<Jet>> {
        let reconnects = Arc::new(AtomicU64::new(0));
        let r = reconnects.clone();
        let mut o = async_nats::ConnectOptions::new()
            .connection_timeout(opts.request_timeout)
            .max_reconnects(None)
            .reconnect_delay_callback(|n| Duration::from_millis((50 * n as u64).min(500)))
            .event_callback(move |e| {
                let r = r.clone();
                async move {
                    if matches!(e, async_nats::Event::Connected) {
                        r.fetch_add(1, Ordering::AcqRel);
                    }
                }
            });
        if let Some(p) = &opts.creds_file {
            o = o.credentials_file(p).await.map_err(|e| Error::invalid(format!("could not read the NATS credentials file {}: {e}", p.display())))?;
        }
        if let Some((u, p)) = &opts.user {
            o = o.user_and_password(u.clone(), p.clone());
        }
        if let Some(t) = &opts.token {
            o = o.token(t.clone());
        }
        if address.tls {
            match &opts.ca_file {
                Some(ca) => o = o.require_tls(true).add_root_certificates(ca.clone()),
                None => return Err(Error::invalid("the NATS servers are TLS (tls://) but no CA was given: pass the PEM file of the CA that signed their certificates as the CA option, or set TINYSTORE_CA")),
            }
            if let Some((cert, key)) = &opts.identity {
                o = o.add_client_certificate(cert.clone(), key.clone());
            }
        } else if opts.identity.is_some() {
            return Err(Error::invalid("a NATS client certificate was given but the NATS servers are not TLS: write them as tls://HOST:PORT"));
        }
        let given = match (&opts.user, &opts.token, &opts.creds_file) {
            (Some((u, _)), _, _) => format!("the user {u:?} and its password were given"),
            (_, Some(_), _) => "a token was given".to_owned(),
            (_, _, Some(p)) => format!("the credentials file {} was given", p.display()),
            _ => "no credentials were given".to_owned(),
        };
        let urls: Vec<async_nats::ServerAddr> = address.urls.iter().map(|u| u.parse()).collect::<std::result::Result<_, _>>().map_err(|e| Error::invalid(format!("a NATS server URL is malformed: {e}")))?;
        let client = match tokio::time::timeout(opts.request_timeout, o.connect(urls)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) if matches!(e.kind(), async_nats::ConnectErrorKind::AuthorizationViolation | async_nats::ConnectErrorKind::Authentication) => {
                return Err(Error::new(
                    ErrorKind::Auth,
                    format!(
                        "the NATS servers {} refused this client ({e}; {given}): give what their authorization asks for, as connect options or in the environment: a user and password (nats_user; TINYSTORE_NATS_USER, TINYSTORE_NATS_PASSWORD), a token (nats_token; TINYSTORE_NATS_TOKEN) or a credentials file (nats_credentials; TINYSTORE_NATS_CREDS)",
                        address.urls.join(",")
                    ),
                ));
            }
            // TLS refusals are not retried: the same certificates fail again.
            Ok(Err(e)) if e.to_string().contains("invalid peer certificate") => {
                return Err(Error::new(
                    ErrorKind::Auth,
                    format!("the certificate of the NATS servers {} is not trusted ({e}): give the PEM file of the CA that signed it as the CA option (ca_file; TINYSTORE_CA)", address.urls.join(",")),
                ));
            }
            Ok(Err(e)) if ["BadCertificate", "CertificateRequired", "UnknownCA"].iter().any(|a| e.to_string().contains(a)) => {
                let had = if opts.identity.is_some() { "the one given was refused" } else { "none was given" };
                return Err(Error::new(
                    ErrorKind::Auth,
                    format!(
                        "the NATS servers {} ask for a client certificate signed by their CA and {had} ({e}): give this process's certificate and key (nats_identity; TINYSTORE_NATS_CERT, TINYSTORE_NATS_KEY)",
                        address.urls.join(",")
                    ),
                ));
            }
            Ok(Err(e)) => return Err(nats_error(&format!("connecting to {}", address.urls.join(",")), e, ErrorKind::Unavailable)),
            Err(_) => {
                return Err(Error::new(ErrorKind::Unavailable, format!("no NATS server of {} answered within {:?}", address.urls.join(","), opts.request_timeout)));
            }
        };
        let mut id = [0u8; 8];
        let _ = getrandom::fill(&mut id);
        let js = jetstream::new(client.clone());
        Ok(Arc::new(Jet {
            client,
            js,
            names: Names::new(prefix),
            replicas: address.replicas,
            timeout: opts.request_timeout,
            streams: tokio::sync::Mutex::new(HashMap::new()),
            branches: Mutex::new(HashMap::new()),
            reconnects,
            next_id: AtomicU64::new(1),
            process: u64::from_le_bytes(id),
            subs: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }))
    }

    /// How long a publish may take before it fails.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) { Err(Error::closed()) } else { Ok(()) }
    }

    /// The stream of `channel`, made on first use: memory storage, the
    /// address's replicas, 1,024 messages per branch, 64 MiB, old ones
    /// discarded (a publisher never waits, CHAN-02).
    async fn stream(&self, channel: &str) -> Result<stream::Stream> {
        let mut s = self.streams.lock().await;
        if let Some(x) = s.get(channel) {
            return Ok(x.clone());
        }
        let name = self.names.stream(channel);
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![format!("{}.>", self.names.root(channel))],
            storage: stream::StorageType::Memory,
            num_replicas: self.replicas,
            max_messages_per_subject: BRANCH_MESSAGES as i64,
            max_bytes: STREAM_BYTES,
            max_message_size: (MAX_MESSAGE_BYTES + 1024) as i32,
            discard: stream::DiscardPolicy::Old,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        let end = Instant::now() + self.timeout;
        let x = loop {
            match self.js.get_or_create_stream(config.clone()).await {
                Ok(x) => break x,
                // A cluster between leaders, or a server just restarted.
                Err(e) if Instant::now() + Duration::from_millis(200) < end => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(nats_error(&format!("making the stream {name} of channel {channel:?}"), e, ErrorKind::Unavailable)),
            }
        };
        s.insert(channel.to_owned(), x.clone());
        Ok(x)
    }

    /// Sends a publish to its branch's task, which publishes it after the
    /// branch's earlier ones.
    pub(crate) fn publish(self: &Arc<Self>, channel: &str, branch: &[Key], data: Box<[u8]>, finish: Finish) {
        self.send_job(channel, branch, Job { data: Some(data), finish, outbox: None });
    }

    /// Publishes a message of a database's outbox after the branch's
    /// earlier publishes, alone, with `id` (`DBID:SEQ`) as its
    /// `Nats-Msg-Id` and [`OUTBOX_HEADER`]: a retry within the stream's
    /// duplicate window (2 min), from this process or another, is dropped
    /// by the stream (CHAN-03).
    pub(crate) fn publish_outbox(self: &Arc<Self>, channel: &str, branch: &[Key], data: Box<[u8]>, id: String, finish: Finish) {
        self.send_job(channel, branch, Job { data: Some(data), finish, outbox: Some(id) });
    }

    fn send_job(self: &Arc<Self>, channel: &str, branch: &[Key], mut job: Job) {
        if let Err(e) = self.check_open() {
            return job.finish.finish(Err(e));
        }
        let subject = self.names.subject(channel, branch);
        let mut b = self.branches.lock();
        if let Some(tx) = b.get(&subject) {
            match tx.send(job) {
                Ok(()) => return,
                Err(e) => job = e.0,
            }
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let _ = tx.send(job);
        b.insert(subject.clone(), tx);
        let me = self.clone();
        let channel = channel.to_owned();
        crate::runtime::spawn(async move { me.branch_task(channel, subject, rx).await });
    }

    async fn branch_task(self: Arc<Self>, channel: String, subject: String, mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>) {
        // (stream sequence, branch sequence) of the branch's newest message.
        let mut last: Option<(u64, u64)> = None;
        // A job taken from the queue that did not fit the batch before.
        let mut next: Option<Job> = None;
        let mut batch: Vec<Job> = Vec::new();
        loop {
            let Some(job) = (match next.take() {
                Some(j) => Some(j),
                None => rx.recv().await,
            }) else {
                return;
            };
            let Some(first) = &job.data else {
                job.finish.finish(Ok(()));
                continue;
            };
            // What queued while the publish before was in flight goes in one
            // message: one round trip to the stream's replicas for all.
            let mut bytes = first.len();
            if let Some(id) = &job.outbox {
                let r = self.publish_one(&channel, &subject, &mut last, bytes_of(first), 1, Some(id)).await;
                job.finish.finish(r);
                continue;
            }
            batch.push(job);
            while batch.len() < BATCH_MESSAGES {
                let Ok(j) = rx.try_recv() else { break };
                match &j.data {
                    Some(d) if bytes + d.len() <= BATCH_BYTES && j.outbox.is_none() => {
                        bytes += d.len();
                        batch.push(j);
                    }
                    _ => {
                        next = Some(j);
                        break;
                    }
                }
            }
            let r = if batch.len() == 1 {
                self.publish_one(&channel, &subject, &mut last, bytes_of(batch[0].data.as_deref().unwrap_or_default()), 1, None).await
            } else {
                let mut payload = Vec::with_capacity(bytes + 4 * batch.len());
                for j in &batch {
                    let d = j.data.as_deref().unwrap_or_default();
                    payload.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    payload.extend_from_slice(d);
                }
                self.publish_one(&channel, &subject, &mut last, payload.into(), batch.len() as u64, None).await
            };
            for j in batch.drain(..) {
                j.finish.finish(r.clone());
            }
        }
    }

    async fn last_of(&self, s: &stream::Stream, subject: &str) -> std::result::Result<(u64, u64), String> {
        last_of(s, subject).await
    }

    /// True when the stream's message `seq` is the publish of `id`.
    async fn holds_id(&self, s: &stream::Stream, seq: u64, id: &str) -> bool {
        if seq == 0 {
            return false;
        }
        match s.get_raw_message(seq).await {
            Ok(m) => m.headers.get("Nats-Msg-Id").is_some_and(|v| v.as_str() == id),
            Err(_) => false,
        }
    }

    /// Publishes one JetStream message of `count` messages of the branch
    /// (`count` > 1: a batch, `payload` framed as [`COUNT_HEADER`] says).
    /// `outbox`: a message of an outbox, sent once: under its `DBID:SEQ`
    /// while that id may still be its own, and never again once the
    /// branch holds it (a try refused at its commit leaves its id taken
    /// for the duplicate window: then `DBID:SEQ.N`, after looking).
    async fn publish_one(&self, channel: &str, subject: &str, last: &mut Option<(u64, u64)>, payload: bytes::Bytes, count: u64, outbox: Option<&str>) -> Result<()> {
        let s = self.stream(channel).await?;
        let mut tries = 0u32;
        let next_id = |tries: &mut u32| match outbox {
            Some(o) => {
                *tries += 1;
                format!("{o}.{tries}")
            }
            None => format!("{:016x}-{}", self.process, self.next_id.fetch_add(1, Ordering::Relaxed)),
        };
        let mut id = match outbox {
            Some(o) => o.to_owned(),
            None => next_id(&mut tries),
        };
        // An outbox message may be in the branch after this stream
        // sequence (a try whose outcome is unknown expected it as last).
        let mut maybe_after: Option<u64> = None;
        let end = Instant::now() + self.timeout;
        let mut why = String::new();
        loop {
            if Instant::now() >= end {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("publishing to channel {channel:?}: NATS did not take the message within {:?} ({why}); it may or may not have been published", self.timeout),
                ));
            }
            let (seq, b) = match *last {
                Some(x) => x,
                None => match self.last_of(&s, subject).await {
                    Ok(x) => x,
                    Err(e) => {
                        why = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            // What the message is found by: its outbox id, else its own.
            let (tag_header, tag) = match outbox {
                Some(o) => (OUTBOX_HEADER, o),
                None => (ID_HEADER, id.as_str()),
            };
            if let Some(after) = maybe_after {
                match find_tagged(&s, subject, tag_header, tag, Some(after)).await {
                    Ok(Some(_)) => {
                        *last = None;
                        return Ok(());
                    }
                    Ok(None) => {}
                    Err(e) => {
                        why = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            let mut msg = jetstream::message::PublishMessage::build()
                .payload(payload.clone())
                .expected_last_subject_sequence(seq)
                .header(SEQ_HEADER, (b + 1).to_string().as_str())
                .header(PREV_HEADER, seq.to_string().as_str());
            if count > 1 {
                msg = msg.header(COUNT_HEADER, count.to_string().as_str());
            }
            msg = msg.header(tag_header, tag);
            if outbox.is_some() {
                msg = msg.message_id(&id);
            }
            let sent = match self.js.send_publish(subject.to_owned(), msg).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(ack) if ack.duplicate => {
                    *last = None;
                    // An earlier try of this publish got in (its ack was lost)
                    // if the stream holds a message with its id; a try
                    // refused at its commit leaves its id taken all the same
                    // (or one is still on its way in: looked for next time).
                    if self.holds_id(&s, ack.sequence, &id).await {
                        return Ok(());
                    }
                    maybe_after = Some(maybe_after.map_or(seq, |a| a.min(seq)));
                    id = next_id(&mut tries);
                }
                Ok(ack) => {
                    *last = Some((ack.sequence, b + count));
                    return Ok(());
                }
                Err(e) => match e.kind() {
                    // Another publisher's message came in between: read the
                    // branch again; an outbox message tries under a new id
                    // (this one is taken for the deduplication window though
                    // nothing went in).
                    PublishErrorKind::WrongLastSequence => {
                        *last = None;
                        if outbox.is_some() {
                            id = next_id(&mut tries);
                        }
                    }
                    PublishErrorKind::MaxPayloadExceeded => return Err(Error::limit(format!("NATS refused the message: {e}: the servers' max_payload must be at least 1 MiB and 1 KiB"))),
                    PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::StreamNotFound | PublishErrorKind::Other | PublishErrorKind::MaxAckPending => {
                        why = e.to_string();
                        *last = None;
                        // It may have gone in: it is looked for by its id
                        // before the next try (an outbox message's id is
                        // also dropped by the stream within its window).
                        maybe_after = Some(maybe_after.map_or(seq, |a| a.min(seq)));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    _ => return Err(nats_error(&format!("publishing to channel {channel:?}"), e, ErrorKind::Protocol)),
                },
            }
        }
    }

    /// True when `branch` of `channel` holds the outbox message `id`
    /// (`DBID:SEQ`), looking back from its newest message over at most
    /// the 1,024 it keeps, and stopping at a message of the same outbox
    /// with a lower SEQ (an outbox is published in order). For a
    /// database's leftover rows, whose publisher may have died after the
    /// stream took them: past the duplicate window their ids are forgotten.
    pub(crate) async fn holds_outbox(&self, channel: &str, branch: &[Key], id: &str) -> Result<bool> {
        let s = self.stream(channel).await?;
        let subject = self.names.subject(channel, branch);
        let end = Instant::now() + self.timeout;
        loop {
            match find_tagged(&s, &subject, OUTBOX_HEADER, id, None).await {
                Ok(x) => return Ok(x.is_some()),
                Err(e) if Instant::now() >= end => return Err(nats_error(&format!("reading channel {channel:?} for an outbox message"), e, ErrorKind::Unavailable)),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits (up to `limit`) until every publish taken so far has ended.
    pub(crate) async fn settle(self: &Arc<Self>, limit: Duration) {
        let subjects: Vec<(String, tokio::sync::mpsc::UnboundedSender<Job>)> = self.branches.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut waits = Vec::new();
        for (_, tx) in subjects {
            let (otx, orx) = tokio::sync::oneshot::channel();
            // An empty job marks the point: it ends once those before it have.
            if tx.send(Job { data: None, finish: Finish::Oneshot(otx), outbox: None }).is_ok() {
                waits.push(orx);
            }
        }
        let _ = tokio::time::timeout(limit, futures::future::join_all(waits)).await;
    }

    /// Subscribes to `branch` of `channel`: every message published after
    /// this returns is read, in branch order.
    pub(crate) async fn subscribe(self: &Arc<Self>, channel: &str, branch: &[Key], scope: Scope) -> Result<NatsSubscription> {
        self.check_open()?;
        let mut s = self.stream(channel).await?;
        let filter = self.names.filter(channel, branch, scope);
        let end = Instant::now() + self.timeout;
        // Where to start, and the branch's sequence there: for one branch,
        // just after its newest message; for a tree, after the stream's.
        let (start, base) = loop {
            let r = match scope {
                Scope::Branch => self.last_of(&s, &filter).await.map(|(seq, b)| (seq + 1, Some(b))),
                Scope::Recursive => s.info().await.map(|i| (i.state.last_sequence + 1, None)).map_err(|e| e.to_string()),
            };
            match r {
                Ok(x) => break x,
                Err(e) if Instant::now() < end => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(Error::new(ErrorKind::Unavailable, format!("subscribing to channel {channel:?}: reading its branch's newest message, NATS said: {e}"))),
            }
        };
        let config = consumer::pull::OrderedConfig {
            filter_subject: filter.clone(),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: start },
            max_expires: PULL_EXPIRES,
            ..Default::default()
        };
        let messages = loop {
            let made = async { s.create_consumer(config.clone()).await.map_err(|e| e.to_string())?.messages().await.map_err(|e| e.to_string()) };
            match made.await {
                Ok(m) => break m,
                Err(e) if Instant::now() < end => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(Error::new(ErrorKind::Unavailable, format!("subscribing to channel {channel:?}: making its consumer, NATS said: {e} (within the request timeout, {:?})", self.timeout))),
            }
        };
        let shared = Arc::new(SubShared {
            state: Mutex::new(SubState::default()),
            stop: tokio::sync::Notify::new(),
            channel: channel.to_owned(),
            filter: filter.clone(),
            scope,
            read_upto: AtomicU64::new(start.saturating_sub(1)),
            caught_up: AtomicBool::new(false),
        });
        {
            let mut subs = self.subs.lock();
            subs.retain(|w| w.strong_count() > 0);
            subs.push(Arc::downgrade(&shared));
        }
        let reader = Reader {
            names: self.names.clone(),
            channel: channel.to_owned(),
            start,
            base,
            scope,
            seen: HashMap::new(),
            reconnects: self.reconnects.clone(),
            cause: GapCause::new(self.reconnects.load(Ordering::Acquire)),
            stream: s.clone(),
            config,
        };
        crate::runtime::spawn(reader.run(messages, shared.clone()));
        Ok(NatsSubscription(shared))
    }

    /// Closes, as a drain (CHAN-01): the publishes taken so far go in, each
    /// subscription reads what its branch had in the stream then (within
    /// 2 s in all), and ends once its queue is read.
    pub(crate) async fn close(self: &Arc<Self>) {
        if self.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        let end = Instant::now() + Duration::from_secs(2);
        self.settle(Duration::from_secs(2)).await;
        self.closed.store(true, Ordering::Release);
        self.branches.lock().clear();
        let subs: Vec<Arc<SubShared>> = self.subs.lock().drain(..).filter_map(|w| w.upgrade()).collect();
        for sub in subs {
            let target = match (sub.scope, self.streams.lock().await.get(&sub.channel).cloned()) {
                (Scope::Branch, Some(s)) => tokio::time::timeout_at(end.into(), self.last_of(&s, &sub.filter)).await.ok().and_then(|r| r.ok()).map(|(seq, _)| seq),
                (Scope::Recursive, Some(s)) => match tokio::time::timeout_at(end.into(), self.last_of(&s, &sub.filter)).await {
                    Ok(Ok((seq, _))) => Some(seq),
                    _ => {
                        let mut s = s;
                        tokio::time::timeout_at(end.into(), s.info()).await.ok().and_then(|r| r.ok()).map(|i| i.state.last_sequence)
                    }
                },
                _ => None,
            };
            if let Some(t) = target {
                let mut quiet = 0;
                while Instant::now() < end && sub.read_upto.load(Ordering::Acquire) < t {
                    // A tree's last message may be of another channel's branch:
                    // caught up and quiet for 200 ms is read to the end.
                    if sub.scope == Scope::Recursive && sub.caught_up.load(Ordering::Acquire) {
                        quiet += 1;
                        if quiet >= 20 {
                            break;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            sub.end();
        }
    }

    /// Per branch of every channel of the store that has a stream: its
    /// subscriptions in every process (the ordered consumers on it, each
    /// with its lag: the messages the stream has for it that it has not
    /// read yet), the messages the stream keeps, and its newest branch
    /// sequence; in the shape of `BranchStatus`. A stopped subscription's
    /// consumer is counted until NATS removes it (30 s idle). Errors:
    /// `unavailable` when NATS did not answer it all within the request
    /// timeout.
    pub(crate) async fn branches_status(&self) -> Result<Vec<serde_json::Value>> {
        match tokio::time::timeout(self.timeout, self.read_branches_status()).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("reading the store's streams: NATS did not answer within the request timeout ({:?}); no NATS server reachable?", self.timeout),
            )),
        }
    }

    async fn read_branches_status(&self) -> Result<Vec<serde_json::Value>> {
        let bad = |e: &dyn std::fmt::Display| nats_error("reading the store's streams", e, ErrorKind::Unavailable);
        let prefix = format!("ts-{}-", self.names.prefix);
        // The first error ends it: the names stream asks for the same page
        // again after an error, forever while no server answers.
        let mut names: Vec<String> = Vec::new();
        let mut listed = self.js.stream_names();
        while let Some(name) = listed.next().await {
            names.push(name.map_err(|e| bad(&e))?);
        }
        let mut out: Vec<serde_json::Value> = Vec::new();
        for name in names {
            let Some(channel) = name.strip_prefix(&prefix).and_then(unescape) else { continue };
            let s = self.js.get_stream(&name).await.map_err(|e| bad(&e))?;
            let root = self.names.root(&channel);
            let mut rows: std::collections::BTreeMap<Vec<Key>, BranchRow> = Default::default();
            let mut subjects = s.info_with_subjects(format!("{root}.>")).await.map_err(|e| bad(&e))?;
            while let Some(x) = subjects.next().await {
                let (subject, kept) = x.map_err(|e| bad(&e))?;
                if let Some(b) = self.names.branch_of(&channel, &subject) {
                    let newest = last_of(&s, &subject).await.map(|(_, b)| b).unwrap_or(0);
                    // Messages, not JetStream messages (a batch holds several).
                    let oldest = s.get_first_raw_message_by_subject(&subject, 1).await.ok().and_then(|m| header_u64(&m.headers, SEQ_HEADER));
                    let r = rows.entry(b).or_default();
                    r.kept = match oldest {
                        Some(o) if o >= 1 && newest >= o => (newest - o + 1) as usize,
                        _ => kept,
                    };
                    r.newest = newest;
                }
            }
            let mut consumers = s.consumers();
            while let Some(c) = consumers.next().await {
                let c = c.map_err(|e| bad(&e))?;
                let f = &c.config.filter_subject;
                let (branch, recursive) = match f.strip_suffix(".>") {
                    Some(tree) => (self.names.branch_of(&channel, &format!("{tree}._")), true),
                    None => (self.names.branch_of(&channel, f), false),
                };
                let Some(branch) = branch else { continue };
                let r = rows.entry(branch).or_default();
                if recursive {
                    r.recursive += 1;
                } else {
                    r.own += 1;
                }
                r.lag.push(c.num_pending);
            }
            for (branch, r) in rows {
                out.push(serde_json::json!({
                    "channel": channel, "branch": branch, "subscribers": r.own, "recursive_subscribers": r.recursive,
                    "kept_messages": r.kept, "kept_bytes": 0, "published": r.newest, "lag": r.lag,
                }));
            }
        }
        Ok(out)
    }

    /// This process's subscriptions now.
    pub(crate) fn subscription_count(&self) -> usize {
        self.subs.lock().iter().filter(|w| w.upgrade().is_some_and(|s| !s.state.lock().stopped)).count()
    }

    /// The servers this connection knows and the one it is on, for `status`.
    pub(crate) fn status(&self) -> serde_json::Value {
        let info = self.client.server_info();
        serde_json::json!({
            "server": format!("{}:{}", info.host, info.port),
            "server_name": info.server_name,
            "known_servers": info.connect_urls,
            "state": format!("{:?}", self.client.connection_state()),
        })
    }
}

fn bytes_of(data: &[u8]) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(data)
}

/// The newest message of `subject` (or of a filter with `>`): (stream
/// sequence, branch sequence), (0, 0) when it has none.
async fn last_of(s: &stream::Stream, subject: &str) -> std::result::Result<(u64, u64), String> {
    match s.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok((m.sequence, header_u64(&m.headers, SEQ_HEADER).map_or(0, |b| b + header_u64(&m.headers, COUNT_HEADER).unwrap_or(1) - 1))),
        Err(e) if matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound) => Ok((0, 0)),
        Err(e) => Err(e.to_string()),
    }
}

/// The stream sequence of the message whose `header` is `id` in
/// `subject` (an outbox message's `DBID:SEQ` or a publish's
/// [`ID_HEADER`]), looking back from the newest message along the branch's
/// [`PREV_HEADER`] links: down to stream sequence `after` (excluded), or,
/// without it, to a message of the same outbox with a lower SEQ; at most
/// [`BRANCH_MESSAGES`] messages.
async fn find_tagged(s: &stream::Stream, subject: &str, header: &str, id: &str, after: Option<u64>) -> std::result::Result<Option<u64>, String> {
    let outbox = if after.is_none() { Some(split_outbox(id).ok_or_else(|| format!("{id:?} is not an outbox message id"))?) } else { None };
    let mut at = match s.get_last_raw_message_by_subject(subject).await {
        Ok(m) => m,
        Err(e) if matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    for _ in 0..BRANCH_MESSAGES {
        if after.is_some_and(|a| at.sequence <= a) {
            return Ok(None);
        }
        if let Some(other) = at.headers.get(header).map(|v| v.as_str().to_owned()) {
            if other == id {
                return Ok(Some(at.sequence));
            }
            if outbox.is_some_and(|(db, n)| split_outbox(&other).is_some_and(|(d, m)| d == db && m < n)) {
                return Ok(None);
            }
        }
        let prev = header_u64(&at.headers, PREV_HEADER).unwrap_or(0);
        if prev == 0 {
            return Ok(None);
        }
        at = match s.get_raw_message(prev).await {
            Ok(m) => m,
            // Gone from the stream (older than what it keeps).
            Err(e) if matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
    }
    Ok(None)
}

/// `DBID:SEQ` as its two parts.
fn split_outbox(id: &str) -> Option<(&str, u64)> {
    let (db, n) = id.rsplit_once(':')?;
    Some((db, n.parse().ok()?))
}

/// What `status` gathers of one branch.
#[derive(Default)]
struct BranchRow {
    own: usize,
    recursive: usize,
    kept: usize,
    newest: u64,
    lag: Vec<u64>,
}

fn header_u64(h: &async_nats::HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.as_str().parse().ok()
}

#[derive(Default)]
struct SubState {
    queue: VecDeque<Event>,
    /// Messages (not words of missed ones) in `queue`, and their bytes.
    messages: usize,
    bytes: usize,
    /// Dropped from the front of `queue`: told before what is there now.
    dropped: Option<Missed>,
    ended: bool,
    stopped: bool,
    waker: Option<Waker>,
}

fn merge(a: Option<Missed>, b: Missed) -> Missed {
    match a {
        None => b,
        Some(a) => Missed {
            count: a.count.zip(b.count).map(|(x, y)| x + y),
            reason: if a.reason == MissedReason::Reconnect || b.reason == MissedReason::Reconnect { MissedReason::Reconnect } else { MissedReason::Behind },
        },
    }
}

struct SubShared {
    state: Mutex<SubState>,
    stop: tokio::sync::Notify,
    channel: String,
    filter: String,
    scope: Scope,
    /// The newest stream sequence its consumer gave, once that message is
    /// queued (close's drain ends the subscription when it is the newest).
    read_upto: AtomicU64,
    /// Its consumer's last message said nothing more was pending.
    caught_up: AtomicBool,
}

impl SubShared {
    fn push(&self, e: Event) {
        let waker = {
            let mut st = self.state.lock();
            if st.stopped || st.ended {
                return;
            }
            if let Event::Message(m) = &e {
                st.messages += 1;
                st.bytes += m.data.len();
            }
            st.queue.push_back(e);
            // Over the bound: the oldest go, counted for the reader (CHAN-02).
            while st.messages > BRANCH_MESSAGES || st.bytes > QUEUE_BYTES {
                match st.queue.pop_front() {
                    Some(Event::Message(m)) => {
                        st.messages -= 1;
                        st.bytes -= m.data.len();
                        st.dropped = Some(merge(st.dropped, Missed { count: Some(1), reason: MissedReason::Behind }));
                    }
                    Some(Event::Missed(m)) => st.dropped = Some(merge(st.dropped, m)),
                    None => break,
                }
            }
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn end(&self) {
        let waker = {
            let mut st = self.state.lock();
            st.ended = true;
            st.waker.take()
        };
        self.stop.notify_one();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// What a subscription's task knows to count what it missed.
struct Reader {
    names: Names,
    channel: String,
    /// The first stream sequence the subscription reads.
    start: u64,
    /// For one branch: its sequence just before `start`.
    base: Option<u64>,
    scope: Scope,
    /// The newest branch sequence and stream sequence read, per subject.
    seen: HashMap<String, (u64, u64)>,
    reconnects: Arc<AtomicU64>,
    /// The stream and the consumer's config, to make it again.
    stream: stream::Stream,
    config: consumer::pull::OrderedConfig,
    cause: GapCause,
}

/// Tells why a gap opened: `reconnect` when the client reconnected or the
/// consumer was made again since the subscription last caught up with
/// its stream (the gap opened while it was still recovering), else `behind`.
struct GapCause {
    /// `reconnects` at the newest message read with nothing pending after it.
    settled_reconnects: u64,
    /// The consumer that gave the newest message read.
    consumer: Option<String>,
    /// The consumer was made again (by us or by the ordered consumer) since
    /// the subscription last caught up.
    remade: bool,
}

impl GapCause {
    fn new(reconnects: u64) -> GapCause {
        GapCause { settled_reconnects: reconnects, consumer: None, remade: false }
    }

    /// The reason a gap before a message from `consumer` would have, with
    /// the client's reconnects at `reconnects`; the message is then the
    /// newest read, and `caught_up` says nothing was pending after it.
    fn reason(&mut self, reconnects: u64, consumer: &str, caught_up: bool) -> MissedReason {
        // The ordered consumer names each consumer it makes again; its first
        // message can come before the client's event task counts the
        // reconnect that caused it.
        if self.consumer.as_deref().is_some_and(|c| c != consumer) {
            self.remade = true;
        }
        if self.consumer.as_deref() != Some(consumer) {
            self.consumer = Some(consumer.to_owned());
        }
        // A failover's gap can open a while after the reconnect, in a
        // backlog the consumer is still catching up on (seen in CI with
        // nats-server 2.9: the same consumer, the reconnect counted before).
        let reason = if reconnects != self.settled_reconnects || self.remade { MissedReason::Reconnect } else { MissedReason::Behind };
        if caught_up {
            self.settled_reconnects = reconnects;
            self.remade = false;
        }
        reason
    }
}

/// When a quiet subscription checks its stream for messages its consumer
/// did not deliver, and when it decides the consumer is stuck (seen after a
/// kill -9 of its server): the stream has more for its filter than was
/// read, twice in a row with no progress.
#[derive(Default)]
struct StallWatch {
    /// The read mark at a check that found the stream ahead of it.
    stalled_at: Option<u64>,
    /// Checks since the last message that found everything read.
    caught_up_checks: u32,
    /// The last check got no answer (the servers were failing over).
    unanswered: bool,
    /// The client's reconnects at the last check...
    reconnects: u64,
    /// ...and the checks still made every 2 s since they last changed.
    wary_checks: u32,
}

/// Checks made every 2 s after the client reconnected: a consumer can be
/// left stuck by the failover while its branch is idle, and be found so
/// only once the branch is published to again.
const WARY_CHECKS: u32 = 15;

impl StallWatch {
    fn new(reconnects: u64) -> StallWatch {
        StallWatch { reconnects, ..StallWatch::default() }
    }

    /// A message came: the consumer delivers (a reconnect still keeps the
    /// checks frequent).
    fn progressed(&mut self) {
        *self = StallWatch { reconnects: self.reconnects, wary_checks: self.wary_checks, ..StallWatch::default() };
    }

    /// How long to wait for a message before the next check.
    fn wait(&self) -> Duration {
        // A suspected stall is confirmed, an unanswered check tried again,
        // and a reconnected subscription checked, after 2 s: backing off
        // there kept a branch silent for over a minute after a failover.
        // Otherwise every 2 s of quiet at first, then less often (up to
        // every 64 s), so idle subscriptions cost the servers little.
        if self.stalled_at.is_some() || self.unanswered || self.wary_checks > 0 {
            return STALL_CHECK;
        }
        STALL_CHECK * (1 << self.caught_up_checks.min(5))
    }

    /// A check's outcome: `last`, the stream's newest message for the
    /// filter (`None` when the servers did not answer), against `upto`, the
    /// newest read, with the client's `reconnects` now. True when the
    /// consumer is stuck and must be made again.
    fn checked(&mut self, upto: u64, last: Option<u64>, reconnects: u64) -> bool {
        if reconnects != self.reconnects {
            self.reconnects = reconnects;
            self.wary_checks = WARY_CHECKS;
            self.caught_up_checks = 0;
        }
        self.unanswered = last.is_none();
        match last {
            None => false,
            Some(last) if last > upto => {
                if self.stalled_at == Some(upto) {
                    self.stalled_at = None;
                    return true;
                }
                self.stalled_at = Some(upto);
                false
            }
            Some(_) => {
                self.stalled_at = None;
                if self.wary_checks > 0 {
                    self.wary_checks -= 1;
                } else {
                    self.caught_up_checks += 1;
                }
                false
            }
        }
    }
}

/// How long the `tries`-th attempt in a row to make a subscription's
/// consumer again may take: 2 s for the first 5, then twice as long every 5
/// (up to 16 s), so a server too busy to answer within 2 s is not flooded.
fn remake_timeout(tries: u32) -> Duration {
    STALL_CHECK * (1 << (tries / 5).min(3))
}

impl Reader {
    async fn run(mut self, messages: consumer::pull::Ordered, shared: Arc<SubShared>) {
        let mut messages = Some(messages);
        let mut watch = StallWatch::new(self.reconnects.load(Ordering::Acquire));
        let mut remake_tries: u32 = 0;
        loop {
            if shared.state.lock().stopped {
                return;
            }
            let Some(ms) = messages.as_mut() else {
                // Made again here from the last message read: the ordered
                // consumer gives up on some errors (a pull that failed while
                // its server was going away) and ends.
                let from = shared.read_upto.load(Ordering::Acquire) + 1;
                let config = consumer::pull::OrderedConfig { deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence: from.max(self.start) }, ..self.config.clone() };
                let made = async { self.stream.create_consumer(config).await.map_err(|e| e.to_string())?.messages().await.map_err(|e| e.to_string()) };
                // While the stream has no leader (its server was killed) a
                // request goes unanswered: tried again every 2 s at first, not
                // once per request timeout, so the branch resumes soon after
                // the election.
                let made = tokio::time::timeout(remake_timeout(remake_tries), made);
                tokio::select! {
                    r = made => match r {
                        Ok(Ok(m)) => {
                            messages = Some(m);
                            self.cause.remade = true;
                            remake_tries = 0;
                        }
                        Ok(Err(_)) => {
                            remake_tries += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(_) => remake_tries += 1,
                    },
                    _ = shared.stop.notified() => return,
                }
                continue;
            };
            let next = tokio::select! {
                m = ms.next() => m,
                _ = shared.stop.notified() => return,
                _ = tokio::time::sleep(watch.wait()) => {
                    let upto = shared.read_upto.load(Ordering::Acquire);
                    let last = tokio::time::timeout(STALL_CHECK, last_of(&self.stream, &self.config.filter_subject)).await;
                    if watch.checked(upto, last.ok().and_then(|r| r.ok()).map(|(last, _)| last), self.reconnects.load(Ordering::Acquire)) {
                        messages = None;
                    }
                    continue;
                }
            };
            watch.progressed();
            match next {
                Some(Ok(m)) => {
                    if let Some(events) = self.take(&m) {
                        for e in events {
                            shared.push(e);
                        }
                    }
                    // Only once its events are queued: close ends the
                    // subscription when this reaches the branch's newest.
                    if let Ok(info) = m.info() {
                        shared.read_upto.fetch_max(info.stream_sequence, Ordering::AcqRel);
                        shared.caught_up.store(info.pending == 0, Ordering::Release);
                    }
                }
                Some(Err(_)) | None => {
                    if shared.state.lock().ended {
                        return;
                    }
                    messages = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// The events of one message from the stream: word of those missed
    /// before it on its branch, then it.
    fn take(&mut self, m: &jetstream::Message) -> Option<Vec<Event>> {
        let info = m.info().ok()?;
        let seq = info.stream_sequence;
        // A consumer made again from the start replays older messages.
        if seq < self.start {
            return None;
        }
        let headers = m.headers.as_ref();
        let b = headers.and_then(|h| header_u64(h, SEQ_HEADER))?;
        let prev = headers.and_then(|h| header_u64(h, PREV_HEADER)).unwrap_or(0);
        let count = headers.and_then(|h| header_u64(h, COUNT_HEADER)).unwrap_or(1);
        let datas = if count > 1 { unbatch(&m.payload, count)? } else { vec![m.payload.to_vec().into_boxed_slice()] };
        let subject = m.subject.as_str();
        let branch = self.names.branch_of(&self.channel, subject)?;
        let gap = match self.seen.get(subject) {
            // Already read: a consumer made again from an older position.
            Some(&(_, last_seq)) if seq <= last_seq => return None,
            Some(&(last, _)) if b > last => Some(b - last - 1),
            // A stamp given twice: two processes published to the branch at
            // once, and nats-server 2.9 let both through its check
            // (docs/cluster.md). Delivered, with no miss.
            Some(_) => Some(0),
            None => match (self.scope, self.base) {
                (Scope::Branch, Some(base)) if b > base => Some(b - base - 1),
                (Scope::Branch, Some(_)) => Some(0),
                // The branch's message before this one came before the start.
                _ if prev < self.start => Some(0),
                // Its first since the start left the stream unread: how many is unknown.
                _ => None,
            },
        };
        let b_last = b + count - 1;
        let b_newest = self.seen.get(subject).map_or(b_last, |&(l, _)| l.max(b_last));
        self.seen.insert(subject.to_owned(), (b_newest, seq));
        let reason = self.cause.reason(self.reconnects.load(Ordering::Acquire), info.consumer, info.pending == 0);
        let mut out = Vec::with_capacity(datas.len() + 1);
        if gap != Some(0) {
            out.push(Event::Missed(Missed { count: gap, reason }));
        }
        let branch: Arc<[Key]> = branch.into();
        for (i, data) in datas.into_iter().enumerate() {
            out.push(Event::Message(Arc::new(Msg { branch: branch.clone(), seq: b + i as u64, data })));
        }
        Some(out)
    }
}

/// The `count` messages of a batch's payload (see [`COUNT_HEADER`]); None
/// when it is not one (not written by this store: skipped).
fn unbatch(payload: &[u8], count: u64) -> Option<Vec<Box<[u8]>>> {
    let mut out = Vec::with_capacity(count.min(BATCH_MESSAGES as u64) as usize);
    let mut rest = payload;
    for _ in 0..count {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return None;
        }
        out.push(tail[..len].into());
        rest = &tail[len..];
    }
    rest.is_empty().then_some(out)
}

/// A subscription on NATS, read by pulling as the engine's.
pub(crate) struct NatsSubscription(Arc<SubShared>);

impl NatsSubscription {
    pub(crate) fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let mut st = self.0.state.lock();
        if st.stopped {
            return Poll::Ready(None);
        }
        // Misses in a row are told as one, before the next message: those
        // the queue dropped and a gap queued behind them (a reader frozen
        // while its consumer read on).
        let mut missed = st.dropped.take();
        while matches!(st.queue.front(), Some(Event::Missed(_))) {
            if let Some(Event::Missed(m)) = st.queue.pop_front() {
                missed = Some(merge(missed, m));
            }
        }
        if let Some(m) = missed {
            return Poll::Ready(Some(Event::Missed(m)));
        }
        match st.queue.pop_front() {
            Some(e) => {
                if let Event::Message(m) = &e {
                    st.messages -= 1;
                    st.bytes -= m.data.len();
                }
                Poll::Ready(Some(e))
            }
            None if st.ended => Poll::Ready(None),
            None => {
                if let Some(cx) = cx {
                    st.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        let st = self.0.state.lock();
        st.stopped || (st.ended && st.queue.is_empty() && st.dropped.is_none())
    }

    pub(crate) fn stop(&self) {
        let waker = {
            let mut st = self.0.state.lock();
            if st.stopped {
                return;
            }
            st.stopped = true;
            st.queue.clear();
            st.waker.take()
        };
        self.0.stop.notify_one();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for NatsSubscription {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_key_maps_to_a_subject_and_back() {
        let n = Names::new("team/app");
        let long = "é.* >".repeat(170);
        for b in [vec![], vec![Key::from(7)], vec![Key::from("a.b"), Key::from("*>"), Key::from(long.as_str())], vec![Key::from("x".repeat(1024).as_str())]] {
            let s = n.subject("chat", &b);
            assert!(!s.contains(' ') && !s.contains('*') && !s.split('.').any(|t| t.contains('>') || t.is_empty()), "{s}");
            assert!(s.len() < 4000);
            assert_eq!(n.branch_of("chat", &s).unwrap(), b);
        }
        assert_eq!(n.subject("chat", &[Key::from(7)]), n.subject("chat", &[Key::from("7")]), "7 and \"7\" are one key (CHAN-06)");
        assert_ne!(n.subject("chat", &[Key::from("a"), Key::from("b")]), n.subject("chat", &[Key::from("a.b")]));
        assert_eq!(n.stream("chat_x"), "ts-team_2Fapp-chat_5Fx");
    }

    /// Seconds from a quiet subscription's last message until its stuck
    /// consumer is made again, when its first `unanswered` checks get no
    /// answer (each waiting out its timeout) and the next find the stream
    /// ahead of it; and when the answers came back.
    fn stuck_consumer_remade_after(unanswered: u32) -> (u64, u64) {
        let mut watch = StallWatch::default();
        let (mut now, mut answers_back) = (Duration::ZERO, Duration::ZERO);
        for check in 0.. {
            now += watch.wait();
            let last = if check < unanswered {
                now += STALL_CHECK;
                answers_back = now;
                None
            } else {
                Some(10)
            };
            if watch.checked(5, last, 0) {
                return (now.as_secs(), answers_back.as_secs());
            }
            assert!(check < 100, "never made again");
        }
        unreachable!()
    }

    /// CHAN-04: a consumer left stuck by a kill -9 of its server is made
    /// again within 2 checks of 2 s once the servers answer, however many
    /// checks went unanswered during the failover (CI once saw a branch
    /// silent for over 60 s after the kill).
    #[test]
    fn chan_04_a_stuck_consumer_is_made_again_within_4_s_of_the_servers_answering() {
        for unanswered in 0..8 {
            let (remade, answers_back) = stuck_consumer_remade_after(unanswered);
            assert!(remade - answers_back <= 4, "{unanswered} unanswered checks: answers back at {answers_back} s, made again at {remade} s");
        }
    }

    /// A quiet subscription that has read everything checks less and less
    /// often, up to every 64 s, so idle subscriptions cost the servers little.
    #[test]
    fn a_quiet_subscription_that_read_everything_is_checked_less_and_less_often() {
        let mut watch = StallWatch::default();
        let waits: Vec<u64> = (0..8)
            .map(|_| {
                let w = watch.wait().as_secs();
                assert!(!watch.checked(10, Some(10), 0));
                w
            })
            .collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 64, 64]);
        // An unanswered check does not lengthen the next wait.
        assert!(!watch.checked(10, None, 0));
        assert_eq!(watch.wait().as_secs(), 2);
    }

    /// CHAN-04: after the client reconnected, a quiet subscription that has
    /// read everything is checked every 2 s for 15 checks, messages or not:
    /// a consumer the failover left stuck on an idle branch is then found
    /// within 4 s of the branch's next publish, not after a long back-off
    /// (a test saw 8 s lost so).
    #[test]
    fn chan_04_after_a_reconnect_a_quiet_subscription_is_checked_every_2_s_for_a_while() {
        let mut watch = StallWatch::new(0);
        for _ in 0..4 {
            assert!(!watch.checked(10, Some(10), 0));
        }
        assert_eq!(watch.wait().as_secs(), 32, "backed off before the reconnect");
        assert!(!watch.checked(10, Some(10), 1));
        watch.progressed();
        let waits: Vec<u64> = (0..16)
            .map(|_| {
                let w = watch.wait().as_secs();
                assert!(!watch.checked(10, Some(10), 1));
                w
            })
            .collect();
        assert_eq!(waits, [[2; 15].as_slice(), &[4]].concat(), "15 checks every 2 s after the reconnect, then backing off again");
        // The branch is published to and the consumer stays stuck: made again
        // at the second check that sees it, 2 s apart.
        let mut watch = StallWatch::new(0);
        assert!(!watch.checked(10, Some(10), 1));
        assert!(!watch.checked(10, Some(11), 1));
        assert_eq!(watch.wait().as_secs(), 2);
        assert!(watch.checked(10, Some(11), 1));
    }

    /// CHAN-04: the ordered consumer makes itself again after its server
    /// died (missed heartbeats), and its first message can come before the
    /// client's task counts the reconnect: the gap is still `reconnect`.
    #[test]
    fn chan_04_a_gap_from_a_consumer_made_again_before_the_reconnect_is_counted_is_a_reconnect() {
        let mut cause = GapCause::new(0);
        assert_eq!(cause.reason(0, "sub_1", true), MissedReason::Behind, "a first message of a branch read from the start");
        assert_eq!(cause.reason(0, "sub_1", true), MissedReason::Behind, "the same consumer, no reconnect: the reader fell behind");
        assert_eq!(cause.reason(0, "sub_2", true), MissedReason::Reconnect, "the consumer was made again");
        assert_eq!(cause.reason(0, "sub_2", true), MissedReason::Behind);
        assert_eq!(cause.reason(1, "sub_2", true), MissedReason::Reconnect, "the client reconnected");
        cause.remade = true;
        assert_eq!(cause.reason(1, "sub_3", true), MissedReason::Reconnect, "made again by us");
        assert_eq!(cause.reason(1, "sub_3", true), MissedReason::Behind);
    }

    /// CHAN-04: a failover's gap that opens in the backlog after the
    /// reconnect, before the subscription caught up, from the same
    /// consumer, is `reconnect`; once caught up, a gap is `behind`.
    #[test]
    fn chan_04_a_gap_while_catching_up_after_a_reconnect_is_a_reconnect() {
        let mut cause = GapCause::new(0);
        assert_eq!(cause.reason(0, "sub_1", true), MissedReason::Behind);
        assert_eq!(cause.reason(1, "sub_1", false), MissedReason::Reconnect, "the first message after the reconnect, more pending");
        assert_eq!(cause.reason(1, "sub_1", false), MissedReason::Reconnect, "still catching up: the failover's gap");
        assert_eq!(cause.reason(1, "sub_1", true), MissedReason::Reconnect, "the message that caught up");
        assert_eq!(cause.reason(1, "sub_1", true), MissedReason::Behind, "caught up since: the reader fell behind");
        assert_eq!(cause.reason(1, "sub_2", false), MissedReason::Reconnect, "made again");
        assert_eq!(cause.reason(1, "sub_2", false), MissedReason::Reconnect, "made again, not caught up since");
    }

    /// CHAN-02: the queue dropped its oldest while a gap waited behind
    /// them (a reader frozen while its consumer read on): one miss of both.
    #[test]
    fn misses_in_a_row_are_told_once_with_their_sum() {
        let shared = Arc::new(SubShared {
            state: Mutex::new(SubState::default()),
            stop: tokio::sync::Notify::new(),
            channel: "c".into(),
            filter: "f".into(),
            scope: Scope::Branch,
            read_upto: AtomicU64::new(0),
            caught_up: AtomicBool::new(false),
        });
        let msg = |seq| Event::Message(Arc::new(Msg { branch: vec![Key::from(1)].into(), seq, data: b"1".to_vec().into() }));
        (1..=10).for_each(|s| shared.push(msg(s)));
        shared.push(Event::Missed(Missed { count: Some(5), reason: MissedReason::Behind }));
        (16..16 + BRANCH_MESSAGES as u64).for_each(|s| shared.push(msg(s)));
        let sub = NatsSubscription(shared);
        match sub.read(None) {
            Poll::Ready(Some(Event::Missed(m))) => assert_eq!((m.count, m.reason), (Some(15), MissedReason::Behind)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(sub.read(None), Poll::Ready(Some(Event::Message(m))) if m.seq == 16));
    }

    #[test]
    fn a_batch_gives_back_its_messages_and_anything_else_is_not_one() {
        let msgs: [&[u8]; 3] = [b"{}", b"", b"[1,2]"];
        let mut p = Vec::new();
        for m in msgs {
            p.extend_from_slice(&(m.len() as u32).to_le_bytes());
            p.extend_from_slice(m);
        }
        let back = unbatch(&p, 3).unwrap();
        assert_eq!(back.iter().map(|b| &b[..]).collect::<Vec<_>>(), msgs);
        assert!(unbatch(&p, 2).is_none(), "bytes left over");
        assert!(unbatch(&p, 4).is_none(), "too few");
        assert!(unbatch(&p[..p.len() - 1], 3).is_none(), "cut short");
    }
}
