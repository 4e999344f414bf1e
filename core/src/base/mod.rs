//! The base layer: what every layer above speaks in. Errors, names and
//! keys, fences, limits and durations; no state, no threads.

pub(crate) mod error;
pub(crate) mod fence;
pub(crate) mod key;
pub mod limits;
