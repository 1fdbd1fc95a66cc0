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

try:  # a dependency of the package; without it (a bare interpreter) the standard library parses alone
    import orjson
except ImportError:  # pragma: no cover - tests/unit/test_codec_fast.py runs this case in a child
    orjson = None  # type: ignore[assignment]

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


def loads(raw: bytes | str, **stdlib: Any) -> Any:
    """One JSON document: parsed by orjson (a third of the standard library's time on a recording's
    line), and by :func:`json.loads` (given ``stdlib``'s hooks) where orjson refuses it, so that what
    the standard library reads is still read, and an error is its (a lone surrogate escape, ``NaN``, an
    integer past a float, nesting past 1,024 levels go that way).

    Raises:
        ValueError: not JSON (or a hook's refusal); RecursionError: nested past Python's limit.
    """
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw, **stdlib)


def dumps(obj: Any) -> str:
    """Compact JSON of :func:`to_plain` (no NaN or infinity: those are not JSON)."""
    return json.dumps(to_plain(obj), separators=(",", ":"), allow_nan=False)


def fast_dumps(obj: Any) -> bytes | None:
    """Compact JSON of a dataclass by orjson (a twentieth of :func:`dumps`' time on an agent's sample:
    it writes dataclasses, enums and tuples itself, as :func:`to_plain` makes them); None where orjson
    is missing or refuses the object (an integer past 64 bits, a lone surrogate), for :func:`dumps` to
    write. orjson writes NaN and infinity as ``null``: :func:`finite` refuses them first.

    Raises:
        ValueError: a NaN or an infinity in ``obj`` (as ``json.dumps(allow_nan=False)`` does).
    """
    if orjson is None:
        return None
    try:
        raw = orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return None
    if not finite(obj):
        raise ValueError("NaN or infinity is not JSON")
    return raw


def finite(obj: Any) -> bool:
    """Whether every float in ``obj`` (a dataclass, tuple, list, dict or scalar) is finite: lists of
    numbers checked at C speed, a dataclass by its own check (:func:`_finite_check`)."""
    kind = type(obj)
    if kind is float:
        return math.isfinite(obj)
    if kind in _PLAIN or isinstance(obj, Enum):
        return True
    if kind is tuple or kind is list:
        try:
            return all(map(math.isfinite, obj))
        except (TypeError, OverflowError):  # not all numbers (or an int past a float): one by one
            return all(map(finite, obj))
    if kind is dict:
        return all(map(finite, obj.values()))
    if hasattr(kind, "__dataclass_fields__"):
        check = _FINITE_CHECKS.get(kind)
        if check is None:
            check = _FINITE_CHECKS[kind] = _flat_finite_check(kind)
        return check(obj)
    return True


#: :func:`_flat_finite_check` of each dataclass met so far.
_FINITE_CHECKS: dict[type, Callable[[Any], bool]] = {}
#: How deep :func:`_flat_finite_check` writes nested dataclasses inline (below: a call of :func:`finite`).
_FLAT_DEPTH = 6


class _Unlike(Exception):
    """An object is not of the type its field's hint names (the flat check gives way to the exact one)."""


def _unlike() -> bool:
    raise _Unlike


def _flat_finite_check(cls: type) -> Callable[[Any], bool]:
    """:func:`finite` for an object of dataclass ``cls`` in one function made from its type hints, the
    nested dataclasses its fields name (alone, optional, or in a ``tuple[X, ...]``) written inline:
    every float is added to one sum, which is finite where every one of them is (a NaN or an infinity
    carries through a sum; a sum that overflows is checked again). Where that sum is not finite, or an
    object is not of the type its hint names, :func:`_finite_check`'s exact check (a call per nested
    object) decides. An agent's sample: 34.0 → 10.9 µs to check warm, 58.8 → 23.9 µs cold, part of the
    sampler's cost that issue 18 counts (``benchmarks/bench_codec.py``)."""
    scope: dict[str, Any] = {
        "_finite": finite,
        "_isfinite": math.isfinite,
        "_sum": sum,
        "_type": type,
        "_unlike": _unlike,
        "_Unlike": _Unlike,
        "_exact": _finite_check(cls),
    }
    body: list[str] = []
    names = iter(range(1 << 30))

    def inline(kind: type, var: str, pad: str, depth: int) -> None:
        terms: list[str] = []
        for f, hint in _hints(kind):
            if f.name.startswith("__"):
                continue
            how = _float_holder(hint)
            if not how:
                continue
            value = f"{var}.{f.name}"
            if hint is float:
                terms.append(value)
                continue
            inner, optional = _optional(hint)
            if inner is float:
                v = f"v{next(names)}"
                body.extend([f"{pad}{v} = {value}", f"{pad}if {v} is not None: acc += {v}"])
            elif _is_dataclass_type(inner) and depth < _FLAT_DEPTH:
                v = f"o{next(names)}"
                scope[f"_C{v}"] = inner
                body.append(f"{pad}{v} = {value}")
                sub = pad
                if optional:
                    body.append(f"{pad}if {v} is not None:")
                    sub = pad + "    "
                body.append(f"{sub}_type({v}) is _C{v} or _unlike()")
                inline(inner, v, sub, depth + 1)
            elif _tuple_of(inner) is float and not optional:
                body.append(f"{pad}acc += _sum({value})")
            elif _is_dataclass_type(_tuple_of(inner)) and not optional and depth < _FLAT_DEPTH:
                item = _tuple_of(inner)
                v = f"o{next(names)}"
                scope[f"_C{v}"] = item
                body.extend([f"{pad}for {v} in {value}:", f"{pad}    _type({v}) is _C{v} or _unlike()"])
                inline(item, v, pad + "    ", depth + 1)
            else:
                body.append(f"{pad}if not _finite({value}): return False")
        if terms:
            body.append(f"{pad}acc += " + " + ".join(terms))

    inline(cls, "o", "        ", 0)
    lines = ["def check(o):", "    try:", "        acc = 0.0", *body]
    lines += [
        "    except (_Unlike, TypeError, AttributeError, OverflowError):",
        "        return _exact(o)",
    ]
    lines.append("    return _isfinite(acc) or _exact(o)")
    exec(compile("\n".join(lines) + "\n", f"<flat finite check of {cls.__name__}>", "exec"), scope)
    built: Callable[[Any], bool] = scope["check"]
    return built


def _optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(hint, False)`` for anything else."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _tuple_of(hint: Any) -> Any:
    """``X`` for ``tuple[X, ...]``, else None."""
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _finite_check(cls: type) -> Callable[[Any], bool]:
    """:func:`finite` for an object of dataclass ``cls``, made from its type hints: the fields that can
    hold a float are looked at (a float one inline, a tuple, dataclass or untyped one through
    :func:`finite`), the others never (an ``int``, ``str``, ``bool`` or enum field, a tuple of them, a
    dataclass without a float anywhere: a sample's thread roles and stack frames). What an agent's
    sample costs to check is then a call per nested object, not per field (issue 18's sampler cost)."""
    scope: dict[str, Any] = {"_finite": finite, "_isfinite": math.isfinite, "_float": float, "_type": type}
    lines = ["def check(o):"]
    for f, hint in _hints(cls):
        if f.name.startswith("__"):
            continue  # a private name would be mangled in the source below (no such field in the contract)
        how = _float_holder(hint)
        if how == "float":
            lines += [f"    v = o.{f.name}", "    if _type(v) is _float and not _isfinite(v): return False"]
        elif how == "walk":
            lines.append(f"    if not _finite(o.{f.name}): return False")
    lines.append("    return True")
    exec(compile("\n".join(lines) + "\n", f"<finite check of {cls.__name__}>", "exec"), scope)
    built: Callable[[Any], bool] = scope["check"]
    return built


def _float_holder(hint: Any) -> str:
    """How a field of type ``hint`` may hold a float: ``"float"`` (itself, or None), ``"walk"`` (inside
    it, or its type does not say: looked at by :func:`finite`) or ``""`` (never)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        hows = {_float_holder(o) for o in typing.get_args(hint) if o is not type(None)}
        if hows <= {""}:
            return ""
        return "float" if hows == {"float"} else "walk"
    if origin is tuple:
        args = typing.get_args(hint)
        return "" if all(_float_holder(a) == "" for a in args if a is not Ellipsis) else "walk"
    if hint is float:
        return "float"
    if hint in (int, str, bool) or (isinstance(hint, type) and issubclass(hint, Enum)):
        return ""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "walk" if any(_float_holder(h) for _, h in _hints(hint)) else ""
    return "walk"  # Any, a dict, a list...: whatever it holds


def from_plain(cls: type[T], data: Any, where: str = "", only: frozenset[str] | None = None) -> T:
    """Build ``cls`` from decoded JSON, checking every field.

    ``only``: of the fields with a default, only these are read (and checked); the others keep their
    defaults, whatever ``data`` holds for them. A name ``field.sub`` reads only ``sub`` of a nested
    dataclass (or of each one in a tuple) where ``field`` is read; without such a name, all of it.

    Raises:
        ProtocolError: naming the first field that is missing, mistyped or out of bounds.
    """
    hint: Any = cls
    try:
        fast: T = _fast(hint, only)(data)
        return fast
    except _Slow:  # anything but the plain valid case: the checking path decides, and names the field
        pass
    if only is not None and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k in only or k in required_fields(hint)}
    built: T = _converter(hint)(data, where or cls.__name__)
    return built


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@cache
def required_fields(cls: Any) -> frozenset[str]:
    """The fields of a dataclass without a default (every JSON object of it has them)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if _is_required(f))


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
        required = _is_required(f)
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


# -- the fast path --------------------------------------------------------------------------------
#
# Decoding is most of what reading a recording or a sample costs, and nearly every value is of the plain
# valid kind. So each dataclass also gets a converter generated as Python source (as ``dataclasses``
# makes ``__init__``): one function per class, a few inline type tests per field, no call and no
# ``where`` string per value. It accepts only what the checking converters above accept, and whatever
# it does not plainly accept (a wrong type, a missing field, a value out of bounds, an int subclass) it
# hands back as :class:`_Slow`: :func:`from_plain` then runs the checking converter, which either
# accepts the value after all or names what is wrong. tests/unit/test_codec_fast.py holds the two to
# the same answers.


class _Slow(Exception):
    """The fast converter met something other than the plain valid case."""


FastConverter = Callable[[Any], Any]


def _slow(_: Any) -> Any:
    raise _Slow


@cache
def _fast(hint: Any, only: frozenset[str] | None = None) -> FastConverter:
    """The fast converter of a dataclass (for any other hint: one that always defers); ``only``: as
    :func:`from_plain`'s."""
    if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
        return _slow
    source, scope = _fast_source(hint, only)
    exec(compile(source, f"<fast converter of {hint.__name__}>", "exec"), scope)
    built: FastConverter = scope["convert"]
    return built


def _fast_source(cls: type, only: frozenset[str] | None = None) -> tuple[str, dict[str, Any]]:
    """The source of ``convert(data)`` for ``cls``, and the names it uses (``only``: as
    :func:`from_plain`'s)."""
    scope: dict[str, Any] = {
        "_Slow": _Slow,
        "_new": object.__new__,
        "_cls": cls,
        "_dict": dict,
        "_list": list,
        "_str": str,
        "_int": int,
        "_float": float,
        "_bool": bool,
        "_tuple": tuple,
        "_set": set,
        "_map": map,
        "_all": all,
        "_type": type,
        "_len": len,
        "_isfinite": math.isfinite,
        "_FLOATS": _FLOAT,
        "_NUMBERS": frozenset({int, float}),
        "_INTS": frozenset({int}),
        "_STRS": frozenset({str}),
        "_MAX_ITEMS": MAX_ITEMS,
    }
    lines = ["def convert(data):", "    if _type(data) is not _dict: raise _Slow", "    try:"]
    plain_init = not hasattr(cls, "__post_init__") and all(f.init for f in dataclasses.fields(cls))
    # frozen: __init__ would set each field through object.__setattr__; the fields go into the new
    # object's own __dict__ instead (a line that defers leaves the half-made object behind)
    body = (
        ["o = _new(_cls)", "d = o.__dict__", "d.update(_skipped)"] if plain_init else ["d = _skipped.copy()"]
    )
    scope["_skipped"] = skipped = {}
    for i, (f, hint) in enumerate(_hints(cls)):
        required = _is_required(f)
        if not required:
            if f.default_factory is not dataclasses.MISSING:  # made for each object: it may be mutable
                scope[f"default{i}"] = f.default_factory
                default = f"default{i}()"
            else:
                scope[f"default{i}"] = f.default
                default = f"default{i}"
            if only is not None and f.name not in only:
                if f.default_factory is dataclasses.MISSING:
                    skipped[f.name] = f.default
                else:
                    body.append(f"d[{f.name!r}] = {default}")
                continue
        inner = (
            None
            if only is None
            else frozenset(n[len(f.name) + 1 :] for n in only if n.startswith(f"{f.name}."))
        )
        check = _fast_value(hint, f"f{i}", scope, inner or None)
        if f.metadata:
            check += _fast_bounds(f.metadata["lo"], f.metadata["hi"], f.metadata["above"])
        take = [f"v = data[{f.name!r}]", *check, f"d[{f.name!r}] = v"]
        if required:
            body += take
            continue
        body += [
            f"if {f.name!r} in data:",
            *[f"    {t}" for t in take],
            "else:",
            f"    d[{f.name!r}] = {default}",
        ]
    body += ["return o"] if plain_init else ["return _cls(**d)"]
    lines += [f"        {b}" for b in body]
    lines += ["    except (KeyError, TypeError, ValueError, OverflowError):", "        raise _Slow from None"]
    return "\n".join(lines) + "\n", scope


def _fast_value(hint: Any, name: str, scope: dict[str, Any], only: frozenset[str] | None = None) -> list[str]:
    """Statements that check ``v`` against ``hint`` and leave it converted in ``v`` (or raise)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        (inner,) = [o for o in options if o is not type(None)]
        checks = _fast_value(inner, name, scope, only)
        if type(None) not in options:
            return ["if v is None: raise _Slow", *checks]
        return ["if v is not None:", *[f"    {c}" for c in checks]] if checks else []
    if origin is tuple:
        (item, _) = typing.get_args(hint)
        head = ["if _type(v) is not _list or _len(v) > _MAX_ITEMS: raise _Slow"]
        if item is float:
            scope[name] = _fast_item(float, scope, name)
            return [
                *head,
                # a line's delta carries one new value, or none: those first, without the set
                "if _len(v) < 2 and (not v or (_type(v[0]) is _float and v[0] - v[0] == 0.0)): v = _tuple(v)",
                "elif (kinds := _set(_map(_type, v))) <= _FLOATS and _all(_map(_isfinite, v)): v = _tuple(v)",
                # ints among them (a depth history): converted at C speed; a huge one is OverflowError
                "elif kinds <= _NUMBERS:",
                "    v = _tuple(_map(_float, v))",
                "    if not _all(_map(_isfinite, v)): raise _Slow",
                f"else: v = _tuple([{name}(x) for x in v])",
            ]
        if item in (int, str):
            kinds = "_INTS" if item is int else "_STRS"
            return [*head, f"if not _set(_map(_type, v)) <= {kinds}: raise _Slow", "v = _tuple(v)"]
        scope[name] = _fast_item(item, scope, name, only)
        return [*head, f"v = _tuple([{name}(x) for x in v])"]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        scope[name] = _fast(hint, only)
        return [f"v = {name}(v)"]
    if isinstance(hint, type) and issubclass(hint, Enum):
        members = {m.value: m for m in hint}
        if not all(type(k) is str for k in members):
            return ["raise _Slow"]
        scope[name] = members
        return [f"v = {name}[v]"]  # KeyError, or TypeError (unhashable): deferred
    if hint is bool:
        return ["if _type(v) is not _bool: raise _Slow"]
    if hint is int:
        return ["if _type(v) is not _int: raise _Slow"]
    if hint is float:
        return [
            "if _type(v) is _float:",
            "    if v - v != 0.0: raise _Slow",  # infinity or NaN
            "elif _type(v) is _int: v = _float(v)",  # OverflowError: deferred
            "else: raise _Slow",
        ]
    if hint is str:
        return ["if _type(v) is not _str: raise _Slow"]
    return ["raise _Slow"]


def _fast_item(
    hint: Any, scope: dict[str, Any], name: str, only: frozenset[str] | None = None
) -> FastConverter:
    """A converter of one item of a tuple, as a function (for a comprehension)."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _fast(hint, only)
    inner: dict[str, Any] = dict(scope)
    checks = _fast_value(hint, f"{name}_item", inner)
    source = "\n".join(
        [
            "def item(v):",
            "    try:",
            *[f"        {c}" for c in checks],
            "        return v",
            "    except (KeyError, TypeError, ValueError, OverflowError):",
            "        raise _Slow from None",
        ]
    )
    exec(compile(source + "\n", f"<fast converter of {name}>", "exec"), inner)
    built: FastConverter = inner["item"]
    return built


def _fast_bounds(lo: float | None, hi: float | None, above: float | None) -> list[str]:
    tests = []
    if lo is not None:
        tests.append(f"v < {lo!r}")
    if hi is not None:
        tests.append(f"v > {hi!r}")
    if above is not None:
        tests.append(f"v <= {above!r}")
    if not tests:
        return []
    return [f"if v is not None and ({' or '.join(tests)}): raise _Slow"]
