//! Spinning: a connection in a conversation polls its socket for a short
//! window before its thread sleeps.
//!
//! Putting a thread to sleep and waking it costs more than a round trip's
//! own work (the figures are in docs/performance.md, "Spinning"). In a
//! conversation (request, answer, next request) the next frame usually
//! comes within tens of microseconds, so looking for it again costs less
//! than sleeping and being woken, and the peer's send has no sleeper to wake.
//!
//! Bounded so that it costs nothing when there is no conversation:
//! - the owner spins on a connection after reading from it, while its last
//!   two frames each came within a window of the one before, and not while
//!   one of its holds waits in line or its client pipelines ([`Spin`],
//!   [`OwnerHints`]);
//! - a client spins after a call, for one window, while its last two
//!   answers came at once (not grants that waited in line), with rare
//!   probes otherwise ([`Expect`]), and not while publishes are pipelined
//!   (more than one in flight: their answers come in batches).
//!
//! `TINYSTORE_SPIN` sets the window for the process (`"50us"`, at most
//! `"10ms"`; `"0"` turns spinning off; unset or empty: 100 µs); read once,
//! when the process first serves or connects.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The window when `TINYSTORE_SPIN` is not set.
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(100);

/// How long a connection polls before sleeping (`TINYSTORE_SPIN`, else
/// [`DEFAULT_WINDOW`]); zero means never.
pub fn window() -> Duration {
    static W: OnceLock<Duration> = OnceLock::new();
    *W.get_or_init(|| match std::env::var("TINYSTORE_SPIN") {
        Err(_) => DEFAULT_WINDOW,
        Ok(text) if text.trim().is_empty() => DEFAULT_WINDOW,
        Ok(text) => parse(&text).unwrap_or_else(|| {
            eprintln!(
                "tinystore: TINYSTORE_SPIN={text:?} is not understood: write a duration of at most 10ms like \"100us\", or \"0\" to turn spinning off; using {}us",
                DEFAULT_WINDOW.as_micros()
            );
            DEFAULT_WINDOW
        }),
    })
}

/// `"50us"`, `"50µs"`, `"1ms"`, `"0"`; at most 10 ms (beyond that it is no
/// longer a spin but a busy wait).
fn parse(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split].parse().ok()?;
    let d = match t[split..].trim() {
        "" if n == 0 => Duration::ZERO,
        "us" | "µs" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        _ => return None,
    };
    (d <= Duration::from_millis(10)).then_some(d)
}

/// What an owner's connection knows that its reader's spin needs. Set by
/// the connection's task, read by its socket's reader.
#[derive(Debug, Default)]
pub(crate) struct OwnerHints {
    /// Holds of the connection waiting in line: the client waits for a
    /// grant, not to send.
    pub(crate) waiting: std::sync::atomic::AtomicUsize,
    /// The client pipelines ([`Pipelining`]): its next batch comes once
    /// our answers reach it, so a spin would only take the core it needs
    /// (docs/performance.md, "5 December").
    pub(crate) pipelining: AtomicBool,
}

impl OwnerHints {
    /// Whether the reader may spin after a read.
    pub(crate) fn may_spin(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) == 0 && !self.pipelining.load(Ordering::Relaxed)
    }

    /// Notes how many requests a read of the connection brought (its
    /// connection's task, after handling them), for [`Self::may_spin`].
    pub(crate) fn read_brought(&self, requests: usize, seen: &mut Pipelining) {
        self.pipelining.store(seen.read_brought(requests), Ordering::Relaxed);
    }
}

/// Whether a client pipelines, judged by the owner from how many requests
/// its reads bring. A read of several says it does; it stays so until
/// [`Pipelining::SINGLE_READS`] reads in a row brought one each: while
/// the owner spins it reads a pipelining client's frames one at a time as
/// they land, so one such read proves nothing, and a spin that goes on
/// takes the core the client needs (docs/performance.md, "5 December").
#[derive(Debug)]
pub(crate) struct Pipelining {
    single_reads: u32,
}

impl Pipelining {
    const SINGLE_READS: u32 = 16;

    /// A new connection is taken for a conversation.
    pub(crate) fn new() -> Pipelining {
        Pipelining { single_reads: Self::SINGLE_READS }
    }

    /// Notes a read's requests; says whether the client pipelines.
    pub(crate) fn read_brought(&mut self, requests: usize) -> bool {
        self.single_reads = if requests > 1 { 0 } else { self.single_reads.saturating_add(1) };
        self.single_reads < Self::SINGLE_READS
    }
}

/// One connection's spinning state on the owner, kept by whoever reads
/// its socket: spin after a read while the last two gaps between frames
/// were within a window. A client that holds a key for a moment every few
/// milliseconds sends its release right after the grant and its next hold
/// much later: spinning after the release would be a window lost per hold.
#[derive(Debug)]
pub(crate) struct Spin {
    /// Poll until then.
    until: Option<Instant>,
    /// When the socket was last found drained, until data comes.
    drained_at: Option<Instant>,
    /// Whether each of the last gaps was within a window, the latest in
    /// the lowest bit.
    recent: u8,
}

/// Both of the last two.
const BOTH: u8 = 0b11;

impl Spin {
    pub(crate) fn new() -> Spin {
        Spin { until: None, drained_at: None, recent: BOTH }
    }

    /// The socket has nothing more for now (after a read): spin from now if
    /// frames have been coming within a window.
    pub(crate) fn drained(&mut self) {
        let w = window();
        if w.is_zero() {
            return;
        }
        let now = Instant::now();
        self.drained_at = Some(now);
        self.until = (self.recent & BOTH == BOTH).then(|| now + w);
    }

    /// Data came (from a spin's read or after sleeping).
    pub(crate) fn came(&mut self) {
        if let Some(at) = self.drained_at.take() {
            self.recent = self.recent << 1 | u8::from(at.elapsed() < window());
        }
        self.until = None;
    }

    /// Whether to look at the socket again rather than sleep. False once
    /// the window has run out; the connection then sleeps, and spins again
    /// only after two frames in a row come within a window.
    pub(crate) fn spinning(&mut self) -> bool {
        match self.until {
            Some(u) if Instant::now() < u => true,
            Some(_) => {
                self.until = None;
                false
            }
            None => false,
        }
    }
}

/// A client connection's spin: whoever reads its socket polls it for a
/// window after a call that awaits an answer, while its last two answers
/// came at once: within a window, and not after waiting in line for a
/// held key. Where calls contend for a key (some granted at once, the next
/// in line) spinning would only take CPU from the processes that answer.
/// While answers come late, a call now and then spins anyway (a probe:
/// one in 16; each probe answered late doubles that, up to one in 1024,
/// until 16 answers in a row come at once); a probe answered at once turns
/// spinning back on. Shared by the calling threads
/// and the reader, hence atomic.
#[derive(Debug)]
pub(crate) struct Expect {
    /// Nanoseconds after [`epoch`] until which to poll.
    until: AtomicU64,
    /// When the last call was sent (same clock).
    sent: AtomicU64,
    /// Whether each of the last answers came at once, the latest in the
    /// lowest bit.
    recent: AtomicU8,
    calls: AtomicU32,
    /// One call in this many probes.
    probe_every: AtomicU32,
    /// The last call spun as a probe.
    probing: AtomicBool,
    /// Answers at once in a row.
    streak: AtomicU32,
}

/// Probes while answers come late: one call in this many at first...
pub const PROBE_FIRST: u32 = 16;
/// ...doubling with each probe answered late, up to one in this many.
pub const PROBE_LAST: u32 = 1024;

/// The last two answers came at once.
const AT_ONCE: u8 = 0b11;

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn nanos_now() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

impl Default for Expect {
    fn default() -> Expect {
        Expect {
            until: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            recent: AtomicU8::new(AT_ONCE),
            calls: AtomicU32::new(0),
            probe_every: AtomicU32::new(PROBE_FIRST),
            probing: AtomicBool::new(false),
            streak: AtomicU32::new(0),
        }
    }
}

impl Expect {
    /// A call that awaits an answer is being sent.
    pub(crate) fn expect(&self) {
        let w = window();
        if w.is_zero() {
            return;
        }
        let now = nanos_now();
        self.sent.store(now, Ordering::Relaxed);
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let on = self.recent.load(Ordering::Relaxed) & AT_ONCE == AT_ONCE;
        let probe = !on && n.is_multiple_of(self.probe_every.load(Ordering::Relaxed));
        self.probing.store(probe, Ordering::Relaxed);
        if on || probe {
            self.until.fetch_max(now + w.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// An answer came (read by anyone); `queued`: a grant that waited in
    /// line for its key. The window runs on after the answer: what the
    /// answer's caller does next (a message that follows, the next call)
    /// is often just behind it.
    pub(crate) fn answered(&self, queued: bool) {
        let sent = self.sent.load(Ordering::Relaxed);
        if sent == 0 {
            return;
        }
        let at_once = !queued && nanos_now().saturating_sub(sent) < window().as_nanos() as u64;
        let probe = self.probing.swap(false, Ordering::Relaxed);
        // A probe answered at once turns spinning back on; one answered
        // late makes the next probe wait twice as long.
        let _ = self.recent.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
            Some(if probe && at_once { AT_ONCE } else { r << 1 | u8::from(at_once) })
        });
        if !at_once {
            self.streak.store(0, Ordering::Relaxed);
        } else if self.streak.fetch_add(1, Ordering::Relaxed) + 1 >= PROBE_FIRST {
            // Long enough at once to probe often again after the next late answer.
            self.probe_every.store(PROBE_FIRST, Ordering::Relaxed);
        }
        if probe && !at_once {
            let every = (self.probe_every.load(Ordering::Relaxed) * 2).min(PROBE_LAST);
            self.probe_every.store(every, Ordering::Relaxed);
        }
    }

    /// Whether to look at the socket again rather than sleep.
    pub(crate) fn spinning(&self) -> bool {
        let until = self.until.load(Ordering::Relaxed);
        until != 0 && nanos_now() < until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipelining_client_read_one_frame_at_a_time_is_still_pipelining() {
        let mut p = Pipelining::new();
        assert!(!p.read_brought(1), "a new connection is a conversation");
        assert!(p.read_brought(5), "a read of several requests: the client pipelines");
        for n in 1..Pipelining::SINGLE_READS {
            assert!(p.read_brought(1), "read {n} of one request, while we spun, does not end it");
        }
        assert!(!p.read_brought(1), "many reads of one request in a row: a conversation again");
        assert!(p.read_brought(2));
    }

    #[test]
    fn the_window_is_written_in_microseconds_or_milliseconds() {
        assert_eq!(parse("50us"), Some(Duration::from_micros(50)));
        assert_eq!(parse(" 80µs "), Some(Duration::from_micros(80)));
        assert_eq!(parse("2ms"), Some(Duration::from_millis(2)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(parse("0us"), Some(Duration::ZERO));
        for bad in ["", "50", "fast", "-1us", "1.5us", "11ms", "1s"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_connection_whose_window_ran_out_sleeps_until_a_frame_comes_within_one() {
        if window().is_zero() {
            return; // TINYSTORE_SPIN=0 in this environment
        }
        let mut s = Spin::new();
        s.drained();
        assert!(s.spinning(), "a new connection spins after its first answer");
        std::thread::sleep(window() + Duration::from_millis(1));
        assert!(!s.spinning(), "the window ran out");
        s.came(); // the next frame came late
        s.drained();
        assert!(!s.spinning(), "frames come further apart than a window: no spin");
        s.came(); // this one came at once (a release after its grant)
        s.drained();
        assert!(!s.spinning(), "one frame at once after a late one is not a conversation");
        s.came(); // and this one too
        s.drained();
        assert!(s.spinning(), "two frames in a row within a window: spin again");
    }

    #[test]
    fn a_client_whose_answers_come_late_spins_only_to_probe() {
        if window().is_zero() {
            return;
        }
        let e = Expect::default();
        // How many of `calls` calls spin, each answered as `answer` says.
        let spins = |calls: usize, answer: &dyn Fn()| {
            (0..calls)
                .filter(|_| {
                    e.expect();
                    let s = e.spinning();
                    e.until.store(0, Ordering::Relaxed); // its window ran out
                    answer();
                    s
                })
                .count()
        };
        assert_eq!(spins(10, &|| e.answered(false)), 10, "answers at once: every call spins");
        // Answers that waited in line, as where four processes contend.
        let in_line = spins(2000, &|| e.answered(true));
        assert!((1..=10).contains(&in_line), "{in_line} of 2000 calls spun while every answer waited in line");
        let late = spins(2000, &|| {
            e.sent.store(1, Ordering::Relaxed); // sent long ago
            e.answered(false)
        });
        assert!((1..=10).contains(&late), "{late} of 2000 calls spun while every answer came late");
        // Until a probe is answered at once: then every call spins again.
        e.calls.store(0, Ordering::Relaxed);
        assert_eq!(spins(3, &|| e.answered(false)), 3, "a probe answered at once turns spinning on");
        assert_eq!(spins(10, &|| e.answered(false)), 10);
        // One answer in line stops it.
        assert_eq!(spins(3, &|| e.answered(true)), 1);
    }
}
