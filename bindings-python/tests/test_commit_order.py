"""CHAN-03 across processes: transactions of several processes that publish
to one branch arrive in commit (rowid) order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tinystore
from conftest import python_env, until

WRITER = """
import asyncio, sys, tinystore
async def main():
    store = await tinystore.open(sys.argv[1])
    db = await store.database("order")
    events = store.channel("order")
    async def add(tx):
        done = await tx.exec("insert into tx (at) values (0)")
        await tx.with_(events).under("all").publish(done.last_insert_rowid)
    for _ in range(int(sys.argv[2])):
        await db.tx(add)
    await store.close()
asyncio.run(main())
"""


async def test_chan_03_four_processes_deliver_in_commit_order(tmp_path: Path) -> None:
    dir = tmp_path / "s"
    async with tinystore.open(dir) as store:
        db = await store.database("order")
        await db.exec("create table tx (id integer primary key, at integer)")
        got: list[int] = []
        sub = await store.channel("order").under("all").subscribe(lambda m: got.append(m.value))
        kids = [
            subprocess.Popen([sys.executable, "-c", WRITER, str(dir), "200"], env=python_env()) for _ in range(4)
        ]
        try:
            await until(lambda: len(got) >= 800, timeout=60, what="800 messages")
        finally:
            codes = [k.wait(timeout=60) for k in kids]
        await sub.stop()
        assert codes == [0] * 4
        back = sum(1 for a, b in zip(got, got[1:]) if b < a)
        assert back == 0, f"{back} of {len(got)} messages out of commit order"
        assert got == list(range(1, 801)), "every committed row's message arrives once, in rowid order"
