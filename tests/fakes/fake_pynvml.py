"""A fake ``pynvml`` module: the real binding's error classes, constants and structs, simulated GPUs.

Every function the NVML probe calls is here with the real signature and return type. Time is simulated
(``advance``): the driver keeps a utilisation sample every 1/6 s in a bounded buffer, as NVML does.
Scenarios: 1, 2 or 8 GPUs; metrics that raise NOT_SUPPORTED; a GPU lost mid-run (GPU_IS_LOST from
then on); a GPU the user may not open (NO_PERMISSION); library missing or driver not loaded at
``nvmlInit``; driver generations whose library lacks some entry points (the real binding then raises
FUNCTION_NOT_FOUND, or ``NVMLLibraryMismatchError`` from its unversioned wrappers); R525-R535's
``_v3`` process list, whose struct the binding misreads (garbage entries); an idle GPU whose sample
buffer runs dry (NOT_FOUND); out-of-range samples a driver may return.
"""

from __future__ import annotations

import collections
import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

#: Driver sampling period of the utilisation buffer (1/6 s), and how many samples it keeps.
SAMPLE_PERIOD_US = 166_667
BUFFER = 100

_OLD = frozenset({"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3"})

#: Entry points (library symbols) missing from the library of each driver generation. nvml.h: the
#: ``_v3`` process list and ``nvmlDeviceGetMemoryInfo_v2`` arrived with R510; ``_v2`` with R450.
GENERATIONS: dict[str, frozenset[str]] = {
    "r550": frozenset(),
    "r535": frozenset(),  # R525-R535: its _v3 takes the struct with usedGpuCcProtectedMemory
    "r470": _OLD,
    "older": _OLD
    | {
        "nvmlDeviceGetSamples",
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    },
}
VERSIONS = {"r550": "550.54.14", "r535": "535.104.05", "r470": "470.256.02", "older": "418.226.00"}
NO_MIG = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId when MIG is off (nvml.h)


class _ProcessInfoV3Cc(ctypes.Structure):
    """The ``nvmlProcessInfo_v3_t`` R525-R535 drivers fill (nvml.h of CUDA 12.0-12.2; nvitop's
    ``c_nvmlProcessInfo_v3_t``): 32 bytes, where nvidia-ml-py 12/13 reads 24-byte records."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


@dataclass
class FakeGpu:
    """One simulated GPU; ``util`` is kernel-active % as a function of simulated seconds."""

    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:07:00.0"
    mem_total: int = 80 << 30
    mem_used: int = 3 << 30
    """Used as nvidia-smi shows it (``nvmlMemory_v2``: reserved memory excluded)."""
    mem_reserved: int = 512 << 20
    """Reserved by the driver; ``nvmlDeviceGetMemoryInfo`` v1 counts it as used."""
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
    denied: bool = False
    """``nvmlDeviceGetHandleByIndex`` raises NO_PERMISSION (documented for a device the user may not open)."""
    odd_samples: list[tuple[int, int]] = field(default_factory=list)
    """``(timestamp µs, value)`` the driver returns besides its real samples (values above 100 and zero
    timestamps have been seen from NVML's sample buffers: nvtop#110)."""


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """Stands in for the ``pynvml`` module (``NvmlProbe(nvml=FakeNvml(...))``)."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str = "r550",
        init_error: int | None = None,
        version: str | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.missing = GENERATIONS[driver]
        self.init_error = init_error
        self.version = version or VERSIONS[driver]
        self.now_us = 100_000_000
        self.calls: collections.Counter[tuple[str, int]] = collections.Counter()
        self._inits = 0

    def advance(self, seconds: float) -> None:
        """Let simulated time pass."""
        self.now_us += round(seconds * 1e6)

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
        if self._gpu("nvmlDeviceGetHandleByIndex", _Handle(index)).denied:
            raise _real.NVMLError(_real.NVML_ERROR_NO_PERMISSION)
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

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        """As the binding: no version -> symbol ``nvmlDeviceGetMemoryInfo`` (v1, reserved counted as
        used); a version -> ``nvmlDeviceGetMemoryInfo_v2`` filling ``nvmlMemory_v2``."""
        if not version:
            gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
            used = gpu.mem_used + gpu.mem_reserved
            return _real.c_nvmlMemory_t(gpu.mem_total, gpu.mem_total - used, used)
        gpu = self._gpu("nvmlDeviceGetMemoryInfo_v2", handle)
        if version != _real.nvmlMemory_v2:
            raise _real.NVMLError(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        free = gpu.mem_total - gpu.mem_used - gpu.mem_reserved
        return _real.c_nvmlMemory_v2_t(version, gpu.mem_total, gpu.mem_reserved, free, gpu.mem_used)

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
        """Timestamps (µs) of the driver's sampling periods still in its buffer, oldest first."""
        last = self.now_us - self.now_us % SAMPLE_PERIOD_US
        return [last - k * SAMPLE_PERIOD_US for k in range(BUFFER - 1, -1, -1)]

    def _buffered(self, gpu: FakeGpu) -> list[int]:
        """The periods that left a sample: the buffer runs dry while the GPU is idle, so GetSamples
        says NOT_FOUND (polarsignals/gpu-metrics-agent#37: idle for minutes, no sample)."""
        return [ts for ts in self._sample_times() if gpu.util(ts / 1e6) > 0]

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return _real.c_nvmlUtilization_t(int(gpu.util(self._sample_times()[-1] / 1e6)), 0)

    def nvmlDeviceGetSamples(self, handle: _Handle, sampling_type: int, last_seen: int) -> tuple[int, list]:
        gpu = self._gpu("nvmlDeviceGetSamples", handle)
        if sampling_type != _real.NVML_GPU_UTILIZATION_SAMPLES:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        samples = [
            _real.c_nvmlSample_t(ts, _real.c_nvmlValue_t(uiVal=int(gpu.util(ts / 1e6))))
            for ts in self._buffered(gpu)
            if ts > last_seen
        ]
        samples += [_real.c_nvmlSample_t(ts, _real.c_nvmlValue_t(uiVal=v)) for ts, v in gpu.odd_samples]
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return _real.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen: int) -> list:
        """One sample per process with non-zero use in the newest period, if newer than ``last_seen``."""
        gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle)
        ts = self._sample_times()[-1]
        samples = [
            _real.c_nvmlProcessUtilizationSample_t(pid, ts, sm, 0, 0, 0)
            for pid, (sm, _) in gpu.processes.items()
            if sm > 0 and ts > last_seen
        ]
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return samples

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list:
        """The binding's unversioned wrapper: ``_v3``, and ``@throwOnVersionMismatch`` turning
        FUNCTION_NOT_FOUND into ``NVMLLibraryMismatchError`` (an ``Exception``, not an NVMLError)."""
        try:
            return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)
        except _real.NVMLError_FunctionNotFound:
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version. "
                "Either use matching pyNVML and NVML lib versions or use a versioned function such as "
                "nvmlDeviceGetComputeRunningProcesses_v2"
            ) from None

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: _Handle) -> list:
        """Symbol ``_v2``: 24-byte ``nvmlProcessInfo_v2_t`` records, read as the binding reads them."""
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        return self._records(_real.c_nvmlProcessInfo_v2_t, gpu)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: _Handle) -> list:
        """Symbol ``_v3``: the binding reads 24-byte records; R525-R535 drivers write 32-byte ones."""
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses_v3", handle)
        written = _ProcessInfoV3Cc if self.driver == "r535" else _real.c_nvmlProcessInfo_v2_t
        return self._records(written, gpu)

    @staticmethod
    def _records(written: type, gpu: FakeGpu) -> list:
        """The driver fills ``written`` structs into the binding's zeroed ``c_nvmlProcessInfo_v3_t``
        array (``count * 2 + 5`` entries); the binding converts the first ``count`` (pynvml source)."""
        count = len(gpu.processes)
        if not count:
            return []
        read = _real.c_nvmlProcessInfo_v3_t
        array = (read * (count * 2 + 5))()
        records = (written * count)(
            *[
                written(
                    pid,
                    _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used,
                    NO_MIG,
                    NO_MIG,
                )
                for pid, (_, used) in gpu.processes.items()
            ]
        )
        ctypes.memmove(array, records, ctypes.sizeof(records))
        out = []
        for i in range(count):
            obj = _real.nvmlStructToFriendlyObject(array[i])
            if obj.usedGpuMemory == _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None
            out.append(obj)
        return out


# The real binding's constants, error classes and struct versions (NVML_*, NVMLError*, nvmlMemory_v2,
# NVMLLibraryMismatchError), so `except nvml.NVMLError_...` in the probe catches exactly what the real
# module raises.
for _name in dir(_real):
    if _name.startswith(("NVML_", "NVMLError", "NVMLLibrary")) or _name == "nvmlMemory_v2":
        setattr(FakeNvml, _name, getattr(_real, _name))


def gpu_fleet(n: int, *, name: str = "NVIDIA A100-SXM4-80GB", **kw: Any) -> list[FakeGpu]:
    """``n`` identical GPUs with distinct UUIDs and PCI bus ids, utilisation 10·(i+1) %."""
    return [
        FakeGpu(
            name=name,
            uuid=f"GPU-{i:x}{i:x}5a1e2b-0000-4000-8000-00000000000{i}",
            bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
            util=lambda t, i=i: 10.0 * (i + 1),
            **kw,
        )
        for i in range(n)
    ]
