//! The server: the owning process serves its store to other processes.
//!
//! Each connection has one reader (requests, handled in order, so pipelined
//! publishes keep their order, CHAN-01) and one writer fed by a queue whose
//! pending bytes stay within 8 MiB: a subscription forwards its next message
//! only while there is room, so a slow reader stays behind in its branch's
//! log (and later learns its exact missed count) instead of growing the
//! server's memory or slowing a publisher (CHAN-02). Leases over a
//! connection live their ttl from their last renewal and outlive the
//! connection until then, so a client that reconnects in time keeps them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::AsyncRead;
use tokio::sync::Notify;

use crate::engine::Engine;
use crate::engine::channels::{Event, LocalSubscription, Msg};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::{CONNECTION_PENDING_BYTES, MAX_MESSAGE_BYTES};
use crate::engine::locks::{LocalLease, Table};
use crate::runtime;
use crate::net::socket::{self, Sink, WriteHalf};
use crate::net::spin::OwnerHints;
use crate::net::wire::{self, AcquireOk, Address, FrameReader, Reply, Request, WireError};

mod requests;
use self::requests::ServedConnection;

/// How long a connection whose client went away is still read for the
/// publishes it sent before (its answers cannot go out), at most...
const DRAIN_LIMIT: Duration = Duration::from_secs(3);
/// ...and with nothing coming for this long, it is done.
const DRAIN_QUIET: Duration = Duration::from_millis(100);

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Subscribe and read status.
    Read,
    /// Also publish and hold keys.
    Data,
    /// Also stop the owner.
    Admin,
}

impl Role {
    fn parse(s: &str) -> Option<Role> {
        match s {
            "read" => Some(Role::Read),
            "data" => Some(Role::Data),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

struct ServerLease {
    raw: LocalLease,
    session: String,
    hold: u64,
    out: Weak<Outbox>,
}

pub(crate) struct Server {
    /// Weak: a server does not keep its store open.
    engine: Weak<Engine>,
    dir: std::path::PathBuf,
    leases: Mutex<HashMap<u64, ServerLease>>,
    holds: Mutex<HashMap<(String, u64), u64>>,
    conns: Mutex<HashMap<u64, ConnInfo>>,
    next_conn: AtomicU64,
    stopping: Notify,
    stopped: AtomicBool,
    /// Set by a stand-alone owner (`tinystore serve`): `shutdown` stops it.
    pub(crate) shutdown: Mutex<Option<Arc<Notify>>>,
}

#[derive(Clone, serde::Serialize)]
struct ConnInfo {
    id: u64,
    client: String,
    address: String,
    since_ms: u64,
    #[serde(skip)]
    since: Instant,
    #[serde(skip)]
    out: Weak<Outbox>,
}

struct Outbox {
    sink: Arc<Sink>,
    last_heard: Mutex<Instant>,
    closed: AtomicBool,
    /// Closed because a write failed (the client went away), not by us.
    gone: AtomicBool,
    /// Holds waiting in line, by hold id.
    waits: Mutex<HashMap<u64, InLine>>,
    /// How many wait in line, and whether the client pipelines: the
    /// connection's reader spins only when neither ([`crate::net::spin`]).
    hints: Arc<OwnerHints>,
}

impl Outbox {
    fn wait_in_line(&self, hold: u64, in_line: InLine) {
        if self.waits.lock().insert(hold, in_line).is_none() {
            self.hints.waiting.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every hold in line (the connection ended).
    fn leave_every_line(&self) -> Vec<InLine> {
        let left: Vec<InLine> = self.waits.lock().drain().map(|(_, l)| l).collect();
        self.hints.waiting.store(0, Ordering::Relaxed);
        left
    }

    fn leave_line(&self, hold: u64) -> Option<InLine> {
        let left = self.waits.lock().remove(&hold);
        if left.is_some() {
            self.hints.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        left
    }

    fn push(&self, frame: &[u8]) {
        if !self.sink.send(frame) {
            if !self.closed.load(Ordering::Acquire) {
                self.gone.store(true, Ordering::Release);
            }
            self.closed.store(true, Ordering::Release);
        }
    }

    fn send<T: serde::Serialize>(&self, v: &T) {
        self.push(&wire::frame(v));
    }

    /// Waits until the pending output is below the connection's limit.
    async fn room(&self) {
        self.sink.room(CONNECTION_PENDING_BYTES).await
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.sink.close();
    }
}

/// A socket listener: Unix or TCP (TLS is TCP with a handshake after).
trait Listener: Send + Sync + 'static {
    type Accepted: Send + 'static;
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<Self::Accepted>> + Send;
}

impl Listener for tokio::net::UnixListener {
    type Accepted = (tokio::net::UnixStream, tokio::net::unix::SocketAddr);
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<Self::Accepted>> + Send {
        self.accept()
    }
}

impl Listener for tokio::net::TcpListener {
    type Accepted = (tokio::net::TcpStream, std::net::SocketAddr);
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<Self::Accepted>> + Send {
        self.accept()
    }
}

/// A hold waiting in line: its lock, key and waiter id.
type InLine = (Arc<Table>, Key, u64);

fn answer_ok<T: serde::Serialize>(out: &Outbox, id: u64, v: &T) {
    let raw = serde_json::value::to_raw_value(v).expect("answers serialize");
    out.send(&Reply { id: Some(id), ok: Some(&raw), ..Default::default() });
}

/// The grant of a hold that waited in line.
fn answer_queued(out: &Outbox, id: u64, v: &AcquireOk) {
    let raw = serde_json::value::to_raw_value(v).expect("answers serialize");
    out.send(&Reply { id: Some(id), ok: Some(&raw), queued: true, ..Default::default() });
}

fn answer_err(out: &Outbox, id: u64, e: &Error) {
    out.send(&Reply { id: Some(id), err: Some(WireError::from(e)), ..Default::default() });
}

impl Server {
    pub(crate) fn new(engine: Weak<Engine>, dir: std::path::PathBuf, shutdown: Option<Arc<Notify>>) -> Arc<Server> {
        // Read now: a TINYSTORE_SPIN it cannot use is said when serving starts.
        crate::net::spin::window();
        Arc::new(Server {
            engine,
            dir,
            leases: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            stopping: Notify::new(),
            stopped: AtomicBool::new(false),
            shutdown: Mutex::new(shutdown),
        })
    }

    /// Listens on `address` until the server stops. A Unix socket gets mode
    /// 0600 (SEC-01); TCP and TLS need the store's tokens file; TLS also a
    /// certificate and key: `tls_files` (PEM), or `<dir>/tls/cert.pem` and
    /// `<dir>/tls/key.pem`.
    pub(crate) fn listen(self: &Arc<Self>, address: &Address, tls_files: Option<(&std::path::Path, &std::path::Path)>) -> Result<()> {
        match address {
            Address::Unix(path) => {
                if path.exists() {
                    // A live owner would hold the directory lock; this one is stale.
                    let _ = std::fs::remove_file(path);
                }
                let l = {
                    let _g = runtime::handle().enter();
                    tokio::net::UnixListener::bind(path).map_err(|e| Error::io(&format!("could not listen on unix:{}", path.display()), e))?
                };
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| Error::io("could not make the socket owner-only", e))?;
                let name = address.to_string();
                self.accept_loop(l, move |me, (s, _)| {
                    let hints = Arc::new(OwnerHints::default());
                    if let Ok(halves) = socket::split_unix(s, hints.clone()) {
                        runtime::spawn(me.clone().connection(halves, name.clone(), None, hints));
                    }
                });
            }
            Address::Tcp(hp) => {
                let tokens = Arc::new(Tokens::load(&self.dir)?);
                let l = bind_tcp("tcp", hp)?;
                if !l.local_addr().map(|a| a.ip().is_loopback()).unwrap_or(false) {
                    eprintln!("tinystore: warning: plain TCP on {hp} listens beyond loopback; tokens and messages cross the network unencrypted (serve tls:{hp} instead)");
                }
                self.accept_loop(l, move |me, (s, peer)| {
                    runtime::spawn(me.clone().connection(socket::split_tcp(s), format!("tcp:{peer}"), Some(tokens.clone()), Default::default()));
                });
            }
            Address::Tls(hp) => {
                let dir = self.dir.clone();
                let tokens = Arc::new(Tokens::load(&dir)?);
                let (cert, key) = match tls_files {
                    Some((c, k)) => (c.to_path_buf(), k.to_path_buf()),
                    None => crate::net::tls::default_files(&dir),
                };
                let acceptor = tokio_rustls::TlsAcceptor::from(crate::net::tls::server_config(&cert, &key)?);
                let l = bind_tcp("tls", hp)?;
                self.accept_loop(l, move |me, (s, peer)| {
                    // The handshake runs in the connection's task: a
                    // slow or plain client never holds up the others.
                    let (me2, tokens, acceptor) = (me.clone(), tokens.clone(), acceptor.clone());
                    runtime::spawn(async move {
                        if let Some((rd, wr)) = crate::net::tls::accept(s, &acceptor).await {
                            let halves = (rd, WriteHalf::Tls(wr));
                            me2.connection(halves, format!("tls:{peer}"), Some(tokens), Default::default()).await;
                        }
                    });
                });
            }
        }
        Ok(())
    }

    /// Accepts connections until the server stops; `start` begins each one.
    /// A failed accept (out of file descriptors) is retried after 50 ms.
    fn accept_loop<L: Listener>(self: &Arc<Self>, l: L, start: impl Fn(&Arc<Server>, L::Accepted) + Send + 'static) {
        let me = self.clone();
        runtime::spawn(async move {
            loop {
                tokio::select! {
                    a = l.accept_one() => match a {
                        Ok(c) => start(&me, c),
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    _ = me.stopping.notified() => return,
                }
            }
        });
    }

    /// The engine it serves; `closed` once its store is gone.
    fn engine(&self) -> Result<Arc<Engine>> {
        self.engine.upgrade().ok_or_else(Error::closed)
    }

    /// Stops listening and tells every client the owner is going away.
    pub(crate) fn stop(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stopping.notify_waiters();
        for c in self.conns.lock().values() {
            if let Some(out) = c.out.upgrade() {
                out.send(&Reply { ev: Some("closing".into()), ..Default::default() });
                out.close();
            }
        }
    }

    pub(crate) fn connections(&self) -> serde_json::Value {
        let now = Instant::now();
        let list: Vec<ConnInfo> = self
            .conns
            .lock()
            .values()
            .map(|c| ConnInfo { since_ms: now.duration_since(c.since).as_millis() as u64, ..c.clone() })
            .collect();
        serde_json::to_value(list).unwrap_or_default()
    }

    async fn connection(self: Arc<Self>, (rd, wr): (Box<dyn AsyncRead + Send + Unpin>, WriteHalf), address: String, tokens: Option<Arc<Tokens>>, hints: Arc<OwnerHints>) {
        let out = Arc::new(Outbox { sink: Sink::new(wr), last_heard: Mutex::new(Instant::now()), closed: AtomicBool::new(false), gone: AtomicBool::new(false), waits: Mutex::new(HashMap::new()), hints });
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let mut c = ServedConnection { server: self.clone(), out: out.clone(), id: conn_id, address, session: None, version: 0, role: None, tokens, subs: HashMap::new(), woken: Vec::new(), tickets: HashMap::new(), answer: Vec::new(), last_branch: None, checked_channel: None };
        let mut reader = FrameReader::new(rd);
        // The first frame of what was read together marks when the client
        // was last heard from (one clock read a batch, not a frame).
        let mut batch_start = true;
        let mut batch_frames = 0usize;
        let mut pipelining = crate::net::spin::Pipelining::new();
        // Set once a write failed (the client went away): until when what
        // it sent before is still read.
        let mut draining: Option<Instant> = None;
        loop {
            if draining.is_none() && out.closed.load(Ordering::Acquire) {
                if !out.gone.load(Ordering::Acquire) {
                    break;
                }
                draining = Some(Instant::now() + DRAIN_LIMIT);
            }
            // Frames already read are taken without a select (a `Notified`
            // and a random pick a frame were 5% of the owner's samples).
            let frame = if reader.has_frame() {
                reader.buffered().map(|r| r.map(Some)).unwrap_or(Ok(None))
            } else if let Some(until) = draining {
                // A client that exits right after its publishes left never
                // reads their answers; its publishes still count (CHAN-01).
                let quiet = until.saturating_duration_since(Instant::now()).min(DRAIN_QUIET);
                match tokio::time::timeout(quiet, reader.next()).await {
                    Ok(f) => f,
                    Err(_) => break,
                }
            } else {
                tokio::select! {
                    f = reader.next() => f,
                    _ = self.stopping.notified() => break,
                }
            };
            if draining.is_some_and(|until| Instant::now() >= until) {
                break;
            }
            let frame = match frame {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    // A frame over the limit or cut short: this connection only.
                    answer_err(&out, 0, &e);
                    break;
                }
            };
            if std::mem::take(&mut batch_start) {
                *out.last_heard.lock() = Instant::now();
                batch_frames = 0;
            }
            batch_frames += 1;
            // Answers to requests read together leave in one write.
            out.sink.cork();
            // A publish in our client's exact shape is read without the full parse.
            if let Some(p) = wire::fast_publish(frame, &mut c.last_branch) {
                let id = p.id;
                if let Err(e) = c.publish_fast(p) {
                    answer_err(&out, id, &e);
                }
            } else {
                match serde_json::from_slice::<Request>(frame) {
                    // Draining, only publishes: nobody would hear of a lease
                    // or a wait, which would stand for nobody.
                    Ok(req) if draining.is_some() && req.op != "publish" => {}
                    Ok(req) => {
                        let (id, quiet) = (req.id, req.quiet == Some(true));
                        if req.op != "publish" {
                            // The next op may wait: what was published goes out now.
                            runtime::run_woken(&mut c.woken);
                        }
                        if let Err(e) = c.handle(req)
                            && !quiet
                        {
                            answer_err(&out, id, &e);
                        }
                    }
                    Err(e) => {
                        // JSON with an id gets an answer; anything else closes the connection.
                        match serde_json::from_slice::<serde_json::Value>(frame).ok().and_then(|v| v.get("id")?.as_u64()) {
                            Some(id) => answer_err(&out, id, &Error::invalid(format!("a request out of shape: {e}; see docs/wire.md"))),
                            None => {
                                answer_err(&out, 0, &Error::new(ErrorKind::Protocol, format!("a frame that is not a request: {e}")));
                                out.sink.uncork();
                                break;
                            }
                        }
                    }
                }
            }
            if !reader.has_frame() {
                batch_start = true;
                out.hints.read_brought(batch_frames, &mut pipelining);
                if c.subs.is_empty() {
                    // Answers first: the client sends its next publishes
                    // while this thread forwards these to other connections.
                    out.sink.uncork();
                    runtime::run_woken(&mut c.woken);
                } else {
                    // Deliveries first: a client that publishes and subscribes on
                    // this connection gets its answers and messages in one read.
                    runtime::run_woken(&mut c.woken);
                    out.sink.uncork();
                }
            }
        }
        out.close();
        c.give_up_tickets();
        runtime::run_woken(&mut c.woken);
        for (_, f) in c.subs.drain() {
            f.stop();
        }
        // A waiter whose connection died leaves the line at once.
        for (table, key, waiter) in out.leave_every_line() {
            table.leave_queue(&key, waiter);
        }
        self.conns.lock().remove(&conn_id);
    }

    /// Registers a lease granted over a connection, for its answer. Its
    /// lock's ttl is written down first when it is the longest granted, so
    /// a new owner waits it out (STORE-01): the ttls granted, not the ones
    /// waiters asked for. Errors with the lease not granted (to let go, or
    /// to pass on from a grant callback) when that write fails.
    fn grant(self: &Arc<Self>, raw: LocalLease, session: &str, hold: u64, out: &Arc<Outbox>, waited: Duration) -> std::result::Result<AcquireOk, (Error, LocalLease)> {
        if let Some(ttl) = raw.ttl() {
            let noted = self.engine().and_then(|engine| {
                if engine.note_remote_ttl(raw.lock_name(), ttl) {
                    crate::net::files::record_remote_lock_ttl(&self.dir, raw.lock_name(), ttl)?;
                }
                Ok(())
            });
            if let Err(e) = noted {
                return Err((e, raw));
            }
        }
        let (id, fence) = (raw.id(), raw.fence());
        let weak = Arc::downgrade(self);
        raw.on_lost(move || {
            if let Some(s) = weak.upgrade() {
                s.lost(id);
            }
        });
        self.holds.lock().insert((session.to_owned(), hold), id);
        self.leases.lock().insert(id, ServerLease { raw, session: session.to_owned(), hold, out: Arc::downgrade(out) });
        Ok(AcquireOk { lease: Some(id), fence, waited_ms: waited.as_millis() as u64 })
    }

    /// A lease ran out: forget it and tell its holder if connected.
    fn lost(&self, id: u64) {
        let l = self.leases.lock().remove(&id);
        if let Some(l) = l {
            self.holds.lock().remove(&(l.session.clone(), l.hold));
            if let Some(out) = l.out.upgrade() {
                out.send(&Reply { ev: Some("lost".into()), lease: Some(id), message: Some(l.raw.lost_error().message().to_owned()), ..Default::default() });
            }
        }
    }
}


/// Forwards a subscription's events to its connection while the connection
/// has room. A publish over the wire forwards from the publisher's own task
/// ([`runtime::collect_woken`]) at the end of what it read together: one socket
/// write per subscriber for a batch of publishes, and no wake-up of another
/// thread, much as Redis writes to its subscribers before it reads again.
/// Woken from elsewhere (a publish in the owning process, a transaction's
/// commit), its own task forwards.
struct Forwarder {
    sub: Mutex<Option<LocalSubscription>>,
    id: u64,
    out: Arc<Outbox>,
    /// The client reads `msgs` events (version 4).
    runs_of_messages: bool,
    runs: runtime::OneAtATime,
    listed: AtomicBool,
    stopped: AtomicBool,
    kick: Notify,
}

/// What [`Forwarder::drain`] stopped at.
enum Drained {
    /// Nothing more to read; woken at the next event.
    Waiting,
    /// The connection's queue is full: its task waits for room.
    NoRoom,
    /// The subscription or the connection ended.
    Ended,
}

impl Forwarder {
    fn start(sub: LocalSubscription, id: u64, out: Arc<Outbox>, runs_of_messages: bool) -> Arc<Forwarder> {
        let f = Arc::new(Forwarder {
            sub: Mutex::new(Some(sub)),
            id,
            out,
            runs_of_messages,
            runs: runtime::OneAtATime::new(),
            listed: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            kick: Notify::new(),
        });
        let me = f.clone();
        runtime::spawn(async move {
            loop {
                if me.stopped.load(Ordering::Acquire) {
                    return;
                }
                me.out.room().await;
                me.pump();
                me.kick.notified().await;
            }
        });
        f
    }

    /// Forwards what is ready, from this thread.
    fn pump(self: &Arc<Self>) {
        self.runs.run(|| match self.drain() {
            Drained::Waiting => {}
            Drained::NoRoom => self.kick.notify_one(),
            Drained::Ended => {
                self.stopped.store(true, Ordering::Release);
                self.kick.notify_one();
            }
        });
    }

    fn drain(self: &Arc<Self>) -> Drained {
        let guard = self.sub.lock();
        let Some(sub) = guard.as_ref() else { return Drained::Ended };
        let waker = std::task::Waker::from(self.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            if self.out.closed.load(Ordering::Acquire) {
                return Drained::Ended;
            }
            if self.out.sink.queued() >= CONNECTION_PENDING_BYTES {
                return Drained::NoRoom;
            }
            let mut buf = Vec::new();
            let mut ended = false;
            let mut ready = Vec::new();
            let mut branch = None;
            while buf.len() < 64 * 1024 {
                // Taken from the log at once, encoded after (the log's
                // lock is not held meanwhile).
                match sub.read_many(Some(&mut cx), 64, |ev, next| ready.push((ev, next))) {
                    std::task::Poll::Ready(0) => {
                        wire::encode(&Reply { ev: Some("end".into()), sub: Some(self.id), ..Default::default() }, &mut buf);
                        ended = true;
                        break;
                    }
                    std::task::Poll::Ready(_) if self.runs_of_messages => encode_events(&mut buf, self.id, &mut ready, &mut branch),
                    std::task::Poll::Ready(_) => ready.drain(..).for_each(|(ev, next)| encode_event(&mut buf, self.id, ev, next, &mut branch)),
                    std::task::Poll::Pending => break,
                }
            }
            let full = buf.len() >= 64 * 1024;
            if !buf.is_empty() {
                self.out.push(&buf);
            }
            if ended {
                return Drained::Ended;
            }
            if !full {
                return Drained::Waiting;
            }
        }
    }

    /// Forwards what is ready, from this thread, before the caller's next
    /// write (a `ping`'s answer). Not through [`OneAtATime`](runtime::OneAtATime):
    /// a drain running elsewhere holds `sub`, so this waits for it and its
    /// writes come first.
    fn flush(self: &Arc<Self>) {
        match self.drain() {
            Drained::Waiting => {}
            Drained::NoRoom => self.kick.notify_one(),
            Drained::Ended => {
                self.stopped.store(true, Ordering::Release);
                self.kick.notify_one();
            }
        }
    }

    /// Stops it for good: the branch no longer keeps messages for it.
    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let sub = self.sub.lock().take();
        drop(sub);
        self.kick.notify_one();
    }
}

impl runtime::RunOnWaker for Forwarder {
    fn listed(&self) -> &AtomicBool {
        &self.listed
    }
    fn run_on_waker(self: Arc<Self>) {
        self.pump();
    }
}

impl std::task::Wake for Forwarder {
    fn wake(self: Arc<Self>) {
        if runtime::defer_to_waker(self.clone()).is_some() {
            self.kick.notify_one();
        }
    }
}

/// Writes one event frame; a message's JSON is copied as is, never reparsed.
/// `branch`: the last message's branch and its JSON, kept for the next (a
/// branch's messages share its keys: serialized once a run, not a message).
/// Encodes `ready` (emptied) for a client of version 4: a run of messages
/// of one branch, in sequence, goes as one `msgs` event (at most 1 MiB of
/// messages), the rest as [`encode_event`] does.
fn encode_events(buf: &mut Vec<u8>, sub: u64, ready: &mut Vec<(Event, u64)>, branch: &mut Option<(Arc<[Key]>, Vec<u8>)>) {
    let mut run: Vec<(Arc<Msg>, u64)> = Vec::new();
    let mut bytes = 0;
    for (ev, next) in ready.drain(..) {
        let Event::Message(m) = ev else {
            encode_run(buf, sub, &mut run, branch);
            encode_event(buf, sub, ev, next, branch);
            continue;
        };
        let joins = run.first().is_some_and(|(first, first_next)| {
            let k = run.len() as u64;
            Arc::ptr_eq(&m.branch, &first.branch) && m.seq == first.seq + k && next == first_next + k && bytes + m.data.len() <= MAX_MESSAGE_BYTES
        });
        if !joins {
            encode_run(buf, sub, &mut run, branch);
            bytes = 0;
        }
        bytes += m.data.len();
        run.push((m, next));
    }
    encode_run(buf, sub, &mut run, branch);
}

/// A run of messages (emptied): one `msg` event alone, else one `msgs`.
fn encode_run(buf: &mut Vec<u8>, sub: u64, run: &mut Vec<(Arc<Msg>, u64)>, branch: &mut Option<(Arc<[Key]>, Vec<u8>)>) {
    if run.len() < 2 {
        if let Some((m, next)) = run.pop() {
            encode_event(buf, sub, Event::Message(m), next, branch);
        }
        return;
    }
    let first = &run[0].0;
    let json = match branch {
        Some((keys, json)) if Arc::ptr_eq(keys, &first.branch) => json,
        _ => &branch.insert((first.branch.clone(), wire::branch_json(&first.branch))).1,
    };
    let next = run[run.len() - 1].1;
    wire::encode_msgs(buf, sub, json, first.seq, next, run.iter().map(|(m, _)| &m.data[..]));
    run.clear();
}

fn encode_event(buf: &mut Vec<u8>, sub: u64, ev: Event, next: u64, branch: &mut Option<(Arc<[Key]>, Vec<u8>)>) {
    match ev {
        Event::Message(m) => {
            let json = match branch {
                Some((keys, json)) if Arc::ptr_eq(keys, &m.branch) => json,
                _ => &branch.insert((m.branch.clone(), wire::branch_json(&m.branch))).1,
            };
            wire::encode_msg(buf, sub, json, m.seq, next, &m.data)
        }
        Event::Missed(missed) => {
            wire::encode(&Reply { ev: Some("missed".into()), sub: Some(sub), missed: Some(missed), next: Some(next), ..Default::default() }, buf)
        }
    }
}

/// Binds a TCP listener for `scheme:hp` on the engine's runtime.
fn bind_tcp(scheme: &str, hp: &str) -> Result<tokio::net::TcpListener> {
    let _g = runtime::handle().enter();
    let std_l = std::net::TcpListener::bind(hp).map_err(|e| Error::io(&format!("could not listen on {scheme}:{hp}"), e))?;
    std_l.set_nonblocking(true).map_err(|e| Error::io("tcp listener", e))?;
    tokio::net::TcpListener::from_std(std_l).map_err(|e| Error::io("tcp listener", e))
}

/// The tokens of TCP and TLS clients: `<dir>/tokens`, one `role token` a
/// line. Read again at each connection's `hello`, so a token made or taken
/// out while the store serves counts from the next connection on.
pub(crate) struct Tokens {
    dir: std::path::PathBuf,
}

impl Tokens {
    /// Checks the file now: serving TCP or TLS without a token is an error.
    pub(crate) fn load(dir: &std::path::Path) -> Result<Tokens> {
        Self::read(dir)?;
        Ok(Tokens { dir: dir.to_path_buf() })
    }

    fn read(dir: &std::path::Path) -> Result<Vec<(Role, Vec<u8>)>> {
        let path = dir.join("tokens");
        let text = std::fs::read_to_string(&path).map_err(|_| {
            Error::new(
                ErrorKind::Auth,
                format!("TCP and TLS need tokens: none in {}; make one with `tinystore token new {}`", path.display(), dir.display()),
            )
        })?;
        let mut list = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (role, tok) = line.split_once(' ').ok_or_else(|| Error::invalid(format!("{}: a line is `role token`", path.display())))?;
            let role = Role::parse(role).ok_or_else(|| Error::invalid(format!("{}: a role is read, data or admin", path.display())))?;
            list.push((role, tok.trim().as_bytes().to_vec()));
        }
        if list.is_empty() {
            return Err(Error::new(ErrorKind::Auth, format!("{} has no token", path.display())));
        }
        Ok(list)
    }

    /// The role of `token`, compared in constant time; the token is never
    /// logged. A tokens file that is gone or out of shape lets nobody in
    /// (the owner says why on its stderr; the client is told `auth`).
    fn check(&self, token: Option<&str>) -> Result<Role> {
        use subtle::ConstantTimeEq;
        let list = Self::read(&self.dir).unwrap_or_else(|e| {
            eprintln!("tinystore: refusing TCP and TLS clients: {e}");
            Vec::new()
        });
        let given = token.unwrap_or("").as_bytes();
        let mut found = None;
        for (role, t) in &list {
            if bool::from(t.as_slice().ct_eq(given)) {
                found = Some(*role);
            }
        }
        found.ok_or_else(|| Error::new(ErrorKind::Auth, "a missing or wrong token: set TINYSTORE_TOKEN to a token from the store's tokens file (tinystore token new DIR makes one)"))
    }
}
