"""How figures are written for people, the same on the screen (``tui/render.py``) and in the report
printed when a run ends (``sinks/verdict.py``)."""

from __future__ import annotations

import math


def seconds(x: float) -> str:
    """A span of time with three digits and its unit: ``50.0 ms``, ``950 µs``, ``1.23 s``, ``5670 s``."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(x) >= scale or unit == "µs":
            value = x / scale
            return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value)))) if value else 0}f} {unit}"
    return "—"  # pragma: no cover
