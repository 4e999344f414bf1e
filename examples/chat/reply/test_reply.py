"""The reply worker and its model, on an in-process store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import tinystore

import corpus
import model
from worker import MIGRATIONS, ChatEvent, ReplyWorker


def test_model_follows_the_conversation_turn_by_turn():
    turns = corpus.script("english/greetings")
    # "Hi, How is it going?" opens several conversations, each answered otherwise.
    going = [i for i, t in enumerate(turns) if t.said == "Hi, How is it going?"]
    assert len({turns[i].answer for i in going}) > 1
    for i in going:
        assert model.reply("english/greetings", i, turns[i].said) == turns[i].answer


def test_model_answers_a_line_out_of_turn_with_its_first_answer_and_says_when_it_has_none():
    assert model.reply("english/greetings", 999, "Hi, How is it going?") == "Good"
    assert model.reply("english/greetings", 0, "qwerty") == "I have no line after “qwerty” yet."
    assert model.reply("", 0, "Hello") == "I have no line after “Hello” yet."


def test_corpus_keeps_non_ascii_text_and_numbers_as_text():
    sources = corpus.sources()
    assert "chinese/greetings" in sources and len(sources) > 200
    assert corpus.script("chinese/greetings")[0] == ("你好", "嗨")
    every_line = [t.said for s in sources for t in corpus.script(s)]
    assert all(isinstance(line, str) and line for line in every_line)


@pytest.fixture
async def chat(tmp_path: Path):
    store = await tinystore.open(tmp_path)
    db = await store.database("chat", migrations=MIGRATIONS)
    events = store.channel("chat-events", ChatEvent)
    done = await db.exec("insert into chats (title, source, created_at) values ('t', 'english/greetings', 0)")
    yield db, events, done.last_insert_rowid
    await store.close()


async def say(db: tinystore.Database, chat_id: int, text: str) -> int:
    done = await db.exec("insert into messages (chat_id, role, text, created_at) values (?, 'user', ?, 0)", chat_id, text)
    return done.last_insert_rowid


async def test_chan_03_a_reply_is_announced_after_its_commit_and_readable_then(chat):
    db, events, chat_id = chat
    asked = await say(db, chat_id, "Hello")
    seen = asyncio.Queue()

    async def read(m: tinystore.Message[ChatEvent]) -> None:
        rows = await db.query("select text, reply_to from messages where id = ?", m.value.id)
        await seen.put(rows)

    sub = await events.under(chat_id).subscribe(read)
    assert await ReplyWorker(db, events).answer_all() == 1
    assert await asyncio.wait_for(seen.get(), 5) == [{"text": "Hi", "reply_to": asked}]
    await sub.stop()


async def test_chan_03_a_second_answer_rolls_back_and_announces_nothing(chat):
    db, events, chat_id = chat
    asked = await say(db, chat_id, "Hello")
    worker = ReplyWorker(db, events)
    await worker.answer_all()
    got = []
    sub = await events.under(chat_id).subscribe(got.append)
    with pytest.raises(tinystore.SqlError):
        await worker.answer(chat_id, asked, "Hello", "english/greetings", 0)
    await events.under(chat_id).publish(ChatEvent(kind="probe", id=0))
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.02)
    assert [m.value.kind for m in got] == ["probe"]
    assert len(await db.query("select id from messages where reply_to = ?", asked)) == 1
    await sub.stop()


async def test_every_user_message_is_answered_once_in_its_turn(chat):
    db, events, chat_id = chat
    for text in ["Hello", "Hi", "Greetings!"]:
        await say(db, chat_id, text)
    worker = ReplyWorker(db, events)
    assert await worker.answer_all() == 3
    assert await worker.answer_all() == 0
    rows = await db.query(
        "select u.text as said, r.text as answer from messages u join messages r on r.reply_to = u.id"
        " where u.chat_id = ? order by u.id",
        chat_id,
    )
    assert [(r["said"], r["answer"]) for r in rows] == [("Hello", "Hi"), ("Hi", "Hello"), ("Greetings!", "Hello")]
