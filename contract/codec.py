"""Frozen dataclasses to and from JSON, validated against their own type hints. No pickle.

A field's type says what is accepted: ``int``, ``float`` (an int is accepted), ``str``, ``bool``, a
:class:`~torchpar_top.contract.vocab.Word` enum (by value), ``X | None``, ``tuple[X, ...]`` and nested
dataclasses. ``bool`` is never accepted as a number. Bounds come from the field's metadata
(:func:`bounded`). Unknown fields are ignored (forward compatible within a version); missing required
ones and mistyped ones are errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # typing has it from Python 3.11 on; only type checkers read it

    def dataclass_transform(**_: Any) -> Callable[[T], T]:
        return lambda decorated: decorated


#: Longest line accepted; anything longer is a protocol error, not a memory spike.
MAX_LINE = 1 << 20
#: Most items accepted in one tuple field (executors, sites, roles...).
MAX_ITEMS = 4096

T = TypeVar("T")


class ProtocolError(ValueError):
    """A line or object that is not a valid message of this protocol version."""


@overload
def bounded(
    *, default: T, lo: float | None = None, hi: float | None = None, above: float | None = None
) -> T: ...
@overload
def bounded(*, lo: float | None = None, hi: float | None = None, above: float | None = None) -> Any: ...
def bounded(
    *,
    default: Any = dataclasses.MISSING,
    lo: float | None = None,
    hi: float | None = None,
    above: float | None = None,
) -> Any:
    """A dataclass field whose number must lie in ``[lo, hi]`` (and ``> above``, when given).

    ``default`` is a keyword, as in :func:`dataclasses.field`: type checkers see a default only there."""
    meta = {"lo": lo, "hi": hi, "above": above}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass_transform(field_specifiers=(dataclasses.field, bounded))
def dataclass(*, frozen: bool = False) -> Callable[[type[T]], type[T]]:
    """:func:`dataclasses.dataclass`, telling type checkers that :func:`bounded` makes a field (a field
    without a default, when it is given none), as they know :func:`dataclasses.field` does."""
    return dataclasses.dataclass(frozen=frozen)


@cache
def _hints(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


_PLAIN = frozenset({int, float, str, bool, type(None)})
_FLOAT = frozenset({float})


def to_plain(obj: Any) -> Any:
    """A dataclass (or tuple, enum...) as JSON-able builtins: objects, lists, strings, numbers."""
    if type(obj) in _PLAIN:  # the most common case first: the values of histories
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in _fields(type(obj))}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (tuple, list)):
        if all(type(x) in _PLAIN for x in obj):  # a history, a sample's step ends: hundreds of numbers
            return list(obj)
        return [to_plain(x) for x in obj]
    return obj


@cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def dumps(obj: Any) -> str:
    """Compact JSON of :func:`to_plain` (no NaN or infinity: those are not JSON)."""
    return json.dumps(to_plain(obj), separators=(",", ":"), allow_nan=False)


def from_plain(cls: type[T], data: Any, where: str = "") -> T:
    """Build ``cls`` from decoded JSON, checking every field.

    Raises:
        ProtocolError: naming the first field that is missing, mistyped or out of bounds.
    """
    hint: Any = cls
    built: T = _converter(hint)(data, where or cls.__name__)
    return built


Converter = Callable[[Any, str], Any]
"""Checks and converts one decoded JSON value; the ``str`` is where it is, for the error message."""


@cache
def _converter(hint: Any) -> Converter:
    """The converter for a type hint, built once per type: the hint is read when the converter is made,
    not for every value (a sample's decoding went from about 180 to about 50 µs)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        nullable = type(None) in options
        (inner_hint,) = [o for o in options if o is not type(None)]
        inner = _converter(inner_hint)

        def optional(value: Any, where: str) -> Any:
            if value is None:
                if nullable:
                    return None
                raise ProtocolError(f"{where}: must not be null")
            return inner(value, where)

        return optional
    if origin is tuple:
        (item_hint, _) = typing.get_args(hint)
        item = _converter(item_hint)
        if item_hint is float:  # histories: checked at C speed when every value is a float already

            def floats(value: Any, where: str) -> Any:
                if not isinstance(value, list):
                    raise ProtocolError(f"{where}: expected a list")
                if len(value) > MAX_ITEMS:
                    raise ProtocolError(f"{where}: {len(value)} items, at most {MAX_ITEMS}")
                if set(map(type, value)) <= _FLOAT and all(map(math.isfinite, value)):
                    return tuple(value)
                return tuple([item(x, f"{where}[{i}]") for i, x in enumerate(value)])

            return floats

        def items(value: Any, where: str) -> Any:
            if not isinstance(value, list):
                raise ProtocolError(f"{where}: expected a list")
            if len(value) > MAX_ITEMS:
                raise ProtocolError(f"{where}: {len(value)} items, at most {MAX_ITEMS}")
            return tuple([item(x, f"{where}[{i}]") for i, x in enumerate(value)])

        return items
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_converter(hint)
    if isinstance(hint, type) and issubclass(hint, Enum):
        enum = hint

        def member(value: Any, where: str) -> Any:
            try:
                return enum(value)
            except ValueError:
                raise ProtocolError(
                    f"{where}: {value!r} is not one of {', '.join(m.value for m in enum)}"
                ) from None

        return member
    if hint is bool:

        def boolean(value: Any, where: str) -> Any:
            if not isinstance(value, bool):
                raise ProtocolError(f"{where}: expected true or false")
            return value

        return boolean
    if hint is int:

        def integer(value: Any, where: str) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProtocolError(f"{where}: expected an integer")
            return value

        return integer
    if hint is float:

        def number(value: Any, where: str) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ProtocolError(f"{where}: expected a number")
            value = float(value)
            if not math.isfinite(value):
                raise ProtocolError(f"{where}: not a finite number")
            return value

        return number
    if hint is str:

        def text(value: Any, where: str) -> Any:
            if not isinstance(value, str):
                raise ProtocolError(f"{where}: expected a string")
            return value

        return text
    raise TypeError(f"the codec does not handle {hint!r}")  # a bug in a message definition


def _dataclass_converter(cls: type) -> Converter:
    """A converter for a frozen dataclass: every field checked, missing required ones refused."""
    fields = []
    for f, hint in _hints(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        bounds = (f.metadata["lo"], f.metadata["hi"], f.metadata["above"]) if f.metadata else None
        fields.append((f.name, _converter(hint), required, bounds))

    def build(data: Any, where: str) -> Any:
        if not isinstance(data, dict):
            raise ProtocolError(f"{where}: expected an object")
        values = {}
        for name, convert, required, bounds in fields:
            if name not in data:
                if required:
                    raise ProtocolError(f"{where}: missing field {name!r}")
                continue
            value = convert(data[name], f"{where}.{name}")
            if bounds is not None and value is not None:
                _check_bounds(bounds, value, f"{where}.{name}")
            values[name] = value
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:  # __post_init__ checks that span fields
            raise ProtocolError(f"{where}: {exc}") from None

    return build


def _check_bounds(bounds: tuple[float | None, float | None, float | None], value: Any, where: str) -> None:
    lo, hi, above = bounds
    if (
        (lo is not None and value < lo)
        or (hi is not None and value > hi)
        or (above is not None and value <= above)
    ):
        span = f"> {above}" if above is not None else f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ProtocolError(f"{where}: {value!r} must be {span}")


class LineReader:
    """Splits a byte stream into lines; keeps the partial tail between reads."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buf = bytearray()
        self._max = max_line

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete lines (without newlines) now available.

        Raises:
            ProtocolError: a line grew past the limit without a newline (the buffer is dropped).
        """
        self._buf += data
        *lines, tail = self._buf.split(b"\n")
        self._buf = bytearray(tail)
        if len(self._buf) > self._max:
            self._buf.clear()
            raise ProtocolError(f"line longer than {self._max} bytes")
        return [bytes(line) for line in lines if line.strip()]
