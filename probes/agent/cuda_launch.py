"""Launch counting in the frontend: a ``TorchFunctionMode`` that counts torch calls per CUDA stream.

``L`` for a CUDA stream is the number of torch calls that have returned whose result (or first tensor
argument) lives on the stream's device, made while the stream was the frontend's current stream for
that device (``with torch.cuda.stream(s)`` moves the count to ``s``). It counts torch calls, not
kernels: one call may launch zero or several kernels, and a CUDA-graph replay is no torch call.
Metadata calls (``.shape``, ``.size()``, ``len`` ...) are not counted. Function modes are per thread:
the mode counts calls made on the thread that entered it (the frontend). A stream seen for the first
time is reported once (``on_new_stream``) so that it can be watched.

``torch.compile`` traces function modes: while it traces, the mode makes a plain call (as
:class:`~torchpar_top.probes.agent.usercode_ops.OpCounter` does), so a compiled function neither
breaks its graph at the counter's clock nor recompiles (without the guard: a graph break at
``time.perf_counter`` and a recompile per call). At run time the mode counts the torch calls the
compiled code still makes; a fused Inductor kernel is one call or none (measured on the CPU: 3 of a
4-op function's calls with Inductor, all 4 with the eager backend). Calls on a stream being captured
into a CUDA graph (``capture.streams``) are not counted: they are recorded, not launched.

Cost per op measured by ``benchmarks/bench_usercode.py`` (CPU ops on this machine); the current-stream
lookup per CUDA call (``torch._C._cuda_getCurrentStream``) is not measurable here (untested on hardware).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: Devices a counter can count (CUDA ordinals 0..MAX_DEVICES-1).
MAX_DEVICES = 64

#: False in eager; torch.compile's tracer treats it as True.
_dynamo_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", getattr(torch.compiler, "is_compiling", lambda: False)
)

#: Tensor calls (by ``__name__``) that read metadata and never run work.
TENSOR_METADATA = frozenset(
    {
        "__get__",
        "__len__",
        "size",
        "dim",
        "stride",
        "numel",
        "is_contiguous",
        "data_ptr",
        "element_size",
        "get_device",
        "__hash__",
        "nelement",
        "ndimension",
        "storage_offset",
    }
)
#: Calls that read metadata and never launch work.
METADATA = TENSOR_METADATA | {"__repr__", "__format__"}

DeviceOf = Callable[[Any, tuple], int]
StreamOf = Callable[[int], int]
Key = tuple[int, int]
"""``(device, stream_id)``."""

_get_current_stream = getattr(torch._C, "_cuda_getCurrentStream", None)  # absent from CPU-only builds


def cuda_device_of(out: Any, args: tuple) -> int:
    """The CUDA ordinal of the call's result (or first tensor argument), -1 when not on CUDA."""
    if isinstance(out, torch.Tensor):
        return out.get_device()
    return args[0].get_device() if args and isinstance(args[0], torch.Tensor) else -1


def cuda_stream_id(device: int) -> int:
    """``torch.cuda.current_stream(device).stream_id`` of the calling thread, without making a Stream."""
    return _get_current_stream(device)[0] if _get_current_stream is not None else 0


class _NoCapture:
    streams: frozenset[Key] = frozenset()


class LaunchCounter(TorchFunctionMode):
    """Counts launches per stream; ``counts[(device, stream_id)]`` is that stream's ``L``.

    Only the frontend writes the counts; the marker thread reads them (a dict read is atomic under the
    GIL). ``first_launch[key]`` is the host time of the first launch since the marker thread last took it.
    """

    def __init__(
        self,
        device_of: DeviceOf = cuda_device_of,
        clock: Callable[[], float] = time.perf_counter,
        stream_of: StreamOf = cuda_stream_id,
        on_new_stream: Callable[[int, int], None] | None = None,
        capture: Any = None,
    ) -> None:
        super().__init__()
        self.counts: dict[Key, int] = {}
        self.first_launch: dict[Key, float | None] = {}
        self.other = 0
        """Calls not on a CUDA device (CPU ops)."""
        self.capture = capture if capture is not None else _NoCapture()
        """Anything with ``streams``, the keys of streams being captured into a CUDA graph."""
        self._device_of, self._stream_of, self._clock = device_of, stream_of, clock
        self._on_new = on_new_stream
        self._skip: dict[Any, bool] = {}
        self._entered = False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Call ``func``, then count it on its stream (not while torch.compile traces)."""
        if _dynamo_compiling():  # a plain call for the tracer: no graph break, no recompile
            return func(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        skip = self._skip.get(func)
        if skip is None:
            skip = self._skip[func] = getattr(func, "__name__", "") in METADATA
        if skip:
            return out
        dev = self._device_of(out, args)
        if not 0 <= dev < MAX_DEVICES:
            self.other += 1
            return out
        key = (dev, self._stream_of(dev))
        capturing = self.capture.streams
        if capturing and key in capturing:  # recorded into a CUDA graph, not launched
            return out
        n = self.counts.get(key)
        if n is None:
            n = self._new_key(key)
        self.counts[key] = n + 1
        if self.first_launch.get(key) is None:
            self.first_launch[key] = self._clock()
        return out

    def _new_key(self, key: Key) -> int:
        """Start counting a stream seen for the first time (and say so): its count, 0."""
        self.counts[key] = 0
        if self._on_new is not None:
            self._on_new(*key)
        return 0

    def watch(self, key: Key) -> None:
        """Known from now on (not reported as new); its count starts at 0 if none was kept."""
        self.counts.setdefault(key, 0)

    def count(self, device: int, stream_id: int | None = None) -> int:
        """``L`` of one stream, or of all the device's streams."""
        if stream_id is not None:
            return self.counts.get((device, stream_id), 0)
        return sum(n for (d, _), n in list(self.counts.items()) if d == device)

    def take_first_launch(self, key: Key) -> float | None:
        """The host time of the first launch on ``key`` since the previous take, and reset it."""
        t, self.first_launch[key] = self.first_launch.get(key), None
        return t

    def start(self) -> None:
        """Enter the mode on the calling thread (the frontend), once."""
        if not self._entered:
            self.__enter__()
            self._entered = True

    def stop(self) -> None:
        """Leave the mode (on the thread that started it)."""
        if self._entered:
            self._entered = False
            self.__exit__(None, None, None)
