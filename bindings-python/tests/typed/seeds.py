"""The seeds' Python samples as a user checks them with ``mypy --strict``
(``make test`` does): each sample as written, inside a function that gives
it the names it uses, with the argument types a user writes where the
sample leaves them out. Only the app's own helpers (``model``, ``history``,
``send``) are stubbed. Not run: tests/test_seeds.py runs the samples.

The ``assert_type`` lines are what the stubs promise about the samples'
values; mypy fails when a stub gives another type.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Optional, assert_type

import tinystore


# The app's own helpers, stubbed.
class model:  # noqa: N801 - the samples call `model.summarize`
    @staticmethod
    async def summarize(history: list[str]) -> str:
        return " / ".join(history)


async def history(chat_id: int) -> list[str]:
    return [f"chat {chat_id}"]


def send(data: object) -> None:
    print(data)


# Live updates, "Open a channel and a lock", as written:
@dataclass
class ChatEvent:
    kind: str
    id: int


async def live_updates(store: tinystore.Store, db: tinystore.Database) -> None:
    events = store.channel("chat-events", ChatEvent)
    summaries = store.lock("summaries", ttl="30s")
    assert_type(events, tinystore.Channel[ChatEvent])
    assert_type(summaries, tinystore.Lock)

    # "Tell every open tab", the reply worker, as written:
    async def reply(chat_id: int, answer: str, message_id: int) -> None:
        async def save(tx: tinystore.SqlTx) -> None:
            reply = await tx.exec(
                "insert into messages (chat_id, role, text, created_at, reply_to) values (?, 'assistant', ?, ?, ?)",
                chat_id, answer, time.time_ns() // 1_000_000, message_id,
            )
            await tx.with_(events).under(chat_id).publish(ChatEvent(kind="message", id=reply.last_insert_rowid))

        await db.tx(save)

    # "Tell every open tab", the browser's stream, as written (`send` typed):
    async def stream(chat_id: int, send: Callable[[object], None], closed: asyncio.Event) -> None:
        sub = await events.under(chat_id).subscribe(
            lambda m: send(m.value),
            on_missed=lambda missed: send({"kind": "reload"}),
        )
        await closed.wait()  # the browser went away
        await sub.stop()

    # "One summary per chat at a time", as written:
    async def summarize(chat_id: int) -> None:
        async with summaries.try_hold(chat_id) as lease:
            if lease is None:
                return  # another worker is writing this chat's summary
            summary = await model.summarize(await history(chat_id))
            fence = f"{lease.fence:040d}"
            await db.exec(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                summary, fence, chat_id, fence,
            )

    await reply(7, "hello!", 1)
    await stream(7, send, asyncio.Event())
    await summarize(7)


# Fences, "Checking a fence in SQL", as written:
async def fences(summaries: tinystore.Lock, db: tinystore.Database, chat_id: int) -> None:
    async with summaries.hold(chat_id) as lease:
        summary = await model.summarize(await history(chat_id))
        fence = f"{lease.fence:040d}"
        await db.exec(
            "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
            summary, fence, chat_id, fence,
        )


# What the samples' values are: a transaction's function, async or plain,
# gives its result to `db.tx`; a lease's fence is an int.
async def results(db: tinystore.Database, summaries: tinystore.Lock) -> None:
    async def count(tx: tinystore.SqlTx) -> int:
        return len(await tx.query("select id from chats"))

    def nothing(tx: tinystore.SqlTx) -> Optional[str]:
        return None

    assert_type(await db.tx(count), int)
    assert_type(await db.tx(nothing), Optional[str])
    done = await db.exec("delete from chats")
    assert_type(done.changes, int)
    assert_type(done.last_insert_rowid, int)
    async with summaries.hold(7) as lease:
        assert_type(lease.fence, int)
    async with summaries.try_hold(7) as maybe:
        assert_type(maybe, Optional[tinystore.Lease])


async def main() -> None:
    async with await tinystore.open("data") as store:
        db = await store.database("chat")
        await live_updates(store, db)
        await fences(store.lock("summaries"), db, 7)
        await results(db, store.lock("summaries"))


if __name__ == "__main__":
    asyncio.run(main())
