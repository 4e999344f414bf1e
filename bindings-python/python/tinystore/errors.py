"""The errors of tinystore: one class per code of the engine.

Every error is a :class:`tinystore.Error` with a ``code`` (the engine's stable
code string) and is also the builtin exception a Python program would catch
for that kind of failure::

    try:
        async with summaries.hold(chat_id, wait="2s") as lease:
            ...
    except TimeoutError:          # tinystore.TimeoutError is a TimeoutError
        ...

This module is the only place that maps the engine's codes to classes.
"""

from __future__ import annotations

import builtins
import sqlite3

from . import _native
from ._codes import CODES, Code

__all__ = [
    "Error",
    "TimeoutError",
    "InvalidError",
    "LimitError",
    "ClosedError",
    "LostError",
    "OwnedError",
    "ConflictError",
    "BusyError",
    "SqlError",
    "AuthError",
    "IoError",
    "ProtocolError",
    "InternalError",
    "UnavailableError",
]


class Error(Exception):
    """An error of tinystore. ``code`` is the engine's code string, ``message``
    says what was wrong and what to do."""

    code: Code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class TimeoutError(Error, builtins.TimeoutError):
    """``hold`` found no free key within its ``wait``; the body did not run. Code ``timeout``."""

    code = "timeout"


class InvalidError(Error, ValueError):
    """A name, key, duration or value out of rule; the message shows a valid example. Code ``invalid``."""

    code = "invalid"


class LimitError(Error, ValueError):
    """A limit was reached: a message over 1 MiB or nested over 100 deep, 10,000 subscriptions, ... Code ``limit``."""

    code = "limit"


class ClosedError(Error, RuntimeError):
    """This program closed the store (``close()`` was called). Code ``closed``."""

    code = "closed"


class LostError(Error, RuntimeError):
    """A lease ran out (ttl, ``max_hold``) or the store closed before its holder
    let it go: raised when the ``hold`` block ends. Code ``lost``."""

    code = "lost"


class OwnedError(Error, OSError):
    """Another process owns the store directory. Code ``owned``."""

    code = "owned"


class ConflictError(Error, RuntimeError):
    """The request contradicts what the store has: a semaphore opened with
    another limit, a ``hold`` of a key this task already holds. Code ``conflict``."""

    code = "conflict"


class BusyError(Error, builtins.TimeoutError):
    """Another writer kept a SQL database locked past the busy timeout. Code ``busy``."""

    code = "busy"


class SqlError(Error, sqlite3.DatabaseError):
    """A SQL statement or a migration failed. Code ``sql``."""

    code = "sql"


class AuthError(Error, PermissionError):
    """A missing or wrong token. Code ``auth``."""

    code = "auth"


class IoError(Error, OSError):
    """The operating system refused a file or socket operation. Code ``io``."""

    code = "io"


class ProtocolError(Error, ConnectionError):
    """The peer spoke something this side does not understand. Code ``protocol``."""

    code = "protocol"


class InternalError(Error, RuntimeError):
    """A bug in tinystore itself. Code ``internal``."""

    code = "internal"


class UnavailableError(Error, ConnectionError):
    """The store could not be reached: the connection stayed down past the
    request timeout (10 s by default; the message says since when), or it was
    cut before the store answered a call already sent (a publish may then have
    been delivered). Calls made while the client reconnects wait for it first.
    Code ``unavailable``."""

    code = "unavailable"


_CLASSES = (
    TimeoutError,
    InvalidError,
    LimitError,
    ClosedError,
    LostError,
    OwnedError,
    ConflictError,
    BusyError,
    SqlError,
    AuthError,
    IoError,
    ProtocolError,
    InternalError,
    UnavailableError,
)

# The codes come from the core (_codes.py, generated): one class each, in the
# engine's order. A code the core adds without a class here fails at import.
_by_code: dict[str, type[Error]] = {c.code: c for c in _CLASSES}
_missing = [code for code in CODES if code not in _by_code]
if _missing or len(_by_code) != len(CODES):
    raise ImportError(f"tinystore.errors has no class for the engine's codes {_missing}")
BY_CODE: dict[str, type[Error]] = {code: _by_code[code] for code in CODES}

# A copy, of the type the native takes (dict is invariant in its values).
_native.set_error_classes(dict(BY_CODE))
