//! # tinystore
//!
//! Channels and locks for the processes of one application, in one Rust
//! engine that Python, Node and Go programs use in-process too.
//!
//! - **Channels**: messages to whoever listens now, in branches, with a
//!   bounded log per branch and an exact count of what a slow reader missed;
//!   publish inside a SQL transaction, delivered at commit.
//! - **Locks**: one holder of a key at a time, with leases, `maxHold`,
//!   semaphores, and fences: 128-bit numbers that grow across restarts, so a
//!   late writer can be refused.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use tinystore::{Store, sql};
//!
//! #[derive(Serialize, Deserialize, Clone)]
//! struct ChatEvent { kind: String, id: i64 }
//!
//! # fn main() -> tinystore::Result<()> {
//! let store = Store::open("data")?;
//! let events = store.channel::<ChatEvent>("chat-events").open()?;
//! let sub = events.under(7).subscribe(|m| println!("message {}", m.value.id))?;
//! events.under(7).publish(&ChatEvent { kind: "message".into(), id: 1 })?;
//!
//! let summaries = store.lock("summaries").open()?;
//! summaries.hold(7, |lease| -> tinystore::Result<()> {
//!     println!("writing with fence {}", lease.fence().padded());
//!     Ok(())
//! })?;
//! sub.stop();
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod channels;
pub mod cli;
mod error;
mod fence;
mod key;
pub mod limits;
pub mod locks;
pub mod runtime;
pub mod spin;
pub mod sql;
pub mod status;
mod store;
mod client;
pub use client::LoopReader;
mod server;
mod tls;
pub mod wire;

pub use channels::{Branch, Channel, Delivery, Message, Messages, Missed, MissedReason, Subscriber, Subscription};
pub use error::{Error, ErrorKind, Result};
pub use fence::Fence;
pub use key::Key;
pub use locks::{Lease, Lock, Permit, Semaphore};
pub use sql::{Database, Done, Tx, WriterTurn};
pub use store::{ConnectOptions, OpenOptions, Publish, RawLock, Store, StoreStatus, unix_millis};

/// The version of this crate.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
