//! The limits and defaults of the engine, and the checks of names and durations.

use std::time::Duration;

use crate::base::error::{Error, Result};

/// The largest message a channel takes: 1 MiB of JSON.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// A message nests arrays and objects at most 100 deep: every binding's
/// decoder reads that (serde_json, the Rust API's and the wire's, stops at 127).
pub const MAX_MESSAGE_DEPTH: usize = 100;
/// A branch's log keeps at most its newest 1,024 messages...
pub const BRANCH_LOG_MESSAGES: usize = 1024;
/// ...and at most 4 MiB of them.
pub const BRANCH_LOG_BYTES: usize = 4 << 20;
/// Every channel's messages together stay within 64 MiB of the store's memory.
pub const STORE_CHANNEL_BYTES: usize = 64 << 20;
/// A store takes at most 10,000 subscriptions.
pub const MAX_SUBSCRIPTIONS: usize = 10_000;
/// A connection's pending output stays within 8 MiB.
pub const CONNECTION_PENDING_BYTES: usize = 8 << 20;
/// A lock or branch key is 1 to 1,024 bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The default ttl of a lease: 30 seconds.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// How long a connected client waits for the store's answer to a request
/// (beyond a hold's own `wait`) before failing it with `timeout`: an owner
/// frozen or overloaded must not hang its clients' calls forever.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `wait` of `hold`: 10 seconds.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
/// How long a transaction's messages may keep the later transactions' of
/// the same channel waiting (CHAN-03): from the moment its ticket was taken,
/// before its commit, to the moment the store has its messages. Past it the
/// ticket is given up: the messages behind go on, its own are refused.
pub const TX_ORDER_BOUND: Duration = Duration::from_secs(2);
/// The shortest ttl: 1 second.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest ttl: 1 hour.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// Checks a channel, lock, semaphore or database name: `[a-z0-9][a-z0-9_-]{0,63}`.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} name {name:?} is out of rule: use 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit, like \"chat-events\""
        )))
    }
}

/// Checks a ttl: 1 s to 1 h.
pub fn check_ttl(ttl: Duration) -> Result<Duration> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl {} is out of range: give 1s to 1h, like \"30s\"",
            format_duration(ttl)
        )));
    }
    Ok(ttl)
}

/// The longest `wait`, `maxHold` or written duration: under 10^12 seconds
/// (past that, a deadline would not fit the clock).
pub const MAX_SPAN: Duration = Duration::from_secs(1_000_000_000_000);

/// Checks a `wait` or `maxHold`: positive, and under [`MAX_SPAN`].
pub fn check_positive(what: &str, d: Duration) -> Result<Duration> {
    if d.is_zero() {
        return Err(Error::invalid(format!("{what} must be positive, like \"10s\"; got 0")));
    }
    if d < Duration::from_millis(1) {
        // The store counts leases and waits in milliseconds.
        return Err(Error::invalid(format!("{what} is 1ms or more, like \"10s\"; got {}ns", d.as_nanos())));
    }
    if d >= MAX_SPAN {
        return Err(Error::invalid(format!(
            "{what} of {} seconds is too long: give under 10^12 seconds, like \"10s\" or \"1h\"",
            d.as_secs()
        )));
    }
    Ok(d)
}

/// How a language counts a duration it gives as a number: Python in
/// seconds, JavaScript in milliseconds. Go gives nanoseconds as an integer
/// ([`duration_from_nanos`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationUnit {
    /// Seconds (Python's numbers and `timedelta.total_seconds()`).
    Seconds,
    /// Milliseconds (JavaScript's numbers).
    Milliseconds,
}

/// A duration given as a number of `unit`s, the option `what` (`ttl`,
/// `wait`, ...): finite, 0 or more, and under [`MAX_SPAN`]; `got` is the
/// value as the caller wrote it, for the message. The rule of every
/// binding, here once; [`check_ttl`] and [`check_positive`] check the range
/// of each option after. Errors with `invalid`.
pub fn duration_from_number(what: &str, n: f64, unit: DurationUnit, got: impl std::fmt::Display) -> Result<Duration> {
    let (secs, unit_name, max, example) = match unit {
        DurationUnit::Seconds => (n, "seconds", "10^12", "30 or \"30s\""),
        DurationUnit::Milliseconds => (n / 1000.0, "milliseconds", "10^15", "30000 or '30s'"),
    };
    // NaN fails the range too.
    if !(0.0..MAX_SPAN.as_secs_f64()).contains(&secs) {
        return Err(Error::invalid(format!(
            "{what} is a duration: a number of {unit_name} (finite, 0 or more, under {max}: about 31,000 years) or text, like {example}; got {got}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration given as nanoseconds (Go's `time.Duration`), the option
/// `what`: 0 or more. Errors with `invalid`, the value written as Go
/// prints it (`-5s`).
pub fn duration_from_nanos(what: &str, ns: i64) -> Result<Duration> {
    if ns < 0 {
        let d = Duration::from_nanos(ns.unsigned_abs());
        let shown = if d.subsec_nanos().is_multiple_of(1_000_000) { format_duration(d) } else { format!("{}ns", ns.unsigned_abs()) };
        return Err(Error::invalid(format!("{what} is a duration of 0 or more, like 30*time.Second; got -{shown}")));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// The most permits a semaphore has: its limit is a `u32`.
pub const MAX_SEMAPHORE_LIMIT: u32 = u32::MAX;

/// A semaphore's limit given as a number: a whole number from 1 to
/// 4,294,967,295. `got` is the value as the caller wrote it. Errors with
/// `invalid`.
pub fn semaphore_limit(n: f64, got: impl std::fmt::Display) -> Result<u32> {
    if n.fract() != 0.0 || !(1.0..=MAX_SEMAPHORE_LIMIT as f64).contains(&n) {
        return Err(Error::invalid(format!(
            "a semaphore's limit is a whole number from 1 to {MAX_SEMAPHORE_LIMIT}, like 3; got {got}"
        )));
    }
    Ok(n as u32)
}

/// Parses a duration written as a number and a unit: `"250ms"`, `"30s"`,
/// `"2m"`, `"1h"` (also `"1.5s"`), or several in a row, largest first or
/// not: `"1m30s"`, `"1h 30m"`. Errors with `invalid` otherwise, saying
/// what was wrong (a negative duration, a number without its unit).
pub fn parse_duration(text: &str) -> Result<Duration> {
    let not_understood = || {
        Error::invalid(format!(
            "duration {text:?} is not understood: write a number and a unit of ms, s, m or h, like \"250ms\", \"30s\", \"2m\", \"1h\" or \"1m30s\""
        ))
    };
    let t = text.trim();
    if t.starts_with('-') {
        return Err(Error::invalid(format!("duration {text:?} is negative: a duration is 0 or more, like \"30s\"")));
    }
    let (mut rest, mut total, mut parts) = (t, 0.0f64, 0);
    while !rest.is_empty() {
        let split = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(split);
        let after = after.trim_start();
        let (scale, unit) = if after.starts_with("ms") {
            (1e-3, 2)
        } else {
            match after.chars().next() {
                Some('s') => (1.0, 1),
                Some('m') => (60.0, 1),
                Some('h') => (3600.0, 1),
                _ => return Err(not_understood()),
            }
        };
        let n: f64 = num.parse().map_err(|_| not_understood())?;
        total += n * scale;
        parts += 1;
        rest = after[unit..].trim_start();
    }
    if parts == 0 || !total.is_finite() || total >= MAX_SPAN.as_secs_f64() {
        return Err(not_understood());
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_checks_rule_and_shows_example() {
        for good in ["chat-events", "a", "0", "summaries_2", &"a".repeat(64)] {
            check_name("channel", good).unwrap();
        }
        for bad in ["", "Chat", "-a", "_a", "a b", "a.b", &"a".repeat(65), "é"] {
            let e = check_name("channel", bad).unwrap_err();
            assert_eq!(e.code(), "invalid");
            assert!(e.message().contains("chat-events"), "{e}");
        }
    }

    #[test]
    fn names_durations_parse_and_refuse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1s500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration(" 30 s ").unwrap(), Duration::from_secs(30));
        for bad in ["", "30", "-1s", "1d", "s", "1e3s", "1h30", "1..5s", "m30s", "1m-30s"] {
            assert_eq!(parse_duration(bad).unwrap_err().code(), "invalid", "{bad}");
        }
        assert!(parse_duration("-1s").unwrap_err().message().contains("0 or more"));
        assert!(parse_duration("1h30").unwrap_err().message().contains("1m30s"));
        assert!(check_ttl(Duration::from_millis(999)).is_err());
        assert!(check_ttl(Duration::from_secs(3601)).is_err());
        check_ttl(Duration::from_secs(1)).unwrap();
        assert!(check_positive("wait", Duration::ZERO).is_err());
        // Counted in milliseconds: under one would be a try once, or no maxHold at all.
        let e = check_positive("maxHold", Duration::from_micros(500)).unwrap_err();
        assert_eq!(e.message(), "maxHold is 1ms or more, like \"10s\"; got 500000ns");
        check_positive("maxHold", Duration::from_millis(1)).unwrap();
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn names_durations_given_as_numbers_are_finite_and_not_negative() {
        assert_eq!(duration_from_number("ttl", 30.0, DurationUnit::Seconds, 30).unwrap(), Duration::from_secs(30));
        assert_eq!(duration_from_number("ttl", 1500.0, DurationUnit::Milliseconds, 1500).unwrap(), Duration::from_millis(1500));
        assert_eq!(duration_from_number("wait", 0.0, DurationUnit::Seconds, 0).unwrap(), Duration::ZERO);
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e12, 1e300] {
            let e = duration_from_number("wait", bad, DurationUnit::Seconds, bad).unwrap_err();
            assert_eq!(e.code(), "invalid");
            assert!(e.message().starts_with("wait is a duration: a number of seconds"), "{e}");
            assert!(e.message().contains(&format!("got {bad}")), "{e}");
        }
        let e = duration_from_number("ttl", 1e15, DurationUnit::Milliseconds, "1e15").unwrap_err();
        assert!(e.message().contains("milliseconds") && e.message().contains("30000"), "{e}");
        assert_eq!(duration_from_nanos("ttl", 2_000_000_000).unwrap(), Duration::from_secs(2));
        assert_eq!(duration_from_nanos("ttl", 0).unwrap(), Duration::ZERO);
        let e = duration_from_nanos("wait", -5_000_000_000).unwrap_err();
        assert!(e.message().contains("wait is a duration of 0 or more") && e.message().ends_with("got -5s"), "{e}");
        assert!(duration_from_nanos("wait", -7).unwrap_err().message().ends_with("got -7ns"));
    }

    #[test]
    fn names_a_semaphore_limit_is_a_whole_number_from_1_to_2_32_minus_1() {
        assert_eq!(semaphore_limit(3.0, 3).unwrap(), 3);
        assert_eq!(semaphore_limit(4294967295.0, 4294967295u64).unwrap(), u32::MAX);
        for bad in [0.0, -1.0, 1.5, 4294967296.0, f64::NAN, f64::INFINITY] {
            let e = semaphore_limit(bad, bad).unwrap_err();
            assert_eq!(e.code(), "invalid");
            assert!(e.message().contains("from 1 to 4294967295, like 3") && e.message().contains(&format!("got {bad}")), "{e}");
        }
    }
}
