//! Engine errors into JavaScript errors, in one place.
//!
//! Each engine error crosses as a JavaScript `Error` whose message is
//! `tinystore:<code>:<message>`; `lib/errors.ts` turns it into the
//! `TinyStoreError` subclass of that code (`TimeoutError`, `LostError`, ...).

/// The prefix `lib/errors.ts` recognises.
const PREFIX: &str = "tinystore:";

/// An engine error as a napi error carrying its code.
pub fn to_napi(e: tinystore::Error) -> napi::Error {
    coded(e.code(), e.message())
}

/// A napi error of engine `code` (`invalid`, `closed`, ...) with `message`.
pub fn coded(code: &str, message: &str) -> napi::Error {
    napi::Error::from_reason(format!("{PREFIX}{code}:{message}"))
}

/// An `invalid` error: a JavaScript value of the wrong type or range.
pub fn invalid(message: impl AsRef<str>) -> napi::Error {
    coded("invalid", message.as_ref())
}

/// An `internal` error: a blocking task of this binding failed.
pub fn internal(e: impl std::fmt::Display) -> napi::Error {
    coded("internal", &format!("a tinystore task failed: {e}"))
}

/// `Result` of the engine into `napi::Result`.
pub trait IntoNapi<T> {
    fn napi(self) -> napi::Result<T>;
}

impl<T> IntoNapi<T> for tinystore::Result<T> {
    fn napi(self) -> napi::Result<T> {
        self.map_err(to_napi)
    }
}

/// Runs blocking engine work on napi's blocking pool and maps its error.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> tinystore::Result<T> + Send + 'static) -> napi::Result<T> {
    napi::bindgen_prelude::spawn_blocking(f).await.map_err(internal)?.napi()
}
