"""Helpers for the tests that drive the app through Textual's Pilot (no terminal, the render timer off)."""

import asyncio
import functools
from collections.abc import Awaitable, Callable

from textual.pilot import Pilot
from textual.widget import Widget


def run_async(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """Run an async test body in a fresh event loop (no pytest async plugin needed)."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())  # type: ignore[arg-type]

    return wrapper


def text_of(widget: Widget) -> str:
    """Every content line the widget draws, as plain text."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


async def settle(pilot: Pilot) -> None:
    """Draw again once the layout is known, twice (panels shown for the first time get widths)."""
    for _ in range(2):
        await pilot.pause()
        pilot.app.refresh_from_session(force=True)  # type: ignore[attr-defined]
    await pilot.pause()
