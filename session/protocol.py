"""The one wire protocol between the workload's agent (child) and torchpar-top (parent).

JSON lines over an inherited Unix socketpair, versioned, validated on read. No pickle anywhere.

Child → parent messages (``type``):

``hello``
    ``pid``, ``experiment``, ``description``, ``torch``, ``device``, ``num_threads``,
    ``interop_threads``, ``executors`` (list of ``{name, kind, quantity, capacity, emulated}``),
    ``roles`` (``{tid: role}`` for threads the agent knows: frontend, executors, agent).
``sample``
    ``t`` (child ``time.time()``), ``window`` (seconds covered), ``mode`` (``async``/``sync``),
    ``sync_scope`` (``op``/``step``), ``throughput``, ``unit``, ``items`` (total), ``num_threads``,
    ``frontend`` (``{busy, wait}`` fractions of the window), ``overlap`` (fraction of the window with two
    or more executors busy), optional ``draining`` (true while the ASYNC backlog completes after a
    switch to SYNC), ``executors`` (list of ``{name, kind, emulated, quantity, value,
    capacity, launched, started, completed, busy, blocked}``), ``roles`` (as in hello, for threads born since).
``result``
    ``label``, ``value``, ``unit`` (a measured result, e.g. "device 0 alone").
``scaling``
    ``threads``, ``gflops``, ``samples`` (intra-op scaling table entry).
``log``
    ``text`` (a message from the agent or the experiment).
``ack``
    ``cmd``, ``ok``, ``detail`` (reply to a command).
``syncpoints``
    ``sites``: list of ``{where, call, count}``, cumulative since the start: calls that make the
    frontend wait for the device (``.item()``, ``.cpu()``, printing a tensor...), by source line.
``exit``
    ``status``, ``reason``: how the user's code ended (``run``), sent just before the agent closes, e.g.
    ``1, "ValueError: bad value 42"``. A torchrun rank is not our child, so this is the only way its
    status is known; a rank killed by a signal cannot send it.

Optional fields: ``hello`` may carry ``rank`` and ``world_size`` (torchrun) and ``target`` (the user's
script or module); a ``sample`` executor row may carry ``ready`` (DataLoader: batches ready); a
``sample`` may carry ``data_wait`` (fraction of the window the frontend waited for the next batch),
``steps`` (optimizer steps so far) and ``cuda_uuids`` (``GPU-...`` strings in the child's CUDA order,
so the monitor labels NVML devices as the child sees them).

Parent → child: ``cmd`` with ``cmd`` one of ``set_sync`` (``value``: bool, optional ``scope``),
``set_threads`` (``value``: int >= 1), ``profile`` (``seconds``: 0 < s <= 10; a ``torch.profiler``
window analysed the way Holistic Trace Analysis computes queue length), ``stop``.
"""

from __future__ import annotations

import json
from typing import Any

VERSION = 1

#: Longest line accepted; anything longer is a protocol error, not a memory spike.
MAX_LINE = 1 << 20


class ProtocolError(ValueError):
    """A line that is not a valid message of this protocol version."""


_NUM = (int, float)

# For each message type: field -> accepted Python types. Extra fields are allowed (forward compatible
# within a version); missing or mistyped ones are errors.
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "hello": {
        "pid": (int,),
        "experiment": (str,),
        "description": (str,),
        "torch": (str,),
        "device": (str,),
        "num_threads": (int,),
        "interop_threads": (int,),
        "executors": (list,),
        "roles": (dict,),
    },
    "sample": {
        "t": _NUM,
        "window": _NUM,
        "mode": (str,),
        "sync_scope": (str,),
        "throughput": _NUM,
        "unit": (str,),
        "items": (int,),
        "num_threads": (int,),
        "frontend": (dict,),
        "overlap": _NUM,
        "executors": (list,),
        "roles": (dict,),
    },
    "result": {"label": (str,), "value": _NUM, "unit": (str,)},
    "scaling": {"threads": (int,), "gflops": _NUM, "samples": (int,)},
    "log": {"text": (str,)},
    "ack": {"cmd": (str,), "ok": (bool,), "detail": (str,)},
    "syncpoints": {"sites": (list,)},
    "exit": {"status": (int,), "reason": (str,)},
    "cmd": {"cmd": (str,)},
}

EXECUTOR_DECL: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "kind": (str,),
    "quantity": (str,),
    "emulated": (bool,),
}
EXECUTOR_SAMPLE: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "kind": (str,),
    "emulated": (bool,),
    "quantity": (str,),
    "value": (int,),
    "launched": (int,),
    "started": (int,),
    "completed": (int,),
    "busy": _NUM,
    "blocked": _NUM,
}
COMMANDS = {"set_sync", "set_threads", "profile", "stop"}
MODES = {"async", "sync"}
QUANTITIES = {"depth", "outstanding"}


def encode(msg_type: str, **fields: Any) -> bytes:
    """Build one message as a JSON line (validated, so a bug shows at the sender)."""
    msg = {"v": VERSION, "type": msg_type, **fields}
    validate(msg)
    return (json.dumps(msg, separators=(",", ":"), allow_nan=False) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse and validate one line.

    Raises:
        ProtocolError: the line is not JSON, not of this version, or a field is missing or mistyped.
    """
    if len(line) > MAX_LINE:
        raise ProtocolError(f"line of {len(line)} bytes exceeds {MAX_LINE}")
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    validate(msg)
    return msg


def _check(obj: Any, fields: dict[str, tuple[type, ...]], where: str) -> None:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where}: expected an object")
    for name, types in fields.items():
        if name not in obj:
            raise ProtocolError(f"{where}: missing field {name!r}")
        value = obj[name]
        # bool is an int in Python; do not let True pass as a number or a count.
        if isinstance(value, bool) and bool not in types:
            raise ProtocolError(f"{where}: field {name!r} has type bool")
        if not isinstance(value, types):
            raise ProtocolError(f"{where}: field {name!r} has type {type(value).__name__}")


def validate(msg: Any) -> None:
    """Check a decoded message against :data:`SCHEMA`."""
    if not isinstance(msg, dict):
        raise ProtocolError("message is not an object")
    if msg.get("v") != VERSION:
        raise ProtocolError(f"protocol version {msg.get('v')!r}, expected {VERSION}")
    kind = msg.get("type")
    if kind not in SCHEMA:
        raise ProtocolError(f"unknown message type {kind!r}")
    _check(msg, SCHEMA[kind], kind)
    if kind == "hello":
        for i, ex in enumerate(msg["executors"]):
            _check(ex, EXECUTOR_DECL, f"hello.executors[{i}]")
            _check_capacity(ex, f"hello.executors[{i}]")
    elif kind == "sample":
        if msg["mode"] not in MODES:
            raise ProtocolError(f"sample: mode {msg['mode']!r}")
        _check(msg["frontend"], {"busy": _NUM, "wait": _NUM}, "sample.frontend")
        if not isinstance(msg.get("draining", False), bool):
            raise ProtocolError("sample: draining must be a bool")
        for i, ex in enumerate(msg["executors"]):
            where = f"sample.executors[{i}]"
            _check(ex, EXECUTOR_SAMPLE, where)
            _check_capacity(ex, where)
            if ex["quantity"] not in QUANTITIES:
                raise ProtocolError(f"{where}: quantity {ex['quantity']!r}")
    elif kind == "syncpoints":
        for i, site in enumerate(msg["sites"]):
            _check(site, {"where": (str,), "call": (str,), "count": (int,)}, f"syncpoints.sites[{i}]")
    elif kind == "cmd":
        if msg["cmd"] not in COMMANDS:
            raise ProtocolError(f"unknown command {msg['cmd']!r}")
        if msg["cmd"] == "set_sync" and not isinstance(msg.get("value"), bool):
            raise ProtocolError("set_sync needs a bool value")
        if msg["cmd"] == "profile":
            seconds = msg.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, _NUM) or not 0 < seconds <= 10:
                raise ProtocolError("profile needs seconds in (0, 10]")
        if msg["cmd"] == "set_threads":
            value = msg.get("value")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProtocolError("set_threads needs an int value >= 1")
    if kind in ("hello", "sample"):
        roles = msg["roles"]
        if not all(k.isdigit() and isinstance(v, str) for k, v in roles.items()):
            raise ProtocolError(f"{kind}: roles must map tid strings to role names")


def _check_capacity(ex: dict[str, Any], where: str) -> None:
    cap = ex.get("capacity")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ProtocolError(f"{where}: capacity must be a positive int or null")


class LineReader:
    """Splits a byte stream into lines; keeps the partial tail between reads."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete lines (without newlines) now available.

        Raises:
            ProtocolError: a line grew past :data:`MAX_LINE` without a newline (the buffer is dropped).
        """
        self._buf += data
        *lines, tail = self._buf.split(b"\n")
        self._buf = bytearray(tail)
        if len(self._buf) > MAX_LINE:
            self._buf.clear()
            raise ProtocolError(f"line longer than {MAX_LINE} bytes")
        return [bytes(line) for line in lines if line.strip()]
