//! The native half of the Python package `tinystore` (`tinystore._native`).
//!
//! Thin on purpose: each function turns Python values into core values, calls
//! the core (crate `tinystore`), and turns the answer back. Lease rules,
//! limits and validation live in the core; the friendly API, defaults and
//! docstrings live in `python/tinystore/*.py`.
//!
//! Nothing here blocks the caller's event loop. A call either completes at
//! once (most calls of an owned store) or hands back a [`pending::Pending`]
//! that the Python layer starts on a [`pending::Completer`]: the core runs it
//! on its own runtime, and the result comes back to the loop's thread through
//! a socket the loop watches. Engine threads never take the GIL. A connected
//! store's own socket is read by the loop's thread too (`loopread`), so
//! an answer usually completes its call there, with no other thread woken.

use pyo3::prelude::*;

mod channels;
mod convert;
mod error;
mod locks;
mod loopread;
mod pending;
mod sql;
mod store;

#[pymodule(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", tinystore::version())?;
    m.add_function(wrap_pyfunction!(store::open, m)?)?;
    m.add_function(wrap_pyfunction!(store::connect, m)?)?;
    m.add_function(wrap_pyfunction!(store::cli, m)?)?;
    m.add_function(wrap_pyfunction!(error::set_error_classes, m)?)?;
    m.add_function(wrap_pyfunction!(locks::holder_unique, m)?)?;
    m.add_function(wrap_pyfunction!(convert::parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(convert::check_name, m)?)?;
    m.add_class::<pending::Pending>()?;
    m.add_class::<pending::Completer>()?;
    m.add_class::<store::NativeStore>()?;
    m.add_class::<loopread::NativeLoopReader>()?;
    m.add_class::<channels::NativeBranch>()?;
    m.add_class::<channels::NativeSubscription>()?;
    m.add_class::<locks::NativeLock>()?;
    m.add_class::<locks::NativeLease>()?;
    m.add_class::<sql::NativeDatabase>()?;
    m.add_class::<sql::NativeTx>()?;
    Ok(())
}
