"""Fences: 128-bit numbers that grow with every lease, across restarts too.

In Python a fence is an ``int``: ``lease.fence``. The store's epoch (the
milliseconds since 1970 at the store's open, or the epoch before plus one)
is its high 64 bits, a count of leases its low 64. A system that keeps the
largest fence it has seen for a key can refuse a late writer whose lease ran
out while it was paused::

    async with summaries.hold(chat_id) as lease:
        fence = f"{lease.fence:040d}"       # 40 digits compare like the numbers
        await db.exec(
            "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
            summary, fence, chat_id, fence,
        )

The helpers below name the parts; plain ``int`` operations do the same.
"""

from __future__ import annotations

from typing import Tuple

_LOW = (1 << 64) - 1


def padded(fence: int) -> str:
    """The fence as 40 zero-padded digits: as text, padded fences sort like the numbers."""
    return f"{fence:040d}"


def halves(fence: int) -> Tuple[int, int]:
    """The high and low 64 bits: the store's epoch and the count (as Go's ``locks.Fence``)."""
    return fence >> 64, fence & _LOW


def from_halves(epoch: int, count: int) -> int:
    """The fence whose halves are ``epoch`` and ``count``."""
    return (epoch << 64) | count
