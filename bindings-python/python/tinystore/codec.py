"""How a channel's values travel: as JSON, like in every language.

A channel made with a type (``store.channel("chat-events", ChatEvent)``)
writes dataclasses as JSON objects of their fields and reads them back as
that type, nested dataclasses, ``list[...]``, ``dict[str, ...]``,
``Optional[...]``/``... | None`` and enums included. A channel made without a
type (or with ``dict``, ``list``, ``Any``) carries plain JSON values: dicts,
lists, strings, numbers, booleans and None.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import typing
from typing import Any, Callable, Generic, Optional, TypeVar

T = TypeVar("T")

_NONE = type(None)
_PLAIN = (Any, object, dict, list, str, int, bool, _NONE)


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    if isinstance(o, enum.Enum):
        return o.value
    if isinstance(o, (set, frozenset)):
        return list(o)
    raise TypeError(
        f"a {type(o).__name__} cannot travel on a channel: publish dataclasses or values JSON can carry "
        "(dict, list, str, int, float, bool, None)"
    )


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default).encode


def encode(value: Any) -> bytes:
    """The JSON bytes of ``value``. Raises ``TypeError`` for a value JSON
    cannot carry and ``ValueError`` for NaN or infinity."""
    return _dumps(value).encode()


Decode = Optional[Callable[[Any], Any]]


def _converter(tp: Any, ns: Optional[dict[str, Any]] = None) -> Decode:
    """A function from a JSON value to ``tp``; None where nothing is to do."""
    if tp in _PLAIN or tp is None:
        return None
    if tp is float:
        return lambda v: float(v) if type(v) is int else v
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_converter(tp, ns)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is _union_type()):
        rest = [a for a in args if a is not _NONE]
        inner = _converter(rest[0], ns) if len(rest) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin in (list, tuple, set, frozenset) or origin in _abc_sequences():
        if origin is tuple:  # tuple[X, ...] converts each item; other tuples carry theirs as is
            elem = _converter(args[0], ns) if len(args) == 2 and args[1] is Ellipsis else None
        else:
            elem = _converter(args[0], ns) if args else None
        make = tuple if origin is tuple else set if origin is set else frozenset if origin is frozenset else list
        if elem is None:
            return None if make is list else (lambda v: v if v is None else make(v))
        return lambda v: v if v is None else make(elem(x) for x in v)
    if origin is dict or origin in _abc_mappings():
        val = _converter(args[1], ns) if len(args) == 2 else None
        if val is None:
            return None
        return lambda v: v if v is None else {k: val(x) for k, x in v.items()}
    return None  # Literal, TypedDict, NewType...: carried as they are


def _union_type() -> Any:
    import types

    return types.UnionType


def _abc_sequences() -> tuple[Any, ...]:
    import collections.abc as c

    return (c.Sequence, c.MutableSequence, c.Iterable, c.Collection)


def _abc_mappings() -> tuple[Any, ...]:
    import collections.abc as c

    return (c.Mapping, c.MutableMapping)


def _dataclass_converter(cls: type, ns: Optional[dict[str, Any]]) -> Callable[[Any], Any]:
    try:
        hints = typing.get_type_hints(cls, localns=ns)
    except NameError as e:
        raise TypeError(
            f"the field types of {cls.__name__} could not be resolved ({e}): define the dataclasses "
            "a channel carries at module level"
        ) from e
    fields = [(f.name, _converter(hints.get(f.name, Any), ns)) for f in dataclasses.fields(cls) if f.init]

    def convert(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise TypeError(f"a {cls.__name__} travels as a JSON object; got {type(v).__name__}")
        kw = {}
        for name, conv in fields:
            if name in v:
                x = v[name]
                kw[name] = x if conv is None else conv(x)
        return cls(**kw)

    return convert


class Codec(Generic[T]):
    """Encodes values of one type to JSON bytes and decodes them back."""

    __slots__ = ("type", "_convert")

    def __init__(self, tp: Any = None, ns: Optional[dict[str, Any]] = None) -> None:
        """``ns``: names to resolve string annotations with (the caller's
        locals, for dataclasses defined inside a function)."""
        self.type = tp
        self._convert = _converter(tp, ns)

    encode = staticmethod(encode)

    def decode(self, data: bytes) -> T:
        """The value of JSON ``data``: raises ``ValueError`` or ``TypeError``
        when it is not JSON or not of this codec's type."""
        v = json.loads(data)
        c = self._convert
        return v if c is None else c(v)
