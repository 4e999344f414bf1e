"""Fixtures: stores to run the contracts against.

Every contract test takes the `store` fixture, which runs it once per entry
of MODES: "owned" opens the directory in this process; "connected" opens the
owner here too, then tests a second handle made by
`tinystore.connect("unix:<dir>/tinystore.sock")`, which reaches the store
over its socket like any other process would.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

import pytest

import tinystore

# Both by default; TINYSTORE_TEST_MODES=owned (or connected) runs one.
MODES = os.environ.get("TINYSTORE_TEST_MODES", "owned,connected").split(",")

LOG = 1024  # a branch keeps its newest 1,024 messages (and a client's inbox as many)

HERE = Path(__file__).parent
MIGRATIONS = HERE / "migrations"
VECTORS = HERE.parent.parent / "tests" / "vectors" / "fences.json"


class Stores:
    """Opens stores of one mode in one directory; closes them all at the end."""

    def __init__(self, mode: str, dir: Path) -> None:
        self.mode = mode
        self.dir = dir
        self.opened: list[tinystore.Store] = []
        self.owner: Optional[tinystore.Store] = None

    async def open(self) -> tinystore.Store:
        """A store of this mode (for connected mode, the owner is opened first)."""
        self.owner = await tinystore.open(self.dir)
        self.opened.append(self.owner)
        if self.mode == "owned":
            return self.owner
        store = await tinystore.connect(f"unix:{self.dir / 'tinystore.sock'}")
        self.opened.append(store)
        return store

    def forwarded(self) -> bool:
        """Connected: true once the owner has handed every subscription all it
        has (no lag), so the rest is on the wire to the client's inbox. Owned
        (no wire): true."""
        assert self.owner is not None
        return self.mode == "owned" or all(lag == 0 for b in self.owner.status()["branches"] for lag in b["lag"])

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


def told_exactly(seen: list[Any], published: list[Any]) -> tinystore.Missed:
    """Checks CHAN-02 on what a subscriber that fell behind got: `seen` holds
    the values of its messages and the `Missed` it was told, in the order it
    got them; `published` the values published, in order.

    It was told once (reason "behind"), before the first message after the
    gap; the count is exactly how many it never got (every message is either
    delivered or counted, none twice); then it went on from the oldest message
    still kept (at least the log's newest 1,024) to the last. Gives the
    `Missed`.

    Owned, the log is the only place messages wait, so the count is the
    number published past the log. Connected, what was already on the wire
    waits in the client's inbox (bounded like a log, counted there), so more
    can arrive after a reader resumes: fewer missed, still exactly counted.
    """
    misses = [i for i, x in enumerate(seen) if isinstance(x, tinystore.Missed)]
    assert len(misses) == 1, f"told {len(misses)} times: {[seen[i] for i in misses]}"
    at = misses[0]
    missed = seen[at]
    assert missed.reason == "behind" and missed.count is not None and missed.count > 0, missed
    assert seen[:at] == published[:at], "before the gap: every message, in order"
    after = seen[at + 1 :]
    assert after == published[at + missed.count :], "after the gap: from the oldest kept to the last, in order"
    assert len(after) >= LOG, f"the newest {LOG} are kept; got {len(after)}"
    return missed


def python_env() -> dict[str, str]:
    """The environment for a child Python that imports this package."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
