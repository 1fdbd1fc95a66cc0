"""Command palette (ctrl+p): the same actions as the keys, and one "Run experiment: X" per experiment."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider
from torchpar_top.tui import keys

if TYPE_CHECKING:
    from torchpar_top.tui.app import TorchparTopApp


class TorchparCommands(Provider):
    """Offers toggle sync, more/fewer threads, restart, the stack panel, pause, help, and every experiment."""

    def commands(self) -> list[tuple[str, Callable[[], object], str]]:
        """``(name, callback, help)`` for every command."""
        app: TorchparTopApp = self.app  # type: ignore[assignment]
        items: list[tuple[str, Callable[[], object], str]] = [
            (c.name, getattr(app, f"action_{c.action}"), c.help) for c in keys.commands()
        ]
        live = app.live()
        for experiment in live.experiments() if live else ():
            items.append(
                (
                    f"Run experiment: {experiment.name}",
                    partial(app.run_experiment, experiment.name),
                    experiment.title,
                )
            )
        return items

    async def discover(self) -> Hits:
        """All commands, before anything is typed."""
        for name, callback, help_text in self.commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        """Commands whose name fuzzily matches ``query``."""
        matcher = self.matcher(query)
        for name, callback, help_text in self.commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, text=name, help=help_text)
