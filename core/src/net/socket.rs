//! Socket I/O: the write side of a connection (Unix, TCP, TLS), the split
//! of a socket into a frame reader and a [`Sink`], and the sink's queue.
//! The frames themselves are [`crate::net::wire`]'s.

/// The write side of a connection's socket.
pub(crate) enum WriteHalf {
    Unix(UnixWriteHalf),
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    /// Through a writer task: a TLS stream needs an await to write.
    Tls(crate::net::tls::TlsHalf),
}

impl WriteHalf {
    /// Bytes the peer sent that wait unread in this socket's receive
    /// buffer; `None` where that cannot be told (TLS, or the call failed).
    fn unread_bytes(&self) -> Option<usize> {
        use std::os::fd::AsRawFd;
        let fd = match self {
            WriteHalf::Unix(h) => h.0.as_raw_fd(),
            WriteHalf::Tcp(h) => h.as_ref().as_raw_fd(),
            WriteHalf::Tls(_) => return None,
        };
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int to the pointer given.
        let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        (r == 0).then_some(n.max(0) as usize)
    }

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
/// `hints`: when the connection's reader may spin ([`crate::net::spin::OwnerHints`]).
pub(crate) fn split_unix(
    s: tokio::net::UnixStream,
    hints: std::sync::Arc<crate::net::spin::OwnerHints>,
) -> std::io::Result<(Box<dyn tokio::io::AsyncRead + Send + Unpin>, WriteHalf)> {
    let s = std::sync::Arc::new(s.into_std()?);
    s.set_nonblocking(true)?;
    let r = UnixReadHalf { afd: register_readable(&s)?, spin: crate::net::spin::Spin::new(), hints };
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
    hints: std::sync::Arc<crate::net::spin::OwnerHints>,
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
                Poll::Pending if this.hints.may_spin() && this.spin.spinning() => match read_into(this.afd.get_ref(), buf) {
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

/// Whether a frame may wait in a [`Sink`] before it is written.
#[derive(Clone, Copy)]
pub(crate) enum Hold<'a> {
    /// Written now, after what waits ahead of it.
    No,
    /// Until an [`Sink::uncork`] soon (the client's reader uncorks at each
    /// answer it reads): the count given is of the requests like this one
    /// not yet answered, and when none of them has left (all wait here),
    /// nothing would come back to uncork, so the frames are written now.
    UntilAnswer(&'a std::sync::atomic::AtomicU64),
    /// Until the code that sent it flushes the sink: the sending thread's
    /// [`crate::runtime::block_on`] when it yields or returns (the caller
    /// registered the sink with [`crate::runtime::hold_until_blocked`]), or
    /// the event loop reading the connection ([`Sink::uncork`]); or until
    /// [`HELD_BATCH_FRAMES`] wait.
    UntilFlushed,
}

/// The most frames [`Hold::UntilFlushed`] gathers before they leave: a
/// window of 64 publishes then travels as two batches, so the owner takes
/// the first while the thread writes the second (one batch of 64 left both
/// sides idle in turn: docs/performance.md, 6 December, evening).
const HELD_BATCH_FRAMES: u64 = 32;

impl crate::runtime::FlushWhenBlocked for Sink {
    fn flush_held(&self) {
        let mut s = self.st.lock();
        self.write_held(&mut s);
    }
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
    /// Frames held in `buf` ([`Hold`]) since the last write.
    held: u64,
}

impl Sink {
    /// Bytes the peer sent that wait unread (see [`WriteHalf::unread_bytes`]).
    pub(crate) fn unread_bytes(&self) -> Option<usize> {
        self.st.lock().half.as_ref().and_then(WriteHalf::unread_bytes)
    }

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
        self.send_entered(frame, Hold::No, || {}, || {})
    }

    /// Sends as [`Sink::send`] does, or queues the frame as `hold` says
    /// (see [`Hold`]). False once closed. `enter` runs under the sink's lock before the
    /// frame is written, only when the sink is open, and `leave` after it
    /// when the write failed: a [`Sink::close`] (which takes the same lock)
    /// comes either before `enter` or after the frame was taken, so a
    /// caller's entry for the answer never outlives a frame that did not go.
    pub(crate) fn send_entered(&self, frame: &[u8], hold: Hold<'_>, enter: impl FnOnce(), leave: impl FnOnce()) -> bool {
        use std::sync::atomic::Ordering;
        let mut s = self.st.lock();
        if s.closed {
            return false;
        }
        enter();
        if !matches!(hold, Hold::No) {
            s.buf.extend_from_slice(frame);
            s.held += 1;
            self.queued.fetch_add(frame.len(), Ordering::AcqRel);
            let leaves_now = match hold {
                Hold::UntilAnswer(unanswered) => unanswered.load(Ordering::Acquire) <= s.held,
                _ => s.held >= HELD_BATCH_FRAMES,
            };
            if leaves_now {
                self.write_held(&mut s);
            }
            return true;
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
                    leave();
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

    /// Writes what waits from this thread, waiting for the socket to take
    /// it (or for the flusher task to finish), until `deadline`; what is
    /// left then goes to the flusher task. For a process about to exit,
    /// whose tasks die with it. True when nothing is left.
    pub(crate) fn flush_until(&self, deadline: std::time::Instant) -> bool {
        use std::sync::atomic::Ordering;
        loop {
            {
                let mut s = self.st.lock();
                if s.buf.is_empty() && !s.flushing {
                    return true;
                }
                if !s.flushing {
                    if s.closed && s.half.is_none() {
                        return false;
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
                            return false;
                        }
                    }
                    if s.buf.is_empty() {
                        self.drained.notify_waiters();
                        return true;
                    }
                }
                if std::time::Instant::now() >= deadline {
                    self.write_held(&mut s);
                    return false;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
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

