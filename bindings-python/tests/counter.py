"""A counter in a file, kept under a lock (LOCK-01 across processes).

Each holder reads the count, pauses, and writes it plus one, so two holders
at once would lose an update; it also logs ``count fence`` a line, so the
fences can be checked against the order the key was granted in. The test
process imports :func:`count`; other processes run this file, say "ready"
once connected, and start on a line from stdin::

    python counter.py ADDRESS PATH N
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import tinystore


async def count(lock: Any, path: str, n: int) -> None:
    """Adds one to the counter at ``path``, ``n`` times, each under ``lock.hold("k")``."""
    for _ in range(n):
        async with lock.hold("k", wait="30s") as lease:
            with open(path) as f:
                c = int(f.read())
            await asyncio.sleep(0.001)
            with open(path, "w") as f:
                f.write(str(c + 1))
            with open(path + ".log", "a") as f:
                f.write(f"{c} {lease.fence}\n")


async def main(address: str, path: str, n: int) -> None:
    async with tinystore.connect(address) as store:
        lock = store.lock("counter", ttl="5s")
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # go
        await count(lock, path, n)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
