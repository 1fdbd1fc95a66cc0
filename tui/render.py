"""Pure text helpers for the panels: numbers in, fixed-width text out.

Nothing here imports Textual. Every scale is fixed by the caller (0..100 for a core, 0..capacity for a
queue, 0..1 for a busy fraction): a strip never rescales to its own min..max, so 49-51% never looks
like 0-100%.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from collections.abc import Sequence

# the report writes spans of time as the screen does: the one way is contract/units.py's
from torchpar_top.contract.units import inert as inert
from torchpar_top.contract.units import seconds as seconds

#: Vertical eighths, index 0 (empty) to 8 (full cell).
VBLOCKS = " ▁▂▃▄▅▆▇█"
#: Horizontal eighths, index 0 (empty) to 8 (full cell).
HBLOCKS = " ▏▎▍▌▋▊▉█"


def clamp01(x: float) -> float:
    """``x`` limited to 0..1 (NaN reads as 0)."""
    if math.isnan(x):
        return 0.0
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def fraction(value: float, scale: float) -> float:
    """``value / scale`` limited to 0..1; 0 when the scale is not positive."""
    return clamp01(value / scale) if scale > 0 else 0.0


def bar(frac: float, width: int) -> str:
    """A horizontal bar of exactly ``width`` cells, filled to ``frac`` (0..1) in eighths of a cell.

    The empty part is spaces: the caller gives the whole bar a track background.
    """
    if width <= 0:
        return ""
    eighths = round(clamp01(frac) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (HBLOCKS[part] if part else "")
    return text + " " * (width - len(text))


def level(frac: float) -> str:
    """One cell whose height shows ``frac`` (0..1); anything above zero shows at least ``▁``."""
    f = clamp01(frac)
    if f <= 0.0:
        return " "
    return VBLOCKS[max(1, round(f * 8))]


def fit(values: Sequence[float], width: int) -> list[float]:
    """Resample ``values`` (oldest first) to ``width`` cells.

    More values than cells: each cell is the mean of its bin (a short spike is not dropped, nor
    exaggerated). Fewer values than cells: each value is repeated, so the series spans the width.
    """
    n = len(values)
    if width <= 0 or n == 0:
        return []
    if n >= width:  # every bin holds at least one value
        bounds = [(i * n) // width for i in range(width + 1)]
        return [sum(values[lo:hi]) / (hi - lo) for lo, hi in itertools.pairwise(bounds)]
    return [values[(i * n) // width] for i in range(width)]


def spark(values: Sequence[float], width: int, scale: float) -> str:
    """The last ``width`` values as vertical blocks on a fixed 0..``scale``, right-aligned."""
    if width <= 0:
        return ""
    tail = values[-width:] if len(values) > width else values
    # every fraction is 0 when the scale is: blank cells
    text = "".join([_level_of(v / scale) for v in tail]) if scale > 0 else " " * len(tail)
    return " " * (width - len(text)) + text


def _level_of(x: float) -> str:
    """``level(clamp01(x))`` in one call (the hot loop of :func:`spark`)."""
    if x > 0.0:  # false for NaN, which reads as 0
        return VBLOCKS[max(1, round(x * 8))] if x < 1.0 else "█"
    return " "


def lane(values: Sequence[float], width: int) -> str:
    """Busy fractions (0..1) stretched or binned over ``width`` cells, as block heights."""
    cells = fit(values, width)
    return "".join([_level_of(v) for v in cells]) + " " * (width - len(cells))


def pct(frac: float | None, width: int = 4) -> str:
    """A fraction 0..1 as a right-aligned whole percent (``" 97%"``), or a dash when unknown."""
    if frac is None or math.isnan(frac):
        return "—".rjust(width)
    return f"{round(frac * 100):d}%".rjust(width)


def num(x: float | None, digits: int = 3) -> str:
    """A short human number: ``12.4``, ``1.23k``, ``4.5M``; a dash when unknown."""
    if x is None or math.isnan(x) or math.isinf(x):
        return "—"
    ax = abs(x)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= limit:
            return f"{x / limit:.{_decimals(ax / limit, digits)}f}{suffix}"
    return f"{x:.{_decimals(ax, digits)}f}"


def _decimals(ax: float, digits: int) -> int:
    """Decimals that give about ``digits`` significant digits for a magnitude ``ax``."""
    if ax == 0:
        return 1
    return max(0, digits - 1 - math.floor(math.log10(ax)))


def size(n: int | None) -> str:
    """Bytes as a short binary size (``31.2G``); a dash when unknown."""
    if n is None:
        return "—"
    value = float(n)
    for suffix in ("B", "K", "M", "G", "T"):
        if value < 1024 or suffix == "T":
            return f"{value:.0f}{suffix}" if suffix == "B" else f"{value:.1f}{suffix}"
        value /= 1024
    return "—"  # pragma: no cover


def duration(seconds: float | None) -> str:
    """Seconds as ``42 s``, ``3m05s`` or ``1h02m``; a dash when unknown."""
    if seconds is None or math.isnan(seconds):
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, with ``…`` when something was cut; a number the cut would split
    goes whole (``waited 1.2 cores`` never reads ``waited 1.…``: a number cut short reads as another)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    if _NUMBER_TAIL.search(head) and text[width - 1] in _NUMBER_CHARS:
        head = _NUMBER_TAIL.sub("", head)
    if width == 1:
        return "…" if text[0] in _NUMBER_CHARS else text[:1]
    return head + "…"


_NUMBER_CHARS = frozenset("0123456789.,")
_NUMBER_TAIL = re.compile(r"\d[\d.,]*$")


def squeeze(text: str, width: int) -> str:
    """``text`` (a right-aligned number, maybe after a word) in at most ``width`` cells: its leading spaces
    give way, then a leading word (``" busy  35%"`` → ``"35%"``); ``""`` when even the number does not
    fit (a number is shown whole or not at all)."""
    if len(text) <= width:
        return text
    text = text.lstrip()
    if len(text) <= width:
        return text.rjust(width)
    last = text.split()[-1]
    return last.rjust(width) if len(last) <= width else ""


def fields(text: str, width: int, sep: str = "  ") -> str:
    """The leading ``sep``-separated fields of ``text`` that fit in ``width`` cells, each whole (``mem
    31.0G/80.0G  312/400 W  61°C`` loses its temperature, then its power, never half a number)."""
    out = ""
    for part in text.split(sep):
        candidate = f"{out}{sep}{part}" if out else part
        if len(candidate) > width:
            break
        out = candidate
    return out


def wrap(text: str, width: int) -> list[str]:
    """``text`` broken into lines of at most ``width`` cells (long words are split); ``[]`` for no text."""
    if not text or width <= 0:
        return []
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [text[:width]]


def straggler_pending(judged: int, needed: int, unit: str) -> str:
    """``straggler: judging, 3 of 5 s`` while fewer windows than ``needed`` were compared (nobody is
    named before, so "no straggler" would be a claim not yet made); '' once they were."""
    if judged >= needed:
        return ""
    return f"straggler: judging, {judged} of {needed} {unit}"
