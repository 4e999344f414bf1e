//! JavaScript values into engine values: keys, durations, SQL values.
//! Only type conversion lives here; the engine checks every rule.

use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Buffer, Either, Either3, Either5, Either7, Null, Uint8Array, Undefined};
use napi_derive::napi;
use tinystore::Key;
use tinystore::limits::DurationUnit;
use tinystore::sql::SqlValue;

use crate::errors::{IntoNapi, invalid};

/// A key as JavaScript gives it: a string, an integer number or a bigint.
#[napi]
pub type JsKey = Either3<String, f64, BigInt>;

/// A duration as JavaScript gives it: `'30s'` or a number of milliseconds.
#[napi]
pub type JsDuration = Either<String, f64>;

/// A SQL parameter as JavaScript gives it.
#[napi]
pub type JsSqlParam = Either7<Null, Undefined, bool, f64, BigInt, String, Uint8Array>;

/// A SQL value as JavaScript gets it: an integer past 2^53 as a bigint.
#[napi]
pub type JsSqlValue = Either5<Null, f64, BigInt, String, Buffer>;

/// The largest integer a JavaScript number carries exactly.
const MAX_SAFE: i64 = (1 << 53) - 1;

/// A number as JavaScript writes it (`NaN`, `Infinity`, `1.5`), for messages.
pub fn js_number(n: f64) -> String {
    match n {
        _ if n.is_nan() => "NaN".to_owned(),
        f64::INFINITY => "Infinity".to_owned(),
        f64::NEG_INFINITY => "-Infinity".to_owned(),
        _ => n.to_string(),
    }
}

/// A key: integers are their decimal text, so `7`, `7n` and `"7"` are one key.
pub fn key(k: JsKey) -> napi::Result<Key> {
    match k {
        Either3::A(s) => Ok(Key::from(s)),
        Either3::B(n) if n.fract() == 0.0 && n.abs() <= MAX_SAFE as f64 => Ok(Key::from(n as i64)),
        Either3::B(n) => Err(invalid(format!(
            "a key is a string or an integer, like 42 or 'chat-42'; got the number {}",
            js_number(n)
        ))),
        Either3::C(b) => {
            let (negative, value, lossless) = b.get_u128();
            if !lossless {
                return Err(invalid("a bigint key fits in 128 bits"));
            }
            Ok(if negative { Key::from(format!("-{value}")) } else { Key::from(value) })
        }
    }
}

/// Checks a text key by the engine's rule (1 to 1,024 bytes), for
/// `under()` and `hold()` to refuse it at once.
#[napi]
pub fn check_key(key: String) -> napi::Result<()> {
    Key::parse(key).napi().map(drop)
}

/// A path of branch keys.
pub fn keys(path: Vec<JsKey>) -> napi::Result<Vec<Key>> {
    path.into_iter().map(key).collect()
}

/// A duration, the option `what` (`ttl`, `wait`, ...): text or a number
/// of milliseconds, both read by the engine's rules (`"250ms"`, `"30s"`,
/// `"2m"`, `"1h"`; a number finite, 0 or more, under 10^15).
pub fn duration(what: &str, d: JsDuration) -> napi::Result<Duration> {
    match d {
        Either::A(text) => tinystore::limits::parse_duration(&text).napi(),
        Either::B(ms) => tinystore::limits::duration_from_number(what, ms, DurationUnit::Milliseconds, js_number(ms)).napi(),
    }
}

/// An optional duration (see [`duration`]).
pub fn opt_duration(what: &str, d: Option<JsDuration>) -> napi::Result<Option<Duration>> {
    d.map(|d| duration(what, d)).transpose()
}

/// A SQL parameter: `undefined` binds as null, a boolean as 0 or 1, an
/// integer number as an integer, any other number as a real (`NaN` and
/// infinities are then refused by the engine's `Statement::check`).
pub fn sql_param(p: JsSqlParam) -> napi::Result<SqlValue> {
    Ok(match p {
        Either7::A(_) | Either7::B(_) => SqlValue::Null,
        Either7::C(b) => SqlValue::Integer(b as i64),
        Either7::D(n) if n.fract() == 0.0 && n.abs() <= MAX_SAFE as f64 => SqlValue::Integer(n as i64),
        Either7::D(n) => SqlValue::Real(n),
        Either7::E(b) => {
            let (v, lossless) = b.get_i64();
            if !lossless {
                return Err(invalid("a bigint SQL parameter fits in 64 bits (SQLite's integer)"));
            }
            SqlValue::Integer(v)
        }
        Either7::F(s) => SqlValue::Text(s),
        Either7::G(b) => SqlValue::Blob(b.to_vec()),
    })
}

/// SQL parameters.
pub fn sql_params(ps: Vec<JsSqlParam>) -> napi::Result<Vec<SqlValue>> {
    ps.into_iter().map(sql_param).collect()
}

/// An integer for JavaScript: a number up to 2^53, a bigint past it.
pub fn int(n: i64) -> Either<f64, BigInt> {
    if n.abs() <= MAX_SAFE { Either::A(n as f64) } else { Either::B(BigInt::from(n)) }
}

/// A SQL value for JavaScript.
pub fn sql_value(v: SqlValue) -> JsSqlValue {
    match v {
        SqlValue::Null => Either5::A(Null),
        SqlValue::Integer(n) => match int(n) {
            Either::A(f) => Either5::B(f),
            Either::B(b) => Either5::C(b),
        },
        SqlValue::Real(f) => Either5::B(f),
        SqlValue::Text(s) => Either5::D(s),
        SqlValue::Blob(b) => Either5::E(b.into()),
    }
}
