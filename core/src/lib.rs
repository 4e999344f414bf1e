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

// The layers, each importing only the ones above it in this list:
// base < runtime < engine < net < api (docs/architecture.md). The public
// paths of the crate are re-exported here, as they were before the layers.
mod base;
pub mod runtime;
mod engine;
mod net;
mod api;

pub mod cli;

/// Channels: messages to whoever listens now, in branches.
pub mod channels {
    pub use crate::api::channels::{Branch, Channel, ChannelBuilder, Delivery, Message, Messages, Subscriber, Subscription};
    pub use crate::api::subscription::RawSubscription;
    pub use crate::engine::channels::{BranchStatus, Event, Missed, MissedReason, Msg, Resume, Scope};
}

/// Locks and semaphores: one holder of a key at a time (or `limit` permits).
pub mod locks {
    pub use crate::api::locks::{
        HeldLease, Lease, LeaseState, Lock, LockBuilder, LockHandle, LockOptions, Permit, Semaphore, SemaphoreBuilder, end_of_hold, end_of_hold_async,
    };
    pub use crate::api::lease::RawLease;
    pub use crate::engine::locks::{Holder, HolderStatus, Kind, KeyStatus, Terms};
}

pub use api::cluster;
pub use api::sql;
pub use api::status;
pub use base::limits;
pub use net::client::LoopReader;
pub use net::spin;
pub use net::wire;

pub use channels::{Branch, Channel, Delivery, Message, Messages, Missed, MissedReason, Subscriber, Subscription};
pub use base::error::{Error, ErrorKind, Result};
pub use base::fence::Fence;
pub use base::key::Key;
pub use locks::{Lease, Lock, Permit, Semaphore};
pub use sql::{Database, Done, Tx, WriterTurn};
pub use api::locks::RawLock;
pub use api::publish::Publish;
pub use api::store::{ConnectOptions, OpenOptions, Store, unix_millis};
pub use engine::StoreStatus;

/// The version of this crate.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
