"""The session's state as frozen snapshots: what the TUI draws and what headless mode prints.

Nothing here measures or draws. Host probes produce :class:`HostSample`; the child's agent produces
``sample`` messages (see :mod:`torchpar_top.session.protocol`) that the store turns into
:class:`ExecutorView` rows; :class:`~torchpar_top.session.store.SessionStore` folds both into one
:class:`Snapshot` on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

#: Executor kinds (``ExecutorView.kind``).
KIND_CUDA_STREAM = "cuda-stream"
KIND_EMULATED_STREAM = "emulated-stream"
KIND_INTEROP_POOL = "interop-pool"
KIND_EAGER = "eager"
KIND_DATALOADER = "dataloader"

#: Which quantity an executor's ``value`` is (DESIGN.md, "One definition of queue depth").
QUANTITY_DEPTH = "depth"  # Q = launched - started
QUANTITY_OUTSTANDING = "outstanding"  # O = launched - completed


@dataclass(frozen=True)
class ThreadInfo:
    """One thread of the watched process, as read from /proc/<pid>/task/<tid>."""

    tid: int
    name: str
    """The kernel's name for it (``comm``)."""
    role: str
    """What it does for PyTorch: see :mod:`torchpar_top.probes.host.threads` for the roles."""
    cpu_percent: float
    """Share of one core used since the previous sample, 0..100."""
    wait_percent: float = 0.0
    """Share of the time since the previous sample spent runnable but waiting for a core (the
    run-queue delay in ``schedstat``): above 0 means the machine had more runnable threads than cores."""
    pid: int | None = None
    """The process it belongs to: the watched one, or one it started (DataLoader workers...)."""


@dataclass(frozen=True)
class ThreadGroup:
    """Threads of one role, summed."""

    role: str
    count: int
    busy: int
    """How many of them used more than :data:`BUSY_THREAD_PERCENT` of a core."""
    cpu_percent: float
    """Sum over the group, in percent of one core (may exceed 100)."""
    tids: tuple[int, ...] = ()
    wait_percent: float = 0.0
    """Run-queue wait summed over the group, in percent of one core."""


BUSY_THREAD_PERCENT = 10.0


@dataclass(frozen=True)
class HostSample:
    """One reading of the host probes."""

    t: float
    """``time.time()`` when the reading was taken."""
    cores: tuple[float, ...]
    """Per-core load, percent, in core order."""
    threads: tuple[ThreadInfo, ...]
    """The child's threads (empty when no child is running)."""


@dataclass(frozen=True)
class ExecutorView:
    """One executor (stream, pool, emulated stream...) with its recent history."""

    name: str
    kind: str
    quantity: str
    """``depth`` (Q = L - S) or ``outstanding`` (O = L - C)."""
    value: int
    capacity: int | None
    """Launch blocks when ``value`` reaches it; ``None`` for unbounded executors."""
    launched: int
    completed: int
    emulated: bool
    history: tuple[float, ...]
    """``value`` per sample, oldest first."""
    busy: tuple[float, ...]
    """Fraction of each sample window this executor was executing work, 0..1, oldest first."""
    blocked: float
    """Fraction of the last window the frontend spent blocked launching into this executor (full)."""


@dataclass(frozen=True)
class ModeStats:
    """What was measured while the child ran in one mode (ASYNC or SYNC)."""

    mode: str
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
    """A result the experiment measured and reported (e.g. one timing of the auto-parallelism text)."""

    label: str
    value: float
    unit: str


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


@dataclass(frozen=True)
class ChildStatus:
    """The workload process."""

    pid: int | None
    state: str
    """``starting``, ``running``, ``exited`` or ``failed`` (could not start)."""
    exit_code: int | None = None
    message: str = ""
    last_stderr: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogLine:
    """A line for the log pane."""

    seq: int
    source: str
    """``stdout``, ``stderr``, ``child`` (agent messages) or ``app``."""
    text: str


@dataclass(frozen=True)
class RankView:
    """One agent process: the workload, or one torchrun rank."""

    rank: int | None
    pid: int
    state: str
    """``running`` or ``exited``."""
    throughput: float | None
    unit: str
    depth: int
    """Sum of the rank's executor values."""
    data_wait: float | None = None
    """Fraction of the last window the frontend waited for the next batch (DataLoader)."""
    exit_code: int | None = None


@dataclass(frozen=True)
class SyncSite:
    """A source line where the frontend calls something that waits for the device (``.item()``...)."""

    where: str
    """``file.py:LINE`` (prefixed ``rN`` for torchrun ranks)."""
    call: str
    count: int
    per_second: float
    """Rate over the last report window."""


@dataclass(frozen=True)
class StackFrame:
    """One Python frame, innermost last in :attr:`StackView.frames`."""

    function: str
    filename: str
    line: int


@dataclass(frozen=True)
class StackView:
    """The frontend thread's Python stack, from ``py-spy dump --json --nonblocking``."""

    pid: int
    thread: str
    frames: tuple[StackFrame, ...]
    """Outermost first, innermost last."""
    idle: bool
    """py-spy's own verdict that the thread is idle (waiting)."""
    t: float
    """``time.time()`` of the dump."""
    waiting_in: str = ""
    """What the innermost frames say the frontend waits in (synchronize, item, DataLoader...), or ''."""


@dataclass(frozen=True)
class Snapshot:
    """Everything the screen shows at one moment."""

    t: float
    experiment: str
    description: str
    mode: str
    """``async`` or ``sync``."""
    paused: bool
    interval: float
    child: ChildStatus
    cores: tuple[float, ...] = ()
    core_history: tuple[tuple[float, ...], ...] = ()
    threads: tuple[ThreadInfo, ...] = ()
    thread_groups: tuple[ThreadGroup, ...] = ()
    executors: tuple[ExecutorView, ...] = ()
    frontend_busy: tuple[float, ...] = ()
    """Frontend lane: fraction of each window the frontend was not blocked (running Python/ops)."""
    frontend_wait: tuple[float, ...] = ()
    """Frontend lane: fraction of each window the frontend was blocked (full queue or synchronize)."""
    overlap: tuple[float, ...] = ()
    """Fraction of each window in which two or more executors were busy at once."""
    throughput: float | None = None
    throughput_unit: str = "it/s"
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
    sample_t: float | None = None
    """``time.time()`` in the child when the newest child sample was made (latency measurements)."""
    target: str = ""
    """What runs: an experiment name, ``run train.py``, or ``attach PID``."""
    notice: str = ""
    """A standing message about what can be measured here (e.g. attach: no queue depth)."""
    ranks: tuple[RankView, ...] = ()
    """Agent processes (one for an experiment or a script; one per rank under torchrun)."""
    syncpoints: tuple[SyncSite, ...] = ()
    data_verdict: str = ""
    """``input-bound`` or ``compute-bound`` when a DataLoader is watched, else ''."""
    stack: StackView | None = None
    stack_status: str = ""
    """Why there is no stack (py-spy missing, ptrace not permitted...), or ''."""

    @property
    def ratio(self) -> float | None:
        """Measured async throughput / sync throughput, when both were measured."""
        by_mode = {m.mode: m for m in self.scoreboard}
        a, s = by_mode.get("async"), by_mode.get("sync")
        if a and s and a.throughput and s.throughput:
            return a.throughput / s.throughput
        return None


@dataclass(frozen=True)
class Experiment:
    """A built-in experiment, as the picker lists it."""

    name: str
    title: str
    description: str = field(default="")


class SessionLike(Protocol):
    """What the TUI needs from a session: snapshots to draw and commands to send.

    :class:`torchpar_top.session.session.Session` is the real one; tests inject fakes.
    """

    def start(self) -> None:
        """Start sampling and the child."""

    def close(self) -> None:
        """Stop everything; nothing may be left running."""

    def snapshot(self) -> Snapshot:
        """The current state."""

    def experiments(self) -> Sequence[Experiment]:
        """The built-in experiments."""

    def toggle_sync(self) -> None:
        """Switch the child between ASYNC and SYNC."""

    def change_threads(self, delta: int) -> None:
        """Change ``torch.set_num_threads`` in the child by ``delta``."""

    def switch_experiment(self, name: str) -> None:
        """Stop the running child and start experiment ``name``."""

    def set_paused(self, paused: bool) -> None:
        """Pause or resume sampling (the child keeps running)."""

    def restart(self) -> None:
        """Run the same target again (the user's script after it ended, or the experiment)."""

    def profile(self, seconds: float = 1.0) -> None:
        """Ask the child for a short torch.profiler window (exact per-stream queue length on CUDA)."""
