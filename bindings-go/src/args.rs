//! Values crossing the ABI: text and bytes by pointer and length, keys and
//! SQL values as tagged [`TsValue`]s whose text lives in one byte buffer.

use tinystore::Key;
use tinystore::sql::SqlValue;

use crate::error::Res;

/// No value: SQL `NULL`.
pub const TS_NULL: u8 = 0;
/// A signed integer in `num`.
pub const TS_INT: u8 = 1;
/// An unsigned integer, its bits in `num`.
pub const TS_UINT: u8 = 2;
/// A float in `real`.
pub const TS_REAL: u8 = 3;
/// UTF-8 text at `off..off+len` of the buffer that goes with the values.
pub const TS_TEXT: u8 = 4;
/// Bytes at `off..off+len` of the buffer that goes with the values.
pub const TS_BLOB: u8 = 5;

/// A key or a SQL value. Text and bytes are not pointed to but placed at
/// `off..off+len` of a byte buffer passed alongside, so an array of values
/// holds no pointers (as cgo requires of memory it passes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TsValue {
    /// One of `TS_NULL`, `TS_INT`, `TS_UINT`, `TS_REAL`, `TS_TEXT`, `TS_BLOB`.
    pub kind: u8,
    pub num: i64,
    pub real: f64,
    pub off: usize,
    pub len: usize,
}

/// Bytes owned by the library, valid as long as what gave them says.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TsStr {
    pub ptr: *const u8,
    pub len: usize,
}

impl TsStr {
    pub(crate) fn of(b: &[u8]) -> TsStr {
        TsStr { ptr: ptr_of(b), len: b.len() }
    }
}

/// The pointer to `s`'s items, or null when it has none: an empty slice's
/// pointer is a small dangling value, which Go's garbage collector refuses
/// to find in a pointer-typed variable ("invalid pointer found on stack").
pub(crate) fn ptr_of<T>(s: &[T]) -> *const T {
    if s.is_empty() { std::ptr::null() } else { s.as_ptr() }
}

/// The bytes at `ptr..ptr+len` (empty when `len` is 0, whatever `ptr` is).
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(ptr, len) } }
}

/// The UTF-8 text at `ptr..ptr+len`.
pub(crate) unsafe fn text<'a>(ptr: *const u8, len: usize) -> Res<&'a str> {
    utf8(unsafe { bytes(ptr, len) })
}

fn utf8(b: &[u8]) -> Res<&str> {
    std::str::from_utf8(b).map_err(|_| invalid("text must be valid UTF-8").into())
}

pub(crate) fn invalid(message: impl Into<String>) -> tinystore::Error {
    tinystore::Error::new(tinystore::ErrorKind::Invalid, message)
}

/// `n` values and the buffer their text and bytes live in.
pub(crate) struct Values<'a> {
    vals: &'a [TsValue],
    buf: &'a [u8],
}

impl<'a> Values<'a> {
    pub(crate) unsafe fn new(vals: *const TsValue, n: usize, buf: *const u8, buf_len: usize) -> Values<'a> {
        let vals = if n == 0 || vals.is_null() { &[][..] } else { unsafe { std::slice::from_raw_parts(vals, n) } };
        Values { vals, buf: unsafe { bytes(buf, buf_len) } }
    }

    fn span(&self, v: &TsValue) -> Res<&'a [u8]> {
        let end = v.off.checked_add(v.len).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => Ok(&self.buf[v.off..end]),
            None => Err(tinystore::Error::new(tinystore::ErrorKind::Internal, "a value points past its buffer").into()),
        }
    }

    /// The values as keys: integers (their decimal text, as the core
    /// writes them) or text. The core checks their length where it uses them.
    pub(crate) fn keys(&self) -> Res<Vec<Key>> {
        self.vals
            .iter()
            .map(|v| match v.kind {
                TS_INT => Ok(Key::from(v.num)),
                TS_UINT => Ok(Key::from(v.num as u64)),
                TS_TEXT => Ok(Key::from(utf8(self.span(v)?)?)),
                _ => Err(invalid("a key is an integer or a string, like 42 or \"chat-42\"").into()),
            })
            .collect()
    }

    /// The values as SQL parameters.
    pub(crate) fn sql(&self) -> Res<Vec<SqlValue>> {
        self.vals
            .iter()
            .map(|v| match v.kind {
                TS_NULL => Ok(SqlValue::Null),
                TS_INT => Ok(SqlValue::Integer(v.num)),
                TS_UINT => i64::try_from(v.num as u64).map(SqlValue::Integer).map_err(|_| {
                    invalid(format!("{} does not fit a SQL integer (at most 9223372036854775807): bind it as text", v.num as u64)).into()
                }),
                TS_REAL => Ok(SqlValue::Real(v.real)),
                TS_TEXT => Ok(SqlValue::Text(utf8(self.span(v)?)?.to_owned())),
                TS_BLOB => Ok(SqlValue::Blob(self.span(v)?.to_vec())),
                k => Err(invalid(format!("unknown value kind {k}")).into()),
            })
            .collect()
    }
}

/// Values going out: the [`TsValue`]s and the buffer they point into.
#[derive(Default)]
pub(crate) struct OutValues {
    pub(crate) vals: Vec<TsValue>,
    pub(crate) buf: Vec<u8>,
}

impl OutValues {
    fn placed(&mut self, kind: u8, b: &[u8]) -> TsValue {
        let off = self.buf.len();
        self.buf.extend_from_slice(b);
        TsValue { kind, off, len: b.len(), ..Default::default() }
    }

    pub(crate) fn push_text(&mut self, s: &str) {
        let v = self.placed(TS_TEXT, s.as_bytes());
        self.vals.push(v);
    }

    pub(crate) fn push_sql(&mut self, v: &SqlValue) {
        let v = match v {
            SqlValue::Null => TsValue { kind: TS_NULL, ..Default::default() },
            SqlValue::Integer(i) => TsValue { kind: TS_INT, num: *i, ..Default::default() },
            SqlValue::Real(f) => TsValue { kind: TS_REAL, real: *f, ..Default::default() },
            SqlValue::Text(s) => self.placed(TS_TEXT, s.as_bytes()),
            SqlValue::Blob(b) => self.placed(TS_BLOB, b),
        };
        self.vals.push(v);
    }
}
