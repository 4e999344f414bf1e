"""What a subscription receives: messages, and word of missed ones."""

from __future__ import annotations

from typing import Generic, Optional, Tuple, TypeVar

T = TypeVar("T")


class Message(Generic[T]):
    """A message of a channel.

    - ``value``: what was published, as the channel's type.
    - ``branch``: the branch it was published to, as a tuple of key texts
      (an int key is its decimal digits: ``under(7)`` and ``under("7")`` are
      one branch). Empty for the channel's root.
    - ``seq``: its sequence in that branch, 1 for the first message.
    """

    __slots__ = ("value", "branch", "seq")

    def __init__(self, value: T, branch: Tuple[str, ...], seq: int) -> None:
        self.value = value
        self.branch = branch
        self.seq = seq

    def __repr__(self) -> str:
        return f"Message(value={self.value!r}, branch={self.branch!r}, seq={self.seq})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and (self.value, self.branch, self.seq) == (other.value, other.branch, other.seq)

    __hash__ = None  # type: ignore[assignment]


class Missed:
    """Messages a subscription will never get, told before its next message.

    - ``count``: how many (exact), or None where it cannot be known (the
      store restarted).
    - ``reason``: ``"behind"`` (the reader fell behind the branch's log of
      1,024 messages or 4 MiB) or ``"reconnect"`` (the connection to the
      store dropped).
    """

    __slots__ = ("count", "reason")

    def __init__(self, count: Optional[int], reason: str) -> None:
        self.count = count
        self.reason = reason

    def __repr__(self) -> str:
        return f"Missed(count={self.count!r}, reason={self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Missed) and (self.count, self.reason) == (other.count, other.reason)

    __hash__ = None  # type: ignore[assignment]
