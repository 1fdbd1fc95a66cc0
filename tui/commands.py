"""Command palette (ctrl+p): the same actions as the keys, and one "Run experiment: X" per experiment."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from torchpar_top.tui.app import TorchparTopApp


class TorchparCommands(Provider):
    """Offers toggle sync, more/fewer threads, restart, the stack panel, pause, help, and every experiment."""

    def commands(self) -> list[tuple[str, Callable[[], object], str]]:
        """``(name, callback, help)`` for every command."""
        app: TorchparTopApp = self.app  # type: ignore[assignment]
        items: list[tuple[str, Callable[[], object], str]] = [
            ("Toggle sync (ASYNC / SYNC)", app.action_toggle_sync, "synchronize after every op, or not (key s)"),
            ("More threads", app.action_more_threads, "torch.set_num_threads(n + 1) in the child (key +)"),
            ("Fewer threads", app.action_fewer_threads, "torch.set_num_threads(n - 1) in the child (key -)"),
            ("Restart", app.action_restart, "run the same script or experiment again (key r)"),
            ("Profile the launch queue", app.action_profile,
             "1 s torch.profiler window: exact per-stream queue length, HTA's way (key h; CUDA only)"),
            ("Toggle stack panel", app.action_toggle_stack, "the frontend's Python stack, from py-spy (key k)"),
            ("Pause / resume sampling", app.action_toggle_pause, "the child keeps running (key p)"),
            ("Help", app.action_help, "what each panel means (key ?)"),
        ]
        for experiment in app.session.experiments():
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
