"""Events of a Chrome trace from ``torch.profiler`` (Kineto), and what each kind of event means here.

Times are microseconds, as in the trace. Only complete events (``ph == "X"``) are kept: Kineto writes
every CPU op, runtime call and GPU op as one. Its ``cat: "Trace"`` event, the profiler's own window
(which may reach far past the recorded events), is not kept either; HTA drops it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from math import isfinite
from typing import Any, NamedTuple

#: Runtime/driver calls that enqueue work on a stream: HTA's runtime launch set
#: (``TraceSymbolTable.get_runtime_launch_events_query``, HTA 0.5.0), plus ``cuLaunchKernelEx``,
#: ``hipExtLaunchKernel`` and ``hipModuleLaunchKernel``, which HTA does not list (none of them occurs
#: in the shipped traces). ``cudaGraphLaunch`` is not one: a graph's kernels are not counted, as in HTA.
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipMemcpyAsync",
        "hipMemsetAsync",
        "hipMemcpyWithStream",
        "runFunction - job_prep_and_submit_for_execution",  # MTIA, in HTA's set
    }
)

#: Host calls that block the calling thread until the device has caught up (a sync point).
SYNC_NAMES = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipMemcpyWithStream",
    }
)

#: Categories of work that runs on a GPU stream (HTA's "kernels", memory ones included).
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

#: Categories of host-side work a sync point is attributed to.
OP_CATS = frozenset({"cpu_op", "python_function"})


class Event(NamedTuple):
    """One complete event: a CPU op, a runtime call, or a GPU op when ``stream`` is set."""

    name: str
    cat: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None

    @property
    def end(self) -> float:
        """When the event ends."""
        return self.ts + self.dur

    @property
    def is_launch(self) -> bool:
        """A host call that enqueues work on a stream."""
        return self.stream is None and self.name in LAUNCH_NAMES

    @property
    def is_sync(self) -> bool:
        """A host call that waits for the device."""
        return self.stream is None and self.name in SYNC_NAMES


def events_from_chrome(trace: dict[str, Any] | list[Any]) -> Iterator[Event]:
    """The complete events of a Chrome trace (``{"traceEvents": [...]}`` or the list itself).

    Events without a numeric ``ts`` are skipped; a missing or negative correlation id is ``None`` (the
    event then pairs with nothing). GPU ops need an integer ``args.stream``.
    """
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    for e in raw:
        if type(e) is not dict or e.get("ph") != "X" or e.get("cat") == "Trace":
            continue
        ts = e.get("ts")
        if type(ts) is int:  # the common cases first: this loop runs once per event
            try:
                ts = float(ts)
            except OverflowError:  # an integer past a float's range: no time
                continue
        elif type(ts) is not float or not isfinite(ts):
            ts = _number(ts)
            if ts is None:
                continue
        dur = e.get("dur")
        if type(dur) is int:
            try:
                dur = float(dur)
            except OverflowError:
                dur = 0.0
        elif type(dur) is not float or not isfinite(dur):
            dur = _number(dur) or 0.0
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        cat = e.get("cat") or ""
        if type(cat) is not str:
            cat = str(cat)
        stream = device = None
        if cat in GPU_CATS:
            stream = _whole(args.get("stream"))
            if stream is not None:
                device = _whole(args.get("device", e.get("pid")))
                device = -1 if device is None else device
        correlation = args.get("correlation")
        if type(correlation) is not int:
            correlation = _whole(correlation)
        if correlation is not None and correlation < 0:
            correlation = None
        name = e.get("name", "")
        yield Event(
            name if type(name) is str else str(name),
            cat,
            ts,
            dur,
            e.get("pid"),
            e.get("tid"),
            correlation,
            device,
            stream,
        )


def span(events: Iterable[Event]) -> tuple[float, float]:
    """``(first start, last end)`` of the events; ``(0, 0)`` when there are none."""
    first: float | None = None
    last: float | None = None
    for e in events:
        end = e.ts + e.dur
        if first is None or e.ts < first:
            first = e.ts
        if last is None or end > last:
            last = end
    return (first, last) if first is not None and last is not None else (0.0, 0.0)


def _number(value: Any) -> float | None:
    """A finite number from a JSON value (numbers, numeric strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        try:
            number = float(value)
        except (ValueError, OverflowError):
            return None
        return number if isfinite(number) else None
    return None


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
