//! The native layer of the `tinystore` npm package: a thin napi-rs crate that
//! turns each JavaScript call into a call of the `tinystore` engine and back.
//!
//! Nothing here decides anything about leases, limits or names: the engine
//! does. The idiomatic API users read is the TypeScript layer in `lib/`.
//! Blocking engine calls (opening a store or a database, SQL) run on
//! napi's blocking pool, so the JavaScript event loop never waits on them.

mod convert;
mod database;
mod errors;
mod fence;
mod lock;
mod ready;
mod settle;
mod store;
mod subscription;
mod uvread;

pub use database::{NativeDatabase, NativeTx};
pub use lock::{NativeLease, NativeLock};
pub use store::NativeStore;
pub use subscription::NativeSubscription;

/// The version of the engine this package carries.
#[napi_derive::napi]
pub fn version() -> String {
    tinystore::version().to_owned()
}
