//! Core errors as Python exceptions: the one place of the native crate that
//! turns a `tinystore::Error` into a `PyErr`.
//!
//! Which Python class each code becomes is decided once, in
//! `python/tinystore/errors.py`, which hands its table to
//! [`set_error_classes`] at import.

use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

static CLASSES: OnceLock<Py<PyDict>> = OnceLock::new();

/// Registers `{code: exception class}` (called once by `tinystore.errors`).
#[pyfunction]
pub fn set_error_classes(classes: Bound<'_, PyDict>) {
    let _ = CLASSES.set(classes.unbind());
}

/// The Python exception for a core error: the class registered for its code,
/// called with the core's message.
pub fn to_py(py: Python<'_>, e: tinystore::Error) -> PyErr {
    let class = CLASSES.get().and_then(|d| d.bind(py).get_item(e.code()).ok().flatten());
    match class.map(|c| c.call1((e.message(),))) {
        Some(Ok(exc)) => PyErr::from_value(exc),
        Some(Err(err)) => err,
        None => PyRuntimeError::new_err(e.to_string()),
    }
}

/// `to_py` for a `Result`.
pub fn check<T>(py: Python<'_>, r: tinystore::Result<T>) -> PyResult<T> {
    r.map_err(|e| to_py(py, e))
}

