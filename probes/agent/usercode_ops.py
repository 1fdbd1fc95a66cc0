"""Op counting and implicit sync points in unmodified user code, from one ``TorchFunctionMode``.

The mode is entered on the frontend (main) thread only: function modes are per thread. Every torch call
that is not a metadata read counts as one op on an eager executor (``L = S = C``: on the CPU the op ran
on the calling thread before it returned) and its run time is a busy interval.

Sync points are the calls that would block the frontend until a GPU caught up (``.item()``, ``.cpu()``,
``.tolist()``, ``.numpy()``, ``bool()``/``int()``/``float()`` of a tensor, printing or formatting a
tensor, ``nonzero``, ``.to("cpu")`` ...). They are counted, not timed, by the user's source line (the
first frame outside torch and torchpar_top). On the CPU they are "sync points (would synchronize on
CUDA)": a call counts when the user's code made it (not a library's internals, e.g. a sampler's
``randperm().tolist()``). Once CUDA is initialised a call counts when its tensor is on CUDA, wherever
made. Not detected: boolean-mask indexing and other ops whose output size depends on the data.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torchpar_top.contract.messages import SyncCount
from torchpar_top.probes.agent.activity import MERGE_GAP, ActivityRecorder, Interval, busy_time, clip
from torchpar_top.probes.agent.cuda_launch import TENSOR_METADATA
from torchpar_top.probes.agent.executor import EagerDevice

#: Calls that read metadata and never run work (by ``__name__``); not counted as ops.
METADATA = TENSOR_METADATA | {
    "__set__",
    "__iter__",
    "is_floating_point",
    "is_complex",
    "requires_grad_",
    "__reduce_ex__",
    "__deepcopy__",
}

#: Calls that make the frontend wait for the device, and how they are shown.
SYNC_CALLS: dict[Any, str] = {
    torch.Tensor.item: "item()",
    torch.Tensor.cpu: "cpu()",
    torch.Tensor.tolist: "tolist()",
    torch.Tensor.numpy: "numpy()",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__index__: "tensor as index",
    torch.Tensor.__repr__: "print/repr(tensor)",
    torch.Tensor.__format__: "format(tensor)",
    torch.Tensor.__array__: "numpy.asarray(tensor)",
    torch.Tensor.nonzero: "nonzero()",
    torch.nonzero: "nonzero()",
    torch.Tensor.to: "to('cpu')",
    torch.equal: "equal()",
    torch.Tensor.equal: "equal()",
    torch.allclose: "allclose()",
    torch.Tensor.allclose: "allclose()",
}


class _Masked(str):
    """The label of an indexing call: a sync point only when the index holds a boolean mask (its
    number of True values sets the result's size), which is checked per call, before anything else."""


#: Indexing, read and write.
MASK_CALLS: dict[Any, _Masked] = {
    torch.Tensor.__getitem__: _Masked("x[bool mask]"),
    torch.Tensor.__setitem__: _Masked("x[bool mask] = ..."),
}

_clock = time.perf_counter
#: False in eager; torch.compile's tracer treats it as True (a compiled region is not counted op by op).
_dynamo_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", getattr(torch.compiler, "is_compiling", lambda: False)
)
_OP = 0
_META = 1

#: Frames in these directories are library frames; a sync point is charged to the first frame outside.
LIBRARY_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # torchpar_top.probes
)

_OVERRIDES_FILE = torch.overrides.__file__
_TENSOR_TO = torch.Tensor.to
_TENSOR_FILE = torch._tensor.__file__

#: Most sites sent in one ``syncpoints`` message (the busiest first).
MAX_SITES = 50


class SyncCounter:
    """Cumulative counts of implicit sync points by ``(where, call)``; written by the frontend."""

    def __init__(self, cuda_in_use: Callable[[], bool] = lambda: False) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int, str, str], int] = {}
        self.version = 0
        """Bumped on every hit, so the sender knows when something changed."""
        self._sent_version = 0
        self.cuda_in_use = cuda_in_use
        self.from_runtime = False
        """True while CUDA's sync points come from the runtime's own calls (the CUPTI path): the
        function mode's CUDA sync points are then not counted a second time."""

    def hit(self, call: str, func: Any, args: tuple, kwargs: dict | None, depth: int = 2) -> None:
        """Count one call of ``func`` if it synchronizes; ``depth`` frames up is the caller's frame."""
        if self.from_runtime and self.cuda_in_use():
            return  # CUDA's own synchronising calls are counted (hit_frame), every one of them
        if not self._synchronizes(func, args, kwargs or {}):
            return
        frame: Any = sys._getframe(depth)
        while frame is not None and frame.f_code.co_filename == _OVERRIDES_FILE:
            frame = frame.f_back  # torch's dispatch to the mode
        code = frame.f_code if frame is not None else None
        if code is not None and code.co_filename == _TENSOR_FILE and code.co_name == func.__name__:
            frame = frame.f_back  # the Python half of the call itself (Tensor.__repr__, __format__...)
        if frame is None:
            return
        if frame.f_code.co_filename.startswith(LIBRARY_DIRS) and not self.cuda_in_use():
            return  # a library's own CPU bookkeeping (a sampler's randperm().tolist()): not the user's
        while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_DIRS):
            frame = frame.f_back
        self._count(call, frame)

    def hit_frame(self, call: str, frame: Any) -> None:
        """Count one synchronising call the CUDA runtime reported (a CUPTI callback on the calling
        thread): ``frame`` is the Python frame that made it; the site is the first frame outside torch
        and torchpar_top. Not counted when torchpar_top itself made it (SYNC mode's synchronize)."""
        ours = LIBRARY_DIRS[1]
        while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_DIRS):
            if frame.f_code.co_filename.startswith(ours):
                return
            frame = frame.f_back
        self._count(call, frame)

    def _count(self, call: str, frame: Any) -> None:
        """One more ``call`` at ``frame``'s line (none when no frame is left: nothing to show)."""
        if frame is None:
            return
        key = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, call)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            self.version += 1

    def _synchronizes(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether this call waits for the device (always on the CPU: it would on CUDA)."""
        tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if getattr(func, "__wrapped__", func) is _TENSOR_TO and (
            kwargs.get("non_blocking") or not _targets_cpu(args[1:], kwargs)
        ):
            return False
        if self.cuda_in_use():  # a real GPU run: only calls on CUDA tensors wait
            return tensor is not None and tensor.is_cuda
        return True

    def sites(self) -> tuple[SyncCount, ...]:
        """The busiest sites as the ``syncpoints`` message lists them (cumulative counts)."""
        with self._lock:
            items = sorted(self._counts.items(), key=lambda kv: -kv[1])[:MAX_SITES]
        return tuple(
            SyncCount(where=f"{_short(path)}:{line}", call=call, count=n)
            for (path, line, _func, call), n in items
        )

    def take_changed(self) -> tuple[SyncCount, ...] | None:
        """The sites if anything changed since the last call, else None."""
        version = self.version
        if version == self._sent_version:
            return None
        self._sent_version = version
        return self.sites()

    def total(self) -> int:
        """All sync points counted so far."""
        with self._lock:
            return sum(self._counts.values())


def _targets_cpu(args: tuple, kwargs: dict) -> bool:
    """True when a ``Tensor.to`` call moves to the CPU (a dtype-only ``to`` does not)."""
    for a in (*args, kwargs.get("device")):
        if isinstance(a, torch.Tensor):
            return a.device.type == "cpu"
        if isinstance(a, (str, torch.device)):
            return torch.device(a).type == "cpu"
    return False


def _short(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


class RunRecorder(ActivityRecorder):
    """Busy intervals written by the mode without a lock per op: ops closer than the merge gap form one
    open run (``run_start``..``run_end``), flushed to the locked recorder only when a gap ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.run_start = self.run_end = 0.0
        self.op_since = 0.0
        """Start of the op running now, 0.0 between ops."""

    def _unflushed(self, t0: float, t1: float) -> list[Interval]:
        """The open run and an op still running at ``t1``, clipped to ``[t0, t1]``."""
        since = self.op_since
        return clip([(self.run_start, self.run_end)] + ([(since, t1)] if since else []), t0, t1)

    def intervals(self, t0: float, t1: float) -> list[Interval]:
        """Flushed runs, the open run and an op still running at ``t1``, clipped to ``[t0, t1]``."""
        return super().intervals(t0, t1) + self._unflushed(t0, t1)

    def busy(self, t0: float, t1: float) -> float:
        """Seconds busy in ``[t0, t1]``: the flushed runs' (:meth:`ActivityRecorder.busy`), the open run
        and an op still running (whole: the mode keeps no gaps within a run)."""
        return super().busy(t0, t1) + busy_time(self._unflushed(t0, t1))


class EagerOps(EagerDevice):
    """The CPU running eager ops on the frontend, counted by :class:`OpCounter`: ``L = S = C = n``."""

    def __init__(self, name: str = "cpu (eager)") -> None:
        self.n = 0
        super().__init__(name)
        self.activity: RunRecorder = RunRecorder()

    launched = started = completed = property(lambda self: self.n, lambda self, value: None)


class OpCounter(TorchFunctionMode):
    """Counts ops on an eager device, records their busy time, charges sync points to source lines."""

    def __init__(
        self, device: EagerOps, syncpoints: SyncCounter, after_op: Callable[[], None] | None = None
    ) -> None:
        super().__init__()
        self.device = device
        self.syncpoints = syncpoints
        self.after_op = after_op
        """Called after every op while set (SYNC with scope ``op``); None otherwise."""
        self.active = True
        """False in forked children (DataLoader workers inherit the mode): pass every call through."""
        self.call_soon: Callable[[], None] | None = None
        """Run once on the frontend thread at the next op (e.g. start watching CUDA streams)."""
        self._kinds: dict[Any, Any] = {}
        self._depth = 0

    @property
    def dispatching(self) -> bool:
        """Whether one of its calls is running (torch takes the mode off the stack meanwhile)."""
        return self._depth > 0

    def run_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the frontend thread at its next op (any thread may ask)."""
        prev = self.call_soon
        self.call_soon = fn if prev is None else (lambda: None)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Count and time one torch call made on the frontend thread (:attr:`dispatching` meanwhile;
        one frame, so that a sync point's caller stays where :meth:`SyncCounter.hit` looks)."""
        self._depth += 1
        try:
            if _dynamo_compiling():  # torch.compile traces modes: give it a plain call, no graph break
                return func(*args, **kwargs) if kwargs else func(*args)
            kind = self._kinds.get(func)
            if kind is None:
                kind = self._kinds[func] = _classify(func)
            if kind is _META or not self.active:
                return func(*args, **kwargs) if kwargs else func(*args)
            if kind is not _OP and (
                kind.__class__ is not _Masked or (len(args) > 1 and _has_bool_mask(args[1]))
            ):
                self.syncpoints.hit(kind, func, args, kwargs)
            if self.call_soon is not None:
                call, self.call_soon = self.call_soon, None
                call()
            rec = self.device.activity
            t0 = _clock()
            if t0 - rec.run_end > MERGE_GAP:  # a gap: close the run, start another
                if rec.run_end > rec.run_start:
                    rec.add(rec.run_start, rec.run_end)
                rec.run_start = t0
            rec.op_since = t0
            try:
                return func(*args, **kwargs) if kwargs else func(*args)
            finally:
                rec.run_end = _clock()
                rec.op_since = 0.0
                self.device.n += 1
                if self.after_op is not None:
                    self.after_op()
        finally:
            self._depth -= 1


def _has_bool_mask(index: Any) -> bool:
    """Whether an index (``x[index]``) holds a boolean tensor, alone or in a tuple or list."""
    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool
    if isinstance(index, (tuple, list)):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
    return False


def _classify(func: Any) -> Any:
    """``_META``, ``_OP`` or the sync-point label of ``func`` (a wrapper is classified as what it wraps:
    the step clock wraps ``Tensor.item``/``to``... on CUDA, and torch hands the mode the wrapper)."""
    func = getattr(func, "__wrapped__", func)
    try:
        label = SYNC_CALLS.get(func) or MASK_CALLS.get(func)
    except TypeError:  # unhashable callable
        label = None
    if label is not None:
        return label
    return _META if getattr(func, "__name__", "") in METADATA else _OP
