"""LOCK-01 as an outside observer sees it: once a hold's block ended, the
key is free for another connection told by another path than the store."""

from __future__ import annotations

from pathlib import Path

import tinystore


async def test_lock_01_release_then_try_hold_across_connections(tmp_path: Path) -> None:
    owner = await tinystore.open(tmp_path / "s")
    address = f"unix:{tmp_path / 's' / 'tinystore.sock'}"
    a_store = await tinystore.connect(address)
    b_store = await tinystore.connect(address)
    try:
        a = a_store.lock("jobs")
        b = b_store.lock("jobs")
        refused = 0
        for i in range(1000):
            key = i % 200
            async with a.hold(key):
                pass
            # A's block is over: B is told by this task, not by the store.
            async with b.try_hold(key) as lease:
                if lease is None:
                    refused += 1
        assert refused == 0, f"B was refused {refused} times a key whose holder's block had ended"
    finally:
        await b_store.close()
        await a_store.close()
        await owner.close()
