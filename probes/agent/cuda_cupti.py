"""CUDA launch queues from CUPTI activity records: no Python per op, depth exact in kernels.

The default CUDA path of ``torchpar-top run`` (``--every-op`` keeps the function-mode
:class:`~torchpar_top.probes.agent.cuda_launch.LaunchCounter`). NVIDIA's ``cupti-python`` binding
(optional: ``pip install torchpar-top[cuda]``, imported only here and only once the user's code has
initialised CUDA) asks CUPTI for activity records of the launching runtime (and driver) API calls,
kernels, memcpys and memsets; every other API call is switched off in CUPTI (``activity_enable_runtime_api``
/ ``activity_enable_driver_api``), so its records are never made. CUPTI writes them in C into buffers;
the completed-buffer callback only keeps each buffer, and the sampler thread, once per sample, flushes,
reads the records into per-stream launch and start times
(:mod:`~torchpar_top.probes.agent.cupti_records`) in chunks with a GIL yield between them, and settles:
no Python runs on the frontend per op. The definition is the one ``replay`` uses
(:func:`~torchpar_top.analysis.queue_series`, HTA's): ``L`` launches, ``S`` GPU starts, joined by
correlation id, per ``(device, stream)``, kept incrementally and checked equal to it by test. The depth
is exact up to the settled time (see :mod:`cupti_records`), which trails the present by about the
queue's drain time.

Recording windows (``duty`` < 1, ``run --cupti-duty``, :data:`DEFAULT_DUTY`): the Python per record is
what remains of the cost, so CUPTI records during one sample interval in ``cycle``. A window opens at a
sample (the queues start over: nothing before it is known; GPU op kinds enabled before the launch kinds,
then the per-API switch again) and closes at the next: launch records stop (``end_window``: nothing
after it settles), their GPU ops' records are waited for up to ``drain_s`` (sleeping, GIL released),
then GPU op records stop and launches still without one are dropped. Within a window a stream's depth is
exact from the GPU start of one of the window's launches on: a stream runs its work in launch order, so
every launch made before the window has started by then and adds as much to ``S`` as to ``L``
(``RecordQueues.valid_from``; checked against ``queue_series`` of the whole trace by test). The rows show
the latest window's depth, say *sampled*, and their counts carry on from window to window (they count
the launches seen in windows). Sync points come from the callback API and are not windowed.

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

Overhead: CUPTI's own, in C, per launch call and GPU op; the binding's, one Python object per record
(made by ``cupti-python`` before our callback sees the list: two per launch once the other API calls are
switched off); ours, reading and settling on the sampler thread, measured by
``benchmarks/bench_cupti_records.py`` over the A100 records (docs/benchmarks.md: about 3.2 µs per
recorded launch for reading and settling, 4.3 µs for the whole monitor, on this project's CPU,
with records that hold their fields as the binding's do; ~0.5 µs per launch on average with the
default windows). That Python holds the GIL while it runs, so in a launch-bound loop it can
still slow the frontend, though not per op and not on its thread; ``benchmarks/gpu_check.py`` measures
a launch-bound loop under ``run`` against plain, and reports the records per launch that reached Python.

On an H100 (torch 2.11, cupti-python 13.0.1, ``gpu_check.py``'s ``cupti_run``, 2026-11-26) the launches
per stream equalled the profiler's exactly, but a loop of ``x.add_(1)`` at 150k launches/s ran 0.62-0.72x
of its plain speed under ``run`` at the default duty (0.66-0.80x with cupti-python hidden: the launch
counter's path). A py-spy record of it: the sampler thread converting records 14 % of the samples, the
binding building its record objects on CUPTI's thread as much again (each record is backed by a numpy
record array: every field read goes through ``recarray.__getattribute__``), both holding the GIL the
frontend needs. The fakes' records were plain objects, so the per-record cost measured here was several
times too low; they now hold their fields as the binding does (``tests/fakes/fake_cupti.py``), and the
queue reads each record's fields in one ``_data.item(0)`` (``cupti_records.layout``): 3.6 against 31 µs
a recorded launch (``bench_cupti_binding.py``). The binding's building stays: with cupti-python 13.0.1 on
this project's CPU, ``from_ptr`` takes 3.8 µs for a launch record and 27 µs for a kernel record
(``benchmarks/bench_cupti_binding.py``, with the real binding, no GPU needed). Hence
the governor: after each recording window the monitor adds up the CPU time the window's records cost
(``time.thread_time``: the sampler thread around the refresh that reads them, and each thread that
delivered buffers, CUPTI's own, since its previous buffer) and stretches the cycle
(:attr:`CuptiMonitor.cycle`, never below the one ``duty`` asks for, at most :data:`MAX_CYCLE`) so that
the records cost at most :data:`CPU_BUDGET` of the wall time; it says so in the log and the rows'
note. On an H200 (``gpu_check.py``, 2026-11-26) the governor stretched the cycle to 43-45 and the loop
still ran at 0.63x of plain: once CUPTI's activity API has been enabled in a process, disabling every
kind leaves a launch-bound loop at 0.52-0.67x of plain (the callback API alone costs 0-2 %;
``docs/hardware/h200-2026-11-26-diagnostics.txt``; on 2026-11-27, one process: 0.87x,
``h200-2026-11-27-diagnostics.txt``), so the first window leaves most of the cost behind whatever the
duty. Kineto detaches CUPTI (``cuptiFinalize`` from an API exit callback) for this; not tried here. The
positional reading is untested on hardware.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchpar_top.analysis import QUEUE_CAP
from torchpar_top.contract.messages import ExecutorRow
from torchpar_top.contract.vocab import Counted, ExecutorKind, Quantity
from torchpar_top.probes.agent.activity import MERGE_GAP
from torchpar_top.probes.agent.cupti_records import Key, RecordConverter, RecordQueues
from torchpar_top.probes.agent.executor import Executor

#: Runtime calls that block the calling thread until the device caught up (sync points).
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
)
#: Activity kinds without which there is no queue (their refusal means no CUPTI path).
ESSENTIAL_KINDS = ("RUNTIME", "CONCURRENT_KERNEL")
#: Kinds that add launches (driver: Triton's cuLaunchKernel) and copies; refused ones are named.
OPTIONAL_KINDS = ("MEMCPY", "MEMSET", "DRIVER")
#: Logged once when the governor first stretches the cycle: the records are costly, so the loop launches
#: many kernels a second, and where launching limits it CUPTI costs it between windows too
#: (``docs/hardware/h200-2026-11-26-diagnostics.txt``).
LAUNCH_BOUND_HINT = (
    "CUDA launch queues: this loop launches many kernels a second; where launching is what limits it, "
    "CUPTI slows it between recording windows too (on an H200 a launch-bound loop ran at 0.52-0.67x of "
    "plain once CUPTI had recorded one day, 0.87x another): `torchpar-top run --no-queues` leaves the "
    "launch queues unwatched"
)
#: Share of sample intervals CUPTI records in by default (``run --cupti-duty``), from the measured Python
#: cost per recorded launch of the whole monitor (``benchmarks/bench_cupti_records.py``: 3-4.4 µs on this
#: project's loaded CPU) against the issue's budget, 3 % of a launch-bound frontend's 5 µs per launch:
#: 0.15 / 3-4.4 = 0.034-0.05. One interval in 20 (the rows' depth refreshes every 4 s at ``run``'s 5 Hz).
DEFAULT_DUTY = 0.05
#: The share of the wall time the records may cost (the binding building them, us reading them: both
#: measured): the cycle is stretched past the one ``duty`` asks for to keep under it.
CPU_BUDGET = 0.02
#: The longest cycle the governor sets (sample intervals: two minutes at ``run``'s 5 Hz).
MAX_CYCLE = 600
#: The governor changes the cycle only when the one it wants differs by more than this factor.
CYCLE_HYSTERESIS = 1.25
#: Bytes per activity buffer asked of CUPTI (``buffer_requested``); 0 = no record limit.
BUFFER_BYTES = 4 << 20
#: Records read between two GIL yields (about 0.2-0.5 ms of Python on this project's machine).
CHUNK = 512

PROFILER_NOTE = "torch.profiler active"
CAPTURE_NOTE = "CUDA graph capture in progress"


class CuptiUnavailable(RuntimeError):
    """CUPTI cannot be used here: ``str(exc)`` says why, in one line."""


def load_cupti() -> Any:
    """NVIDIA's binding, ``cupti.cupti``; :class:`CuptiUnavailable` when it is not installed."""
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except Exception as exc:
        raise CuptiUnavailable(
            f"cupti-python not importable ({type(exc).__name__}: {exc}); "
            "install it with `pip install torchpar-top[cuda]`"
        ) from exc
    return cupti


def _outside_python() -> bool:
    """The calling thread was started outside Python (CUPTI's own worker thread): Python calls it a
    dummy thread."""
    return type(threading.current_thread()).__name__ == "_DummyThread"


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

    def __init__(self, name: str, key: Key, monitor: CuptiMonitor) -> None:
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
        with contextlib.suppress(Exception):
            hook()
        return original(*args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _after(original: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                hook()

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
    except Exception:
        return False


class CuptiMonitor:
    """The agent's CUDA part on CUPTI records: executors per stream, sync points, standing aside."""

    def __init__(
        self,
        cupti: Any,
        *,
        add: Callable[[Any], Any],
        log: Callable[[str], None],
        syncpoints: Any = None,
        capture: Any = None,
        rank: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        uuids: Callable[[], list[str]] | None = None,
        on_lost: Callable[[str], None] | None = None,
        profiler_enabled: Callable[[], bool] = _torch_profiler_enabled,
        duty: float = 1.0,
        drain_s: float = 0.02,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        if not 0 < duty <= 1:
            raise ValueError(f"CUPTI duty must be in (0, 1], not {duty}")
        self.cupti, self._add, self._log, self.syncpoints = cupti, add, log, syncpoints
        self.cycle = self.base_cycle = max(1, round(1 / duty))
        """Samples per recording cycle: records are taken during one sample interval in ``cycle``
        (1: always). ``base_cycle`` is the one ``duty`` asks for; the governor may stretch ``cycle``."""
        self.cost_share: float | None = None
        """What the last window's records cost, as a share of the wall time over its cycle; None before
        the first window ends."""
        self._cpu_clock = cpu_clock
        self._delivery_cpu = 0.0
        """CPU seconds the threads that delivered buffers spent since the last window's end (CUPTI's own
        thread: the binding builds the record objects there before our callback sees them)."""
        self._delivery_seen: dict[int, float | None] = {}
        """Per thread that delivered buffers, its CPU time at its last buffer; None for a thread Python
        started (the sampler's flush is measured around the refresh; a frontend's flush, standing aside,
        is not the records' cost)."""
        self._window_t0 = 0.0
        """When the recording window now open began (host clock)."""
        self._hinted = False
        """Whether :data:`LAUNCH_BOUND_HINT` was logged (once, at the governor's first stretch)."""
        self.drain_s = drain_s
        """Seconds a window's end waits for the GPU op records of its last launches."""
        self._recording = False
        self._phase = 0
        self._offsets: dict[Key, int] = {}
        self.capture = capture
        """Anything with ``active`` (captures in progress) and ``listeners``; a CaptureGuard."""
        self.converter = RecordConverter(cupti)
        self.queues = RecordQueues(self.converter, rank=rank)
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
        self.records = 0
        """Records read (every record CUPTI delivered: launch calls and GPU ops when the per-API
        filter holds, :attr:`filtered`)."""
        self.filtered = 0
        """API cbids CUPTI was told not to record (0: the binding lacks the per-API switch)."""
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
                except Exception as exc:
                    self.refused.append(f"{name} ({describe(exc)})")
            self.filtered = self._record_launches_only()
            if self.cycle > 1:
                self._start_over(c.get_timestamp() / 1000)
                self._recording, self._phase = True, 0
                self._window_t0 = self._clock()
        except Exception as exc:
            self._unsubscribe()
            raise CuptiUnavailable(describe(exc)) from exc

    def _record_launches_only(self) -> int:
        """Tell CUPTI not to record the runtime and driver calls that are not launches
        (``activity_enable_runtime_api``/``activity_enable_driver_api``, cuptiActivityEnableRuntimeApi
        and cuptiActivityEnableDriverApi, CUPTI 12.x on; torch's ``_cupti_monitor`` does the same for a
        few cbids). Done after ``activity_enable``, which is reported to reset the per-API filter. Their
        records never reach Python then; without the switch they are skipped by cbid. The callback API
        (sync points) is separate and unaffected. Returns the cbids switched off."""
        c, conv, off = self.cupti, self.converter, 0
        for kind, switch in (
            (conv.runtime, "activity_enable_runtime_api"),
            (conv.driver, "activity_enable_driver_api"),
        ):
            toggle = getattr(c, switch, None)
            if toggle is None or kind not in self.kinds:
                continue
            for cbid in conv.other_cbids(kind):
                try:
                    toggle(cbid, 0)
                    off += 1
                except Exception:
                    pass
        return off

    def _unsubscribe(self) -> None:
        """Disable our kinds and give CUPTI up (each step tolerates what is already undone)."""
        c = self.cupti
        for kind in self.kinds:
            with contextlib.suppress(Exception):
                c.activity_disable(kind)
        self.kinds = []
        if self._handle is not None:
            with contextlib.suppress(Exception):
                c.unsubscribe(self._handle)
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
        """One buffer (on CUPTI's or the flushing thread): kept for the sampler, nothing per record here
        but the delivering thread's CPU time read (what building this buffer's records cost it)."""
        if not self.closed:
            self._inbox.append(activities)
            self.buffers += 1
            ident, seen = threading.get_ident(), self._delivery_seen
            if ident not in seen:  # from its next buffer on, a thread of CUPTI's own is measured
                seen[ident] = self._cpu_clock() if _outside_python() else None
            elif (last := seen[ident]) is not None:
                now = self._cpu_clock()
                self._delivery_cpu += now - last
                seen[ident] = now

    def _drain(self) -> None:
        """Read the buffers received into the queues, :data:`CHUNK` records at a time, letting other
        threads (the frontend) have the GIL between chunks, so that no thread waits long for it."""
        while self._inbox:
            records = self._inbox.popleft()
            self.records += len(records)
            for i in range(0, len(records), CHUNK):
                try:
                    with self._lock:
                        self.queues.add_records(records[i : i + CHUNK])
                except Exception as exc:
                    self._log(f"CUPTI records dropped: {type(exc).__name__}: {exc}")
                    break
                time.sleep(0)

    def _on_api(self, userdata: Any, domain: Any, cbid: Any, data: Any) -> None:
        """A synchronising runtime call is entered: a sync point at the caller's source line."""
        try:
            if int(getattr(data, "callback_site", 0)) != 0 or self.syncpoints is None or self.aside:
                return
            name = self._sync_cbids.get(int(cbid))
            if name is not None:
                self.syncpoints.hit_frame(name, sys._getframe(1 + self.api_frames))
        except Exception:
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
        self._log(
            f"CUDA launch queues: standing aside ({reason}): CUPTI is left to it; "
            "queue figures are frozen until it ends"
        )

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
        if self.capture is not None and getattr(self.capture, "active", False):
            return f"standing aside: {CAPTURE_NOTE}"
        if self.cycle > 1:
            return f"sampled: CUPTI records 1 sample interval in {self.cycle}"
        return None

    # -- sampling ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        with contextlib.suppress(Exception):
            self.cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: the partial buffer too

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
        if (
            self.aside is not None
            and self.aside.startswith(PROFILER_NOTE)
            and not self.lost
            and not self._profiler_enabled()
        ):
            self.resume()
        if self.aside is not None or (self.capture is not None and getattr(self.capture, "active", False)):
            return
        if self.cycle > 1 and not self._recording:
            self._phase += 1
            if self._phase >= self.cycle - 1:
                self._open_window()
            return
        cpu0 = self._cpu_clock()
        now = self.cupti.get_timestamp() / 1000
        if self.cycle > 1:
            self._end_window(now)
        self._flush()
        self._drain()
        with self._lock:
            q = self.queues
            since = max(q.settled, q.since)
            q.update(now)
            for key in q.keys():  # noqa: SIM118 RecordQueues is no dict: keys() is its own
                if q.settled < q.valid_from(key):
                    continue  # launches from before the window may still be queued: depth not known yet
                ex = self.streams.get(key)
                if ex is None:
                    ex = self.streams[key] = self._add(CuptiStream(self._name(key), key, self))
                off = self._offsets.get(key, 0)
                ex.launched, ex.started = off + q.launched(key), off + q.started(key)
                ex.completed = ex.started
                span = q.settled - q.since
                ex.at_cap = q.time_at_cap(key) / span if span > 0 else 0.0
                for a, b in q.busy(key, since, q.settled, gap=MERGE_GAP * 1e6):
                    ex.activity.add(self.host_time(a), self.host_time(b))

        if self.cycle > 1:
            with self._lock:
                self.queues.close_window()
            self._recording, self._phase = False, 0
            cpu, self._delivery_cpu = self._cpu_clock() - cpu0 + self._delivery_cpu, 0.0
            self._govern(cpu, self._clock() - self._window_t0)

    def _govern(self, cpu: float, window: float) -> None:
        """Stretch or shrink the cycle so that a window's records cost at most :data:`CPU_BUDGET` of the
        wall time over the cycle: ``cpu`` seconds (the refresh that read them, and the threads that
        delivered them: the binding builds its record objects there) for a window of ``window`` seconds
        (one sample interval)."""
        if window <= 0:
            return
        share = cpu / (window * self.cycle)
        self.cost_share = share
        want = min(MAX_CYCLE, max(self.base_cycle, math.ceil(self.cycle * share / CPU_BUDGET - 1e-9)))
        if want > self.cycle * CYCLE_HYSTERESIS or want < self.cycle / CYCLE_HYSTERESIS:
            old, self.cycle = self.cycle, want
            if want > old and not self._hinted:  # records this costly: many launches a second
                self._hinted = True
                self._log(LAUNCH_BOUND_HINT)
            self._log(
                f"CUDA launch queues: CUPTI's records cost {100 * share:.1f}% of the time at 1 sample "
                f"interval in {old}: recording 1 in {want} (budget {100 * CPU_BUDGET:g}%)"
            )

    # -- recording windows (``duty`` < 1) ----------------------------------------------------------

    def _open_window(self) -> None:
        """Recording starts again: the queues start over (the counts shown carry on from the rows')."""
        c = self.cupti
        self._start_over(c.get_timestamp() / 1000)
        api = (self.converter.runtime, self.converter.driver)
        try:
            for kind in sorted(self.kinds, key=lambda k: k in api):  # GPU ops first, then launches
                c.activity_enable(kind)
            self.filtered = self._record_launches_only()  # enabling the API kinds reset the switch
        except Exception as exc:
            self._log(f"CUDA launch queues: CUPTI refused a recording window ({describe(exc)})")
            return
        self._recording = True
        self._window_t0 = self._clock()

    def _start_over(self, t0: float) -> None:
        """A window begins at ``t0`` (µs): the queues start over, the rows' counts carry on from theirs."""
        self._offsets = {key: ex.launched for key, ex in self.streams.items()}
        with self._lock:
            self.queues.new_window(t0)

    def _end_window(self, now: float) -> None:
        """Launch records stop at ``now``; their GPU ops' records are waited for (up to ``drain_s``),
        then those stop too. What settles is exact up to ``now``."""
        api = (self.converter.runtime, self.converter.driver)
        for kind in self.kinds:
            if kind in api:
                self._disable(kind)
        with self._lock:
            self.queues.end_window(now)
        deadline = time.monotonic() + self.drain_s
        while True:
            self._flush()
            self._drain()
            if self.queues.pending == 0 or time.monotonic() >= deadline:
                break
            time.sleep(0.002)
        for kind in self.kinds:
            if kind not in api:
                self._disable(kind)

    def _disable(self, kind: int) -> None:
        with contextlib.suppress(Exception):
            self.cupti.activity_disable(kind)

    def _name(self, key: Key) -> str:
        device, stream = key
        return f"cuda:{device} stream {stream}"
