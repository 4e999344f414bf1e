"""Fences from Python: FENCE-01 (the shared vectors), FENCE-02 (the seeds'
check refuses a late writer), LOCK-02 (fences grow across a crash)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import tinystore
from conftest import MIGRATIONS, VECTORS, python_env


def test_fence_01_the_shared_vectors_print_the_same_digits_in_python() -> None:
    vectors: List[Dict[str, str]] = json.loads(VECTORS.read_text())["vectors"]
    assert vectors
    for v in vectors:
        fence = tinystore.fence.from_halves(int(v["epoch"]), int(v["count"]))
        assert fence == (int(v["epoch"]) << 64) | int(v["count"])
        assert str(fence) == v["digits"]
        assert f"{fence:040d}" == v["padded"] == tinystore.fence.padded(fence)
        assert tinystore.fence.halves(fence) == (int(v["hi"]), int(v["lo"]))
    # padded text sorts like the numbers
    fences = sorted(int(v["digits"]) for v in vectors)
    assert sorted(f"{f:040d}" for f in fences) == [f"{f:040d}" for f in fences]


@pytest.mark.cluster
async def test_fence_01_a_lease_fence_is_an_int_of_the_epoch_and_a_count(store: tinystore.Store) -> None:
    async with store.lock("shape").hold("k") as lease:
        assert type(lease.fence) is int
        epoch, count = tinystore.fence.halves(lease.fence)
        assert epoch == store.epoch and count >= 1
        assert 0 < lease.fence < 1 << 128


class Model:
    """A stand-in for the app's model: `summarize` takes `pause` seconds."""

    def __init__(self, text: str, pause: float = 0.0) -> None:
        self.text = text
        self.pause = pause

    async def summarize(self, history: List[str]) -> str:
        await asyncio.sleep(self.pause)
        return f"{self.text} of {len(history)} messages"


@pytest.mark.cluster
async def test_fence_02_the_seeds_check_refuses_a_late_writer(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    chat_id = 7
    await db.exec("insert into chats (id) values (?)", chat_id)
    summaries = store.lock("summaries", ttl="1s", max_hold="1s")
    fences: Dict[str, int] = {}

    async def history(chat_id: int) -> List[str]:
        return [r["text"] for r in await db.query("select text from messages where chat_id = ?", chat_id)]

    async def worker(name: str, model: Model) -> None:
        # The seed's sample (Fences, "Checking a fence in SQL"), as written.
        async with summaries.hold(chat_id) as lease:
            fences[name] = lease.fence
            summary = await model.summarize(await history(chat_id))
            fence = f"{lease.fence:040d}"
            await db.exec(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                summary, fence, chat_id, fence,
            )

    # A takes the key and pauses past its lease; B takes the free key, with a
    # larger fence, and writes; A wakes and writes with its stale fence.
    a = asyncio.ensure_future(worker("a", Model("A's summary", pause=1.5)))
    while "a" not in fences:
        await asyncio.sleep(0.01)
    b = asyncio.ensure_future(worker("b", Model("B's summary")))
    await b
    with pytest.raises(tinystore.LostError):
        await a  # A is told, when its block ends, that its lease was lost
    assert fences["b"] > fences["a"]
    rows = await db.query("select summary, summary_fence from chats where id = ?", chat_id)
    assert rows == [{"summary": "B's summary of 0 messages", "summary_fence": f"{fences['b']:040d}"}]
    # A's update changed no row: the same statement with A's fence, again
    late = f"{fences['a']:040d}"
    done = await db.exec(
        "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
        "stale", late, chat_id, late,
    )
    assert done.changes == 0


OWNER = """
import asyncio, sys, tinystore
async def main():
    store = await tinystore.open(sys.argv[1])
    async with store.lock("summaries").hold("k") as lease:
        print(lease.fence, flush=True)
        await asyncio.sleep(60)
asyncio.run(main())
"""


async def test_lock_02_fences_grow_after_the_owner_is_killed(tmp_path: Path) -> None:
    dir = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(dir)], stdout=subprocess.PIPE, text=True, env=python_env()
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20)  # type: ignore[union-attr]
        killed_fence = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    async with tinystore.open(dir) as store:
        async with store.lock("summaries").hold("k", wait="2s") as lease:
            assert lease.fence > killed_fence
