"""Ring buffers of everything measured, folded into a :class:`Snapshot` on demand.

Writers are the host-probe thread and the child reader thread; readers are the TUI's render timer
and headless output. One lock, taken by every method (nothing outside writes the store's state);
every buffer is bounded, so an hour at 10 Hz stays flat. The meaning of the numbers (verdicts, notes,
ranks) is computed here, once, with :mod:`.derive`.
"""

from __future__ import annotations

import itertools
import re
import signal
import statistics
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from torchpar_top.contract.messages import (
    Ack,
    ExecutorRow,
    Exit,
    Hello,
    Log,
    Message,
    Result,
    Sample,
    Scaling,
    SyncPoints,
    ThreadRole,
)
from torchpar_top.contract.snapshot import (
    ChildStatus,
    ExecutorView,
    GpuView,
    HostSample,
    LogLine,
    ModeStats,
    RankView,
    ResultRow,
    ScalingPoint,
    Snapshot,
    StackView,
    StepsView,
    Straggler,
    SyncSite,
    ThreadGroup,
    ThreadInfo,
)
from torchpar_top.contract.vocab import (
    CHILD_ENDED,
    LOG_LINE_KEEP,
    LOG_LINE_MAX,
    ChildState,
    Counted,
    ExecutorKind,
    LogSource,
    Mode,
    Quantity,
    Role,
    StepSource,
    ThroughputUnit,
)
from torchpar_top.model import derive, figures
from torchpar_top.model.snapshot import SHOWN_LOG, build
from torchpar_top.model.stacks import classify_wait, where
from torchpar_top.model.steps import StepsBook
from torchpar_top.model.threads import group

#: Samples kept of each executor's queue value (60 s at 10 Hz, 120 s at ``run``'s 5 Hz): the launch
#: queue's strip shows one per cell, as wide as the terminal lets it.
HISTORY = 600
#: Samples kept per core: the widest history the cores panel draws (256 cores must stay cheap to copy).
CORE_HISTORY = 30
#: Log lines kept.
LOG_LINES = 500
#: stderr lines kept to show when the child dies.
STDERR_TAIL = 12
#: Complete rounds of results kept for their median and range.
ROUNDS_KEPT = 50
#: Seconds over which the threads panel's CPU and wait shares, and a DataLoader's data wait, are
#: averaged: a share of one 0.1 s window jitters by several points (and the panel with it, repainted
#: every frame); the last second reads steadier, and *starved* and *input-bound* do not flap.
THREADS_MEAN_S = 1.0
#: Seconds between two readings of the child's threads (two ``/proc`` files per thread): their shares
#: are shown as means over :data:`THREADS_MEAN_S`, which two readings half a second apart give as well
#: as ten (the kernel's counters are cumulative); at the default 10 Hz this took most of the host
#: probes' CPU (``benchmarks/bench_tui.py --footprint``).
THREAD_SAMPLE_S = 0.5
#: A multi-node run's notice until its first rank says hello (``sources/live/targets.py``).
RENDEZVOUS_NOTICE = "waiting for rendezvous at "
#: Seconds over which the shown throughput is averaged where it is ops/s counted in the op counter's
#: slices (50 ms on, about once a second: ``usercode_sampling``): a window's figure comes from what the
#: last slices caught and swings tenfold with it (the header read 47 ops/s beside a scoreboard's 929;
#: a loop alternating 150 ms of matmuls with 150 ms of tiny ops read 0.03-0.08x the scoreboard per
#: window, 0.14-1.27x over 2 s, 0.71-0.99x over 10 s, p10-p90). Time-weighted over the last
#: THROUGHPUT_MEAN_S, as the scoreboard is over the run; ops counted whole (``--every-op``) over the last
#: RATE_MEAN_S.
THROUGHPUT_MEAN_S = 10.0
RATE_MEAN_S = 2.0


def series_length(interval: float) -> int:
    """Samples kept of each series read over the lanes' window (the frontend's, the overlaps, the
    timing flags, the throughput, each executor's busy, running and waiting shares): twice that window
    (:data:`~torchpar_top.model.figures.LANES_SECONDS`), 100 at the default 10 Hz.

    Why not more: every frame's snapshot copies every series whole, and each value copied is a float
    object touched (its reference count) in memory that other processes evicted since the last frame
    (measured, ``docs/benchmarks.md`` session 28: 15 series of 600 values cost 106 µs a frame warm and
    600 µs cold). Nothing reads further back than the window: the screen's lanes and rates read it, the
    headless object and the metrics the last value, a recording's line the few values new since the
    line before (its reader rebuilds the whole run from those)."""
    return 2 * figures.windows(interval)


def thread_every(interval: float) -> int:
    """Read the threads once every this many host samples (at least once per sample)."""
    return max(1, round(THREAD_SAMPLE_S / interval))


@dataclass
class _Executor:
    name: str
    kind: ExecutorKind
    quantity: Quantity
    emulated: bool
    rank: int | None
    capacity: int | None = None
    value: int = 0
    launched: int = 0
    completed: int = 0
    blocked: float | None = 0.0
    counts: Counted = Counted.ITEMS
    ready: int | None = None
    note: str | None = None
    keep: int = HISTORY
    """Samples kept of ``busy``, ``running`` and ``core_wait`` (:func:`series_length`)."""
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    busy: deque = field(init=False)
    running: deque = field(init=False)
    core_wait: deque = field(init=False)
    splits: bool = False
    """Whether any row split ``busy`` into running and waiting for a core (then ``running`` and
    ``core_wait`` are shown; a window without the split, such as the first, counts as all running)."""
    samples: int = 0
    """Rows added (:attr:`ExecutorView.samples`)."""

    def __post_init__(self) -> None:
        self.busy, self.running, self.core_wait = (deque(maxlen=self.keep) for _ in range(3))

    def add(self, row: ExecutorRow) -> None:
        """One sample's row of this executor."""
        self.capacity, self.value, self.counts, self.ready = row.capacity, row.value, row.counts, row.ready
        self.launched, self.completed, self.blocked = row.launched, row.completed, row.blocked
        self.note = row.note
        self.samples += 1
        self.history.append(row.value)
        self.busy.append(row.busy)
        self.splits = self.splits or row.running is not None
        self.running.append(row.busy if row.running is None else row.running)
        self.core_wait.append(row.core_wait or 0.0)

    def view(self) -> ExecutorView:
        """This executor as the snapshot shows it."""
        return ExecutorView(
            name=self.name,
            kind=self.kind,
            quantity=self.quantity,
            value=self.value,
            capacity=self.capacity,
            launched=self.launched,
            completed=self.completed,
            emulated=self.emulated,
            history=tuple(self.history),
            busy=tuple(self.busy),
            blocked=self.blocked,
            rank=self.rank,
            counts=self.counts,
            ready=self.ready,
            running=tuple(self.running) if self.splits else (),
            core_wait=tuple(self.core_wait) if self.splits else (),
            note=self.note,
            samples=self.samples,
        )


@dataclass
class _Rounds:
    """Results reported in rounds: the rounds still open, and the complete ones (the latest last)."""

    open: dict = field(default_factory=dict)  # round -> {label: (value, unit)}
    done: deque = field(default_factory=lambda: deque(maxlen=ROUNDS_KEPT))  # (round, {label: (value, unit)})

    def add(self, msg: Result) -> None:
        """One result of round ``msg.round``; the round is complete when ``msg.closes_round``."""
        rows = self.open.setdefault(msg.round, {})
        rows[msg.label] = (msg.value, msg.unit)
        if msg.closes_round:
            self.done.append((msg.round, self.open.pop(msg.round)))
            for stale in [r for r in self.open if r < msg.round]:
                del self.open[stale]  # a round that never closed (stopped mid-way) never will
        while len(self.open) > 4:  # bounded even if rounds never close
            del self.open[min(self.open)]

    def rows(self) -> list[ResultRow]:
        """The latest complete round's rows, each with the median and range over the kept rounds."""
        if not self.done:
            return []
        number, latest = self.done[-1]
        out = []
        for label, (value, unit) in latest.items():
            values = sorted(r[label][0] for _, r in self.done if label in r)
            out.append(
                ResultRow(
                    label, value, unit, number, statistics.median(values), values[0], values[-1], len(values)
                )
            )
        return out


#: torchrun's line for the first rank that failed (torch/distributed/elastic/multiprocessing/api.py):
#: ``failed (exitcode: -6) local_rank: 1 (pid: 26021) of binary: ...``: its pid is the agent's hello pid.
TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: \d+ \(pid: (?P<pid>\d+)\)")


KILLED_BY = "killed by signal"
"""How the workload's status line says that a signal ended it (``workload killed by signal 9``; written by
the live session, read by the verdict, which then advises looking for what sent it)."""

ENDED_BY = "was ended by"
"""How a rank's :func:`exit_note` says that a signal other than SIGABRT ended it (``rank 1 was ended by
SIGKILL at interpreter exit``); the verdict reads it as :data:`KILLED_BY`."""


def exit_note(who: str, reported: tuple[int, str] | None, exit_code: int) -> str:
    """``rank 1 aborted (SIGABRT) at interpreter exit, after its work had finished``: the process died of
    a signal after its agent reported that the user's code returned with 0 (Gloo's threads outliving the
    interpreter abort it so, PyTorch #179291); '' otherwise."""
    if reported != (0, "") or exit_code >= 0:  # not after a stop by torchpar-top, nor an error
        return ""
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    how = f"aborted ({name})" if name == "SIGABRT" else f"{ENDED_BY} {name}"
    return f"{who} {how} at interpreter exit, after its work had finished"


def failure_note(who: str, reported: tuple[int, str]) -> str:
    """``rank 1 failed first: RuntimeError: CUDA out of memory...``: the first rank whose code ended
    with an error, and the exception's last line its agent reported (its peers' errors follow from it:
    ``Connection closed by peer``)."""
    status, reason = reported
    return f"{who} failed first: {first_line(reason)}" if reason else f"{who} failed first (status {status})"


def first_line(reason: str) -> str:
    """The first line of an exception's text (torch's are often several, the rest is in the log)."""
    lines = reason.strip().splitlines()
    return lines[0] if lines else ""


@dataclass
class _Source:
    """One agent connection: the workload, or one torchrun rank."""

    number: int
    pid: int | None = None
    rank: int | None = None
    state: ChildState = ChildState.RUNNING
    exit_code: int | None = None
    throughput: float | None = None
    unit: ThroughputUnit = ThroughputUnit.ITEMS
    depth: int = 0
    data_wait: float | None = None
    """Mean share of the last second's windows the frontend waited for its next batch."""
    data_waits: deque = field(default_factory=lambda: deque(maxlen=10))
    core_wait: float | None = None
    """Mean share of the last second's windows the frontend waited for a core (None: not measured)."""
    core_waits: deque = field(default_factory=lambda: deque(maxlen=10))
    has_dataloader: bool = False
    sites: dict = field(default_factory=dict)  # (where, call) -> (count, per_second)
    sites_t: float | None = None
    """When the last sync-point counts arrived (monotonic), or the seconds the op counter had covered
    then, when counts are seen only in slices (:attr:`sites_sampled`)."""
    sites_sampled: bool = False
    op_coverage: float | None = None
    reported: tuple[int, str] | None = None
    """The status and reason its agent reported in an ``exit`` message: taken only once the process ended."""
    lost: bool = False
    """Its connection closed while its process ran on: nothing more comes from it."""
    where: tuple[int | None, int | None, str] = (None, None, "")
    """Its hello's ``local_rank``, ``node_rank`` and ``hostname``."""
    signal_code: int | None = None
    """The status torchrun reported for this rank (``-6``: killed by SIGABRT); ranks are not our children."""
    note: str = ""
    """:func:`exit_note`, or :func:`failure_note` for the rank that failed first, once it applies."""
    at: str = ""
    """Where its frontend was at its latest stack (:func:`~torchpar_top.model.stacks.where`)."""
    stalled_at: str = ""
    """Its :attr:`at` as last seen while it was stalled (said where a stop ended its stall)."""
    failed: int | None = None
    """The order in which its agent reported a failure (a non-zero status), among all the agents: the
    first to fail brought the others down (torchrun stops them, or they lose their peer)."""
    _without_recent: tuple[StepsView, StepsView] | None = field(default=None, repr=False)
    """The last :meth:`without_recent`: the steps view it was given, and what it gave."""

    @property
    def who(self) -> str:
        """``the workload`` or ``rank N``, for log lines."""
        return "the workload" if self.rank is None else f"rank {self.rank}"

    def view(self, steps: StepsView | None = None, at: str | None = None) -> RankView:
        """This agent as the rank table shows it, with its DataLoader verdict; with its ``steps`` (then its
        throughput is their rate) and where it is ``at`` when the caller knows better."""
        return RankView(
            self.rank,
            self.pid or 0,
            self.state,
            self.throughput if steps is None else steps.per_second,
            self.unit if steps is None else ThroughputUnit.STEPS,
            self.depth,
            self.data_wait,
            self.exit_code,
            derive.data_verdict(self.data_wait, self.has_dataloader),
            local_rank=self.where[0],
            node_rank=self.where[1],
            hostname=self.where[2],
            note=self.note,
            core_wait=self.core_wait,
            at=self.at if at is None else at,
            steps=steps,
        )

    def without_recent(self, steps: StepsView) -> StepsView:
        """``steps`` without its recent steps (the snapshot's own ``steps``: the ranks keep them), the same
        object while ``steps`` is (a steps view is kept until something new comes)."""
        kept = self._without_recent
        if kept is None or kept[0] is not steps:
            kept = self._without_recent = (steps, replace(steps, recent=()))
        return kept[1]


@dataclass
class _ModeAccumulator:
    seconds: float = 0.0
    items: float = 0.0
    depth: float = 0.0
    wait: float = 0.0

    def stats(self, mode: Mode) -> ModeStats:
        s = self.seconds
        return ModeStats(
            mode=mode,
            seconds=s,
            throughput=self.items / s if s else None,
            mean_depth=self.depth / s if s else None,
            frontend_wait=self.wait / s if s else None,
        )


def _recent_mean(window: deque, value: float | None) -> float | None:
    """``value`` added to ``window`` (the last second's readings), and their mean; a reading that did
    not say (None) empties the window and is None."""
    if value is None:
        window.clear()
        return None
    window.append(value)
    return sum(window) / len(window)


def interop_pools(
    threads: tuple[ThreadInfo, ...], sizes: Mapping[int, int], started: Mapping[int, int] | None = None
) -> tuple[ThreadInfo, ...]:
    """The inter-op pool's threads told from the OpenMP workers they start.

    Threads are named by the kernel after the thread that created them, so the OpenMP team an inter-op
    thread starts for its first parallel op is named ``PTThreadPool`` too: the inter-op experiment (2
    inter-op threads, 2 intra-op) showed ``inter-op pool ×4``. torch starts the whole pool at once, before
    any of them runs an op, so in a process whose pool has ``n`` threads (``sizes``, from its hello) the
    ``n`` oldest threads named so are the pool, the others intra-op workers. Age is the start time the
    kernel keeps (``started``: tid -> clock ticks, :attr:`HostSample.started`), then the thread id among
    threads started in the same tick (or all, where start times are not known): ids alone would misread a
    pool whose ids wrapped around past the kernel's maximum."""
    age = started or {}
    pooled: dict[int, list[tuple[int, int]]] = {}
    for t in threads:
        if t.role == Role.INTEROP and t.pid is not None and t.pid in sizes:
            pooled.setdefault(t.pid, []).append((age.get(t.tid, 0), t.tid))
    workers = {tid for pid, aged in pooled.items() for _, tid in sorted(aged)[sizes[pid] :]}
    if not workers:
        return threads
    return tuple(replace(t, role=Role.INTRAOP) if t.tid in workers else t for t in threads)


def _mean_threads(window: deque) -> tuple[ThreadInfo, ...]:
    """The newest reading's threads with CPU and wait shares averaged over ``window`` (the readings of
    the last :data:`THREADS_MEAN_S`; a thread counts from its first reading, which reads 0)."""
    newest = window[-1]
    if len(window) == 1:
        return newest
    sums: dict[int, list[float]] = {}
    for reading in list(window)[:-1]:
        for t in reading:
            acc = sums.get(t.tid)
            if acc is None:
                sums[t.tid] = [t.cpu_percent, t.wait_percent, 1.0]
            else:
                acc[0] += t.cpu_percent
                acc[1] += t.wait_percent
                acc[2] += 1.0
    out = []
    for t in newest:
        acc = sums.get(t.tid)
        if acc is None:
            out.append(t)
            continue
        n = acc[2] + 1.0
        out.append(
            replace(t, cpu_percent=(acc[0] + t.cpu_percent) / n, wait_percent=(acc[1] + t.wait_percent) / n)
        )
    return tuple(out)


class SessionStore:
    """The measured state of one session."""

    def __init__(self, experiment: str, description: str = "", interval: float = 0.1) -> None:
        self._lock = threading.Lock()
        self.interval = interval
        self._log: deque[LogLine] = deque(maxlen=LOG_LINES)
        self._partial: dict[LogSource, LogLine] = {}
        self._seq = 0
        self._log_view: tuple[int, tuple[LogLine, ...]] = (0, ())
        """The log as the last snapshot carried it, with the :attr:`_seq` it was copied at: a steady run
        adds no line for many frames, and a frame's copy of up to ``SHOWN_LOG`` lines touches each."""
        self._paused = False
        self._cores: tuple[float, ...] = ()
        self._core_history: list[deque] = []
        self._host_samples = 0
        """Host readings appended to the core histories (:attr:`Snapshot.host_samples`)."""
        self._samples = 0
        """Primary samples appended to the top-level series (:attr:`Snapshot.samples`): counted on across
        a reset, which empties the series (a count that only grows says how many values are new)."""
        self._threads: tuple = ()
        self._gpus: tuple[GpuView, ...] = ()
        self._gpu_status = ""
        self._version = 0
        self._failures = itertools.count()
        """Numbers the agents' failure reports in the order they came (:attr:`_Source.failed`)."""
        self._monitor_cpu: float | None = None
        self.stacks = True
        """Whether the agents' frontend stacks are shown (``--no-stacks`` turns them off)."""
        self.reset(experiment, description)

    @property
    def version(self) -> int:
        """Grows with every change to what :meth:`snapshot` returns (a screen may skip a frame)."""
        return self._version

    def reset(self, experiment: str, description: str = "") -> None:
        """Forget the previous child's measurements (a new experiment starts)."""
        with self._lock:
            self._version += 1
            self.experiment, self.description = experiment, description
            self._roles: dict[int, ThreadRole] = {}
            self._executors: dict[tuple[int, str], _Executor] = {}  # (rank or -1, name)
            keep = self._series = series_length(self.interval)
            self._frontend_busy: deque = deque(maxlen=keep)
            self._frontend_wait: deque = deque(maxlen=keep)
            self._frontend_core_wait: deque = deque(maxlen=keep)
            self._frontend_split = False
            self._overlap: deque = deque(maxlen=keep)
            self._overlap_in_progress: deque = deque(maxlen=keep)
            self._overlap_high: deque = deque(maxlen=keep)
            self._timing: deque = deque(maxlen=keep)
            self._throughput: deque = deque(maxlen=keep)
            self._unit = ThroughputUnit.ITEMS
            self._last_throughput: float | None = None
            self._mode = Mode.ASYNC
            self._modes = {Mode.ASYNC: _ModeAccumulator(), Mode.SYNC: _ModeAccumulator()}
            self._prev_mode: Mode | None = None
            self._working = False
            """Whether any window so far did work (the scoreboard counts none before it)."""
            self._num_threads: int | None = None
            self._interop_threads: int | None = None
            self._results: dict[str, ResultRow] = {}
            self._rounds = _Rounds()
            self._scaling: dict[int, ScalingPoint] = {}
            self._child = ChildStatus(pid=None, state=ChildState.STARTING)
            self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
            self._sample_t: float | None = None
            self._threads = ()
            self._groups: tuple[tuple[ThreadInfo, ...], tuple[ThreadGroup, ...]] = ((), ())
            self._thread_window: deque = deque(
                maxlen=max(1, round(THREADS_MEAN_S / (self.interval * thread_every(self.interval))))
            )
            self._sources: dict[int, _Source] = {}
            self._interop_by_pid: dict[int, int] = {}
            """Each agent process's ``torch.get_num_interop_threads()`` (its hello), by pid."""
            self._target = experiment
            self._notice = ""
            self._stack: StackView | None = None
            self._steps = StepsBook()
            self._recent_tp: deque = deque(maxlen=max(1, round(THROUGHPUT_MEAN_S / self.interval)))
            self._step_count = 0
            self._step_source: StepSource | None = None
            """What marks the primary's steps (the scoreboard starts again when it changes)."""

    # -- writers ---------------------------------------------------------------------------------

    def add_log(self, source: LogSource, text: str, partial: bool = False) -> None:
        """Append a line to the log pane (kept while paused: nothing is lost). One longer than
        :data:`LOG_LINE_MAX` characters is cut to its first :data:`LOG_LINE_KEEP` and a marker that says how
        many were left out. ``partial``: the latest state of a line still being written (a ``\r``
        progress bar), shown after the log until the line ends (the next line from ``source``)."""
        if len(text) > LOG_LINE_MAX:
            text = f"{text[:LOG_LINE_KEEP]} … [{len(text) - LOG_LINE_KEEP} more characters left out]"
        with self._lock:
            self._version += 1
            if partial:
                self._partial[LogSource(source)] = LogLine(0, LogSource(source), text)
                return
            self._partial.pop(LogSource(source), None)
            failed = TORCHRUN_FAILED.search(text) if source == LogSource.STDERR else None
            self._seq += 1
            self._log.append(LogLine(self._seq, LogSource(source), text))
            if source == LogSource.STDERR:
                self._stderr.append(text)
        if failed is not None:
            self._on_rank_status(int(failed["pid"]), int(failed["code"]))

    def _on_rank_status(self, pid: int, code: int) -> None:
        """torchrun said how the rank with ``pid`` ended (its ``failed (exitcode: -6) ... (pid: P)`` line):
        the status its agent could not report when a signal came after it reported."""
        with self._lock:
            src = next((s for s in self._sources.values() if s.pid == pid), None)
            if src is None or code >= 0:
                return
            self._version += 1
            src.signal_code = code
            if src.state == ChildState.EXITED:
                src.exit_code = code
        self._settle_note(src)

    def _settle_note(self, src: _Source) -> None:
        """Say once, in the log and on the rank, that it died of a signal after its code had returned; or,
        on the rank only (its error is in the log already), that its code failed first of all ranks."""
        with self._lock:
            note = failure = ""
            if not src.note and src.exit_code is not None:
                note = exit_note(src.who, src.reported, src.exit_code)
                failure = "" if note else self._first_failure(src)
            if note or failure:
                self._version += 1
                src.note = note or failure
        if note:
            self.add_log(LogSource.APP, note)

    def _first_failure(self, src: _Source) -> str:
        """:func:`failure_note` where ``src`` is a rank whose agent reported a failure before any other
        agent did and whose process ended with that status; the exception's line where ``src`` is the one
        workload (``_pickle.UnpicklingError: Weights only load failed...``); '' otherwise."""
        reported = src.reported
        if src.failed is None or reported is None or src.exit_code != reported[0]:
            return ""
        if src.rank is None:  # the one workload: its exception's line, for the status line and the report
            return first_line(reported[1])
        if any(s.failed is not None and s.failed < src.failed for s in self._sources.values()):
            return ""
        return failure_note(src.who, reported)

    def exit_notes(self) -> list[str]:
        """Every agent's :func:`exit_note` so far (for the workload's status line and the verdict)."""
        with self._lock:
            return [s.note for s in self._sources.values() if s.note]

    def set_target(self, label: str, notice: str = "") -> None:
        """What runs (``run train.py``, ``attach 1234``...) and a standing notice about it."""
        with self._lock:
            self._version += 1
            self._target, self._notice = label, notice

    def set_paused(self, paused: bool) -> None:
        """Pause or resume taking samples (log lines are kept either way)."""
        with self._lock:
            self._version += 1
            self._paused = paused

    def threads_requested(self, n: int) -> None:
        """The thread count asked of the child (shown until its next sample says what it uses)."""
        with self._lock:
            self._version += 1
            self._num_threads = n

    @property
    def num_threads(self) -> int | None:
        """The child's intra-op thread count as last reported (or requested)."""
        with self._lock:
            return self._num_threads

    @property
    def mode(self) -> Mode:
        """The primary agent's mode as last reported."""
        with self._lock:
            return self._mode

    @property
    def paused(self) -> bool:
        """Whether sampling is paused."""
        with self._lock:
            return self._paused

    def roles(self) -> dict[int, ThreadRole]:
        """The agents' word on their threads, by tid (for the thread sampler)."""
        with self._lock:
            return dict(self._roles)

    def on_host(self, sample: HostSample) -> None:
        """A reading of the host probes."""
        with self._lock:
            self._version += 1
            if self._paused:
                return
            if len(self._core_history) != len(sample.cores):
                self._core_history = [deque(maxlen=CORE_HISTORY) for _ in sample.cores]
            for hist, load in zip(self._core_history, sample.cores, strict=True):
                hist.append(load)
            self._host_samples += 1
            self._cores = sample.cores
            if sample.threads is not None:
                self._thread_window.append(
                    interop_pools(sample.threads, self._interop_by_pid, sample.started)
                )
                self._threads = _mean_threads(self._thread_window)

    def on_monitor(self, share: float) -> None:
        """The monitor's own CPU over the last second, as a share of one core."""
        with self._lock:
            self._version += 1
            self._monitor_cpu = share

    def on_gpus(self, gpus: tuple[GpuView, ...], status: str) -> None:
        """A reading of the GPU probe (views carry their own history)."""
        with self._lock:
            self._version += 1
            if not self._paused:
                self._gpus, self._gpu_status = gpus, status

    def on_child(self, child: ChildStatus) -> None:
        """The child's state changed."""
        with self._lock:
            self._version += 1
            if child.state in CHILD_ENDED and not child.last_stderr:
                child = ChildStatus(
                    child.pid, child.state, child.exit_code, child.message, tuple(self._stderr)
                )
            self._child = child

    def child_state(self) -> ChildState:
        """The child's state now (``running``, ``exited``...)."""
        with self._lock:
            return self._child.state

    def on_message(self, msg: Message, source: int = 0) -> None:
        """A validated protocol message from agent connection ``source``."""
        if isinstance(msg, Sample):
            self._on_sample(msg, source)
        elif isinstance(msg, Hello):
            self._on_hello(msg, source)
        elif isinstance(msg, SyncPoints):
            self._on_syncpoints(msg, source)
        elif isinstance(msg, Result):
            with self._lock:
                self._version += 1
                if msg.round is None:
                    self._results[msg.label] = ResultRow(msg.label, msg.value, msg.unit)
                else:
                    self._rounds.add(msg)
        elif isinstance(msg, Scaling):
            with self._lock:
                self._version += 1
                self._scaling[msg.threads] = ScalingPoint(msg.threads, msg.gflops, msg.samples)
        elif isinstance(msg, Log):
            self.add_log(LogSource.CHILD, msg.text)
        elif isinstance(msg, Ack):
            self.add_log(LogSource.CHILD, f"{'ok' if msg.ok else 'refused'}: {msg.detail}")
        elif isinstance(msg, Exit):
            with self._lock:  # a report, not a fact: shown once the process has ended (on_source_closed)
                self._version += 1
                src = self._source(source)
                src.reported = (msg.status, msg.reason)
                if msg.status != 0 and src.failed is None:
                    src.failed = next(self._failures)

    def _on_hello(self, msg: Hello, source: int) -> None:
        """An agent introduced itself; a second hello on the same connection is ignored."""
        with self._lock:
            self._version += 1
            src = self._source(source)
            if src.pid is not None:
                second = True
            else:
                second = False
                src.pid, src.rank = msg.pid, msg.rank
                src.where = (msg.local_rank, msg.node_rank, msg.hostname)
                if self._notice.startswith(RENDEZVOUS_NOTICE):
                    self._notice = ""  # a rank said hello: the rendezvous is done
                self._num_threads = msg.num_threads
                self._interop_threads = msg.interop_threads
                self._interop_by_pid[msg.pid] = msg.interop_threads
                self._roles.update({r.tid: r for r in msg.roles})
        if second:
            self.add_log(LogSource.PROTOCOL, f"a second hello on connection {source} ignored")
            return
        rank = "" if msg.rank is None else f"rank {msg.rank} "
        self.add_log(
            LogSource.CHILD,
            f"{rank}pid {msg.pid}: {msg.experiment} on {msg.device}, torch "
            f"{msg.torch}, {msg.num_threads} intra-op / "
            f"{msg.interop_threads} inter-op threads",
        )

    def on_source_closed(self, source: int, exit_code: int | None = None) -> None:
        """The process of agent connection ``source`` has ended (the workload, or a rank).

        ``exit_code`` is the process's status where we know it (our own child, from ``wait``): it wins
        over any report. A torchrun rank is not our child, so its status is the one its agent reported
        in an ``exit`` message, if it got to send one (a rank killed by a signal cannot) and did not run
        on after its connection closed. The log says how a rank's code ended when the report agrees (our own
        child's exit is said by the session, with the report's reason: once, not twice)."""
        with self._lock:
            self._version += 1
            src = self._sources.get(source)
            if src is None or src.state == ChildState.EXITED:
                return
            src.state = ChildState.EXITED
            reported = None if src.lost else src.reported
            src.exit_code = exit_code if exit_code is not None else reported[0] if reported else None
            if exit_code is None and src.signal_code is not None:
                src.exit_code = src.signal_code  # torchrun's word on how the rank ended came first
            if src.lost and source == 0:
                self._notice = ""  # it no longer runs on
            who = src.who
        if reported is not None and reported[0] == src.exit_code and exit_code is None:
            reason = f": {reported[1]}" if reported[1] else ""
            self.add_log(LogSource.CHILD, f"{who}'s code ended with status {reported[0]}{reason}")
        self._settle_note(src)

    def on_source_lost(self, source: int) -> bool:
        """Agent connection ``source`` closed while its process runs on (the workload closed the
        descriptor): say that monitoring is lost. Not after the agent reported its exit (the process is
        then only ending). Returns whether it was lost."""
        with self._lock:
            src = self._sources.get(source)
            if src is None or src.state != ChildState.RUNNING or src.reported is not None or src.lost:
                return False
            self._version += 1
            src.lost = True
            text = (
                f"monitoring lost: {src.who} (pid {src.pid}) closed its connection to torchpar-top and "
                "runs on; queues, lanes and throughput stop here (cores, threads and stacks go on)"
            )
            if source == 0:
                self._notice = text
        self.add_log(LogSource.APP, text)
        return True

    def source_pid(self, source: int) -> int | None:
        """The pid agent connection ``source`` said hello with, if it did."""
        with self._lock:
            src = self._sources.get(source)
            return None if src is None else src.pid

    def _source(self, number: int) -> _Source:
        src = self._sources.get(number)
        if src is None:
            src = self._sources[number] = _Source(number)
            src.data_waits = deque(maxlen=max(1, round(THREADS_MEAN_S / self.interval)))
            src.core_waits = deque(maxlen=max(1, round(THREADS_MEAN_S / self.interval)))
        return src

    def _primary(self) -> int:
        """The source whose frontend, lanes and scoreboard are shown: the single child, or the lowest
        rank (:func:`figures.primary_rank`)."""
        rank = figures.primary_rank(s.rank for s in self._sources.values())
        ranked = sorted(s.number for s in self._sources.values() if s.rank == rank)
        return ranked[0] if ranked else 0

    def _on_syncpoints(self, msg: SyncPoints, source: int) -> None:
        # Rates are counts over the time they could be seen: all of it, or the op counter's slices.
        now = time.monotonic() if msg.covered is None else msg.covered
        with self._lock:
            self._version += 1
            src = self._source(source)
            if src.sites_sampled != (msg.covered is not None):
                src.sites_t = None  # the clock changed: no rate from this pair of reports
            src.sites_sampled = msg.covered is not None
            dt = now - src.sites_t if src.sites_t is not None else None
            sites = {}
            for site in msg.sites:
                key = (site.where, site.call)
                before = src.sites.get(key, (0, 0.0))[0]
                rate = (site.count - before) / dt if dt else 0.0
                sites[key] = (site.count, max(0.0, rate))
            src.sites, src.sites_t = sites, now

    def _on_sample(self, msg: Sample, source: int = 0) -> None:
        with self._lock:
            self._version += 1
            self._roles.update({r.tid: r for r in msg.roles})
            src = self._source(source)
            src.throughput, src.unit = msg.throughput, msg.unit
            # the verdict and the figures are over the last second: one 0.1 s window flaps
            src.data_wait = _recent_mean(src.data_waits, msg.data_wait)
            src.core_wait = _recent_mean(src.core_waits, msg.frontend.core_wait)
            src.depth = figures.total_depth(msg.executors)
            src.has_dataloader = any(row.kind == ExecutorKind.DATALOADER for row in msg.executors)
            src.op_coverage = msg.op_coverage
            primary = source == self._primary()
            done = msg.throughput * msg.window
            if primary and msg.steps is None and msg.unit == ThroughputUnit.STEPS:
                # steps the agent counted but holds back (a source a better one may still replace): counted
                # here once, so that the sample that releases them (the count so far) adds only its own.
                # A 0.24 s run of 600 steps had the scoreboard read 864 steps in its one steady window.
                self._step_count += round(done)
            if primary and msg.steps is not None:  # steps found: the figure is steps, whatever the agent's
                if self._unit == ThroughputUnit.STEPS:
                    done = float(max(0, msg.steps.count - self._step_count))
                else:  # the first steps: those that ended in this window (the count holds all until now)
                    done = float(sum(1 for end in msg.steps.ends if end > msg.t - msg.window))
                self._step_count = msg.steps.count
            if primary:
                self._mode = msg.mode
                self._num_threads = msg.num_threads
                unit = ThroughputUnit.STEPS if msg.steps is not None else msg.unit
                # a better step source taking over the count (a late first optimizer step) makes the
                # steps other things from then on, as a new unit does: 10 backward calls in 0.2 s had a
                # scoreboard read 5.61 steps/s beside optimizer steps at 4.50
                was = self._step_source
                if msg.steps is not None:
                    self._step_source = msg.steps.source
                if unit != self._unit or (was is not None and self._step_source != was):
                    self._new_unit(unit)
                self._sample_t = msg.t
            if self._paused:
                return
            self._steps.add(source, msg.t, msg.window, msg.steps, msg.memory, msg.frontend.core_wait)
            for row in msg.executors:
                key = (-1 if src.rank is None else src.rank, row.name)
                ex = self._executors.get(key)
                if ex is None:
                    ex = self._executors[key] = _Executor(
                        row.name, row.kind, row.quantity, row.emulated, src.rank, keep=self._series
                    )
                ex.add(row)
            stack = msg.stack if self.stacks else None
            wait = classify_wait(stack.frames) if stack is not None else None
            if stack is not None and wait is not None:  # every rank's: said where it stopped stepping
                src.at = where(stack.frames, wait, stack.idle)
            if not primary:
                return
            if stack is not None and wait is not None:
                self._stack = StackView(
                    src.pid or 0, "MainThread", stack.frames, stack.idle, msg.t, wait, source="agent"
                )
            self._samples += 1
            self._timing.append(msg.timing)
            self._frontend_busy.append(msg.frontend.busy)
            self._frontend_wait.append(msg.frontend.wait)
            self._frontend_split = self._frontend_split or msg.frontend.core_wait is not None
            self._frontend_core_wait.append(msg.frontend.core_wait or 0.0)
            self._overlap.append(msg.overlap)
            self._overlap_high.append(msg.overlap if msg.overlap_high is None else msg.overlap_high)
            self._overlap_in_progress.append(
                msg.overlap if msg.overlap_in_progress is None else msg.overlap_in_progress
            )
            self._throughput.append(done / msg.window)
            covered = None if msg.op_coverage is None else msg.op_coverage * msg.window
            self._recent_tp.append((msg.window, done, covered))
            self._last_throughput = self._mean_ops() if self._unit == "ops/s" else done / msg.window
            # The first window after a mode change straddles both modes: count it in neither. After a
            # switch to SYNC, the backlog launched in ASYNC drains first (the agent says so): that is
            # neither mode's steady state either, nor is a timing round that paused the live loop. Nor
            # is the start, up to and with the first window in which work was done (CUDA's and CUPTI's
            # start, the async experiment's fitting on a GPU): on an H200 the scoreboard read ASYNC at
            # 0.76-0.84x SYNC where the profiler's windows of the same runs showed the GPU finish 1.42x
            # the items; had the loop run at its window's rate all along, 6 of ASYNC's 9.15 s held no work.
            steady = self._working and self._prev_mode == msg.mode
            if steady and not msg.draining and not msg.timing:
                acc, w = self._modes[msg.mode], msg.window
                acc.seconds += w
                acc.items += done
                acc.depth += src.depth * w
                acc.wait += msg.frontend.wait * w
            self._working = self._working or done > 0
            self._prev_mode = msg.mode

    def _new_unit(self, unit: ThroughputUnit) -> None:
        """The figure changed unit (the workload's first steps after sampled ops/s), or the steps' source
        (a late first optimizer step after backward calls were counted): the scoreboard, the
        throughput history and its mean start again, in the new unit; the window that changed it counts
        in neither mode (it straddles the two figures). Mixing them had a scoreboard read 1,715 "steps/s"
        beside a header's 45: the ops counted before the first step were still in its sums."""
        self._unit = unit
        self._modes = {Mode.ASYNC: _ModeAccumulator(), Mode.SYNC: _ModeAccumulator()}
        self._prev_mode = None
        self._throughput.clear()
        self._recent_tp.clear()

    def _mean_ops(self) -> float:
        """Ops/s, time-weighted over the last :data:`THROUGHPUT_MEAN_S` where ops are counted in slices,
        else over the last RATE_MEAN_S."""
        recent = list(self._recent_tp)
        if recent[-1][2] is None:  # every op counted: the last seconds are enough
            recent = recent[-max(1, round(RATE_MEAN_S / self.interval)) :]
        return sum(d for _, d, _ in recent) / sum(w for w, _, _ in recent)

    # -- reader ----------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything the screen shows, now."""
        with self._lock:
            executors = tuple(e.view() for _, e in sorted(self._executors.items()))
            if self._groups[0] is not self._threads:  # threads are read twice a second, frames come at 10 Hz
                self._groups = (self._threads, group(self._threads))
            groups = self._groups[1]
            ranks, steps, straggler, memory = self._step_views()
            primary = self._sources.get(self._primary())
            return build(
                t=time.time(),
                experiment=self.experiment,
                description=derive.arguments(self.description, self._target),
                mode=self._mode,
                paused=self._paused,
                interval=self.interval,
                child=self._child,
                cores=self._cores,
                core_history=tuple(tuple(h) for h in self._core_history),
                threads=self._threads,
                thread_groups=groups,
                executors=executors,
                frontend_busy=tuple(self._frontend_busy),
                frontend_wait=tuple(self._frontend_wait),
                frontend_core_wait=tuple(self._frontend_core_wait) if self._frontend_split else (),
                overlap=tuple(self._overlap),
                overlap_high=tuple(self._overlap_high),
                overlap_in_progress=tuple(self._overlap_in_progress),
                timing=tuple(self._timing),
                throughput=self._last_throughput if steps is None else steps.per_second,
                throughput_unit=self._unit,
                throughput_history=tuple(self._throughput),
                num_threads=self._num_threads,
                interop_threads=self._interop_threads,
                scoreboard=tuple(acc.stats(mode) for mode, acc in self._modes.items()),
                results=(*self._results.values(), *self._rounds.rows()),
                scaling=tuple(sorted(self._scaling.values(), key=lambda p: p.threads)),
                gpus=self._gpus,
                gpu_status=self._gpu_status,
                log=self._log_lines(),
                log_partial=tuple(self._partial.values()),
                sample_t=self._sample_t,
                target=self._target,
                notice=self._notice,
                ranks=ranks,
                syncpoints=self._syncpoints(),
                data_verdict=None if primary is None else primary.view().data_verdict,
                attached=self._child.state == ChildState.ATTACHED,
                starved=derive.starved(groups),
                frontend_hot_in_sync=derive.frontend_hot_in_sync(self._mode, groups, executors),
                op_coverage=None if primary is None else primary.op_coverage,
                stack=self._stack,
                monitor_cpu=self._monitor_cpu,
                steps=steps,
                straggler=straggler,
                straggler_windows=self._steps.judged,
                memory=memory,
                samples=self._samples,
                host_samples=self._host_samples,
            )

    def _log_lines(self) -> tuple[LogLine, ...]:
        """The log's last lines as a snapshot carries them (``SHOWN_LOG``), copied again only after a
        line was added (:attr:`_log_view`)."""
        if self._log_view[0] != self._seq:
            self._log_view = (self._seq, tuple(self._log)[-SHOWN_LOG:])
        return self._log_view[1]

    def _step_views(self) -> tuple[tuple[RankView, ...], StepsView | None, Straggler | None, tuple]:
        """The ranks (each with its steps, rated over the same span as the others'), the primary's
        steps, the straggler over the run, and each rank's memory."""
        live = [
            s
            for s in sorted(self._sources.values(), key=lambda s: (s.rank or 0, s.number))
            if s.pid is not None
        ]
        running = {s.number for s in live if s.state == ChildState.RUNNING}
        rates = self._steps.rates(running)
        ranks, memory, primary = [], [], self._primary()
        steps: StepsView | None = None
        for s in live:
            book = self._steps.ranks.get(s.number)
            sv, at = None, s.at
            if book is not None:
                sv = book.view(rates.get(s.number))
                if (
                    sv is not None
                    and sv.stalled is None
                    and s.state != ChildState.RUNNING
                    and s.reported != (0, "")
                    and book.closed_stall is not None
                ):  # its last step closed only as the run was stopped, after a stall: still a hang
                    sv = replace(sv, stalled=book.closed_stall)
                    at = s.stalled_at or at
                if sv is not None and sv.stalled is not None:  # no step for ten of its steps: 0/s now
                    if s.state == ChildState.RUNNING:
                        sv = replace(sv, per_second=0.0)
                        s.stalled_at = at
                    elif s.reported == (0, ""):  # its code returned: what came after its steps was not a hang
                        sv = replace(sv, stalled=None)
                if sv is not None and s.number == primary:
                    steps = s.without_recent(sv)  # the ranks keep them
                mem = book.memory_view(s.rank)
                if mem is not None:
                    memory.append(mem)
            ranks.append(s.view(sv, at))
        numbers = {s.number: s.rank if s.rank is not None else s.number for s in live}
        return tuple(ranks), steps, self._steps.straggler(numbers, running), tuple(memory)

    def _syncpoints(self) -> tuple[SyncSite, ...]:
        """Every agent's sync sites (``build`` puts them in order)."""
        return tuple(
            SyncSite(where, call, count, rate, src.rank, src.sites_sampled)
            for src in self._sources.values()
            for (where, call), (count, rate) in src.sites.items()
        )
