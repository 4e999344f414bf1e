"""SQL from Python: migrations, parameters and values, transactions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tinystore
from conftest import MIGRATIONS


async def test_migrations_apply_once_and_values_round_trip(stores) -> None:  # type: ignore[no-untyped-def]
    store = await stores.open()
    db = await store.database("chat", migrations=MIGRATIONS)
    assert db.path.endswith("chat.db")
    await db.exec("create table v (i integer, r real, t text, b blob, n)")
    done = await db.exec("insert into v values (?, ?, ?, ?, ?)", 2**62, 1.5, "é", b"\x00\xff", None)
    assert done == tinystore.Done(changes=1, last_insert_rowid=1)
    await db.exec("insert into v values (?, ?, ?, ?, ?)", True, 0, "", bytearray(b"x"), None)
    rows = await db.query("select * from v order by rowid")
    assert rows == [
        {"i": 2**62, "r": 1.5, "t": "é", "b": b"\x00\xff", "n": None},
        {"i": 1, "r": 0, "t": "", "b": b"x", "n": None},
    ]
    with pytest.raises(TypeError):
        await db.exec("insert into v (i) values (?)", [1])
    await stores.close()
    store = await stores.open()
    again = await store.database("chat", migrations=MIGRATIONS)  # applied once: no duplicate column
    assert await again.query("select count(*) as n from v") == [{"n": 2}]


async def test_tx_gives_the_functions_value_and_accepts_a_sync_function(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)

    async def add(tx: tinystore.SqlTx) -> int:
        done = await tx.exec("insert into chats (title) values (?)", "a")
        rows = await tx.query("select title from chats where id = ?", done.last_insert_rowid)
        assert rows == [{"title": "a"}]  # a transaction sees its own writes
        return done.last_insert_rowid

    assert await db.tx(add) == 1
    assert await db.tx(lambda tx: "sync") == "sync"


async def test_a_cancelled_transaction_rolls_back(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    inside = asyncio.Event()

    async def slow(tx: tinystore.SqlTx) -> None:
        await tx.exec("insert into chats (title) values ('cancelled')")
        inside.set()
        await asyncio.sleep(60)

    task = asyncio.ensure_future(db.tx(slow))
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.query("select * from chats") == []
    await db.exec("insert into chats (title) values ('next')")  # the writer is free again


async def test_chan_03_a_write_through_the_database_inside_its_own_tx_is_refused_at_once(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    later: list[asyncio.Task[Any]] = []
    started = asyncio.get_running_loop().time()

    async def fn(tx: tinystore.SqlTx) -> None:
        # Both would wait for this transaction's writer: the busy timeout, then BusyError.
        with pytest.raises(tinystore.ConflictError, match="use the tx it was given"):
            await db.exec("insert into chats (title) values ('through db')")
        with pytest.raises(tinystore.ConflictError, match="db.tx inside db.tx"):
            await db.tx(lambda inner: None)
        await tx.exec("insert into chats (title) values ('through tx')")
        # A task started here inherits the context; it writes once the tx has ended.
        later.append(asyncio.ensure_future(after()))

    async def after() -> None:
        await asyncio.sleep(0.05)
        await db.exec("insert into chats (title) values ('after')")

    await db.tx(fn)
    assert asyncio.get_running_loop().time() - started < 2, "refused at once, not after the busy timeout"
    await later[0]
    assert [r["title"] for r in await db.query("select title from chats order by id")] == ["through tx", "after"]


async def test_a_tx_object_used_after_its_function_is_refused(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    kept = []
    await db.tx(lambda tx: kept.append(tx))
    with pytest.raises(tinystore.InvalidError, match="ended"):
        await kept[0].exec("insert into chats (title) values ('late')")


async def test_a_failing_migration_raises_sql_error(store: tinystore.Store, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "0001_bad.sql").write_text("create tabel oops (x);")
    with pytest.raises(tinystore.SqlError):
        await store.database("other", migrations=bad)


@pytest.mark.cluster
async def test_chan_03_a_thousand_transactions_at_once_queue_for_the_writer(store: tinystore.Store) -> None:
    # More transactions than the runtime has blocking threads (512): they
    # queue for the writer without a thread each, so the one that holds it
    # always has a thread for its next statement; none fails with busy.
    db = await store.database("chat", migrations=MIGRATIONS)
    events = store.channel("chat-events")
    got: list[object] = []
    sub = await events.under(1).subscribe(got.append)

    async def add(tx: tinystore.SqlTx) -> int:
        done = await tx.exec("insert into chats (title) values (?)", "t")
        await tx.with_(events).under(1).publish(done.last_insert_rowid)
        return done.last_insert_rowid

    ids = await asyncio.gather(*(db.tx(add) for _ in range(1000)))
    assert sorted(ids) == list(range(1, 1001))
    writes = await asyncio.gather(*(db.exec("insert into chats (title) values (?)", "e") for _ in range(600)))
    assert len(writes) == 600
    assert await db.query("select count(*) as n from chats") == [{"n": 1600}]
    for _ in range(200):
        if len(got) == 1000:
            break
        await asyncio.sleep(0.02)
    await sub.stop()
    assert len(got) == 1000


@pytest.mark.cluster
async def test_chan_03_a_transaction_refuses_a_channel_of_another_store(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Its commit publishes to its database's store: a channel taken from
    # another handle would have been published there, where nobody of the
    # other store listens.
    store = await stores.open()
    other = await tinystore.open(tmp_path / "other")
    try:
        db = await store.database("chat", migrations=MIGRATIONS)
        here: list[object] = []
        there: list[object] = []
        subs = [await store.channel("ev").subscribe(here.append), await other.channel("ev").subscribe(there.append)]

        async def write(tx: tinystore.SqlTx) -> None:
            await tx.exec("insert into chats (title) values (?)", "t")
            await tx.with_(other.channel("ev")).publish("to the other store")

        with pytest.raises(tinystore.InvalidError, match="another store handle"):
            await db.tx(write)
        assert await db.query("select count(*) as n from chats") == [{"n": 0}]  # rolled back
        await store.channel("ev").publish("probe")
        for _ in range(100):
            if here:
                break
            await asyncio.sleep(0.01)
        assert [m.value for m in here] == ["probe"] and there == []  # type: ignore[attr-defined]
        for sub in subs:
            await sub.stop()
    finally:
        await other.close()


async def test_a_text_parameter_with_a_lone_surrogate_is_an_invalid_error(store: tinystore.Store) -> None:
    """No UTF-8 for it: a tinystore error, not the codec's, and nothing written."""
    db = await store.database("params")
    await db.exec("create table s (t text)")
    with pytest.raises(tinystore.InvalidError, match="lone surrogate"):
        await db.exec("insert into s values (?)", "a\ud800")
    assert await db.query("select count(*) as n from s") == [{"n": 0}]


async def test_a_nan_or_infinite_parameter_is_refused_naming_it(store: tinystore.Store) -> None:
    """The engine refuses a real that is NaN or infinite, for every binding
    (SQLite would store NaN as null, silently): an InvalidError naming the
    parameter, and nothing is written."""
    db = await store.database("params")
    await db.exec("create table t (a integer, r real)")
    for f, got in ((float("nan"), "got NaN"), (float("inf"), "got Infinity"), (float("-inf"), "got -Infinity")):
        with pytest.raises(tinystore.InvalidError, match="a SQL parameter is a finite number") as e:
            await db.exec("insert into t values (?, ?)", 1, f)
        assert got in str(e.value) and "parameter 2" in str(e.value)
        with pytest.raises(tinystore.InvalidError, match="finite"):
            await db.query("select ? as v", f)

        async def write(tx: tinystore.SqlTx) -> None:
            await tx.exec("insert into t values (?, ?)", 2, f)

        with pytest.raises(tinystore.InvalidError, match="finite"):
            await db.tx(write)
    assert await db.query("select count(*) as n from t") == [{"n": 0}]
