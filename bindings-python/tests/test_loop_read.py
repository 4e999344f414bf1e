"""STORE-01: a connected store's socket is read by the asyncio loop itself
(as redis-py's asyncio client reads its own), so an answer completes its
call on the loop's thread with no engine thread in between; a loop kept busy
loses the socket to the engine, so answers, renewals and messages never wait
on it."""

from __future__ import annotations

import asyncio
import select
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, List, Tuple

import pytest

import tinystore
from conftest import until
from tinystore import _aio


@pytest.fixture
async def connected(tmp_path: Path) -> AsyncIterator[Tuple[tinystore.Store, tinystore.Store]]:
    """An owner and a store connected to it over its Unix socket."""
    dir = tmp_path / "s"
    owner = await tinystore.open(dir)
    store = await tinystore.connect(f"unix:{dir / 'tinystore.sock'}")
    yield owner, store
    await store.close()
    await owner.close()


async def _read_by_the_loop(store: tinystore.Store, ch: Any) -> Any:
    """The reader the loop watches after a few publishes (a call finds the
    socket busy now and then, while the engine's task reads it: the next
    call takes it)."""
    for _ in range(100):
        await ch.publish(0)
        r = store._watch.reader  # type: ignore[union-attr]
        if r is not None and r.active:
            return r
    raise AssertionError("the loop never read the socket")


async def test_store_01_a_connected_stores_answers_complete_on_the_loop_that_reads_its_socket(
    connected: Tuple[tinystore.Store, tinystore.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = connected
    settled_by_the_read = 0  # futures settled inside the callback that read their answer

    real_readable = _aio._on_readable

    def readable(watch: Any, r: Any, c: Any) -> None:
        nonlocal settled_by_the_read
        waiting = len(c.futures)
        real_readable(watch, r, c)
        settled_by_the_read += waiting - len(c.futures)

    monkeypatch.setattr(_aio, "_on_readable", readable)

    ch = store.channel("c")
    got: List[int] = []
    sub = await ch.subscribe(lambda m: got.append(m.value))
    reader = await _read_by_the_loop(store, ch)
    t0 = time.monotonic()
    await asyncio.gather(*[ch.publish(i) for i in range(1, 1001)])  # many in flight
    for i in range(1001, 1201):  # one by one
        await ch.publish(i)
    lock = store.lock("l")
    for _ in range(200):
        async with lock.hold("k") as lease:
            assert not lease.lost
    async with lock.try_hold("k") as lease:
        assert lease is not None
    await until(lambda: bool(got) and got[-1] == 1200, what="every message")
    elapsed = time.monotonic() - t0
    assert got[-1200:] == list(range(1, 1201)), "every message, in order"
    assert reader.active, "still read by the loop"
    # About 600 round trips one after another: well under a second each way
    # here; an answer left to wait for the engine to take the socket back
    # (100 ms or more each) would take a minute.
    assert elapsed < 20, elapsed
    # Each publish, hold, try_hold and release waits for its answer (LOCK-01).
    answered = 1200 + 2 * 200 + 2
    assert settled_by_the_read >= 0.95 * answered, (settled_by_the_read, answered)
    await sub.stop()


async def test_store_01_a_loop_blocked_by_cpu_work_still_gets_its_connected_calls_answered(
    connected: Tuple[tinystore.Store, tinystore.Store],
) -> None:
    _, store = connected
    loop = asyncio.get_running_loop()
    ch = store.channel("c")
    lock = store.lock("busy", ttl="1s")
    reader = await _read_by_the_loop(store, ch)
    async with lock.hold("k") as lease:
        fence = lease.fence
        published = ch.publish(1)  # sent now; answered while the loop is busy
        bell = _aio._completers[loop].native.fileno()
        deadline = time.monotonic() + 1.5
        n = 0
        while time.monotonic() < deadline:  # holds the GIL, never yields
            n += 1
        assert not reader.active, "the engine took the socket back from the busy loop"
        assert select.select([bell], [], [], 0)[0], "the publish was answered meanwhile, by the engine"
        assert not lease.lost, "and the lease renewed past its ttl"
        await asyncio.wait_for(published, 1)
        again = await _read_by_the_loop(store, ch)
        assert again is not reader, "a new reader"
    async with lock.hold("k") as later:
        assert later.fence > fence


async def test_store_01_publishes_made_just_before_close_resolve_as_delivered(
    connected: Tuple[tinystore.Store, tinystore.Store],
) -> None:
    owner, store = connected
    got: List[int] = []
    sub = await owner.channel("bye").under(1).subscribe(lambda m: got.append(m.value))
    ch = store.channel("bye").under(1)
    await _read_by_the_loop(store, store.channel("bye").under(2))
    pubs = [ch.publish(n) for n in range(100)]
    await store.close()  # before the loop has read a single answer
    results = await asyncio.gather(*pubs, return_exceptions=True)
    assert [r for r in results if r is not None] == [], "every publish sent before close() resolves, to None"
    await until(lambda: len(got) == 100)
    assert got == list(range(100))
    await sub.stop()


async def test_chan_01_a_connected_publish_resolves_to_none(connected: Tuple[tinystore.Store, tinystore.Store]) -> None:
    _, store = connected
    ch = store.channel("none")
    results = [await ch.publish(n) for n in range(20)]
    assert results == [None] * 20


async def test_store_01_after_its_calls_stop_a_connected_program_sleeps(
    connected: Tuple[tinystore.Store, tinystore.Store],
) -> None:
    """The loop (and the owner) spin only for a short window after each call
    (TINYSTORE_SPIN), then sleep again."""
    _, store = connected
    lock = store.lock("spin")
    ch = store.channel("spin").under(1)
    for n in range(2000):
        async with lock.hold("k"):
            pass
        await ch.publish(n)
    await asyncio.sleep(0.05)
    before = time.process_time()
    await asyncio.sleep(0.5)
    used = time.process_time() - before
    # Owner and client both live in this process; spinning for good would use about 0.5 s.
    assert used < 0.06, f"an idle owner and client used {used * 1000:.0f} ms of CPU in 500 ms"


def _switches_of_other_threads() -> int:
    """Times the process's threads other than this one went to sleep and
    were woken (Linux: /proc/self/task/*/status)."""
    me = threading.get_native_id()
    total = 0
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) == me:
            continue
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # ended meanwhile
        total += int(next(l for l in status.splitlines() if l.startswith("voluntary_ctxt_switches")).split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts thread wake-ups in /proc")
async def test_store_01_owned_calls_complete_what_they_let_go_on_the_loops_thread(tmp_path: Path) -> None:
    # An owned publish completes its subscription's batch, and a release the
    # grant of a task waiting for the key, on the calling loop's thread:
    # no engine thread is woken to do it and to wake the loop in turn.
    async with tinystore.open(tmp_path / "s") as store:
        ch = store.channel("c")
        got: List[int] = []
        arrived = asyncio.Event()

        def handler(m: Any) -> None:
            got.append(m.value)
            arrived.set()

        sub = await ch.subscribe(handler)
        lock = store.lock("l")
        holding = asyncio.Event()
        letting_go = asyncio.Event()

        async def holder() -> None:
            for _ in range(200):
                async with lock.hold("k"):
                    holding.set()
                    await letting_go.wait()
                    letting_go.clear()

        await ch.publish(0)
        await until(lambda: got == [0], what="the first message")
        before = _switches_of_other_threads()
        for i in range(1, 301):
            arrived.clear()
            await ch.publish(i)
            await asyncio.wait_for(arrived.wait(), 5)
        task = asyncio.ensure_future(holder())
        for _ in range(200):
            await holding.wait()
            holding.clear()
            # This task waits for the key while the other holds it...
            waiting = asyncio.ensure_future(lock.hold("k").__aenter__())
            await asyncio.sleep(0)
            letting_go.set()
            # ...and the other's release grants it.
            lease = await waiting
            lease._native.release()
        await task
        woken = _switches_of_other_threads() - before
        assert got == list(range(301))
        # 500 hand-overs; an engine thread woken for each would be 500 or more.
        assert woken < 100, woken
        await sub.stop()
