"""SQL databases of the store, and publishing inside a transaction."""

from __future__ import annotations

import inspect
from contextvars import ContextVar
from typing import Any, Awaitable, Callable, Dict, Generic, List, NamedTuple, TypeVar, Union, overload

from . import _aio
from .branch import Branch, Key
from .errors import ConflictError

T = TypeVar("T")
R = TypeVar("R")

#: A SQL parameter or value: None, int, float, str or bytes (a bool is 0 or 1).
SqlValue = Union[None, int, float, str, bytes]
#: A row of a query: column name to value.
Row = Dict[str, Any]


class _Open:
    """A transaction of the database at ``path`` that has not ended."""

    __slots__ = ("path", "open")

    def __init__(self, path: str) -> None:
        self.path = path
        self.open = True


# The transactions the running code is inside (tasks started inside one
# inherit it; ``open`` turns False when it ends).
_inside: ContextVar[tuple[_Open, ...]] = ContextVar("tinystore_sql_inside", default=())


def _check_not_inside(db: "Database", what: str) -> None:
    """Refuses a write through ``db`` from inside one of its transactions:
    it would wait for the writer that transaction holds until ``fn`` ends."""
    open_paths = {t.path for t in _inside.get() if t.open}
    if open_paths and db.path in open_paths:
        raise ConflictError(
            f"{what} inside db.tx of the same database ({db.name!r}) would wait for that transaction, "
            "which holds the database's writer until its function returns: use the tx it was given "
            "(tx.exec, tx.query), or write after the transaction"
        )


class Done(NamedTuple):
    """What a write did."""

    #: Rows changed by the statement.
    changes: int
    #: The rowid of the last row inserted on the database's writing connection.
    last_insert_rowid: int


class Database:
    """A SQL database of the store, from ``await store.database("chat", migrations="migrations")``:
    the SQLite file ``<store dir>/chat.db`` (WAL, foreign keys on).

    Statements take ``?`` placeholders and their values as further arguments;
    values are bound, never spliced into the text. Writes of one process go
    through one connection, one at a time; reads use their own connections
    and never wait for the writer. Every call runs off the event loop.
    """

    __slots__ = ("_native", "name")

    def __init__(self, native: Any, name: str) -> None:
        self._native = native
        self.name = name

    @property
    def path(self) -> str:
        """The database file."""
        return str(self._native.path)

    async def exec(self, sql: str, *params: SqlValue) -> Done:
        """Runs one statement that writes; gives ``changes`` and
        ``last_insert_rowid``. Raises ``SqlError`` (a ``sqlite3.DatabaseError``)
        when it fails, ``BusyError`` (a ``TimeoutError``) when another writer
        held the database past the busy timeout (5 s unless set),
        ``ClosedError``; ``ConflictError`` at once when called inside a
        ``tx`` of this database (use that ``tx``)."""
        _check_not_inside(self, "db.exec")
        return Done(*await _aio.result(self._native.exec(sql, *params)))

    async def query(self, sql: str, *params: SqlValue) -> List[Row]:
        """Runs a query; gives its rows as dicts of column name to value.
        Inside a ``tx`` of this database it does not see that transaction's
        writes (``tx.query`` does)."""
        return await _aio.result(self._native.query(sql, *params))

    # An async fn gives its awaited result, a plain one its result.
    @overload
    async def tx(self, fn: Callable[["SqlTx"], Awaitable[R]]) -> R: ...
    @overload
    async def tx(self, fn: Callable[["SqlTx"], R]) -> R: ...

    async def tx(self, fn: Callable[["SqlTx"], Any]) -> Any:
        """Runs ``fn(tx)`` in one transaction and gives what it returns.

        Committed when ``fn`` returns, rolled back when it raises (its error
        reaches the caller unchanged) or is cancelled. Messages published
        through ``tx.with_(channel)`` are delivered after the commit, in the
        order published, and dropped by a rollback (CHAN-03). ``fn`` may be
        async or not. Holds the database's writer until it ends: keep it short.

        Raises ``ClosedError`` and rolls back when it published and the
        store is closed, ``UnavailableError`` and rolls back when,
        connected, its owner stays out of reach past the request timeout;
        an ``UnavailableError`` that says the rows stand when the owner went
        away while the messages left (do not run it again then).
        ``InvalidError`` for a channel of another store handle.
        ``ConflictError`` at once for a ``db.tx`` or ``db.exec`` of this
        database inside ``fn`` (they would wait for this one to end).
        """
        _check_not_inside(self, "db.tx")
        native = await _aio.result(self._native.begin())
        this = _Open(self.path)
        token = _inside.set(_inside.get() + (this,))
        try:
            out = fn(SqlTx(native))
            if inspect.isawaitable(out):
                out = await out
        except BaseException:
            await _aio.result(native.rollback())
            raise
        finally:
            this.open = False
            _inside.reset(token)
        await _aio.result(native.commit())
        return out

    def __repr__(self) -> str:
        return f"Database({self.name!r})"


class SqlTx:
    """A transaction in progress: the ``tx`` given to ``db.tx(fn)``. Use it
    only inside ``fn``."""

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        self._native = native

    async def exec(self, sql: str, *params: SqlValue) -> Done:
        """As :meth:`Database.exec`, inside the transaction."""
        return Done(*await _aio.result(self._native.exec(sql, *params)))

    async def query(self, sql: str, *params: SqlValue) -> List[Row]:
        """As :meth:`Database.query`, inside the transaction (it sees its own writes)."""
        return await _aio.result(self._native.query(sql, *params))

    def with_(self, channel: Branch[T]) -> "TxBranch[T]":
        """The channel (or branch), publishing into this transaction:
        ``await tx.with_(events).under(chat_id).publish(event)``."""
        return TxBranch(self._native, channel)


class TxBranch(Generic[T]):
    """A branch of a channel seen from inside a transaction."""

    __slots__ = ("_tx", "_branch")

    def __init__(self, tx: Any, branch: Branch[T]) -> None:
        self._tx = tx
        self._branch = branch

    def under(self, key: Key) -> "TxBranch[T]":
        """The branch ``key`` below this one."""
        return TxBranch(self._tx, self._branch.under(key))

    async def publish(self, value: T) -> None:
        """Publishes ``value`` when the transaction commits, nothing if it
        rolls back. Checked now: ``LimitError`` over 1 MiB or
        nested over 100 deep, ``TypeError`` for a
        value JSON cannot carry."""
        b = self._branch
        await _aio.result(self._tx.publish(b._native, b._codec.encode(value)))


__all__ = ["Database", "Done", "Row", "SqlTx", "SqlValue", "TxBranch"]
