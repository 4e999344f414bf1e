"""STORE-02: calls made while the connection is re-established wait for it
(up to the request timeout) and go out in order; past that they raise
``UnavailableError``, never ``ClosedError`` (which means only "you closed it")."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, List

import pytest

import tinystore
from conftest import CLUSTER_TIMEOUT, MODES, EtcdCluster, NatsCluster, python_env, until

OWNER = """
import asyncio, sys, tinystore
async def main():
    store = await tinystore.open(sys.argv[1])
    print("owner", store.epoch, flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def _owner(dir: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-c", OWNER, str(dir)], stdout=subprocess.PIPE, text=True, env=python_env())


async def _line(out: IO[str], timeout: float = 20) -> str:
    return (await asyncio.wait_for(asyncio.to_thread(out.readline), timeout)).strip()


def _kill(p: "subprocess.Popen[str]") -> None:
    p.send_signal(signal.SIGKILL)
    p.wait()


async def test_store_02_chan_04_publishes_during_an_owner_restart_all_succeed_in_order(tmp_path: Path) -> None:
    dir = tmp_path / "s"
    owner = _owner(dir)
    try:
        assert owner.stdout is not None
        await _line(owner.stdout)
        client = await tinystore.connect(f"unix:{dir / 'tinystore.sock'}")
        got: List[Any] = []
        sub = await client.channel("c").under(1).subscribe(lambda m: got.append(m.value), on_missed=got.append)
    finally:
        _kill(owner)

    async def publish_all() -> List[Any]:
        out: List[Any] = []
        for i in range(1000):
            try:
                await client.channel("c").under(1).publish(i)
                out.append(None)
            except tinystore.Error as e:
                out.append(e)
        return out

    publishing = asyncio.ensure_future(publish_all())
    await asyncio.sleep(0.3)
    owner = _owner(dir)
    try:
        assert owner.stdout is not None
        await _line(owner.stdout)
        outcomes = await asyncio.wait_for(publishing, 30)
        failed = [e for e in outcomes if e is not None]
        assert not failed, f"{len(failed)} of 1000 publishes failed, the first: {failed[0]!r}"
        await until(lambda: len(got) == 1001, timeout=10, what="every message")
        assert got == [tinystore.Missed(None, "reconnect"), *range(1000)]
        await sub.stop()
        await client.close()
    finally:
        _kill(owner)


async def test_chan_04_cluster_kill_9_of_the_subscribers_nats_server_resumes_with_nothing_missed(
    etcd_cluster: EtcdCluster,
) -> None:
    # A cluster store has no owner to restart: its reconnect is to another
    # NATS server. The subscriber knows only node 0 (it learns the others
    # from it), the publisher nodes 1 and 2; the stream keeps every message
    # of the branch (fewer than 1,024), so after the kill -9 the
    # subscription resumes from the last it got, told nothing missed.
    if "cluster" not in MODES:
        pytest.skip("TINYSTORE_TEST_MODES leaves the cluster out")
    started = time.monotonic()
    nats = NatsCluster()
    print(f"nats cluster up in {time.monotonic() - started:.1f}s")
    try:
        address = etcd_cluster.address(f"py{os.getpid()}-chan04kill")
        sub_store = await tinystore.connect(f"{address}?nats={nats.urls((0,))}", request_timeout=CLUSTER_TIMEOUT)
        pub_store = await tinystore.connect(f"{address}?nats={nats.urls((1, 2))}", request_timeout=CLUSTER_TIMEOUT)
        got: List[Any] = []
        sub = await sub_store.channel("c").under(1).subscribe(lambda m: got.append(m.value), on_missed=got.append)
        branch = pub_store.channel("c").under(1)
        for i in range(50):
            await branch.publish(i)
        await until(lambda: len(got) == 50, timeout=10, what="the first 50")
        nats.kill(0)
        killed = time.monotonic()
        for i in range(50, 100):
            await branch.publish(i)
        published = time.monotonic() - killed
        await until(lambda: len(got) >= 100, timeout=60, what="the 50 published after the kill")
        print(f"after the kill: published in {published:.1f}s, received in {time.monotonic() - killed:.1f}s")
        await asyncio.sleep(0.3)
        assert got == list(range(100)), "in order, nothing twice, nothing missed"
        await sub.stop()
        await pub_store.close()
        await sub_store.close()
    finally:
        nats.stop()


async def test_store_02_an_unreachable_store_raises_unavailable_within_the_timeout(tmp_path: Path) -> None:
    dir = tmp_path / "s"
    owner = _owner(dir)
    try:
        assert owner.stdout is not None
        await _line(owner.stdout)
        client = await tinystore.connect(f"unix:{dir / 'tinystore.sock'}", request_timeout="600ms")
        await client.channel("c").under(1).publish(1)
    finally:
        _kill(owner)
    t = time.monotonic()
    try:
        await client.channel("c").under(1).publish(2)
        raise AssertionError("published with no store")
    except tinystore.UnavailableError as e:
        took = time.monotonic() - t
        assert isinstance(e, ConnectionError) and e.code == "unavailable"
        assert "could not be reached" in e.message and "since" in e.message, e.message
        assert 0.5 <= took < 2.0, took
    t = time.monotonic()
    try:
        async with client.lock("l").hold("k", wait="100ms"):
            raise AssertionError("held with no store")
    except tinystore.UnavailableError:
        assert time.monotonic() - t < 2.0
    await client.close()
    try:
        await client.channel("c").under(1).publish(3)
        raise AssertionError("published after close")
    except tinystore.ClosedError:
        pass


async def test_store_01_lock_05_a_lease_outlives_the_owners_death_and_the_new_owner_waits_for_it(tmp_path: Path) -> None:
    """A holds K connected; the owner is killed (kill -9) and another
    process owns the store; B asks for K at once. A keeps its lease (same
    fence, never lost while it renews); B gets K only after A let go."""
    dir = tmp_path / "s"
    address = f"unix:{dir / 'tinystore.sock'}"
    owner = _owner(dir)
    assert owner.stdout is not None
    await _line(owner.stdout)
    a = await tinystore.connect(address)
    b: Any = None
    released_at: List[float] = []
    try:
        held = asyncio.Event()
        go = asyncio.Event()
        fences: List[int] = []

        async def hold_a() -> bool:
            async with a.lock("l", ttl="2s").hold("K") as lease:
                fences.append(lease.fence)
                held.set()
                await go.wait()
                lost = lease.lost
                released_at.append(time.monotonic())
            return lost

        a_task = asyncio.ensure_future(hold_a())
        await asyncio.wait_for(held.wait(), 5)
        _kill(owner)
        owner = _owner(dir)
        await _line(owner.stdout)
        b = await tinystore.connect(address)

        async def hold_b() -> Any:
            async with b.lock("l").hold("K", wait="10s") as lease:
                return lease.fence, time.monotonic()

        b_task = asyncio.ensure_future(hold_b())
        await asyncio.sleep(3.0)  # past A's ttl of 2 s: A renews through the new owner
        assert not b_task.done(), "B was granted K while A still held it"
        go.set()
        assert await asyncio.wait_for(a_task, 10) is False, "A was told lost while it renewed"
        fence_b, granted_at = await asyncio.wait_for(b_task, 10)
        assert granted_at >= released_at[0]
        assert fence_b > fences[0] and fence_b >> 64 > fences[0] >> 64
    finally:
        await a.close()
        if b is not None:
            await b.close()
        _kill(owner)
