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
from enum import Enum
from functools import lru_cache
from typing import Any, TypeVar

#: Longest line accepted; anything longer is a protocol error, not a memory spike.
MAX_LINE = 1 << 20
#: Most items accepted in one tuple field (executors, sites, roles...).
MAX_ITEMS = 4096

T = TypeVar("T")


class ProtocolError(ValueError):
    """A line or object that is not a valid message of this protocol version."""


def bounded(default: Any = dataclasses.MISSING, *, lo: float | None = None, hi: float | None = None,
            above: float | None = None) -> Any:
    """A dataclass field whose number must lie in ``[lo, hi]`` (and ``> above``, when given)."""
    meta = {"lo": lo, "hi": hi, "above": above}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@lru_cache(maxsize=None)
def _hints(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def to_plain(obj: Any) -> Any:
    """A dataclass (or tuple, enum...) as JSON-able builtins: objects, lists, strings, numbers."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (tuple, list)):
        return [to_plain(x) for x in obj]
    return obj


def dumps(obj: Any) -> str:
    """Compact JSON of :func:`to_plain` (no NaN or infinity: those are not JSON)."""
    return json.dumps(to_plain(obj), separators=(",", ":"), allow_nan=False)


def from_plain(cls: type[T], data: Any, where: str = "") -> T:
    """Build ``cls`` from decoded JSON, checking every field.

    Raises:
        ProtocolError: naming the first field that is missing, mistyped or out of bounds.
    """
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected an object")
    values = {}
    for f, hint in _hints(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing field {f.name!r}")
            continue
        value = _convert(hint, data[f.name], f"{where}.{f.name}")
        _check_bounds(f, value, f"{where}.{f.name}")
        values[f.name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # __post_init__ checks that span fields
        raise ProtocolError(f"{where}: {exc}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise ProtocolError(f"{where}: must not be null")
        (inner,) = [o for o in options if o is not type(None)]
        return _convert(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list")
        if len(value) > MAX_ITEMS:
            raise ProtocolError(f"{where}: {len(value)} items, at most {MAX_ITEMS}")
        (inner, _) = typing.get_args(hint)
        return tuple(_convert(inner, x, f"{where}[{i}]") for i, x in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return from_plain(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            raise ProtocolError(f"{where}: {value!r} is not one of "
                                f"{', '.join(m.value for m in hint)}") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise ProtocolError(f"{where}: expected true or false")
        return value
    if hint in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float) if hint is float else int):
            raise ProtocolError(f"{where}: expected {'a number' if hint is float else 'an integer'}")
        if hint is float:
            value = float(value)
            if not math.isfinite(value):
                raise ProtocolError(f"{where}: not a finite number")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ProtocolError(f"{where}: expected a string")
        return value
    raise TypeError(f"{where}: the codec does not handle {hint!r}")  # a bug in a message definition


def _check_bounds(f: dataclasses.Field, value: Any, where: str) -> None:
    if value is None or not f.metadata:
        return
    lo, hi, above = f.metadata["lo"], f.metadata["hi"], f.metadata["above"]
    if (lo is not None and value < lo) or (hi is not None and value > hi) or (above is not None
                                                                              and value <= above):
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
