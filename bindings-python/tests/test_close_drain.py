"""Closing is a drain (issue 17 part 4): messages the store already took
reach the closing handle's own subscriptions, within close's bound (2 s),
then the subscriptions end without an error. Owned and connected, callback
and iterator forms, published by the closing handle or by another handle of
the store (connected: the owner; owned: a client over the socket; cluster:
another connection to the same cluster store)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Tuple

import pytest

import tinystore
from conftest import CLUSTER_TIMEOUT

N = 10
ROUNDS = 5  # a fresh store each round: the loss before the fix was a race
CLUSTER_ROUNDS = 2  # a cluster round makes new streams: about 0.7 s a round here


async def _rounds(stores: Any) -> AsyncIterator[Tuple[tinystore.Store, tinystore.Store]]:
    """(the handle to close, another handle of its store), ROUNDS times
    (CLUSTER_ROUNDS on a cluster store)."""
    for r in range(CLUSTER_ROUNDS if stores.mode == "cluster" else ROUNDS):
        if stores.mode == "cluster":  # a prefix a round: fresh streams
            address = stores.address(f"{stores.prefix}-{r}")
            store = await tinystore.connect(address, request_timeout=CLUSTER_TIMEOUT)
            other = await tinystore.connect(address, request_timeout=CLUSTER_TIMEOUT)
            try:
                yield store, other
            finally:
                await other.close()
                await store.close()
            continue
        d = stores.dir / str(r)
        owner = await tinystore.open(d)
        client = await tinystore.connect(f"unix:{d / 'tinystore.sock'}")
        try:
            yield (client, owner) if stores.mode == "connected" else (owner, client)
        finally:
            await client.close()
            await owner.close()


@pytest.mark.cluster
@pytest.mark.parametrize("by", ["self", "other"])
async def test_chan_01_close_drains_to_own_callback(stores: Any, by: str) -> None:
    async for store, other in _rounds(stores):
        got: List[int] = []
        sub = await store.channel("c").under(1).subscribe(lambda m: got.append(m.value))
        branch = (store if by == "self" else other).channel("c").under(1)
        for i in range(N):
            await branch.publish(i)  # the store took it
        started = asyncio.get_running_loop().time()
        await store.close()
        await asyncio.wait_for(sub.wait(), 2.0)  # ends, without an error
        assert asyncio.get_running_loop().time() - started < 2.0
        assert got == list(range(N)), f"{N - len(got)} of {N} messages the store took never reached the handler"


@pytest.mark.cluster
@pytest.mark.parametrize("by", ["self", "other"])
async def test_chan_01_close_drains_to_own_iterator(stores: Any, by: str) -> None:
    async for store, other in _rounds(stores):
        it = await store.channel("c").under(1).messages()
        branch = (store if by == "self" else other).channel("c").under(1)
        for i in range(N):
            await branch.publish(i)
        started = asyncio.get_running_loop().time()
        await store.close()
        got = await asyncio.wait_for(_all(it), 2.0)  # ends, without an error
        assert asyncio.get_running_loop().time() - started < 2.0
        assert got == list(range(N)), f"{N - len(got)} of {N} messages the store took never reached the iterator"


@pytest.mark.cluster
async def test_chan_01_close_drains_publishes_not_yet_answered(stores: Any) -> None:
    """Publishes still on their way when close is called resolve, and reach
    the handle's own subscription."""
    async for store, _ in _rounds(stores):
        branch = store.channel("c").under(1)
        it = await branch.messages()
        published = [branch.publish(i) for i in range(N)]
        await store.close()
        await asyncio.gather(*published)
        assert await asyncio.wait_for(_all(it), 2.0) == list(range(N))


async def _all(it: Any) -> List[Any]:
    return [m.value async for m in it]
