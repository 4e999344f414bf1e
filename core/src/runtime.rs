//! The engine's own background runtime: timers (waits, `maxHold`, ttl),
//! subscription delivery for the Rust API, the server and the client.
//!
//! It starts lazily, at the first thing that needs it, so a process that
//! forks before opening a store forks no engine threads. Threads do not
//! survive `fork()`: open stores in the child, not before forking.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The engine's runtime handle, started on first use (two worker threads).
pub fn handle() -> &'static Handle {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("tinystore")
                .enable_all()
                .build()
                .expect("tinystore could not start its runtime threads")
        })
        .handle()
}

/// Runs `fut` in the background on the engine's runtime.
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(fut)
}

/// Blocks the calling thread until `fut` completes, with the engine's runtime
/// entered so timers work. Must not be called from inside an async task.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let _guard = handle().enter();
    futures::executor::block_on(fut)
}
