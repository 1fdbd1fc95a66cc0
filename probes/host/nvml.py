"""GPU probe on the monitor side (NVML): kernel-active %, memory, power, temperature, the child's share.

NVML never creates a CUDA context, so the monitor stays off the GPU. ``pynvml`` (``nvidia-ml-py``) is
imported lazily and is injectable (``tests/fakes/fake_pynvml.py``). What the code relies on:

- ``utilization.gpu`` is the share of time one or more kernels ran (kernel-active %), not SM occupancy.
- ``nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, last_seen)`` returns the driver's buffered,
  timestamped samples (µs) newer than ``last_seen``; NOT_FOUND means nothing new. Without it we fall
  back to ``nvmlDeviceGetUtilizationRates`` (an average over 1/6 s to 1 s).
- Per-process utilisation takes a last-seen timestamp too; NOT_FOUND is "no new sample".
- A metric that raises NOT_SUPPORTED, NO_PERMISSION or FUNCTION_NOT_FOUND is not asked again; a GPU
  that raises GPU_IS_LOST is marked lost and not asked again; nothing here raises.
- NVML orders GPUs by PCI bus id, CUDA fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Labels
  ``cuda:N`` come from the workload's own UUIDs when known (:attr:`NvmlProbe.cuda_uuids`), else from
  ``CUDA_VISIBLE_DEVICES`` (indices, UUIDs or unique UUID prefixes; CUDA ignores everything from the
  first invalid entry on). Indices assume CUDA's order is PCI order: true with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when all GPUs are the same model; otherwise GPUs stay ``nvml:N``.
  MIG devices are not mapped.
- NVML reports host PIDs: in a container with its own PID namespace the child's pid never matches and
  per-process values stay ``None``.

Verified against the fake only; untested on hardware.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from torchpar_top.contract.snapshot import GpuView

#: Utilisation values kept per GPU (driver samples, or one per poll on the fallback).
HISTORY = 600
NO_BINDING = "no GPU: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
INIT_STATUS = {
    "NVMLError_LibraryNotFound": "no GPU: NVML library not found (libnvidia-ml.so.1)",
    "NVMLError_DriverNotLoaded": "no GPU: NVIDIA driver not loaded",
    "NVMLError_LibRmVersionMismatch": "no GPU: NVML and kernel driver versions differ (reload the driver)",
    "NVMLError_NoPermission": "no GPU: no permission to use NVML",
}
_NO_NEW = object()
_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # NVML_VALUE_TYPE_* order

Source = Any  # a value, None, or a zero-argument callable returning one


@dataclass
class _Gpu:
    """What the probe remembers about one NVML device between polls."""

    index: int
    handle: Any = None
    name: str = "?"
    uuid: str = ""
    lost: bool = False
    off: set[str] = field(default_factory=set)
    history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    util: float | None = None
    samples_ts: int = 0
    pid: int | None = None
    proc_ts: int = 0
    proc_util: float | None = None
    proc_util_t: float = 0.0
    proc_mem: int | None = None
    proc_mem_t: float = float("-inf")


class NvmlProbe:
    """``sample()`` returns ``(GpuView per GPU, status)``; the status says why there are none."""

    def __init__(self, nvml: Any = None, *, pid: Source = None, cuda_uuids: Source = None,
                 environ: Mapping[str, str] | None = None, history: int = HISTORY,
                 clock: Callable[[], float] = time.monotonic, process_stale: float = 2.0,
                 process_interval: float = 1.0) -> None:
        """Start NVML (never raises).

        Args:
            nvml: the ``pynvml`` module or a fake; imported lazily when None.
            pid: the child's pid, or a callable returning it (None: no child).
            cuda_uuids: the child's CUDA devices' UUIDs in CUDA order, or a callable returning them.
            environ: where ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` are read (the child inherits ours).
            process_stale: seconds without a per-process sample after which the child's share reads 0.
            process_interval: seconds between reads of the (slower) running-process list.
        """
        self.pid = pid
        self.cuda_uuids = cuda_uuids
        self._environ = os.environ if environ is None else environ
        self._clock, self._stale, self._proc_every = clock, process_stale, process_interval
        self._lock = threading.Lock()
        self._gpus: list[_Gpu] = []
        self._nvml: Any = None
        self._status = ""
        self._start(nvml, history)

    def _start(self, nvml: Any, history: int) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                self._status = NO_BINDING
                return
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError subclasses, or anything odd from a broken install
            self._status = INIT_STATUS.get(type(exc).__name__, f"no GPU: NVML could not start ({exc})")
            return
        self._nvml = nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            self.close()
            self._status = f"no GPU: NVML could not count devices ({exc})"
            return
        for i in range(count):
            gpu = _Gpu(i, history=deque(maxlen=history))
            try:
                gpu.handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except nvml.NVMLError:
                gpu.lost = True
            gpu.name = _text(self._call(gpu, "name", "nvmlDeviceGetName")) or "?"
            gpu.uuid = _text(self._call(gpu, "uuid", "nvmlDeviceGetUUID")) or ""
            self._gpus.append(gpu)
        if not self._gpus:
            self._status = "no GPU: NVML found no NVIDIA GPU"

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        with self._lock:
            nvml, self._nvml = self._nvml, None
            if nvml is not None:
                try:
                    nvml.nvmlShutdown()
                except nvml.NVMLError:
                    pass
                self._status = "GPU probe closed"

    # -- one poll ---------------------------------------------------------------------------------

    def sample(self) -> tuple[tuple[GpuView, ...], str]:
        """Read every GPU once; never raises."""
        with self._lock:
            if self._nvml is None or not self._gpus:
                return (), self._status
            try:
                return self._sample()
            except Exception as exc:  # a bug or a broken binding must not stop the host probes
                return (), f"GPU probe error: {type(exc).__name__}: {exc}"

    def _sample(self) -> tuple[tuple[GpuView, ...], str]:
        now, pid = self._clock(), _value(self.pid)
        order, note = self._order()
        labels = {idx: f"cuda:{pos}" for pos, idx in enumerate(order or ())}
        first = [self._gpus[i] for i in order or ()]  # the child's devices first, in CUDA order
        views = tuple(self._read(g, labels.get(g.index, f"nvml:{g.index}"), now, pid)
                      for g in first + [g for g in self._gpus if g.index not in labels])
        lost = [v.label for v in views if v.lost]
        notes = [note] + ([f"lost: {', '.join(lost)}"] if lost else [])
        return views, "; ".join(n for n in notes if n)

    def _order(self) -> tuple[list[int] | None, str]:
        uuids = _value(self.cuda_uuids)
        known = [g.uuid for g in self._gpus]
        if uuids is not None:
            found = [_match(known, u if u.upper().startswith("GPU-") else f"GPU-{u}") for u in uuids]
            return [i for i in found if i is not None], ""
        return cuda_order(known, [g.name for g in self._gpus], self._environ)

    def _read(self, gpu: _Gpu, label: str, now: float, pid: int | None) -> GpuView:
        self._read_util(gpu)
        mem = self._call(gpu, "memory", "nvmlDeviceGetMemoryInfo")
        power = self._call(gpu, "power", "nvmlDeviceGetPowerUsage")
        limit = self._call(gpu, "limit", "nvmlDeviceGetEnforcedPowerLimit")
        if limit is None and "limit" in gpu.off:
            limit = self._call(gpu, "limit2", "nvmlDeviceGetPowerManagementLimit")
        temp = self._call(gpu, "temperature", "nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU)
        self._read_process(gpu, now, pid)
        lost = gpu.lost
        return GpuView(
            index=gpu.index, label=label, name=gpu.name,
            util_percent=None if lost else gpu.util, util_history=tuple(gpu.history),
            mem_used=None if mem is None else int(mem.used),
            mem_total=None if mem is None else int(mem.total),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            temperature_c=None if temp is None else float(temp),
            process_util_percent=None if lost else gpu.proc_util,
            process_mem=None if lost else gpu.proc_mem, lost=lost,
        )

    def _read_util(self, gpu: _Gpu) -> None:
        nvml = self._nvml
        got = self._call(gpu, "samples", "nvmlDeviceGetSamples", nvml.NVML_GPU_UTILIZATION_SAMPLES,
                         gpu.samples_ts, not_found=_NO_NEW)
        if got is _NO_NEW:
            return  # nothing new since the last poll: keep the value
        if got is not None:
            vtype, samples = got
            values = [_sample_value(s.sampleValue, vtype) for s in samples]
            gpu.samples_ts = max([gpu.samples_ts] + [int(s.timeStamp) for s in samples])
            if values:
                gpu.history.extend(values)
                gpu.util = sum(values) / len(values)
            return
        if "samples" not in gpu.off:
            return  # a transient failure: keep the value
        rates = self._call(gpu, "rates", "nvmlDeviceGetUtilizationRates")
        if rates is not None:
            gpu.util = min(100.0, max(0.0, float(rates.gpu)))
            gpu.history.append(gpu.util)
        elif "rates" in gpu.off:
            gpu.util = None

    def _read_process(self, gpu: _Gpu, now: float, pid: int | None) -> None:
        if pid != gpu.pid:  # a new child: forget the old one's values
            gpu.pid, gpu.proc_util, gpu.proc_mem, gpu.proc_mem_t = pid, None, None, float("-inf")
        if pid is None:
            return
        got = self._call(gpu, "process", "nvmlDeviceGetProcessUtilization", gpu.proc_ts, not_found=_NO_NEW)
        if isinstance(got, list):
            gpu.proc_ts = max([gpu.proc_ts] + [int(s.timeStamp) for s in got])
            mine = [s for s in got if s.pid == pid]
            if mine:
                gpu.proc_util = float(max(mine, key=lambda s: s.timeStamp).smUtil)
                gpu.proc_util_t = now
        if "process" in gpu.off:
            gpu.proc_util = None
        elif gpu.proc_util is not None and now - gpu.proc_util_t > self._stale:
            gpu.proc_util = 0.0  # NVML only lists processes that used the GPU in the last period
        if now - gpu.proc_mem_t >= self._proc_every:
            gpu.proc_mem_t = now
            procs = self._call(gpu, "process_mem", "nvmlDeviceGetComputeRunningProcesses")
            used = [p.usedGpuMemory for p in procs or () if p.pid == pid and p.usedGpuMemory is not None]
            gpu.proc_mem = sum(used) if used else None

    def _call(self, gpu: _Gpu, metric: str, fn_name: str, *args: Any, not_found: Any = None) -> Any:
        """``nvml.<fn_name>(handle, *args)``, or None; turns metrics off and marks lost GPUs."""
        nvml = self._nvml
        if gpu.lost or metric in gpu.off or nvml is None:
            return None
        fn = getattr(nvml, fn_name, None)
        if fn is None:  # an older binding without this entry point
            gpu.off.add(metric)
            return None
        try:
            return fn(gpu.handle, *args)
        except nvml.NVMLError_GpuIsLost:
            gpu.lost = True
        except nvml.NVMLError_NotFound:
            return not_found
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NoPermission):
            gpu.off.add(metric)
        except nvml.NVMLError:
            pass  # transient: ask again next poll
        return None


def cuda_order(
    uuids: Sequence[str], names: Sequence[str], environ: Mapping[str, str]
) -> tuple[list[int] | None, str]:
    """NVML indices in the order the child's CUDA enumerates them (``cuda:0`` first), or None if unknown.

    Args:
        uuids: NVML UUIDs (``GPU-...``) in NVML (PCI bus id) order.
        names: product names in the same order (identical models: CUDA's order is PCI order).
        environ: holds ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``.

    Returns:
        The indices and a note when the mapping is not known.
    """
    pci = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") == "PCI_BUS_ID" or len(set(names)) <= 1
    base = list(range(len(uuids))) if pci else None
    note = "" if pci else "CUDA order unknown for mixed GPU models: set CUDA_DEVICE_ORDER=PCI_BUS_ID"
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return base, note
    visible: list[int] = []
    kind = None
    for token in (t.strip() for t in spec.split(",")):
        this = "index" if token.isdigit() else "uuid" if token.upper().startswith("GPU-") else None
        if this is None or kind not in (None, this):
            break  # like nvitop: a list is all indices or all UUIDs; CUDA stops at an invalid entry
        kind = this
        if this == "uuid":
            idx = _match(uuids, token)
        elif base is None:
            return None, note
        else:
            idx = base[int(token)] if int(token) < len(base) else None
        if idx is None or idx in visible:
            break
        visible.append(idx)
    return visible, "" if kind == "uuid" else note


def _match(uuids: Sequence[str], prefix: str) -> int | None:
    """The one NVML index whose UUID starts with ``prefix`` (case-insensitive), else None."""
    hits = [i for i, u in enumerate(uuids) if u.lower().startswith(prefix.lower())]
    return hits[0] if len(hits) == 1 else None


def _sample_value(value: Any, vtype: int) -> float:
    name = _VALUE_FIELDS[vtype] if 0 <= vtype < len(_VALUE_FIELDS) else "uiVal"
    return min(100.0, max(0.0, float(getattr(value, name))))


def _value(source: Source) -> Any:
    return source() if callable(source) else source


def _text(value: Any) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
