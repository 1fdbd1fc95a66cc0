"""The experiment picker: a modal list of the built-in experiments; Enter runs one, Escape cancels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option
from torchpar_top.contract.snapshot import Experiment


class PickerScreen(ModalScreen[str | None]):
    """Dismisses with the chosen experiment's name, or ``None`` when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    DEFAULT_CSS = """
    PickerScreen {
        align: center middle;
        & > Vertical {
            width: 72;
            max-width: 100%;
            height: auto;
            max-height: 90%;
            border: round $accent;
            background: $surface;
            padding: 0 1;
        }
        & Label { color: $foreground-muted; margin-bottom: 1; }
        & OptionList { height: auto; max-height: 20; border: none; background: $surface; }
    }
    """

    def __init__(self, experiments: Sequence[Experiment], current: str = "") -> None:
        super().__init__()
        self.experiments = tuple(experiments)
        """The experiments offered, in order."""
        self.current = current
        """The experiment running now (highlighted first)."""

    def compose(self) -> ComposeResult:
        """A hint and the list."""
        with Vertical() as box:
            box.border_title = "run experiment"
            yield Label("Enter runs it (the current child stops) · Escape cancels")
            yield OptionList(*(self._option(e) for e in self.experiments))

    def on_mount(self) -> None:
        """Highlight the running experiment."""
        options = self.query_one(OptionList)
        names = [e.name for e in self.experiments]
        options.highlighted = names.index(self.current) if self.current in names else 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter on an experiment: dismiss with its name."""
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        """Escape: dismiss with nothing chosen."""
        self.dismiss(None)

    def _option(self, experiment: Experiment) -> Option:
        """``async   async vs sync launch queue`` and its description, dim, underneath."""
        text = Text(experiment.name, style="bold")
        text.append(f"  {experiment.title}")
        if experiment.name == self.current:
            text.append("  (running)", style="italic")
        if experiment.description:
            text.append(f"\n{experiment.description}", style="dim")
        return Option(text, id=experiment.name)
