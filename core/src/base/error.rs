//! One error type for the whole engine, with a stable code per kind.

use std::fmt;

/// What kind of failure an [`Error`] is. Each kind has a stable code string
/// ([`ErrorKind::code`]) that every language binding and the wire use as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A wait ran out: `hold` found no free key within its `wait`. Code `timeout`.
    Timeout,
    /// The caller passed something out of rule: a bad name, key, duration or value. Code `invalid`.
    Invalid,
    /// A limit was reached: message size, subscriptions, pending output. Code `limit`.
    Limit,
    /// The store was closed by this program (`close` was called). Code `closed`.
    Closed,
    /// A lease ran out or was taken away before its holder let it go. Code `lost`.
    Lost,
    /// Another process owns the store directory. Code `owned`.
    Owned,
    /// The request contradicts what the store already has: a semaphore opened
    /// with another limit, a key the same holder already holds. Code `conflict`.
    Conflict,
    /// A SQL database stayed locked by another writer past the busy timeout. Code `busy`.
    Busy,
    /// A SQL statement failed, or a migration could not be applied. Code `sql`.
    Sql,
    /// A missing or wrong token, or a token without the right. Code `auth`.
    Auth,
    /// The operating system refused a file or socket operation. Code `io`.
    Io,
    /// The peer spoke something this side does not understand. Code `protocol`.
    Protocol,
    /// A bug in tinystore itself. Code `internal`.
    Internal,
    /// The store could not be reached: its connection stayed down past the
    /// request timeout (the message says since when), or was cut before the
    /// store answered a call already sent. Code `unavailable`.
    Unavailable,
}

impl ErrorKind {
    /// The stable code string of this kind (`"timeout"`, `"invalid"`, ...).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Limit => "limit",
            ErrorKind::Closed => "closed",
            ErrorKind::Lost => "lost",
            ErrorKind::Owned => "owned",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Busy => "busy",
            ErrorKind::Sql => "sql",
            ErrorKind::Auth => "auth",
            ErrorKind::Io => "io",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Internal => "internal",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// The kind whose [`code`](ErrorKind::code) is `code`, if any.
    pub fn from_code(code: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Every kind, in the order the bindings list them: the source of each
    /// binding's generated code list (core/tests/generated.rs).
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::Timeout,
        ErrorKind::Invalid,
        ErrorKind::Limit,
        ErrorKind::Closed,
        ErrorKind::Lost,
        ErrorKind::Owned,
        ErrorKind::Conflict,
        ErrorKind::Busy,
        ErrorKind::Sql,
        ErrorKind::Auth,
        ErrorKind::Io,
        ErrorKind::Protocol,
        ErrorKind::Internal,
        ErrorKind::Unavailable,
    ];

    /// What this kind means, in one line for a binding's docs (the variant's
    /// doc without its code).
    pub fn doc(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "A wait ran out: hold found no free key within its wait, and nothing ran.",
            ErrorKind::Invalid => "The caller passed something out of rule: a bad name, key, duration or value.",
            ErrorKind::Limit => "A limit was reached: message size, subscriptions, pending output.",
            ErrorKind::Closed => "The store was closed by this program (close was called): open it again to go on.",
            ErrorKind::Lost => "A lease ran out or was taken away before its holder let it go.",
            ErrorKind::Owned => "Another process owns the store directory.",
            ErrorKind::Conflict => {
                "The request contradicts what the store already has: a semaphore opened with another limit, a key the same holder already holds."
            }
            ErrorKind::Busy => "A SQL database stayed locked by another writer past the busy timeout.",
            ErrorKind::Sql => "A SQL statement failed, or a migration could not be applied.",
            ErrorKind::Auth => "A missing or wrong token, or a token without the right.",
            ErrorKind::Io => "The operating system refused a file or socket operation.",
            ErrorKind::Protocol => "The peer spoke something this side does not understand.",
            ErrorKind::Internal => "A bug in tinystore itself.",
            ErrorKind::Unavailable => {
                "The store could not be reached: its connection stayed down past the request timeout (the message says since when), or was cut before the store answered a call already sent (a publish may then have been delivered)."
            }
        }
    }
}

/// An error of the engine: a [`kind`](Error::kind) with a stable
/// [`code`](Error::code), and a message that says what was wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// `Result` with [`Error`] as its error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    /// This error, about message `i` of a burst of `count`: the message named.
    pub(crate) fn of_burst(self, i: usize, count: usize) -> Error {
        Error::new(self.kind, format!("message {i} of the {count} given: {}", self.message))
    }
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The stable code string: `timeout`, `invalid`, `limit`, `closed`, `lost`,
    /// `owned`, `conflict`, `busy`, `sql`, `auth`, `io`, `protocol`, `internal`,
    /// `unavailable`.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
    /// The message alone, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Invalid, message)
    }
    pub(crate) fn limit(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Limit, message)
    }
    pub(crate) fn closed() -> Error {
        Error::new(ErrorKind::Closed, "the store is closed: open it again to go on")
    }
    pub(crate) fn lost(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Lost, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Conflict, message)
    }
    pub(crate) fn io(what: &str, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {e}"))
    }
    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.code())
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        use rusqlite::ffi::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => Error::new(
                ErrorKind::Busy,
                format!("{e}: another writer kept the database locked past the busy timeout; retry, or keep transactions short"),
            ),
            _ => Error::new(ErrorKind::Sql, e.to_string()),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::invalid(format!("a value could not be converted to or from JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    /// A new kind must be added to `ALL` (and so to every binding's
    /// generated list): this match breaks the build until it is placed.
    fn position(k: ErrorKind) -> usize {
        match k {
            ErrorKind::Timeout => 0,
            ErrorKind::Invalid => 1,
            ErrorKind::Limit => 2,
            ErrorKind::Closed => 3,
            ErrorKind::Lost => 4,
            ErrorKind::Owned => 5,
            ErrorKind::Conflict => 6,
            ErrorKind::Busy => 7,
            ErrorKind::Sql => 8,
            ErrorKind::Auth => 9,
            ErrorKind::Io => 10,
            ErrorKind::Protocol => 11,
            ErrorKind::Internal => 12,
            ErrorKind::Unavailable => 13,
        }
    }

    #[test]
    fn every_kind_is_listed_once_with_its_code() {
        for (i, k) in ErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(position(k), i, "{k:?} is out of place in ErrorKind::ALL");
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
            assert!(!k.doc().is_empty() && !k.doc().contains('\n'));
        }
    }
}
