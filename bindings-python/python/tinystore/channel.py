"""Channels: a name that messages of one type are published on."""

from __future__ import annotations

from typing import Any, Generic, Optional, TypeVar

from . import _aio
from .branch import Branch
from .codec import Codec

T = TypeVar("T")


class Channel(Branch[T], Generic[T]):
    """A channel, from ``store.channel("chat-events", ChatEvent)``.

    Every process connected to the store shares it. The channel is its own
    root branch (``publish``, ``subscribe`` and ``async for`` work on it
    directly); ``under(key)`` gives a branch of it, such as the messages of
    one chat. Messages live in memory only: a branch keeps its newest 1,024
    messages (or 4 MiB) for slow subscribers, and nothing once nobody
    subscribes. Messages travel as JSON (see :mod:`tinystore.codec`).
    """

    __slots__ = ("name",)

    def __init__(
        self,
        native_root: Any,
        name: str,
        tp: Any = None,
        ns: Optional[dict[str, Any]] = None,
        watch: Optional[_aio.LoopWatch] = None,
    ) -> None:
        super().__init__(native_root, Codec(tp, ns, name), watch)
        self.name = name

    @property
    def type(self) -> Any:
        """The type of the channel's values (None: plain JSON values)."""
        return self._codec.type

    def __repr__(self) -> str:
        return f"Channel({self.name!r}, {getattr(self.type, '__name__', self.type)!r})"
