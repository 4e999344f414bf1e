"""Dataclasses a channel carries, in a module of their own, for the test
that their field types are looked up here and not in the caller's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, List, TypeVar

T = TypeVar("T")


@dataclass
class Item:
    sku: str
    qty: int


@dataclass
class Order:
    id: int
    items: List[Item]


@dataclass
class Leaf:
    name: str


@dataclass
class Crate(Generic[T]):
    item: T
    items: List[T]
