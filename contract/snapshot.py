"""What the screen shows and headless mode prints: frozen views of one moment, meaning included.

``session/`` computes every field here once (the store folds host readings and agent messages into a
:class:`Snapshot`); the TUI only formats them and headless mode only serialises them
(:func:`torchpar_top.contract.codec.to_plain`). A missing measurement is ``None``, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from torchpar_top.contract.messages import DeviceMemory, StackFrame, StepPhases, StepRecord
from torchpar_top.contract.vocab import (
    ChildState,
    Counted,
    DataBound,
    ExecutorKind,
    LogSource,
    Mode,
    Quantity,
    Role,
    StepSource,
    ThroughputUnit,
    WaitKind,
)


@dataclass(frozen=True)
class ThreadInfo:
    """One thread of the watched process, as read from /proc/<pid>/task/<tid>."""

    tid: int
    name: str
    """The kernel's name for it (``comm``)."""
    role: Role
    """What it does for PyTorch (the agent says so for its threads, else guessed from the name)."""
    cpu_percent: float
    """Share of one core used since the previous sample, 0..100."""
    wait_percent: float = 0.0
    """Share of the time since the previous sample spent runnable but waiting for a core (the
    run-queue delay in ``schedstat``): above 0 means the machine had more runnable threads than cores."""
    pid: int | None = None
    """The process it belongs to: the watched one, or one it started (DataLoader workers...)."""
    executor: str = ""
    """For an executor's own thread (an emulated stream's, a pin-memory thread): which executor."""


@dataclass(frozen=True)
class ThreadGroup:
    """Threads of one role, summed."""

    role: Role
    count: int
    busy: int
    """How many of them used more than :data:`BUSY_THREAD_PERCENT` of a core."""
    cpu_percent: float
    """Sum over the group, in percent of one core (may exceed 100)."""
    tids: tuple[int, ...] = ()
    wait_percent: float = 0.0
    """Run-queue wait summed over the group, in percent of one core."""
    executor: str = ""
    """The executor an executor-thread group serves (one group per executor)."""


BUSY_THREAD_PERCENT = 10.0


@dataclass(frozen=True)
class HostSample:
    """One reading of the host probes."""

    t: float
    """``time.time()`` when the reading was taken."""
    cores: tuple[float, ...]
    """Per-core load, percent, in core order."""
    threads: tuple[ThreadInfo, ...] | None
    """The child's threads (empty when no child is running); ``None`` when they were not read this time
    (they are read every few samples: ``session.store.THREAD_SAMPLE_S``)."""
    started: Mapping[int, int] = field(default_factory=dict)
    """When each of ``threads`` started (tid -> clock ticks after boot, ``/proc`` ``stat`` field 22): orders
    threads by age where their ids cannot (ids that wrapped around). Not part of a snapshot."""


@dataclass(frozen=True)
class ExecutorView:
    """One executor (stream, pool, emulated stream...) with its recent history."""

    name: str
    kind: ExecutorKind
    quantity: Quantity
    """Q = L - S (``depth``) or O = L - C (``outstanding``)."""
    value: int
    capacity: int | None
    """Launch blocks when ``value`` reaches it; ``None`` for unbounded executors."""
    launched: int
    completed: int
    emulated: bool
    history: tuple[float, ...]
    """``value`` per sample, oldest first; kept longer than the other series (the launch queue's strip
    draws one per cell, as wide as the terminal): its newest values line up with :attr:`busy`'s and the
    snapshot's own series (one value each per sample)."""
    busy: tuple[float, ...]
    """Fraction of each sample window this executor had an item in progress, 0..1, oldest first."""
    blocked: float | None
    """Fraction of the last window the frontend spent blocked launching into this executor (full);
    ``None`` where blocking cannot be observed."""
    rank: int | None = None
    """The torchrun rank whose agent reported it; ``None`` for a single workload."""
    counts: Counted = Counted.ITEMS
    """What one launch is: an item, a torch call (function-mode counters), a kernel."""
    ready: int | None = None
    """DataLoader: batches fetched and waiting for the frontend."""
    running: tuple[float, ...] = ()
    """Fraction of each window its own thread was on a core with an item in progress, aligned with
    :attr:`busy`; empty where the executor has no thread of its own to read (then ``busy`` is all
    that is known)."""
    core_wait: tuple[float, ...] = ()
    """Fraction of each window it had an item in progress but waited for a core; aligned with
    :attr:`running`."""
    note: str | None = None
    """The last row's note: figures standing aside (a CUDA stream while ``torch.profiler`` holds CUPTI)."""
    samples: int = 0
    """Rows appended to its histories so far (``history``, ``busy``, ``running``, ``core_wait`` gain one
    each per row): how many values they gained between two snapshots, exactly where the values repeat
    (a stream busy 100 % of every window); 0 where not counted."""


@dataclass(frozen=True)
class ModeStats:
    """What was measured while the child ran in one mode (ASYNC or SYNC)."""

    mode: Mode
    seconds: float
    """Time observed in this mode (after the first sample in it)."""
    throughput: float | None
    """Mean items (or steps) per second over that time; ``None`` before any sample."""
    mean_depth: float | None
    """Mean of the summed queue values over that time."""
    frontend_wait: float | None
    """Mean fraction of time the frontend was blocked (full queue or synchronize)."""


@dataclass(frozen=True)
class ResultRow:
    """A result the experiment measured and reported (e.g. one timing of the auto-parallelism text).

    A result that belongs to rounds shows the latest *complete* round (every row from the same round)
    and, over the complete rounds kept, the median and the range.
    """

    label: str
    value: float
    unit: str
    round: int | None = None
    """The round :attr:`value` comes from; None for a result outside rounds."""
    median: float | None = None
    """Median over the complete rounds kept that have this label."""
    low: float | None = None
    """Smallest value over those rounds."""
    high: float | None = None
    """Largest value over those rounds."""
    rounds: int = 0
    """How many complete rounds the median covers."""


@dataclass(frozen=True)
class ScalingPoint:
    """Intra-op scaling: measured GFLOP/s at a thread count."""

    threads: int
    gflops: float
    samples: int


@dataclass(frozen=True)
class GpuView:
    """One GPU as NVML reports it; a missing metric is ``None``, never an exception."""

    index: int
    """NVML index."""
    label: str
    """As the child sees it (``cuda:N``) where known, else ``nvml:N``."""
    name: str
    util_percent: float | None
    """Kernel-active share of time (NVML utilization.gpu), not SM occupancy."""
    util_history: tuple[float, ...]
    mem_used: int | None
    mem_total: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    process_util_percent: float | None = None
    process_mem: int | None = None
    lost: bool = False
    uuid: str = ""
    """NVML's UUID (``GPU-...``), as dcgm-exporter labels the GPU; '' where unknown."""
    samples: int = 0
    """Values appended to ``util_history`` so far (as :attr:`ExecutorView.samples`); 0 where not counted."""


@dataclass(frozen=True)
class ChildStatus:
    """The workload process."""

    pid: int | None
    state: ChildState
    exit_code: int | None = None
    message: str = ""
    last_stderr: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogLine:
    """A line for the log pane."""

    seq: int
    source: LogSource
    text: str


@dataclass(frozen=True)
class DataVerdict:
    """Whether a DataLoader-fed frontend waits for its data (input-bound) or for its compute."""

    bound: DataBound
    wait: float
    """Share of the last window the frontend waited for its next batch."""


@dataclass(frozen=True)
class StepsView:
    """A workload's training steps, as headless JSON's ``steps`` object shows them."""

    source: StepSource
    """What marks a step: optimizer steps, backward calls, DataLoader batches or module calls."""
    count: int
    """Steps of ``source`` completed since the run started (where another source marked steps before it
    took over, those are not in it: ``Steps.before``)."""
    per_second: float | None
    """Steps per second over the last window (ranks' rates over the same span of time)."""
    seconds: float | None
    """Mean step time over the last window."""
    phases: StepPhases
    """Seconds per step in each phase over the last window (they add up to ``seconds``)."""
    run_seconds: float | None = None
    """Mean step time over the run."""
    run_phases: StepPhases | None = None
    """Seconds per step in each phase over the run."""
    gpu: bool = False
    """The phases are GPU time (CUDA events), not the frontend's wall time."""
    timed_share: float | None = None
    """The share of the run's steps whose phases were timed; None: all of them. A fast loop's phases
    are timed in one step of several and estimated for the others from them
    (``probes/agent/usercode_steps.py``, "Sampled phases")."""
    recent: tuple[StepRecord, ...] = ()
    """The last whole steps (``model.steps.RECENT_KEEP`` at most), oldest first: what a recording keeps
    and the export draws as a slice per phase per step (not in headless JSON)."""
    stalled: float | None = None
    """Seconds since its last step, where that is ten of its mean steps and 3 s or more
    (``model.steps.STALL_STEPS``, ``STALL_MIN``): it has stopped stepping (a hang, a checkpoint, an
    evaluation); None while it steps. A rank that ended keeps what it was when it ended (stopped or
    killed while stalled), unless its code returned; one whose last step closed alone after a stall (a
    stop ended the hang: its peer killed, its all-reduce returned) is stalled for that step's length."""


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory: resident set and, on CUDA, each device's caching allocator."""

    rank: int | None
    rss_bytes: int
    devices: tuple[DeviceMemory, ...] = ()
    rss_growth_bytes_per_min: float | None = None
    """The least-squares slope of the resident set over the run (a steady rise is a leak); None before
    a few seconds of samples."""


@dataclass(frozen=True)
class RankView:
    """One agent process: the workload, or one torchrun rank."""

    rank: int | None
    pid: int
    state: ChildState
    """``running`` or ``exited``."""
    throughput: float | None
    unit: ThroughputUnit
    depth: int
    """Sum of the rank's executor values (:func:`torchpar_top.model.figures.total_depth`)."""
    data_wait: float | None = None
    """Fraction of the last window the frontend waited for the next batch (DataLoader)."""
    exit_code: int | None = None
    data_verdict: DataVerdict | None = None
    """This rank's DataLoader verdict, when it feeds from a watched DataLoader."""
    steps: StepsView | None = None
    """This rank's training steps, once one was seen."""
    local_rank: int | None = None
    """torchrun: the rank's number on its node (``LOCAL_RANK``)."""
    node_rank: int | None = None
    """torchrun: its node's rank (``GROUP_RANK``)."""
    hostname: str = ""
    """The host it runs on."""
    note: str = ""
    """How it ended when that needs saying: ``rank 1 aborted (SIGABRT) at interpreter exit, after its work
    had finished`` (a signal after its code had returned, as Gloo's threads can at teardown), or ``rank 1
    failed first: RuntimeError: ...`` (the first rank whose code raised: the others' errors follow)."""
    core_wait: float | None = None
    """Share of the last second its frontend was runnable but waited for a core (its ``schedstat``
    run-queue delay); None where the kernel keeps no schedstat."""
    at: str = ""
    """Where its frontend was at its latest stack (twice a second): ``sleep at ddp_steps.py:66
    (forward)``, what it waits in and the innermost line of the user's code (``model.stacks.where``);
    '' without stacks. Said beside a rank that stopped stepping (:attr:`StepsView.stalled`)."""


@dataclass(frozen=True)
class SyncSite:
    """A source line where the frontend calls something that waits for the device (``.item()``...)."""

    where: str
    """``file.py:LINE``."""
    call: str
    count: int
    per_second: float
    """Rate over the last report window."""
    rank: int | None = None
    """The torchrun rank that made the call; ``None`` for a single workload."""
    sampled: bool = False
    """Counted only while the op counter was on (slices of the time); the rate is scaled to all of it."""


@dataclass(frozen=True)
class StackView:
    """The frontend thread's Python stack: from the agent in the workload, or (``attach``, no agent)
    from ``py-spy dump --json --nonblocking``."""

    pid: int
    thread: str
    frames: tuple[StackFrame, ...]
    """Outermost first, innermost last."""
    idle: bool
    """py-spy's own verdict that the thread is idle (waiting)."""
    t: float
    """``time.time()`` of the dump."""
    waiting_in: WaitKind = WaitKind.NONE
    """What the innermost frames say the frontend waits in (synchronize, item, DataLoader...), or
    :attr:`WaitKind.NONE` ('')."""
    source: str = "py-spy"
    """Who read it: ``agent`` (the agent in the workload, ``sys._current_frames()``; its ``idle`` is the
    thread's run share) or ``py-spy`` (``dump --nonblocking`` from outside, for ``attach``)."""
    python_tids: tuple[int, ...] = ()
    """Native ids of every thread py-spy found running Python (``attach``: with no agent to name them,
    the threads panel shows these as the script's Python threads, not as OpenMP workers); empty from
    the agent, which names its threads itself."""


@dataclass(frozen=True)
class ReplayView:
    """Where the replay of a recorded profiler trace stands (``torchpar-top replay``)."""

    path: str
    """The trace file or folder."""
    position: float
    """Seconds of trace time from the trace's start to the end of the newest frame."""
    duration: float
    """Seconds the trace covers (first event's start to last event's end)."""
    speed: float
    """Seconds of trace time played per second on screen."""
    frame: float
    """Seconds of trace time per frame (the interval times the speed)."""
    finished: bool = False
    """The position reached the trace's end."""
    recorded: bool = False
    """A recording (``--record``) played back: the snapshots as they were recorded, host readings and
    scoreboard included, ``position`` and ``duration`` in seconds of the run; not a trace's analysis."""

    @property
    def trace(self) -> bool:
        """A profiler trace's analysis (no host readings, trace time), not a recording."""
        return not self.recorded


@dataclass(frozen=True)
class QueueDepth:
    """The queues summed, the header's ``depth 1024/1024`` (``model.figures.queue_depth``)."""

    value: int
    """Every executor's value (``depth`` or ``outstanding``) summed, every rank's."""
    capacity: int | None
    """Their capacities summed; ``None`` when one of them is unbounded."""


@dataclass(frozen=True)
class LaneShare:
    """One lane's figures: means over the lanes' window (:func:`torchpar_top.model.figures.lanes`)."""

    name: str
    """``frontend``, or the executor's name."""
    rank: int | None = None
    """The executor's rank (``None`` for the frontend and for a single workload)."""
    busy: float | None = None
    """Executors: share with an item in progress. The frontend: on a core outside its waits."""
    running: float | None = None
    """Executors whose thread was read: share on a core with an item in progress; else ``None``."""
    core_wait: float | None = None
    """Share runnable but waiting for a core (an item in progress, for executors); ``None`` where the
    thread's ``schedstat`` was not read."""
    wait: float | None = None
    """The frontend: share blocked (full queue, synchronize, data); ``None`` for executors."""


@dataclass(frozen=True)
class LanesView:
    """The lanes panel's percentages, over its window (the last ``windows`` values of each history)."""

    windows: int
    """How many sample windows (frames, in a replayed trace) the means reach back over, at most."""
    frontend: LaneShare
    executors: tuple[LaneShare, ...] = ()
    """One per executor, in :attr:`Snapshot.executors`' order."""
    overlap: float | None = None
    """Mean of :attr:`Snapshot.overlap` (running at once, at least)."""
    overlap_high: float | None = None
    """Mean of :attr:`Snapshot.overlap_high` (running at once, at most)."""
    overlap_in_progress: float | None = None
    """Mean of :attr:`Snapshot.overlap_in_progress` (work in progress at once)."""

    def of(self, executor: ExecutorView) -> LaneShare | None:
        """The lane of ``executor`` (by rank and name)."""
        return next((x for x in self.executors if (x.rank, x.name) == (executor.rank, executor.name)), None)


@dataclass(frozen=True)
class SteadyStats:
    """The scoreboard's modes taken together: every steady window of the run, time-weighted
    (:func:`torchpar_top.model.figures.steady`)."""

    seconds: float
    done: float
    """Work done in those windows (throughput × seconds), in the throughput's unit less ``/s``."""
    throughput: float | None
    mean_depth: float | None
    """Mean of the primary rank's summed queue values (the scoreboard's ``mean_depth``)."""
    frontend_wait: float | None


@dataclass(frozen=True)
class Snapshot:
    """Everything the screen shows at one moment."""

    t: float
    experiment: str
    description: str
    """What the target does, less what :attr:`target` already says (``--epochs 3`` after ``run
    train.py``)."""
    mode: Mode
    paused: bool
    interval: float
    child: ChildStatus
    cores: tuple[float, ...] = ()
    core_history: tuple[tuple[float, ...], ...] = ()
    threads: tuple[ThreadInfo, ...] = ()
    thread_groups: tuple[ThreadGroup, ...] = ()
    executors: tuple[ExecutorView, ...] = ()
    frontend_busy: tuple[float, ...] = ()
    """Frontend lane: fraction of each window the frontend ran on a core outside its waits."""
    frontend_wait: tuple[float, ...] = ()
    """Frontend lane: fraction of each window the frontend was blocked (full queue or synchronize)."""
    frontend_core_wait: tuple[float, ...] = ()
    """Frontend lane: fraction of each window the frontend was runnable but waited for a core; empty
    where the agent cannot read its thread's ``schedstat`` (then ``frontend_busy`` is ``1 - wait``)."""
    overlap: tuple[float, ...] = ()
    """Fraction of each window in which two or more executors were running at once, at least (on a
    core, for emulated streams: bounded from window totals, ARCHITECTURE.md)."""
    overlap_high: tuple[float, ...] = ()
    """The most that fraction can have been, per window (equal to :attr:`overlap` where it is exact)."""
    timing: tuple[bool, ...] = ()
    """Per window of the primary agent (aligned with ``frontend_busy``): whether the experiment had
    paused its live loop for a timing round (the async text's table), which launches without regard to
    ASYNC or SYNC."""
    overlap_in_progress: tuple[float, ...] = ()
    """Fraction of each window in which two or more executors had an item in progress, running or not."""
    throughput: float | None = None
    throughput_unit: ThroughputUnit = ThroughputUnit.ITEMS
    throughput_history: tuple[float, ...] = ()
    num_threads: int | None = None
    interop_threads: int | None = None
    scoreboard: tuple[ModeStats, ...] = ()
    results: tuple[ResultRow, ...] = ()
    scaling: tuple[ScalingPoint, ...] = ()
    gpus: tuple[GpuView, ...] = ()
    gpu_status: str = ""
    """Why the GPU panel is empty, when it is (no NVML, no driver...)."""
    log: tuple[LogLine, ...] = ()
    """The most recent log lines, oldest first (``seq`` increases)."""
    log_partial: tuple[LogLine, ...] = ()
    """Lines still being written, one per stream at most: a progress bar's latest state (``\r``), shown
    after the log until its newline makes it a line of ``log`` (``seq`` 0: not in the log yet)."""
    op_coverage: float | None = None
    """Share of the last window the op counter was on, when ops are counted in slices (ops/s and sync
    points are then sampled); ``None`` when not counted that way."""
    sample_t: float | None = None
    """``time.time()`` in the child when the newest child sample was made (latency measurements)."""
    target: str = ""
    """What runs: an experiment name, ``run train.py``, or ``attach PID``."""
    notice: str = ""
    """A standing message about what can be measured here (e.g. attach: no queue depth)."""
    ranks: tuple[RankView, ...] = ()
    """Agent processes (one for an experiment or a script; one per rank under torchrun)."""
    syncpoints: tuple[SyncSite, ...] = ()
    data_verdict: DataVerdict | None = None
    """The primary rank's DataLoader verdict (input- or compute-bound), when a DataLoader is watched."""
    attached: bool = False
    """Watching a process torchpar-top did not start: no agent, so no mode, queues or lanes."""
    starved: float | None = None
    """Cores' worth of run-queue wait, when the threads waited for a CPU enough to call it starved."""
    frontend_hot_in_sync: bool = False
    """SYNC, and the frontend runs hot: a thread spinning in a synchronize is waiting, not working."""
    monitor_cpu: float | None = None
    """torchpar-top's own footprint: the share of one core its process used over the last second, all
    its threads (screen, probes, reader), plus py-spy's dumps when attached; None before a second has
    passed."""
    stack: StackView | None = None
    stack_status: str = ""
    """Why there is no stack (py-spy missing, ptrace not permitted...), or ''."""
    replay: ReplayView | None = None
    """A recorded trace played back: no host readings, every figure from the trace's analysis."""
    steps: StepsView | None = None
    """The workload's training steps (the primary rank's; every rank's in :attr:`ranks`, where alone
    ``recent`` is kept)."""
    straggler: Straggler | None = None
    """The rank that holds the others back, over the run so far (``model.steps.find_straggler``)."""
    straggler_windows: int = 0
    """How many one-second windows (every rank stepping in each) the straggler was judged over: it is
    named from ``model.steps.MIN_WINDOWS`` on, so before that a None :attr:`straggler` means "not judged
    yet", not "none"; 0 with fewer than two ranks stepping."""
    memory: tuple[RankMemory, ...] = ()
    """Each rank's memory at its latest sample."""
    samples: int = 0
    """The primary agent's samples appended to the series above so far (``frontend_busy``,
    ``frontend_wait``, ``frontend_core_wait``, ``overlap``, ``overlap_high``, ``overlap_in_progress``,
    ``timing`` and ``throughput_history`` gain one value each per sample): how many values they gained
    between two snapshots, exactly where the values repeat, as a history that keeps a fixed number of
    values cannot say (a recording's lines carry only the new values: ``contract.recording.delta``);
    0 where not counted."""
    host_samples: int = 0
    """Host readings appended to ``core_history`` so far (as :attr:`samples`); 0 where not counted."""
    # Derived by torchpar_top.model.snapshot.build from the fields above (every source builds its
    # snapshot there): readers read them, never compute them again. ``DERIVED`` names them.
    primary_rank: int | None = None
    """The rank whose frontend, lanes, scoreboard and data verdict are shown: the lowest rank number;
    ``None`` for a single workload."""
    depth: QueueDepth | None = None
    """Every queue summed, now; ``None`` without executors."""
    core_load: float | None = None
    """Mean load over the cores now, percent; ``None`` without a reading."""
    lanes: LanesView | None = None
    """The lanes' percentages (``None`` only in a snapshot that did not come from ``build``)."""
    steady: SteadyStats | None = None
    """Both modes of the scoreboard together; ``None`` before a steady window was measured."""
    ratio: float | None = None
    """Measured ASYNC throughput / SYNC throughput, when both were measured (the scoreboard's)."""
    ranks_running: int = 0
    """How many of :attr:`ranks` run now."""


#: The :class:`Snapshot` fields derived from the others (``model/snapshot.py``), not measured.
DERIVED = ("primary_rank", "depth", "core_load", "lanes", "steady", "ratio", "ranks_running")


@dataclass(frozen=True)
class Straggler:
    """The rank that holds the others back, and why (:func:`torchpar_top.model.steps.find_straggler`)."""

    rank: int
    cause: str
    """The phase (``vocab.PHASES``, never ``comm``) that is longer on it than on the others."""
    ratio: float | None
    """Its ``cause`` phase over the median of the other ranks' (seconds per step); None where the others
    spend no time in it (JSON has no infinity)."""
    costs: float
    """Seconds per step the others wait for it: the others' median ``comm`` less its own where ranks
    wait in collectives, else its excess in ``cause``."""
    core_wait: float | None = None
    """Seconds per step its frontend waited for a core (runnable, every core it may use taken: the
    kernel's run-queue delay) beyond the other ranks' median, where that accounts for at least half its
    extra time (``model.steps.CONTENTION_SHARE``): it is held back by CPU contention (another process, or
    too many threads, on its cores), not by its code; None otherwise or where it was not measured."""


@dataclass(frozen=True)
class Experiment:
    """A built-in experiment, as the picker lists it."""

    name: str
    title: str
    description: str = field(default="")


@runtime_checkable
class SnapshotSource(Protocol):
    """Where the TUI's snapshots come from: a live session, a replay (of a trace or a recording), a fake.

    What else a source can do is a capability of its own (:class:`LiveControls`, :class:`ReplayControls`):
    the TUI checks for it (``isinstance``) and says so itself when a key asks for one the source lacks,
    so no source stubs the others' commands.
    """

    def start(self) -> None:
        """Start sampling (and the child), or the replay's clock."""

    def close(self) -> None:
        """Stop everything; nothing may be left running. It may be called (from another thread) while a
        ``restart`` or ``switch_experiment`` runs: it then waits for it, and that starts nothing more."""

    def snapshot(self) -> Snapshot:
        """The current state."""

    def set_paused(self, paused: bool) -> None:
        """Pause or resume sampling (the child keeps running), or the replay."""

    def restart(self) -> None:
        """Run the same target again (the user's script after it ended, or the experiment), or play the
        replay again from its start."""


@runtime_checkable
class LiveControls(Protocol):
    """What only a live run does: commands that reach the workload (:class:`~torchpar_top.sources.live.
    session.Session`)."""

    def experiments(self) -> Sequence[Experiment]:
        """The built-in experiments."""

    def toggle_sync(self) -> None:
        """Switch the child between ASYNC and SYNC."""

    def change_threads(self, delta: int) -> None:
        """Change ``torch.set_num_threads`` in the child by ``delta``."""

    def switch_experiment(self, name: str) -> None:
        """Stop the running child and start experiment ``name``."""

    def profile(self, seconds: float = 1.0) -> None:
        """Ask the child for a short torch.profiler window (exact per-stream queue length on CUDA)."""


@runtime_checkable
class ReplayControls(Protocol):
    """What only a replay does: move on its timeline (:class:`~torchpar_top.sources.playback.Playback`)."""

    def step(self, frames: int) -> None:
        """Pause, then move ``frames`` frames forward (negative: back)."""

    def seek(self, share: float) -> None:
        """Move the position by ``share`` of the timeline (negative: back), within it."""

    def seek_start(self) -> None:
        """Go to the timeline's start."""

    def change_speed(self, factor: float) -> None:
        """Multiply the speed (timeline seconds per second on screen) by ``factor``."""


SessionLike = SnapshotSource
"""What the TUI draws (the name it had when it was one protocol of fourteen methods)."""
