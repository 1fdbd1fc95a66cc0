"""GPU probe on the monitor side (NVML): kernel-active %, memory, power, temperature, the child's share.

NVML never creates a CUDA context, so the monitor stays off the GPU. ``pynvml`` (``nvidia-ml-py``) is
imported lazily and is injectable (``tests/fakes/fake_pynvml.py``). What the code relies on:

- ``utilization.gpu`` is the share of time one or more kernels ran (kernel-active %), not SM occupancy.
- ``nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, last_seen)`` returns the driver's buffered,
  timestamped samples (µs) newer than ``last_seen``. NOT_FOUND means no new sample: the buffer runs
  dry while the GPU is idle, so the value then comes from ``nvmlDeviceGetUtilizationRates`` (the
  driver's current average), which is also the fallback without a sample buffer. A sample above 100 %,
  with timestamp 0 or not newer than the last one seen is discarded, not clamped.
- Per-process utilisation takes a last-seen timestamp too; NOT_FOUND is "no new sample".
- Memory is ``nvmlDeviceGetMemoryInfo`` v2 (``nvmlMemory_v2``: reserved memory not counted as used, as
  nvidia-smi shows it) where the driver has it (R510+), else v1 (used includes the reserved part).
- The child's memory comes from ``nvmlDeviceGetComputeRunningProcesses_v2`` (the same 24-byte record
  in the binding and every driver that has it), then the binding's unversioned wrapper (``_v3``), which
  raises ``NVMLLibraryMismatchError`` (not an NVMLError) where the driver lacks ``_v3`` and returns
  misread records on R525-R535 (their ``_v3`` record is 32 bytes; see nvitop's ``libnvml.py``).
  Implausible entries (pid 0 or above the kernel's pid limit, more memory than the GPU has) are dropped.
- A metric that raises NOT_SUPPORTED, NO_PERMISSION or FUNCTION_NOT_FOUND is not asked again; a GPU
  that raises GPU_IS_LOST is marked lost and not asked again; a GPU whose handle NVML refuses with
  NO_PERMISSION is shown without values, not as lost; nothing here raises.
- NVML orders GPUs by PCI bus id, CUDA fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Labels
  ``cuda:N`` come from the workload's own UUIDs when known (:attr:`NvmlProbe.cuda_uuids`; an unmatched
  one, e.g. a MIG instance, keeps its position), else from ``CUDA_VISIBLE_DEVICES`` (indices, UUIDs or
  unique UUID prefixes; CUDA ignores everything from the first invalid entry on). Indices assume CUDA's
  order is PCI order: true with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when all GPUs are the same model;
  otherwise GPUs stay ``nvml:N``. Every numbering reported (one per torchrun rank) is kept until the
  run ends: where they disagree on a GPU (each rank its own ``CUDA_VISIBLE_DEVICES``) it is labelled by
  its NVML index, ``nvml:N``, which every rank shares. MIG devices are not mapped.
- NVML reports host PIDs: in a container with its own PID namespace the child's pid never matches and
  per-process values stay ``None``.

Verified against the fake only; untested on hardware.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
#: Seconds without a new driver sample (3 sampling periods) after which the GPU counts as idle: the
#: driver's current average then goes into the history once per poll.
IDLE_AFTER = 0.5
#: Highest pid Linux can hand out (``pid_max`` is at most 2**22): a larger one is a misread record.
PID_LIMIT = 1 << 22
#: Process-list entry points, preferred first (see the module docstring).
PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses")
#: The most CUDA numberings (torchrun ranks) remembered in one run.
MAX_NUMBERINGS = 256
MISREAD = "process list misread (nvidia-ml-py and driver disagree): entries dropped"

Source = Any  # a value, None, or a zero-argument callable returning one


@dataclass
class _Gpu:
    """What the probe remembers about one NVML device between polls."""

    index: int
    handle: Any = None
    name: str = "?"
    uuid: str = ""
    lost: bool = False
    denied: bool = False
    """NVML refused the handle (NO_PERMISSION): no values, not lost."""
    off: set[str] = field(default_factory=set)
    history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    added: int = 0
    """Values appended to ``history`` so far (:attr:`GpuView.samples`)."""
    util: float | None = None
    samples_ts: int = 0
    samples_t: float = float("-inf")
    """Probe-clock time of the last fresh driver sample."""
    pid: int | None = None
    proc_ts: int = 0
    proc_util: float | None = None
    proc_util_t: float = 0.0
    proc_mem: int | None = None
    proc_mem_t: float = float("-inf")
    proc_list: int = 0
    """Index into :data:`PROCESS_LISTS` of the entry point in use."""
    misread: bool = False
    """A process list held misread entries (and no other entry point was left)."""
    mem_total: int | None = None


class NvmlProbe:
    """``sample()`` returns ``(GpuView per GPU, status)``; the status says why there are none."""

    def __init__(
        self,
        nvml: Any = None,
        *,
        pid: Source = None,
        cuda_uuids: Source = None,
        environ: Mapping[str, str] | None = None,
        history: int = HISTORY,
        clock: Callable[[], float] = time.monotonic,
        process_stale: float = 2.0,
        process_interval: float = 1.0,
    ) -> None:
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
        self._uuid_source: Source = None
        self._numberings: dict[tuple[str, ...], None] = {}
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
                import pynvml
            except ImportError:
                self._status = NO_BINDING
                return
            nvml = pynvml
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
            except nvml.NVMLError_NoPermission:
                gpu.denied = True
            except nvml.NVMLError:
                gpu.lost = True
            gpu.name = _text(self._call(gpu, "name", "nvmlDeviceGetName")) or "?"
            gpu.uuid = _text(self._call(gpu, "uuid", "nvmlDeviceGetUUID")) or ""
            self._gpus.append(gpu)
        if not self._gpus:
            self._status = "no GPU: NVML found no NVIDIA GPU"

    @property
    def cuda_uuids(self) -> Source:
        """The workload's CUDA devices' UUIDs in CUDA order (the last numbering set), or a callable."""
        return (
            self._uuid_source
            if self._uuid_source is not None
            else (list(next(reversed(self._numberings))) if self._numberings else None)
        )

    @cuda_uuids.setter
    def cuda_uuids(self, value: Source) -> None:
        """Add a numbering (a rank's), set a callable, or forget them all (None: the run ended)."""
        if value is None:
            self._uuid_source, self._numberings = None, {}
        elif callable(value):
            self._uuid_source = value
        elif tuple(value) not in self._numberings and len(self._numberings) < MAX_NUMBERINGS:
            self._numberings = {**self._numberings, tuple(value): None}  # a new dict: sample() may be reading

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        with self._lock:
            nvml, self._nvml = self._nvml, None
            if nvml is not None:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlShutdown()
                self._status = "GPU probe closed"

    @property
    def readable(self) -> bool:
        """Whether a :meth:`sample` can read anything: NVML started and found a GPU. False stays false
        (no binding, NVML failed to start or found none, closed): the sample is then only the status,
        and the host probes ask for it once instead of every interval."""
        return self._nvml is not None and bool(self._gpus)

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
        labels, note = self._labels()
        first = sorted(labels, key=lambda i: labels[i])  # the child's devices first, in CUDA order
        gpus = [self._gpus[i] for i in first] + [g for g in self._gpus if g.index not in labels]
        views = tuple(
            self._read(g, f"cuda:{labels[g.index]}" if g.index in labels else f"nvml:{g.index}", now, pid)
            for g in gpus
        )
        return views, _status(note, gpus, views)

    def _labels(self) -> tuple[dict[int, int], str]:
        """``{NVML index: CUDA ordinal}`` for the GPUs every known numbering agrees on, and a note."""
        known = [g.uuid for g in self._gpus]
        source = _value(self._uuid_source)
        numberings = list(self._numberings) + ([tuple(source)] if source is not None else [])
        if not numberings:
            order, note = cuda_order(known, [g.name for g in self._gpus], self._environ)
            return {idx: pos for pos, idx in enumerate(order or ())}, note
        return agreed_labels([[_match(known, _gpu_uuid(u)) for u in n] for n in numberings])

    def _read(self, gpu: _Gpu, label: str, now: float, pid: int | None) -> GpuView:
        self._read_util(gpu, now)
        mem = self._memory(gpu)
        power = self._call(gpu, "power", "nvmlDeviceGetPowerUsage")
        limit = self._call(gpu, "limit", "nvmlDeviceGetEnforcedPowerLimit")
        if limit is None and "limit" in gpu.off:
            limit = self._call(gpu, "limit2", "nvmlDeviceGetPowerManagementLimit")
        temp = self._call(gpu, "temperature", "nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU)
        self._read_process(gpu, now, pid)
        lost = gpu.lost or gpu.denied  # no value for either; only ``lost`` is reported as lost
        return GpuView(
            index=gpu.index,
            label=label,
            name=gpu.name,
            util_percent=None if lost else gpu.util,
            util_history=tuple(gpu.history),
            samples=gpu.added,
            mem_used=None if mem is None else int(mem.used),
            mem_total=None if mem is None else int(mem.total),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            temperature_c=None if temp is None else float(temp),
            process_util_percent=None if lost else gpu.proc_util,
            process_mem=None if lost else gpu.proc_mem,
            lost=gpu.lost,
            uuid=gpu.uuid,
        )

    def _memory(self, gpu: _Gpu) -> Any:
        """``nvmlMemory_v2`` where the driver has it, else v1 (never a mix within one GPU)."""
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if version is not None and "memory_v2" not in gpu.off:
            mem = self._call(gpu, "memory_v2", "nvmlDeviceGetMemoryInfo", version)
            if mem is not None or "memory_v2" not in gpu.off:
                return self._keep_total(gpu, mem)
        return self._keep_total(gpu, self._call(gpu, "memory", "nvmlDeviceGetMemoryInfo"))

    @staticmethod
    def _keep_total(gpu: _Gpu, mem: Any) -> Any:
        if mem is not None:
            gpu.mem_total = int(mem.total)
        return mem

    def _read_util(self, gpu: _Gpu, now: float) -> None:
        nvml = self._nvml
        got = self._call(
            gpu,
            "samples",
            "nvmlDeviceGetSamples",
            nvml.NVML_GPU_UTILIZATION_SAMPLES,
            gpu.samples_ts,
            not_found=_NO_NEW,
        )
        if got is not None and got is not _NO_NEW:
            values = self._fresh_samples(gpu, *got)
            if values:
                gpu.history.extend(values)
                gpu.added += len(values)
                gpu.util, gpu.samples_t = sum(values) / len(values), now
                return
        elif got is None and "samples" not in gpu.off:
            return  # a transient failure: keep the value
        # no new sample (idle, or polled between two), or no sample buffer: the driver's current average
        self._read_rates(gpu, history="samples" in gpu.off or now - gpu.samples_t >= IDLE_AFTER)

    def _fresh_samples(self, gpu: _Gpu, vtype: int, samples: Sequence[Any]) -> list[float]:
        """The values in 0..100 of samples newer than the last seen timestamp (which advances)."""
        last, values = gpu.samples_ts, []
        for sample in samples:
            ts, value = int(sample.timeStamp), _sample_value(sample.sampleValue, vtype)
            if ts > last:
                gpu.samples_ts = max(gpu.samples_ts, ts)
                if 0.0 <= value <= 100.0:
                    values.append(value)
        return values

    def _read_rates(self, gpu: _Gpu, history: bool) -> None:
        """``nvmlDeviceGetUtilizationRates`` as the value (and a history entry when ``history``)."""
        rates = self._call(gpu, "rates", "nvmlDeviceGetUtilizationRates")
        value = None if rates is None else float(rates.gpu)
        if value is not None and 0.0 <= value <= 100.0:
            gpu.util = value
            if history:
                gpu.history.append(value)
                gpu.added += 1
        elif "rates" in gpu.off and "samples" in gpu.off:
            gpu.util = None

    def _read_process(self, gpu: _Gpu, now: float, pid: int | None) -> None:
        if pid != gpu.pid:  # a new child: forget the old one's values
            gpu.pid, gpu.proc_util, gpu.proc_mem, gpu.proc_mem_t = pid, None, None, float("-inf")
        if pid is None:
            return
        got = self._call(gpu, "process", "nvmlDeviceGetProcessUtilization", gpu.proc_ts, not_found=_NO_NEW)
        if isinstance(got, list):
            got = [s for s in got if int(s.timeStamp) > gpu.proc_ts and 0 <= s.smUtil <= 100]
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
            procs = self._running_processes(gpu)
            used = [p.usedGpuMemory for p in procs or () if p.pid == pid and p.usedGpuMemory is not None]
            gpu.proc_mem = sum(used) if used else None

    def _running_processes(self, gpu: _Gpu) -> list[Any] | None:
        """The plausible entries of the first process list this binding and driver both have; a list
        with misread entries moves on to the next entry point, or is said in the status."""
        while gpu.proc_list < len(PROCESS_LISTS):
            procs = self._call(gpu, "process_mem", PROCESS_LISTS[gpu.proc_list])
            if "process_mem" in gpu.off:  # missing here (or refused): the next entry point
                gpu.off.discard("process_mem")
                gpu.proc_list += 1
                continue
            if procs is None:
                return None  # transient
            kept = [p for p in procs if plausible(p, gpu.mem_total)]
            if len(kept) == len(procs) or gpu.proc_list + 1 == len(PROCESS_LISTS):
                gpu.misread = gpu.misread or len(kept) < len(procs)
                return kept
            gpu.proc_list += 1
        gpu.off.add("process_mem")
        return None

    def _call(self, gpu: _Gpu, metric: str, fn_name: str, *args: Any, not_found: Any = None) -> Any:
        """``nvml.<fn_name>(handle, *args)``, or None; turns metrics off and marks lost GPUs."""
        nvml = self._nvml
        if gpu.lost or gpu.denied or metric in gpu.off or nvml is None:
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
        except (
            nvml.NVMLError_NotSupported,
            nvml.NVMLError_FunctionNotFound,
            nvml.NVMLError_NoPermission,
            *_optional(nvml, "NVMLError_ArgumentVersionMismatch", "NVMLLibraryMismatchError"),
        ):
            gpu.off.add(metric)  # the mismatch error is an Exception, not an NVMLError (nvidia-ml-py 12/13)
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
    """The sample's value as the union member ``vtype`` names (not clamped: the caller discards)."""
    name = _VALUE_FIELDS[vtype] if 0 <= vtype < len(_VALUE_FIELDS) else "uiVal"
    return float(getattr(value, name))


def agreed_labels(numberings: Sequence[Sequence[int | None]]) -> tuple[dict[int, int], str]:
    """``{NVML index: CUDA ordinal}`` from CUDA numberings (NVML index or None per ordinal).

    A GPU is ``cuda:N`` when every numbering that lists it puts it at N and none puts another GPU at
    N; otherwise it keeps its NVML index, which all ranks share (the note says why).
    """
    where: dict[int, set[int]] = {}
    who: dict[int, set[int]] = {}
    for numbering in numberings:
        for pos, idx in enumerate(numbering):
            if idx is not None:
                where.setdefault(idx, set()).add(pos)
                who.setdefault(pos, set()).add(idx)
    labels = {idx: next(iter(p)) for idx, p in where.items() if len(p) == 1 and len(who[next(iter(p))]) == 1}
    note = "" if len(labels) == len(where) else "ranks number the GPUs differently: labelled by NVML index"
    return labels, note


def plausible(process: Any, mem_total: int | None) -> bool:
    """Whether a running-process entry can be real (a misread record has pid 0, a huge pid or memory)."""
    used = process.usedGpuMemory
    return 0 < process.pid < PID_LIMIT and (used is None or mem_total is None or 0 <= used <= mem_total)


def _gpu_uuid(uuid: str) -> str:
    """NVML's spelling of a CUDA device UUID (torch prints it without ``GPU-``)."""
    return uuid if uuid.upper().startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _optional(nvml: Any, *names: str) -> tuple[type, ...]:
    """The exception classes among ``names`` this binding has."""
    return tuple(c for c in (getattr(nvml, n, None) for n in names) if isinstance(c, type))


def _status(note: str, gpus: list[_Gpu], views: tuple[GpuView, ...]) -> str:
    """The labelling note, then lost, refused and misread GPUs."""
    lost = [v.label for v in views if v.lost]
    denied = [v.label for g, v in zip(gpus, views, strict=True) if g.denied]
    notes = [note, f"lost: {', '.join(lost)}" if lost else ""]
    notes += [f"no permission: {', '.join(denied)}" if denied else ""]
    notes += [f"{v.label}: {MISREAD}" for g, v in zip(gpus, views, strict=True) if g.misread]
    return "; ".join(n for n in notes if n)


def _value(source: Source) -> Any:
    return source() if callable(source) else source


def _text(value: Any) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
