# Generated from the core by core/tests/generated.rs: do not edit.
# `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.
"""The engine's error codes, each with what it means (`tinystore::ErrorKind`)."""

from __future__ import annotations

from typing import Literal, Mapping

#: The stable code of every tinystore error, the same in every language.
Code = Literal[
    "timeout",
    "invalid",
    "limit",
    "closed",
    "lost",
    "owned",
    "conflict",
    "busy",
    "sql",
    "auth",
    "io",
    "protocol",
    "internal",
    "unavailable",
]

#: Every code, in the engine's order, with what it means.
CODES: Mapping[str, str] = {
    "timeout": "A wait ran out: hold found no free key within its wait, and nothing ran.",
    "invalid": "The caller passed something out of rule: a bad name, key, duration or value.",
    "limit": "A limit was reached: message size, subscriptions, pending output.",
    "closed": "The store was closed by this program (close was called): open it again to go on.",
    "lost": "A lease ran out or was taken away before its holder let it go.",
    "owned": "Another process owns the store directory.",
    "conflict": "The request contradicts what the store already has: a semaphore opened with another limit, a key the same holder already holds.",
    "busy": "A SQL database stayed locked by another writer past the busy timeout.",
    "sql": "A SQL statement failed, or a migration could not be applied.",
    "auth": "A missing or wrong token, or a token without the right.",
    "io": "The operating system refused a file or socket operation.",
    "protocol": "The peer spoke something this side does not understand.",
    "internal": "A bug in tinystore itself.",
    "unavailable": "The store could not be reached: its connection stayed down past the request timeout (the message says since when), or was cut before the store answered a call already sent (a publish may then have been delivered).",
}
