"""The help screen: what each panel means, the keys, and how to read a hot core next to a synchronize."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
## Panels

- **header**: what runs (an experiment, `run train.py`, `run train.py ×2 ranks`, `attach PID`), and the
  mode: **ASYNC** (the frontend enqueues work and returns at once) or **SYNC** (a `synchronize()` after
  every op). Then the child's state when it is not running (*exited 1*, *attached*), throughput and the
  summed queue depth.
- **CPU**: load per core, 0-100% on a fixed scale, with a short history.
- **threads**: the child's threads grouped by role (frontend, stream executors, intra-op workers, inter-op
  pool, autograd, DataLoader worker processes, other child processes); the bar is 100% per thread of
  the group. **waits N%**: time runnable but with every core taken (the kernel's run-queue delay);
  above half a core in all (and a fifth of the threads' runnable time), the panel says **starved** —
  more runnable threads than cores.
- **launch queue**: per executor, either **depth** (Q = launched - started) or **outstanding**
  (O = launched - completed); the label says which. The strip is drawn on 0..capacity; launch blocks
  when the queue is full, and the row says how often that happened. An eager CPU executor is shown as
  *synchronous: depth 0*. A DataLoader's row says whether the loop is **input-bound** (the frontend waits
  for the next batch) or **compute-bound**. Attached to a process it did not start, torchpar-top cannot
  see queues: the panel says so (queue depth needs `torchpar-top run`).
- **lanes**: the last 5 s. The frontend lane shows `▌` where it was launching and `·` where it waited;
  each executor lane shows how busy it was. *overlap* is the share of time two or more executors were
  busy at once.
- **async vs sync (measured)**: throughput, mean depth and frontend wait in each mode, and their ratio,
  all measured in this run, plus the experiment's own results and the threads → GFLOP/s table.
- **ranks** (torchrun): one row per rank, its state (a rank that exited is marked with its exit code,
  the others keep being shown), throughput, queue depth and the share of time it waited for data. Executors
  of rank N are prefixed `rN:` in the queue and lanes panels.
- **GPU**: *kernel-active* is NVML's share of time a kernel ran, not SM occupancy.
- **frontend stack (py-spy)**: the main thread's Python stack, outermost first, innermost last, about
  twice a second, and what it waits in (*synchronize*, *item()/cpu()*, *DataLoader*...). When there is
  no stack the panel says why (py-spy missing, ptrace not permitted) and how to fix it.
- **log**: the workload's stdout and stderr, agent messages, and the child's exit status and last error
  lines when it ends; the mouse wheel scrolls back.
- **sync points**: source lines whose calls wait for the device: `.item()`, `.cpu()`, `.tolist()`,
  printing a tensor, `bool(tensor)`... Each blocks the frontend until the device has finished everything
  queued before it, so the queue drains. Listed busiest first (per second, and the total count). On the
  CPU nothing is queued: they are counted as the syncs they *would* be on a GPU.

**A hot core next to a synchronize is waiting, not working**: a thread waiting in a synchronize may spin
at 100% of a core.

## Keys

| key | does |
|-----|------|
| `s` | toggle ASYNC / SYNC |
| `+` `=` / `-` | one more / one fewer intra-op thread (`torch.set_num_threads`) |
| `w` | pick an experiment to run |
| `r` | restart: run the same script or experiment again (e.g. after it ended); an experiment keeps the thread count of `+`/`-`, set before any of its threads start |
| `k` | show / hide the frontend stack panel |
| `h` | a 1 s `torch.profiler` window, analysed the way Holistic Trace Analysis computes queue length: exact depth per CUDA stream and time at the 1024 cap, in the log (CUDA only) |
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
