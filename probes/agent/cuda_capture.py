"""Whether a CUDA graph is being captured anywhere in the process, for the CUDA marker thread.

While a capture begun in ``cudaStreamCaptureModeGlobal`` (``torch.cuda.graph``'s default) is underway,
CUDA forbids "potentially unsafe" calls from every thread: ``cudaEventQuery`` (``Event.query``),
stream queries, synchronizations, ``cudaMalloc``. The call fails with cudaErrorStreamCaptureUnsupported
(a RuntimeError in torch) and invalidates the capture, so the user's ``capture_end`` fails too
(PyTorch's CUDAGraph.cpp: "event queries are not allowed during a graph capture in the default capture
mode"). In every mode, an event recorded into a capturing stream becomes a node of the user's graph
and can no longer be queried (cudaErrorCapturedEvent).

Nothing the marker thread can call tells: ``torch.cuda.is_current_stream_capturing()``
(``cudaStreamIsCapturing``) asks about the *calling thread's* current stream, while the capture runs on
a side stream of the capturing thread (``torch.cuda.graph``'s own), not on a watched one; and a check
followed by a query races a capture that begins in between. So the guard wraps ``capture_begin`` and
``capture_end`` of torch's graph classes (``torch.cuda.CUDAGraph``, used by ``torch.cuda.graph``,
``make_graphed_callables`` and the CUDA graph trees of ``torch.compile(mode="reduce-overhead")``, which
capture in "thread_local" mode; and ``torch.accelerator.Graph``), counts captures in progress in
``active``, and has ``capture_begin`` take the ``lock`` the marker thread holds through a round: a
capture begins only between rounds, as PyTorch's own ``capture_begin`` waits for pending NCCL-watchdog
event queries. While ``active`` is non-zero the marker thread skips its rounds, the frontend records no
marker and does not synchronize, and the launch counter does not count calls on a capturing stream
(``streams``: the capturing thread's current stream at ``capture_begin``), which are recorded into the
graph, not launched. Every mode pauses, "relaxed" included.

Not seen: captures begun through ``torch._C._CUDAGraph`` directly, or by other libraries (CuPy, raw
``cudaStreamBeginCapture``); the frontend's own such capture is still caught where it asks
``is_current_stream_capturing``. Untested on hardware: verified against ``tests/fakes/fake_cuda.py``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

#: The methods wrapped on each graph class.
METHODS = ("capture_begin", "capture_end")


class CaptureGuard:
    """Counts CUDA graph captures in progress; ``lock`` is held by the marker thread for a round."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        """Captures begun and not yet ended."""
        self.streams: frozenset[tuple[int, int]] = frozenset()
        """``(device, stream_id)`` of the streams being captured (replaced, never mutated)."""
        self._by_graph: dict[int, tuple[int, int] | None] = {}
        self._current: Callable[[], Any] = lambda: None
        self._wrapped: list[tuple[type, str, Any, Any]] = []
        self.listeners: list[Callable[[bool], None]] = []
        """Told ``True`` when a capture begins (after the marker's round), ``False`` when one ends
        (the CUPTI monitor drops the launches recorded into the graph)."""

    def install(self, classes: Iterable[type | None], current_stream: Callable[[], Any]) -> None:
        """Wrap ``capture_begin``/``capture_end`` of each class (None and classes without them skipped);
        ``current_stream()`` is the calling thread's current stream (the one a capture begins on)."""
        self._current = current_stream
        for cls in classes:
            if cls is None:
                continue
            for name in METHODS:
                original = getattr(cls, name, None)
                if callable(original):
                    wrapper = self._wrap(name, original)
                    self._wrapped.append((cls, name, cls.__dict__.get(name), wrapper))
                    setattr(cls, name, wrapper)

    def uninstall(self) -> None:
        """Put the classes' own methods back (where nobody wrapped them again since)."""
        for cls, name, own, wrapper in reversed(self._wrapped):
            if cls.__dict__.get(name) is wrapper:
                if own is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, own)
        self._wrapped = []

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        @functools.wraps(original)
        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            guard.begin(graph)
            try:
                return original(graph, *args, **kwargs)
            except BaseException:
                guard.end(graph)
                raise

        @functools.wraps(original)
        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(graph, *args, **kwargs)
            finally:  # an invalidated capture has ended too
                guard.end(graph)

        return capture_begin if name == "capture_begin" else capture_end

    def begin(self, graph: Any) -> None:
        """``graph`` begins a capture on the calling thread's current stream (after the marker's round)."""
        key = _key(self._current)
        with self.lock:  # waits for the marker thread's round to end
            self.active += 1
            self._by_graph[id(graph)] = key
            self.streams = frozenset(k for k in self._by_graph.values() if k is not None)
        self._tell(True)

    def end(self, graph: Any) -> None:
        """``graph``'s capture ended."""
        with self.lock:
            ended = id(graph) in self._by_graph
            if ended:
                del self._by_graph[id(graph)]
                self.active = max(0, self.active - 1)
                self.streams = frozenset(k for k in self._by_graph.values() if k is not None)
        if ended:
            self._tell(False)

    def _tell(self, active: bool) -> None:
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):
                listener(active)


def _key(current_stream: Callable[[], Any]) -> tuple[int, int] | None:
    """``(device, stream_id)`` of the calling thread's current stream, None if unknown."""
    try:
        stream = current_stream()
        return (int(stream.device_index), int(stream.stream_id))
    except Exception:
        return None


def graph_classes(cuda: Any) -> list[type | None]:
    """The graph classes whose captures ``cuda`` (``torch.cuda`` or a fake) can begin."""
    classes = [getattr(cuda, "CUDAGraph", None)]
    if getattr(cuda, "__name__", "") == "torch.cuda":
        import torch

        classes.append(getattr(getattr(torch, "accelerator", None), "Graph", None))
    return classes
