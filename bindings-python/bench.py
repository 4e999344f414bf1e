"""Benchmarks of the Python binding, owned store (this process owns it).

    make bench        # builds the native module in release mode, then runs this

Prints:
- publish->deliver: messages per second from the first publish to the last
  message handled by a subscription's (sync) handler, on one event loop;
- hold+release: sequential `async with lock.hold(key)` cycles per second;
- handoffs: 4 tasks contending for one key, cycles per second.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time

import tinystore

N_MESSAGES = 200_000
N_HOLDS = 100_000
N_HANDOFFS = 40_000


async def publish_deliver(store: tinystore.Store) -> tuple[float, int]:
    branch = store.channel("bench").under(1)
    done = asyncio.Event()
    got = 0
    missed = 0

    def handler(m: tinystore.Message[dict]) -> None:
        nonlocal got
        got += 1
        if m.value["id"] == N_MESSAGES - 1:
            done.set()

    def on_missed(x: tinystore.Missed) -> None:
        nonlocal missed
        missed += x.count or 0

    sub = await branch.subscribe(handler, on_missed=on_missed)
    started = time.perf_counter()
    for i in range(N_MESSAGES):
        await branch.publish({"kind": "message", "id": i})
        if i % 128 == 127:
            await asyncio.sleep(0)  # let the subscription's task run
    await done.wait()
    took = time.perf_counter() - started
    await sub.stop()
    return got / took, missed


async def hold_release(store: tinystore.Store) -> float:
    lock = store.lock("bench")
    started = time.perf_counter()
    for _ in range(N_HOLDS):
        async with lock.hold("k"):
            pass
    return N_HOLDS / (time.perf_counter() - started)


async def handoffs(store: tinystore.Store) -> float:
    lock = store.lock("contended")
    per_task = N_HANDOFFS // 4

    async def worker() -> None:
        for _ in range(per_task):
            async with lock.hold("k"):
                await asyncio.sleep(0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(4)))
    return per_task * 4 / (time.perf_counter() - started)


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        async with tinystore.open(d) as store:
            rate, missed = await publish_deliver(store)
            print(f"owned publish->deliver: {rate:,.0f} msgs/s delivered ({N_MESSAGES:,} published, {missed:,} missed)")
            print(f"owned hold+release:     {await hold_release(store):,.0f} ops/s (sequential)")
            print(f"owned handoffs:         {await handoffs(store):,.0f} ops/s (4 tasks, one key)")


if __name__ == "__main__":
    print(f"tinystore {tinystore.__version__}, Python {sys.version.split()[0]}")
    asyncio.run(main())
