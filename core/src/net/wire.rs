//! The wire: length-prefixed JSON frames between a client and the owner.
//!
//! A frame is a 4-byte big-endian length, then one JSON object. The client
//! speaks first with `hello`; every request carries an `id` that its answer
//! echoes; the server pushes subscription events and lease losses unasked.
//! Fences travel as decimal strings. See `docs/wire.md`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::engine::channels::{Missed, Resume};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::MAX_MESSAGE_BYTES;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest frame either side accepts: a largest message plus room for
/// its envelope. A larger one closes the connection that sent it.
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES + 64 * 1024;

/// A request from a client: `id`, `op`, and the fields the op needs.
///
/// One flat shape serves every op, so a message's JSON (`data`) passes
/// through without being parsed again. Unknown fields are refused.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request<'a> {
    /// Echoed by the answer.
    pub id: u64,
    /// `hello`, `publish`, `subscribe`, `unsubscribe`, `acquire`, `renew`,
    /// `release`, `ping`, `status` or `shutdown`.
    pub op: std::borrow::Cow<'a, str>,
    /// hello: the protocol version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// hello: the client's name, shown by `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// hello: identifies the client across reconnects (retry-safe holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// hello: the token (TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// publish, subscribe: the channel's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// publish, subscribe: the branch's path of keys (strings or integers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Vec<Key>>,
    /// publish: the message, any JSON (`null` too: present, not missing).
    #[serde(default, borrow, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a RawValue>,
    /// subscribe, unsubscribe: the subscription's number, chosen by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<u64>,
    /// subscribe: also every branch below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// subscribe: go on from here after a reconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<WireResume>,
    /// acquire: the lock's or semaphore's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// acquire: a semaphore's limit; absent or 0 for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// acquire: the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
    /// acquire: who holds, within the session (LOCK-08 re-entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<u64>,
    /// acquire: unique per session, so a retried hold gets the same lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<u64>,
    /// acquire: the lease's ttl in milliseconds (1,000 to 3,600,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// acquire: maxHold in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_ms: Option<u64>,
    /// acquire: how long to wait in milliseconds; 0 tries once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// renew, release: the lease's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// renew, release: the lease's fence, checked against the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    /// release: `true` when the client wants no answer (it does not wait
    /// for one); the store then sends none, not even an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<bool>,
}

impl<'a> Request<'a> {
    /// A request of `op` with id `id` and no fields yet.
    pub fn new(id: u64, op: &'static str) -> Request<'a> {
        Request { id, op: op.into(), ..Default::default() }
    }
}

/// Takes a required field, or says which one is missing.
pub fn need<T>(v: Option<T>, op: &str, field: &str) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("op {op:?} needs the field {field:?}; see docs/wire.md")))
}

/// Where a subscription goes on after a reconnect.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WireResume {
    /// The epoch of the store that gave `at`.
    pub epoch: u64,
    /// The log and position.
    pub log: u64,
    /// The next position to read.
    pub next: u64,
}

impl WireResume {
    /// The engine's resume point.
    pub fn at(&self) -> Resume {
        Resume { log: self.log, next: self.next }
    }
}

/// A frame from the server: the answer to request `id` (with `ok` or
/// `err`), or an event `ev` pushed unasked.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Reply<'a> {
    /// The request this answers; absent on events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The answer's value.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub ok: Option<&'a RawValue>,
    /// The answer's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<WireError>,
    /// `msg`, `missed`, `end`, `lost` or `closing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ev: Option<std::borrow::Cow<'a, str>>,
    /// msg, missed, end: the subscription's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<u64>,
    /// msg: the message's branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Vec<Key>>,
    /// msg: its sequence in the branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// msg, missed: where a resume would go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// msg: the message.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a RawValue>,
    /// missed: how many and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    /// An answer to a hold granted after waiting in line: the client had
    /// to wait for another holder, so it stops spinning ([`crate::net::spin`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// lost: the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// lost: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// An error on the wire: a code and a message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireError {
    /// The error's code (`timeout`, `invalid`, ...).
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        WireError { code: e.code().to_owned(), message: e.message().to_owned() }
    }
}

impl From<WireError> for Error {
    fn from(w: WireError) -> Error {
        Error::new(ErrorKind::from_code(&w.code).unwrap_or(ErrorKind::Protocol), w.message)
    }
}

/// The answer to `hello`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloOk {
    /// The protocol version.
    pub version: u32,
    /// The store's epoch.
    pub epoch: u64,
    /// The store directory, absolute.
    pub dir: String,
    /// The owner's process id.
    pub pid: u32,
}

/// The answer to `acquire`: `lease` is absent when a try found the key held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcquireOk {
    /// The lease's id; absent when a try found the key held.
    pub lease: Option<u64>,
    /// The lease's fence (none for a permit).
    #[serde(default)]
    pub fence: Option<Fence>,
    /// How long the request waited in line before the grant.
    #[serde(default)]
    pub waited_ms: u64,
}

/// The answer to `subscribe`: where the subscription reads, for a resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeOk {
    /// The store's epoch.
    pub epoch: u64,
    /// The log the subscription reads.
    pub log: u64,
    /// The next position it reads.
    pub next: u64,
}

/// Appends one frame (length, then the JSON of `v`) to `out`.
pub fn encode<T: Serialize>(v: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *out, v).expect("wire values serialize");
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// One frame's JSON, as bytes.
pub fn frame<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode(v, &mut out);
    out
}

/// The length of the frame at the start of `avail` once all of it is
/// there; an error for a frame over [`MAX_FRAME_BYTES`], known from its
/// length alone.
pub(crate) fn whole_frame(avail: &[u8]) -> Option<Result<usize>> {
    let len = u32::from_be_bytes(avail.get(..4)?.try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME_BYTES {
        return Some(Err(Error::new(ErrorKind::Protocol, format!("a frame of {len} bytes is over the limit of {MAX_FRAME_BYTES}"))));
    }
    (avail.len() >= 4 + len).then_some(Ok(len))
}

/// Reads frames from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: tokio::io::AsyncRead + Unpin> FrameReader<R> {
    /// Reads frames from `inner`.
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader { inner, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }

    /// The stream underneath.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// True when a whole frame is already read and waits in the buffer.
    pub fn has_frame(&self) -> bool {
        whole_frame(&self.buf[self.start..]).is_some()
    }

    /// The next frame's JSON; `Ok(None)` at a clean end of the stream.
    /// Errors with `protocol` for a frame over [`MAX_FRAME_BYTES`] or a
    /// stream cut inside a frame.
    pub async fn next(&mut self) -> Result<Option<&[u8]>> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(len) = whole_frame(&self.buf[self.start..]) {
                let len = len?;
                let s = self.start + 4;
                self.start += 4 + len;
                return Ok(Some(&self.buf[s..s + len]));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            let n = self.inner.read_buf(&mut self.buf).await.map_err(|e| Error::io("reading from the connection", e))?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(Error::new(ErrorKind::Protocol, "the connection ended inside a frame"));
            }
        }
    }
}

/// Parses an address: `unix:PATH`, `tcp:HOST:PORT` or `tls:HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A Unix socket at this path.
    Unix(std::path::PathBuf),
    /// A TCP host and port, plain: for loopback or a trusted network.
    Tcp(String),
    /// A TCP host and port speaking TLS: the owner needs a certificate and
    /// key, a client the CA that signed that certificate (see docs/wire.md).
    Tls(String),
}

impl Address {
    /// Parses `unix:PATH`, `tcp:HOST:PORT` or `tls:HOST:PORT`; errors with
    /// `invalid` and examples.
    pub fn parse(s: &str) -> Result<Address> {
        let host_port = |hp: &str| hp.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if let Some(p) = s.strip_prefix("unix:") {
            if !p.is_empty() {
                return Ok(Address::Unix(p.into()));
            }
        } else if let Some(hp) = s.strip_prefix("tcp:")
            && host_port(hp)
        {
            return Ok(Address::Tcp(hp.to_owned()));
        } else if let Some(hp) = s.strip_prefix("tls:")
            && host_port(hp)
        {
            return Ok(Address::Tls(hp.to_owned()));
        }
        Err(Error::invalid(format!(
            "address {s:?} is not understood: write unix:PATH (like unix:data/tinystore.sock), tcp:HOST:PORT (like tcp:127.0.0.1:7070) or tls:HOST:PORT (like tls:db.example.com:7443)"
        )))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
            Address::Tcp(hp) => write!(f, "tcp:{hp}"),
            Address::Tls(hp) => write!(f, "tls:{hp}"),
        }
    }
}

/// The write side of a connection's socket.
pub(crate) enum WriteHalf {
    Unix(UnixWriteHalf),
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    /// Through a writer task: a TLS stream needs an await to write.
    Tls(crate::net::tls::TlsHalf),
}

impl WriteHalf {
    fn try_write(&self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            WriteHalf::Unix(h) => h.try_write(b),
            WriteHalf::Tcp(h) => h.try_write(b),
            WriteHalf::Tls(h) => h.try_write(b),
        }
    }

    async fn writable(&self) -> std::io::Result<()> {
        match self {
            WriteHalf::Unix(h) => h.writable().await,
            WriteHalf::Tcp(h) => h.as_ref().writable().await,
            WriteHalf::Tls(h) => h.writable().await,
        }
    }

    async fn write_all(&self, mut b: &[u8]) -> std::io::Result<()> {
        while !b.is_empty() {
            self.writable().await?;
            match self.try_write(b) {
                Ok(n) => b = &b[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Splits a socket into a frame reader and a [`Sink`].
///
/// The socket is registered with the reactor for reading only. A tokio
/// `UnixStream` also asks to hear when it becomes writable, and the kernel
/// says so each time the peer reads: one wake-up of this process's reactor
/// per read on the other side, for nothing. Writes go straight to the
/// socket; only a full socket buffer registers for writability, then.
/// `waiting`: how many of the connection's holds wait in line (no spinning
/// meanwhile: the client waits for a grant, not to send).
pub(crate) fn split_unix(
    s: tokio::net::UnixStream,
    waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> std::io::Result<(Box<dyn tokio::io::AsyncRead + Send + Unpin>, WriteHalf)> {
    let s = std::sync::Arc::new(s.into_std()?);
    s.set_nonblocking(true)?;
    let r = UnixReadHalf { afd: register_readable(&s)?, spin: crate::net::spin::Spin::new(), waiting };
    Ok((Box::new(r), WriteHalf::Unix(UnixWriteHalf(s))))
}

/// Splits a Unix socket for the client: its read side may be read by a
/// thread blocked on an answer as well as by the connection's task.
pub(crate) fn split_unix_shared(s: tokio::net::UnixStream) -> std::io::Result<(std::sync::Arc<std::os::unix::net::UnixStream>, WriteHalf)> {
    let s = std::sync::Arc::new(s.into_std()?);
    s.set_nonblocking(true)?;
    Ok((s.clone(), WriteHalf::Unix(UnixWriteHalf(s))))
}

/// Registers a Unix socket with the reactor for reading only.
pub(crate) fn register_readable(
    fd: &std::sync::Arc<std::os::unix::net::UnixStream>,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::sync::Arc<std::os::unix::net::UnixStream>>> {
    // From any thread: a language's event loop hands sockets back too.
    let _rt = crate::runtime::handle().enter();
    // SAFETY: the Arc'd socket owns its fd, open until its last clone drops,
    // and the AsyncFd holds a clone.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd.clone(), tokio::io::Interest::READABLE) }.map_err(Into::into)
}

/// The read side of a Unix socket, registered for readability only. Once
/// drained it is polled for a short window before the task sleeps
/// ([`crate::net::spin`]).
struct UnixReadHalf {
    afd: tokio::io::unix::AsyncFd<std::sync::Arc<std::os::unix::net::UnixStream>>,
    spin: crate::net::spin::Spin,
    waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// read(2) into `buf`'s unfilled part; marks what was read as filled.
fn read_into(fd: &std::os::unix::net::UnixStream, buf: &mut tokio::io::ReadBuf<'_>) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: read(2) writes at most `dst.len()` bytes into `dst` and says
    // how many; only those are marked initialised.
    let dst = unsafe { buf.unfilled_mut() };
    let n = unsafe { libc::read(fd.as_raw_fd(), dst.as_mut_ptr().cast(), dst.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    unsafe { buf.assume_init(n as usize) };
    buf.advance(n as usize);
    Ok(n as usize)
}

impl tokio::io::AsyncRead for UnixReadHalf {
    fn poll_read(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::io::ErrorKind::{Interrupted, WouldBlock};
        use std::task::Poll;
        let this = self.get_mut();
        let room = buf.remaining();
        loop {
            let mut guard = match this.afd.poll_read_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending if this.waiting.load(std::sync::atomic::Ordering::Relaxed) == 0 && this.spin.spinning() => match read_into(this.afd.get_ref(), buf) {
                    // The reactor may still say ready later: that read finds
                    // nothing and clears it.
                    Ok(n) => {
                        this.spin.came();
                        if n > 0 && n < room {
                            this.spin.drained();
                        }
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == WouldBlock || e.kind() == Interrupted => {
                        // Polled again after the tasks already waiting.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                },
                Poll::Pending => return Poll::Pending,
            };
            match guard.try_io(|inner| read_into(inner.get_ref(), buf)) {
                Ok(Ok(n)) => {
                    this.spin.came();
                    if n > 0 && n < room {
                        // Drained (as tokio's own sockets judge a short
                        // read): wait for the reactor's next event rather
                        // than read again to find nothing; spin first.
                        guard.clear_ready();
                        this.spin.drained();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The write side of a Unix socket: non-blocking sends from any thread.
/// Dropping it shuts the socket's write side, so the peer reads an end.
pub(crate) struct UnixWriteHalf(std::sync::Arc<std::os::unix::net::UnixStream>);

impl UnixWriteHalf {
    fn try_write(&self, b: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        loop {
            // MSG_NOSIGNAL: a closed peer is an error here, never a SIGPIPE
            // in a host process (Go, Node, Python) that did not ignore it.
            let n = unsafe { libc::send(self.0.as_raw_fd(), b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits until the socket takes bytes again (its buffer was full).
    async fn writable(&self) -> std::io::Result<()> {
        // SAFETY: the duplicate socket owns its fd until the AsyncFd drops.
        let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(self.0.try_clone()?, tokio::io::Interest::WRITABLE)? };
        fd.writable().await?.retain_ready();
        Ok(())
    }
}

impl Drop for UnixWriteHalf {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// Splits a TCP socket into a frame reader and a [`Sink`]'s half.
pub(crate) fn split_tcp(s: tokio::net::TcpStream) -> (Box<dyn tokio::io::AsyncRead + Send + Unpin>, WriteHalf) {
    s.set_nodelay(true).ok();
    let (r, w) = s.into_split();
    (Box::new(r), WriteHalf::Tcp(w))
}

/// Where frames are written to a connection, from any thread, in the order
/// `send` was called. A frame goes straight to the socket when nothing is
/// queued ahead of it (no hand-off to another thread: that is most of a
/// round trip's cost here); otherwise it waits in a buffer that a flusher
/// task writes out. The buffered bytes are what [`Sink::room`] limits.
pub(crate) struct Sink {
    st: parking_lot::Mutex<SinkState>,
    wake: tokio::sync::Notify,
    drained: tokio::sync::Notify,
    queued: std::sync::atomic::AtomicUsize,
}

struct SinkState {
    half: Option<WriteHalf>,
    buf: Vec<u8>,
    flushing: bool,
    closed: bool,
    /// Frames gather in `buf` until [`Sink::uncork`] writes them at once.
    corked: bool,
    /// Frames in `buf` put there by [`Sink::send_later`].
    held: u64,
}

impl Sink {
    pub(crate) fn new(half: WriteHalf) -> std::sync::Arc<Sink> {
        let sink = std::sync::Arc::new(Sink {
            st: parking_lot::Mutex::new(SinkState { half: Some(half), buf: Vec::new(), flushing: false, closed: false, corked: false, held: 0 }),
            wake: tokio::sync::Notify::new(),
            drained: tokio::sync::Notify::new(),
            queued: std::sync::atomic::AtomicUsize::new(0),
        });
        let s = sink.clone();
        crate::runtime::spawn(async move { s.flush_loop().await });
        sink
    }

    /// Sends one frame (or several, back to back); false once closed.
    pub(crate) fn send(&self, frame: &[u8]) -> bool {
        use std::sync::atomic::Ordering;
        let mut s = self.st.lock();
        if s.closed {
            return false;
        }
        let mut rest = frame;
        if !s.flushing && s.buf.is_empty() && !s.corked {
            let half = s.half.as_ref().expect("the half is home when not flushing");
            match half.try_write(frame) {
                Ok(n) if n == frame.len() => return true,
                Ok(n) => rest = &frame[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    s.closed = true;
                    return false;
                }
            }
        }
        s.buf.extend_from_slice(rest);
        self.queued.fetch_add(rest.len(), Ordering::AcqRel);
        if !s.flushing && !s.corked {
            s.flushing = true;
            self.wake.notify_one();
        }
        true
    }

    /// Queues a frame without writing it, for an [`Sink::uncork`] soon: the
    /// client's reader uncorks at each answer it reads. `unanswered` counts
    /// the requests like this one not yet answered; when none of them has
    /// left (all wait here), nothing would come back to uncork, so the
    /// frames are written now. False once closed.
    pub(crate) fn send_later(&self, frame: &[u8], unanswered: &std::sync::atomic::AtomicU64) -> bool {
        let mut s = self.st.lock();
        if s.closed {
            return false;
        }
        s.buf.extend_from_slice(frame);
        s.held += 1;
        self.queued.fetch_add(frame.len(), std::sync::atomic::Ordering::AcqRel);
        if unanswered.load(std::sync::atomic::Ordering::Acquire) <= s.held {
            self.write_held(&mut s);
        }
        true
    }

    /// Holds frames back until [`Sink::uncork`]: the answers to requests read
    /// together leave in one write instead of one each.
    pub(crate) fn cork(&self) {
        self.st.lock().corked = true;
    }

    /// Writes what gathered since [`Sink::cork`], from this thread when the
    /// socket takes it all.
    pub(crate) fn uncork(&self) {
        let mut s = self.st.lock();
        s.corked = false;
        self.write_held(&mut s);
    }

    fn write_held(&self, s: &mut parking_lot::MutexGuard<'_, SinkState>) {
        use std::sync::atomic::Ordering;
        if s.flushing || s.buf.is_empty() || s.closed {
            return;
        }
        s.held = 0;
        let half = s.half.as_ref().expect("the half is home when not flushing");
        match half.try_write(&s.buf) {
            Ok(n) => {
                s.buf.drain(..n);
                self.queued.fetch_sub(n, Ordering::AcqRel);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                s.closed = true;
                return;
            }
        }
        if !s.buf.is_empty() {
            s.flushing = true;
            self.wake.notify_one();
        }
        self.drained.notify_waiters();
    }

    /// Bytes waiting to be written.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.st.lock().closed
    }

    /// Waits until fewer than `limit` bytes wait, or the sink closed.
    pub(crate) async fn room(&self, limit: usize) {
        loop {
            let n = self.drained.notified();
            if self.queued() < limit || self.is_closed() {
                return;
            }
            n.await;
        }
    }

    /// No more frames: what is queued is written, then the socket's write
    /// side is shut down.
    pub(crate) fn close(&self) {
        let mut s = self.st.lock();
        s.closed = true;
        s.corked = false;
        if !s.flushing {
            if s.buf.is_empty() {
                s.half.take();
            } else {
                // What a cork held back still goes out before the shutdown.
                s.flushing = true;
            }
        }
        drop(s);
        self.wake.notify_one();
        self.drained.notify_waiters();
    }

    async fn flush_loop(&self) {
        use std::sync::atomic::Ordering;
        loop {
            self.wake.notified().await;
            loop {
                let (half, buf) = {
                    let mut s = self.st.lock();
                    if s.buf.is_empty() {
                        s.flushing = false;
                        if s.closed {
                            s.half.take();
                            return;
                        }
                        break;
                    }
                    let Some(half) = s.half.take() else { return };
                    s.held = 0;
                    (half, std::mem::take(&mut s.buf))
                };
                let ok = half.write_all(&buf).await.is_ok();
                self.queued.fetch_sub(buf.len(), Ordering::AcqRel);
                let mut s = self.st.lock();
                if ok {
                    s.half = Some(half);
                } else {
                    s.closed = true;
                    s.buf.clear();
                    self.queued.store(0, Ordering::Release);
                }
                drop(s);
                self.drained.notify_waiters();
                if !ok {
                    return;
                }
            }
            if self.st.lock().closed && self.st.lock().half.is_none() {
                return;
            }
        }
    }
}

/// A field that is there, even as `null`: `Some`; serde's `Option` would
/// read `null` as absent, and a message of `null` is a message.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as Deserialize>::deserialize(d).map(Some)
}

/// Decodes `bytes` as a stream of frames the way both ends do: each frame
/// as a request (with its keys checked, as the server does before acting)
/// and as an answer or event (as the client does). Never panics; gives how
/// many frames parsed as requests. The entry point of the fuzz target in
/// `core/fuzz` (WIRE-01), and of the decoder test beside it.
#[doc(hidden)]
pub fn fuzz_decode(bytes: &[u8]) -> usize {
    let mut reader = FrameReader::new(bytes);
    let mut requests = 0;
    futures::executor::block_on(async {
        while let Ok(Some(frame)) = reader.next().await {
            if let Ok(r) = serde_json::from_slice::<Request>(frame) {
                requests += 1;
                if let Some(k) = &r.key {
                    let _ = k.check();
                }
                for k in r.branch.iter().flatten() {
                    let _ = k.check();
                }
                if let Some(c) = &r.channel {
                    let _ = crate::base::limits::check_name("channel", c);
                }
            }
            let _ = serde_json::from_slice::<Reply>(frame);
        }
    });
    requests
}
