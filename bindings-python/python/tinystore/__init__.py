"""tinystore: channels and locks with fences for the processes of one
application, in one engine that Python programs use in-process.

::

    import tinystore
    from dataclasses import dataclass

    @dataclass
    class ChatEvent:
        kind: str
        id: int

    async with tinystore.open("data") as store:
        events = store.channel("chat-events", ChatEvent)
        summaries = store.lock("summaries", ttl="30s")

        sub = await events.under(7).subscribe(lambda m: print(m.value))
        await events.under(7).publish(ChatEvent(kind="message", id=1))

        async with summaries.try_hold(7) as lease:
            if lease is not None:
                print("fence", f"{lease.fence:040d}")
        await sub.stop()

Every call is a coroutine that never blocks the event loop; handlers run on
the loop, one message at a time. Errors are :class:`tinystore.Error`
subclasses, one per code, each also the builtin a Python program catches
(see :mod:`tinystore.errors`).

Fork safety: the engine starts its threads when the first store is opened,
and threads do not survive ``fork()``. Open stores after forking, in the
processes that use them (for example in each worker of a pre-forking server,
or with multiprocessing's ``spawn``/``forkserver`` start methods). A child
forked after its parent opened a store gets a clear ``RuntimeError`` from
``open``. Nothing runs at import, so importing before forking is fine.

The interpreter exits without waiting for the engine: leases still held are
let go as it exits, and subscriptions end. A process that dies without
exiting (SIGKILL, a crash) lets nothing go: over a connection, its leases
last until their ttl runs out (30 s by default), as the owner cannot tell
that death from a connection that drops and comes back in time. Keep ttls
as short as the work allows where that wait matters.
"""

from __future__ import annotations

from . import fence
from ._status import BranchStatus, ConnectionStatus, HolderStatus, KeyStatus, StoreStatus
from ._native import __version__
from .branch import Branch, Key
from .channel import Channel
from .errors import (
    AuthError,
    BusyError,
    ClosedError,
    ConflictError,
    Error,
    InternalError,
    UnavailableError,
    InvalidError,
    IoError,
    LimitError,
    LostError,
    OwnedError,
    ProtocolError,
    SqlError,
    TimeoutError,
)
from .lease import Lease, Permit
from .lock import Duration, Lock, Semaphore
from .message import Message, Missed
from .sql import Database, Done, Row, SqlTx, TxBranch
from .store import Store, connect, open
from .subscription import Messages, Subscription

__all__ = [
    "__version__",
    "open",
    "connect",
    "Store",
    "Channel",
    "Branch",
    "Key",
    "Message",
    "Missed",
    "Messages",
    "Subscription",
    "Lock",
    "Semaphore",
    "Lease",
    "Permit",
    "Duration",
    "fence",
    "Database",
    "SqlTx",
    "TxBranch",
    "Done",
    "Row",
    "StoreStatus",
    "BranchStatus",
    "KeyStatus",
    "HolderStatus",
    "ConnectionStatus",
    "Error",
    "TimeoutError",
    "InvalidError",
    "LimitError",
    "ClosedError",
    "LostError",
    "OwnedError",
    "ConflictError",
    "BusyError",
    "SqlError",
    "AuthError",
    "IoError",
    "ProtocolError",
    "InternalError",
    "UnavailableError",
]
