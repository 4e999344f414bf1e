"""Locks and semaphores: one holder of a key at a time (or ``limit``)."""

from __future__ import annotations

import asyncio
import weakref
from datetime import timedelta
from types import TracebackType
from typing import Any, Callable, Generic, Optional, Type, TypeVar, Union

from . import _aio, _native
from .lease import Lease, Permit

#: A duration: a string (``"250ms"``, ``"30s"``, ``"2m"``, ``"1h"``,
#: ``"1m30s"``), a number of seconds, or a ``timedelta``.
Duration = Union[str, float, int, timedelta]
#: A lock key: an int (its decimal digits) or a str of 1 to 1,024 bytes.
Key = Union[int, str]

L = TypeVar("L", bound=Permit)

# One holder id per asyncio task: a hold of a key inside a hold of the same
# key in one task fails at once instead of waiting on itself (LOCK-08).
_holders: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()


def _holder() -> int:
    task = asyncio.current_task()
    if task is None:
        return _native.holder_unique()
    h = _holders.get(task)
    if h is None:
        h = _holders[task] = _native.holder_unique()
    return h


class _Hold(Generic[L]):
    """``async with lock.hold(key) as lease``: waits for the key."""

    __slots__ = ("_native", "_key", "_wait", "_make", "_lease", "_watch")

    def __init__(
        self,
        native: _native.NativeLock,
        key: Key,
        wait: Optional[Duration],
        make: Callable[[_native.NativeLease], L],
        watch: Optional[_aio.LoopWatch] = None,
    ) -> None:
        self._native = native
        self._key = key
        self._wait = wait
        self._make = make
        self._lease: Optional[_native.NativeLease] = None
        self._watch = watch

    async def __aenter__(self) -> L:
        r = self._native.acquire(self._key, _holder(), self._wait)
        lease = await _aio.call(r, self._watch) if isinstance(r, _aio.Pending) else r
        self._lease = lease
        return self._make(lease)

    async def __aexit__(
        self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        if self._lease is not None:
            r = end_of_block(self._lease, et)
            # Owned, the key is let go at once; only a connected end waits.
            if isinstance(r, _aio.Pending):
                await _aio.call(r, self._watch)
            self._lease = None
        return False


class _TryHold(Generic[L]):
    """``async with lock.try_hold(key) as lease``: None at once when held."""

    __slots__ = ("_native", "_key", "_make", "_lease", "_watch")

    def __init__(
        self,
        native: _native.NativeLock,
        key: Key,
        make: Callable[[_native.NativeLease], L],
        watch: Optional[_aio.LoopWatch] = None,
    ) -> None:
        self._native = native
        self._key = key
        self._make = make
        self._lease: Optional[_native.NativeLease] = None
        self._watch = watch

    async def __aenter__(self) -> Optional[L]:
        r = await _aio.result_of(self._native.try_acquire(self._key, _holder()), self._watch)
        self._lease = r
        return None if r is None else self._make(r)

    async def __aexit__(
        self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        if self._lease is not None:
            r = end_of_block(self._lease, et)
            # Owned, the key is let go at once; only a connected end waits.
            if isinstance(r, _aio.Pending):
                await _aio.call(r, self._watch)
            self._lease = None
        return False


def end_of_block(native_lease: _native.NativeLease, et: Optional[Type[BaseException]]) -> "Union[None, _aio.Pending[None]]":
    """Ends the hold when a block ends; awaited, the result returns once the
    store let the key go (LOCK-01): ``None`` at once (owned), else a
    ``Pending``. The core raises ``LostError`` for a lease lost while the
    block ran, unless the block raised its own error, which then reaches the
    caller unchanged (LOCK-04)."""
    return native_lease.end(et is not None)


class _Handle:
    __slots__ = ("_native", "_watch")

    def __init__(self, native: _native.NativeLock, watch: Optional[_aio.LoopWatch] = None) -> None:
        self._native = native
        self._watch = watch

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def ttl(self) -> float:
        """Seconds a lease over a connection lasts from its last renewal."""
        return self._native.ttl

    @property
    def max_hold(self) -> Optional[float]:
        """Seconds no lease outlasts, or None."""
        return self._native.max_hold

    @property
    def wait(self) -> float:
        """Seconds ``hold`` waits for a key unless its ``wait`` says otherwise."""
        return self._native.wait


class Lock(_Handle):
    """A lock, from ``store.lock("summaries", ttl="30s")``: one holder of a key
    at a time, each lease with a fence.

    The name, ttl (1 s to 1 h, default 30 s), ``max_hold`` (positive, default
    none) and ``wait`` (positive, default 10 s) were checked when it was made.
    """

    __slots__ = ()

    def hold(self, key: Key, *, wait: Optional[Duration] = None) -> _Hold[Lease]:
        """``async with lock.hold(key) as lease:`` waits for ``key``, runs the
        block holding it, and lets it go when the block ends, raises or is
        cancelled.

        Waits up to ``wait`` (the lock's, 10 s unless set), then raises
        :class:`tinystore.TimeoutError` (a ``TimeoutError``) without running
        the block; waiters get the key in the order they asked. Cancelling a
        task that waits or holds lets the key go. The block's own error
        reaches the caller unchanged; a lease lost while the block ran (at
        ``max_hold``, past its ttl over a connection, or the store closed)
        raises :class:`tinystore.LostError` when it ends, even if the block
        never awaited. A hold of a key this task already holds raises
        :class:`tinystore.ConflictError` at once; so does the first hold of
        a handle whose name the owner has as a semaphore (connected).

        Connected, when the owner goes away while this waits, the hold asks
        again once the connection is back (another process may have taken
        the store over), with what is left of ``wait``; it fails with
        :class:`tinystore.UnavailableError` when the store is not back within
        ``wait`` (at least the request timeout, 10 s). An owner that stops answering without the
        connection dropping (a frozen process) fails it with
        :class:`tinystore.TimeoutError` after ``wait`` plus the 10 s
        request timeout. Either way the block never starts after ``wait``:
        the owner refuses a grant that would come later.
        """
        return _Hold(self._native, key, wait, Lease, self._watch)

    def try_hold(self, key: Key) -> _TryHold[Lease]:
        """``async with lock.try_hold(key) as lease:`` holds ``key`` if it is
        free now; ``lease`` is None at once when someone holds it (this task
        too). Never waits. Ends as :meth:`hold` does."""
        return _TryHold(self._native, key, Lease, self._watch)

    def __repr__(self) -> str:
        return f"Lock({self.name!r}, ttl={self.ttl}, max_hold={self.max_hold}, wait={self.wait})"


class Semaphore(_Handle):
    """A semaphore, from ``store.semaphore("exports", limit=3)``: up to
    ``limit`` holders of a key at once. Its permits have no fence.

    The limit belongs to the semaphore: opening the name again with another
    limit raises :class:`tinystore.ConflictError` (over a connection, at the
    first ``hold`` or ``try_hold``).
    """

    __slots__ = ("limit",)

    def __init__(self, native: _native.NativeLock, limit: int, watch: Optional[_aio.LoopWatch] = None) -> None:
        super().__init__(native, watch)
        self.limit = limit

    def hold(self, key: Key, *, wait: Optional[Duration] = None) -> _Hold[Permit]:
        """``async with sem.hold(key) as permit:`` as :meth:`Lock.hold`, with a permit."""
        return _Hold(self._native, key, wait, Permit, self._watch)

    def try_hold(self, key: Key) -> _TryHold[Permit]:
        """``async with sem.try_hold(key) as permit:`` as :meth:`Lock.try_hold`."""
        return _TryHold(self._native, key, Permit, self._watch)

    def __repr__(self) -> str:
        return f"Semaphore({self.name!r}, limit={self.limit}, ttl={self.ttl})"
