"""What each panel means, once: the help screen shows :attr:`Panel.meaning`, the README adds
:attr:`Panel.detail` (``python -m torchpar_top.tui.docs README.md`` writes it; a test checks it)."""

from __future__ import annotations

from dataclasses import dataclass

from torchpar_top.tui.keys import keys_table


@dataclass(frozen=True)
class Panel:
    """One panel: its name and what its numbers mean (and, for the README, where they come from)."""

    name: str
    meaning: str
    detail: str = ""


PANELS: tuple[Panel, ...] = (
    Panel(
        "header",
        "what runs (an experiment, `run train.py`, `run train.py ×2 ranks`, `attach PID`, `replay "
        "trace.json.gz`), and the mode: **ASYNC** (the frontend enqueues work and returns at once) or "
        "**SYNC** (a `synchronize()` after every op). Then the child's state when it is not running "
        "(*exited 1*, *attached*, a replay *finished*), throughput, the summed queue depth, and "
        "**monitor N%**: torchpar-top's own CPU over the last second (all its threads, and py-spy's dumps "
        "when attached), at 100 columns and more.",
        "Throughput is the workload's own count per second: items, mm, chains or optimizer steps. The "
        "built-in experiments sample (and redraw) at 10 Hz, `run` at 5 Hz (half the agent's samples "
        "inside your code; `--interval 0.1` for 10 Hz). To lower the monitor's cost: a longer "
        "`--interval`, `--no-stacks`.",
    ),
    Panel(
        "CPU",
        "load per core, 0-100% on a fixed scale, with a short history.",
        "From psutil in the monitor; rows up to 8 cores, compact cells up to 64, one glyph per core up "
        "to 256.",
    ),
    Panel(
        "threads",
        "the child's threads grouped by role (frontend, stream executors, intra-op workers, inter-op pool, "
        "autograd, the script's own Python threads, DataLoader worker processes, other child processes); "
        "the bar is 100% per thread of the "
        "group. **waits N%**: time runnable but with every core taken (the kernel's run-queue delay); "
        "above half a core in all (and a fifth of the threads' runnable time), the panel says "
        "**starved** — more runnable threads than cores.",
        "Means over the last second, read and redrawn twice a second. "
        "From `/proc/<pid>/task/*/{stat,schedstat}` (nanosecond CPU time). The agent names its own "
        "threads (frontend, stream executors, pin-memory threads, agent) and lists the other Python "
        "threads (`threading.enumerate()`; attached, with no agent, py-spy's dump lists them); "
        "`PTThreadPool` is the inter-op pool (its first `get_num_interop_threads()` by thread id; the "
        "later ones are the OpenMP workers its threads started, which inherit the name), `pt_autograd_*` "
        "autograd, `pt_data*` data; OpenMP workers inherit their creator's name and the other unnamed "
        "native threads are shown as intra-op workers. Processes the child started are included (the "
        "tree is walked again once a second). The session decides *starved* and the SYNC note "
        "(`model/derive.py`); headless output carries both.",
    ),
    Panel(
        "launch queue",
        "per executor, either **depth** (Q = launched - started) or **outstanding** (O = launched - "
        "completed); the label says which. The strip is drawn on 0..capacity; launch blocks when the "
        "queue is full, and the row says how often that happened. An eager CPU executor is shown as "
        "*synchronous: depth 0*. A DataLoader's row says whether the loop is **input-bound** (the "
        "frontend waits for the next batch) or **compute-bound**. Attached to a process it did not "
        "start, torchpar-top cannot see queues: the panel says so (queue depth needs `torchpar-top run`).",
        "Depth for emulated streams; outstanding for CUDA streams (completion markers), inter-op futures "
        "and DataLoader tasks. A CUDA row fed by the launch counter is tagged **calls**: it counts torch "
        "calls, not kernels (one call may launch none or several; a CUDA-graph replay is no call), and "
        "cannot see a blocked launch (the row says *blocking not observable here* rather than *never "
        "blocked*). There is one row per stream the frontend used: work under `with "
        "torch.cuda.stream(s)` gets its own row (`cuda:0 s1`). Under `run` with cupti-python a CUDA row "
        "comes from CUDA's own records instead (`cuda:0 stream 7`): **depth** in kernels, as of the last "
        "moment every launch's kernel record had arrived; it says *standing aside* while torch.profiler "
        "or a CUDA graph capture holds CUPTI, and *sampled* when CUPTI records in windows "
        "(`--cupti-duty`, one sample interval in 20 by default). Input-bound means the frontend waited "
        "for data more than 30 % of the last second.",
    ),
    Panel(
        "lanes",
        "the last 5 s (below 70 columns the panel steps aside for the async-vs-sync table). The "
        "frontend lane shows `▌` where it ran (launching), `·` where it was blocked "
        "(full queue, synchronize, data) and `░` where it waited for a core; blank is idle (a sleeping "
        "script is not busy). An emulated stream's lane shows how much its thread *ran*, and `░` where it "
        "waited for a core more than it ran: **run N% waits M%**. *overlap on cores* is the share of time "
        "two or more executors ran at once, as a range (at least–at most) where it cannot be exact; *in "
        "progress* the share they both had work, running or not (on one core they take turns: 100% in "
        "progress, 0% on cores). Redrawn five times a second.",
        "Work in progress comes from busy intervals the agent records as items run (merged across gaps "
        "under 0.2 ms); running and waiting from each thread's own `/proc/self/task/<tid>/schedstat`, "
        "read by the agent once per sample. Those are window totals, so overlap on cores is bounded, not "
        "measured: at least (Σ run − time with work)/(n − 1), at most the overlap in progress and Σ run − "
        "the largest run (ARCHITECTURE.md). Executors without a "
        "thread of their own (CUDA streams, inter-op futures, DataLoader) show **busy N%**: work in "
        "progress.",
    ),
    Panel(
        "async vs sync (measured)",
        "throughput, mean depth and frontend wait in each mode, and their ratio, all measured in this "
        "run, plus the experiment's own results and the threads → GFLOP/s table. Results measured in "
        "rounds (multi-device's three phases, the async text's table) show the latest *complete* round, "
        "never one round's figures beside another's, with the median and range of the rounds so far.",
        "The start, up to and with the first window in which work was done (on a GPU: CUDA's start and "
        "the experiment fitting its item's size), the window that straddles a switch, the drain of the "
        "ASYNC backlog after a switch to SYNC, and the async experiment's timing rounds (every 15 s its "
        "live loop pauses to time the text's table: 10 × randn(1000²) + mm with numpy, the torch "
        "launches alone, and torch + synchronize) count in neither mode.",
    ),
    Panel(
        "ranks",
        "(torchrun): one row per rank, its state (a rank that exited is marked with its exit code, the "
        "others keep being shown), throughput, queue depth and the share of time it waited for data. "
        "Executors of rank N are prefixed `rN:` in the queue and lanes panels. Once steps are found, each "
        "rank's **step** time and its **slowest** phase (and its share of the step) join the table. Where "
        "a rank's frontend waited for a core 5 % of the time or more, **waits** gives each rank's share "
        "of time runnable with every core taken (CPU contention), where the panel has room. "
        "Redrawn twice a second, with the steps panel (its rates and step times are means over 2 s).",
        "A rank's agent reports its exit status with the exception's last line (in the log); a rank killed "
        "by a signal shows just *exited*. The rank whose agent reported an error first is named under the "
        "table with it, *rank 1 failed first: RuntimeError: ...* (at most three lines): the others' errors, "
        "as a lost peer, follow from it. The workload's end says it too.",
    ),
    Panel(
        "steps",
        "once a training step is seen: one bar per rank, split into the step's phases (**data**, "
        "**transfer**, **forward**, **backward**, **comm**: waiting for other ranks, **optimizer**, "
        "**sync**, "
        "**other**), as long as its step compared with the longest, then its step time and steps/s; the "
        "**straggler** (the rank the others wait for) is marked with the phase that makes it slow, and "
        "with *waits for a core* where its frontend waited for a CPU core (every core it may use taken) "
        "about as long as it is slower: CPU contention, not its code. The title "
        "says what marks a step (optimizer steps, backward calls, DataLoader batches, model calls). A rank "
        "that finished no step for ten of its steps and 3 s or more is marked *no step for 15.3 s* with "
        "where its frontend is, from its latest stack: *sleep at train.py:66 (forward)*, *collective at "
        "...*, *waits at ...* (idle in a wait Python cannot see, as DDP's all-reduce in `backward`), "
        "*running at ...*; its steps/s is then 0, its bar is drawn faded (░: its steps' shares before the "
        "stall) and the ranks table's slowest phase reads *stalled*; when every rank stopped the title says "
        "so: a hung "
        "job shows which rank waits for its peers and which is stuck in its own code. On short terminals "
        "the panel steps aside (the ranks table keeps the slowest phase).",
        "Seconds per step over the last 2 s, from a handful of timestamps per step in the workload (on CUDA "
        "from CUDA events: GPU time, checked on an H100). Ranks' steps/s are counted over the same span "
        "of time, so ranks in lockstep read the same rate. The straggler is judged over the run, on "
        "one-second windows aligned across ranks (`model/steps.py`): a rank is named when one phase other "
        "than comm is clearly longer than the others' in most windows, never on one step's noise; until "
        "five windows with every rank stepping were compared the title says *straggler: judging, 3 of 5 s*, "
        "not *no straggler* (a DDP job's first seconds go to starting torchrun and the ranks). The wait "
        "for a core is each rank's frontend run-queue delay (`schedstat`), beyond the others' median; it "
        "is named when it is at least half the straggler's extra time.",
    ),
    Panel(
        "GPU",
        "*kernel-active* is NVML's share of time a kernel ran, not SM occupancy.",
        "Also memory as nvidia-smi shows it (reserved memory not counted, where the driver has "
        "`nvmlMemory_v2`), power, temperature and the child's own share; or one line saying why there is "
        "no GPU data. An idle GPU reads the driver's 0 %, not its last busy value. GPUs are labelled "
        "`cuda:N` as the workload numbers them; when torchrun ranks number them differently (a "
        "`CUDA_VISIBLE_DEVICES` per rank) they are labelled by NVML index, `nvml:N`, and the status line "
        "says why. A GPU NVML may not open reads *no permission*, not *lost*. In a replay kernel-active "
        "comes from the trace (the share of each frame with a kernel, copy or memset running) and the "
        "title says so.",
    ),
    Panel(
        "frontend stack",
        "the main thread's Python stack, outermost first, innermost last, about twice a second, and what "
        "it waits in (*synchronize*, *item()/cpu()*, *DataLoader*...); *idle* when the thread ran under a "
        "tenth of the last window. When there is no stack the panel says why (py-spy missing, ptrace not "
        "permitted) and how to fix it.",
        "With the agent (experiments, `run`) the workload reads it itself (`sys._current_frames()`, a few "
        "microseconds: no process per dump, no ptrace); attached to a process without the agent, "
        "`py-spy dump --json --nonblocking` reads it (blocking mode would stop every thread of a torch "
        "process). The title says which. Once the workload has exited, its last stack stays, headed "
        "*exited · last seen ...* with its age (the last one read while its code ran: a workload that "
        "crashed before its first reading shows none). `--no-stacks` turns stacks off.",
    ),
    Panel(
        "log",
        "the workload's stdout and stderr, agent messages, and the child's exit status when it ends "
        "(one bold line: `pid N: workload exited with status 1; ValueError: ...; press r to run it "
        "again`), with its last error lines when the pane does not already show them (a traceback is not "
        "printed twice); a line wider than the pane wraps under its text; the mouse wheel scrolls back.",
        "A separate pipe from the protocol, so prints never corrupt it; escape sequences the workload "
        "prints are shown as symbols (`␛`), never sent to the terminal.",
    ),
    Panel(
        "sync points",
        "source lines whose calls wait for the device: `.item()`, `.cpu()`, `.tolist()`, printing a "
        "tensor, `bool(tensor)`... Each blocks the frontend until the device has finished everything "
        "queued before it, so the queue drains. Listed busiest first (per second, and the total count). "
        "On the CPU nothing is queued: they are counted as the syncs they *would* be on a GPU. Redrawn "
        "twice a second.",
        "Indexing with a boolean mask (`x[mask]`, `x[mask] = v`) counts too. Under `run` they are "
        "counted in slices of the time (the title says *sampled* and how much of the time was seen; the "
        "rate is scaled, the count is what the slices saw); `--every-op` counts every call. On CUDA with "
        "cupti-python they are CUDA's own synchronising calls (device, stream and event synchronize, "
        "blocking copies), every one, by the line that made them.",
    ),
)

HOT_CORE_NOTE = (
    "**A hot core next to a synchronize is waiting, not working**: a thread waiting in a CUDA "
    "synchronize may spin at 100% of a core (the threads panel says so in SYNC with a CUDA stream; on the "
    "CPU a hot frontend computes: eager ops run on it)."
)


def panels_list(detail: bool) -> str:
    """The panels as a Markdown list; with ``detail``, as the README has it."""
    items = []
    for panel in PANELS:
        text = f"{panel.meaning} {panel.detail}" if detail and panel.detail else panel.meaning
        items.append(
            f"- **{panel.name}**: {text}" if not text.startswith("(") else f"- **{panel.name}** {text}"
        )
    return "\n".join(items) + "\n"


def help_markdown() -> str:
    """The help screen: the panels, the hot-core note, the keys."""
    return f"## Panels\n\n{panels_list(detail=False)}\n{HOT_CORE_NOTE}\n\n## Keys\n\n{keys_table()}"
