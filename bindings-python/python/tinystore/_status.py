# Generated from the core by core/tests/generated.rs: do not edit.
# `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.
"""What ``store.status()`` gives: the engine's status JSON as typed dicts
(``tinystore::status::SHAPE``). A fence is its decimal digits, as in the JSON."""

from __future__ import annotations

from typing import List, Optional, TypedDict

__all__ = ["StoreStatus", "BranchStatus", "KeyStatus", "HolderStatus", "ConnectionStatus"]


class StoreStatus(TypedDict):
    """What a store holds now, as its owner sees it."""

    #: The store directory (the owner's path).
    dir: str
    #: The owner's process id.
    pid: int
    #: The owner's epoch: the high 64 bits of every fence it gives.
    epoch: int
    #: Milliseconds since the owner opened the store.
    uptime_ms: int
    #: Subscriptions now, of every process (at most 10,000).
    subscriptions: int
    #: Bytes all channels keep (at most 64 MiB).
    channel_bytes: int
    #: Every branch the store knows.
    branches: List["BranchStatus"]
    #: Every key held or waited for.
    locks: List["KeyStatus"]
    #: The processes connected to the owner.
    connections: List["ConnectionStatus"]


class BranchStatus(TypedDict):
    """One branch of a channel."""

    #: The channel's name.
    channel: str
    #: The branch's keys as text; empty for the channel's root.
    branch: List[str]
    #: Subscriptions of this branch alone.
    subscribers: int
    #: Recursive subscriptions rooted here.
    recursive_subscribers: int
    #: Messages its log keeps now (at most 1,024).
    kept_messages: int
    #: Bytes its log keeps now (at most 4 MiB).
    kept_bytes: int
    #: Messages published to it while the store knew it.
    published: int
    #: How many messages each of its subscriptions has yet to read (past 1,024 a subscription misses).
    lag: List[int]


class KeyStatus(TypedDict):
    """One key of a lock or semaphore, held or waited for."""

    #: The lock's or semaphore's name.
    lock: str
    #: The key, as text.
    key: str
    #: Its leases now (a semaphore's key can have up to its limit).
    holders: List["HolderStatus"]
    #: Holds waiting in line.
    waiters: int


class HolderStatus(TypedDict):
    """One lease of a key."""

    #: The lease's id.
    lease: int
    #: Its fence; None for a semaphore's permit.
    fence: Optional[str]
    #: Who holds it: the holder id.
    holder: int
    #: Milliseconds since it was given.
    held_ms: int
    #: Milliseconds until it runs out, where it can (ttl or maxHold); else None.
    left_ms: Optional[int]


class ConnectionStatus(TypedDict):
    """One process connected to the owner."""

    #: The connection's id.
    id: int
    #: The name the client gave.
    client: str
    #: Where it connected from.
    address: str
    #: Milliseconds since it connected.
    since_ms: int
