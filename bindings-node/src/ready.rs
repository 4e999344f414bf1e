//! Engine futures as JavaScript values: polled once on the JavaScript thread
//! (publish, an uncontended hold in the owning process are often ready at
//! once), and otherwise completed later, settling a promise.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use napi::Env;
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};

use crate::errors::internal;

/// The value now if `fut` is ready at its first poll, else a promise of it.
pub fn now_or_promise<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<Either<T, PromiseRaw<'env, T>>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = napi::Result<T>> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let now = {
        // Engine futures may touch tokio (timers): poll inside its runtime.
        let _rt = tinystore::runtime::handle().enter();
        (&mut fut).now_or_never()
    };
    match now {
        Some(r) => r.map(Either::A),
        None => promise(env, fut).map(Either::B),
    }
}

/// A promise of `fut`, settled by whichever thread completes it.
///
/// Not napi's `spawn_future`: that runs the future on napi's own tokio
/// runtime, so an answer read by an engine thread wakes a napi thread,
/// which wakes the JavaScript thread. Here the future is polled on the
/// JavaScript thread first; when its answer is read on the JavaScript
/// thread too (a connected store's socket, see `uvread`), it completes
/// there; when an engine thread completes it, that thread settles the
/// promise itself.
pub fn promise<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = napi::Result<T>> + Send + 'static,
{
    let (settle, promise) = crate::settle::promise(env.raw())?;
    // Polled here first; completed on this thread when its answer is read
    // here (see uvread), else by an engine thread.
    tinystore::runtime::LoopTask::start(async move {
        // A panic rejects the promise instead of leaving it pending forever.
        match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(r) => settle.done(r),
            Err(_) => settle.done::<T>(Err(internal("the engine panicked while answering this call"))),
        }
    });
    Ok(PromiseRaw::new(env.raw(), promise))
}
