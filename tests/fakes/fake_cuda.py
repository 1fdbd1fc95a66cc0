"""A fake of the ``torch.cuda`` surface the agent uses, on a simulated clock.

Streams are in-order queues: an item submitted at host time ``t`` starts at ``max(t + latency, end of
the previous item)``. Events complete when the stream reaches them; ``query()`` compares with the
clock; ``synchronize()`` moves the clock to the completion (the host waited). A stream holds at most
``capacity`` items not yet started: a launch into a full stream moves the clock until one starts (the
host blocked), as CUDA's launch queue does. Host time passes only when a test (or the fake) says so.

As in torch, the current stream is per thread and per device (``torch.cuda.stream(s)`` sets it for the
calling thread only); every device's default stream has ``stream_id`` 0.

Graph capture (``CUDAGraph``, ``graph()``) follows the CUDA runtime documentation
(``cudaStreamBeginCapture``, ``cudaThreadExchangeStreamCaptureMode``): work submitted to a capturing
stream becomes a node of the graph instead of running; a "potentially unsafe" call (event or stream
query or synchronize, device synchronize) fails with cudaErrorStreamCaptureUnsupported and invalidates
the capture when the calling thread is capturing (any mode but "relaxed") or another thread is capturing
in "global" mode; ``capture_end`` of an invalidated capture fails (cudaErrorStreamCaptureInvalidated);
an event recorded into a capturing stream is a node of that graph and cannot be queried
(cudaErrorCapturedEvent). torch turns each of these errors into a RuntimeError.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

UNSUPPORTED = "CUDA error: operation not permitted when stream is capturing"
INVALIDATED = "CUDA error: operation failed due to a previous error during capture"
CAPTURED_EVENT = "CUDA error: operation not permitted on an event last recorded in a capturing stream"


class SimClock:
    """Simulated host time in seconds (the agent's ``clock``)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Let host time pass."""
        self.now += seconds

    def advance_to(self, t: float) -> None:
        """Wait until ``t`` (never goes back)."""
        self.now = max(self.now, t)


class FakeStream:
    """One in-order stream of a device."""

    def __init__(self, cuda: FakeCuda, device: int, stream_id: int = 0) -> None:
        self.cuda, self.device_index, self.stream_id = cuda, device, stream_id
        self.device = SimpleNamespace(type="cuda", index=device)
        self.tail = 0.0
        self._starts: deque[float] = deque()
        self.kernels: list[tuple[float, float]] = []
        """``(start, end)`` of every kernel, for tests."""

    def submit(self, duration: float, latency: float | None = None) -> tuple[float, float] | None:
        """Enqueue one item; blocks (moves the clock) while ``capacity`` items wait to start. On a
        capturing stream the item becomes a node of the graph instead (None)."""
        capture = self.cuda.captures.get(self)
        if capture is not None:
            capture.nodes.append(duration)
            return None
        clock = self.cuda.clock
        while self._starts and self._starts[0] <= clock.now:
            self._starts.popleft()
        if len(self._starts) >= self.cuda.capacity:
            clock.advance_to(self._starts.popleft())
        start = max(clock.now + (self.cuda.latency if latency is None else latency), self.tail)
        self.tail = start + duration
        self._starts.append(start)
        return start, self.tail

    def synchronize(self) -> None:
        """Wait for everything submitted."""
        self.cuda.unsafe()
        self.cuda.clock.advance_to(self.tail)

    def query(self) -> bool:
        """True when everything submitted has completed."""
        self.cuda.unsafe()
        return self.cuda.clock.now >= self.tail


class FakeEvent:
    """``torch.cuda.Event``: completes when its stream reaches it."""

    def __init__(self, cuda: FakeCuda, enable_timing: bool = False) -> None:
        self.cuda, self.enable_timing = cuda, enable_timing
        self.device: int | None = None
        """Set by the first record (torch creates the CUDA event then)."""
        self.t: float | None = None
        self.captured = False
        cuda.events_created += 1

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or self.cuda.current_stream()
        if self.device is not None and self.device != stream.device_index:
            raise RuntimeError("Event device does not match recording stream's device")
        self.device = stream.device_index
        capture = self.cuda.captures.get(stream)
        if capture is not None:  # a node of the graph being captured, whichever thread records it
            capture.nodes.append("event")
            capture.foreign += threading.get_ident() != capture.thread
        ran = stream.submit(0.0, latency=0.0) if capture is None else None
        self.t, self.captured = (None, True) if ran is None else (ran[1], False)
        self.cuda.records[self.enable_timing] += 1

    def query(self) -> bool:
        """As torch: True for an event never recorded (no CUDA call), else ``cudaEventQuery``."""
        if self.device is None:
            return True
        self.cuda.unsafe()
        if self.captured:
            raise RuntimeError(CAPTURED_EVENT)
        return self.t is None or self.cuda.clock.now >= self.t

    def synchronize(self) -> None:
        if self.device is not None:
            self.cuda.unsafe()
        if self.t is not None:
            self.cuda.clock.advance_to(self.t)

    def elapsed_time(self, end: FakeEvent) -> float:
        """As ``c10::cuda::CUDAEvent::elapsed_time``: TORCH_CHECK_VALUE (ValueError) for an event made
        without timing or never recorded, TORCH_CHECK (RuntimeError) for one not yet completed."""
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.t is None or end.t is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.t - self.t) * 1000.0


@dataclass
class _Capture:
    """One capture sequence in progress on ``stream``."""

    stream: FakeStream
    mode: str
    thread: int
    nodes: list[Any] = field(default_factory=list)
    """A kernel's duration, or ``"event"`` for an event record."""
    foreign: int = 0
    """Nodes recorded by another thread than the capturing one."""
    invalidated: bool = False


class FakeGraph:
    """``torch.cuda.CUDAGraph``; :class:`FakeCuda` makes a subclass per instance (``fake.CUDAGraph``), so a
    wrapper installed on its methods stays with that fake."""

    cuda: FakeCuda

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.foreign = 0
        self._capture: _Capture | None = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self.cuda._begin_capture(self, capture_error_mode)

    def capture_end(self) -> None:
        self.cuda._end_capture(self)

    def replay(self) -> None:
        """The captured kernels, on the current stream."""
        stream = self.cuda.current_stream()
        for node in self.nodes:
            ran = stream.submit(node) if node != "event" else None
            if ran is not None:
                stream.kernels.append(ran)


class FakeCuda:
    """``torch.cuda`` with ``devices`` GPUs sharing one simulated clock."""

    def __init__(
        self, devices: int = 1, *, clock: SimClock | None = None, latency: float = 5e-6, capacity: int = 1024
    ) -> None:
        self.clock = clock or SimClock()
        self.latency, self.capacity = latency, capacity
        self._count = devices
        self._current = 0
        self._default = [FakeStream(self, d) for d in range(devices)]
        self._streams = list(self._default)
        self._local = threading.local()  # this thread's current stream per device
        self.captures: dict[FakeStream, _Capture] = {}
        self.CUDAGraph = type("CUDAGraph", (FakeGraph,), {"cuda": self})
        self._graph_stream: FakeStream | None = None
        self.events_created = 0
        self.records = {False: 0, True: 0}
        self.syncs = 0
        self.uuids = [f"{d:08x}-1111-2222-3333-444455556666" for d in range(devices)]
        # what the next counted op launches (see device_of)
        self.next_device, self.kernel_time, self.launch_cost = 0, 1e-3, 10e-6

    def is_available(self) -> bool:
        return self._count > 0

    def device_count(self) -> int:
        return self._count

    def current_device(self) -> int:
        return self._current

    def set_device(self, device: int) -> None:
        self._current = device

    def current_stream(self, device: int | None = None) -> FakeStream:
        dev = self._current if device is None else device
        return self._currents().get(dev, self._default[dev])

    def default_stream(self, device: int | None = None) -> FakeStream:
        return self._default[self._current if device is None else device]

    def Stream(self, device: int | None = None, priority: int = 0) -> FakeStream:
        stream = FakeStream(self, self._current if device is None else device, len(self._streams))
        self._streams.append(stream)
        return stream

    def set_stream(self, stream: FakeStream) -> None:
        """The calling thread's current stream on the stream's device."""
        self._currents()[stream.device_index] = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        """``with torch.cuda.stream(s)``: ``s`` is this thread's current stream on its device, then the
        old."""
        prev = self.current_stream(stream.device_index)
        self.set_stream(stream)
        try:
            yield
        finally:
            self.set_stream(prev)

    # -- graph capture ----------------------------------------------------------------------------

    def is_current_stream_capturing(self) -> bool:
        return self.current_stream() in self.captures

    @contextlib.contextmanager
    def graph(
        self,
        cuda_graph: FakeGraph,
        pool: Any = None,
        stream: FakeStream | None = None,
        capture_error_mode: str = "global",
    ) -> Iterator[None]:
        """``torch.cuda.graph``: synchronize, then capture on a side stream (its own unless given)."""
        self.synchronize()
        if stream is None:
            self._graph_stream = self._graph_stream or self.Stream()
            stream = self._graph_stream
        with self.stream(stream):
            cuda_graph.capture_begin(capture_error_mode=capture_error_mode)
            try:
                yield
            finally:
                cuda_graph.capture_end()

    def unsafe(self) -> None:
        """A potentially unsafe call from this thread: refused, and the capture invalidated, while this
        thread captures (not "relaxed") or another thread captures in "global" mode."""
        me = threading.get_ident()
        hit = [
            c
            for c in self.captures.values()
            if (c.thread == me and c.mode != "relaxed") or (c.thread != me and c.mode == "global")
        ]
        for c in hit:
            c.invalidated = True
        if hit:
            raise RuntimeError(UNSUPPORTED)

    def _begin_capture(self, graph: FakeGraph, mode: str) -> None:
        stream = self.current_stream()
        if stream.stream_id == 0:  # torch checks this itself; CUDA refuses the legacy stream too
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream. "
                "(However, after capture, it's ok to replay them on the default stream.)"
            )
        if stream in self.captures:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        graph._capture = self.captures[stream] = _Capture(stream, mode, threading.get_ident())

    def _end_capture(self, graph: FakeGraph) -> None:
        capture = graph._capture
        if capture is None:
            raise RuntimeError("CUDA error: capture sequence not initiated (cudaErrorStreamCaptureUnmatched)")
        if capture.mode != "relaxed" and capture.thread != threading.get_ident():
            raise RuntimeError(
                "CUDA error: capture sequence ended in another thread (cudaErrorStreamCaptureWrongThread)"
            )
        del self.captures[capture.stream]
        graph._capture = None
        graph.nodes, graph.foreign = ([], 0) if capture.invalidated else (capture.nodes, capture.foreign)
        if capture.invalidated:
            raise RuntimeError(INVALIDATED)

    def _currents(self) -> dict[int, FakeStream]:
        if not hasattr(self._local, "streams"):
            self._local.streams = {}
        return self._local.streams

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> FakeEvent:
        return FakeEvent(self, enable_timing)

    def synchronize(self, device: int | None = None) -> None:
        """Wait for every stream of the device."""
        self.unsafe()
        dev = self._current if device is None else device
        self.syncs += 1
        for s in self._streams:
            if s.device_index == dev:
                s.synchronize()

    @contextlib.contextmanager
    def device(self, device: int) -> Iterator[None]:
        prev, self._current = self._current, device
        try:
            yield
        finally:
            self._current = prev

    def get_device_properties(self, device: int) -> Any:
        text = self.uuids[device]
        uuid = type("_CUuuid", (), {"__str__": lambda self: text})()  # torch prints it without "GPU-"
        return SimpleNamespace(name=f"Fake GPU {device}", uuid=uuid, total_memory=80 << 30)

    # -- the simulated GPU seeing the frontend's launches -----------------------------------------

    def device_of(self, out: Any, args: tuple) -> int:
        """A ``LaunchCounter`` device hook: the counted op launched one kernel of ``kernel_time`` on
        ``next_device``'s current stream, and the launch call took ``launch_cost`` of host time."""
        stream = self.current_stream(self.next_device)
        ran = stream.submit(self.kernel_time)
        if ran is not None:  # None: captured into a graph
            stream.kernels.append(ran)
        self.clock.advance(self.launch_cost)
        return self.next_device
