"""Branches: the parts of a channel that messages are published to."""

from __future__ import annotations

import asyncio
from asyncio import get_running_loop as _get_running_loop
from typing import Any, Awaitable, Callable, Generic, Optional, Tuple, TypeVar, Union

from . import _aio, _native
from .codec import Codec
from .message import Message, Missed
from .subscription import ErrorHandler, Handler, Messages, MissedHandler, Subscription

T = TypeVar("T")

#: A lock key or branch key: an int (its decimal digits) or a str of 1 to 1,024 bytes.
Key = Union[int, str]


class Branch(Generic[T]):
    """A branch of a channel: ``events.under(chat_id)``, nestable
    (``events.under(org).under(chat)``).

    A subscriber of one branch never receives another branch's messages.
    Keys are ints or strs of 1 to 1,024 bytes; an int is its decimal digits,
    so ``under(7)`` and ``under("7")`` are the same branch, in every language.
    Raises ``InvalidError`` (a ``ValueError``) for a key out of rule.
    """

    __slots__ = ("_native", "_codec", "_watch")

    def __init__(self, native: _native.NativeBranch, codec: Codec[T], watch: Optional[_aio.LoopWatch] = None) -> None:
        self._native = native
        self._codec = codec
        self._watch = watch

    def under(self, key: Key) -> "Branch[T]":
        """The branch ``key`` below this one."""
        return Branch(self._native.under(key), self._codec, self._watch)

    @property
    def path(self) -> Tuple[str, ...]:
        """The keys from the channel's root to this branch, as text."""
        return self._native.path

    def publish(self, value: T) -> "asyncio.Future[None]":
        """Publishes ``value`` to this branch: ``await branch.publish(value)``.

        The message leaves at this call, so publishes called one after
        another keep their order even when they are awaited later, together
        (``await asyncio.gather(*[branch.publish(v) for v in values])``);
        the future this returns resolves once the store has the message.
        It never waits for a subscriber. Every subscription of the branch
        made before gets it, in publish order.

        Raises at once, with nothing published: ``InvalidError`` for a
        value not of a typed channel's type, ``LimitError`` for a message
        over 1 MiB of JSON or nesting lists and dicts over 100 deep, ``TypeError`` or ``ValueError`` for a value JSON
        cannot carry, ``ClosedError`` once the store is closed.

        Connected, a publish made while the connection is being
        re-established waits for it (up to the request timeout, 10 s, and
        8 MiB of waiting publishes), then leaves in order; past that it
        fails with ``UnavailableError`` (nothing was published). The future
        can still fail once the message was sent: with ``UnavailableError``
        when the connection drops before the owner answered, and with
        ``TimeoutError`` when the owner does not answer within 10 s (a
        frozen process). Either error says the message may have been
        delivered (or may yet be): retrying may deliver it twice.

        Call it from a running event loop, like any asyncio API: in a
        thread without one it raises ``RuntimeError`` and publishes nothing.
        From a worker thread, hand it to the loop in a coroutine (this
        returns a future, not a coroutine)::

            async def publish_one(v):
                await branch.publish(v)

            asyncio.run_coroutine_threadsafe(publish_one(v), loop).result()
        """
        try:
            loop = _get_running_loop()
        except RuntimeError:
            loop = _aio.running_loop("publish")  # raises, saying what to do
        data = self._codec.encode(value)
        w = self._watch
        if w is None:
            r = self._native.publish(data)
            if r is not None:
                return _aio.wait(r, loop)
        else:
            c = w.ensure(loop)
            call = self._native.publish(data, c.native)
            if call is not None:
                # Settled by the completer (settle). Nothing to call off when
                # it is cancelled: the message has left.
                fut = loop.create_future()
                c.futures[call] = fut
                return fut
        done = loop.create_future()
        done.set_result(None)
        return done

    async def subscribe(
        self,
        handler: Handler[T],
        *,
        on_missed: Optional[MissedHandler] = None,
        on_error: Optional[ErrorHandler] = None,
        recursive: bool = False,
    ) -> Subscription[T]:
        """Calls ``handler(message)`` for each message published here from now on.

        Returns once the store has the subscription: every message published
        after that reaches the handler, in order, one at a time, on this
        event loop; an async handler is awaited before the next message.

        - ``on_missed(missed)``: called before the next message when the
          handler fell behind the branch's log (its newest 1,024 messages or
          4 MiB), with the exact ``count`` missed and ``reason`` ``"behind"``
          (``"reconnect"`` after a dropped connection).
        - ``on_error(exception)``: called when the handler raises, or when
          a message cannot be decoded (not JSON, or not of a typed channel's
          type: a publisher that does not share it), with a note naming its
          seq and branch; the subscription goes on. Without it, the loop's
          exception handler reports the error. From Python 3.11, a handler
          that lets a ``CancelledError`` out (it awaited something
          cancelled) is reported as a ``RuntimeError`` caused by it, and
          only cancelling the subscription's own task (its loop ending)
          ends it.
        - ``recursive``: also every branch below this one.

        Stop it with ``await sub.stop()``; closing the store stops it too.
        Raises ``LimitError`` past 10,000 subscriptions of a store,
        ``ClosedError`` once the store is closed.
        """
        native = await _aio.result_of(self._native.subscribe(recursive), self._watch)
        return Subscription(native, self._codec, handler, on_missed, on_error, self._watch)

    async def messages(self, *, recursive: bool = False) -> Messages[T]:
        """The messages published here from now on, as an async iterator of
        :class:`Message` (and :class:`Missed` before a message that follows
        missed ones). Subscribed when this returns."""
        return await Messages(self._subscriber(recursive), self._codec, self._watch)._start()

    def __aiter__(self) -> Messages[T]:
        """``async for m in branch``: subscribes at the first step."""
        return Messages(self._subscriber(False), self._codec, self._watch)

    def _subscriber(self, recursive: bool) -> Callable[[], Awaitable[Any]]:
        return lambda: _aio.result_of(self._native.subscribe(recursive), self._watch)

    def __repr__(self) -> str:
        return f"Branch({self._native.channel_name!r}, path={self.path!r})"


__all__ = ["Branch", "Key", "Message", "Missed"]
