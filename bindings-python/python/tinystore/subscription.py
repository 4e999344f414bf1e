"""Subscriptions: a handler called for each message of a branch, on the
event loop, one message at a time."""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Generic, Optional, TypeVar, Union

from . import _aio, _native
from .codec import Codec
from .message import Message, Missed

T = TypeVar("T")

#: How many events cross from the engine to Python at once, at most.
BATCH = 256

# The kinds of event in a batch.
_MESSAGE = 1
_UNDECODABLE = 2  # a message whose data is not JSON: the event holds the error

Handler = Callable[[Message[T]], Union[None, Awaitable[None]]]
MissedHandler = Callable[[Missed], Union[None, Awaitable[None]]]
ErrorHandler = Callable[[Exception], Union[None, Awaitable[None]]]

_running: set[asyncio.Task[None]] = set()


def _asked_to_cancel(task: Optional[asyncio.Task[Any]]) -> Optional[bool]:
    """Whether ``task`` was asked to cancel; None before Python 3.11, which
    cannot tell."""
    cancelling = getattr(task, "cancelling", None)
    return None if cancelling is None else cancelling() > 0


def _stray(e: asyncio.CancelledError, who: str) -> RuntimeError:
    """A CancelledError that ``who`` let out, as an Exception (as a
    generator's stray StopIteration is, PEP 479); re-raised when it is the
    subscription's own (its task was asked to cancel: the loop is ending)."""
    if _asked_to_cancel(asyncio.current_task()) is not False:
        raise e
    err = RuntimeError(
        f"{who} raised CancelledError (it awaited something that was cancelled); the subscription goes on"
    )
    err.__cause__ = e
    return err


def _unfit(e: BaseException, seq: int, branch: Any) -> BaseException:
    """``e``, from decoding message ``seq`` of ``branch``, with a note saying
    which message it was (Python 3.11 and later)."""
    if hasattr(e, "add_note"):
        e.add_note(
            f"tinystore: message {seq} of branch {tuple(branch)!r} could not be decoded to the channel's type "
            "(a publisher that does not share it?); the subscription goes on at the next message"
        )
    return e


async def _next_batch(native: _native.NativeSubscription, watch: Optional[_aio.LoopWatch]) -> list[_native._Event]:
    r = native.next_batch(BATCH)
    if isinstance(r, _aio.Pending):
        return await _aio.call(r, watch)
    return r


class Subscription(Generic[T]):
    """A running subscription, from ``await branch.subscribe(handler)``.

    The handler gets every message published to the branch after
    ``subscribe`` returned, in order, one at a time on the event loop that
    subscribed (an async handler is awaited before the next message). Before
    a message it would have missed, ``on_missed`` gets a :class:`Missed` with
    the exact count. A handler that raises goes to ``on_error`` (or to the
    loop's exception handler), and the subscription goes on.
    """

    def __init__(
        self,
        native: _native.NativeSubscription,
        codec: Codec[T],
        handler: Handler[T],
        on_missed: Optional[MissedHandler],
        on_error: Optional[ErrorHandler],
        watch: Optional[_aio.LoopWatch] = None,
    ) -> None:
        self._native = native
        self._watch = watch
        self._codec = codec
        self._handler = handler
        self._on_missed = on_missed
        self._on_error = on_error
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._pump())
        _running.add(self._task)
        self._task.add_done_callback(_running.discard)

    @property
    def active(self) -> bool:
        """True until stopped, or until its store closed and it read everything."""
        return not self._stopped and not self._task.done()

    async def stop(self) -> None:
        """Stops the subscription: once this returns, the handler is never
        called again. Safe to call from inside the handler, twice, or after
        the store closed."""
        if not self._stopped:
            self._stopped = True
            self._native.stop()

    async def wait(self) -> None:
        """Waits until the subscription ends (stopped, or its store closed)."""
        await asyncio.shield(self._task)

    async def _pump(self) -> None:
        convert = self._codec._convert
        handler = self._handler
        me = asyncio.current_task()
        # Also ends when a handler swallowed this task's cancellation
        # (asyncio.run ending would wait for it forever).
        while not (self._stopped or _asked_to_cancel(me)):
            batch = await _next_batch(self._native, self._watch)
            if not batch:
                return
            # (kind, seq or count, value or reason or error, branch): see
            # NativeSubscription.next_batch.
            for kind, a, b, c in batch:
                if self._stopped:
                    return
                try:
                    if kind == _MESSAGE:
                        try:
                            v = b if convert is None else convert(b)
                        except Exception as e:
                            _unfit(e, a, c)
                            raise
                        out = handler(Message(v, c, a))
                    elif kind == _UNDECODABLE:
                        raise _unfit(b, a, c)
                    elif self._on_missed is not None:
                        out = self._on_missed(Missed(a, b))
                    else:
                        continue
                    if out is None or not inspect.isawaitable(out):
                        continue  # nothing awaited: no cancellation came in
                    await out
                except Exception as e:  # the subscription goes on
                    await self._report(e)
                except asyncio.CancelledError as e:
                    await self._report(_stray(e, "the handler"))
                if _asked_to_cancel(me):
                    return  # the handler (or on_error) swallowed it

    async def _report(self, e: Exception) -> None:
        if self._on_error is not None:
            try:
                out = self._on_error(e)
                if out is not None and inspect.isawaitable(out):
                    await out
                return
            except Exception as again:
                e = again
            except asyncio.CancelledError as again:
                e = _stray(again, "on_error")
        asyncio.get_running_loop().call_exception_handler(
            {"message": "a tinystore subscription's handler raised", "exception": e, "subscription": self}
        )


class Messages(Generic[T]):
    """The messages of a branch as an async iterator: ``async for m in branch``.

    Yields :class:`Message` objects, and a :class:`Missed` just before the
    message that follows missed ones. Iterating a branch directly subscribes
    at the first step; ``await branch.messages()`` subscribes at once.
    ``aclose()`` (or ``stop()``) ends it; so does leaving it to the garbage
    collector.

    A message that cannot be decoded (not JSON: ``json.JSONDecodeError``;
    not of a typed channel's type, as published by a program that does not
    share it: ``TypeError`` or ``ValueError``) raises from the step that
    reaches it, with a note naming its seq and branch. That ends a plain
    ``async for``; the same iterator goes on at the next message when
    iterated again (``sub = await branch.messages()``, then loop over
    ``sub`` in a ``try``).
    """

    def __init__(
        self,
        subscribe: Callable[[], Awaitable[_native.NativeSubscription]],
        codec: Codec[T],
        watch: Optional[_aio.LoopWatch] = None,
    ) -> None:
        self._subscribe = subscribe
        self._watch = watch
        self._native: Optional[_native.NativeSubscription] = None
        self._codec = codec
        self._ready: Deque[Any] = deque()
        self._closed = False

    async def _started(self) -> _native.NativeSubscription:
        if self._native is None:
            self._native = await self._subscribe()
        return self._native

    async def _start(self) -> "Messages[T]":
        await self._started()
        return self

    def __aiter__(self) -> "Messages[T]":
        return self

    async def __anext__(self) -> Union[Message[T], Missed]:
        while not self._ready:
            if self._closed:
                raise StopAsyncIteration
            batch = await _next_batch(await self._started(), self._watch)
            if not batch:
                self._closed = True
                raise StopAsyncIteration
            self._ready.extend(batch)
        kind, a, b, c = self._ready.popleft()
        if kind == _MESSAGE:
            try:
                return Message(self._codec.converted(b), c, a)
            except Exception as e:
                _unfit(e, a, c)
                raise
        if kind == _UNDECODABLE:
            raise _unfit(b, a, c)
        return Missed(a, b)

    async def aclose(self) -> None:
        """Stops the subscription; the iteration ends."""
        self._closed = True
        self._ready.clear()
        if self._native is not None:
            self._native.stop()

    stop = aclose
