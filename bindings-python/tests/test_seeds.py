"""The seeds' Python samples, run as written, with stand-ins for the app's
own `model`, `history` and `send`."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, List

import tinystore
from conftest import LOG, MIGRATIONS, Stores, until


# Live updates, "Open a channel and a lock":
@dataclass
class ChatEvent:
    kind: str
    id: int


class model:  # noqa: N801 - the samples call `model.summarize`
    calls = 0

    @staticmethod
    async def summarize(history: List[str]) -> str:
        model.calls += 1
        await asyncio.sleep(0.05)
        return " / ".join(history)


async def test_seed_live_updates_channel_transaction_stream_and_try_hold(stores: Stores) -> None:
    store = await stores.open()
    db = await store.database("chat", migrations=MIGRATIONS)

    # "Open a channel and a lock", as written:
    events = store.channel("chat-events", ChatEvent)
    summaries = store.lock("summaries", ttl="30s")

    chat_id = 7
    await db.exec("insert into chats (id) values (?)", chat_id)
    first = await db.exec(
        "insert into messages (chat_id, role, text, created_at) values (?, 'user', ?, ?)", chat_id, "hi", 0
    )
    message_id = first.last_insert_rowid

    # "Tell every open tab": the browser's stream, as written.
    async def stream(chat_id: int, send, closed: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
        sub = await events.under(chat_id).subscribe(
            lambda m: send(m.value),
            on_missed=lambda missed: send({"kind": "reload"}),
        )
        await closed.wait()  # the browser went away
        await sub.stop()

    # The tab's `send`: a phone on a slow network, frozen by the first
    # message of a burst until the burst is over.
    sent: List[Any] = []
    tab_stuck = threading.Event()
    burst_over = threading.Event()

    def send(data: Any) -> None:
        sent.append(data)
        if isinstance(data, ChatEvent) and data.id == 0:
            tab_stuck.set()
            burst_over.wait(10)

    closed = asyncio.Event()
    tab = asyncio.ensure_future(stream(chat_id, send, closed))
    await until(lambda: store.status()["subscriptions"] == 1, what="the tab to subscribe")

    # The reply worker, as written:
    answer = "hello!"

    async def save(tx: tinystore.SqlTx) -> None:
        reply = await tx.exec(
            "insert into messages (chat_id, role, text, created_at, reply_to) values (?, 'assistant', ?, ?, ?)",
            chat_id, answer, time.time_ns() // 1_000_000, message_id,
        )
        await tx.with_(events).under(chat_id).publish(ChatEvent(kind="message", id=reply.last_insert_rowid))

    await db.tx(save)
    await until(lambda: len(sent) == 1, what="the tab to hear of the reply")
    assert sent == [ChatEvent(kind="message", id=message_id + 1)]
    rows = await db.query("select text from messages where id = ?", sent[0].id)
    assert rows == [{"text": "hello!"}]

    # "A tab that falls behind": a burst past the branch's log, published by
    # another thread while the tab is stuck, means one reload.
    async def burst() -> None:
        await events.under(chat_id).publish(ChatEvent(kind="message", id=0))
        assert tab_stuck.wait(10)
        for i in range(1, 1100):
            await events.under(chat_id).publish(ChatEvent(kind="message", id=i))
        await until(stores.forwarded, what="the owner to send what it has")
        burst_over.set()

    publisher = threading.Thread(target=asyncio.run, args=(burst(),))
    publisher.start()
    await until(lambda: burst_over.is_set(), what="the burst")
    publisher.join()
    await until(lambda: sent[-1] == ChatEvent(kind="message", id=1099), what="the last message")
    # message 0, then one reload, then every message from the oldest still
    # kept: owned, the log's newest 1,024 (1099 - 1024 missed); connected, the
    # client's inbox may keep a few more that were on the wire.
    assert sent[1:3] == [ChatEvent(kind="message", id=0), {"kind": "reload"}]
    after = sent[3:]
    assert {"kind": "reload"} not in after
    first = after[0].id
    assert after == [ChatEvent(kind="message", id=i) for i in range(first, 1100)]
    assert first <= 1100 - LOG
    if stores.mode == "owned":
        assert first == 1100 - LOG
    closed.set()
    await asyncio.wait_for(tab, 5)
    await until(lambda: store.status()["subscriptions"] == 0, what="the tab's subscription to end")

    # "One summary per chat at a time", as written:
    async def history(chat_id: int) -> List[str]:
        return [r["text"] for r in await db.query("select text from messages where chat_id = ? order by id", chat_id)]

    async def summarize_chat(chat_id: int) -> None:
        async with summaries.try_hold(chat_id) as lease:
            if lease is None:
                return  # another worker is writing this chat's summary
            summary = await model.summarize(await history(chat_id))
            fence = f"{lease.fence:040d}"
            await db.exec(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                summary, fence, chat_id, fence,
            )

    model.calls = 0
    await asyncio.gather(summarize_chat(chat_id), summarize_chat(chat_id))
    assert model.calls == 1  # two replies finishing at once start one summary
    rows = await db.query("select summary, length(summary_fence) as n from chats where id = ?", chat_id)
    assert rows == [{"summary": "hi / hello!", "n": 40}]


async def test_seed_fences_hold_sample(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    summaries = store.lock("summaries", ttl="30s")
    chat_id = 9
    await db.exec("insert into chats (id) values (?)", chat_id)

    async def history(chat_id: int) -> List[str]:
        return ["one", "two"]

    # Fences, "Checking a fence in SQL", as written:
    async with summaries.hold(chat_id) as lease:
        summary = await model.summarize(await history(chat_id))
        fence = f"{lease.fence:040d}"
        await db.exec(
            "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
            summary, fence, chat_id, fence,
        )

    rows = await db.query("select summary, summary_fence from chats where id = ?", chat_id)
    assert rows == [{"summary": "one / two", "summary_fence": fence}]
