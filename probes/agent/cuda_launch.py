"""Launch counting in the frontend: a ``TorchFunctionMode`` that counts torch calls per CUDA device.

``L`` for a CUDA device is the number of torch calls whose result (or first tensor argument) lives on
that device and that have returned. It counts ops, not kernels: one op may launch zero or several
kernels. Metadata calls (``.shape``, ``.size()``, ``len`` ...) are not counted. Function modes are
per thread: the mode counts calls made on the thread that entered it (the frontend).

``torch.compile`` traces function modes: while it traces, the mode makes a plain call (as
:class:`~torchpar_top.probes.agent.usercode_ops.OpCounter` does), so a compiled function neither
breaks its graph at the counter's clock nor recompiles (without the guard: a graph break at
``time.perf_counter`` and a recompile per call). At run time the mode counts the torch calls the
compiled code still makes; a fused Inductor kernel is one call or none (measured on the CPU: 3 of a
4-op function's calls with Inductor, all 4 with the eager backend).

Cost per op measured by ``benchmarks/bench_usercode.py`` (CPU ops on this machine).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

#: Devices a counter can count (CUDA ordinals 0..MAX_DEVICES-1).
MAX_DEVICES = 64

#: False in eager; torch.compile's tracer treats it as True.
_dynamo_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", getattr(torch.compiler, "is_compiling", lambda: False))

#: Calls that read metadata and never launch work.
METADATA = frozenset({
    "__get__", "__len__", "size", "dim", "stride", "numel", "is_contiguous", "data_ptr", "element_size",
    "get_device", "__repr__", "__format__", "__hash__", "nelement", "ndimension", "storage_offset",
})

DeviceOf = Callable[[Any, tuple], int]


def cuda_device_of(out: Any, args: tuple) -> int:
    """The CUDA ordinal of the call's result (or first tensor argument), -1 when not on CUDA."""
    if isinstance(out, torch.Tensor):
        return out.get_device()
    return args[0].get_device() if args and isinstance(args[0], torch.Tensor) else -1


class LaunchCounter(TorchFunctionMode):
    """Counts launches per device; ``counts[d]`` is ``L`` of device ``d``.

    Only the frontend writes the counts; the marker thread reads them (an int read is atomic under the
    GIL). ``first_launch[d]`` is the host time of the first launch since the marker thread last took it.
    """

    def __init__(self, device_of: DeviceOf = cuda_device_of,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.counts = [0] * MAX_DEVICES
        self.first_launch: list[float | None] = [None] * MAX_DEVICES
        self.other = 0
        """Calls not on a CUDA device (CPU ops)."""
        self._device_of = device_of
        self._clock = clock
        self._skip: dict[Any, bool] = {}
        self._entered = False

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Call ``func``, then count it on its device (not while torch.compile traces)."""
        if _dynamo_compiling():  # a plain call for the tracer: no graph break, no recompile
            return func(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        skip = self._skip.get(func)
        if skip is None:
            skip = self._skip[func] = getattr(func, "__name__", "") in METADATA
        if skip:
            return out
        dev = self._device_of(out, args)
        if 0 <= dev < MAX_DEVICES:
            self.counts[dev] += 1
            if self.first_launch[dev] is None:
                self.first_launch[dev] = self._clock()
        else:
            self.other += 1
        return out

    def take_first_launch(self, device: int) -> float | None:
        """The host time of the first launch on ``device`` since the previous take, and reset it."""
        t, self.first_launch[device] = self.first_launch[device], None
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
