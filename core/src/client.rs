//! The client: a store owned by another process, reached over a socket.
//!
//! One connection per client, pipelined: requests carry ids, answers come
//! back in any order, events are pushed. The client reconnects by itself
//! with back-off, resubscribes from the last position it saw (CHAN-04),
//! renews leases every third of their ttl from the engine's own threads, and
//! tells a holder its lease is lost by its own deadline: the last renewal
//! sent plus the ttl, on a monotonic clock (LOCK-05, L4, L13). A client made
//! by `open(dir)` takes the store over when its owner goes away (STORE-01).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use crate::channels::{Event, Missed, MissedReason, Msg, Scope};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::Fence;
use crate::key::Key;
use crate::limits::{BRANCH_LOG_BYTES, BRANCH_LOG_MESSAGES};
use crate::locks::{Holder, Kind, Terms};
use crate::runtime;
use crate::wire::{self, AcquireOk, Address, FrameReader, HelloOk, Reply, Request, Sink, SubscribeOk, WireResume};

type Reader = FrameReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>;
/// Answers awaited, with the instant each request fails unanswered.
type Pending = HashMap<u64, (Answer, Option<Instant>)>;

/// Where an answer arrives: the `ok` JSON, or the store's error.
pub(crate) type AnswerRx = oneshot::Receiver<Result<Box<[u8]>>>;

/// Who is waiting for the answer to a request.
enum Answer {
    Call(oneshot::Sender<Result<Box<[u8]>>>),
    /// A publish's answer: counted down from [`Conn::publishing`].
    Publish(oneshot::Sender<Result<Box<[u8]>>>),
    /// A publish's answer handed to a function where it is read
    /// ([`Client::publish_then`]): no channel, no task to wake.
    PublishThen(Then),
    /// A renewal sent at this instant: handled where it is read, no task.
    Renewal(std::sync::Weak<RemoteLease>, Instant),
}

impl Answer {
    /// A caller waits for it (not a renewal): the connection spins for it
    /// ([`crate::spin::Expect`]).
    fn awaited(&self) -> bool {
        !matches!(self, Answer::Renewal(..))
    }

    fn is_publish(&self) -> bool {
        matches!(self, Answer::Publish(_) | Answer::PublishThen(_))
    }

    fn give(self, v: Result<Box<[u8]>>) {
        match self {
            Answer::Call(tx) | Answer::Publish(tx) => {
                let _ = tx.send(v);
            }
            Answer::PublishThen(mut then) => {
                if let Some(f) = then.0.take() {
                    f(v.map(drop));
                }
            }
            Answer::Renewal(l, sent) => {
                if let Some(l) = l.upgrade() {
                    l.renewed(sent, v);
                }
            }
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
pub(crate) struct Then(Option<Box<dyn FnOnce(Result<()>) + Send>>);

impl Drop for Then {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(publish_cut_off()));
        }
    }
}

/// A publish whose answer will not come.
pub(crate) fn publish_cut_off() -> Error {
    Error::new(ErrorKind::Closed, "disconnected from the store before it answered: the message may or may not have been published")
}

struct Conn {
    sink: Arc<Sink>,
    pending: Mutex<Pending>,
    alive: AtomicBool,
    /// Publishes sent and not yet answered.
    publishing: AtomicU64,
    /// A Unix connection's read side, which blocked threads may read too.
    shared: Option<Arc<SharedRead>>,
}

impl Conn {
    /// True while a language's event loop reads this connection.
    fn looped(&self) -> bool {
        self.shared.as_ref().is_some_and(|s| s.slot.lock().looped)
    }

    /// What a thread blocked on this connection may read meanwhile.
    fn lead(&self) -> Option<Arc<dyn runtime::Lead>> {
        self.shared.clone().map(|s| s as Arc<dyn runtime::Lead>)
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

/// The read side of a Unix connection, for whoever waits on it.
///
/// The connection's task reads it when the reactor says data came. A
/// thread blocked in [`runtime::block_on`] on an answer takes it over for a
/// moment instead: it takes the socket out of the reactor (so no runtime
/// thread is woken for nothing), waits in poll(2) itself, and dispatches
/// what it reads, its own answer among it, then hands the socket back to
/// the reactor with the task's waker armed. One wake-up per answer, by the
/// kernel, to the thread that wants it.
pub(crate) struct SharedRead {
    fd: Arc<std::os::unix::net::UnixStream>,
    /// Polled, not slept on, until a window after the last call.
    expect: crate::spin::Expect,
    slot: Mutex<Slot>,
    client: std::sync::Weak<Client>,
    conn: std::sync::Weak<Conn>,
}

struct Slot {
    /// `None` while someone reads.
    side: Option<Side>,
    /// The connection task's waker, for the hand-back.
    task: Option<Waker>,
    /// A language's event loop reads the socket ([`LoopReader`]): the
    /// task and blocked threads leave it alone.
    looped: bool,
    /// When that loop last read it.
    serviced: Instant,
}

struct Side {
    /// Registered with the reactor, for reading; `None` while a blocked
    /// thread reads.
    afd: Option<tokio::io::unix::AsyncFd<Arc<std::os::unix::net::UnixStream>>>,
    buf: Vec<u8>,
    start: usize,
    ended: bool,
}

impl Side {
    /// The next whole frame's place in `buf`, or an oversized frame.
    fn frame(&mut self) -> Option<Result<(usize, usize)>> {
        let n = match wire::whole_frame(&self.buf[self.start..])? {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let at = self.start + 4;
        self.start += 4 + n;
        Some(Ok((at, n)))
    }

    fn has_frame(&self) -> bool {
        wire::whole_frame(&self.buf[self.start..]).is_some()
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Reads what the socket has into `buf` without blocking: how many bytes,
/// and whether the read was short (less than the room there was: the
/// socket has nothing more for now).
fn fill(fd: &std::os::unix::net::UnixStream, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    use std::os::fd::AsRawFd;
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    let spare = buf.spare_capacity_mut();
    let room = spare.len();
    // SAFETY: read(2) writes at most `spare.len()` bytes and says how many;
    // only those become part of `buf`.
    let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok((n as usize, (n as usize) < room))
}

impl SharedRead {
    fn new(fd: Arc<std::os::unix::net::UnixStream>, client: std::sync::Weak<Client>, conn: std::sync::Weak<Conn>) -> Arc<SharedRead> {
        let (afd, ended) = match wire::register_readable(&fd) {
            Ok(a) => (Some(a), false),
            Err(_) => (None, true),
        };
        let side = Side { afd, buf: Vec::with_capacity(64 * 1024), start: 0, ended };
        Arc::new(SharedRead { fd, expect: Default::default(), slot: Mutex::new(Slot { side: Some(side), task: None, looped: false, serviced: Instant::now() }), client, conn })
    }

    /// For the connection's task: the read side once it has whole frames
    /// or ended. Give it back with [`SharedRead::put_back`].
    async fn take(&self) -> Side {
        std::future::poll_fn(|cx| {
            let mut side = {
                let mut slot = self.slot.lock();
                if !slot.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    slot.task = Some(cx.waker().clone());
                }
                // A blocked thread or an event loop reads it now: it hands
                // back and wakes us.
                if slot.looped {
                    return Poll::Pending;
                }
                let Some(side) = slot.side.take() else { return Poll::Pending };
                side
            };
            loop {
                if side.ended || side.has_frame() {
                    return Poll::Ready(side);
                }
                let Side { afd, buf, ended, .. } = &mut side;
                let Some(afd) = afd.as_ref() else {
                    *ended = true;
                    continue;
                };
                match afd.poll_read_ready(cx) {
                    // An answer is expected soon: look again instead.
                    Poll::Pending if self.expect.spinning() => match fill(&self.fd, buf) {
                        Ok((0, _)) => *ended = true,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {
                            self.put_back(side);
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        Err(_) => *ended = true,
                    },
                    Poll::Pending => {
                        self.put_back(side);
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(_)) => *ended = true,
                    Poll::Ready(Ok(mut guard)) => match guard.try_io(|inner| fill(inner.get_ref(), buf)) {
                        Ok(Ok((0, _))) => *ended = true,
                        // Drained: the next look waits for the reactor's
                        // next event instead of a read that finds nothing.
                        Ok(Ok((_, true))) => guard.clear_ready(),
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Ok(Err(_)) => *ended = true,
                        Err(_would_block) => {}
                    },
                }
            }
        })
        .await
    }

    fn put_back(&self, side: Side) {
        self.slot.lock().side = Some(side);
    }
}

impl runtime::Lead for SharedRead {
    fn lead(&self, done: &dyn Fn() -> bool, window: Duration) {
        use std::os::fd::AsRawFd;
        let (Some(client), Some(conn)) = (self.client.upgrade(), self.conn.upgrade()) else { return };
        let Some(mut side) = ({
            let mut slot = self.slot.lock();
            if slot.looped { None } else { slot.side.take() }
        }) else {
            return;
        };
        if !side.ended {
            // Out of the reactor: only this thread hears the socket now.
            side.afd = None;
            let end = Instant::now() + window;
            loop {
                if client.dispatch_all(&conn, &mut side) || done() {
                    break;
                }
                conn.sink.uncork();
                match fill(&self.fd, &mut side.buf) {
                    Ok((0, _)) => side.ended = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.expect.spinning() => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        let left = end.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                        // SAFETY: one valid pollfd for the duration of the call.
                        unsafe { libc::poll(&mut p, 1, ms) };
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => side.ended = true,
                }
            }
            match wire::register_readable(&self.fd) {
                Ok(a) => side.afd = Some(a),
                Err(_) => side.ended = true,
            }
        }
        // Home again, with the task's waker armed on the new registration;
        // the task is woken only if there is something for it.
        let mut slot = self.slot.lock();
        let task = slot.task.clone();
        let ready = side.ended
            || side.has_frame()
            || match (&side.afd, &task) {
                (Some(a), Some(w)) => a.poll_read_ready(&mut Context::from_waker(w)).is_ready(),
                _ => true,
            };
        slot.side = Some(side);
        drop(slot);
        if ready && let Some(w) = task {
            w.wake();
        }
    }
}

/// How long an event loop may leave its connection unread, with data
/// waiting, before the engine reads it again (a loop blocked by its
/// program), checked every 250 ms: answers and renewals wait on a busy
/// loop for 350 ms at most.
const LOOP_STALL: Duration = Duration::from_millis(100);

impl SharedRead {
    /// Back to the reactor and the connection's task.
    fn unloop(&self, slot: &mut Slot) -> Option<Waker> {
        slot.looped = false;
        if let Some(side) = slot.side.as_mut()
            && !side.ended
        {
            match wire::register_readable(&self.fd) {
                Ok(a) => side.afd = Some(a),
                Err(_) => side.ended = true,
            }
        }
        slot.task.clone()
    }

    /// Gives a loop's socket back to the engine's task, if a loop reads it.
    fn give_back(&self) {
        let mut slot = self.slot.lock();
        if !slot.looped {
            return;
        }
        let task = self.unloop(&mut slot);
        drop(slot);
        if let Some(w) = task {
            w.wake();
        }
    }

    /// Called by the pinger: a loop that has not read for [`LOOP_STALL`]
    /// while data waits gives the socket back to the engine.
    fn check_loop(&self) {
        use std::os::fd::AsRawFd;
        let mut slot = self.slot.lock();
        if !slot.looped || slot.side.is_none() || slot.serviced.elapsed() < LOOP_STALL {
            return;
        }
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a zero timeout never blocks.
        if unsafe { libc::poll(&mut p, 1, 0) } == 0 {
            return;
        }
        let task = self.unloop(&mut slot);
        drop(slot);
        if let Some(w) = task {
            w.wake();
        }
    }
}

/// A connection's Unix socket, read by a language's own event loop (Node's
/// libuv, Python's asyncio) instead of an engine thread: an answer then
/// wakes only the thread that waits for it. Made by
/// [`Store::loop_reader`](crate::Store::loop_reader).
///
/// The loop watches [`fd`](Self::fd) for reading after [`start`](Self::start)
/// and calls [`readable`](Self::readable) when it is; once that returns
/// false, it stops watching and asks the store for a new reader later. A
/// loop that leaves the socket unread for 100 ms while data waits (its
/// program is busy) loses it to the engine within 350 ms (the check runs
/// every 250 ms), so answers, renewals and messages never wait on it longer.
pub struct LoopReader {
    shared: Arc<SharedRead>,
}

impl LoopReader {
    pub(crate) fn of(client: &Client) -> Option<LoopReader> {
        let conn = client.current().ok()?;
        Some(LoopReader { shared: conn.shared.clone()? })
    }

    /// The socket's file descriptor, valid while this reader lives.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.shared.fd.as_raw_fd()
    }

    /// Takes the socket from the engine's reactor; false when it cannot now
    /// (another thread reads it this moment, or the connection ended).
    pub fn start(&self) -> bool {
        let mut slot = self.shared.slot.lock();
        let Some(side) = slot.side.as_mut() else { return false };
        if side.ended {
            return false;
        }
        side.afd = None;
        slot.looped = true;
        slot.serviced = Instant::now();
        drop(slot);
        // Publishes held back for the engine's reader leave now.
        if let Some(conn) = self.shared.conn.upgrade() {
            conn.sink.uncork();
        }
        true
    }

    /// Reads what the socket has and gives it out, from this thread; the
    /// calls this answers that were started with [`runtime::LoopTask`] are
    /// completed here too. False once this reader is done: the connection
    /// ended (the engine reconnects) or the engine took the socket back.
    pub fn readable(&self) -> bool {
        let (Some(client), Some(conn)) = (self.shared.client.upgrade(), self.shared.conn.upgrade()) else { return false };
        let mut side = {
            let mut slot = self.shared.slot.lock();
            if !slot.looped {
                return false;
            }
            match slot.side.take() {
                Some(s) => s,
                None => return true,
            }
        };
        runtime::on_loop(|| {
            loop {
                if client.dispatch_all(&conn, &mut side) {
                    break;
                }
                match fill(&self.shared.fd, &mut side.buf) {
                    Ok((0, _)) => side.ended = true,
                    Ok((_, true)) => {
                        // Drained: the loop's poll says when more comes
                        // (level-triggered), no read that finds nothing.
                        if !side.ended {
                            client.dispatch_all(&conn, &mut side);
                        }
                        break;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => side.ended = true,
                }
            }
            conn.sink.uncork();
        });
        let mut slot = self.shared.slot.lock();
        slot.serviced = Instant::now();
        let ended = side.ended;
        slot.side = Some(side);
        let task = if ended {
            slot.looped = false;
            slot.task.clone()
        } else if !slot.looped {
            // The engine took it back meanwhile: it reads from now on.
            self.shared.unloop(&mut slot)
        } else {
            None
        };
        let keep = slot.looped;
        drop(slot);
        if let Some(w) = task {
            w.wake();
        }
        keep
    }

    /// Gives the socket back to the engine (the loop stops watching it).
    pub fn stop(&self) {
        self.shared.give_back();
    }

    /// Whether the loop should look at the socket again instead of
    /// sleeping: true until a short window after the last call that awaits
    /// an answer ([`crate::spin`]). A loop keeps itself awake meanwhile
    /// (Node: an idle handle; Python: a callback scheduled soon).
    pub fn spinning(&self) -> bool {
        self.shared.expect.spinning()
    }

    /// True while this reader's connection is the store's current one and
    /// the loop reads it.
    pub fn is_active(&self) -> bool {
        self.shared.slot.lock().looped
    }
}

/// With this many publishes unanswered, the next ones wait in the sink to
/// leave together when the reader next reads an answer (an answer is sure
/// to come): one write for many pipelined publishes, while a lone publish
/// still leaves at once.
const COALESCE_AFTER: u64 = 4;

/// The connection to an owner, and everything that must survive a reconnect.
pub(crate) struct Client {
    address: Address,
    token: Option<String>,
    /// For `tls:` addresses: who is trusted to vouch for the owner.
    tls: Option<crate::tls::ClientTls>,
    session: String,
    /// Set for `open(dir)`: take the store over when its owner goes away.
    takeover: Option<PathBuf>,
    conn: Mutex<Option<Arc<Conn>>>,
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
    /// [`crate::limits::REQUEST_TIMEOUT`] unless set, in milliseconds.
    request_timeout_ms: AtomicU64,
    /// The store this process came to own by taking over, if it did.
    pub(crate) owned: Mutex<Option<crate::store::Store>>,
}

impl Client {
    /// Connects (retrying for up to `patience`) and starts the connection's tasks.
    pub(crate) fn connect(
        address: Address,
        token: Option<String>,
        tls: Option<crate::tls::ClientTls>,
        takeover: Option<PathBuf>,
        patience: Duration,
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
            subs: Mutex::new(HashMap::new()),
            leases: Mutex::new(HashMap::new()),
            hello: Mutex::new(None),
            closed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            waiting: AtomicU64::new(0),
            request_timeout_ms: AtomicU64::new(crate::limits::REQUEST_TIMEOUT.as_millis() as u64),
            owned: Mutex::new(None),
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
        Duration::from_millis(self.request_timeout_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn set_request_timeout(&self, t: Duration) {
        self.request_timeout_ms.store(t.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// Fails the requests left unanswered past their time.
    fn expire_requests(&self) {
        let Ok(conn) = self.current() else { return };
        let now = Instant::now();
        let expired: Vec<Answer> = {
            let mut p = conn.pending.lock();
            let ids: Vec<u64> = p.iter().filter(|(_, (_, l))| l.is_some_and(|l| now >= l)).map(|(id, _)| *id).collect();
            ids.into_iter().filter_map(|id| p.remove(&id)).map(|(a, _)| a).collect()
        };
        for a in expired {
            if a.is_publish() {
                conn.publishing.fetch_sub(1, Ordering::AcqRel);
            }
            a.give(Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the store did not answer within {} (its owning process may be frozen or overloaded); the request may still take effect when it answers: a publish may yet be delivered, a hold is let go",
                    crate::limits::format_duration(self.request_timeout())
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
    async fn dial(self: &Arc<Self>) -> Result<(Source, Arc<Conn>, HelloOk)> {
        let (mut source, wr) = match &self.address {
            Address::Unix(p) => {
                let (fd, wr) = wire::split_unix_shared(
                    tokio::net::UnixStream::connect(p).await.map_err(|e| Error::io(&format!("could not connect to unix:{}", p.display()), e))?,
                )
                .map_err(|e| Error::io(&format!("could not set up the socket to unix:{}", p.display()), e))?;
                (Source::Shared(fd), wr)
            }
            Address::Tcp(hp) => {
                let (rd, wr) = wire::split_tcp(tokio::net::TcpStream::connect(hp).await.map_err(|e| Error::io(&format!("could not connect to tcp:{hp}"), e))?);
                (Source::Stream(FrameReader::new(rd)), wr)
            }
            Address::Tls(hp) => {
                let tls = self.tls.as_ref().ok_or_else(|| Error::invalid(format!("tls:{hp} needs a CA file: set TINYSTORE_CA")))?;
                let (rd, wr) = crate::tls::dial(hp, tls).await?;
                (Source::Stream(FrameReader::new(rd)), wr)
            }
        };
        let me = Arc::downgrade(self);
        let conn = Arc::new_cyclic(|weak| {
            let shared = match &mut source {
                Source::Shared(fd) => Some(SharedRead::new(fd.clone(), me, weak.clone())),
                Source::Stream(_) => None,
            };
            Conn { sink: Sink::new(wr), pending: Mutex::new(HashMap::new()), alive: AtomicBool::new(true), publishing: AtomicU64::new(0), shared }
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
        let answer = tokio::time::timeout(Duration::from_secs(5), first)
            .await
            .map_err(|_| Error::new(ErrorKind::Io, "the store did not answer hello within 5s"))??
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
    async fn run(self: Arc<Self>, mut first: Option<(Source, Arc<Conn>, HelloOk)>) {
        let mut backoff = Duration::from_millis(10);
        loop {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let (dialed, again) = match first.take() {
                Some(d) => (Ok(d), false),
                None => (self.dial().await, true),
            };
            match dialed {
                Ok((rd, conn, hello)) => {
                    backoff = Duration::from_millis(10);
                    *self.conn.lock() = Some(conn.clone());
                    self.connected.notify_waiters();
                    if again {
                        self.after_connect(&conn, &hello);
                    }
                    self.read_loop(rd, &conn).await;
                    conn.alive.store(false, Ordering::Release);
                    conn.sink.close();
                    *self.conn.lock() = None;
                    let pending: Vec<_> = conn.pending.lock().drain().collect();
                    for (_, (a, _)) in pending {
                        let e = unanswered(&a);
                        a.give(Err(e));
                    }
                }
                Err(_) => {
                    if self.closed.load(Ordering::Acquire) {
                        return;
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
        let Some(dir) = &self.takeover else { return };
        if self.owned.lock().is_some() {
            return;
        }
        if let Ok(store) = crate::store::Store::open_owner(dir) {
            *self.owned.lock() = Some(store);
        }
    }

    fn after_connect(self: &Arc<Self>, conn: &Arc<Conn>, hello: &HelloOk) {
        // Resubscribe from where each subscription was.
        let subs: Vec<_> = self.subs.lock().values().cloned().collect();
        for s in subs {
            let me = self.clone();
            let conn = conn.clone();
            let epoch = hello.epoch;
            runtime::spawn(async move { me.resubscribe(&conn, &s, epoch).await });
        }
        // Renew every lease at once: a lease the store no longer has is lost.
        let leases: Vec<_> = self.leases.lock().values().cloned().collect();
        for l in leases {
            l.kick();
        }
    }

    async fn resubscribe(&self, conn: &Arc<Conn>, s: &Arc<RemoteSub>, epoch: u64) {
        let resume = s.resume.lock().map(|(e, log, next)| WireResume { epoch: e, log, next });
        let mut r = Request::new(0, "subscribe");
        r.sub = Some(s.id);
        r.channel = Some(s.channel.clone());
        r.branch = Some(s.branch.clone());
        r.recursive = Some(s.scope == Scope::Recursive);
        r.resume = resume;
        let _ = epoch;
        match self.call_on(conn, r).await {
            Ok(bytes) => {
                if let Ok(ok) = serde_json::from_slice::<SubscribeOk>(&bytes) {
                    s.set_log(ok.epoch, ok.log, ok.next);
                }
            }
            Err(e) if is_disconnected(&e) => {}
            Err(_) => s.inbox.end(),
        }
    }

    async fn read_loop(self: &Arc<Self>, source: Source, conn: &Arc<Conn>) {
        match source {
            Source::Stream(mut reader) => loop {
                // Before waiting for more: publishes held back for this
                // moment leave now (an answer or event was just read).
                if !reader.has_frame() {
                    conn.sink.uncork();
                }
                let frame = match reader.next().await {
                    Ok(Some(f)) => f,
                    _ => return,
                };
                if !self.dispatch(conn, frame) {
                    return;
                }
            },
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
    fn dispatch_all(&self, conn: &Arc<Conn>, side: &mut Side) -> bool {
        while let Some(f) = side.frame() {
            match f {
                Ok((a, n)) => {
                    if !self.dispatch(conn, &side.buf[a..a + n]) {
                        side.ended = true;
                    }
                }
                Err(_) => side.ended = true,
            }
            if side.ended {
                break;
            }
        }
        side.compact();
        side.ended
    }

    /// Gives an answer to its caller or an event to its subscription or
    /// lease; false for a frame that is not a reply.
    fn dispatch(&self, conn: &Arc<Conn>, frame: &[u8]) -> bool {
        let Ok(r) = serde_json::from_slice::<Reply>(frame) else { return false };
        if let Some(id) = r.id {
            let a = conn.pending.lock().remove(&id);
            if let Some((a, _)) = a {
                if a.is_publish() {
                    conn.publishing.fetch_sub(1, Ordering::AcqRel);
                }
                if let Some(shared) = conn.shared.as_ref().filter(|_| a.awaited()) {
                    shared.expect.answered(r.queued);
                }
                let v = match r.err {
                    Some(e) => Err(e.into()),
                    None => Ok(r.ok.map(|v| v.get().as_bytes()).unwrap_or(b"null").to_vec().into_boxed_slice()),
                };
                a.give(v);
            }
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
                    l.mark_lost(r.message.unwrap_or_else(|| "the store says the lease was lost".into()));
                }
            }
            _ => {}
        }
        true
    }

    /// Ok while connected now; else `closed` saying why.
    pub(crate) fn check_connected(&self) -> Result<()> {
        self.current().map(drop)
    }

    fn current(&self) -> Result<Arc<Conn>> {
        if self.closed.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire) {
            return Err(Error::closed());
        }
        self.conn.lock().clone().filter(|c| c.alive.load(Ordering::Acquire)).ok_or_else(disconnected)
    }

    /// Sends a request and waits for its answer's `ok` JSON.
    pub(crate) async fn call(&self, r: Request<'_>) -> Result<Box<[u8]>> {
        let conn = self.current()?;
        self.call_on(&conn, r).await
    }

    async fn call_on(&self, conn: &Arc<Conn>, mut r: Request<'_>) -> Result<Box<[u8]>> {
        let mut rx = self.send_on(conn, &mut r, true)?.expect("an answer is awaited");
        std::future::poll_fn(|cx| {
            let p = std::pin::Pin::new(&mut rx).poll(cx);
            if p.is_pending() {
                runtime::want_lead(|| conn.lead());
            }
            p
        })
        .await
        .unwrap_or_else(|_| Err(disconnected()))
    }

    /// Sends without waiting; gives the receiver of the answer when `answer`.
    fn send_on(&self, conn: &Arc<Conn>, r: &mut Request<'_>, answer: bool) -> Result<Option<AnswerRx>> {
        if !answer {
            return self.send_with(conn, r, None, false).map(|_| None);
        }
        let (tx, rx) = oneshot::channel();
        self.send_with(conn, r, Some(Answer::Call(tx)), false)?;
        Ok(Some(rx))
    }

    /// Sends; `answer` is given the store's answer when it comes.
    /// `later`: queued behind, written at the reader's next answer.
    fn send_with(&self, conn: &Arc<Conn>, r: &mut Request<'_>, answer: Option<Answer>, later: bool) -> Result<()> {
        r.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = wire::frame(&r);
        if frame.len() - 4 > wire::MAX_FRAME_BYTES {
            if let Some(a) = answer {
                a.forget();
            }
            return Err(Error::limit(format!(
                "this request is {} bytes on the wire, over the limit of {}: a message is at most 1 MiB, and its branch keys must fit in the 64 KiB beside it; shorten the keys or the message",
                frame.len() - 4,
                wire::MAX_FRAME_BYTES
            )));
        }
        let awaited = answer.is_some();
        if let Some(shared) = conn.shared.as_ref().filter(|_| answer.as_ref().is_some_and(Answer::awaited)) {
            shared.expect.expect();
        }
        if let Some(a) = answer {
            // A renewal needs none: its lease's deadline stands for it.
            let limit = (!matches!(a, Answer::Renewal(..)))
                .then(|| Instant::now() + self.request_timeout() + Duration::from_millis(r.wait_ms.unwrap_or(0)));
            conn.pending.lock().insert(r.id, (a, limit));
        }
        let sent = if later { conn.sink.send_later(&frame, &conn.publishing) } else { conn.sink.send(&frame) };
        if !sent {
            if awaited {
                let unsent = conn.pending.lock().remove(&r.id);
                if let Some((a, _)) = unsent {
                    a.forget();
                }
            }
            // Closed by the program, not lost to a reconnect.
            return Err(if self.closed.load(Ordering::Acquire) { Error::closed() } else { disconnected() });
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

    /// Sends a publish now; the receiver gets the store's answer.
    pub(crate) fn publish_send(&self, channel: &str, branch: &[Key], data: &[u8]) -> Result<(AnswerRx, Option<Arc<dyn runtime::Lead>>)> {
        let (tx, rx) = oneshot::channel();
        let conn = self.send_publish(channel, branch, data, || Answer::Publish(tx))?;
        Ok((rx, conn.lead()))
    }

    /// Sends a publish now; `done` is called with the store's answer where
    /// it is read. On an error here `done` is dropped uncalled.
    pub(crate) fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], done: Box<dyn FnOnce(Result<()>) + Send>) -> Result<()> {
        self.send_publish(channel, branch, data, || Answer::PublishThen(Then(Some(done)))).map(drop)
    }

    fn send_publish(&self, channel: &str, branch: &[Key], data: &[u8], answer: impl FnOnce() -> Answer) -> Result<Arc<Conn>> {
        let raw = raw_json(data)?;
        let mut r = Request::new(0, "publish");
        r.channel = Some(channel.to_owned());
        r.branch = Some(branch.to_vec());
        r.data = Some(&raw);
        let conn = self.current()?;
        // Held back only where an engine thread reads the answers that let
        // it go: a language's busy event loop would hold it for as long.
        let later = conn.publishing.fetch_add(1, Ordering::AcqRel) >= COALESCE_AFTER && !conn.looped();
        if let Err(e) = self.send_with(&conn, &mut r, Some(answer()), later) {
            conn.publishing.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        Ok(conn)
    }

    pub(crate) async fn subscribe(self: &Arc<Self>, channel: &str, branch: &[Key], scope: Scope) -> Result<Arc<RemoteSub>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(RemoteSub {
            id,
            client: Arc::downgrade(self),
            channel: channel.to_owned(),
            branch: branch.to_vec(),
            scope,
            inbox: Inbox::default(),
            resume: Mutex::new(None),
        });
        self.subs.lock().insert(id, s.clone());
        let mut r = Request::new(0, "subscribe");
        r.sub = Some(id);
        r.channel = Some(channel.to_owned());
        r.branch = Some(branch.to_vec());
        r.recursive = Some(scope == Scope::Recursive);
        match self.call(r).await {
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
        let ttl = terms.ttl.unwrap_or(crate::limits::DEFAULT_TTL);
        let hold = self.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let until = started + wait.unwrap_or(Duration::ZERO) + Duration::from_secs(5);
        let wait_ms = wait.map_or(0, |w| w.as_millis().max(1) as u64);
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
            let answer = self.call(r).await;
            // Unanswered in time: the store may grant it later; let it go then.
            cancel.armed = matches!(&answer, Err(e) if e.kind() == ErrorKind::Timeout);
            match answer {
                Ok(bytes) => {
                    let ok: AcquireOk = serde_json::from_slice(&bytes).map_err(|e| Error::new(ErrorKind::Protocol, e.to_string()))?;
                    let Some(id) = ok.lease else { return Ok(None) };
                    // The lease's clock started at the grant: no earlier than
                    // the request was sent plus the time it waited there.
                    let granted = sent + Duration::from_millis(ok.waited_ms);
                    let lease = RemoteLease::new(self, id, ok.fence, key.clone(), ttl, granted, terms.max_hold);
                    self.leases.lock().insert(id, lease.clone());
                    lease.start();
                    let handle = RemoteLeaseHandle { lease };
                    if let Some(w) = wait.filter(|w| !w.is_zero() && started.elapsed() > *w) {
                        // The owner granted it in time by its own clock, but
                        // the request reached it late (it was frozen): this
                        // hold's wait is over, so the key goes to the next.
                        let _ = handle.release();
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "key {key} of {lock:?} was granted only after the wait of {} had passed (the store was slow to answer): it was let go and nothing ran; retry",
                                crate::limits::format_duration(w)
                            ),
                        ));
                    }
                    return Ok(Some(handle));
                }
                Err(e) if is_disconnected(&e) && self.reconnected(until).await => continue,
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
            match self.call(r).await {
                Err(e) if is_disconnected(&e) && self.reconnected(until).await => continue,
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
    /// `closed`.
    pub(crate) async fn settle_publishes(&self, limit: Duration) {
        let Ok(conn) = self.current() else { return };
        // No new call starts from here (they fail with `closed`).
        self.closing.store(true, Ordering::Release);
        if let Some(shared) = &conn.shared {
            shared.give_back();
        }
        conn.sink.uncork();
        let end = tokio::time::Instant::now() + limit;
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
            for (_, (a, _)) in pending {
                let e = cut_off(&a, "the store was closed before the owner answered this call", "open it again to go on");
                a.give(Err(e));
            }
        }
        self.connected.notify_waiters();
        for s in std::mem::take(&mut *self.subs.lock()).into_values() {
            s.inbox.end();
        }
        // Taken out first: mark_lost removes the lease from `leases` itself.
        let leases = std::mem::take(&mut *self.leases.lock());
        for l in leases.into_values() {
            l.mark_lost("the store closed".into());
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
/// waiters (a frozen process stops pinging and leaves the line, L1). Every
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
        if c.waiting.load(Ordering::Acquire) > 0
            && let Ok(conn) = c.current()
        {
            let _ = c.send_on(&conn, &mut Request::new(0, "ping"), false);
        }
    }
}

fn raw_json(data: &[u8]) -> Result<Box<serde_json::value::RawValue>> {
    let s = std::str::from_utf8(data).map_err(|_| Error::invalid("a message is JSON text (UTF-8)"))?;
    serde_json::value::RawValue::from_string(s.to_owned()).map_err(|e| Error::invalid(format!("a message is one JSON value: {e}")))
}

fn disconnected() -> Error {
    Error::new(ErrorKind::Closed, "disconnected from the store: the client is reconnecting; retry")
}

/// For a request sent and not answered when the connection dropped.
fn unanswered(a: &Answer) -> Error {
    cut_off(a, "disconnected from the store before it answered", "the client is reconnecting")
}

/// `why` the answer to `a` will not come, and what `then`.
fn cut_off(a: &Answer, why: &str, then: &str) -> Error {
    let what = if a.is_publish() { " (the publish may have been delivered)" } else { "" };
    Error::new(ErrorKind::Closed, format!("{why}: it may have taken effect{what}; {then}"))
}

fn is_disconnected(e: &Error) -> bool {
    e.kind() == ErrorKind::Closed && e.message().starts_with("disconnected")
}

/// A subscription over the wire: events land in a bounded inbox read by pulling.
pub(crate) struct RemoteSub {
    id: u64,
    client: std::sync::Weak<Client>,
    channel: String,
    branch: Vec<Key>,
    scope: Scope,
    inbox: Inbox,
    /// (epoch, log, next) of the last event read from the socket.
    resume: Mutex<Option<(u64, u64, u64)>>,
}

impl RemoteSub {
    fn note_position(&self, epoch: u64, next: Option<u64>) {
        if let Some(n) = next {
            let mut r = self.resume.lock();
            let log = r.map_or(0, |x| x.1);
            *r = Some((epoch, log, n));
        }
    }

    pub(crate) fn set_log(&self, epoch: u64, log: u64, next: u64) {
        *self.resume.lock() = Some((epoch, log, next));
    }

    pub(crate) fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let waiting = cx.is_some();
        let p = self.inbox.read(cx);
        if waiting && p.is_pending() {
            runtime::want_lead(|| self.client.upgrade()?.current().ok()?.lead());
        }
        p
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.inbox.is_ended()
    }

    pub(crate) fn stop(&self) {
        if self.inbox.stop()
            && let Some(c) = self.client.upgrade()
        {
            c.unsubscribe(self.id);
        }
    }
}

/// The client's side of a subscription's log: bounded like a branch's log
/// (1,024 messages or 4 MiB); what it drops is counted, never lost silently.
#[derive(Default)]
struct Inbox {
    s: Mutex<InboxState>,
}

#[derive(Default)]
struct InboxState {
    queue: VecDeque<Event>,
    bytes: usize,
    messages: usize,
    waker: Option<Waker>,
    ended: bool,
    stopped: bool,
}

impl Inbox {
    fn push(&self, ev: Event) {
        let waker = {
            let mut s = self.s.lock();
            if s.stopped {
                return;
            }
            if let Event::Message(m) = &ev {
                s.bytes += m.data.len();
                s.messages += 1;
            }
            s.queue.push_back(ev);
            let mut dropped: Option<Missed> = None;
            while s.messages > BRANCH_LOG_MESSAGES || (s.bytes > BRANCH_LOG_BYTES && s.messages > 1) {
                match s.queue.pop_front() {
                    Some(Event::Message(m)) => {
                        s.bytes -= m.data.len();
                        s.messages -= 1;
                        dropped = Some(merge(dropped, Missed { count: Some(1), reason: MissedReason::Behind }));
                    }
                    Some(Event::Missed(m)) => dropped = Some(merge(dropped, m)),
                    None => break,
                }
            }
            if let Some(m) = dropped {
                // Anything missed just after the dropped ones belongs to the same gap.
                let m = match s.queue.front() {
                    Some(Event::Missed(n)) => {
                        let n = *n;
                        s.queue.pop_front();
                        merge(Some(m), n)
                    }
                    _ => m,
                };
                s.queue.push_front(Event::Missed(m));
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let mut s = self.s.lock();
        if s.stopped {
            return Poll::Ready(None);
        }
        if let Some(ev) = s.queue.pop_front() {
            if let Event::Message(m) = &ev {
                s.bytes -= m.data.len();
                s.messages -= 1;
            }
            return Poll::Ready(Some(ev));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        if let Some(cx) = cx {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn is_ended(&self) -> bool {
        let s = self.s.lock();
        s.stopped || (s.ended && s.queue.is_empty())
    }

    fn end(&self) {
        let w = {
            let mut s = self.s.lock();
            s.ended = true;
            s.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// True the first time.
    fn stop(&self) -> bool {
        let (first, w) = {
            let mut s = self.s.lock();
            let first = !s.stopped;
            s.stopped = true;
            s.queue.clear();
            (first, s.waker.take())
        };
        if let Some(w) = w {
            w.wake();
        }
        first
    }
}

fn merge(a: Option<Missed>, b: Missed) -> Missed {
    match a {
        None => b,
        Some(a) => Missed {
            count: a.count.zip(b.count).map(|(x, y)| x + y),
            reason: if a.reason == MissedReason::Reconnect || b.reason == MissedReason::Reconnect {
                MissedReason::Reconnect
            } else {
                MissedReason::Behind
            },
        },
    }
}

/// A lease held over the wire, renewed every third of its ttl by the engine.
pub(crate) struct RemoteLease {
    client: std::sync::Weak<Client>,
    id: u64,
    fence: Option<Fence>,
    key: Key,
    ttl: Duration,
    /// Lost by this instant unless a renewal moves it: the last renewal
    /// sent (acknowledged) plus the ttl, capped by maxHold.
    deadline: Mutex<Instant>,
    max_deadline: Option<Instant>,
    lost: AtomicBool,
    released: AtomicBool,
    why: Mutex<Option<String>>,
    notify: Notify,
    on_lost: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    sched: Mutex<Sched>,
}

/// When the lease's next renewal goes out, and the timer armed for it.
struct Sched {
    next_send: Instant,
    timer: Option<runtime::TimerKey>,
}

impl runtime::Due for RemoteLease {
    fn due(self: Arc<Self>, now: Instant) {
        let mut s = self.sched.lock();
        s.timer = None;
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return;
        }
        let deadline = *self.deadline.lock();
        if now >= deadline {
            drop(s);
            self.mark_lost(self.why_past_deadline(now, "the connection was cut or the store stalled"));
            return;
        }
        if now >= s.next_send {
            s.next_send = now + self.ttl / 3;
            if let Some(c) = self.client.upgrade()
                && let Ok(conn) = c.current()
            {
                let mut r = Request::new(0, "renew");
                r.lease = Some(self.id);
                r.fence = self.fence;
                let _ = c.send_with(&conn, &mut r, Some(Answer::Renewal(Arc::downgrade(&self), now)), false);
            }
        }
        self.arm(&mut s);
    }
}

impl RemoteLease {
    fn new(client: &Arc<Client>, id: u64, fence: Option<Fence>, key: Key, ttl: Duration, granted: Instant, max_hold: Option<Duration>) -> Arc<RemoteLease> {
        let max_deadline = max_hold.map(|m| granted + m - safety(m));
        let first = granted + ttl - safety(ttl);
        Arc::new(RemoteLease {
            client: Arc::downgrade(client),
            id,
            fence,
            key,
            ttl,
            deadline: Mutex::new(max_deadline.map_or(first, |m| m.min(first))),
            max_deadline,
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            why: Mutex::new(None),
            notify: Notify::new(),
            on_lost: Mutex::new(Vec::new()),
            sched: Mutex::new(Sched { next_send: granted, timer: None }),
        })
    }

    /// Renews every third of the ttl; marks the lease lost at its deadline.
    /// Renewals go out on schedule whether or not the last one was answered,
    /// so one lost renewal costs a third of the ttl, never the lease (L11).
    fn start(self: &Arc<Self>) {
        let first = Instant::now() + self.ttl / 3;
        let mut s = self.sched.lock();
        s.next_send = first;
        self.arm(&mut s);
    }

    /// Schedules the next look: the next renewal or the deadline.
    fn arm(self: &Arc<Self>, s: &mut Sched) {
        if let Some(k) = s.timer.take() {
            runtime::cancel(k);
        }
        if self.lost.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return;
        }
        let at = s.next_send.min(*self.deadline.lock());
        s.timer = Some(runtime::schedule(at, Arc::downgrade(self) as std::sync::Weak<dyn runtime::Due>));
    }

    /// Renews at once (after a reconnect, or when asked).
    fn kick(self: &Arc<Self>) {
        let mut s = self.sched.lock();
        s.next_send = Instant::now();
        self.arm(&mut s);
    }

    /// The store's answer to a renewal sent at `sent`.
    fn renewed(&self, sent: Instant, v: Result<Box<[u8]>>) {
        match v {
            Ok(_) => {
                let mut d = self.deadline.lock();
                let next = sent + self.ttl - safety(self.ttl);
                *d = self.max_deadline.map_or(next, |m| m.min(next)).max(*d);
            }
            Err(e) if e.kind() == ErrorKind::Lost => self.mark_lost(e.message().to_owned()),
            Err(_) => {}
        }
    }

    /// Why a lease past its deadline is lost: its maxHold when that was
    /// reached (also when the holder only looks late, its loop blocked),
    /// else its ttl, for the `likely` cause given.
    fn why_past_deadline(&self, now: Instant, likely: &str) -> String {
        if self.max_deadline.is_some_and(|m| now >= m) {
            "it reached its maxHold".into()
        } else {
            format!("no renewal reached the store within its ttl ({likely})")
        }
    }

    fn mark_lost(&self, why: String) {
        if self.released.load(Ordering::Acquire) || self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.why.lock() = Some(why);
        if let Some(t) = self.sched.lock().timer.take() {
            runtime::cancel(t);
        }
        let fns = std::mem::take(&mut *self.on_lost.lock());
        for f in fns {
            f();
        }
        self.notify.notify_waiters();
        if let Some(c) = self.client.upgrade() {
            c.leases.lock().remove(&self.id);
        }
    }

    pub(crate) fn lost_error(&self) -> Error {
        let what = match self.fence {
            Some(f) => format!("the lease on key {} (fence {f})", self.key),
            None => format!("the permit on key {}", self.key),
        };
        let why = self.why.lock().clone().unwrap_or_else(|| "it ran out".into());
        Error::lost(format!(
            "{what} was lost: {why}; another holder may have the key now: check fences where you write, and keep work within the lease"
        ))
    }
}

/// How much earlier than the store a holder counts its lease lost, so that
/// timer granularity and scheduling never let it run past the moment the
/// store could give the key to another (L13): a fiftieth of the span plus 5 ms.
fn safety(span: Duration) -> Duration {
    span / 50 + Duration::from_millis(5)
}

/// The engine's handle on a lease held over the wire.
pub(crate) struct RemoteLeaseHandle {
    lease: Arc<RemoteLease>,
}

impl RemoteLeaseHandle {
    pub(crate) fn id(&self) -> u64 {
        self.lease.id
    }
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.lease.fence
    }
    pub(crate) fn key(&self) -> &Key {
        &self.lease.key
    }
    /// Lost once told so, or once its deadline passed: a process that was
    /// frozen past it knows at once on waking, before its timer runs (LOCK-04).
    pub(crate) fn is_lost(&self) -> bool {
        let l = &self.lease;
        if l.lost.load(Ordering::Acquire) {
            return true;
        }
        if !l.released.load(Ordering::Acquire) && Instant::now() >= *l.deadline.lock() {
            l.mark_lost(l.why_past_deadline(Instant::now(), "this process was frozen, or the connection was cut or stalled"));
            return true;
        }
        false
    }
    pub(crate) async fn lost(&self) {
        loop {
            let n = self.lease.notify.notified();
            if self.is_lost() {
                return;
            }
            n.await;
        }
    }
    pub(crate) fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        let mut fns = self.lease.on_lost.lock();
        if self.is_lost() {
            drop(fns);
            f();
        } else {
            fns.push(f);
        }
    }
    pub(crate) fn renew(&self) -> Result<()> {
        if self.is_lost() {
            return Err(self.lease.lost_error());
        }
        self.lease.kick();
        Ok(())
    }
    pub(crate) fn time_left(&self) -> Option<Duration> {
        Some(self.lease.deadline.lock().saturating_duration_since(Instant::now()))
    }
    pub(crate) fn lost_error(&self) -> Error {
        self.lease.lost_error()
    }
    /// Lets the lease go without waiting for the answer (order is kept on
    /// the connection). Errors with `lost` when the lease had been lost.
    pub(crate) fn release(&self) -> Result<()> {
        let l = &self.lease;
        if self.is_lost() {
            return Err(l.lost_error());
        }
        if l.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(t) = l.sched.lock().timer.take() {
            runtime::cancel(t);
        }
        if let Some(c) = l.client.upgrade() {
            c.leases.lock().remove(&l.id);
            if let Ok(conn) = c.current() {
                let mut r = Request::new(0, "release");
                r.lease = Some(l.id);
                r.fence = l.fence;
                // Not waited for: no answer to read (a wake-up saved).
                r.quiet = Some(true);
                let _ = c.send_on(&conn, &mut r, false);
            }
        }
        Ok(())
    }
}
