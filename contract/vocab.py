"""The vocabulary: each word defined once, as an enum member or a named constant.

The enums derive from ``str``: a member compares equal to its value and serialises as it, so the wire
and the headless JSON carry the plain words.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A word of the vocabulary: compares equal to its string value and prints as it."""

    _value_: str

    def __str__(self) -> str:
        return self.value


class ExecutorKind(Word):
    """What kind of in-order executor a queue row is (ARCHITECTURE.md, "One definition of queue depth")."""

    CUDA_STREAM = "cuda-stream"
    EMULATED_STREAM = "emulated-stream"
    INTEROP_POOL = "interop-pool"
    EAGER = "eager"
    """Eager ops on the frontend thread: L = S = C, depth 0 by definition (a synchronous device)."""
    DATALOADER = "dataloader"


class Quantity(Word):
    """Which of the two queue quantities an executor's ``value`` is."""

    DEPTH = "depth"
    """Q = launched - started (what Holistic Trace Analysis reports)."""
    OUTSTANDING = "outstanding"
    """O = launched - completed (what completion events can see)."""


class Counted(Word):
    """What one launch of an executor is."""

    ITEMS = "items"
    """One unit of work the executor runs (an emulated-stream item, a future, a batch, an eager op)."""
    TORCH_CALLS = "torch calls"
    """One torch function call seen by a function mode: one call may launch several kernels, or none."""
    KERNELS = "kernels"
    """One CUDA runtime launch (kernel, copy, memset), from CUDA's own records."""


class Mode(Word):
    """How the frontend runs: launches return at once, or every op (or step) is waited for."""

    ASYNC = "async"
    SYNC = "sync"


class SyncScope(Word):
    """In SYNC mode, what is followed by a synchronize."""

    OP = "op"
    STEP = "step"


class ChildState(Word):
    """The state of the watched process (or of one torchrun rank)."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    """Could not be started."""
    ATTACHED = "attached"
    """A process torchpar-top did not start (``attach``): no agent inside."""
    FINISHED = "finished"
    """A replayed trace reached its end (``replay``): no process ran, none exited."""


CHILD_ENDED = (ChildState.EXITED, ChildState.FAILED)
"""The states of a process that is gone: it exited, or could not be started (a replay's end is not one).
A tuple, tested with ``in``: a state read back as its plain string compares equal to its word."""


class Role(Word):
    """What a thread of the watched process does for PyTorch (the threads panel's groups, shown in the
    order defined here)."""

    FRONTEND = "frontend (main)"
    STREAM_EXECUTOR = "executor"
    """An emulated stream's executor thread (the thread's ``executor`` names which)."""
    PIN_MEMORY = "pin-memory"
    """A DataLoader's pin-memory thread (the thread's ``executor`` names which loader)."""
    INTRAOP = "intra-op workers"
    INTEROP = "inter-op pool"
    AUTOGRAD = "autograd"
    DATA = "data"
    PYTHON = "Python threads"
    """The workload's own ``threading`` threads (the agent lists them: unnamed, they would look like
    OpenMP workers, which inherit their creator's name too)."""
    DATA_WORKERS = "DataLoader workers"
    """Threads of DataLoader worker processes (children of the watched process)."""
    SUBPROCESS = "child processes"
    """Threads of any other process the watched one started."""
    AGENT = "torchpar agent"
    OTHER = "other"


class LogSource(Word):
    """Where a log line comes from."""

    STDOUT = "stdout"
    STDERR = "stderr"
    CHILD = "child"
    """The agent or the experiment, through the protocol."""
    APP = "app"
    """torchpar-top itself."""
    PROTOCOL = "protocol"
    """A message that failed validation (dropped)."""


class StepSource(Word):
    """What marks a training step in the user's code, in this order of preference (the first one seen
    wins): optimizer steps, else backward calls, else DataLoader batches, else calls of the outermost
    module."""

    OPTIMIZER = "optimizer"
    BACKWARD = "backward"
    DATALOADER = "dataloader"
    MODULE = "module"

    @property
    def words(self) -> str:
        """What one step of this source is, for people: ``optimizer steps``, ``backward calls``..."""
        return _STEP_SOURCE_WORDS[self]


_STEP_SOURCE_WORDS = {
    StepSource.OPTIMIZER: "optimizer steps",
    StepSource.BACKWARD: "backward calls",
    StepSource.DATALOADER: "DataLoader batches",
    StepSource.MODULE: "model calls",
}

#: The phases of a training step, in the order a step goes through them (``StepPhases``' fields).
PHASES = ("data", "transfer", "forward", "backward", "comm", "optimizer", "sync", "other")


class ThroughputUnit(Word):
    """What a throughput counts, per second: the one list of units (parsing a unit string is not needed:
    :attr:`what` is the thing counted)."""

    ITEMS = "it/s"
    """Items of an emulated stream (the async experiment), the default."""
    STEPS = "steps/s"
    """Training steps (``run``: optimizer steps, backward calls, batches or module calls)."""
    OPS = "ops/s"
    """torch ops of user code, counted by the op counter (in slices of the time: then *sampled*)."""
    MATMULS = "mm/s"
    """Matrix multiplications (intra-op, multi-device experiments)."""
    CHAINS = "chains/s"
    """Chains of matmuls forked on the inter-op pool."""
    LAUNCHES = "launches/s"
    """Runtime launches (kernels, copies, memsets) per second of trace time (a replayed trace)."""

    @property
    def what(self) -> str:
        """The thing counted: ``steps`` for ``steps/s`` (Prometheus' ``what`` label, the report's total)."""
        return self.value.removesuffix("/s")


class WaitKind(Word):
    """What a Python stack waits in (:func:`torchpar_top.model.stacks.classify_wait`); ``NONE`` (the
    empty word, false) while it runs Python."""

    NONE = ""
    SYNC = "synchronize"
    ITEM = "item()/cpu()"
    DATA = "DataLoader"
    COLLECTIVE = "collective"
    EMU_SYNC = "synchronize (emulated stream)"
    EMU_FULL = "launch (queue full)"
    SLEEP = "sleep"
    QUEUE = "queue get"

    @property
    def for_device(self) -> bool:
        """A wait for the device: a synchronize (a real or an emulated stream's) or a copy to the host."""
        return self in (WaitKind.SYNC, WaitKind.ITEM, WaitKind.EMU_SYNC)


class DataBound(Word):
    """The DataLoader verdict."""

    INPUT = "input-bound"
    COMPUTE = "compute-bound"


#: The environment variable naming the Unix socket a torchrun rank's agent connects to.
ENV_SOCKET = "TORCHPAR_TOP_SOCKET"

#: Seconds torchpar-top gives the user's code to unwind (KeyboardInterrupt at a safe point) after a stop
#: before it sends SIGTERM, then as long again before SIGKILL.
PARENT_STOP_GRACE = 1.5

#: Seconds the agent in the workload waits, after a stop or after losing torchpar-top, before it ends
#: its own process group (the parent's grace runs out first when the parent is alive).
AGENT_STOP_GRACE = 3.0

#: Per-stream launch-queue capacity of CUDA (an undocumented implementation detail: 1022-1024; HTA's
#: ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``) and of the emulated stream, which copies it.
QUEUE_CAP = 1024

#: The longest log line kept whole, in characters (bytes, on a workload's stdout and stderr). A longer one
#: is cut to its first :data:`LOG_LINE_KEEP` and a marker that says how much was left out (the marker fits
#: in the difference). Bounds the log by bytes, not only by lines: a script printing lines of megabytes
#: costs the monitor a few kilobytes each.
LOG_LINE_MAX = 4096
LOG_LINE_KEEP = 4000

#: An environment variable set, to a value unique to each run, in the workload's environment: every process
#: of its tree inherits it, so torchpar-top finds (and ends) those that left the tree or its process group
#: (a double-forked ``setsid`` daemon) even after the workload itself has ended.
ENV_RUN = "TORCHPAR_TOP_RUN"
