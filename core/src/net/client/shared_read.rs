//! The read side of a Unix connection, shared by the connection's task,
//! threads blocked on an answer, and a language's event loop ([`LoopReader`]).

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Client, OwnerConnection};
use crate::base::error::Result;
use crate::net::socket;
use crate::net::wire;
use crate::runtime;

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
    pub(super) fd: Arc<std::os::unix::net::UnixStream>,
    /// Polled, not slept on, until a window after the last call.
    pub(super) expect: crate::net::spin::Expect,
    pub(super) slot: Mutex<ReaderHandoff>,
    pub(super) client: std::sync::Weak<Client>,
    pub(super) conn: std::sync::Weak<OwnerConnection>,
}

pub(super) struct ReaderHandoff {
    /// `None` while someone reads.
    pub(super) side: Option<ReaderState>,
    /// The connection task's waker, for the hand-back.
    pub(super) task: Option<Waker>,
    /// A language's event loop reads the socket ([`LoopReader`]): the
    /// task and blocked threads leave it alone.
    pub(super) looped: bool,
    /// When that loop last read it.
    pub(super) serviced: Instant,
    /// That loop calls [`LoopReader::flush`] after each burst and each turn
    /// before it sleeps, so publishes wait for it ([`LoopReader::flush_each_turn`]).
    pub(super) flushed_each_turn: bool,
}

pub(crate) struct ReaderState {
    /// Registered with the reactor, for reading; `None` while a blocked
    /// thread reads.
    pub(super) afd: Option<tokio::io::unix::AsyncFd<Arc<std::os::unix::net::UnixStream>>>,
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) ended: bool,
}

impl ReaderState {
    /// The next whole frame's place in `buf`, or an oversized frame.
    pub(super) fn frame(&mut self) -> Option<Result<(usize, usize)>> {
        let n = match wire::whole_frame(&self.buf[self.start..])? {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let at = self.start + 4;
        self.start += 4 + n;
        Some(Ok((at, n)))
    }

    pub(super) fn has_frame(&self) -> bool {
        wire::whole_frame(&self.buf[self.start..]).is_some()
    }

    pub(super) fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Reads what the socket has into `buf` without blocking: how many bytes,
/// and whether the read was short (less than the room there was: the
/// socket has nothing more for now).
pub(super) fn fill(fd: &std::os::unix::net::UnixStream, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
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
    pub(super) fn new(fd: Arc<std::os::unix::net::UnixStream>, client: std::sync::Weak<Client>, conn: std::sync::Weak<OwnerConnection>) -> Arc<SharedRead> {
        let (afd, ended) = match socket::register_readable(&fd) {
            Ok(a) => (Some(a), false),
            Err(_) => (None, true),
        };
        let side = ReaderState { afd, buf: Vec::with_capacity(64 * 1024), start: 0, ended };
        Arc::new(SharedRead { fd, expect: Default::default(), slot: Mutex::new(ReaderHandoff { side: Some(side), task: None, looped: false, serviced: Instant::now(), flushed_each_turn: false }), client, conn })
    }

    /// For the connection's task: the read side once it has whole frames
    /// or ended. Give it back with [`SharedRead::put_back`].
    pub(super) async fn take(&self) -> ReaderState {
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
                let ReaderState { afd, buf, ended, .. } = &mut side;
                let Some(afd) = afd.as_ref() else {
                    *ended = true;
                    continue;
                };
                match afd.poll_read_ready(cx) {
                    // An answer is expected soon: look again instead.
                    Poll::Pending if self.spinning() => match fill(&self.fd, buf) {
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

    /// Whether whoever reads the socket should look again rather than
    /// sleep ([`crate::net::spin::Expect`]); never while publishes are
    /// pipelined: their answers come in batches, one wake-up each, and a
    /// reader that spins only takes CPU from the owner that answers.
    pub(super) fn spinning(&self) -> bool {
        self.expect.spinning() && self.conn.upgrade().is_none_or(|c| c.publishing.load(std::sync::atomic::Ordering::Relaxed) <= 1)
    }

    pub(super) fn put_back(&self, side: ReaderState) {
        self.slot.lock().side = Some(side);
    }
}

impl runtime::ReadWhileBlocked for SharedRead {
    fn read_until(&self, done: &dyn Fn() -> bool, window: Duration) {
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
                let leaving = client.dispatch_all(&conn, &mut side) || done();
                // Publishes held back for the answers just read leave now,
                // also when this thread goes: the connection's task may sleep
                // until data comes, and none comes for frames never sent.
                conn.sink.uncork();
                if leaving {
                    break;
                }
                match fill(&self.fd, &mut side.buf) {
                    Ok((0, _)) => side.ended = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.spinning() => {}
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
            match socket::register_readable(&self.fd) {
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
pub(super) const LOOP_STALL: Duration = Duration::from_millis(100);

impl SharedRead {
    /// Back to the reactor and the connection's task.
    pub(super) fn unloop(&self, slot: &mut ReaderHandoff) -> Option<Waker> {
        slot.looped = false;
        if let Some(side) = slot.side.as_mut()
            && !side.ended
        {
            match socket::register_readable(&self.fd) {
                Ok(a) => side.afd = Some(a),
                Err(_) => side.ended = true,
            }
        }
        slot.task.clone()
    }

    /// Gives a loop's socket back to the engine's task, if a loop reads it.
    pub(super) fn give_back(&self) {
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
    /// writes the publishes held for its flush (a busy loop makes none) and,
    /// while data waits, gives the socket back to the engine.
    pub(super) fn check_loop(&self) {
        use std::os::fd::AsRawFd;
        let mut slot = self.slot.lock();
        if !slot.looped || slot.side.is_none() || slot.serviced.elapsed() < LOOP_STALL {
            return;
        }
        if slot.flushed_each_turn {
            drop(slot);
            if let Some(conn) = self.conn.upgrade() {
                conn.sink.uncork();
            }
            slot = self.slot.lock();
            if !slot.looped || slot.side.is_none() {
                return;
            }
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
/// every 250 ms), so answers, renewals and messages never wait on it longer;
/// nor do the publishes held for its flush ([`flush_each_turn`](Self::flush_each_turn)).
pub struct LoopReader {
    pub(super) shared: Arc<SharedRead>,
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
        slot.flushed_each_turn = false;
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
        self.flush();
    }

    /// Says that the loop calls [`flush`](Self::flush) at the end of each
    /// burst of calls (Node: a microtask queued by its first publish), once
    /// a turn before it waits for events, and once more before its program
    /// exits. From now until [`stop`](Self::stop), every publish waits in
    /// the connection's sink for that flush (or for 32 to gather, or for an
    /// answer read), so a burst leaves in one write, as node-redis corks its
    /// socket until the next tick. A loop that stays busy after a burst
    /// loses it within 350 ms all the same: the engine's check of a loop
    /// that has not read for 100 ms writes it.
    pub fn flush_each_turn(&self) {
        let mut slot = self.shared.slot.lock();
        if slot.looped {
            slot.flushed_each_turn = true;
        }
    }

    /// Writes the publishes held back since the last flush or answer read
    /// (from the loop's thread, when the socket takes them all).
    pub fn flush(&self) {
        if let Some(conn) = self.shared.conn.upgrade() {
            conn.sink.uncork();
        }
    }

    /// For a program about to exit: publishes are no longer held for the
    /// turn's end, and what waits to be written is written from this
    /// thread, waiting up to `limit` for the socket to take it (the
    /// engine's tasks die with the process). True when all of it left.
    pub fn flush_before_exit(&self, limit: std::time::Duration) -> bool {
        self.shared.slot.lock().flushed_each_turn = false;
        match self.shared.conn.upgrade() {
            Some(conn) => conn.sink.flush_until(Instant::now() + limit),
            None => true,
        }
    }

    /// Whether the loop should look at the socket again instead of
    /// sleeping: true until a short window after the last call that awaits
    /// an answer ([`crate::net::spin`]). A loop keeps itself awake meanwhile
    /// (Node: an idle handle; Python: a callback scheduled soon).
    pub fn spinning(&self) -> bool {
        self.shared.spinning()
    }

    /// True while this reader's connection is the store's current one and
    /// the loop reads it.
    pub fn is_active(&self) -> bool {
        self.shared.slot.lock().looped
    }
}

