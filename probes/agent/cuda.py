"""CUDA streams as executors in the child: outstanding work from completion markers, busy lanes, sync.

- ``L``: the frontend's :class:`~torchpar_top.probes.agent.cuda_launch.LaunchCounter` counts torch
  calls (not kernels) per stream: the frontend's current stream of the call's device. A stream the
  frontend uses for the first time (``with torch.cuda.stream(s)``) is watched from then on as its own
  executor (``cuda:D sN``; the default stream ``cuda:D``), up to ``MAX_STREAMS``.
- ``C``: a marker thread records an event on each watched stream every ``period`` (2 ms) when ``L``
  moved, remembering ``L`` then, and pops markers while ``query()`` is true: ``C = L`` of the last
  completed marker, so ``O = L - C`` (queued + running). ``S`` is not observable: reported as ``C``.
  At most ``MAX_PENDING`` markers wait per stream (each takes a slot of the 1024-entry queue).
- Lanes on the host clock: a busy run starts at the first launch after the stream caught up and ends
  when the marker that drains it completes. Markers are timing-disabled (completion = the poll that
  sees it) except where a run's end must be exact: the end of an item launched onto a caught-up stream
  (recorded by the frontend in :meth:`CudaStream.launch`: sparse or SYNC loops), a marker recorded on
  a caught-up stream, and one "tail" marker when the frontend stops feeding a backlog. Those are
  mapped to host time by a reference event calibrated once per device (``cudaEventElapsedTime`` is
  float ms: about 0.2 ms resolution after an hour). Costs per record (published figures for
  timing-disabled and timed events, not measurable here):
  about 0.25 µs timing off, 2.5 µs timing on; at most one marker per stream per period from the thread
  (500/s: 1.25 ms/s, 0.125% of a core, even if all were timed), plus one timed record per item while
  caught up.
- SYNC: :meth:`CudaStream.synchronize` is ``torch.cuda.synchronize(device)``, timed as a frontend wait
  (a thread spinning there is waiting, not working).
- CUDA graph capture: while one is in progress (:mod:`~torchpar_top.probes.agent.cuda_capture`) the
  marker thread skips its rounds and the frontend records no marker, queries no event and does not
  synchronize: in the default "global" capture mode any thread's event query would fail and
  invalidate the user's capture. Calls on the capturing stream are not counted (recorded, not
  launched). No stream starts being watched during a capture (calibration synchronizes).
- The launch-queue ``blocked`` share is not observable this way and reads 0; a profiler window
  (:func:`profile_queue`, HTA's method) gives the exact depth and time at the cap.

Verified against ``tests/fakes/fake_cuda.py``, and on an H100 and an H200 against profiler traces of the
same windows (``benchmarks/gpu_check.py``, ``async_session``; README, *First run on hardware*).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from torchpar_top.probes.agent import hta
from torchpar_top.probes.agent.activity import ActivityRecorder
from torchpar_top.probes.agent.cuda_capture import CaptureGuard, graph_classes
from torchpar_top.probes.agent.cuda_launch import (
    DeviceOf,
    LaunchCounter,
    StreamOf,
    cuda_device_of,
    cuda_stream_id,
)
from torchpar_top.probes.agent.cuda_stream import CudaStream, DeviceClock
from torchpar_top.probes.agent.hta import QUEUE_CAP as CAPACITY

#: Seconds between marker rounds.
PERIOD = 0.002
#: Streams watched at most (each costs a marker round trip per period); more are counted, not watched.
MAX_STREAMS = 16


class CudaMonitor:
    """The CUDA part of the agent: the launch counter, one marker thread, per-device clocks."""

    def __init__(
        self,
        cuda: Any = None,
        *,
        period: float = PERIOD,
        timed_edges: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        device_of: DeviceOf | None = None,
        stream_of: StreamOf | None = None,
        thread: bool = True,
        on_thread: Callable[[int], None] | None = None,
        on_stream: Callable[[CudaStream], Any] | None = None,
    ) -> None:
        """``on_stream`` receives each stream watched because the frontend started using it."""
        import torch

        cuda = torch.cuda if cuda is None else cuda
        if stream_of is None:
            stream_of = cuda_stream_id if cuda is torch.cuda else lambda d: cuda.current_stream(d).stream_id
        self.cuda, self.clock, self.period, self.timed_edges = cuda, clock, period, timed_edges
        self.capture = CaptureGuard()
        self.capture.install(graph_classes(cuda), cuda.current_stream)
        self.paused_rounds = 0
        """Marker rounds skipped because a CUDA graph was being captured."""
        self.counter = LaunchCounter(
            device_of or cuda_device_of, clock, stream_of, self._new_stream, capture=self.capture
        )
        self.streams: tuple[CudaStream, ...] = ()
        self._on_stream = on_stream
        self._wait: ActivityRecorder | None = None
        self.clocks: dict[int, DeviceClock | None] = {}
        self._thread_wanted, self._on_thread = thread, on_thread
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._uuids: list[str] | None = None

    def stream(
        self, name: str, device: int = 0, stream: Any = None, wait: ActivityRecorder | None = None
    ) -> CudaStream:
        """Watch ``stream`` (default: the device's current stream); call on the frontend thread.

        Raises:
            RuntimeError: a CUDA graph is being captured (calibrating would invalidate it).
        """
        if self.capturing():
            raise RuntimeError("a CUDA graph is being captured: the stream is not watched now")
        stream = stream if stream is not None else self.cuda.current_stream(device)
        self._wait = self._wait or wait
        if device not in self.clocks:
            try:
                self.clocks[device] = DeviceClock(self.cuda, device, stream, self.clock)
            except RuntimeError:
                self.clocks[device] = None  # lanes fall back to poll times
        ex = CudaStream(name, device, stream, self, wait)
        self.counter.watch(ex.key)
        self.counter.start()
        self.streams = (*self.streams, ex)
        if self._thread_wanted and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tpt-cuda-markers", daemon=True)
            self._thread.start()
        return ex

    def _new_stream(self, device: int, stream_id: int) -> None:
        """The frontend launched on a stream not watched yet (called inside its torch call)."""
        if len(self.streams) >= MAX_STREAMS:  # the streams beyond them go unwatched
            return
        with contextlib.suppress(Exception):  # as does one that cannot be watched
            stream = self.cuda.current_stream(device)
            default = self.cuda.default_stream(device).stream_id == stream_id
            ex = self.stream(self._name(device, stream_id, default), device, stream, self._wait)
            if self._on_stream is not None:
                self._on_stream(ex)

    def _name(self, device: int, stream_id: int, default: bool) -> str:
        """``cuda:D`` for a default stream, ``cuda:D sN`` for the device's N-th other one."""
        name = f"cuda:{device}" + ("" if default else f" s{sum(s.device == device for s in self.streams)}")
        return f"{name} #{stream_id}" if any(s.name == name for s in self.streams) else name

    def capturing(self) -> bool:
        """A capture is in progress: one the guard saw begin, or one on the calling thread's stream."""
        if self.capture.active:
            return True
        try:
            return bool(self.cuda.is_current_stream_capturing())
        except Exception:
            return False

    def poll(self) -> None:
        """One round over the watched streams (the marker thread calls it every ``period``); none while
        a CUDA graph is being captured, and no capture begins during a round."""
        with self.capture.lock:
            if self.capture.active:
                self.paused_rounds += 1
                return
            now = self.clock()
            for s in self.streams:
                try:
                    s.poll(now)
                except Exception as exc:  # e.g. a device error: keep watching the others
                    s.error = f"{type(exc).__name__}: {exc}"

    def uuids(self) -> list[str]:
        """NVML-style UUIDs (``GPU-...``) of the child's CUDA devices, in CUDA order (read once)."""
        if self._uuids is None:
            props = self.cuda.get_device_properties
            self._uuids = [f"GPU-{props(i).uuid}" for i in range(self.cuda.device_count())]
        return self._uuids

    def close(self) -> None:
        """Stop the marker thread, leave the launch-counting mode (on the frontend thread), unwrap the
        graph classes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.counter.stop()
        self.capture.uninstall()

    def _run(self) -> None:
        if self._on_thread:
            self._on_thread(threading.get_native_id())
        while not self._stop.wait(self.period):
            self.poll()


class ProfileWindow(NamedTuple):
    """A profiler window's result: HTA's queue per stream as log lines (:func:`hta.summary`), the launch
    calls its trace holds (launches with no GPU op in the trace: the profiler lost its GPU records), and
    why the trace was read in this process, if it was (None: in a process of its own)."""

    lines: list[str]
    launches: int
    in_process: str | None = None
    start_s: float = 0.0
    """How long the profiler took to start (the first window in a process imports ``torch._inductor``)."""
    imported: int = 0
    """Modules imported while it started."""


#: Seconds the trace's reading may take in its own process (a 0.5 s window on an H200: 21-27 MB of JSON,
#: 62,000 events, 1.7-2.6 s on this project's 2-core VM).
ANALYSIS_TIMEOUT = 120.0


def analyse_apart(path: str, cap: int = CAPACITY, timeout: float = ANALYSIS_TIMEOUT) -> ProfileWindow:
    """Read a window's trace in a Python process of its own (``python -m torchpar_top.probes.agent.hta``,
    no torch imported), so that its JSON and the analysis do not hold the workload's GIL: in this process
    they slowed a frontend thread for as long as they took (``benchmarks/bench_profile_window.py``).
    Where that process cannot be had or fails, the trace is read here, and the result says why."""
    cmd = [sys.executable, "-m", "torchpar_top.probes.agent.hta", path, str(cap)]
    why: str
    try:
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"reading the trace took over {timeout:g} s") from exc
    except OSError as exc:  # no interpreter to start (an embedded Python), no process left to fork...
        why = f"{type(exc).__name__}: {exc}"
    else:
        if done.returncode == 0:
            try:
                got = json.loads(done.stdout.strip().splitlines()[-1])
                return ProfileWindow([str(x) for x in got["lines"]], int(got["launches"]))
            except (IndexError, KeyError, TypeError, ValueError) as exc:
                why = f"unreadable answer ({type(exc).__name__}: {exc})"
        else:
            tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
            why = tail[0][:200]
    lines, launches = hta.analyse_file(path, cap)
    return ProfileWindow(lines, launches, why)


class _Window:
    """One profiler window: ``torch.profiler.profile`` where ``torch._inductor`` is loaded, else the
    autograd profiler that it wraps, started the same way (Kineto; CUDA activity where asked).

    ``torch.profiler.profile().start()`` reads inductor's cudagraphs setting through ``hasattr(torch,
    "_inductor")``, which imports inductor where it is not loaded: ~820 modules with torch 2.13, 1.9 s
    (1.76-2.22) on this project's 2-core VM with a frontend thread at 0.03 of its speed meanwhile
    (``benchmarks/bench_profile_window.py``), on the first window of every process. Where inductor is not
    loaded its cudagraphs are not in use, and torch.profiler would change nothing for them (it turns
    CUPTI's teardown off when they are): so the autograd profiler is started directly, and the one
    piece of torch.profiler's metadata a reader of the trace needs, ``distributedInfo`` (the rank), is
    added as torch.profiler adds it. Untested on hardware in this form."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._prof: Any = None
        self._plain = "torch._inductor" in sys.modules  # torch.profiler's own path

    def start(self) -> None:
        if self._plain:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._prof = profile(activities=activities)
            self._prof.start()
            return
        try:
            from torch._C._autograd import _add_metadata_json
            from torch.autograd import profiler as autograd_profiler

            self._prof = autograd_profiler.profile(
                use_cpu=True, use_device="cuda" if self.cuda else None, use_kineto=True
            )
        except (ImportError, TypeError):  # a torch whose autograd profiler is made otherwise
            self._plain = True
            self.start()
            return
        self._prof.__enter__()
        info = _distributed_info()
        if info is not None:
            _add_metadata_json("distributedInfo", json.dumps(info))

    def stop(self) -> None:
        if self._plain:
            self._prof.stop()
        else:
            self._prof.__exit__(None, None, None)

    def export(self, path: str, tmp: str) -> None:
        """The Chrome trace to ``path`` (gzipped where it ends in ``.gz``, as torch.profiler writes it)."""
        if self._plain or not path.endswith(".gz"):
            self._prof.export_chrome_trace(path)
            return
        plain = os.path.join(tmp, "window.json")
        self._prof.export_chrome_trace(plain)
        with open(plain, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _distributed_info() -> dict[str, Any] | None:
    """``distributedInfo`` as torch.profiler writes it (backend, rank, world size), where a process group
    is up; never imports torch.distributed (not loaded: no group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return {"backend": dist.get_backend(), "rank": dist.get_rank(), "world_size": dist.get_world_size()}


def profile_queue(
    seconds: float = 0.5,
    *,
    cuda: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    cap: int = CAPACITY,
    export_path: str | None = None,
) -> ProfileWindow:
    """Run ``torch.profiler`` for ``seconds``: HTA's queue depth per ``(device, stream)`` and the launches.

    CUPTI records runtime launches and kernels process-wide, so this may run on an agent thread while
    the frontend works. The trace is written to a file and read in a process of its own
    (:func:`analyse_apart`). The CUDA part is untested on hardware in this form; with ``cuda=False`` it
    profiles the CPU only (no launch queue) and is what the tests run. ``export_path``: keep the Chrome
    trace there (gzipped when the name ends in ``.gz``, as torch writes it) instead of in a temporary file.
    """
    prof = _Window(cuda)
    modules, t0 = len(sys.modules), time.monotonic()
    prof.start()
    started, imported = time.monotonic() - t0, len(sys.modules) - modules
    try:
        sleep(seconds)
    finally:
        prof.stop()
    with tempfile.TemporaryDirectory(prefix="tpt-prof-") as tmp:
        path = export_path or os.path.join(tmp, "trace.json")
        prof.export(path, tmp)
        return analyse_apart(path, cap)._replace(start_s=started, imported=imported)
