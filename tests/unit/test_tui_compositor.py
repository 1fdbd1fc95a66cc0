"""tui/compositor.py subclasses Textual's private ``Compositor`` (no public API says what a partial
update renders) and replaces the screen's update timer (``ComposeTimer``); tui/driver.py replaces the
Linux driver's input loop. These tests fail, saying what to do, on a Textual whose overridden code
changed, and check that the timer composes when asked, at most once a period, and sleeps in between."""

from __future__ import annotations

import asyncio
import hashlib
import inspect

from textual import _time
from textual import timer as timer_module
from textual._compositor import Compositor
from textual._parser import Parser
from textual.app import App
from textual.drivers.linux_driver import LinuxDriver
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from torchpar_top.tui.compositor import TESTED_TEXTUAL, ComposeTimer, textual_version

#: The Textual code LineCompositor relies on, as it reads in TESTED_TEXTUAL: a digest of its source.
RELIED_ON = {
    "Compositor.render_partial_update": (Compositor.render_partial_update, "888dccc892d8ecc2"),
    "Compositor._get_renders": (Compositor._get_renders, "8ac93299aa5d3bef"),
    "Compositor.visible_widgets": (Compositor.visible_widgets.fget, "6eddec5f271628f7"),
    # ComposeTimer replaces Timer._run for the screen's update timer, made where Screen makes its own
    "Timer._run": (Timer._run, "60c942a84c1a8765"),
    "Screen._update_timer": (Screen._update_timer.fget, "6736ab93692ef9ed"),
    # LineScreen.repaint does what a widget's refresh leads to, without the messages between: the widget
    # marked dirty, the screen told, its update timer resumed, the compose reading the dirty widgets
    "Widget.refresh": (Widget.refresh, "b1ce3392c9c00870"),
    "Widget._set_dirty": (Widget._set_dirty, "9c280366b8986cc8"),
    "Widget._check_refresh": (Widget._check_refresh, "ad1c8196be9747bf"),
    "Screen._on_update": (Screen._on_update, "8d962c0761ddb02e"),
    "Screen._on_idle": (Screen._on_idle, "05781131b10da971"),
    # LineScreen.frame composes by calling the update timer's callback itself
    "Screen._on_timer_update": (Screen._on_timer_update, "421401660de142c5"),
    # HangUpSafeLinuxDriver.run_input_thread is Textual's loop with another wait; the exit wakes it by
    # the exit event that disable_input sets, and the Escape's wait is the parser's _timeout_time
    "LinuxDriver.run_input_thread": (LinuxDriver.run_input_thread, "d796af6d69db337d"),
    "LinuxDriver.disable_input": (LinuxDriver.disable_input, "6154c5a7c1743fe9"),
    "Parser.feed": (Parser.feed, "390106cde019dd29"),
    "Parser.tick": (Parser.tick, "44606084ad3bf7c1"),
}

WHAT_TO_DO = (
    "tui/compositor.py (LineCompositor, ComposeTimer, LineScreen.repaint and frame) and tui/driver.py "
    "(run_input_thread) override it: "
    "read the new code, check that LineCompositor still writes what Textual's own compositor writes "
    "(tests/functional/test_tui_frames.py) and that the overrides still do what Textual's do, then set "
    "TESTED_TEXTUAL, the textual pin in pyproject.toml and the digests in this test to the new version"
)


def _digest(obj: object) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]  # type: ignore[arg-type]


def test_the_installed_textual_is_the_one_the_compositor_was_checked_against() -> None:
    assert textual_version() == TESTED_TEXTUAL, (
        f"Textual {textual_version()} is installed, LineCompositor was checked against {TESTED_TEXTUAL}; "
        + WHAT_TO_DO
    )


def test_the_private_textual_code_the_compositor_overrides_is_unchanged() -> None:
    changed = [name for name, (obj, digest) in RELIED_ON.items() if _digest(obj) != digest]
    assert not changed, f"Textual {textual_version()} changed {', '.join(changed)}; " + WHAT_TO_DO


def test_a_screen_still_draws_with_the_compositor_it_makes_in_init() -> None:
    # LineScreen replaces Screen's ``_compositor`` after Screen.__init__ made it; the private attribute
    # and the moment it is made are what that relies on
    assert "self._compositor = Compositor()" in inspect.getsource(Screen.__init__), (
        "Screen.__init__ no longer makes self._compositor; " + WHAT_TO_DO
    )
    assert "_dirty_regions" in inspect.getsource(Compositor), (
        "Compositor no longer keeps _dirty_regions; " + WHAT_TO_DO
    )


def _drive(timer_class: type[Timer], resumes: list[float], settle: float = 0.3) -> tuple[int, int]:
    """In a running (headless) app, run a paused timer of ``timer_class`` (interval 0.05 s, its callback
    pausing it, as the screen's does), resume it after each delay in ``resumes``, then wait ``settle``
    s; (ticks, sleeps it took)."""
    sleeps = 0
    real_sleep = _time.sleep

    async def counted(seconds: float) -> None:
        nonlocal sleeps
        if mine and asyncio.current_task() is mine[0]._task:  # the app's own timers sleep too
            sleeps += 1
        await real_sleep(seconds)

    mine: list[Timer] = []

    async def main() -> int:
        ticks = 0
        app: App[None] = App()
        async with app.run_test():

            def tick() -> None:
                nonlocal ticks
                ticks += 1
                timer.pause()

            timer = timer_class(app, 0.05, callback=tick, pause=True)
            mine.append(timer)
            timer._start()
            for delay in resumes:
                await asyncio.sleep(delay)
                timer.resume()
            await asyncio.sleep(settle)
            timer.stop()
        return ticks

    _time.sleep = timer_module.sleep = counted  # ComposeTimer's, and the name Textual's Timer imported
    try:
        ticks = asyncio.run(main())
    finally:
        _time.sleep = timer_module.sleep = real_sleep
    return ticks, sleeps


def test_the_compose_timer_ticks_on_each_resume_and_does_not_sleep_after_a_tick() -> None:
    ticks, sleeps = _drive(ComposeTimer, [0.0, 0.15, 0.15])
    assert ticks == 3
    assert sleeps == 0  # resumed more than a period apart: no wake-up between the composes


def test_the_compose_timer_keeps_textuals_cap_of_one_compose_a_period() -> None:
    # the first resume composes at once; the next two come before a period has passed: one more
    # compose, after a sleep to the period's end
    ticks, sleeps = _drive(ComposeTimer, [0.0, 0.0, 0.0])
    assert ticks == 2 and sleeps == 1


def test_textuals_own_timer_sleeps_after_every_tick() -> None:
    """What ComposeTimer is for (Textual as pinned): each compose is followed by a sleep to the next
    grid point, a wake-up that finds the timer paused and does nothing."""
    ticks, sleeps = _drive(Timer, [0.0, 0.15, 0.15])
    assert ticks == 3
    assert sleeps >= 3
