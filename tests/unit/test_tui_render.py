"""The pure text helpers of the panels: numbers in, fixed-width text out, on fixed scales."""

from __future__ import annotations

import math

import pytest
from torchpar_top.tui import render


@pytest.mark.parametrize(
    ("frac", "width", "expected"),
    [
        (0.0, 4, "    "),
        (1.0, 4, "████"),
        (0.5, 4, "██  "),
        (0.625, 4, "██▌ "),
        (0.5625, 4, "██▎ "),
        (2.0, 3, "███"),  # clamped
        (-1.0, 3, "   "),
        (float("nan"), 3, "   "),
        (0.5, 0, ""),
    ],
)
def test_bar_has_exact_width_and_eighths(frac: float, width: int, expected: str) -> None:
    assert render.bar(frac, width) == expected
    assert len(render.bar(frac, width)) == width


def test_level_zero_is_blank_and_any_load_shows() -> None:
    assert render.level(0.0) == " "
    assert render.level(0.001) == "▁"
    assert render.level(1.0) == "█"
    assert render.level(0.5) == "▄"


def test_spark_uses_the_fixed_scale_not_min_max() -> None:
    # 49..51% must look like half, not like 0..100%
    text = render.spark([49.0, 50.0, 51.0], 3, 100.0)
    assert set(text) == {"▄"}


def test_spark_right_aligns_and_keeps_the_newest() -> None:
    assert render.spark([100.0], 3, 100.0) == "  █"
    assert render.spark([0.0, 100.0, 100.0, 100.0, 0.0], 2, 100.0) == "█ "
    assert render.spark([5.0], 0, 100.0) == ""


def test_fit_bins_by_mean_when_longer_and_repeats_when_shorter() -> None:
    assert render.fit([0.0, 1.0, 0.0, 1.0], 2) == [0.5, 0.5]
    assert render.fit([0.0, 1.0], 4) == [0.0, 0.0, 1.0, 1.0]
    assert render.fit([], 4) == []
    assert render.fit([1.0, 2.0, 3.0], 3) == [1.0, 2.0, 3.0]


def test_lane_spans_the_width() -> None:
    assert render.lane([1.0, 0.0], 4) == "██  "
    assert render.lane([], 3) == "   "


def test_fraction_and_pct() -> None:
    assert render.fraction(512, 1024) == 0.5
    assert render.fraction(5, 0) == 0.0
    assert render.pct(0.97) == " 97%"
    assert render.pct(None) == "   —"
    assert render.pct(0.61, 0) == "61%"


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (12.4, "12.4"),
        (9.1, "9.10"),
        (1234.0, "1.23k"),
        (4.5e6, "4.50M"),
        (0.0, "0.0"),
        (None, "—"),
        (math.inf, "—"),
    ],
)
def test_num(x: float | None, expected: str) -> None:
    assert render.num(x) == expected


def test_size_duration_clip() -> None:
    assert render.size(31 * 1024**3) == "31.0G"
    assert render.size(512) == "512B"
    assert render.size(None) == "—"
    assert render.duration(42) == "42 s"
    assert render.duration(185) == "3m05s"
    assert render.duration(3720) == "1h02m"
    assert render.clip("stream executor", 8) == "stream …"
    assert render.clip("cpu0", 8) == "cpu0"


def test_wrap_breaks_at_width_and_keeps_every_word() -> None:
    text = "ptrace not permitted: set /proc/sys/kernel/yama/ptrace_scope to 0"
    lines = render.wrap(text, 20)
    assert all(len(line) <= 20 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert render.wrap("", 10) == [] and render.wrap("abc", 0) == []


def test_clip_never_splits_a_number():
    from torchpar_top.tui.render import clip

    assert clip("starved: waited 1.25 cores", 19) == "starved: waited …"
    assert clip("queue 1024 / 1024", 8) == "queue …"
    assert clip("cpu-stream:0", 9) == "cpu-stre…"
    assert clip("intra-op workers ×201", 19) == "intra-op workers ×…"
    assert clip("abc", 1) == "a" and clip("1024", 1) == "…" and clip("abc", 3) == "abc"


def test_squeeze_keeps_a_number_whole_or_leaves_it_out():
    from torchpar_top.tui.render import squeeze

    assert squeeze(" busy  35%", 10) == " busy  35%"
    assert squeeze(" busy  35%", 6) == "   35%"
    assert squeeze("   91%", 3) == "91%"
    assert squeeze("   91%", 2) == ""


def test_the_line_compositor_runs_only_under_the_textual_it_was_tested_with() -> None:
    """LineCompositor overrides a private Textual method: pyproject pins exactly the version it was checked
    against, and any other version gets Textual's own screen."""
    from pathlib import Path

    import tomllib
    from textual.screen import Screen
    from torchpar_top.tui.compositor import TESTED_TEXTUAL, LineScreen, screen_class, textual_version

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert f"textual=={TESTED_TEXTUAL}" in pyproject["project"]["dependencies"]
    assert textual_version() == TESTED_TEXTUAL
    assert screen_class() is LineScreen
    assert screen_class("8.3.0") is Screen


def test_quiet_gc_still_collects_cycles_made_after_it() -> None:
    """The screen's collector settings freeze what exists and collect less often, never not at all."""
    import gc
    import weakref

    from torchpar_top.tui.app import GC_THRESHOLDS, quiet_gc

    before = gc.get_threshold()
    try:
        quiet_gc()
        assert gc.isenabled() and gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        kept = [[] for _ in range(3 * GC_THRESHOLDS[0])]  # net allocations alone trigger a collection
        assert gone() is None
        del kept
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
