"""The help screen: what each panel means, the keys, and how to read a hot core next to a synchronize."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown
from torchpar_top.tui.meanings import help_markdown

HELP = help_markdown()


class HelpScreen(ModalScreen[None]):
    """Closed by Escape, ``q`` or ``?``; shows the main screen's help, or ``text`` (the cluster's)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close"),
        Binding("q", "close", "close", show=False),
        Binding("question_mark", "close", "close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
        & > VerticalScroll {
            width: 96;
            max-width: 100%;
            height: 90%;
            border: round $accent;
            background: $surface;
        }
        & Markdown { background: $surface; margin: 0 1; }
    }
    """

    def __init__(self, text: str = HELP) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        """The help text, scrollable on a small terminal."""
        with VerticalScroll() as box:
            box.border_title = "help · Escape closes"
            yield Markdown(self.text)

    def action_close(self) -> None:
        """Back to the main screen."""
        self.dismiss(None)
