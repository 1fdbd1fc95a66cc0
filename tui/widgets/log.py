"""The log pane: the child's stdout/stderr and agent messages, and the child's fate when it ends."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widgets import RichLog

from torchpar_top.session.model import ChildStatus, LogLine, Snapshot

SOURCE_TAGS = {"stdout": "out", "stderr": "err", "child": "child", "app": "app"}
"""The tag shown before each line."""


def status_lines(child: ChildStatus) -> list[str]:
    """What to say when the child exited or could not start: the code, the message, its last stderr."""
    if child.state not in ("exited", "failed"):
        return []
    if child.state == "failed":
        head = "child failed to start"
    elif child.exit_code is None:
        head = "child exited"
    else:
        head = f"child exited with code {child.exit_code}"
    if child.message:
        head += f": {child.message}"
    return [head, *(f"  {line}" for line in child.last_stderr)]


class LogPanel(RichLog):
    """A RichLog fed from snapshots: appends only the lines it has not shown yet (by ``seq``)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"log--tag", "log--stdout", "log--stderr", "log--dim", "log--status"}

    DEFAULT_CSS = """
    LogPanel {
        & > .log--tag { color: $foreground-muted; }
        & > .log--stdout { color: $foreground; }
        & > .log--stderr { color: $text-error; }
        & > .log--dim { color: $foreground-muted; }
        & > .log--status { color: $error; text-style: bold; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=1000, wrap=False, markup=False, highlight=False, auto_scroll=True, id=id)
        self.last_seq = -1
        """The ``seq`` of the newest line written."""
        self._reported: tuple | None = None

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Append new log lines, and the child's status once when it exits or fails."""
        for line in snapshot.log:
            if line.seq > self.last_seq:
                self.write(self._text(line))
                self.last_seq = line.seq
        child = snapshot.child
        key = (child.pid, child.state, child.exit_code)
        lines = status_lines(child)
        if lines and key != self._reported:
            self._reported = key
            style = self.get_component_rich_style("log--status")
            self.write(Text(lines[0], style=style))
            for extra in lines[1:]:
                self.write(Text(extra, style=self.get_component_rich_style("log--stderr")))

    def _text(self, line: LogLine) -> Text:
        """``[err] Traceback...`` with the tag dim and the text coloured by its source."""
        tag = SOURCE_TAGS.get(line.source, line.source)
        body = {"stderr": "log--stderr", "stdout": "log--stdout"}.get(line.source, "log--dim")
        text = Text(f"{tag:>5} ", style=self.get_component_rich_style("log--tag"))
        text.append(line.text.rstrip("\n"), style=self.get_component_rich_style(body))
        return text
