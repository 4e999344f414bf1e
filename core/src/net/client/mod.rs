//! The client: a store owned by another process, reached over a socket.
//!
//! One connection per client, pipelined: requests carry ids, answers come
//! back in any order, events are pushed. The client reconnects by itself
//! with back-off, resubscribes from the last position it saw (CHAN-04),
//! renews leases every third of their ttl from the engine's own threads, and
//! tells a holder its lease is lost by its own deadline: the last renewal
//! sent plus the ttl, on a monotonic clock (LOCK-05). A client made
//! by `open(dir)` takes the store over when its owner goes away (STORE-01).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use crate::engine::channels::{Event, Msg, Scope};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::locks::{Holder, Kind, STAYED_HELD, Terms, waited_too_long};
use crate::engine::tickets::Held;
use crate::runtime;
use crate::net::socket::{self, Hold, Sink, WriteHalf};
mod lease;
mod shared_read;
mod subscription;

pub use self::shared_read::LoopReader;
pub(crate) use self::lease::{RemoteLease, RemoteLeaseHandle};
pub(crate) use self::shared_read::{ReaderState, SharedRead};
pub(crate) use self::subscription::{Inbox, RemoteSub};
use crate::net::wire::{self, AcquireOk, Address, FastReply, FrameReader, HelloOk, Reply, Request, SubscribeOk, WireResume};

type Reader = FrameReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>;
/// Answers awaited, by request id.
type Pending = HashMap<u64, Awaited>;

/// A request sent and not yet answered.
struct Awaited {
    answer: Answer,
    /// When it fails unanswered ([`coarse_ms`]); `None` for a renewal.
    fails_at: Option<u64>,
    /// Its answer counts for the spin ([`Expect`](crate::net::spin::Expect)).
    spin: bool,
}

/// The monotonic clock in milliseconds, read coarsely (to a few ms, for the
/// 10 s limit of a request checked every 250 ms): a fine read was 38 ns in a
/// VM, three a publish, 10% of a pipelining publisher's time.
fn coarse_ms() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) } == 0 {
            return t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000;
        }
    }
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}
/// Looked up once or twice a message (answers, subscriptions): SipHash was
/// 7% of a pipelining client's instructions (callgrind), and the ids are
/// this client's own numbers.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Where an answer arrives: the `ok` JSON, or the store's error.
pub(crate) type AnswerRx = oneshot::Receiver<Result<Box<[u8]>>>;

thread_local! {
    /// A publish's frame is written here, kept between a thread's publishes
    /// (an allocation less a message in a burst).
    static FRAME_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    /// The JSON of the channel and branch this thread last published to.
    static PUBLISH_TARGET: std::cell::RefCell<wire::PublishTarget> = std::cell::RefCell::default();
}

/// The largest frame buffer kept for the next publish: a 1 MiB message's
/// would hold a MiB a thread.
const KEPT_FRAME_BYTES: usize = 64 << 10;

fn keep_frame_buffer(mut frame: Vec<u8>) {
    if frame.capacity() <= KEPT_FRAME_BYTES {
        frame.clear();
        FRAME_BUFFER.set(frame);
    }
}

/// Who is waiting for the answer to a request.
enum Answer {
    Call(oneshot::Sender<Result<Box<[u8]>>>),
    /// A publish's answer: counted down from [`OwnerConnection::publishing`].
    Publish(oneshot::Sender<Result<Box<[u8]>>>),
    /// A publish's answer handed to a function where it is read
    /// ([`Client::publish_then`]): no channel, no task to wake.
    PublishThen(PublishOutcome),
    /// A renewal sent at this instant: handled where it is read, no task.
    Renewal(std::sync::Weak<RemoteLease>, Instant),
    /// A lease re-presented to a new owner at this instant (STORE-01).
    Adopt(Arc<RemoteLease>, Instant),
}

impl Answer {
    /// A caller waits for it (not a renewal): the connection spins for it
    /// ([`crate::net::spin::Expect`]).
    fn awaited(&self) -> bool {
        !matches!(self, Answer::Renewal(..) | Answer::Adopt(..))
    }

    fn is_publish(&self) -> bool {
        matches!(self, Answer::Publish(_) | Answer::PublishThen(_))
    }

    /// Gives the answer's `ok` JSON (copied only where it is read: a
    /// publish's is `null`, dropped).
    fn give(self, v: std::result::Result<&[u8], Error>) {
        match self {
            Answer::Call(tx) => {
                let _ = tx.send(v.map(Box::from));
            }
            Answer::Publish(tx) => {
                let _ = tx.send(v.map(|_| Box::default()));
            }
            Answer::PublishThen(mut then) => {
                if let Some(f) = then.0.take() {
                    f(v.map(drop));
                }
            }
            Answer::Renewal(l, sent) => {
                if let Some(l) = l.upgrade() {
                    l.renewed(sent, v.map(Box::from));
                }
            }
            Answer::Adopt(l, sent) => l.adopted(sent, v.map(Box::from)),
        }
    }

    /// Dropped unsent: nobody is told (the sender's call fails instead).
    fn forget(self) {
        if let Answer::PublishThen(mut then) = self {
            then.0 = None;
        }
    }
}

/// The function a publish's outcome is given to; called once. Dropped
/// uncalled (a connection dropped with its requests), it is told the
/// connection went, as a dropped channel tells a waiting future.
pub(crate) struct PublishOutcome(Option<Box<dyn FnOnce(Result<()>) + Send>>);

impl Drop for PublishOutcome {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(publish_cut_off()));
        }
    }
}

/// A publish whose answer will not come.
pub(crate) fn publish_cut_off() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "disconnected from the store before it answered: the message may have been delivered (a retry may deliver it twice)",
    )
}

struct OwnerConnection {
    sink: Arc<Sink>,
    pending: Mutex<Pending>,
    alive: AtomicBool,
    /// Publishes sent and not yet answered.
    publishing: AtomicU64,
    /// A Unix connection's read side, which blocked threads may read too.
    shared: Option<Arc<SharedRead>>,
}

impl OwnerConnection {
    /// What lets a publish held in this connection's sink go (see [`Release`]).
    fn release(&self) -> Release {
        let Some(s) = self.shared.as_ref() else { return Release::Answer };
        let slot = s.slot.lock();
        match (slot.looped, slot.flushed_each_turn) {
            (false, _) => Release::Answer,
            (true, true) => Release::LoopFlush,
            // A busy loop that does not flush would hold it as long.
            (true, false) => Release::Nothing,
        }
    }

    /// What a thread blocked on this connection may read meanwhile.
    fn blocked_reader(&self) -> Option<Arc<dyn runtime::ReadWhileBlocked>> {
        self.shared.clone().map(|s| s as Arc<dyn runtime::ReadWhileBlocked>)
    }
}

/// Where a connection's frames come from.
enum Source {
    /// Read by the connection's task alone (TCP, TLS).
    Stream(Reader),
    /// A Unix socket, read by the connection's task or by a thread blocked
    /// on an answer ([`SharedRead`]).
    Shared(Arc<std::os::unix::net::UnixStream>),
}

/// With this many publishes unanswered, the next ones wait in the sink to
/// leave together when the reader next reads an answer (an answer is sure
/// to come): one write for many pipelined publishes, while a lone publish
/// still leaves at once.
const COALESCE_AFTER: u64 = 4;

/// Where a request stands among the publishes in flight on its connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// None in flight (or not a publish): sent now, weighed by the spin.
    Alone,
    /// Behind others in flight: sent now.
    Behind,
    /// Behind [`COALESCE_AFTER`] or more: held in the sink until the reader
    /// reads an answer.
    HeldBack,
    /// Held in the sink until the code that made it flushes: a thread in
    /// [`runtime::block_on`] when its future yields or returns, a
    /// language's event loop when its burst of calls ends (Node: a
    /// microtask) or its turn does; so what one go publishes leaves in one
    /// write (32 frames at most). `alone` as for [`Place::Alone`] (the spin).
    UntilFlushed { alone: bool },
}

/// What lets a publish held in a connection's sink go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    /// An answer read by an engine thread or a blocked thread, or the
    /// flush of a thread in [`runtime::block_on`].
    Answer,
    /// The flush of the language's event loop that reads the connection
    /// ([`crate::LoopReader::flush`]), which it makes at the end of each
    /// burst and each turn.
    LoopFlush,
    /// Nothing sure: a loop reads the answers and does not flush; publishes
    /// leave at once.
    Nothing,
}

/// The hook a client made by `open(dir)` calls when the owner went away
/// (STORE-01): it tries to own the store in this process, and gives what
/// keeps that store open, or `None` when another process got there first.
/// The api layer makes it, so the client never names the store.
pub(crate) type Takeover = Box<dyn Fn() -> Option<Box<dyn TakenOver>> + Send + Sync>;

/// A store this process came to own by a takeover: closed with the client.
pub(crate) trait TakenOver: Send + Sync {
    fn close(&self);
}

/// Publishes made while the connection is down, sent first, in order, on
/// the next one: within the request timeout and the connection's 8 MiB of
/// pending output, a reconnect is not an error the program must retry.
#[derive(Default)]
struct Offline {
    queue: VecDeque<Queued>,
    bytes: usize,
    /// When the connection went down, and why: for `unavailable` errors.
    down: Option<(Instant, SystemTime, String)>,
}

/// A publish sent: where its answer comes, and the connection's reader
/// for a thread that blocks on it.
pub(crate) type SentPublish = (AnswerRx, Option<Arc<dyn runtime::ReadWhileBlocked>>);

/// Messages read one after another for one subscription, not yet in its
/// inbox ([`Client::dispatch`]).
#[derive(Default)]
struct MsgRun {
    sub: Option<Arc<RemoteSub>>,
    events: Vec<Event>,
    /// Where the last of them says a resume goes on.
    next: u64,
}

/// A publish waiting for the connection, failed with `unavailable` at `until`.
struct Queued {
    channel: String,
    branch: Vec<Key>,
    data: Box<serde_json::value::RawValue>,
    answer: Answer,
    until: Instant,
}

impl Queued {
    fn bytes(&self) -> usize {
        self.channel.len() + self.branch.iter().map(|k| k.to_string().len() + 4).sum::<usize>() + self.data.get().len() + 64
    }
}

/// The connection to an owner, and everything that must survive a reconnect.
pub(crate) struct Client {
    address: Address,
    token: Option<String>,
    /// For `tls:` addresses: who is trusted to vouch for the owner.
    tls: Option<crate::net::tls::ClientTls>,
    session: String,
    /// Set for `open(dir)`: take the store over when its owner goes away.
    takeover: Option<Takeover>,
    conn: Mutex<Option<Arc<OwnerConnection>>>,
    connected: Notify,
    next_id: AtomicU64,
    subs: Mutex<HashMap<u64, Arc<RemoteSub>>>,
    leases: Mutex<HashMap<u64, Arc<RemoteLease>>>,
    hello: Mutex<Option<HelloOk>>,
    closed: AtomicBool,
    /// Closing: publishes sent get their answers, no new call starts.
    closing: AtomicBool,
    /// Holds waiting in line now: while any, the connection pings.
    waiting: AtomicU64,
    /// [`crate::base::limits::REQUEST_TIMEOUT`] unless set at connect.
    request_timeout: Duration,
    /// The store this process came to own by taking over, if it did.
    owned: Mutex<Option<Box<dyn TakenOver>>>,
    /// Publishes waiting for the connection; taken with it (see [`Offline`]).
    offline: Mutex<Offline>,
}

impl Client {
    /// Connects (retrying for up to `patience`) and starts the connection's tasks.
    pub(crate) fn connect(
        address: Address,
        token: Option<String>,
        tls: Option<crate::net::tls::ClientTls>,
        takeover: Option<Takeover>,
        patience: Duration,
        request_timeout: Option<Duration>,
    ) -> Result<Arc<Client>> {
        let mut sid = [0u8; 16];
        getrandom::fill(&mut sid).map_err(|e| Error::internal(format!("no randomness for a session id: {e}")))?;
        let c = Arc::new(Client {
            address,
            token,
            tls,
            session: sid.iter().map(|b| format!("{b:02x}")).collect(),
            takeover,
            conn: Mutex::new(None),
            connected: Notify::new(),
            next_id: AtomicU64::new(1),
            subs: Mutex::new(HashMap::default()),
            leases: Mutex::new(HashMap::default()),
            hello: Mutex::new(None),
            closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            waiting: AtomicU64::new(0),
            request_timeout: request_timeout.unwrap_or(crate::base::limits::REQUEST_TIMEOUT).max(Duration::from_millis(1)),
            owned: Mutex::new(None),
            offline: Mutex::new(Offline::default()),
        });
        let first = runtime::block_on(async {
            let deadline = Instant::now() + patience;
            loop {
                match c.dial().await {
                    Ok(x) => return Ok(x),
                    Err(e) if e.kind() == ErrorKind::Auth || e.kind() == ErrorKind::Protocol || Instant::now() >= deadline => {
                        return Err(e);
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })?;
        *c.conn.lock() = Some(first.1.clone());
        let me = c.clone();
        runtime::spawn(async move { me.run(Some(first)).await });
        runtime::spawn(pinger(Arc::downgrade(&c)));
        Ok(c)
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Fails the requests left unanswered past their time.
    fn expire_requests(&self) {
        let Ok(conn) = self.current() else { return };
        let now = coarse_ms();
        let expired: Vec<Answer> = {
            let mut p = conn.pending.lock();
            let ids: Vec<u64> = p.iter().filter(|(_, w)| w.fails_at.is_some_and(|at| now >= at)).map(|(id, _)| *id).collect();
            ids.into_iter().filter_map(|id| p.remove(&id)).map(|w| w.answer).collect()
        };
        if !expired.is_empty() {
            // Frames held back counting on these answers leave.
            conn.sink.uncork();
        }
        for a in expired {
            if a.is_publish() {
                conn.publishing.fetch_sub(1, Ordering::AcqRel);
            }
            a.give(Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the store did not answer within {} (its owning process may be frozen or overloaded); the request may still take effect when it answers: a publish may yet be delivered, a hold is let go",
                    crate::base::limits::format_duration(self.request_timeout())
                ),
            )));
        }
    }

    pub(crate) fn hello(&self) -> Option<HelloOk> {
        self.hello.lock().clone()
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.hello.lock().as_ref().map_or(0, |h| h.epoch)
    }

    /// Opens the socket and says hello; gives the reader and the connection.
    async fn dial(self: &Arc<Self>) -> Result<(Source, Arc<OwnerConnection>, HelloOk)> {
        let (mut source, wr) = match &self.address {
            Address::Unix(p) => {
                let (fd, wr) = socket::split_unix_shared(
                    tokio::net::UnixStream::connect(p).await.map_err(|e| Error::io(&format!("could not connect to unix:{}", p.display()), e))?,
                )
                .map_err(|e| Error::io(&format!("could not set up the socket to unix:{}", p.display()), e))?;
                (Source::Shared(fd), wr)
            }
            Address::Tcp(hp) => {
                let (rd, wr) = socket::split_tcp(tokio::net::TcpStream::connect(hp).await.map_err(|e| Error::io(&format!("could not connect to tcp:{hp}"), e))?);
                (Source::Stream(FrameReader::new(rd)), wr)
            }
            Address::Tls(hp) => {
                let tls = self.tls.as_ref().ok_or_else(|| Error::invalid(format!("tls:{hp} needs a CA file: set TINYSTORE_CA")))?;
                let (rd, wr) = crate::net::tls::dial(hp, tls).await?;
                let wr = WriteHalf::Tls(wr);
                (Source::Stream(FrameReader::new(rd)), wr)
            }
        };
        let me = Arc::downgrade(self);
        let conn = Arc::new_cyclic(|weak| {
            let shared = match &mut source {
                Source::Shared(fd) => Some(SharedRead::new(fd.clone(), me, weak.clone())),
                Source::Stream(_) => None,
            };
            OwnerConnection { sink: Sink::new(wr), pending: Mutex::new(HashMap::default()), alive: AtomicBool::new(true), publishing: AtomicU64::new(0), shared }
        });
        let mut hello = Request::new(0, "hello");
        hello.version = Some(wire::PROTOCOL_VERSION);
        hello.client = Some(format!("pid {}", std::process::id()));
        hello.session = Some(self.session.clone());
        hello.token = self.token.clone();
        conn.sink.send(&wire::frame(&hello));
        let first = async {
            match (&mut source, &conn.shared) {
                (Source::Stream(reader), _) => reader.next().await.map(|f| f.map(<[u8]>::to_vec)),
                (Source::Shared(_), Some(shared)) => {
                    let mut side = shared.take().await;
                    let f = side.frame();
                    let out = match f {
                        Some(Ok((a, n))) => Ok(Some(side.buf[a..a + n].to_vec())),
                        Some(Err(e)) => Err(e),
                        None => Ok(None),
                    };
                    shared.put_back(side);
                    out
                }
                (Source::Shared(_), None) => Ok(None),
            }
        };
        // A hello is a request: it waits no longer than one, and at most 5 s.
        let wait = self.request_timeout().min(Duration::from_secs(5));
        let answer = tokio::time::timeout(wait, first)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "the store at {} did not answer hello within {}: its owning process may be frozen or overloaded; check that it runs (`tinystore status`), or stop it so that another process can own the store",
                        self.address,
                        crate::base::limits::format_duration(wait)
                    ),
                )
            })??
            .ok_or_else(|| Error::new(ErrorKind::Io, "the store closed the connection during hello"))?;
        let r: Reply = serde_json::from_slice(&answer).map_err(|e| Error::new(ErrorKind::Protocol, format!("a bad hello answer: {e}")))?;
        if let Some(e) = r.err {
            return Err(e.into());
        }
        let ok: HelloOk = serde_json::from_str(r.ok.map(|v| v.get()).unwrap_or("null"))
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("a bad hello answer: {e}")))?;
        *self.hello.lock() = Some(ok.clone());
        Ok((source, conn, ok))
    }

    /// Serves connections until closed, reconnecting with back-off.
    async fn run(self: Arc<Self>, mut first: Option<(Source, Arc<OwnerConnection>, HelloOk)>) {
        let mut backoff = Duration::from_millis(10);
        loop {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let before = self.epoch();
            let (dialed, again) = match first.take() {
                Some(d) => (Ok(d), false),
                None => (self.dial().await, true),
            };
            match dialed {
                Ok((rd, conn, hello)) => {
                    backoff = Duration::from_millis(10);
                    if again {
                        // Another owner: the leases still within their ttl
                        // are re-presented first, before any new hold.
                        if hello.epoch != before {
                            self.represent_leases(&conn);
                        }
                        // Before anything new leaves: resubscriptions (so
                        // they see the publishes made meanwhile), then those
                        // publishes in order; only then is the connection
                        // there for new calls.
                        self.resubscribe_all(&conn);
                        let mut off = self.offline.lock();
                        self.flush_offline(&conn, &mut off);
                        *self.conn.lock() = Some(conn.clone());
                        drop(off);
                        self.after_connect();
                    } else {
                        let _off = self.offline.lock();
                        *self.conn.lock() = Some(conn.clone());
                    }
                    self.connected.notify_waiters();
                    self.read_loop(rd, &conn).await;
                    {
                        let mut off = self.offline.lock();
                        conn.alive.store(false, Ordering::Release);
                        conn.sink.close();
                        *self.conn.lock() = None;
                        off.down.get_or_insert_with(|| (Instant::now(), SystemTime::now(), "the connection was cut".into()));
                    }
                    let pending: Vec<_> = conn.pending.lock().drain().collect();
                    for (_, Awaited { answer: a, .. }) in pending {
                        let e = unanswered(&a);
                        a.give(Err(e));
                    }
                }
                Err(e) => {
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(d) = &mut self.offline.lock().down {
                        d.2 = e.message().to_owned();
                    }
                    self.try_takeover();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// STORE-01: the owner went away; this process may own the store now.
    fn try_takeover(&self) {
        let Some(take_over) = &self.takeover else { return };
        if self.owned.lock().is_some() {
            return;
        }
        if let Some(store) = take_over() {
            *self.owned.lock() = Some(store);
        }
    }

    /// Sends the publishes queued while disconnected, in order, on `conn`
    /// (not yet visible to new calls); those past their time were failed.
    /// A connection that went down again at once keeps the rest queued, in
    /// order, for the next one (STORE-02).
    fn flush_offline(&self, conn: &Arc<OwnerConnection>, off: &mut Offline) {
        off.down = None;
        while let Some(Queued { channel, branch, data, answer, until }) = off.queue.pop_front() {
            let mut r = Request::new(0, "publish");
            r.channel = Some(channel.clone());
            r.branch = Some(branch.clone());
            r.data = Some(&data);
            conn.publishing.fetch_add(1, Ordering::AcqRel);
            if let Err((e, a)) = self.try_send(conn, &mut r, Some(answer)) {
                conn.publishing.fetch_sub(1, Ordering::AcqRel);
                conn.sink.uncork();
                match a {
                    Some(answer) if is_disconnected(&e) => {
                        drop(r);
                        off.queue.push_front(Queued { channel, branch, data, answer, until });
                        break;
                    }
                    Some(a) => a.give(Err(e)),
                    None => {}
                }
            }
        }
        off.bytes = off.queue.iter().map(Queued::bytes).sum();
    }

    /// Queues a publish while disconnected; gives it back with the
    /// connection when one came meanwhile.
    fn queue_offline(&self, q: Queued) -> Result<Option<(Arc<OwnerConnection>, Queued)>> {
        let mut off = self.offline.lock();
        match self.current() {
            Ok(conn) => return Ok(Some((conn, q))),
            Err(e) if !is_disconnected(&e) => {
                q.answer.forget();
                return Err(e);
            }
            Err(_) => {}
        }
        let n = q.bytes();
        if off.bytes + n > crate::base::limits::CONNECTION_PENDING_BYTES {
            q.answer.forget();
            let why = format!("{} bytes of publishes already wait for the connection (at most 8 MiB): this one was not published", off.bytes);
            return Err(self.unavailable_now(&off, &why));
        }
        off.bytes += n;
        off.queue.push_back(q);
        Ok(None)
    }

    /// Fails the queued publishes past their time with `unavailable`.
    fn expire_offline(&self) {
        let now = Instant::now();
        let (gone, e) = {
            let mut off = self.offline.lock();
            if !off.queue.iter().any(|q| now >= q.until) {
                return;
            }
            let (gone, kept): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut off.queue).into_iter().partition(|q| now >= q.until);
            off.queue = kept;
            off.bytes = off.queue.iter().map(Queued::bytes).sum();
            (gone, self.unavailable_now(&off, "the message was not published"))
        };
        // Told outside the lock: a binding's function may publish again.
        for q in gone {
            q.answer.give(Err(e.clone()));
        }
    }

    /// `unavailable`: the store could not be reached, since when, and `what` follows.
    fn unavailable_now(&self, off: &Offline, what: &str) -> Error {
        let (since, why) = match &off.down {
            Some((at, wall, why)) => (
                format!("for {} (since {} UTC)", crate::base::limits::format_duration(at.elapsed()), utc_time(*wall)),
                why.clone(),
            ),
            None => ("now".into(), "the connection is down".into()),
        };
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "the store at {} could not be reached {since} ({why}); {what}; the client goes on reconnecting: retry later, or check that the store's owner runs",
                self.address
            ),
        )
    }

    /// `unavailable` for a call that waited for the connection past its time.
    fn unavailable(&self) -> Error {
        let off = self.offline.lock();
        self.unavailable_now(&off, "the call was not sent")
    }

    fn after_connect(self: &Arc<Self>) {
        // Renew every lease at once: a lease the store no longer has is lost.
        let leases: Vec<_> = self.leases.lock().values().cloned().collect();
        for l in leases {
            l.kick();
        }
    }

    /// Re-presents every lease still within its ttl to a new owner (STORE-01).
    fn represent_leases(&self, conn: &Arc<OwnerConnection>) {
        let leases: Vec<_> = self.leases.lock().values().cloned().collect();
        for l in leases {
            let hold = self.next_id.fetch_add(1, Ordering::Relaxed);
            let Some(mut r) = l.adopt_request(hold) else { continue };
            l.adopting.store(true, Ordering::Release);
            if let Err((_, a)) = self.try_send(conn, &mut r, Some(Answer::Adopt(l.clone(), Instant::now()))) {
                drop(a);
                l.adopting.store(false, Ordering::Release);
            }
        }
    }

    /// Resubscribes each subscription from where it was: the requests
    /// leave now, their answers are awaited by tasks.
    fn resubscribe_all(self: &Arc<Self>, conn: &Arc<OwnerConnection>) {
        let subs: Vec<_> = self.subs.lock().values().cloned().collect();
        for s in subs {
            let resume = s.resume.lock().map(|(e, log, next)| WireResume { epoch: e, log, next });
            let mut r = Request::new(0, "subscribe");
            r.sub = Some(s.id);
            r.channel = Some(s.channel.clone());
            r.branch = Some(s.branch.clone());
            r.recursive = Some(s.scope == Scope::Recursive);
            r.resume = resume;
            let Ok(Some(rx)) = self.send_on(conn, &mut r, true) else { continue };
            runtime::spawn(async move {
                match rx.await.unwrap_or_else(|_| Err(disconnected())) {
                    Ok(bytes) => {
                        if let Ok(ok) = serde_json::from_slice::<SubscribeOk>(&bytes) {
                            s.set_log(ok.epoch, ok.log, ok.next);
                        }
                    }
                    Err(e) if is_disconnected(&e) => {}
                    Err(_) => s.inbox.end(),
                }
            });
        }
    }

    async fn read_loop(self: &Arc<Self>, source: Source, conn: &Arc<OwnerConnection>) {
        match source {
            Source::Stream(mut reader) => {
                let mut run = MsgRun::default();
                loop {
                    // Before waiting for more: the messages read reach their
                    // inbox, and publishes held back for this moment leave
                    // (an answer or event was just read).
                    if !reader.has_frame() {
                        self.hand_over(&mut run);
                        conn.sink.uncork();
                    }
                    let frame = match reader.next().await {
                        Ok(Some(f)) => f,
                        _ => return,
                    };
                    if !self.dispatch(conn, frame, &mut run) {
                        return;
                    }
                }
            }
            Source::Shared(_) => {
                let shared = conn.shared.clone().expect("a shared source has its reader");
                loop {
                    conn.sink.uncork();
                    let mut side = shared.take().await;
                    let ended = self.dispatch_all(conn, &mut side);
                    shared.put_back(side);
                    if ended {
                        return;
                    }
                }
            }
        }
    }

    /// Dispatches the whole frames read so far; true when the connection
    /// ended or sent something that is not a frame of ours.
    fn dispatch_all(&self, conn: &Arc<OwnerConnection>, side: &mut ReaderState) -> bool {
        let mut run = MsgRun::default();
        while let Some(f) = side.frame() {
            match f {
                Ok((a, n)) => {
                    if !self.dispatch(conn, &side.buf[a..a + n], &mut run) {
                        side.ended = true;
                    }
                }
                Err(_) => side.ended = true,
            }
            if side.ended {
                break;
            }
        }
        self.hand_over(&mut run);
        side.compact();
        side.ended
    }

    /// Adds messages `seq`, `seq + 1`, … of subscription `sub` to `run`
    /// (handed over first when it holds another subscription's); false
    /// when `branch` is not an array of keys.
    fn run_on<'d>(&self, run: &mut MsgRun, sub: u64, branch: &[u8], seq: u64, next: u64, data: impl Iterator<Item = &'d [u8]>) -> bool {
        if run.sub.as_ref().is_none_or(|s| s.id != sub) {
            self.hand_over(run);
            let Some(s) = self.subs.lock().get(&sub).cloned() else { return true };
            run.sub = Some(s);
        }
        let s = run.sub.as_ref().expect("set above");
        let Some(branch) = s.branch_of(branch) else { return false };
        for (i, d) in data.enumerate() {
            run.events.push(Event::Message(Arc::new(Msg { branch: branch.clone(), seq: seq + i as u64, data: d.into() })));
        }
        run.next = next;
        true
    }

    /// Gives a run of messages read for one subscription to its inbox.
    fn hand_over(&self, run: &mut MsgRun) {
        if let Some(sub) = run.sub.take() {
            sub.note_position(self.epoch(), Some(run.next));
            sub.inbox.push_all(&mut run.events);
        }
    }

    /// Gives the answer to request `id` to its caller.
    fn answered(&self, conn: &Arc<OwnerConnection>, id: u64, queued: bool, v: std::result::Result<&[u8], Error>) {
        let a = conn.pending.lock().remove(&id);
        if let Some(Awaited { answer: a, spin, .. }) = a {
            if a.is_publish() {
                conn.publishing.fetch_sub(1, Ordering::AcqRel);
            }
            if let Some(shared) = conn.shared.as_ref().filter(|_| spin) {
                shared.expect.answered(queued);
            }
            a.give(v);
        }
    }

    /// Gives an answer to its caller or an event to its subscription or
    /// lease; false for a frame that is not a reply. Messages in our
    /// owner's shape join `run`, handed to their inbox together (one lock
    /// and one wake-up a run) before any other frame is acted on, so an
    /// answer read after them (a closing client's ping) finds them there.
    fn dispatch(&self, conn: &Arc<OwnerConnection>, frame: &[u8], run: &mut MsgRun) -> bool {
        match wire::fast_reply(frame) {
            Some(FastReply::Msg { sub, branch, seq, next, data }) => return self.run_on(run, sub, branch, seq, next, std::iter::once(data)),
            Some(FastReply::Msgs { sub, branch, seq, next, data }) => return self.run_on(run, sub, branch, seq, next, data.into_iter()),
            Some(FastReply::NullAnswer(id)) => {
                self.hand_over(run);
                self.answered(conn, id, false, Ok(b"null"));
                return true;
            }
            None => self.hand_over(run),
        }
        let Ok(r) = serde_json::from_slice::<Reply>(frame) else { return false };
        if let Some(id) = r.id {
            let v = match r.err {
                Some(e) => Err(e.into()),
                None => Ok(r.ok.map(|v| v.get().as_bytes()).unwrap_or(b"null")),
            };
            self.answered(conn, id, r.queued, v);
            return true;
        }
        match r.ev.as_deref() {
            Some("msg") => {
                let Some(sub) = r.sub.and_then(|id| self.subs.lock().get(&id).cloned()) else { return true };
                let msg = Msg {
                    branch: Arc::from(r.branch.unwrap_or_default()),
                    seq: r.seq.unwrap_or(0),
                    data: r.data.map(|d| d.get().as_bytes()).unwrap_or(b"null").to_vec().into_boxed_slice(),
                };
                sub.note_position(self.epoch(), r.next);
                sub.inbox.push(Event::Message(Arc::new(msg)));
            }
            Some("msgs") => {
                let Some(sub) = r.sub.and_then(|id| self.subs.lock().get(&id).cloned()) else { return true };
                let Some(data) = r.data.and_then(|d| serde_json::from_str::<Vec<&serde_json::value::RawValue>>(d.get()).ok()) else { return false };
                let branch: Arc<[Key]> = Arc::from(r.branch.unwrap_or_default());
                let seq = r.seq.unwrap_or(0);
                let mut events: Vec<Event> =
                    data.iter().enumerate().map(|(i, d)| Event::Message(Arc::new(Msg { branch: branch.clone(), seq: seq + i as u64, data: d.get().as_bytes().into() }))).collect();
                sub.note_position(self.epoch(), r.next);
                sub.inbox.push_all(&mut events);
            }
            Some("missed") => {
                let Some(sub) = r.sub.and_then(|id| self.subs.lock().get(&id).cloned()) else { return true };
                sub.note_position(self.epoch(), r.next);
                if let Some(m) = r.missed {
                    sub.inbox.push(Event::Missed(m));
                }
            }
            Some("end") => {
                if let Some(sub) = r.sub.and_then(|id| self.subs.lock().get(&id).cloned()) {
                    sub.inbox.end();
                }
            }
            Some("lost") => {
                if let Some(l) = r.lease.and_then(|id| self.leases.lock().get(&id).cloned()) {
                    l.mark_lost(match r.message {
                        Some(m) => lease::LostWhy::Told(m),
                        None => lease::LostWhy::Cause("the store says so".into()),
                    });
                }
            }
            _ => {}
        }
        true
    }

    /// Ok once connected, waiting for a reconnect up to the request
    /// timeout: `unavailable` past it, `closed` once closed.
    pub(crate) fn wait_connected(&self) -> Result<()> {
        runtime::block_on(self.connection(Instant::now() + self.request_timeout())).map(drop)
    }

    fn current(&self) -> Result<Arc<OwnerConnection>> {
        if self.closed.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire) {
            return Err(Error::closed());
        }
        self.conn.lock().clone().filter(|c| c.alive.load(Ordering::Acquire)).ok_or_else(disconnected)
    }

    /// Sends a request and waits for its answer's `ok` JSON. Made while
    /// reconnecting, it first waits for the connection, up to the request
    /// timeout, then fails with `unavailable`.
    pub(crate) async fn call(&self, r: Request<'_>) -> Result<Box<[u8]>> {
        let conn = self.connection(Instant::now() + self.request_timeout()).await?;
        self.call_on(&conn, r).await
    }

    /// The connection, waited for up to `until` while reconnecting; past
    /// it, `unavailable`.
    async fn connection(&self, until: Instant) -> Result<Arc<OwnerConnection>> {
        match self.current() {
            Err(e) if is_disconnected(&e) => {
                self.reconnected(until).await;
                self.current().map_err(|e| if is_disconnected(&e) { self.unavailable() } else { e })
            }
            r => r,
        }
    }

    async fn call_on(&self, conn: &Arc<OwnerConnection>, mut r: Request<'_>) -> Result<Box<[u8]>> {
        let rx = self.send_on(conn, &mut r, true)?.expect("an answer is awaited");
        Self::answer(conn, rx).await
    }

    /// Waits for an answer, reading the socket meanwhile where this thread
    /// is the one that may.
    async fn answer(conn: &Arc<OwnerConnection>, mut rx: AnswerRx) -> Result<Box<[u8]>> {
        std::future::poll_fn(|cx| {
            let p = std::pin::Pin::new(&mut rx).poll(cx);
            if p.is_pending() {
                runtime::read_while_blocked(|| conn.blocked_reader());
            }
            p
        })
        .await
        .unwrap_or_else(|_| Err(disconnected()))
    }

    /// Sends without waiting; gives the receiver of the answer when `answer`.
    fn send_on(&self, conn: &Arc<OwnerConnection>, r: &mut Request<'_>, answer: bool) -> Result<Option<AnswerRx>> {
        if !answer {
            return self.send_with(conn, r, None).map(|_| None);
        }
        let (tx, rx) = oneshot::channel();
        self.send_with(conn, r, Some(Answer::Call(tx)))?;
        Ok(Some(rx))
    }

    /// Sends; `answer` is given the store's answer when it comes.
    fn send_with(&self, conn: &Arc<OwnerConnection>, r: &mut Request<'_>, answer: Option<Answer>) -> Result<()> {
        self.try_send(conn, r, answer).map_err(|(e, a)| {
            if let Some(a) = a {
                a.forget();
            }
            e
        })
    }

    /// [`send_with`](Client::send_with), giving back the answer unsent.
    fn try_send(&self, conn: &Arc<OwnerConnection>, r: &mut Request<'_>, answer: Option<Answer>) -> std::result::Result<(), (Error, Option<Answer>)> {
        r.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = wire::frame(&r);
        self.try_send_frame(conn, r.id, &frame, r.wait_ms.unwrap_or(0), answer, Place::Alone)
    }

    /// Sends request `id`'s `frame` (its `wait_ms` counts towards when an
    /// unanswered request fails); [`try_send`](Client::try_send) for a
    /// frame already written.
    fn try_send_frame(
        &self,
        conn: &Arc<OwnerConnection>,
        id: u64,
        frame: &[u8],
        wait_ms: u64,
        answer: Option<Answer>,
        place: Place,
    ) -> std::result::Result<(), (Error, Option<Answer>)> {
        // A forked child shares the parent's socket: a frame written from it
        // (a lazily declared lock's acquire, a dropped lease's release) would
        // act on the parent's session, e.g. release the parent's lease.
        if let Err(e) = runtime::check_not_forked() {
            return Err((e, answer));
        }
        if frame.len() - 4 > wire::MAX_FRAME_BYTES {
            return Err((
                Error::limit(format!(
                    "this request is {} bytes on the wire, over the limit of {}: a message is at most 1 MiB, and its branch keys must fit in the 64 KiB beside it; shorten the keys or the message",
                    frame.len() - 4,
                    wire::MAX_FRAME_BYTES
                )),
                answer,
            ));
        }
        // A publish behind others in flight is not a call the spin weighs:
        // their answers come in batches, and it saves two clock reads.
        let spin = answer.as_ref().is_some_and(Answer::awaited) && matches!(place, Place::Alone | Place::UntilFlushed { alone: true });
        if let Some(shared) = conn.shared.as_ref().filter(|_| spin) {
            shared.expect.expect();
        }
        // Entered under the sink's lock: a connection that ends closes its
        // sink before it fails its pending answers, so it never fails one
        // whose frame did not leave; that one comes back here, to be sent
        // again (STORE-02).
        let limit = answer.as_ref().filter(|a| !matches!(a, Answer::Renewal(..))).map(|_| {
            // A renewal needs none: its lease's deadline stands for it.
            coarse_ms() + self.request_timeout().as_millis() as u64 + wait_ms
        });
        let mut answer = answer;
        let mut unsent = None;
        let hold = match place {
            Place::HeldBack => Hold::UntilAnswer(&conn.publishing),
            Place::UntilFlushed { .. } => Hold::UntilFlushed,
            Place::Alone | Place::Behind => Hold::No,
        };
        let sent = conn.sink.send_entered(
            frame,
            hold,
            || {
                if let Some(a) = answer.take() {
                    conn.pending.lock().insert(id, Awaited { answer: a, fails_at: limit, spin });
                }
            },
            || unsent = conn.pending.lock().remove(&id).map(|w| w.answer),
        );
        if !sent {
            // Closed by the program, not lost to a reconnect.
            return Err((if self.closed.load(Ordering::Acquire) { Error::closed() } else { disconnected() }, unsent.or(answer)));
        }
        Ok(())
    }

    /// Waits until connected again, up to `until`.
    async fn reconnected(&self, until: Instant) -> bool {
        loop {
            let n = self.connected.notified();
            if self.current().is_ok() {
                return true;
            }
            if self.closed.load(Ordering::Acquire) || tokio::time::timeout_at(until.into(), n).await.is_err() {
                return self.current().is_ok();
            }
        }
    }

    /// Sends a lease's release now, its answer awaited ([`Self::released`]).
    pub(super) fn send_release(&self, lease: u64, fence: Option<Fence>) -> Result<AnswerRx> {
        let conn = self.current()?;
        let mut r = Request::new(0, "release");
        r.lease = Some(lease);
        r.fence = fence;
        Ok(self.send_on(&conn, &mut r, true)?.expect("an answer is awaited"))
    }

    /// Waits for a release's answer: the owner let the key go (LOCK-01).
    /// Cut off before its answer (or sent while reconnecting), it is sent
    /// again on the next connection with the same lease id and fence, up to
    /// the request timeout; a retry told the lease is not held means the
    /// first one took effect.
    pub(super) async fn released(self: Arc<Self>, first: Result<AnswerRx>, lease: u64, fence: Option<Fence>, key: Key, deadline: Instant) -> Result<()> {
        let since = Instant::now();
        let until = since + self.request_timeout();
        let mut next = first;
        let mut retried = false;
        loop {
            let answer = match next {
                Ok(mut rx) => {
                    let conn = self.conn.lock().clone();
                    std::future::poll_fn(|cx| {
                        let p = std::pin::Pin::new(&mut rx).poll(cx);
                        if p.is_pending() {
                            runtime::read_while_blocked(|| conn.as_ref().and_then(|c| c.blocked_reader()));
                        }
                        p
                    })
                    .await
                    .unwrap_or_else(|_| Err(disconnected()))
                }
                Err(e) => Err(e),
            };
            match answer {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Lost && retried => return Ok(()),
                Err(e) if is_disconnected(&e) => {
                    if !self.reconnected(until).await {
                        let left = deadline.saturating_duration_since(Instant::now());
                        return Err(Error::new(
                            ErrorKind::Closed,
                            format!(
                                "could not reach the store to let key {key} go (lease {lease}) for {}: the store lets it go by itself when the lease's ttl runs out, in about {}; check the store is running",
                                crate::base::limits::format_duration(since.elapsed()),
                                crate::base::limits::format_duration(left)
                            ),
                        ));
                    }
                    retried = true;
                    next = self.send_release(lease, fence);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends a publish now; the receiver gets the store's answer.
    pub(crate) fn publish_send(&self, channel: &str, branch: &[Key], data: &[u8]) -> Result<SentPublish> {
        let (tx, rx) = oneshot::channel();
        let conn = self.send_publish(channel, branch, data, Answer::Publish(tx))?;
        Ok((rx, conn.and_then(|c| c.blocked_reader())))
    }

    /// Sends a publish now; `done` is called with the store's answer where
    /// it is read. On an error here `done` is dropped uncalled.
    pub(crate) fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], done: Box<dyn FnOnce(Result<()>) + Send>) -> Result<()> {
        self.send_publish(channel, branch, data, Answer::PublishThen(PublishOutcome(Some(done)))).map(drop)
    }

    /// Sends a publish now, or, while reconnecting, queues it to leave first
    /// on the next connection (`None`): see [`Offline`].
    fn send_publish(&self, channel: &str, branch: &[Key], data: &[u8], answer: Answer) -> Result<Option<Arc<OwnerConnection>>> {
        let raw = match raw_json(data) {
            Ok(r) => r,
            Err(e) => {
                answer.forget();
                return Err(e);
            }
        };
        let mut answer = Some(answer);
        loop {
            let conn = match self.current() {
                Ok(conn) => conn,
                Err(e) if is_disconnected(&e) => {
                    let q = Queued {
                        channel: channel.to_owned(),
                        branch: branch.to_vec(),
                        data: raw.to_owned(),
                        answer: answer.take().expect("an answer until sent"),
                        until: Instant::now() + self.request_timeout(),
                    };
                    match self.queue_offline(q)? {
                        None => return Ok(None),
                        Some((conn, q)) => {
                            answer = Some(q.answer);
                            conn
                        }
                    }
                }
                Err(e) => {
                    if let Some(a) = answer.take() {
                        a.forget();
                    }
                    return Err(e);
                }
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            // Written into this thread's buffer, kept between publishes.
            let mut frame = FRAME_BUFFER.take();
            PUBLISH_TARGET.with_borrow_mut(|target| wire::publish_frame_into(&mut frame, id, channel, branch, raw, target));
            let place = publish_place(&conn);
            let sent = self.try_send_frame(&conn, id, &frame, 0, answer.take(), place);
            keep_frame_buffer(frame);
            match sent {
                Ok(()) => return Ok(Some(conn)),
                Err((e, a)) => {
                    conn.publishing.fetch_sub(1, Ordering::AcqRel);
                    // Frames held back counting on this one's answer leave.
                    conn.sink.uncork();
                    match a {
                        // The connection went down just now: queue it.
                        Some(a) if is_disconnected(&e) => answer = Some(a),
                        a => {
                            if let Some(a) = a {
                                a.forget();
                            }
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    /// Sends a burst to one branch as one `publish` with `messages`
    /// (values checked as JSON, at most [`wire::MAX_BURST_MESSAGES`] and
    /// 1 MiB together), placed as a publish is. `None` when the connection
    /// is down now: nothing left, and the caller publishes the burst one
    /// message at a time, which waits for the reconnect in order (STORE-02).
    pub(crate) fn publish_burst_send(
        &self,
        channel: &str,
        branch: &[Key],
        burst: &[&serde_json::value::RawValue],
    ) -> Result<Option<SentPublish>> {
        let conn = match self.current() {
            Ok(conn) => conn,
            Err(e) if is_disconnected(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = FRAME_BUFFER.take();
        PUBLISH_TARGET.with_borrow_mut(|target| wire::publish_burst_frame_into(&mut frame, id, channel, branch, burst, target));
        let place = publish_place(&conn);
        let sent = self.try_send_frame(&conn, id, &frame, 0, Some(Answer::Publish(tx)), place);
        keep_frame_buffer(frame);
        match sent {
            Ok(()) => Ok(Some((rx, conn.blocked_reader()))),
            Err((e, a)) => {
                conn.publishing.fetch_sub(1, Ordering::AcqRel);
                conn.sink.uncork();
                if let Some(a) = a {
                    a.forget();
                }
                if is_disconnected(&e) { Ok(None) } else { Err(e) }
            }
        }
    }

    /// Takes a ticket for a transaction's messages to `channels`, before
    /// its commit (CHAN-03): answered once the owner placed it in line.
    pub(crate) async fn take_ticket(&self, channels: &[Arc<str>]) -> Result<u64> {
        let mut r = Request::new(0, "ticket");
        r.channels = Some(channels.iter().map(|c| c.to_string()).collect());
        let ok = self.call(r).await?;
        let t: wire::TicketOk = serde_json::from_slice(&ok).map_err(|e| Error::new(ErrorKind::Protocol, format!("a bad ticket answer: {e}")))?;
        Ok(t.ticket)
    }

    /// Sends a transaction's messages under its ticket, then ends it
    /// (`None`: gives it up), pipelined on the connection the ticket was
    /// taken on; returns once every answer came.
    pub(crate) async fn end_ticket(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        let conn = self.current()?;
        let deliver = msgs.is_some();
        let mut answers = Vec::new();
        for m in msgs.into_iter().flatten() {
            let raw = raw_json(&m.data)?;
            let mut r = Request::new(0, "publish");
            r.channel = Some(m.channel.to_string());
            r.branch = Some(m.branch);
            r.data = Some(raw);
            r.ticket = Some(ticket);
            answers.push(self.send_on(&conn, &mut r, true)?.expect("an answer is awaited"));
        }
        let mut r = Request::new(0, "ticket_end");
        r.ticket = Some(ticket);
        r.deliver = Some(deliver);
        answers.push(self.send_on(&conn, &mut r, true)?.expect("an answer is awaited"));
        let mut first = None;
        for rx in answers {
            if let Err(e) = Self::answer(&conn, rx).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    pub(crate) async fn subscribe(self: &Arc<Self>, channel: &str, branch: &[Key], scope: Scope) -> Result<Arc<RemoteSub>> {
        // Registered once connected: a reconnect meanwhile would subscribe it twice.
        let conn = self.connection(Instant::now() + self.request_timeout()).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(RemoteSub {
            id,
            client: Arc::downgrade(self),
            channel: channel.to_owned(),
            branch: branch.to_vec(),
            scope,
            inbox: Inbox::default(),
            resume: Mutex::new(None),
            last_branch: Mutex::new(None),
        });
        self.subs.lock().insert(id, s.clone());
        let mut r = Request::new(0, "subscribe");
        r.sub = Some(id);
        r.channel = Some(channel.to_owned());
        r.branch = Some(branch.to_vec());
        r.recursive = Some(scope == Scope::Recursive);
        match self.call_on(&conn, r).await {
            Ok(bytes) => {
                if let Ok(ok) = serde_json::from_slice::<SubscribeOk>(&bytes) {
                    s.set_log(ok.epoch, ok.log, ok.next);
                }
                Ok(s)
            }
            Err(e) => {
                self.subs.lock().remove(&id);
                Err(e)
            }
        }
    }

    fn unsubscribe(&self, id: u64) {
        self.subs.lock().remove(&id);
        if let Ok(conn) = self.current() {
            let mut r = Request::new(0, "unsubscribe");
            r.sub = Some(id);
            let _ = self.send_on(&conn, &mut r, false);
        }
    }

    /// Takes a key over the wire: waits up to `wait` (zero: tries once). A
    /// hold that a dropped connection interrupts is retried with the same
    /// hold id, so it never yields two leases (LOCK-08).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        lock: &str,
        kind: Kind,
        key: &Key,
        holder: Holder,
        terms: Terms,
        wait: Option<Duration>,
    ) -> Result<Option<RemoteLeaseHandle>> {
        let ttl = terms.ttl.unwrap_or(crate::base::limits::DEFAULT_TTL);
        let hold = self.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        // The connection is waited for as long as the wait, at least the request timeout.
        let until = started + wait.unwrap_or(Duration::ZERO).max(self.request_timeout());
        let wait_ms = wait.map_or(0, |w| w.as_millis().max(1) as u64);
        let mut resent = false;
        loop {
            let mut r = Request::new(0, "acquire");
            r.lock = Some(lock.to_owned());
            r.limit = Some(kind.wire_limit());
            r.key = Some(key.clone());
            r.hold = Some(hold);
            r.holder = Some(holder.0);
            r.ttl_ms = Some(ttl.as_millis() as u64);
            r.max_hold_ms = terms.max_hold.map(|m| m.as_millis() as u64);
            r.wait_ms = Some(wait_ms.saturating_sub(started.elapsed().as_millis() as u64).max(if wait_ms > 0 { 1 } else { 0 }));
            let sent = Instant::now();
            let _waiting = (wait_ms > 0).then(|| Waiting::new(&self.waiting));
            // Dropped before the answer (a cancelled task): tell the store to
            // take this hold out of line, or let go of what it granted.
            let mut cancel = CancelHold { client: self, hold, armed: true };
            let answer = match self.connection(until).await {
                Ok(conn) => self.call_on(&conn, r).await,
                Err(e) => Err(e),
            };
            // Unanswered in time: the store may grant it later; let it go then.
            cancel.armed = matches!(&answer, Err(e) if e.kind() == ErrorKind::Timeout);
            match answer {
                Ok(bytes) => {
                    let ok: AcquireOk = serde_json::from_slice(&bytes).map_err(|e| Error::new(ErrorKind::Protocol, e.to_string()))?;
                    let Some(id) = ok.lease else { return Ok(None) };
                    // The lease's clock started at the grant: no earlier than
                    // the request was sent plus the time it waited there.
                    let granted = sent + Duration::from_millis(ok.waited_ms);
                    let lease = RemoteLease::new(self, id, ok.fence, key.clone(), (lock.to_owned(), kind.wire_limit(), holder.0), ttl, granted, terms.max_hold);
                    self.leases.lock().insert(id, lease.clone());
                    lease.start();
                    let handle = RemoteLeaseHandle { lease };
                    if let Some(w) = wait.filter(|w| !w.is_zero() && started.elapsed() > *w) {
                        // The owner granted it in time by its own clock, but
                        // the request reached it late (it was frozen): this
                        // hold's wait is over, so the key goes to the next.
                        let _ = handle.release().await;
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "key {key} of {lock:?} was granted only after the wait of {} had passed (the store was slow to answer): it was let go and nothing ran; retry",
                                crate::base::limits::format_duration(w)
                            ),
                        ));
                    }
                    return Ok(Some(handle));
                }
                Err(e) if is_disconnected(&e) => resent = true,
                // Sent again with what was left of the wait: the user gave the whole.
                Err(e) if resent && e.message().contains(STAYED_HELD) && let Some(w) = wait => {
                    return Err(waited_too_long(lock, key, w));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes sure the store has the lock of this kind: `conflict` for a
    /// semaphore opened with another limit (LOCK-08), checked at the handle.
    /// Made while the client reconnects, it waits for the connection (up to
    /// the request timeout) as a hold would, rather than failing a handle's
    /// first hold at once.
    pub(crate) async fn declare_async(&self, lock: &str, kind: Kind) -> Result<()> {
        let until = Instant::now() + self.request_timeout();
        loop {
            let mut r = Request::new(0, "declare");
            r.lock = Some(lock.to_owned());
            r.limit = Some(kind.wire_limit());
            let answer = match self.connection(until).await {
                Ok(conn) => self.call_on(&conn, r).await,
                Err(e) => Err(e),
            };
            match answer {
                Err(e) if is_disconnected(&e) => continue,
                r => return r.map(|_| ()),
            }
        }
    }

    pub(crate) fn status(&self) -> Result<serde_json::Value> {
        let bytes = runtime::block_on(self.call(Request::new(0, "status")))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::new(ErrorKind::Protocol, e.to_string()))
    }

    pub(crate) fn shutdown_owner(&self) -> Result<()> {
        runtime::block_on(self.call(Request::new(0, "shutdown"))).map(|_| ())
    }

    /// Waits (up to `limit`) until every publish sent has its answer, with
    /// the socket read by the engine meanwhile: publishes a program made
    /// just before closing settle as what they are (delivered), not as
    /// `closed`. And closing drains: a `ping` sent last is answered only
    /// after the owner forwarded to this connection's subscriptions what
    /// its branches held when the ping came, so once its answer is read
    /// every message the store took before the close is in their inboxes.
    pub(crate) async fn settle_publishes(&self, limit: Duration) {
        let Ok(conn) = self.current() else { return };
        let end = tokio::time::Instant::now() + limit;
        // Sent before `closing` is set, which refuses new calls.
        let drained = if self.subs.lock().is_empty() { None } else { self.send_on(&conn, &mut Request::new(0, "ping"), true).ok().flatten() };
        // No new call starts from here (they fail with `closed`).
        self.closing.store(true, Ordering::Release);
        if let Some(shared) = &conn.shared {
            shared.give_back();
        }
        conn.sink.uncork();
        if let Some(rx) = drained {
            // Its answer comes after those of the publishes sent before it.
            let _ = tokio::time::timeout_at(end, rx).await;
        }
        while conn.publishing.load(Ordering::Acquire) > 0 && conn.alive.load(Ordering::Acquire) && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let conn = self.conn.lock().take();
        if let Some(c) = conn {
            c.alive.store(false, Ordering::Release);
            c.sink.close();
            let pending: Vec<_> = c.pending.lock().drain().collect();
            for (_, Awaited { answer: a, .. }) in pending {
                let e = cut_off(&a, ErrorKind::Closed, "the store was closed before the owner answered this call", "open it again to go on");
                a.give(Err(e));
            }
        }
        let queued = std::mem::take(&mut self.offline.lock().queue);
        for q in queued {
            q.answer.give(Err(Error::new(ErrorKind::Closed, "the store was closed while this publish waited for the connection: it was not published; open the store again to go on")));
        }
        self.connected.notify_waiters();
        for s in std::mem::take(&mut *self.subs.lock()).into_values() {
            s.inbox.end();
        }
        // Taken out first: mark_lost removes the lease from `leases` itself.
        let leases = std::mem::take(&mut *self.leases.lock());
        for l in leases.into_values() {
            l.mark_lost(lease::LostWhy::Cause("this store handle was closed".into()));
        }
        if let Some(s) = self.owned.lock().take() {
            s.close();
        }
    }
}

struct CancelHold<'a> {
    client: &'a Client,
    hold: u64,
    armed: bool,
}

impl Drop for CancelHold<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Ok(conn) = self.client.current()
        {
            let mut r = Request::new(0, "cancel");
            r.hold = Some(self.hold);
            let _ = self.client.send_on(&conn, &mut r, false);
        }
    }
}

/// Counts a hold waiting in line while it lives.
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicU64) -> Waiting<'a> {
        n.fetch_add(1, Ordering::AcqRel);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Pings while any hold waits in line, so the store keeps this client's
/// waiters (a frozen process stops pinging and leaves the line, LOCK-03). Every
/// 250 ms: within a third of the shortest ttl (1 s). Also fails requests
/// left unanswered too long.
async fn pinger(c: std::sync::Weak<Client>) {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(c) = c.upgrade() else { return };
        if c.closed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(conn) = c.current()
            && let Some(shared) = &conn.shared
        {
            shared.check_loop();
        }
        c.expire_requests();
        c.expire_offline();
        if c.waiting.load(Ordering::Acquire) > 0
            && let Ok(conn) = c.current()
        {
            let _ = c.send_on(&conn, &mut Request::new(0, "ping"), false);
        }
    }
}

/// Where a publish about to leave on `conn` goes, counted in flight
/// ([`OwnerConnection::publishing`]) from here.
fn publish_place(conn: &OwnerConnection) -> Place {
    let before = conn.publishing.fetch_add(1, Ordering::AcqRel);
    let release = conn.release();
    match before {
        _ if release == Release::LoopFlush || (release == Release::Answer && runtime::hold_until_blocked(&conn.sink)) => Place::UntilFlushed { alone: before == 0 },
        0 => Place::Alone,
        n if n >= COALESCE_AFTER && release == Release::Answer => Place::HeldBack,
        _ => Place::Behind,
    }
}

/// `data` checked as one JSON value (without the whitespace around it),
/// borrowed: no copy.
pub(crate) fn raw_json(data: &[u8]) -> Result<&serde_json::value::RawValue> {
    let s = std::str::from_utf8(data).map_err(|_| Error::invalid("a message is JSON text (UTF-8)"))?;
    serde_json::from_str::<&serde_json::value::RawValue>(s).map_err(|e| Error::invalid(format!("a message is one JSON value: {e}")))
}

/// Not sent: the connection is down (callers wait for it, see [`Client::connection`]).
fn disconnected() -> Error {
    Error::new(ErrorKind::Unavailable, "disconnected from the store: the client is reconnecting")
}

/// For a request sent and not answered when the connection dropped.
fn unanswered(a: &Answer) -> Error {
    cut_off(a, ErrorKind::Unavailable, "disconnected from the store before it answered", "the client is reconnecting")
}

/// `why` the answer to `a` will not come, and what `then`.
fn cut_off(a: &Answer, kind: ErrorKind, why: &str, then: &str) -> Error {
    let what = if a.is_publish() { " (the publish may have been delivered: a retry may deliver it twice)" } else { "" };
    Error::new(kind, format!("{why}: it may have taken effect{what}; {then}"))
}

/// Not sent, or sent and cut off: a call that may be sent again.
fn is_disconnected(e: &Error) -> bool {
    e.kind() == ErrorKind::Unavailable && e.message().starts_with("disconnected")
}

/// A wall-clock time as `HH:MM:SS.mmm` (UTC), for saying since when.
fn utc_time(t: SystemTime) -> String {
    let ms = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}.{:03}", (s / 3600) % 24, (s / 60) % 60, s % 60, ms % 1000)
}

