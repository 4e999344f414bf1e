//! Python values to core values and back: keys, durations, SQL values.
//! Type conversion only; the rules (key length, duration ranges) are the core's.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyMemoryView, PyString};
use tinystore::sql::SqlValue;
use tinystore::{Error, ErrorKind, Key};

use crate::error;

/// A lock key or branch key: an `int` (its decimal digits) or a `str`.
pub fn key(obj: &Bound<'_, PyAny>) -> PyResult<Key> {
    let py = obj.py();
    let k = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("a key is an int or a str, like 42 or \"chat-42\"; got a bool"));
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => Key::from(i),
            Err(_) => Key::from(obj.extract::<i128>()?),
        }
    } else if let Ok(s) = obj.cast::<PyString>() {
        Key::from(s.to_cow()?.into_owned())
    } else {
        return Err(PyTypeError::new_err(format!(
            "a key is an int or a str, like 42 or \"chat-42\"; got {}",
            obj.get_type().name()?
        )));
    };
    error::check(py, k.check())?;
    Ok(k)
}

/// A duration: a string (`"250ms"`, `"30s"`, `"2m"`, `"1h"`), a number of
/// seconds, or a `datetime.timedelta`.
pub fn duration(obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = obj.py();
    if let Ok(s) = obj.cast::<PyString>() {
        return error::check(py, tinystore::limits::parse_duration(&s.to_cow()?));
    }
    let secs: f64 = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("a duration is a str like \"30s\", seconds, or a timedelta; got a bool"));
    } else if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
        obj.extract()?
    } else if obj.hasattr("total_seconds")? {
        obj.call_method0("total_seconds")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "a duration is a str like \"30s\", a number of seconds, or a timedelta; got {}",
            obj.get_type().name()?
        )));
    };
    Duration::try_from_secs_f64(secs).map_err(|_| {
        error::to_py(py, Error::new(ErrorKind::Invalid, format!("a duration is 0 or more seconds, like 30 or \"30s\"; got {secs}")))
    })
}

/// An optional duration (`None` stays `None`).
pub fn opt_duration(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match obj {
        Some(o) if !o.is_none() => duration(o).map(Some),
        _ => Ok(None),
    }
}

/// Parses a duration the way every argument of the package does; gives seconds.
#[pyfunction]
pub fn parse_duration(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    duration(value).map(|d| d.as_secs_f64())
}

/// Checks a channel, lock, semaphore or database name (raises `InvalidError`).
#[pyfunction]
pub fn check_name(py: Python<'_>, what: &str, name: &str) -> PyResult<()> {
    error::check(py, tinystore::limits::check_name(what, name))
}

/// A SQL parameter: `None`, `bool`, `int`, `float`, `str`, `bytes`.
pub fn sql_value(obj: &Bound<'_, PyAny>) -> PyResult<SqlValue> {
    if obj.is_none() {
        Ok(SqlValue::Null)
    } else if obj.is_instance_of::<PyBool>() {
        Ok(SqlValue::Integer(obj.extract::<bool>()? as i64))
    } else if obj.is_instance_of::<PyInt>() {
        Ok(SqlValue::Integer(obj.extract()?))
    } else if obj.is_instance_of::<PyFloat>() {
        Ok(SqlValue::Real(obj.extract()?))
    } else if let Ok(s) = obj.cast::<PyString>() {
        Ok(SqlValue::Text(s.to_cow()?.into_owned()))
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(SqlValue::Blob(b.as_bytes().to_vec()))
    } else if obj.is_instance_of::<PyByteArray>() || obj.is_instance_of::<PyMemoryView>() {
        let bytes = obj.py().get_type::<PyBytes>().call1((obj,))?;
        Ok(SqlValue::Blob(bytes.cast::<PyBytes>()?.as_bytes().to_vec()))
    } else {
        Err(PyTypeError::new_err(format!(
            "a SQL parameter is None, bool, int, float, str or bytes; got {}",
            obj.get_type().name()?
        )))
    }
}

/// A SQL value as Python: `None`, `int`, `float`, `str` or `bytes`.
pub fn sql_to_py(py: Python<'_>, v: &SqlValue) -> PyResult<Py<PyAny>> {
    use pyo3::IntoPyObjectExt;
    match v {
        SqlValue::Null => Ok(py.None()),
        SqlValue::Integer(i) => i.into_py_any(py),
        SqlValue::Real(f) => f.into_py_any(py),
        SqlValue::Text(s) => s.into_py_any(py),
        SqlValue::Blob(b) => Ok(PyBytes::new(py, b).into_any().unbind()),
    }
}
