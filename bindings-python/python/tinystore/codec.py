"""How a channel's values travel: as JSON, like in every language.

A channel made with a type (``store.channel("chat-events", ChatEvent)``)
writes dataclasses as JSON objects of their fields and reads them back as
that type, nested dataclasses, ``list[...]``, ``dict[str, ...]``,
``Optional[...]``/``... | None`` and enums included. A channel made without a
type (or with ``Any``) carries plain JSON values: dicts, lists, strings,
numbers, booleans and None.

Publishing checks the value against the channel's type first and raises
``InvalidError`` (a ``ValueError``) for another type, before anything is
published: the value itself (a subclass counts; an int counts as a float),
each item of a declared ``list[...]``/``dict[str, ...]``, either side of an
``Optional``/``Union``. A dataclass's own fields are not checked, as Python
does not check them either.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import threading
import typing
from typing import Any, Callable, Generic, Iterable, Optional, TypeVar

from .errors import InvalidError, LimitError

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


_c_make_encoder: Optional[Callable[..., Callable[..., Iterable[str]]]]
try:
    from _json import make_encoder

    _c_make_encoder = make_encoder
except ImportError:  # a Python without json's C accelerator
    _c_make_encoder = None


class _Encoder(threading.local):
    """json's encoder, made once per thread: ``JSONEncoder.encode`` makes a
    C encoder per call, three Python frames deep, about half of a small
    message's encoding. Its circular check marks the containers it is
    inside in ``markers``, hence one per thread."""

    def __init__(self) -> None:
        self.markers: dict[int, Any] = {}
        # (value, 0): the chunks of value's JSON.
        self.chunks: Callable[..., Iterable[str]]
        if _c_make_encoder is not None:
            self.chunks = _c_make_encoder(
                self.markers, _default, json.encoder.encode_basestring, None, ":", ",", False, False, False
            )
        else:
            self.chunks = json.JSONEncoder(
                separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
            ).iterencode


_encoder = _Encoder()
_join = "".join


def _failed(e: _Encoder, err: BaseException) -> BaseException:
    """The error to raise for a value ``e`` could not encode."""
    # An error leaves the containers it was inside marked: a later value
    # at one of their addresses would be taken for a cycle.
    e.markers.clear()
    if isinstance(err, RecursionError):
        return LimitError(
            "a message nests arrays and objects at most 100 deep, so that every language's decoder reads it; "
            "this one goes deeper than Python can encode: flatten it, or publish an id and keep the data in the database"
        )
    if type(err) is ValueError and str(err) == "Circular reference detected":
        return ValueError("this value holds itself, and JSON cannot carry it: publish a value without cycles")
    if isinstance(err, UnicodeEncodeError):
        bad = err.object[err.start : err.end]
        return ValueError(
            f"a str in this value holds {bad!r}, a lone surrogate, which UTF-8 (the wire's and every "
            "language's JSON) cannot carry: publish valid Unicode text"
        )
    return err


def encode(value: Any) -> bytes:
    """The JSON bytes of ``value``. Raises ``TypeError`` for a value JSON
    cannot carry, ``ValueError`` for NaN or infinity, a lone surrogate in
    a str, or a value that holds itself, and ``LimitError`` for one nested
    deeper than Python's recursion allows (the store's limit is 100)."""
    e = _encoder
    try:
        return _join(e.chunks(value, 0)).encode()
    except BaseException as err:
        raise _failed(e, err) from None


Decode = Optional[Callable[[Any], Any]]


#: Dataclasses (or their generic aliases) whose converter is being made:
#: a cell that holds it once made.
_Seen = dict[Any, list[Callable[[Any], Any]]]


def _converter(tp: Any, ns: Optional[dict[str, Any]] = None, seen: Optional[_Seen] = None) -> Decode:
    """A function from a JSON value to ``tp``; None where nothing is to do.
    ``seen``: the dataclasses being converted further up, for types that
    hold themselves (``children: list[Tree]``)."""
    if seen is None:
        seen = {}
    if tp in _PLAIN or tp is None:
        return None
    if tp is float:
        return lambda v: float(v) if type(v) is int else v
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_converter(tp, tp, (), ns, seen)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(origin) and isinstance(origin, type):  # Box[int]
        return _dataclass_converter(tp, origin, args, ns, seen)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is _union_type()):
        rest = [a for a in args if a is not _NONE]
        inner = _converter(rest[0], ns, seen) if len(rest) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin in (list, tuple, set, frozenset) or origin in _abc_sequences():
        if origin is tuple:  # tuple[X, ...] converts each item; other tuples carry theirs as is
            elem = _converter(args[0], ns, seen) if len(args) == 2 and args[1] is Ellipsis else None
        else:
            elem = _converter(args[0], ns, seen) if args else None
        make = tuple if origin is tuple else set if origin is set else frozenset if origin is frozenset else list
        if elem is None:
            return None if make is list else (lambda v: v if v is None else make(v))
        return lambda v: v if v is None else make(elem(x) for x in v)
    if origin is dict or origin in _abc_mappings():
        val = _converter(args[1], ns, seen) if len(args) == 2 else None
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


def _dataclass_converter(
    tp: Any, cls: type, args: tuple[Any, ...], ns: Optional[dict[str, Any]], seen: _Seen
) -> Callable[[Any], Any]:
    """``tp``: ``cls`` itself, or ``cls[args]`` for a generic dataclass."""
    known = seen.get(tp)
    if known is not None:
        if known:
            return known[0]  # made already, for another field
        return lambda v: known[0](v)  # a type that holds itself: its converter, once made
    cell: list[Callable[[Any], Any]] = []  # its converter, once made
    seen[tp] = cell
    hints = _hints(cls, ns)
    if args:  # Box[int]: the fields' type variables are args
        given = dict(zip(getattr(cls, "__parameters__", ()), args))
        hints = {name: _given(h, given) for name, h in hints.items()}
    fields = [(f.name, _converter(hints.get(f.name, Any), ns, seen)) for f in dataclasses.fields(cls) if f.init]

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

    cell.append(convert)
    return convert


def _hints(cls: type, ns: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The field types of ``cls``, their names looked up in its own module
    first (and its own name, for a class made in a function), then in the
    caller's names ``ns`` (for classes defined next to it in a function):
    a caller's own ``Item`` or ``T`` does not stand in for the module's."""
    own = {cls.__name__: cls}
    try:
        return typing.get_type_hints(cls, localns=own)
    except NameError:
        pass
    try:
        return typing.get_type_hints(cls, localns={**(ns or {}), **own})
    except NameError as e:
        raise TypeError(
            f"the field types of {cls.__name__} could not be resolved ({e}): define the dataclasses "
            "a channel carries at module level"
        ) from e


def _given(hint: Any, given: dict[Any, Any]) -> Any:
    """``hint`` with the type variables of ``given`` replaced (``T`` and
    ``list[T]`` in a ``Box[int]`` are ``int`` and ``list[int]``)."""
    if hint in given:
        return given[hint]
    params = getattr(hint, "__parameters__", ())
    if params:
        try:
            return hint[tuple(given.get(p, p) for p in params)]
        except TypeError:
            return hint
    return hint


_OK = object()
#: Gives the part of a value that is not of a type (the value, or an item of
#: it), or ``_OK``.
Check = Callable[[Any], Any]


def _checker(tp: Any) -> Optional[Check]:
    """A check of values against ``tp``; None where any value goes."""
    if tp is None or tp is Any or tp is object:
        return None
    if tp is _NONE:
        return lambda v: _OK if v is None else v
    if tp is float:  # JSON has one kind of number: an int is a float too
        return lambda v: _OK if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    if isinstance(tp, type):
        if _is_typeddict(tp):
            tp = dict
        elif not _isinstance_works(tp):
            return None  # a Protocol that is not runtime_checkable, ...
        cls = tp
        return lambda v: _OK if isinstance(v, cls) else v
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is _union_type()):
        members = [_checker(a) for a in args]
        if any(m is None for m in members):
            return None
        checks: list[Check] = [m for m in members if m is not None]
        return lambda v: _OK if any(c(v) is _OK for c in checks) else v
    if origin is typing.Literal:
        return lambda v: _OK if any(v == a and type(v) is type(a) for a in args) else v
    if not isinstance(origin, type) or not _isinstance_works(origin):
        return None  # Annotated, NewType, ...: not checked
    container: type[Any] = origin
    mapping = origin is dict or origin in _abc_mappings()
    if mapping:
        each = _checker(args[1]) if len(args) == 2 else None
    elif origin in (list, set, frozenset) or origin in _abc_sequences() or (origin is tuple and args[-1:] == (Ellipsis,)):
        each = _checker(args[0]) if args else None
    else:
        each = None  # tuple[A, B], a user's generic class: the container only
    if each is None:
        return lambda v: _OK if isinstance(v, container) else v
    item = each

    def check(v: Any) -> Any:
        if not isinstance(v, container):
            return v
        for x in v.values() if mapping else v:
            bad = item(x)
            if bad is not _OK:
                return bad
        return _OK

    return check


def _is_typeddict(tp: type) -> bool:
    return issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _isinstance_works(tp: type) -> bool:
    try:
        isinstance(None, tp)
    except TypeError:
        return False
    return True


def _type_name(tp: Any) -> str:
    """``tp`` as a reader writes it: ``ChatEvent``, ``list[ChatEvent]``, ``ChatEvent | None``."""
    if tp is _NONE or tp is None:
        return "None"
    if tp is Ellipsis:
        return "..."
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is _union_type()):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is not None and args:
        return f"{_type_name(origin)}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(tp, "__qualname__", None) or getattr(tp, "__name__", None) or repr(tp)


class Codec(Generic[T]):
    """Encodes values of one type to JSON bytes and decodes them back."""

    __slots__ = ("type", "_convert", "_check", "_what")

    def __init__(self, tp: Any = None, ns: Optional[dict[str, Any]] = None, name: Optional[str] = None) -> None:
        """``ns``: names to resolve string annotations with (the caller's
        locals, for dataclasses defined inside a function). ``name``: the
        channel's, for errors."""
        self.type = tp
        self._convert = _converter(tp, ns)
        self._check = _checker(tp)
        self._what = f"channel {name!r}" if name else "this channel"

    def encode(self, value: Any) -> bytes:
        """The JSON bytes of ``value``. Raises ``InvalidError`` (a
        ``ValueError``) for a value not of this codec's type, ``TypeError``
        for a value JSON cannot carry and ``ValueError`` for NaN or infinity,
        a lone surrogate in a str, or a value that holds itself."""
        check = self._check
        if check is not None:
            bad = check(value)
            if bad is not _OK:
                self._refuse(value, bad)
        e = _encoder  # encode(value), one frame less per publish
        try:
            return _join(e.chunks(value, 0)).encode()
        except BaseException as err:
            raise _failed(e, err) from None

    def _refuse(self, value: Any, bad: Any) -> None:
        want = _type_name(self.type)
        got = "None" if value is None else type(value).__qualname__
        if bad is not value:
            got += f" holding {'None' if bad is None else type(bad).__qualname__}"
        raise InvalidError(
            f"{self._what} carries values of type {want}; got {got}: publish {want} values "
            "(or make the channel without a type to carry any JSON value)"
        )

    def decode(self, data: bytes) -> T:
        """The value of JSON ``data``: raises ``ValueError`` or ``TypeError``
        when it is not JSON or not of this codec's type."""
        return self.converted(json.loads(data))

    def converted(self, value: Any) -> T:
        """A decoded JSON value as this codec's type: raises ``TypeError``
        when it cannot be."""
        c = self._convert
        converted: T = value if c is None else c(value)
        return converted
