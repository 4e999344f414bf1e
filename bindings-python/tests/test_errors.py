"""Errors: one class per engine code, each also the builtin a Python program catches."""

from __future__ import annotations

import builtins
import sqlite3
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
