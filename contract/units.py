"""How figures and text are written for people, the same on the screen (``tui/render.py``) and in the
report printed when a run ends (``sinks/verdict.py``)."""

from __future__ import annotations

import math


def seconds(x: float) -> str:
    """A span of time with three digits and its unit: ``50.0 ms``, ``950 µs``, ``1.23 s``, ``5670 s``."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(x) >= scale or unit == "µs":
            value = x / scale
            return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value)))) if value else 0}f} {unit}"
    return "—"  # pragma: no cover


_INERT = {c: chr(0x2400 + c) for c in range(0x20)} | {0x7F: "\u2421", 0x09: " "}
_INERT |= {c: f"\\x{c:02x}" for c in range(0x80, 0xA0)}


def inert(text: str) -> str:
    """Text made harmless for a terminal: control characters (ESC, BEL, CR, backspace...) become visible
    symbols (``␛``), so an escape sequence in a workload's text (printed, or in a script argument, a
    thread, function or file name, a label sent over the protocol) cannot retitle the terminal, leave
    the alternate screen or move the cursor over the panels; a tab becomes one space (one cell)."""
    return text.translate(_INERT)
