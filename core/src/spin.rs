//! Spinning: a connection in a conversation polls its socket for a short
//! window before its thread sleeps.
//!
//! On a virtual machine like the ones this is measured on, putting a thread
//! to sleep and waking it costs more than the round trip's own work: about
//! 20 to 30 µs of CPU on each side (`perf`: the waker's wake-up call in
//! `sendto`, the sleeper's switch back in), which a Redis server and its
//! clients pay too. In a conversation (request, answer, next request) the
//! next frame usually comes within tens of microseconds, so looking for it
//! again costs less than sleeping and being woken, and the peer's send has
//! no sleeper to wake.
//!
//! Bounded so that it costs nothing when there is no conversation:
//! - the owner spins on a connection only after it answered it, and stops
//!   spinning on a connection whose last window ran out until a frame comes
//!   within a window again;
//! - a client spins only after a call, for one window, and only while its
//!   calls have been answered within a window ([`Expect`]).
//!
//! `TINYSTORE_SPIN` sets the window for the process (`"50us"`, `"0"` turns
//! spinning off); read once, at the first connection.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The window when `TINYSTORE_SPIN` is not set.
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(100);

/// How long a connection polls before sleeping (`TINYSTORE_SPIN`, else
/// [`DEFAULT_WINDOW`]); zero means never.
pub fn window() -> Duration {
    static W: OnceLock<Duration> = OnceLock::new();
    *W.get_or_init(|| match std::env::var("TINYSTORE_SPIN") {
        Err(_) => DEFAULT_WINDOW,
        Ok(text) => parse(&text).unwrap_or_else(|| {
            eprintln!(
                "tinystore: TINYSTORE_SPIN={text:?} is not understood: write a duration like \"100us\" or \"0\" to turn spinning off; using {}us",
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

/// One connection's spinning state, kept by whoever reads its socket.
#[derive(Debug)]
pub(crate) struct Spin {
    /// Poll until then.
    until: Option<Instant>,
    /// When the socket was last found drained, until data comes.
    drained_at: Option<Instant>,
    /// Whether the last gap between frames was within a window.
    worth: bool,
}

impl Spin {
    pub(crate) fn new() -> Spin {
        Spin { until: None, drained_at: None, worth: true }
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
        self.until = self.worth.then(|| now + w);
    }

    /// Data came (from a spin's read or after sleeping): frames come within
    /// a window if this one did.
    pub(crate) fn came(&mut self) {
        if let Some(at) = self.drained_at.take() {
            self.worth = at.elapsed() < window();
        }
        self.until = None;
    }

    /// Whether to look at the socket again rather than sleep. False once
    /// the window has run out; the connection then sleeps, and spins again
    /// only after a frame comes within a window.
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
/// window after a call that awaits an answer, while answers have been
/// coming within a window. Calls answered later (holds that wait for a
/// held key, a busy owner) stop it, since spinning then only takes CPU
/// from the processes that would answer; one call in [`PROBE_EVERY`] spins
/// anyway, to notice when answers come quickly again. Shared by the
/// calling threads and the reader, hence atomic.
#[derive(Debug)]
pub(crate) struct Expect {
    /// Nanoseconds after [`epoch`] until which to poll.
    until: AtomicU64,
    /// When the last call was sent (same clock).
    sent: AtomicU64,
    /// Whether the last answer came within a window of its call.
    worth: AtomicBool,
    calls: AtomicU32,
}

/// While answers come late, one call in this many spins.
pub const PROBE_EVERY: u32 = 16;

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn nanos_now() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

impl Default for Expect {
    fn default() -> Expect {
        Expect { until: AtomicU64::new(0), sent: AtomicU64::new(0), worth: AtomicBool::new(true), calls: AtomicU32::new(0) }
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
        let probe = self.calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE_EVERY);
        if probe || self.worth.load(Ordering::Relaxed) {
            self.until.fetch_max(now + w.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// An answer came (read by anyone).
    pub(crate) fn answered(&self) {
        let sent = self.sent.load(Ordering::Relaxed);
        if sent != 0 {
            self.worth.store(nanos_now().saturating_sub(sent) < window().as_nanos() as u64, Ordering::Relaxed);
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
        s.came(); // this one came at once
        s.drained();
        assert!(s.spinning(), "frames come within a window again");
    }

    #[test]
    fn a_client_whose_answers_come_late_spins_only_to_probe() {
        if window().is_zero() {
            return;
        }
        let e = Expect::default();
        e.expect();
        assert!(e.spinning(), "a first call spins");
        std::thread::sleep(window() + Duration::from_millis(1));
        e.answered(); // late: a hold that waited, say
        assert!(!e.spinning());
        let spins = (0..PROBE_EVERY * 2)
            .filter(|_| {
                e.expect();
                let s = e.spinning();
                e.until.store(0, Ordering::Relaxed); // as if its window ran out
                s
            })
            .count();
        assert_eq!(spins, 2, "one call in {PROBE_EVERY} spins while answers come late");
        e.expect();
        e.answered(); // at once
        e.expect();
        assert!(e.spinning(), "answers come quickly again: every call spins");
    }
}
