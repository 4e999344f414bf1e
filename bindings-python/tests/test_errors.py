"""Errors: one class per engine code, each also the builtin a Python program catches."""

from __future__ import annotations

import builtins
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

import tinystore
from conftest import MIGRATIONS

BUILTIN = {
    "timeout": builtins.TimeoutError,
    "invalid": ValueError,
    "limit": ValueError,
    "closed": RuntimeError,
    "lost": RuntimeError,
    "owned": OSError,
    "conflict": RuntimeError,
    "busy": builtins.TimeoutError,
    "sql": sqlite3.DatabaseError,
    "auth": PermissionError,
    "io": OSError,
    "protocol": ConnectionError,
    "internal": RuntimeError,
    "unavailable": ConnectionError,
}


def test_every_engine_code_has_a_class_that_is_also_its_builtin() -> None:
    from tinystore.errors import BY_CODE

    assert set(BY_CODE) == set(BUILTIN)
    for code, cls in BY_CODE.items():
        e = cls("what went wrong")
        assert isinstance(e, tinystore.Error) and isinstance(e, BUILTIN[code])
        assert e.code == code and str(e) == "what went wrong" and e.message == "what went wrong"
        assert getattr(tinystore, cls.__name__) is cls


async def test_a_closed_store_raises_closed_error(store: tinystore.Store) -> None:
    lock = store.lock("l")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(tinystore.ClosedError) as e:
        async with lock.hold("k"):
            pass
    assert e.value.code == "closed"
    with pytest.raises(tinystore.ClosedError):
        store.lock("other")


async def test_a_failed_statement_raises_sql_error(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    with pytest.raises(tinystore.SqlError) as e:
        await db.exec("insert into nowhere values (1)")
    assert isinstance(e.value, sqlite3.DatabaseError) and "nowhere" in str(e.value)


async def test_connect_to_an_address_nobody_serves_raises_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(tinystore.Error):
        await tinystore.connect(f"unix:{tmp_path / 'nowhere.sock'}")


async def test_status_after_close_raises_closed_error(store: tinystore.Store) -> None:
    assert "locks" in store.status()
    await store.close()
    with pytest.raises(tinystore.ClosedError) as e:
        store.status()
    assert "closed" in str(e.value)


async def test_names_numbers_out_of_range_are_invalid_errors_that_say_what_to_do(store: tinystore.Store) -> None:
    for limit in (-1, 0, 2**32, 2**40):
        with pytest.raises(tinystore.InvalidError, match="limit.*like 3"):
            store.semaphore("s", limit=limit)
    for ttl in (-1, 2**70, 10**400, float("inf"), float("nan"), 1e300, timedelta.max, timedelta(seconds=-1)):
        with pytest.raises(tinystore.InvalidError, match="30"):
            store.lock("ok", ttl=ttl)
    for d in (1e19, 10**400, "99999999999999h"):
        with pytest.raises(tinystore.InvalidError):
            store.lock("ok", wait=d)
        with pytest.raises(tinystore.InvalidError):
            store.lock("ok", max_hold=d)
        with pytest.raises(tinystore.InvalidError):
            async with store.lock("ok").hold("k", wait=d):
                pass
    with pytest.raises(TypeError, match="limit"):
        store.semaphore("s", limit="3")  # type: ignore[arg-type]

    # An int key is its decimal digits, however large; over 1,024 bytes it is refused.
    async with store.lock("big").hold(2**200) as lease:
        assert lease.key == str(2**200)
    assert store.channel("c").under(-(2**130)).path == (str(-(2**130)),)
    with pytest.raises(tinystore.InvalidError, match="1,024|1024"):
        async with store.lock("big").hold(10**1100):
            pass

    db = await store.database("numbers")
    await db.exec("create table t (x)")
    for big in (2**63, 2**70, -(2**63) - 1):
        with pytest.raises(tinystore.InvalidError, match="64-bit") as e:
            await db.exec("insert into t values (?)", big)
        assert "str(" in str(e.value)
    await db.exec("insert into t values (?), (?)", 2**63 - 1, -(2**63))
    assert await db.query("select x from t") == [{"x": 2**63 - 1}, {"x": -(2**63)}]


def test_connect_documents_every_address_form() -> None:
    stub = (Path(__file__).parent.parent / "python" / "tinystore" / "_native.pyi").read_text()
    for doc in (tinystore.connect.__doc__ or "", stub):
        for form in ("unix:PATH", "tcp:HOST:PORT", "tls:HOST:PORT", "TINYSTORE_TOKEN", "TINYSTORE_CA"):
            assert form in doc, form


async def test_status_has_the_shape_of_the_generated_types(store):
    """The status dict has exactly the fields of tinystore.StoreStatus, which
    is generated from the core's shape (core/tests/generated.rs)."""
    st = store.status()
    assert set(st) == set(tinystore.StoreStatus.__annotations__)
    branch = store.channel("shape").under(1)
    sub = await branch.subscribe(lambda m: None)
    try:
        st = store.status()
        b = next(b for b in st["branches"] if b["channel"] == "shape")
        assert set(b) == set(tinystore.BranchStatus.__annotations__)
        assert b["lag"] == [0]
    finally:
        await sub.stop()
