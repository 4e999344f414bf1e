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


async def test_lock_01_a_release_awaits_its_answer_without_blocking_the_loop(tmp_path: Path) -> None:
    """The end of a hold waits for the owner's answer (here held back 300 ms
    by a stalled proxy) on the event loop, not by blocking it: other tasks
    run meanwhile, and the block returns only once the key is free."""
    import asyncio
    import threading
    import time

    from proxy import Proxy

    dir = tmp_path / "s"
    owner = await tinystore.open(dir)
    proxy = Proxy(dir, dir / "tinystore.sock")
    client = await tinystore.connect(proxy.address)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    t = asyncio.get_running_loop().create_task(ticker())
    try:
        async with client.lock("jobs").hold("k"):
            proxy.stall()  # the release and its answer wait in the proxy
            threading.Timer(0.3, proxy.resume).start()
            started, before = time.monotonic(), ticks
        waited, ran = time.monotonic() - started, ticks - before
        assert waited >= 0.25, f"the hold returned after {waited:.3f} s, before its release was answered"
        assert ran >= 10, f"the loop ran {ran} ticks of 5 ms during a 300 ms release: it was blocked"
        async with owner.lock("jobs").try_hold("k") as lease:
            assert lease is not None, "the key was still held after the hold returned"
    finally:
        t.cancel()
        await client.close()
        proxy.close()
        await owner.close()
