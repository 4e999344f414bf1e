"""Leases: one holder's claim on a key, with its fence."""

from __future__ import annotations

from typing import Optional

from . import _aio, _native


class Permit:
    """A semaphore's permit, inside ``async with sem.hold(key) as permit``.

    A permit has no fence: several valid holders at once would refuse each
    other's writes.
    """

    __slots__ = ("_native",)

    def __init__(self, native: _native.NativeLease) -> None:
        self._native = native

    @property
    def key(self) -> str:
        """The key held, as text (an int key is its decimal digits)."""
        return self._native.key

    @property
    def lost(self) -> bool:
        """True once the lease was lost: it reached ``max_hold``, ran past its
        ttl over a connection, or the store closed. Stop writing then; the
        ``hold`` block ends with :class:`tinystore.LostError`."""
        return self._native.lost

    @property
    def time_left(self) -> Optional[float]:
        """Seconds until the lease runs out (ttl or ``max_hold``), or None
        where nothing ends it but its block."""
        return self._native.time_left

    async def wait_lost(self) -> bool:
        """Waits until the lease ends: True if it was lost, False if its block
        let it go first. For racing long work against the lease::

            work = asyncio.ensure_future(summarize())
            lost = asyncio.ensure_future(lease.wait_lost())
            await asyncio.wait([work, lost], return_when=asyncio.FIRST_COMPLETED)
        """
        return bool(await _aio.result(self._native.wait_lost()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, lost={self.lost})"


class Lease(Permit):
    """A lock's lease, inside ``async with lock.hold(key) as lease``.

    ``fence`` is an ``int`` below 2**128, larger than every fence the store
    gave before, across restarts too (LOCK-02): the store's epoch in the high
    64 bits and a count in the low 64. Written as ``f"{lease.fence:040d}"``
    it compares as text in the same order, so SQLite can compare it.
    """

    __slots__ = ()

    @property
    def fence(self) -> int:
        """The lease's fence (an int below 2**128)."""
        fence = self._native.fence
        assert fence is not None  # a lock's lease has one; only a permit has none
        return fence

    def __repr__(self) -> str:
        return f"Lease(key={self.key!r}, fence={self.fence}, lost={self.lost})"
