"""Locks and semaphores from Python: LOCK-01..04, LOCK-06..08, NAMES, and an
owned lease outliving its ttl while the event loop is blocked (LOCK-07)."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import List, Optional

import pytest

import tinystore
from conftest import HERE, Stores, python_env, until
from counter import count


@pytest.mark.cluster
async def test_lock_01_one_holder_at_a_time_among_many_tasks(store: tinystore.Store) -> None:
    lock = store.lock("exclusive")
    inside = 0
    most = 0
    fences: List[int] = []

    async def worker() -> None:
        nonlocal inside, most
        for _ in range(5):
            async with lock.hold("k") as lease:
                inside += 1
                most = max(most, inside)
                fences.append(lease.fence)
                await asyncio.sleep(0.001)
                inside -= 1

    await asyncio.gather(*(worker() for _ in range(20)))
    assert most == 1
    assert len(fences) == 100
    assert fences == sorted(set(fences))  # strictly increasing in grant order


async def test_lock_01_one_holder_at_a_time_across_processes_fences_in_grant_order(
    stores: Stores, tmp_path: Path
) -> None:
    store = await stores.open()
    counter = tmp_path / "counter"
    counter.write_text("0")
    n, children = 25, 3
    address = f"unix:{stores.dir / 'tinystore.sock'}"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "counter.py"), address, str(counter), str(n),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=python_env(),
        )
        for _ in range(children)
    ]
    for p in procs:
        assert p.stdout is not None and await asyncio.wait_for(p.stdout.readline(), 20) == b"ready\n"
    for p in procs:  # all at once
        assert p.stdin is not None
        p.stdin.write(b"go\n")
    await count(store.lock("counter", ttl="5s"), str(counter), n)  # this process counts too
    assert [await asyncio.wait_for(p.wait(), 30) for p in procs] == [0] * children
    total = n * (children + 1)
    assert counter.read_text() == str(total)  # no lost update: never two holders at once
    log = sorted(tuple(map(int, line.split())) for line in (tmp_path / "counter.log").read_text().splitlines())
    assert [c for c, _ in log] == list(range(total))
    fences = [f for _, f in log]
    assert fences == sorted(set(fences))  # in grant order, each larger than the one before


@pytest.mark.cluster
async def test_lock_01_a_semaphore_gives_at_most_limit_permits(store: tinystore.Store) -> None:
    sem = store.semaphore("exports", limit=3)
    inside = 0
    most = 0

    async def worker() -> None:
        nonlocal inside, most
        async with sem.hold("k") as permit:
            assert not hasattr(permit, "fence")  # permits carry no fence
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.02)
            inside -= 1

    await asyncio.gather(*(worker() for _ in range(10)))
    assert most == 3


@pytest.mark.cluster
async def test_lock_02_fences_grow_within_one_open_and_across_a_restart(stores) -> None:  # type: ignore[no-untyped-def]
    store = await stores.open()
    lock = store.lock("summaries")
    seen: List[int] = []
    for key in ("a", "b", "a", 7):
        async with lock.hold(key) as lease:
            seen.append(lease.fence)
    assert seen == sorted(set(seen))
    assert all(f >> 64 == store.epoch for f in seen)  # the epoch is the high 64 bits

    await stores.close()
    store = await stores.open()
    async with store.lock("summaries").hold("a") as lease:
        assert lease.fence > seen[-1]
        # One machine: each open is a new epoch; a cluster's epoch is made once.
        assert store.epoch > seen[-1] >> 64 or (stores.mode == "cluster" and store.epoch == seen[-1] >> 64)


@pytest.mark.cluster
async def test_lock_03_hold_waits_then_times_out_without_running_and_try_hold_never_waits(store: tinystore.Store) -> None:
    lock = store.lock("waits")
    assert lock.wait == 10.0 and lock.ttl == 30.0 and lock.max_hold is None  # the defaults
    ran = False

    async def other(wait: Optional[str]) -> None:
        nonlocal ran
        async with lock.hold("k", wait=wait):
            ran = True

    async def try_other() -> Optional[int]:
        async with lock.try_hold("k") as lease:
            return None if lease is None else lease.fence

    async with lock.hold("k"):
        started = time.monotonic()
        with pytest.raises(tinystore.TimeoutError) as e:
            await asyncio.ensure_future(other("200ms"))
        waited = time.monotonic() - started
        assert isinstance(e.value, TimeoutError) and e.value.code == "timeout"
        assert 0.15 < waited < 2
        assert not ran
        started = time.monotonic()
        assert await asyncio.ensure_future(try_other()) is None
        assert time.monotonic() - started < 0.1
    assert await asyncio.ensure_future(try_other()) is not None


@pytest.mark.cluster
async def test_lock_03_waiters_get_the_key_in_the_order_they_asked(store: tinystore.Store) -> None:
    lock = store.lock("fifo")
    order: List[int] = []

    async def waiter(i: int) -> None:
        async with lock.hold("k"):
            order.append(i)

    async with lock.hold("k"):
        tasks = []
        for i in range(6):
            tasks.append(asyncio.ensure_future(waiter(i)))
            await until(lambda: _waiters(store, "fifo") == i + 1, what=f"waiter {i} in line")
    await asyncio.gather(*tasks)
    assert order == list(range(6))


def _waiters(store: tinystore.Store, lock: str) -> int:
    return sum(k["waiters"] for k in store.status()["locks"] if k["lock"] == lock)


def _held(store: tinystore.Store, lock: str) -> int:
    return sum(len(k["holders"]) for k in store.status()["locks"] if k["lock"] == lock)


@pytest.mark.cluster
async def test_lock_04_the_key_is_let_go_on_return_and_on_raise_with_the_error_unchanged(store: tinystore.Store) -> None:
    lock = store.lock("release")
    async with lock.hold("k"):
        assert _held(store, "release") == 1
    assert _held(store, "release") == 0

    mine = KeyError("my own")
    with pytest.raises(KeyError) as e:
        async with lock.hold("k"):
            raise mine
    assert e.value is mine
    assert _held(store, "release") == 0


@pytest.mark.cluster
async def test_lock_04_a_cancelled_waiter_and_a_cancelled_holder_let_the_key_go(store: tinystore.Store) -> None:
    lock = store.lock("cancel")
    entered = asyncio.Event()

    async def holder() -> None:
        async with lock.hold("k"):
            entered.set()
            await asyncio.sleep(60)

    async def waiter() -> None:
        async with lock.hold("k"):
            await asyncio.sleep(60)

    h = asyncio.ensure_future(holder())
    await entered.wait()
    w = asyncio.ensure_future(waiter())
    await until(lambda: _waiters(store, "cancel") == 1)
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    await until(lambda: _waiters(store, "cancel") == 0, what="the cancelled waiter to leave the line")
    h.cancel()
    with pytest.raises(asyncio.CancelledError):
        await h
    assert _held(store, "cancel") == 0
    async with lock.try_hold("k") as lease:
        assert lease is not None


@pytest.mark.cluster
async def test_lock_04_lock_06_a_lease_lost_at_max_hold_raises_lost_error_even_if_the_block_never_yielded(
    store: tinystore.Store,
) -> None:
    lock = store.lock("bounded", max_hold="300ms")
    with pytest.raises(tinystore.LostError) as e:
        async with lock.hold("k") as lease:
            time.sleep(0.5)  # never yields to the loop
            assert lease.lost
    assert e.value.code == "lost" and "maxHold" in str(e.value)

    mine = ValueError("mine")
    with pytest.raises(ValueError) as e2:  # the block's own error wins over the lost lease
        async with lock.hold("k"):
            time.sleep(0.5)
            raise mine
    assert e2.value is mine


@pytest.mark.cluster
async def test_lock_06_max_hold_tells_the_holder_and_gives_the_key_to_the_next_waiter(store: tinystore.Store) -> None:
    lock = store.lock("bounded", max_hold=timedelta(milliseconds=300))
    assert lock.max_hold == pytest.approx(0.3)
    a_fence = 0
    b_fence = 0
    a_in_block = False
    b_saw_a_in_block = False

    async def a() -> None:
        nonlocal a_fence, a_in_block
        with pytest.raises(tinystore.LostError):
            async with lock.hold("k") as lease:
                a_in_block = True
                a_fence = lease.fence
                assert lease.time_left is not None and lease.time_left <= 0.3
                assert await lease.wait_lost() is True  # A is told...
                assert lease.lost
                await asyncio.sleep(0.2)
                a_in_block = False

    async def b() -> None:
        nonlocal b_fence, b_saw_a_in_block
        async with lock.hold("k", wait="5s") as lease:  # ...and B has the key while A's block still runs
            b_fence = lease.fence
            b_saw_a_in_block = a_in_block

    ta = asyncio.ensure_future(a())
    await until(lambda: a_fence != 0)
    tb = asyncio.ensure_future(b())
    await asyncio.gather(ta, tb)
    assert b_saw_a_in_block
    assert b_fence > a_fence


@pytest.mark.cluster
async def test_l9_a_cpu_loop_holding_the_gil_past_the_ttl_keeps_the_lease(store: tinystore.Store) -> None:
    lock = store.lock("busy", ttl="1s")
    async with lock.hold("k") as lease:
        fence = lease.fence
        deadline = time.monotonic() + 1.5
        n = 0
        while time.monotonic() < deadline:  # holds the GIL, never yields
            n += 1
        assert not lease.lost  # renewals (connected) come from the engine's threads
        await asyncio.sleep(0.6)  # and past the ttl again, yielding
        assert not lease.lost
    async with lock.hold("k") as again:
        assert again.fence > fence


async def test_lock_07_an_owned_lease_ends_only_with_its_block(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with tinystore.open(tmp_path / "owned") as store:
        lock = store.lock("busy", ttl="1s")
        async with lock.hold("k") as lease:
            assert lease.time_left is None  # no ttl in the owning process
            await asyncio.sleep(1.3)
            assert not lease.lost and lease.time_left is None


@pytest.mark.cluster
async def test_lock_07_wait_lost_is_false_for_a_lease_let_go_normally(store: tinystore.Store) -> None:
    lock = store.lock("plain")
    async with lock.hold("k") as lease:
        waiting = asyncio.ensure_future(lease.wait_lost())
        await asyncio.sleep(0.01)
        assert not waiting.done()
    assert await asyncio.wait_for(waiting, 5) is False


@pytest.mark.cluster
async def test_lock_08_a_hold_inside_a_hold_of_the_same_key_fails_at_once(store: tinystore.Store) -> None:
    lock = store.lock("reentry")
    async with lock.hold("k"):
        started = time.monotonic()
        with pytest.raises(tinystore.ConflictError):
            async with lock.hold("k"):
                pass
        assert time.monotonic() - started < 0.5
        async with lock.try_hold("k") as inner:
            assert inner is None
        async with lock.hold("other") as other:  # another key is fine
            assert other is not None


@pytest.mark.cluster
async def test_lock_08_a_semaphores_limit_belongs_to_the_semaphore(store: tinystore.Store) -> None:
    store.semaphore("exports", limit=3)
    async with store.semaphore("exports", limit=3).hold("k") as permit:
        assert permit.key == "k"
    # Owned, the handle is refused when made; connected, the owner's answer
    # comes at the first hold or try_hold at the latest (making the handle
    # never waits for it).
    for other in (lambda: store.semaphore("exports", limit=4), lambda: store.lock("exports")):
        for hold in ("hold", "try_hold"):
            with pytest.raises(tinystore.ConflictError, match="semaphore of limit 3"):
                handle = other()
                async with getattr(handle, hold)("k"):
                    pass
    with pytest.raises(tinystore.InvalidError):
        store.semaphore("zero", limit=0)
    for bad in (None, 2.0, True, "3"):
        with pytest.raises(TypeError, match="limit is an int"):
            store.semaphore("odd", limit=bad)  # type: ignore[arg-type]


async def test_names_out_of_rule_names_and_durations_are_refused_when_the_handle_is_made(store: tinystore.Store) -> None:
    for bad in ("", "Chat", "-chat", "chat events", "x" * 65):
        with pytest.raises(tinystore.InvalidError, match="chat-events"):
            store.lock(bad)
        with pytest.raises(ValueError):
            store.channel(bad)
    for ttl in ("500ms", "2h", 0.5, timedelta(hours=2), "soon", -1):
        with pytest.raises(tinystore.InvalidError):
            store.lock("ok", ttl=ttl)
    with pytest.raises(tinystore.InvalidError):
        store.lock("ok", wait=0)
    with pytest.raises(tinystore.InvalidError):
        store.lock("ok", max_hold="0s")
    with pytest.raises(TypeError):
        store.lock("ok", ttl=[1])  # type: ignore[arg-type]
    assert store.lock("ok", ttl="1m").ttl == store.lock("ok", ttl=60).ttl == store.lock("ok", ttl=timedelta(minutes=1)).ttl == 60
    lock = store.lock("ok")
    with pytest.raises(tinystore.InvalidError):
        async with lock.hold("k", wait=0):
            pass
    with pytest.raises(tinystore.InvalidError):
        async with lock.hold(""):
            pass
