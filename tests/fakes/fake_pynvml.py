"""A fake ``pynvml`` module: the real binding's error classes, constants and structs, simulated GPUs.

Every function the NVML probe calls is here with the real signature and return type. Time is simulated
(``advance``): the driver keeps a utilisation sample every 1/6 s in a bounded buffer, as NVML does.
Scenarios: 1, 2 or 8 GPUs; metrics that raise NOT_SUPPORTED; a GPU lost mid-run (GPU_IS_LOST from
then on); library missing or driver not loaded at ``nvmlInit``; an older driver generation whose
library lacks some entry points (the real binding then raises FUNCTION_NOT_FOUND).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

import pynvml as _real

#: Driver sampling period of the utilisation buffer (1/6 s), and how many samples it keeps.
SAMPLE_PERIOD_US = 166_667
BUFFER = 100

#: Entry points missing from the library of each driver generation.
GENERATIONS: dict[str, frozenset[str]] = {
    "r535": frozenset(),
    "older": frozenset({"nvmlDeviceGetSamples", "nvmlDeviceGetProcessUtilization",
                        "nvmlDeviceGetEnforcedPowerLimit"}),
}


@dataclass
class FakeGpu:
    """One simulated GPU; ``util`` is kernel-active % as a function of simulated seconds."""

    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:07:00.0"
    mem_total: int = 80 << 30
    mem_used: int = 3 << 30
    power_mw: int = 250_000
    power_limit_mw: int = 400_000
    temperature_c: int = 55
    util: Callable[[float], float] = lambda t: 50.0
    processes: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    """pid -> (SM util %, used bytes or None when the driver cannot tell)."""
    unsupported: set[str] = field(default_factory=set)
    """NVML function names that raise NOT_SUPPORTED on this GPU."""
    lost_at: float | None = None
    """Simulated second from which every call on this GPU raises GPU_IS_LOST."""


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """Stands in for the ``pynvml`` module (``NvmlProbe(nvml=FakeNvml(...))``)."""

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "r535", init_error: int | None = None,
                 version: str = "535.104.05") -> None:
        self.gpus = gpus
        self.missing = GENERATIONS[driver]
        self.init_error = init_error
        self.version = version
        self.now_us = 100_000_000
        self.calls: collections.Counter[tuple[str, int]] = collections.Counter()
        self._inits = 0

    def advance(self, seconds: float) -> None:
        """Let simulated time pass."""
        self.now_us += int(round(seconds * 1e6))

    # -- library ----------------------------------------------------------------------------------

    def _fn(self, name: str) -> None:
        if name in self.missing:
            raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if not self._inits:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _real.NVMLError(self.init_error)
        self._inits += 1

    def nvmlShutdown(self) -> None:
        self._fn("nvmlShutdown")
        self._inits -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._fn("nvmlSystemGetDriverVersion")
        return self.version

    def nvmlDeviceGetCount(self) -> int:
        self._fn("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._fn("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        self._gpu("nvmlDeviceGetHandleByIndex", _Handle(index))
        return _Handle(index)

    def _gpu(self, name: str, handle: _Handle) -> FakeGpu:
        """The GPU behind ``handle``, after the checks every device call makes."""
        self._fn(name)
        self.calls[(name, handle.index)] += 1
        gpu = self.gpus[handle.index]
        if gpu.lost_at is not None and self.now_us >= gpu.lost_at * 1e6:
            raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.unsupported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # -- static facts -----------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        info = _real.nvmlPciInfo_t()
        info.busId = self._gpu("nvmlDeviceGetPciInfo", handle).bus_id.encode()
        return info

    # -- metrics ----------------------------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return _real.c_nvmlMemory_t(gpu.mem_total, gpu.mem_total - gpu.mem_used, gpu.mem_used)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementLimit", handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu("nvmlDeviceGetTemperature", handle).temperature_c

    def _sample_times(self) -> list[int]:
        """Timestamps (µs) of the samples still in the driver's buffer, oldest first."""
        last = self.now_us - self.now_us % SAMPLE_PERIOD_US
        return [last - k * SAMPLE_PERIOD_US for k in range(BUFFER - 1, -1, -1)]

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return _real.c_nvmlUtilization_t(int(gpu.util(self._sample_times()[-1] / 1e6)), 0)

    def nvmlDeviceGetSamples(self, handle: _Handle, sampling_type: int, last_seen: int) -> tuple[int, list]:
        gpu = self._gpu("nvmlDeviceGetSamples", handle)
        if sampling_type != _real.NVML_GPU_UTILIZATION_SAMPLES:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        samples = [
            _real.c_nvmlSample_t(ts, _real.c_nvmlValue_t(uiVal=int(gpu.util(ts / 1e6))))
            for ts in self._sample_times() if ts > last_seen
        ]
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return _real.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen: int) -> list:
        """One sample per process with non-zero use in the newest period, if newer than ``last_seen``."""
        gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle)
        ts = self._sample_times()[-1]
        samples = [
            _real.c_nvmlProcessUtilizationSample_t(pid, ts, sm, 0, 0, 0)
            for pid, (sm, _) in gpu.processes.items() if sm > 0 and ts > last_seen
        ]
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return samples

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        out = []
        for pid, (_, used) in gpu.processes.items():
            obj = _real.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": used})
            out.append(obj)
        return out


# The real binding's constants and error classes (NVML_*, NVMLError*), so `except nvml.NVMLError_...`
# in the probe catches exactly what the real module raises.
for _name in dir(_real):
    if _name.startswith(("NVML_", "NVMLError")):
        setattr(FakeNvml, _name, getattr(_real, _name))


def gpu_fleet(n: int, *, name: str = "NVIDIA A100-SXM4-80GB", **kw: Any) -> list[FakeGpu]:
    """``n`` identical GPUs with distinct UUIDs and PCI bus ids, utilisation 10·(i+1) %."""
    return [
        FakeGpu(name=name, uuid=f"GPU-{i:x}{i:x}5a1e2b-0000-4000-8000-00000000000{i}",
                bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
                util=lambda t, i=i: 10.0 * (i + 1), **kw)
        for i in range(n)
    ]
