"""Fixtures: stores to run the contracts against.

Every contract test takes the `store` fixture, which runs it once per entry
of MODES. "owned" opens the directory in this process. When connected mode
lands, adding "connected" to MODES runs every contract test again against a
store reached over its socket (the owner is opened here, then connected to).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest

import tinystore

# TINYSTORE_TEST_MODES=owned,connected runs both (connected mode is being built).
MODES = os.environ.get("TINYSTORE_TEST_MODES", "owned").split(",")

HERE = Path(__file__).parent
MIGRATIONS = HERE / "migrations"
VECTORS = HERE.parent.parent / "tests" / "vectors" / "fences.json"


class Stores:
    """Opens stores of one mode in one directory; closes them all at the end."""

    def __init__(self, mode: str, dir: Path) -> None:
        self.mode = mode
        self.dir = dir
        self.opened: list[tinystore.Store] = []

    async def open(self) -> tinystore.Store:
        """A store of this mode (for connected mode, the owner is opened first)."""
        if self.mode == "owned":
            store = await tinystore.open(self.dir)
        else:
            owner = await tinystore.open(self.dir)
            self.opened.append(owner)
            store = await tinystore.connect(f"unix:{self.dir / 'tinystore.sock'}")
        self.opened.append(store)
        return store

    async def close(self) -> None:
        for s in reversed(self.opened):
            await s.close()
        self.opened.clear()


@pytest.fixture(params=MODES)
async def stores(request: Any, tmp_path: Path) -> AsyncIterator[Stores]:
    s = Stores(request.param, tmp_path / "store")
    yield s
    await s.close()


@pytest.fixture
async def store(stores: Stores) -> tinystore.Store:
    return await stores.open()


async def until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Waits (yielding to the loop) until `cond()` is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def python_env() -> dict[str, str]:
    """The environment for a child Python that imports this package."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
