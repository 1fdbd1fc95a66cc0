"""CUDA launch queues from CUPTI activity records: no Python per op, depth exact in kernels.

The default CUDA path of ``torchpar-top run`` (``--every-op`` keeps the function-mode
:class:`~torchpar_top.probes.agent.cuda_launch.LaunchCounter`). NVIDIA's ``cupti-python`` binding
(optional: ``pip install torchpar-top[cuda]``, imported only here and only once the user's code has
initialised CUDA) asks CUPTI for activity records of runtime (and driver) API calls, kernels, memcpys and
memsets. CUPTI writes them in C into buffers; the completed-buffer callback only keeps each buffer, and
the sampler thread, once per sample, flushes, converts the records
(:mod:`~torchpar_top.probes.agent.cupti_records`) in chunks with a GIL yield between them, and analyses:
no Python runs on the frontend per op. The records go to the same analysis as
``replay`` (:func:`~torchpar_top.analysis.queue_series`): ``L`` runtime launches, ``S`` GPU starts,
joined by correlation id, per ``(device, stream)``. The depth is exact up to the settled time (see
:mod:`cupti_records`), which trails the present by about the queue's drain time.

Why CUPTI activity and not torch's Kineto in rolling windows (``torch.profiler`` started and stopped every
second or so). Both see the same thing: Kineto is itself a CUPTI activity client, and its trace events
are these records. But a Kineto window also turns on torch's own op recording (a C++ callback per op,
``record_function`` per module call with ``with_stack``), builds a whole trace in memory and, to analyse
it, post-processes every event (``export_chrome_trace`` or ``kineto_results.events()``) in Python; it
sees nothing between windows; each start and stop costs milliseconds on the frontend (``_enable_profiler``
and ``_disable_profiler`` run on the calling thread, and stop synchronizes the device). The user's own
``torch.profiler`` conflicts with both the same way (one CUPTI client). The activity API alone records
continuously, costs the runtime per API call and kernel in C, and leaves torch untouched; it needs
``cupti-python``, hence the optional extra and the fallback. Kineto windows remain the ``h`` key's tool.

Sync points on CUDA come from the runtime's synchronising calls themselves: a CUPTI API callback armed
for those cbids only (:data:`SYNC_CALLS`: device, stream and event synchronize, blocking memcpy) runs a
little Python on the calling thread at each, and charges it to the user's source line (the first frame
outside torch and torchpar_top). ``.item()``, ``.cpu()`` and the like reach it as the
``cudaStreamSynchronize`` torch makes after its copy. A few per step: affordable.

Standing aside. CUPTI has one activity client per process on CUDA <= 13.2 (legacy mode), and Kineto,
``torch.profiler``'s backend, is one. So before the user's profiler (or the agent's own ``h`` window)
prepares or enables Kineto, the monitor flushes, disables its kinds and unsubscribes; it subscribes
again after the profiler is disabled (wrapping ``torch.autograd.profiler._prepare_profiler``,
``_enable_profiler`` and ``_disable_profiler``, the calls every torch profiler context makes). A
profiler found enabled some other way (``torch.autograd.profiler._is_profiler_enabled``) is stood aside
from at the next sample. While a CUDA graph is captured (:class:`CaptureGuard`) nothing is flushed and
launches made during the capture are dropped (recorded into the graph, never run). Standing aside is
said in the log and in each CUDA row's ``note``. If CUPTI cannot be had again (another client kept
it), ``on_lost`` is called: the agent falls back to the launch counter and says so.

Overhead: CUPTI's own, in C, per API call and kernel; the binding's, one Python object per record (made
by ``cupti-python`` before our callback sees the list); ours, the conversion and analysis on the sampler
thread, measured by ``benchmarks/bench_cupti_records.py`` over the A100 records (about 1 µs per record,
several µs per launch counting the API records skipped, on this project's CPU). That Python holds the
GIL while it runs, so in a launch-bound loop it can still slow the frontend, though not per op and not on
its thread; ``benchmarks/gpu_check.py`` measures a launch-bound loop under ``run`` against plain.
Untested on hardware: verified against ``tests/fakes/fake_cupti.py``, whose records are real A100 ones.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable

from torchpar_top.analysis import QUEUE_CAP
from torchpar_top.contract.messages import ExecutorRow
from torchpar_top.contract.vocab import Counted, ExecutorKind, Quantity
from torchpar_top.probes.agent.cupti_records import Key, RecordConverter, RecordQueues
from torchpar_top.probes.agent.executor import Executor

#: Runtime calls that block the calling thread until the device caught up (sync points).
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cudaThreadSynchronize", "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyToSymbol",
              "cudaMemcpyFromSymbol")
#: Activity kinds without which there is no queue (their refusal means no CUPTI path).
ESSENTIAL_KINDS = ("RUNTIME", "CONCURRENT_KERNEL")
#: Kinds that add launches (driver: Triton's cuLaunchKernel) and copies; refused ones are named.
OPTIONAL_KINDS = ("MEMCPY", "MEMSET", "DRIVER")
#: Bytes per activity buffer asked of CUPTI (``buffer_requested``); 0 = no record limit.
BUFFER_BYTES = 4 << 20
#: Records converted between two GIL yields (about 0.3-0.6 ms of Python on this project's machine).
CHUNK = 512

PROFILER_NOTE = "torch.profiler active"
CAPTURE_NOTE = "CUDA graph capture in progress"


class CuptiUnavailable(RuntimeError):
    """CUPTI cannot be used here: ``str(exc)`` says why, in one line."""


def load_cupti() -> Any:
    """NVIDIA's binding, ``cupti.cupti``; :class:`CuptiUnavailable` when it is not installed."""
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install raising anything
        raise CuptiUnavailable(f"cupti-python not importable ({type(exc).__name__}: {exc}); "
                               "install it with `pip install torchpar-top[cuda]`") from exc
    return cupti


def describe(exc: BaseException) -> str:
    """A CUPTI error in one line, naming its status where the binding gives one."""
    status = getattr(exc, "status", None)
    text = str(exc) or type(exc).__name__
    if status is not None and str(status) not in text:
        text = f"{text} (status {status})"
    if "MULTIPLE_SUBSCRIBERS" in text:
        text += ": another CUPTI client (torch.profiler/Kineto, Nsight Systems) holds this process"
    elif "INSUFFICIENT_PRIVILEGES" in text:
        text += ": profiling is restricted to admin users on this machine"
    return f"CUPTI: {text}"


class CuptiStream(Executor):
    """One CUDA stream seen in CUPTI's records: ``Q = L - S`` in kernels at the settled time."""

    kind = ExecutorKind.CUDA_STREAM
    quantity = Quantity.DEPTH
    counts = Counted.KERNELS

    def __init__(self, name: str, key: Key, monitor: "CuptiMonitor") -> None:
        super().__init__(name, QUEUE_CAP)
        self.key, self._m = key, monitor
        self.at_cap = 0.0
        """Share of the last settled span this stream spent at the cap (a launch would block)."""

    def row(self, t0: float, t1: float) -> tuple[ExecutorRow, list[tuple[float, float]]]:
        """The base row with the time at the cap as ``blocked`` and the monitor's note."""
        row, busy = super().row(t0, t1)
        return replace(row, blocked=min(1.0, self.at_cap), note=self._m.note()), busy

    def synchronize(self) -> None:
        """Nothing: the agent's CUDA device sync (``UserCode``) waits for the device."""


class ProfilerGuard:
    """Calls ``before()`` ahead of every torch profiler start and ``after()`` once it is disabled."""

    NAMES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")

    def __init__(self) -> None:
        self._wrapped: list[tuple[Any, str, Any, Any]] = []

    def install(self, before: Callable[[], None], after: Callable[[], None]) -> None:
        """Wrap the three calls in ``torch.autograd.profiler`` (where torch's contexts look them up)."""
        import torch.autograd.profiler as module

        for name in self.NAMES:
            original = getattr(module, name, None)
            if original is None:
                continue
            wrapper = _after(original, after) if name == "_disable_profiler" else _before(original, before)
            self._wrapped.append((module, name, original, wrapper))
            setattr(module, name, wrapper)

    def uninstall(self) -> None:
        """Put the originals back (where nobody replaced the wrappers since)."""
        for module, name, original, wrapper in reversed(self._wrapped):
            if getattr(module, name, None) is wrapper:
                setattr(module, name, original)
        self._wrapped = []


def _before(original: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            hook()
        except Exception:  # noqa: BLE001 - never break the user's profiler
            pass
        return original(*args, **kwargs)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _after(original: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            try:
                hook()
            except Exception:  # noqa: BLE001
                pass
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _torch_profiler_enabled() -> bool:
    """Whether a torch profiler is on: torch's Python flag (set by its profiler contexts) or the
    autograd profiler's own state (``torch._C._autograd._profiler_enabled``); False where torch lacks both."""
    module = sys.modules.get("torch.autograd.profiler")
    if module is not None and getattr(module, "_is_profiler_enabled", False):
        return True
    torch = sys.modules.get("torch")
    enabled = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_profiler_enabled", None)
    try:
        return bool(enabled()) if enabled is not None else False
    except Exception:  # noqa: BLE001
        return False


class CuptiMonitor:
    """The agent's CUDA part on CUPTI records: executors per stream, sync points, standing aside."""

    def __init__(self, cupti: Any, *, add: Callable[[Any], Any], log: Callable[[str], None],
                 syncpoints: Any = None, capture: Any = None, rank: int = 0,
                 clock: Callable[[], float] = time.perf_counter,
                 uuids: Callable[[], list[str]] | None = None,
                 on_lost: Callable[[str], None] | None = None,
                 profiler_enabled: Callable[[], bool] = _torch_profiler_enabled) -> None:
        self.cupti, self._add, self._log, self.syncpoints = cupti, add, log, syncpoints
        self.capture = capture
        """Anything with ``active`` (captures in progress) and ``listeners``; a CaptureGuard."""
        self.converter = RecordConverter(cupti)
        self.queues = RecordQueues(rank=rank)
        self.streams: dict[Key, CuptiStream] = {}
        self.aside: str | None = None
        """Why the monitor stands aside now (None while it records)."""
        self.lost: str | None = None
        """Why CUPTI could not be had again after standing aside (the launch counter took over)."""
        self.kinds: list[int] = []
        self.refused: list[str] = []
        """Optional kinds CUPTI refused (named in the log)."""
        self.api_frames = 0
        """Python frames between a runtime API call and :meth:`_on_api` (0: CUPTI calls it from C)."""
        self._clock, self._uuids, self._on_lost = clock, uuids, on_lost
        self._profiler_enabled = profiler_enabled
        self._handle: Any = None
        self._lock = threading.Lock()
        self._state = threading.RLock()
        """Held while recording starts, stops or is sampled (the frontend and the sampler both may)."""
        self._offset = 0.0
        self._capture_t0: float | None = None
        self._sync_cbids: dict[int, str] = {}
        self._guard = ProfilerGuard()
        self.buffers = 0
        """Buffers of records received."""
        self.closed = False
        self._inbox: deque[list] = deque()
        """Buffers received and not yet converted (CUPTI's thread appends, the sampler drains)."""

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe, register the buffer callbacks, enable the kinds; install the guards.

        A torch profiler already running holds CUPTI: then the monitor starts standing aside and
        subscribes once the profiler stops (the next sample after, or its ``_disable_profiler``).

        Raises:
            CuptiUnavailable: CUPTI refused (another client, no permission, an incompatible driver).
        """
        if self._profiler_enabled():
            self.aside = PROFILER_NOTE
            self._log(f"CUDA launch queues: standing aside ({PROFILER_NOTE}); CUPTI is taken when it ends")
        else:
            self._subscribe()
        self._calibrate()
        self._guard.install(self._profiler_starts, self._profiler_stopped)
        if self.capture is not None and hasattr(self.capture, "listeners"):
            self.capture.listeners.append(self._capture_changed)

    def _subscribe(self) -> None:
        c = self.cupti
        try:
            self._handle = c.subscribe(self._on_api, None)
            for cbid, name in self.converter.runtime_names.items():
                if name in SYNC_CALLS:
                    c.enable_callback(1, self._handle, c.CallbackDomain.RUNTIME_API, cbid)
                    self._sync_cbids[cbid] = name
            c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            self.kinds, self.refused = [], []
            for name in ESSENTIAL_KINDS:
                kind = int(getattr(c.ActivityKind, name))
                c.activity_enable(kind)
                self.kinds.append(kind)
            for name in OPTIONAL_KINDS:
                try:
                    kind = int(getattr(c.ActivityKind, name))
                    c.activity_enable(kind)
                    self.kinds.append(kind)
                except Exception as exc:  # noqa: BLE001 - the binding's cuptiError, or no such kind
                    self.refused.append(f"{name} ({describe(exc)})")
        except Exception as exc:  # noqa: BLE001 - cuptiError from any step
            self._unsubscribe()
            raise CuptiUnavailable(describe(exc)) from exc

    def _unsubscribe(self) -> None:
        """Disable our kinds and give CUPTI up (each step tolerates what is already undone)."""
        c = self.cupti
        for kind in self.kinds:
            try:
                c.activity_disable(kind)
            except Exception:  # noqa: BLE001
                pass
        self.kinds = []
        if self._handle is not None:
            try:
                c.unsubscribe(self._handle)
            except Exception:  # noqa: BLE001
                pass
            self._handle = None

    def _calibrate(self) -> None:
        """CUPTI's clock (ns) against the host clock (s), read back to back."""
        t0 = self._clock()
        ns = self.cupti.get_timestamp()
        t1 = self._clock()
        self._offset = (t0 + t1) / 2 - ns / 1e9

    def host_time(self, us: float) -> float:
        """A CUPTI time (µs) on the host clock (s)."""
        return us / 1e6 + self._offset

    def close(self) -> None:
        """Flush, stop recording, unwrap the profiler calls."""
        with self._state:
            if self.aside is None:
                self._flush()
            self._unsubscribe()
            self.closed = True  # CUPTI keeps the callbacks registered: later buffers are dropped
        self._guard.uninstall()
        if self.capture is not None and self._capture_changed in getattr(self.capture, "listeners", []):
            self.capture.listeners.remove(self._capture_changed)
            if hasattr(self.capture, "uninstall"):
                self.capture.uninstall()

    def uuids(self) -> list[str]:
        """The devices' UUIDs (as the agent's samples carry them)."""
        return self._uuids() if self._uuids is not None else []

    # -- CUPTI's callbacks --------------------------------------------------------------------------

    def _buffer_requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities: list) -> None:
        """One buffer (on CUPTI's or the flushing thread): kept for the sampler, nothing per record here."""
        if not self.closed:
            self._inbox.append(activities)
            self.buffers += 1

    def _drain(self) -> None:
        """Convert the buffers received into the queues, :data:`CHUNK` records at a time, letting other
        threads (the frontend) have the GIL between chunks, so that no thread waits long for it."""
        while self._inbox:
            records = self._inbox.popleft()
            for i in range(0, len(records), CHUNK):
                try:
                    events = self.converter.events(records[i:i + CHUNK])
                except Exception as exc:  # noqa: BLE001 - a record the converter cannot read
                    self._log(f"CUPTI records dropped: {type(exc).__name__}: {exc}")
                    break
                with self._lock:
                    self.queues.add(events)
                time.sleep(0)

    def _on_api(self, userdata: Any, domain: Any, cbid: Any, data: Any) -> None:
        """A synchronising runtime call is entered: a sync point at the caller's source line."""
        try:
            if int(getattr(data, "callback_site", 0)) != 0 or self.syncpoints is None or self.aside:
                return
            name = self._sync_cbids.get(int(cbid))
            if name is not None:
                self.syncpoints.hit_frame(name, sys._getframe(1 + self.api_frames))
        except Exception:  # noqa: BLE001 - never raise into the user's CUDA call
            pass

    # -- standing aside ---------------------------------------------------------------------------

    def _profiler_starts(self) -> None:
        if self.aside is None:
            self.stand_aside(PROFILER_NOTE)

    def _profiler_stopped(self) -> None:
        if self.aside == PROFILER_NOTE:
            self.resume()

    def stand_aside(self, reason: str) -> None:
        """Flush what was recorded and give CUPTI up until :meth:`resume`; say so."""
        with self._state:
            self._flush()
            self._unsubscribe()
            self.aside = reason
        self._log(f"CUDA launch queues: standing aside ({reason}): CUPTI is left to it; "
                  "queue figures are frozen until it ends")

    def resume(self) -> None:
        """Record again after standing aside; when CUPTI cannot be had, ``on_lost`` (once)."""
        try:
            with self._state:
                self._subscribe()
        except CuptiUnavailable as exc:
            self.aside = self.lost = str(exc)
            self._log(f"CUDA launch queues: CUPTI not available again ({exc})")
            if self._on_lost is not None:
                self._on_lost(str(exc))
            return
        self.aside = None
        self._log("CUDA launch queues: recording CUPTI activity again")

    def _capture_changed(self, active: bool) -> None:
        """A CUDA graph capture began or ended (called by the capture guard, on the capturing thread).

        At its end, launches made during it whose kernels were not seen are dropped: recorded into the
        graph, never run. A launch another thread made meanwhile onto a busy stream that is still queued
        then is dropped too (CUPTI's thread ids are not matched to the capturing thread here), and its
        kernel is counted in neither L nor S (the depth is unaffected).
        """
        now = self.cupti.get_timestamp() / 1000
        if active and self._capture_t0 is None:
            self._capture_t0 = now
        elif not active and self._capture_t0 is not None:
            t0, self._capture_t0 = self._capture_t0, None
            with self._state:  # not while the sampler converts and analyses
                self._flush()
                self._drain()
                with self._lock:
                    self.queues.drop_launches_between(t0, now)

    def note(self) -> str | None:
        """What the rows say about their source now (None while recording normally)."""
        if self.lost:
            return f"CUPTI lost: {self.lost}"
        if self.aside:
            return f"standing aside: {self.aside}"
        if self.capture is not None and getattr(self.capture, "active", 0):
            return f"standing aside: {CAPTURE_NOTE}"
        return None

    # -- sampling ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        try:
            self.cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: the partial buffer too
        except Exception:  # noqa: BLE001
            pass

    def sample_part(self, t0: float, t1: float) -> dict[str, Any]:
        """Sample part (runs first in each sample): bring the CUDA rows up to date."""
        self.refresh()
        return {}

    def refresh(self) -> None:
        """Flush, analyse what settled, update the rows; nothing while standing aside or capturing."""
        with self._state:
            self._refresh()

    def _refresh(self) -> None:
        if self.aside is None and self._profiler_enabled():
            self.stand_aside(PROFILER_NOTE + " (started without torch's profiler calls)")
        if self.aside is not None and self.aside.startswith(PROFILER_NOTE) and not self.lost \
                and not self._profiler_enabled():
            self.resume()
        if self.aside is not None or (self.capture is not None and getattr(self.capture, "active", 0)):
            return
        now = self.cupti.get_timestamp() / 1000
        self._flush()
        self._drain()
        with self._lock:
            q = self.queues
            since = max(q.settled, q.since)
            q.update(now)
            for key in q.keys():
                ex = self.streams.get(key)
                if ex is None:
                    ex = self.streams[key] = self._add(CuptiStream(self._name(key), key, self))
                ex.launched, ex.started = q.launched(key), q.started(key)
                ex.completed = ex.started
                span = q.settled - q.since
                ex.at_cap = q.time_at_cap(key) / span if span > 0 else 0.0
                for a, b in sorted(q.busy(key, since, q.settled)):
                    ex.activity.add(self.host_time(a), self.host_time(b))

    def _name(self, key: Key) -> str:
        device, stream = key
        return f"cuda:{device} stream {stream}"

    @property
    def lag(self) -> float:
        """Seconds the settled time trails the last flush (the queue is shown as of then)."""
        q = self.queues
        return max(0.0, (q.newest - q.settled) / 1e6) if q.settled > float("-inf") else 0.0
