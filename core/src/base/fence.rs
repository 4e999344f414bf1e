//! Fences: 128-bit numbers that grow with every lease, across restarts too.

use std::fmt;
use std::str::FromStr;

use crate::base::error::{Error, Result};

/// A fence: the store's epoch in the high 64 bits, a count in the low 64.
///
/// Every lease a store gives has a fence larger than every fence it gave
/// before, within one open and across restarts (LOCK-02). Fences compare as
/// numbers; [`Fence::padded`] gives the 40-digit text that compares the same
/// way as a string (in SQL, say). `Display` prints the decimal digits, the
/// form the wire and every language binding use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Fence(u128);

impl Fence {
    /// The fence of `epoch` (high 64 bits) and `count` (low 64 bits).
    pub const fn new(epoch: u64, count: u64) -> Fence {
        Fence(((epoch as u128) << 64) | count as u128)
    }
    /// The fence whose value is `value`.
    pub const fn from_u128(value: u128) -> Fence {
        Fence(value)
    }
    /// The fence as one 128-bit number.
    pub const fn get(self) -> u128 {
        self.0
    }
    /// The store epoch (milliseconds since 1970 at the store's open, or the
    /// previous epoch plus one): the high 64 bits.
    pub const fn epoch(self) -> u64 {
        (self.0 >> 64) as u64
    }
    /// The count within the epoch: the low 64 bits.
    pub const fn count(self) -> u64 {
        self.0 as u64
    }
    /// The high and low 64-bit halves, as the C ABI and Go carry them.
    pub const fn halves(self) -> (u64, u64) {
        (self.epoch(), self.count())
    }
    /// The decimal digits zero-padded to 40 characters: compared as text,
    /// padded fences sort like the numbers (2^128 has 39 digits).
    pub fn padded(self) -> String {
        format!("{:040}", self.0)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Fence {
    type Err = Error;
    /// Parses decimal digits (padded or not), as `Display` and the wire write them.
    fn from_str(s: &str) -> Result<Fence> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(format!(
                "a fence is written as decimal digits, like \"18446744073709551617\"; got {s:?}"
            )));
        }
        s.parse::<u128>()
            .map(Fence)
            .map_err(|_| Error::invalid(format!("a fence fits in 128 bits (at most 39 digits); got {s:?}")))
    }
}

impl From<Fence> for u128 {
    fn from(f: Fence) -> u128 {
        f.0
    }
}

impl serde::Serialize for Fence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Fence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Fence, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
