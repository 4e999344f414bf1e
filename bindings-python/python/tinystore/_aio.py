"""How native calls are awaited without blocking the event loop.

A native call either returns its value at once (most calls of an owned store:
publishing, taking a free key, reading messages already there) or a
``_native.Pending``. A pending call is started on the ``Completer`` of the
running loop: the engine runs it on its own threads and, when it ends, writes
one byte to a socket this loop watches (``loop.add_reader``). The loop then
drains every finished call at once and settles their futures on its own
thread. Engine threads never take the GIL, so a Python thread busy in a CPU
loop never stalls the engine.

Cancelling the awaiting task cancels the call: a waiter for a key leaves the
queue, and a lease granted in the meantime is let go.

A connected store's socket is read by the loop itself (``LoopWatch``): its
answers complete their calls on the loop's thread, with no engine thread in
between, and the callback that read them settles their futures at once.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from functools import partial
from typing import Any, Optional, TypeVar, Union, overload

from . import _native

Pending = _native.Pending
T = TypeVar("T")


class _LoopCompleter:
    """The completer of one event loop (holds no reference to the loop)."""

    __slots__ = ("native", "futures", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = _native.Completer()
        self.futures: dict[int, asyncio.Future[Any]] = {}
        loop.add_reader(self.native.fileno(), self._drain)

    def _drain(self) -> None:
        # Cancelled ones are skipped: dropping the value lets a lease go.
        self.native.settle(self.futures)

    def begin(self, loop: asyncio.AbstractEventLoop, pending: "Pending[T]") -> "tuple[int, asyncio.Future[T]]":
        """Starts ``pending``: its id and the future ``settle`` settles."""
        call = self.native.start(pending)
        fut: asyncio.Future[T] = loop.create_future()
        self.futures[call] = fut
        return call, fut

    def start(self, loop: asyncio.AbstractEventLoop, pending: "Pending[T]") -> "asyncio.Future[T]":
        """:meth:`begin`, the call cancelled when its future is."""
        call, fut = self.begin(loop, pending)
        fut.add_done_callback(partial(self._settled, call))
        return fut

    def _settled(self, call: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.cancel(call)

    def cancel(self, call: int) -> None:
        """Abandons ``call``: a waiter leaves the queue."""
        self.futures.pop(call, None)
        self.native.cancel(call)


class LoopWatch:
    """Has the running loop read a connected store's socket itself.

    Each call of the store that may wait for an answer calls :meth:`ensure`
    with the running loop: unless that loop already reads the current
    socket, it takes it from the engine (``NativeLoopReader.start``) and
    watches it with ``loop.add_reader``. The callback reads and dispatches
    what came (in native code, the GIL released), then settles the calls it
    answered right away. When the reader is done (the connection ended, or
    the engine took the socket back because the loop left it unread for
    100 ms, seen within 350 ms), the loop stops watching; the next call watches again, the new
    socket after a reconnect. One loop watches a store at a time: another
    loop takes over only once the first one no longer reads it.

    After each call the loop is kept from sleeping while the engine spins
    for the answer (a callback scheduled soon, again and again, for at most
    the spin window: ``TINYSTORE_SPIN``, 100 µs by default): an answer that
    comes meanwhile costs no sleep and no wake-up.
    """

    __slots__ = (
        "_native", "_loop", "_completer", "_reader", "_fd", "_closed", "_unsupported", "_spinning", "__weakref__"
    )

    def __init__(self, native_store: Any) -> None:
        self._native = native_store
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._completer: Optional[_LoopCompleter] = None  # of _loop
        self._reader: Any = None
        self._fd = -1
        self._closed = False
        self._unsupported: Optional[asyncio.AbstractEventLoop] = None
        self._spinning = False

    @property
    def reader(self) -> Any:
        """The reader watched now, or None."""
        return self._reader

    def ensure(self, loop: asyncio.AbstractEventLoop, spin: bool = True) -> _LoopCompleter:
        """Has ``loop`` (the running loop) read the store's current socket;
        gives that loop's completer. ``spin``: keep the loop polling while
        the engine spins for the answer of the call about to be sent (else
        call :meth:`sent` once it is)."""
        if _forked_after_start:
            raise RuntimeError(_FORKED)
        r = self._reader
        if r is None or self._loop is not loop or not r.active:
            self._attach(loop)
        if self._loop is not loop:
            return _completer(loop)  # another loop reads it, or none can
        if spin and not self._spinning and self._reader is not None:
            self._start_spin(loop)
        return self._completer  # type: ignore[return-value]

    def sent(self, loop: asyncio.AbstractEventLoop) -> None:
        """A call was sent: keep the loop polling if the engine spins for its
        answer. Unlike ``ensure``'s, no turn of the loop is spent when it does
        not (a grant that waits in line)."""
        r = self._reader
        if r is not None and not self._spinning and self._loop is loop and r.spinning:
            self._start_spin(loop)

    def _start_spin(self, loop: asyncio.AbstractEventLoop) -> None:
        self._spinning = True
        loop.call_soon(self._spin, loop)

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        # A ready callback makes the loop poll its selector without waiting.
        r = self._reader
        if r is not None and self._loop is loop and r.spinning:
            loop.call_soon(self._spin, loop)
        else:
            self._spinning = False

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._closed or loop is self._unsupported:
            return
        if self._reader is not None:
            old = self._loop
            if old is not loop and self._reader.active and old is not None and old.is_running():
                return  # another loop (of another thread) reads it
            self.detach()
        if self._native.closed:
            return
        r = self._native.loop_reader()
        if r is None:
            return  # owned now, over TCP or TLS, or disconnected
        c = _completer(loop)
        fd = r.fileno()
        if not r.start():
            return
        try:
            # A weak reference: a store dropped unclosed is not kept alive
            # by its loop (its reader then ends, and the loop stops watching).
            loop.add_reader(fd, _on_readable, weakref.ref(self), r, c)
        except NotImplementedError:  # a loop that cannot watch a file descriptor
            r.stop()
            self._unsupported = loop
            return
        self._loop, self._completer, self._reader, self._fd = loop, c, r, fd

    def detach(self) -> None:
        """Stops watching: the engine reads the socket until the next call."""
        r, loop, fd = self._reader, self._loop, self._fd
        if r is None or loop is None:
            return
        self._reader = self._loop = self._completer = None
        self._fd = -1
        r.stop()
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is running or not loop.is_running():
            loop.remove_reader(fd)  # nothing for a closed loop
        else:
            # That loop runs in another thread: it stops watching there.
            # ``r`` keeps the file descriptor open until then.
            try:
                loop.call_soon_threadsafe(self._forget, loop, fd, r)
            except RuntimeError:
                pass  # closed meanwhile

    def _forget(self, loop: asyncio.AbstractEventLoop, fd: int, r: Any) -> None:
        """Stops ``loop`` (the running one) watching ``fd``, unless that is
        the socket it watches for this store now."""
        if not (self._loop is loop and self._fd == fd):
            loop.remove_reader(fd)

    def close(self) -> None:
        """The store closes: stop watching, for good."""
        self._closed = True
        self.detach()


def _on_readable(watch: "weakref.ref[LoopWatch]", r: Any, c: _LoopCompleter) -> None:
    """The loop's callback for a watched socket: reads it, then settles the
    calls it answered at once (their bell byte is read here too, so the loop
    is not woken again for them)."""
    keep = r.readable(c.native)
    c._drain()
    if not keep:
        w = watch()
        if w is not None and w._reader is r:
            w.detach()
        elif w is not None:
            # Detached from another thread, which asked this loop to stop
            # watching: do it now.
            w._forget(asyncio.get_running_loop(), r.fileno(), r)
        else:
            asyncio.get_running_loop().remove_reader(r.fileno())


_completers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopCompleter] = weakref.WeakKeyDictionary()


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running loop; without one, a ``RuntimeError`` that says what to do
    (raised before ``what`` did anything)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} needs a running event loop, and this thread has none: nothing was done. Call it from "
            "async code and await it; from another thread, run a coroutine that awaits it on the store's "
            "loop with asyncio.run_coroutine_threadsafe(coro, loop)"
        ) from None


def wait(pending: "Pending[T]", loop: "asyncio.AbstractEventLoop | None" = None) -> "asyncio.Future[T]":
    """A future of the running loop (or ``loop``, the running one) for a started ``Pending``."""
    if _forked_after_start:
        # Nothing would ever complete it: the engine's threads stayed in the parent.
        raise RuntimeError(_FORKED)
    if loop is None:
        loop = asyncio.get_running_loop()
    return _completer(loop).start(loop, pending)


def _completer(loop: asyncio.AbstractEventLoop) -> _LoopCompleter:
    c = _completers.get(loop)
    if c is None:
        c = _completers[loop] = _LoopCompleter(loop)
    return c


async def call(pending: "Pending[T]", watch: Optional[LoopWatch] = None) -> T:
    """Starts ``pending`` (a call of a store watched by ``watch``; None:
    owned) on the running loop's completer and awaits its value. Cancelling
    the awaiting task cancels the call: a waiter leaves the queue. Cheaper
    than awaiting :func:`wait`'s future, whose done-callback costs a turn
    of the loop's ready queue per call."""
    if _forked_after_start:
        raise RuntimeError(_FORKED)
    loop = asyncio.get_running_loop()
    c = _completer(loop) if watch is None else watch.ensure(loop, False)
    call_id, fut = c.begin(loop, pending)
    if watch is not None:
        watch.sent(loop)
    try:
        return await fut
    except BaseException:
        if fut.cancelled():
            # Cancelled before its outcome came (the task was cancelled).
            c.cancel(call_id)
        raise


# A plain Pending[T] first: Union[T, Pending[T]] alone would not solve T for it.
@overload
async def result_of(r: "Pending[T]", watch: Optional[LoopWatch]) -> T: ...
@overload
async def result_of(r: "Union[T, Pending[T]]", watch: Optional[LoopWatch]) -> T: ...


async def result_of(r: Any, watch: Optional[LoopWatch]) -> Any:
    """:func:`result` for a call of a store watched by ``watch``."""
    if isinstance(r, Pending):
        return await call(r, watch)
    return r


@overload
async def result(r: "Pending[T]") -> T: ...
@overload
async def result(r: "Union[T, Pending[T]]") -> T: ...


async def result(r: Any) -> Any:
    """The value of a native call: ``r`` itself, or what its ``Pending`` ends with."""
    if isinstance(r, Pending):
        return await call(r)
    return r


# Fork safety: the engine's threads start with the first store opened, and
# threads do not survive fork(). A child forked after that cannot use the
# engine; it must open its own stores after a fresh start (spawn/forkserver).
_engine_started = False
_forked_after_start = False
_FORKED = (
    "tinystore: this process was forked after the parent opened a store, and the engine's "
    "threads do not survive fork(): open stores only in processes that have not inherited "
    "an open engine (use multiprocessing's 'spawn' or 'forkserver' start method, or open "
    "stores in the children only)"
)


def engine_starting() -> None:
    """Called before opening a store; refuses a child forked after the engine started."""
    global _engine_started
    if _forked_after_start:
        raise RuntimeError(_FORKED)
    _engine_started = True


def _after_fork_in_child() -> None:
    global _forked_after_start
    _completers.clear()
    if _engine_started:
        _forked_after_start = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
