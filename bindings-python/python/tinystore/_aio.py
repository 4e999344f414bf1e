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
"""

from __future__ import annotations

import asyncio
import os
import weakref
from functools import partial
from typing import Any

from . import _native

Pending = _native.Pending


class _LoopCompleter:
    """The completer of one event loop (holds no reference to the loop)."""

    __slots__ = ("native", "futures", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = _native.Completer()
        self.futures: dict[int, asyncio.Future[Any]] = {}
        loop.add_reader(self.native.fileno(), self._drain)

    def _drain(self) -> None:
        futures = self.futures
        for call, ok, value in self.native.drain():
            fut = futures.pop(call, None)
            if fut is None or fut.done():
                continue  # cancelled: dropping the value lets a lease go
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    def start(self, loop: asyncio.AbstractEventLoop, pending: Any) -> asyncio.Future[Any]:
        call = self.native.start(pending)
        fut = loop.create_future()
        self.futures[call] = fut
        fut.add_done_callback(partial(self._settled, call))
        return fut

    def _settled(self, call: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.futures.pop(call, None)
            self.native.cancel(call)


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


def wait(pending: Any, loop: "asyncio.AbstractEventLoop | None" = None) -> asyncio.Future[Any]:
    """A future of the running loop (or ``loop``, the running one) for a started ``Pending``."""
    if _forked_after_start:
        # Nothing would ever complete it: the engine's threads stayed in the parent.
        raise RuntimeError(_FORKED)
    if loop is None:
        loop = asyncio.get_running_loop()
    c = _completers.get(loop)
    if c is None:
        c = _completers[loop] = _LoopCompleter(loop)
    return c.start(loop, pending)


async def result(r: Any) -> Any:
    """The value of a native call: ``r`` itself, or what its ``Pending`` ends with."""
    if type(r) is Pending:
        return await wait(r)
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
