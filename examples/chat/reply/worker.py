"""The reply worker: answers each user message of every chat.

It opens the same store directory as the web processes (connecting to
whichever process owns it) and listens to every branch of ``chat-events``.
An event only says "look again": the database has every message, so the
worker answers what is unanswered there, on each event, on each missed
event, and every few seconds. It saves each reply and publishes its event
in one transaction (CHAN-03): a tab never hears of a reply before it can
read it, and a rollback tells nobody anything.

    CHAT_STORE=data python worker.py

It prints one JSON line per thing that happened (``ready``, ``replied``,
``missed``) for the demo's report, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinystore

import model

MIGRATIONS = str(Path(__file__).resolve().parent.parent / "migrations")

BATCH = 200

# User messages not answered yet, after `floor`, oldest first; `turn` is the
# message's place among the chat's user messages (the model follows the script).
UNANSWERED = f"""
select m.id, m.chat_id, m.text, c.source,
       (select count(*) from messages u where u.chat_id = m.chat_id and u.role = 'user' and u.id < m.id) as turn
from messages m join chats c on c.id = m.chat_id
where m.id > ? and m.role = 'user' and not exists (select 1 from messages r where r.reply_to = m.id)
order by m.id limit {BATCH}
"""


@dataclass
class ChatEvent:
    kind: str
    id: int


def log(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "pid": os.getpid(), **fields}, ensure_ascii=False), flush=True)


class ReplyWorker:
    """Answers the unanswered user messages of ``db``, announcing each reply on ``events``."""

    def __init__(self, db: tinystore.Database, events: tinystore.Channel[ChatEvent]) -> None:
        self.db = db
        self.events = events
        self.floor = 0  # every user message up to this id is answered

    async def answer(self, chat_id: int, message_id: int, said: str, source: str, turn: int) -> None:
        """Saves the reply to one message and publishes its event, in one transaction (CHAN-03)."""
        events, db = self.events, self.db
        answer = model.reply(source, turn, said)

        async def save(tx: tinystore.SqlTx) -> None:
            reply = await tx.exec(
                "insert into messages (chat_id, role, text, created_at, reply_to) values (?, 'assistant', ?, ?, ?)",
                chat_id, answer, time.time_ns() // 1_000_000, message_id,
            )
            await tx.with_(events).under(chat_id).publish(ChatEvent(kind="message", id=reply.last_insert_rowid))

        await db.tx(save)
        log("replied", chat=chat_id, to=message_id)

    async def answer_all(self) -> int:
        """Answers every user message not answered yet; gives how many it answered."""
        answered = 0
        while True:
            [newest] = await self.db.query("select coalesce(max(id), 0) as id from messages")
            rows = await self.db.query(UNANSWERED, self.floor)
            for row in rows:
                await self.answer(row["chat_id"], row["id"], row["text"], row["source"], row["turn"])
                answered += 1
            if len(rows) < BATCH:
                self.floor = newest["id"]
                return answered
            self.floor = rows[-1]["id"]


async def main() -> None:
    store = await tinystore.open(os.environ.get("CHAT_STORE", "data"))
    db = await store.database("chat", migrations=MIGRATIONS)
    events = store.channel("chat-events", ChatEvent)
    worker = ReplyWorker(db, events)

    wake = asyncio.Event()

    def missed(m: tinystore.Missed) -> None:
        log("missed", reason=m.reason, count=m.count)
        wake.set()

    sub = await events.subscribe(lambda m: wake.set(), on_missed=missed, recursive=True)
    stop = asyncio.Event()

    def stopping() -> None:
        stop.set()
        wake.set()

    for s in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(s, stopping)
    log("ready")

    while not stop.is_set():
        wake.clear()
        try:
            await worker.answer_all()
        except tinystore.Error as e:
            # A reply already saved by another worker (the unique index), the
            # store changing owner, a busy database: look again soon.
            log("retry", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(0.2)
            continue
        try:
            await asyncio.wait_for(wake.wait(), timeout=2)
        except asyncio.TimeoutError:
            pass  # a publish lost with a connection is found all the same
    await sub.stop()
    await store.close()


if __name__ == "__main__":
    asyncio.run(main())
