"""The one wire protocol between the agent in the workload (child) and torchpar-top (parent).

JSON lines over an inherited Unix socketpair, or a Unix socket in a private 0700 directory for torchrun
ranks. Each line is one message: ``{"v": VERSION, "type": TYPE, ...fields}``, built with
:meth:`Message.to_json` and read back with :func:`decode`, which validates every field (types and
bounds, see :mod:`.codec`). No pickle anywhere: a socket that unpickles is remote code execution.

Child → parent: :class:`Hello`, :class:`Sample`, :class:`Result`, :class:`Scaling`, :class:`Log`,
:class:`Ack`, :class:`SyncPoints`, :class:`Exit`. Parent → child: :class:`SetSync`,
:class:`SetThreads`, :class:`Profile`, :class:`Stop`.
"""

from __future__ import annotations

import json
from typing import ClassVar

from torchpar_top.contract.codec import (
    MAX_LINE,
    ProtocolError,
    bounded,
    dataclass,
    dumps,
    fast_dumps,
    from_plain,
    loads,
    to_plain,
)
from torchpar_top.contract.vocab import (
    Counted,
    ExecutorKind,
    Mode,
    Quantity,
    Role,
    StepSource,
    SyncScope,
    ThroughputUnit,
)

#: Version of the wire format; a line of another version is refused.
VERSION = 2


@dataclass(frozen=True)
class Message:
    """Base of every message: knows its ``type`` and how to become one JSON line."""

    TYPE: ClassVar[str] = ""

    def to_json(self) -> bytes:
        """This message as one JSON line (NaN and infinity refused: they are not JSON). By orjson where
        it can (an agent sends ten samples a second from inside the user's process), else the standard
        library: the same document either way (``tests/unit/test_codec_fast.py``)."""
        body = fast_dumps(self)
        if body is not None:
            head = f'{{"v":{VERSION},"type":{json.dumps(self.TYPE)}'.encode()
            return head + (b"," + body[1:] if len(body) > 2 else b"}") + b"\n"
        return (dumps({"v": VERSION, "type": self.TYPE, **to_plain(self)}) + "\n").encode()


# -- pieces ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadRole:
    """A thread the agent knows: its native id, its role, and the executor it serves (if any)."""

    tid: int = bounded(lo=1)
    role: Role
    executor: str = ""


@dataclass(frozen=True)
class ExecutorRow:
    """One executor in a sample: its counters and what its last window looked like."""

    name: str
    kind: ExecutorKind
    quantity: Quantity
    """Which of Q (depth) or O (outstanding) ``value`` is."""
    value: int = bounded(lo=0)
    capacity: int | None = bounded(lo=1)
    """Launch blocks when ``value`` reaches it; null for unbounded executors."""
    launched: int = bounded(lo=0)
    completed: int = bounded(lo=0)
    busy: float = bounded(lo=0.0, hi=1.0)
    """Share of the window with an item in progress (taken by the executor, not yet finished)."""
    blocked: float | None = bounded(lo=0.0, hi=1.0)
    """Share of the window the frontend was blocked launching into it (full); null where blocking
    cannot be observed (CUDA completion markers)."""
    emulated: bool = False
    counts: Counted = Counted.ITEMS
    """What one launch is (an item, a torch call, a kernel)."""
    ready: int | None = bounded(default=None, lo=0)
    """DataLoader: batches fetched and waiting for the frontend."""
    running: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """Share of the window the executor's own thread was on a core with an item in progress
    (``schedstat``; at most ``busy``); null where the executor has no thread of its own to read."""
    core_wait: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """Share of the window its thread had an item in progress but waited for a core (every core
    taken: the run-queue delay); ``busy - running - core_wait`` is time it was blocked (GIL, a lock)."""
    note: str | None = None
    """Where the figures come from when that is not the usual way, e.g. a CUDA stream standing aside
    while the user's ``torch.profiler`` holds CUPTI ("standing aside: torch.profiler active")."""


@dataclass(frozen=True)
class Frontend:
    """The frontend thread over a window: running, blocked in a wait, waiting for a core, or idle."""

    busy: float = bounded(lo=0.0, hi=1.0)
    """Share of the window the thread was on a core outside its waits (``schedstat`` run time, at most
    ``1 - wait``); where the kernel keeps no schedstat, ``1 - wait`` (``core_wait`` is then null)."""
    wait: float = bounded(lo=0.0, hi=1.0)
    """Share of the window it was blocked: on a full queue, in a synchronize, waiting for data."""
    core_wait: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """Share of the window it was runnable but waiting for a core (every core taken); the rest,
    ``1 - busy - wait - core_wait``, it was idle (sleeping, reading a file...)."""


@dataclass(frozen=True)
class StackFrame:
    """One Python frame of the frontend's stack (the wire's, and the snapshot's
    :attr:`~torchpar_top.contract.snapshot.StackView.frames`: one type)."""

    function: str
    """Qualified where Python says so (``Queue.get``, Python 3.11+), else the bare name."""
    filename: str
    line: int = bounded(lo=0)


@dataclass(frozen=True)
class FrontendStack:
    """The frontend thread's Python stack as the agent reads it in the workload
    (``sys._current_frames()``): no py-spy process, no ptrace."""

    frames: tuple[StackFrame, ...]
    """Outermost first, innermost last (the innermost :data:`MAX_FRAMES` of a deeper stack)."""
    idle: bool
    """The thread ran less than a tenth of the last window (its ``schedstat``): it waits."""


#: Frames kept of a deeper stack (the innermost: they say what the thread waits in).
MAX_FRAMES = 128


@dataclass(frozen=True)
class SyncCount:
    """How often one source line called something that waits for the device (cumulative)."""

    where: str
    """``file.py:LINE``."""
    call: str
    count: int = bounded(lo=0)


@dataclass(frozen=True)
class StepPhases:
    """Seconds of steps spent in each phase, summed over the steps they describe (``vocab.PHASES``).

    ``data``: waiting for the next batch; ``transfer``: host-to-device copies (``.to()``/``.cuda()``);
    ``forward``: inside the outermost module's call; ``backward``: computing gradients; ``comm``: waiting
    for other ranks (collectives, DDP's all-reduce that backward waits for, barriers); ``optimizer``:
    ``optimizer.step()``; ``sync``: blocking ``.item()``/``.cpu()``/synchronize outside the phases
    above; ``other``: the rest of the step. They add up to the steps' time."""

    data: float = bounded(default=0.0, lo=0.0)
    transfer: float = bounded(default=0.0, lo=0.0)
    forward: float = bounded(default=0.0, lo=0.0)
    backward: float = bounded(default=0.0, lo=0.0)
    comm: float = bounded(default=0.0, lo=0.0)
    optimizer: float = bounded(default=0.0, lo=0.0)
    sync: float = bounded(default=0.0, lo=0.0)
    other: float = bounded(default=0.0, lo=0.0)


@dataclass(frozen=True)
class StepRecord:
    """One step, whole: when it ended (``time.time()``) and its phases (seconds)."""

    end: float
    phases: StepPhases


#: The most whole steps one sample carries.
MAX_STEP_RECORDS = 16


@dataclass(frozen=True)
class Steps:
    """The workload's training steps, cumulative since the run started (the parent takes differences
    between samples for a window, and the totals for the run)."""

    source: StepSource
    """What marks a step (optimizer steps, backward calls, DataLoader batches, module calls)."""
    count: int = bounded(lo=0)
    """Steps completed so far."""
    seconds: float = bounded(lo=0.0)
    """Their summed duration (each step from the end of the one before)."""
    phases: StepPhases
    """Summed over those steps; the fields add up to ``seconds``."""
    ends: tuple[float, ...] = ()
    """``time.time()`` at the end of each step completed in this window, the latest ``MAX_STEP_ENDS``
    at most: ranks' rates are then counted over the same span of time (lockstep ranks agree)."""
    recent: tuple[StepRecord, ...] = ()
    """The last steps completed in this window, each whole (at most ``MAX_STEP_RECORDS``): what the
    export draws as one slice per phase per step."""
    gpu: bool = False
    """True when the phases are GPU time from CUDA events at the phase boundaries, False for the
    frontend's wall time."""
    timed: int | None = bounded(default=None, lo=0)
    """How many of the ``count`` steps had their phases timed; None: all of them. A fast loop's phases
    are timed in one step of several (``probes/agent/usercode_steps.py``, "Sampled phases"): the others'
    are estimated, the timed steps' phases scaled to the sample's step time."""
    before: int = bounded(default=0, lo=0)
    """Of ``count``, the steps another source marked before ``source`` took over (backward calls before
    LBFGS's first optimizer step ended): they had gone out in a sample, and the count never goes back.
    0 where ``source`` marked them all."""


#: The most step end times one sample carries (a faster loop's rate still comes from ``count``).
MAX_STEP_ENDS = 512


@dataclass(frozen=True)
class DeviceMemory:
    """One CUDA device's caching allocator (``torch.cuda.memory_stats``), as the child sees it."""

    device: str
    """``cuda:N`` in the child's numbering."""
    allocated_bytes: int = bounded(lo=0)
    reserved_bytes: int = bounded(lo=0)
    peak_bytes: int = bounded(lo=0)
    """Peak allocated since the run started."""


@dataclass(frozen=True)
class Memory:
    """The workload process's memory at the end of a window."""

    rss_bytes: int = bounded(lo=0)
    devices: tuple[DeviceMemory, ...] = ()


# -- child -> parent -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello(Message):
    """The agent's first message: who it is and how the workload starts out."""

    TYPE: ClassVar[str] = "hello"
    pid: int = bounded(lo=1)
    experiment: str
    device: str
    torch: str
    num_threads: int = bounded(lo=1)
    interop_threads: int = bounded(lo=1)
    roles: tuple[ThreadRole, ...] = ()
    rank: int | None = bounded(default=None, lo=0)
    """torchrun: this process's global rank (``RANK``)."""
    world_size: int | None = bounded(default=None, lo=1)
    local_rank: int | None = bounded(default=None, lo=0)
    """torchrun: its rank on its node (``LOCAL_RANK``)."""
    node_rank: int | None = bounded(default=None, lo=0)
    """torchrun: its node's rank (``GROUP_RANK``), 0 on a single node."""
    hostname: str = ""
    """The host the rank runs on (``socket.gethostname()``)."""


@dataclass(frozen=True)
class Sample(Message):
    """What the agent measured over one window (every ``interval``)."""

    TYPE: ClassVar[str] = "sample"
    t: float
    """The child's ``time.time()`` at the end of the window (latency measurements)."""
    window: float = bounded(above=0.0)
    """Seconds covered."""
    mode: Mode
    throughput: float = bounded(lo=0.0)
    unit: ThroughputUnit
    num_threads: int = bounded(lo=1)
    frontend: Frontend
    overlap: float = bounded(lo=0.0, hi=1.0)
    """Share of the window with two or more executors running at once, at least: on a core for
    executors whose thread the agent reads (bounded from window totals, ``activity.running_overlap``),
    else their work in progress (exact)."""
    overlap_high: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """The most it can have been (equal to ``overlap`` where it is exact)."""
    overlap_in_progress: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """Share of the window with two or more executors holding an item in progress (running or not)."""
    executors: tuple[ExecutorRow, ...] = ()
    roles: tuple[ThreadRole, ...] = ()
    """Threads the agent knows (all of them: roles of threads born since hello included), sent where they
    differ from what the agent's last hello or sample said; empty when unchanged (the reader keeps the
    roles said before: a thread's role never goes out with a sample that does not carry it)."""
    draining: bool = False
    """True while the ASYNC backlog completes after a switch to SYNC (neither mode's steady state)."""
    data_wait: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """Share of the window the frontend waited for its next batch (a DataLoader is watched)."""
    cuda_uuids: tuple[str, ...] = ()
    """``GPU-...`` in the child's CUDA order, so NVML devices are labelled as the child sees them."""
    op_coverage: float | None = bounded(default=None, lo=0.0, hi=1.0)
    """User code: the share of the window the op counter was on (ops/s and sync points are measured in
    those slices and scaled); None where ops are not counted by slices."""
    timing: bool = False
    """True when part of the window was an experiment's timing round, its live loop paused (neither
    mode's steady state, like ``draining``)."""
    stack: FrontendStack | None = None
    """The frontend's Python stack, in about every fifth sample (twice a second), else null."""
    steps: Steps | None = None
    """User code: its training steps so far (cumulative), null before the first step is seen."""
    memory: Memory | None = None
    """The process's resident memory and, on CUDA, each device's allocator figures."""


@dataclass(frozen=True)
class Result(Message):
    """A result the experiment measured (e.g. "device 0 alone", seconds).

    Results that belong together (one round of the multi-device phases, one round of the async text's
    timings) carry the round's number; the last of a round says so with ``closes_round``, and only
    complete rounds are shown, never one round's figures beside another's.
    """

    TYPE: ClassVar[str] = "result"
    label: str
    value: float
    unit: str
    round: int | None = bounded(default=None, lo=1)
    closes_round: bool = False


@dataclass(frozen=True)
class Scaling(Message):
    """One row of the intra-op scaling table."""

    TYPE: ClassVar[str] = "scaling"
    threads: int = bounded(lo=1)
    gflops: float = bounded(lo=0.0)
    samples: int = bounded(lo=1)


@dataclass(frozen=True)
class Log(Message):
    """A line for the log pane from the agent or the experiment."""

    TYPE: ClassVar[str] = "log"
    text: str


@dataclass(frozen=True)
class Ack(Message):
    """The reply to a command."""

    TYPE: ClassVar[str] = "ack"
    cmd: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class SyncPoints(Message):
    """Calls that made the frontend wait for the device, by source line, cumulative since the start."""

    TYPE: ClassVar[str] = "syncpoints"
    sites: tuple[SyncCount, ...]
    covered: float | None = bounded(default=None, lo=0.0)
    """Seconds the op counter was on since the start (counts were seen only then): rates are counts over
    this time. None: every op was seen."""


@dataclass(frozen=True)
class Exit(Message):
    """How the user's code ended (``run``), sent just before the agent closes. A torchrun rank is not
    our child: this is the only way its status is known (a rank killed by a signal cannot send it)."""

    TYPE: ClassVar[str] = "exit"
    status: int = bounded(lo=-128, hi=255)
    reason: str = ""
    """The exception's last line, e.g. ``ValueError: bad value 42``."""


# -- parent -> child -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetSync(Message):
    """Switch SYNC on or off; optionally change what is followed by a synchronize."""

    TYPE: ClassVar[str] = "set_sync"
    value: bool
    scope: SyncScope | None = None


@dataclass(frozen=True)
class SetThreads(Message):
    """``torch.set_num_threads(value)`` in the workload's threads, at their next item."""

    TYPE: ClassVar[str] = "set_threads"
    value: int = bounded(lo=1, hi=4096)


@dataclass(frozen=True)
class Profile(Message):
    """A short ``torch.profiler`` window, analysed the way Holistic Trace Analysis computes queues."""

    TYPE: ClassVar[str] = "profile"
    seconds: float = bounded(above=0.0, hi=10.0)
    export_path: str | None = None
    """An absolute path where the agent also writes the window's Chrome trace (``.gz``: gzipped), for
    offline analysis (``benchmarks/gpu_check.py``); None: analysed, then discarded."""


@dataclass(frozen=True)
class Stop(Message):
    """Ask the workload to return (the agent ends its process group if it does not in time)."""

    TYPE: ClassVar[str] = "stop"


ChildMessage = Hello | Sample | Result | Scaling | Log | Ack | SyncPoints | Exit
Command = SetSync | SetThreads | Profile | Stop

CHILD_MESSAGES: dict[str, type[Message]] = {
    c.TYPE: c for c in (Hello, Sample, Result, Scaling, Log, Ack, SyncPoints, Exit)
}
COMMANDS: dict[str, type[Message]] = {c.TYPE: c for c in (SetSync, SetThreads, Profile, Stop)}


def decode(line: bytes | str, types: dict[str, type[Message]] = CHILD_MESSAGES) -> Message:
    """Parse and validate one line as one of ``types`` (the child's messages by default).

    Raises:
        ProtocolError: the line is too long, not JSON, of another version or type, or a field is
            missing, mistyped or out of bounds.
    """
    if len(line) > MAX_LINE:
        raise ProtocolError(f"line of {len(line)} bytes exceeds {MAX_LINE}")
    try:
        obj = loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("message is not an object")
    if obj.get("v") != VERSION:
        raise ProtocolError(f"protocol version {obj.get('v')!r}, expected {VERSION}")
    cls = types.get(obj.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise ProtocolError(f"unknown message type {obj.get('type')!r}")
    return from_plain(cls, obj, cls.TYPE)


def decode_command(line: bytes | str) -> Message:
    """Parse and validate one command line (parent → child)."""
    return decode(line, COMMANDS)


__all__ = [
    "MAX_FRAMES",
    "MAX_STEP_ENDS",
    "MAX_STEP_RECORDS",
    "VERSION",
    "Ack",
    "ChildMessage",
    "Command",
    "DeviceMemory",
    "ExecutorRow",
    "Exit",
    "Frontend",
    "FrontendStack",
    "Hello",
    "Log",
    "Memory",
    "Message",
    "Profile",
    "ProtocolError",
    "Result",
    "Sample",
    "Scaling",
    "SetSync",
    "SetThreads",
    "StackFrame",
    "StepPhases",
    "StepRecord",
    "Steps",
    "Stop",
    "SyncCount",
    "SyncPoints",
    "ThreadRole",
    "decode",
    "decode_command",
]
