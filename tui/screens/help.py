"""The help screen: what each panel means, the keys, and how to read a hot core next to a synchronize."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
## Panels

- **header**: the experiment, the device, and the mode: **ASYNC** (the frontend enqueues work and returns
  at once) or **SYNC** (a `synchronize()` after every op). Then throughput and the summed queue depth.
- **CPU**: load per core, 0-100% on a fixed scale, with a short history.
- **threads**: the child's threads grouped by role (frontend, stream executors, intra-op workers, inter-op
  pool, autograd, data workers); the bar is 100% per thread of the group.
- **launch queue**: per executor, either **depth** (Q = launched - started) or **outstanding**
  (O = launched - completed); the label says which. The strip is drawn on 0..capacity; launch blocks
  when the queue is full, and the row says how often that happened. An eager CPU executor is shown as
  *synchronous: depth 0*.
- **lanes**: the last 5 s. The frontend lane shows `▌` where it was launching and `·` where it waited;
  each executor lane shows how busy it was. *overlap* is the share of time two or more executors were
  busy at once.
- **async vs sync (measured)**: throughput, mean depth and frontend wait in each mode, and their ratio,
  all measured in this run, plus the experiment's own results and the threads → GFLOP/s table.
- **GPU**: *kernel-active* is NVML's share of time a kernel ran, not SM occupancy.

**A hot core next to a synchronize is waiting, not working**: a thread waiting in a synchronize may spin
at 100% of a core.

## Keys

| key | does |
|-----|------|
| `s` | toggle ASYNC / SYNC |
| `+` `=` / `-` | one more / one fewer intra-op thread (`torch.set_num_threads`) |
| `w` | pick an experiment to run |
| `p` | pause / resume sampling (the child keeps running) |
| `?` | this help |
| `ctrl+p` | command palette |
| `q` | quit |
"""


class HelpScreen(ModalScreen[None]):
    """Closed by Escape, ``q`` or ``?``."""

    BINDINGS = [
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

    def compose(self) -> ComposeResult:
        """The help text, scrollable on a small terminal."""
        with VerticalScroll() as box:
            box.border_title = "help · Escape closes"
            yield Markdown(HELP)

    def action_close(self) -> None:
        """Back to the main screen."""
        self.dismiss(None)
