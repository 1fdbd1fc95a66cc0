"""A fake of the part of ``cupti-python`` (``from cupti import cupti``) the agent uses, with real records.

Modelled on NVIDIA's binding (docs.nvidia.com/cupti-python, "bindings"; its samples; torch's own
``torch/profiler/_cupti_monitor*.py``, which uses it):

- ``activity_register_callbacks(requested, completed)``: ``requested()`` returns ``(buffer size in
  bytes, max records)``; ``completed(activities)`` receives one buffer's records as a list. Records
  reach it only when a buffer fills or on ``activity_flush_all(flag)``; with flag 0 only full buffers are
  delivered, with ``1`` (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) the partial one too. The callback runs on the
  flushing thread here (CUPTI uses its own thread or the flushing one).
- ``activity_enable(kind)`` / ``activity_disable(kind)``: records of a disabled kind are not produced;
  a kind listed in ``refuse`` raises ``cuptiError`` (e.g. ``ERROR_INSUFFICIENT_PRIVILEGES``, or
  ``ERROR_NOT_COMPATIBLE`` on a too-new driver).
- ``activity_enable_runtime_api(cbid, enable)`` / ``activity_enable_driver_api(cbid, enable)``
  (cuptiActivityEnableRuntimeApi/DriverApi, CUPTI 12.x on): records of a switched-off cbid are not
  produced. ``activity_enable(kind)`` of RUNTIME/DRIVER turns every cbid of that kind back on (as
  reported by users of the binding: the per-API filter must be set after enabling the kind). A value
  not in the cbid enum raises ``cuptiError(ERROR_INVALID_PARAMETER)``.
- ``subscribe(callback, userdata)`` returns a handle; while another client (``other_client``, e.g.
  Kineto, Nsight Systems) holds CUPTI it raises ``cuptiError`` with status
  ``ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`` (CUPTI docs: legacy single-subscriber mode, CUDA <= 13.2).
  ``enable_callback(1, handle, domain, cbid)`` arms one API callback, called as
  ``callback(userdata, domain, cbid, data)`` with ``data.callback_site`` ENTER, then EXIT, on the
  thread making the call (``api_call`` below plays such a call).
- ``cuptiError(status)``: ``.status`` is the CUptiResult number; the message names it.
- ``get_timestamp()``: CUPTI's clock, in ns.

The records are not simulated: :func:`records_from_trace` derives them from a real Kineto trace
(``tests/data/hta``, recorded on A100s): Kineto writes each CUPTI record it received as one trace event,
with its cbid (runtime/driver API), correlation id, device, stream and times (µs of CUPTI's ns clock).
The cbid enums hold the values those traces carry (and cupti_runtime_cbid.h's for cudaMemcpy,
cudaEventSynchronize, cudaThreadSynchronize); member names carry a version suffix as the real ones do.
"""

from __future__ import annotations

import enum
import gzip
import json
import threading
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np

#: Bytes one record takes in a buffer (CUpti_ActivityKernel9 is ~200 bytes; API records ~40).
RECORD_BYTES = 64


class ActivityKind(enum.IntEnum):
    """CUpti_ActivityKind values (cupti_activity.h)."""

    INVALID = 0
    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10


class CallbackDomain(enum.IntEnum):
    """CUpti_CallbackDomain values (cupti_callbacks.h)."""

    INVALID = 0
    DRIVER_API = 1
    RUNTIME_API = 2
    RESOURCE = 3
    SYNCHRONIZE = 4


class ApiCallbackSite(enum.IntEnum):
    API_ENTER = 0
    API_EXIT = 1


class Result(enum.IntEnum):
    """CUptiResult values (cupti_result.h)."""

    SUCCESS = 0
    ERROR_INVALID_PARAMETER = 1
    ERROR_INVALID_OPERATION = 7
    ERROR_NOT_COMPATIBLE = 14
    ERROR_NOT_INITIALIZED = 15
    ERROR_INVALID_KIND = 21
    ERROR_INSUFFICIENT_PRIVILEGES = 35
    ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39


class cuptiError(Exception):
    def __init__(self, status: int) -> None:
        self.status = int(status)
        super().__init__(f"{Result(status).name} ({int(status)})")


#: (name, cbid) of runtime calls: the values in the shipped traces' ``args.cbid``.
RUNTIME_CBIDS = {
    "cudaDriverGetVersion_v3020": 1,
    "cudaGetDeviceCount_v3020": 3,
    "cudaGetDeviceProperties_v3020": 4,
    "cudaPeekAtLastError_v3020": 11,
    "cudaMalloc_v3020": 20,
    "cudaFree_v3020": 22,
    "cudaHostAlloc_v3020": 27,
    "cudaHostGetDevicePointer_v3020": 28,
    "cudaMemcpy_v3020": 31,
    "cudaMemcpyAsync_v3020": 41,
    "cudaMemsetAsync_v3020": 51,
    "cudaGetSymbolAddress_v3020": 53,
    "cudaThreadSynchronize_v3020": 126,
    "cudaStreamSynchronize_v3020": 131,
    "cudaEventRecord_v3020": 135,
    "cudaEventSynchronize_v3020": 137,
    "cudaEventQuery_v3020": 138,
    "cudaStreamWaitEvent_v3020": 147,
    "cudaDeviceSynchronize_v3020": 165,
    "cudaStreamCreateWithFlags_v5000": 198,
    "cudaDeviceGetAttribute_v5000": 200,
    "cudaStreamGetPriority_v5050": 203,
    "cudaDeviceGetStreamPriorityRange_v5050": 205,
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6000": 210,
    "cudaLaunchKernel_v7000": 211,
    "cudaLaunchKernel_ptsz_v7000": 214,
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000": 251,
    "cudaFuncSetAttribute_v9000": 273,
    "cudaGraphLaunch_v10000": 311,
    "cudaStreamIsCapturing_v10000": 317,
    "cudaStreamGetCaptureInfo_v2_v11030": 409,
}
DRIVER_CBIDS = {"cuLaunchKernel": 307}

Runtime_api_trace_cbid = enum.IntEnum("Runtime_api_trace_cbid", RUNTIME_CBIDS)
Driver_api_trace_cbid = enum.IntEnum("Driver_api_trace_cbid", DRIVER_CBIDS)

_VALUES = {
    enum_cls: frozenset(int(m) for m in enum_cls)
    for enum_cls in (Runtime_api_trace_cbid, Driver_api_trace_cbid)
}
_GPU_KINDS = {
    "kernel": ActivityKind.CONCURRENT_KERNEL,
    "gpu_memcpy": ActivityKind.MEMCPY,
    "gpu_memset": ActivityKind.MEMSET,
}


# -- records as the binding makes them ---------------------------------------------------------------
#
# cupti-python 13's record classes (ActivityAPI, ActivityKernel10, ActivityMemcpy6, ActivityMemset4) hold
# one record in a one-element numpy record array, ``_data`` (a ``numpy.recarray`` of the binding's
# structured dtype), and each field is a property that reads ``self._data.<field>[0]`` as an int: every
# read goes through ``recarray.__getattribute__`` (2.6-3.5 µs a field on this project's CPU, with the
# real binding; ``_data.item(0)`` reads them all in 0.3-1.3 µs). Those costs showed on an H100 (py-spy:
# numpy's recarray in our reading and in the binding's building). The layouts below are the binding's
# dtypes (cupti-python 13.0.1: names, formats, offsets, item size; a nested struct as one byte), so that
# the fake's records cost what the binding's do to read.
#: ``(item size, "name:format:offset ...")`` per record class.
_API_LAYOUT = (
    40,
    "kind:<i4:0 cbid:<u4:4 start:<u8:8 end:<u8:16 process_id:<u4:24 thread_id:<u4:28 "
    "correlation_id:<u4:32 return_value:<u4:36",
)
_KERNEL_LAYOUT = (
    216,
    "kind:<i4:0 cache_config:|u1:4 shared_memory_config:|u1:5 registers_per_thread:<u2:6 "
    "partitioned_global_cache_requested:<i4:8 partitioned_global_cache_executed:<i4:12 "
    "start:<u8:16 end:<u8:24 completed:<u8:32 device_id:<u4:40 context_id:<u4:44 stream_id:<u4:48 "
    "grid_x:<i4:52 grid_y:<i4:56 grid_z:<i4:60 block_x:<i4:64 block_y:<i4:68 block_z:<i4:72 "
    "static_shared_memory:<i4:76 dynamic_shared_memory:<i4:80 local_memory_per_thread:<u4:84 "
    "local_memory_total:<u4:88 correlation_id:<u4:92 grid_id:<i8:96 name:<i8:104 "
    "reserved0:<i8:112 queued:<u8:120 submitted:<u8:128 launch_type:|u1:136 "
    "is_shared_memory_carveout_requested:|u1:137 shared_memory_carveout_requested:|u1:138 "
    "padding:|u1:139 shared_memory_executed:<u4:140 graph_node_id:<u8:144 "
    "shmem_limit_config:<i4:152 graph_id:<u4:156 p_access_policy_window:<i8:160 "
    "channel_id:<u4:168 channel_type:<i4:172 cluster_x:<u4:176 cluster_y:<u4:180 "
    "cluster_z:<u4:184 cluster_scheduling_policy:<u4:188 local_memory_total_v2:<u8:192 "
    "max_potential_cluster_size:<u4:200 max_active_clusters:<u4:204 is_device_launched:|u1:208 "
    "padding3:|V7:209",
)
_MEMCPY_LAYOUT = (
    96,
    "kind:<i4:0 copy_kind:|u1:4 src_kind:|u1:5 dst_kind:|u1:6 flags_:|u1:7 bytes:<u8:8 "
    "start:<u8:16 end:<u8:24 device_id:<u4:32 context_id:<u4:36 stream_id:<u4:40 "
    "correlation_id:<u4:44 runtime_correlation_id:<u4:48 pad:<u4:52 reserved0:<i8:56 "
    "graph_node_id:<u8:64 graph_id:<u4:72 channel_id:<u4:76 channel_type:<i4:80 "
    "is_device_launched:|u1:84 pad2:|V3:85 copy_count:<u8:88",
)
_MEMSET_LAYOUT = (
    88,
    "kind:<i4:0 value:<u4:4 bytes:<u8:8 start:<u8:16 end:<u8:24 device_id:<u4:32 "
    "context_id:<u4:36 stream_id:<u4:40 correlation_id:<u4:44 flags_:<u2:48 memory_kind:<u2:50 "
    "pad:<u4:52 reserved0:<i8:56 graph_node_id:<u8:64 graph_id:<u4:72 channel_id:<u4:76 "
    "channel_type:<i4:80 is_device_launched:|u1:84 pad2:|V3:85",
)


class BindingRecord:
    """A record as cupti-python holds it: ``_data``, a one-element ``numpy.recarray``; int properties."""

    __slots__ = ("_data",)
    dtype: np.dtype

    def __init__(self, **values: int) -> None:
        data = np.zeros(1, self.dtype).view(np.recarray)
        for name, value in values.items():
            data[name] = value
        self._data = data


def _record_class(name: str, layout: tuple[int, str]) -> type[BindingRecord]:
    itemsize, spec = layout
    fields = [(f, fmt, int(off)) for f, fmt, off in (item.split(":") for item in spec.split())]
    dtype = np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[1] for f in fields],
            "offsets": [f[2] for f in fields],
            "itemsize": itemsize,
        }
    )
    ns: dict[str, Any] = {"__slots__": (), "dtype": dtype}
    for field, fmt, _ in fields:
        if not fmt.startswith("|V"):
            ns[field] = property(lambda self, f=field: int(getattr(self._data, f)[0]))
    return type(name, (BindingRecord,), ns)


ActivityAPI = _record_class("ActivityAPI", _API_LAYOUT)
ActivityKernel10 = _record_class("ActivityKernel10", _KERNEL_LAYOUT)
ActivityMemcpy6 = _record_class("ActivityMemcpy6", _MEMCPY_LAYOUT)
ActivityMemset4 = _record_class("ActivityMemset4", _MEMSET_LAYOUT)
_GPU_CLASSES = {"kernel": ActivityKernel10, "gpu_memcpy": ActivityMemcpy6, "gpu_memset": ActivityMemset4}


class ByAttribute:
    """A record read by attribute only: each field through the numpy record array, as the binding's
    properties read it, with no ``_data`` to read at once (the reading before ``cupti_records.layout``)."""

    __slots__ = ("_d",)

    def __init__(self, record: BindingRecord) -> None:
        self._d = record._data

    kind = property(lambda self: int(self._d.kind[0]))
    cbid = property(lambda self: int(self._d.cbid[0]))
    correlation_id = property(lambda self: int(self._d.correlation_id[0]))
    start = property(lambda self: int(self._d.start[0]))
    end = property(lambda self: int(self._d.end[0]))
    device_id = property(lambda self: int(self._d.device_id[0]))
    stream_id = property(lambda self: int(self._d.stream_id[0]))


def _u32(value: Any) -> int:
    """A trace's pid/tid as CUPTI's uint32 field holds it (0 where the trace has none)."""
    return value & 0xFFFFFFFF if isinstance(value, int) else 0


def records_from_trace(path: str) -> list[BindingRecord]:
    """The CUPTI records a Kineto trace was made of, in the binding's field names, in the order CUPTI
    completes them (by end time: a record is written when its call returns or its GPU op ends).

    ``cuda_runtime``/``cuda_driver`` events become :class:`ActivityAPI` records (kind RUNTIME/DRIVER,
    ``cbid``, ``correlation_id``, ``process_id``, ``thread_id``); kernel/memcpy/memset events become
    :class:`ActivityKernel10`/``Memcpy6``/``Memset4`` records (``device_id``, ``stream_id``,
    ``correlation_id``; the name is a pointer in CUPTI's record, left 0). Times: the trace's µs back to ns.
    """
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or not isinstance(e.get("ts"), (int, float)):
            continue
        args, cat = e.get("args") or {}, e.get("cat")
        start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0))
        if cat in ("cuda_runtime", "cuda_driver") and "cbid" in args:
            kind = ActivityKind.RUNTIME if cat == "cuda_runtime" else ActivityKind.DRIVER
            out.append(
                ActivityAPI(
                    kind=int(kind),
                    cbid=int(args["cbid"]),
                    start=start,
                    end=end,
                    correlation_id=int(args.get("correlation", 0)),
                    process_id=_u32(e.get("pid")),
                    thread_id=_u32(e.get("tid")),
                    return_value=0,
                )
            )
        elif cat in _GPU_KINDS and isinstance(args.get("stream"), int):
            out.append(
                _GPU_CLASSES[cat](
                    kind=int(_GPU_KINDS[cat]),
                    start=start,
                    end=end,
                    correlation_id=int(args.get("correlation", 0)),
                    device_id=int(args.get("device", 0)),
                    stream_id=int(args["stream"]),
                    context_id=int(args.get("context", 0)),
                )
            )
    out.sort(key=lambda r: (r.end, r.start))
    return out


def _ns(us: float | int) -> int:
    """Microseconds (as Kineto writes them) to CUPTI's integer ns, exactly (epoch-scale ns exceed a
    float's 53 bits, so the whole part is multiplied as an int)."""
    whole = int(us)
    return whole * 1000 + round((us - whole) * 1000)


class FakeCupti:
    """One process's CUPTI, as the module ``cupti.cupti`` exposes it (use the instance as that module)."""

    ActivityKind = ActivityKind
    CallbackDomain = CallbackDomain
    ApiCallbackSite = ApiCallbackSite
    Result = Result
    cuptiError = cuptiError
    Runtime_api_trace_cbid = Runtime_api_trace_cbid
    Driver_api_trace_cbid = Driver_api_trace_cbid

    def __init__(self, *, other_client: str | None = None, refuse: dict[int, int] | None = None) -> None:
        self.other_client = other_client
        """Another CUPTI client holding the process (Kineto, Nsight Systems), or None."""
        self.refuse = dict(refuse or {})
        """``{kind: status}``: enabling ``kind`` raises ``cuptiError(status)``."""
        self.enabled: set[int] = set()
        self.api_off: dict[int, set[int]] = {
            int(ActivityKind.RUNTIME): set(),
            int(ActivityKind.DRIVER): set(),
        }
        """Per API kind, the cbids whose records are switched off."""
        self.requested: Callable[[], tuple[int, int]] | None = None
        self.completed: Callable[[list], None] | None = None
        self.subscribers: dict[int, tuple[Callable, Any]] = {}
        self.callbacks: set[tuple[int, int, int]] = set()
        """Armed API callbacks: ``(handle, domain, cbid)``."""
        self.now_ns = 0
        self._buffer: list[Any] = []
        self._capacity = 0
        self._lock = threading.Lock()
        self.flushes = 0
        self.buffers_delivered = 0
        self._next = 1

    # -- the binding's functions ----------------------------------------------------------------

    def subscribe(self, callback: Callable, userdata: Any) -> int:
        if self.other_client is not None or self.subscribers:
            raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        handle, self._next = self._next, self._next + 1
        self.subscribers[handle] = (callback, userdata)
        return handle

    def unsubscribe(self, handle: int) -> None:
        if self.subscribers.pop(handle, None) is None:
            raise cuptiError(Result.ERROR_INVALID_OPERATION)
        self.callbacks = {c for c in self.callbacks if c[0] != handle}

    def enable_callback(self, enable: int, handle: int, domain: int, cbid: int) -> None:
        if handle not in self.subscribers:
            raise cuptiError(Result.ERROR_INVALID_OPERATION)
        key = (handle, int(domain), int(cbid))
        (self.callbacks.add if enable else self.callbacks.discard)(key)

    def activity_register_callbacks(self, requested: Callable, completed: Callable) -> None:
        if self.other_client is not None:
            raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        self.requested, self.completed = requested, completed

    def activity_enable(self, kind: int) -> None:
        kind = int(kind)
        if kind in self.refuse:
            raise cuptiError(self.refuse[kind])
        if self.other_client is not None:
            raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        self.enabled.add(kind)
        if kind in self.api_off:
            self.api_off[kind].clear()

    def activity_enable_runtime_api(self, cbid: int, enable: int) -> None:
        self._api_switch(ActivityKind.RUNTIME, Runtime_api_trace_cbid, cbid, enable)

    def activity_enable_driver_api(self, cbid: int, enable: int) -> None:
        self._api_switch(ActivityKind.DRIVER, Driver_api_trace_cbid, cbid, enable)

    def _api_switch(self, kind: int, cbids: Any, cbid: int, enable: int) -> None:
        if int(cbid) not in _VALUES[cbids]:
            raise cuptiError(Result.ERROR_INVALID_PARAMETER)
        (self.api_off[int(kind)].discard if enable else self.api_off[int(kind)].add)(int(cbid))

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(int(kind))

    def activity_flush_all(self, flag: int) -> None:
        self.flushes += 1
        with self._lock:
            buffer = self._buffer if flag else []
            if flag:
                self._buffer = []
        if buffer:
            self._deliver(buffer)

    def get_timestamp(self) -> int:
        return self.now_ns

    # -- what the process does (the test drives it) ---------------------------------------------

    def play(self, records: Iterable[Any]) -> None:
        """CUDA completes these records (in order of their ends; the clock moves to each end): enabled
        kinds go into the buffer, a full buffer is delivered."""
        for r in records:
            self.now_ns = max(self.now_ns, r.end)
            if r.kind not in self.enabled or self.completed is None:
                continue
            off = self.api_off.get(r.kind)
            if off and r.cbid in off:
                continue
            with self._lock:
                if not self._capacity:
                    size, _max = self.requested() if self.requested else (8 << 20, 0)
                    self._capacity = max(1, size // RECORD_BYTES)
                self._buffer.append(r)
                full = self._buffer if len(self._buffer) >= self._capacity else None
                if full is not None:
                    self._buffer = []
            if full is not None:
                self._deliver(full)

    def api_call(self, domain: int, cbid: int, **fields: Any) -> None:
        """The calling thread makes an API call: armed callbacks run at its entry and exit."""
        for site in (ApiCallbackSite.API_ENTER, ApiCallbackSite.API_EXIT):
            for handle, (callback, userdata) in list(self.subscribers.items()):
                if (handle, int(domain), int(cbid)) in self.callbacks:
                    data = SimpleNamespace(callback_site=int(site), **fields)
                    callback(userdata, int(domain), int(cbid), data)

    def _deliver(self, buffer: list[Any]) -> None:
        self.buffers_delivered += 1
        if self.completed is not None:
            self.completed(list(buffer))
