"""The process around the engine: the interpreter exits without hanging,
Ctrl+C works, the event loop is never blocked, fork is refused clearly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tinystore
from conftest import python_env

LEFT_OPEN = """
import asyncio, sys, tinystore
async def main():
    store = await tinystore.open(sys.argv[1])
    events = store.channel("events")
    sub = await events.under(1).subscribe(lambda m: None)
    lock = store.lock("held")
    async def hold_forever():
        async with lock.hold("k"):
            await asyncio.sleep(3600)
    holder = asyncio.ensure_future(hold_forever())
    async def wait_forever():
        async with lock.hold("k", wait="1h"):
            pass
    waiter = asyncio.ensure_future(wait_forever())
    await events.under(1).publish("x")
    await asyncio.sleep(0.1)
    print("done", flush=True)   # returns with a subscription, a lease and a waiter still there
asyncio.run(main())
"""


def test_the_interpreter_exits_without_hanging_with_a_store_left_open(tmp_path: Path) -> None:
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", LEFT_OPEN, str(tmp_path / "s")],
        capture_output=True, text=True, timeout=30, env=python_env(),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"
    assert time.monotonic() - started < 15


WAITING = """
import asyncio, sys, tinystore
async def main():
    store = await tinystore.open(sys.argv[1])
    lock = store.lock("held")
    async def hold_forever():
        async with lock.hold("k"):
            await asyncio.sleep(3600)
    asyncio.ensure_future(hold_forever())
    await asyncio.sleep(0.05)
    print("waiting", flush=True)
    async with lock.hold("k", wait="1h"):
        pass
asyncio.run(main())
"""


def test_ctrl_c_ends_a_program_waiting_for_a_key(tmp_path: Path) -> None:
    # Ctrl+C as a terminal gives it: a suite started in the background of a
    # non-interactive shell hands its children SIGINT ignored, and Python
    # then never turns it into KeyboardInterrupt.
    p = subprocess.Popen(
        [sys.executable, "-c", WAITING, str(tmp_path / "s")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "waiting"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    finally:
        p.kill()
    assert "KeyboardInterrupt" in err
    assert p.returncode != 0


async def test_the_loop_keeps_running_while_the_engine_waits(store: tinystore.Store) -> None:
    lock = store.lock("slow")
    db = await store.database("chat")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def holder() -> None:
        async with lock.hold("k"):
            await asyncio.sleep(0.5)

    t = asyncio.ensure_future(ticker())
    h = asyncio.ensure_future(holder())
    await asyncio.sleep(0.01)
    async with lock.hold("k"):  # waits about 0.5 s for the key
        pass
    await db.exec("create table t (x)")  # SQL runs off the loop too
    await h
    t.cancel()
    assert ticks >= 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
async def test_a_child_forked_after_a_store_opened_is_refused_clearly(store: tinystore.Store, tmp_path: Path) -> None:
    pid = os.fork()
    if pid == 0:  # the child: the engine's threads did not survive the fork
        code = 1
        try:
            async def open_in_child() -> None:
                await tinystore.open(tmp_path / "child")

            asyncio.run(open_in_child())
        except RuntimeError as e:
            code = 7 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 7


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
async def test_lock_01_a_forked_child_cannot_use_the_parents_store(store: tinystore.Store) -> None:
    # The handle a child inherits is the parent's: using it there would work
    # on a private copy of the engine (a second holder of the same key with
    # the same fence, publishes nobody hears). Every use is refused instead.
    lock = store.lock("l")
    events = store.channel("c")
    pid = os.fork()
    if pid == 0:
        refused = 0
        try:
            async def use() -> None:
                nonlocal refused
                try:
                    await events.under(1).publish("from the child")
                except (tinystore.Error, RuntimeError) as e:
                    refused += "fork" in str(e)
                try:
                    async with lock.hold("k"):
                        pass
                except (tinystore.Error, RuntimeError) as e:
                    refused += "fork" in str(e)

            asyncio.run(use())
        except BaseException:
            os._exit(3)
        os._exit(10 + refused)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 12
    async with lock.try_hold("k") as lease:
        assert lease is not None  # the parent's store was not touched
