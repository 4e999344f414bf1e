//! Engine futures that are often ready at once (publish, an uncontended
//! hold in the owning process): polled once on the JavaScript thread, and
//! only turned into a promise when they must wait.

use std::future::Future;

use futures::FutureExt;
use napi::Env;
use napi::bindgen_prelude::{Either, PromiseRaw, ToNapiValue};

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
        None => env.spawn_future(fut).map(Either::B),
    }
}
