//! Python values to core values and back: keys, durations, SQL values.
//! Type conversion only; the rules (key length, duration ranges) are the core's.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyMemoryView, PyString};
use tinystore::sql::SqlValue;
use tinystore::limits::DurationUnit;
use tinystore::{Error, ErrorKind, Key};

use crate::error;

/// A lock key or branch key: an `int` (its decimal digits, however large)
/// or a `str`.
pub fn key(obj: &Bound<'_, PyAny>) -> PyResult<Key> {
    let py = obj.py();
    let k = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("a key is an int or a str, like 42 or \"chat-42\"; got a bool"));
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => Key::from(i),
            // Past 64 bits: the same digits Python prints (the core checks the length).
            Err(_) => Key::from(obj.str()?.to_cow()?.into_owned()),
        }
    } else if let Ok(s) = obj.cast::<PyString>() {
        match s.to_cow() {
            Ok(text) => Key::from(text.into_owned()),
            // A lone surrogate: no UTF-8 for it, in any language.
            Err(_) => {
                return Err(error::to_py(py, Error::new(
                    ErrorKind::Invalid,
                    r#"a key is text that UTF-8 can carry: this one has a lone surrogate (like "\ud800"), which no other language could name; mend it first (for example text.encode("utf-8", "replace").decode())"#,
                )));
            }
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "a key is an int or a str, like 42 or \"chat-42\"; got {}",
            obj.get_type().name()?
        )));
    };
    error::check(py, k.check())?;
    Ok(k)
}

/// A value as an error message shows it: a number of a thousand digits is
/// cut short.
fn shown(obj: &Bound<'_, PyAny>) -> String {
    let text = obj.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".to_owned());
    if text.len() <= 40 {
        return text;
    }
    format!("{}... ({} characters)", &text[..text.char_indices().nth(24).map_or(text.len(), |(i, _)| i)], text.chars().count())
}

/// A duration, the option `what`: a string (`"250ms"`, `"30s"`, `"2m"`,
/// `"1h"`), a number of seconds, or a `datetime.timedelta`. The core's rule
/// reads it (`InvalidError` when negative, not finite or 1e12 s and more);
/// `TypeError` for another type.
pub fn duration(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = obj.py();
    if let Ok(s) = obj.cast::<PyString>() {
        return error::check(py, tinystore::limits::parse_duration(&s.to_cow()?));
    }
    let secs: f64 = if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("{what} is a duration: a str like \"30s\", seconds, or a timedelta; got a bool")));
    } else if obj.is_instance_of::<PyInt>() {
        // An int too large for an i64 is too large for any duration: the
        // core refuses it as infinite.
        obj.extract::<i64>().map_or(f64::INFINITY, |i| i as f64)
    } else if obj.is_instance_of::<PyFloat>() {
        obj.extract()?
    } else if obj.hasattr("total_seconds")? {
        obj.call_method0("total_seconds")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} is a duration: a str like \"30s\", a number of seconds, or a timedelta; got {}",
            obj.get_type().name()?
        )));
    };
    error::check(py, tinystore::limits::duration_from_number(what, secs, DurationUnit::Seconds, shown(obj)))
}

/// A semaphore's limit: an `int`, which the core checks is 1 to
/// 4294967295 (`InvalidError`). `TypeError` for another type.
pub fn limit(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "a semaphore's limit is an int from 1 to 4294967295, like 3; got {}",
            obj.get_type().name()?
        )));
    }
    // An int past 64 bits is past any limit: the core refuses it as infinite.
    let n = obj.extract::<i64>().map_or(f64::INFINITY, |i| i as f64);
    error::check(obj.py(), tinystore::limits::semaphore_limit(n, shown(obj)))
}

/// An optional duration, the option `what` (`None` stays `None`).
pub fn opt_duration(what: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match obj {
        Some(o) if !o.is_none() => duration(what, o).map(Some),
        _ => Ok(None),
    }
}

/// Parses a duration the way every argument of the package does; gives seconds.
#[pyfunction]
pub fn parse_duration(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    duration("a duration", value).map(|d| d.as_secs_f64())
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
        obj.extract().map(SqlValue::Integer).map_err(|_| {
            error::to_py(
                obj.py(),
                Error::new(
                    ErrorKind::Invalid,
                    format!(
                        "a SQL integer is 64-bit (SQLite's), from -9223372036854775808 to 9223372036854775807; \
                         got {}: bind a larger number as text (str(n)) or a float",
                        shown(obj)
                    ),
                ),
            )
        })
    } else if obj.is_instance_of::<PyFloat>() {
        Ok(SqlValue::Real(obj.extract()?))
    } else if let Ok(s) = obj.cast::<PyString>() {
        match s.to_cow() {
            Ok(text) => Ok(SqlValue::Text(text.into_owned())),
            // A lone surrogate: no UTF-8 for it, which SQLite's text is.
            Err(_) => Err(error::to_py(
                obj.py(),
                Error::new(
                    ErrorKind::Invalid,
                    r#"a SQL text parameter is text that UTF-8 can carry: this one has a lone surrogate (like "\ud800"); mend it first (for example text.encode("utf-8", "replace").decode()), or bind bytes"#,
                ),
            )),
        }
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

/// `json`'s C scanner and `json.loads`, looked up once.
struct Json {
    /// `json.scanner.c_make_scanner(json.decoder.JSONDecoder())`, if this
    /// Python has the C accelerator.
    scan: Option<Py<PyAny>>,
    loads: Py<PyAny>,
}

static JSON: pyo3::sync::PyOnceLock<Json> = pyo3::sync::PyOnceLock::new();

/// A message's JSON as the Python value `json.loads` makes of it, errors
/// included (a `ValueError` for text that is not JSON). Calls the C scanner
/// directly: `json.loads` adds three Python frames and an encoding guess per
/// message, about 1.5 us of the few a delivery costs.
pub fn json_value<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let json = JSON.get_or_try_init(py, || -> PyResult<Json> {
        let scanner = py.import("json.scanner")?.getattr("c_make_scanner")?;
        let scan = if scanner.is_none() {
            None
        } else {
            Some(scanner.call1((py.import("json.decoder")?.getattr("JSONDecoder")?.call0()?,))?.unbind())
        };
        Ok(Json { scan, loads: py.import("json")?.getattr("loads")?.unbind() })
    })?;
    if let (Some(scan), Ok(text)) = (&json.scan, std::str::from_utf8(data)) {
        let s = PyString::new(py, text);
        // Anything but one value spanning the whole text (leading or
        // trailing spaces, an error) goes to `json.loads`, for its exact
        // value or error.
        if let Ok(found) = scan.bind(py).call1((&s, 0)) {
            let (value, end): (Bound<'py, PyAny>, usize) = found.extract()?;
            if end == s.len()? {
                return Ok(value);
            }
        }
    }
    json.loads.bind(py).call1((PyBytes::new(py, data),))
}
