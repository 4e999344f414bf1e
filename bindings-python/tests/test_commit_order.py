"""CHAN-03 across processes: transactions of several processes that publish
to one branch arrive in commit (rowid) order; on one machine, and on a
cluster store (its outbox's order)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tinystore
from conftest import CLUSTER_TIMEOUT, MODES, python_env, until

WRITER = """
import asyncio, sys, tinystore
async def main():
    where = sys.argv[1]
    store = await (tinystore.connect(where, request_timeout=30) if where.startswith("etcd://") else tinystore.open(where))
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
        await _four_writers(store, str(dir))


# Four new processes each connect to etcd and NATS: more than the default
# 60 s on a loaded machine.
@pytest.mark.timeout(180)
async def test_chan_03_cluster_four_processes_deliver_in_commit_order(tmp_path: Path, request: Any) -> None:
    # One machine's four processes of a cluster store share its SQL
    # databases (TINYSTORE_CLUSTER_SQL_DIR); their messages go through NATS.
    if "cluster" not in MODES:
        pytest.skip("the cluster kind is not in TINYSTORE_TEST_MODES")
    etcd, nats = request.getfixturevalue("etcd_cluster"), request.getfixturevalue("nats_cluster")
    address = f"{etcd.address(f'py{os.getpid()}-commitorder')}?nats={nats.urls()}"
    os.environ["TINYSTORE_CLUSTER_SQL_DIR"] = str(tmp_path)
    async with tinystore.connect(address, request_timeout=CLUSTER_TIMEOUT) as store:
        await _four_writers(store, address)


async def _four_writers(store: tinystore.Store, where: str) -> None:
    """Four processes (WRITER) commit 200 transactions each on `where`,
    each publishing its row's id; `store` reads them in commit order."""
    db = await store.database("order")
    await db.exec("create table tx (id integer primary key, at integer)")
    got: list[int] = []
    sub = await store.channel("order").under("all").subscribe(lambda m: got.append(m.value))
    kids = [
        subprocess.Popen([sys.executable, "-c", WRITER, where, "200"], env=python_env()) for _ in range(4)
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
