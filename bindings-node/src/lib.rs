//! The native layer of the `tinystore` npm package: a thin napi-rs crate that
//! turns each JavaScript call into a call of the `tinystore` engine and back.
//!
//! Nothing here decides anything about leases, limits or names: the engine
//! does. The idiomatic API users read is the TypeScript layer in `lib/`.
//! Blocking engine calls (opening a store or a database, SQL) run on
//! napi's blocking pool, so the JavaScript event loop never waits on them.

// mimalloc for the addon's own allocations (V8's and Node's are theirs):
// malloc and free were 15% of a pipelined burst's CPU with glibc's
// (docs/performance-node.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

// What JavaScript calls is public here. napi-derive registers a free
// function only outside cfg(test), so in the test build a private one
// would look unused.
pub use convert::check_key;
pub use database::{NativeDatabase, NativeTx};
pub use fence::{fence_of, fence_padded};
pub use lock::{NativeLease, NativeLock, new_holder};
pub use store::{NativeStore, cli};
pub use subscription::NativeSubscription;

/// The version of the engine this package carries.
#[napi_derive::napi]
pub fn version() -> String {
    tinystore::version().to_owned()
}

/// For a program that exits: writes what every connected store of this
/// process has waiting (publishes held for the event loop's turn to end
/// among them), waiting up to 2 s for each socket to take it; none are
/// held from then on. The package calls it on `process.on('exit')`.
#[napi_derive::napi]
pub fn flush_publishes_before_exit() {
    uvread::flush_all_before_exit();
}
