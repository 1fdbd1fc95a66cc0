"""The CUDA agent during CUDA graph capture, against the fake's model of CUDA's capture rules."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch
from fakes.fake_cuda import INVALIDATED, UNSUPPORTED, FakeCuda, FakeGraph
from torchpar_top.probes.agent.cuda import CudaMonitor

A, B = torch.ones(1), torch.ones(1)


def _op() -> None:
    torch.add(A, B)


def _monitor(fake: FakeCuda) -> CudaMonitor:
    return CudaMonitor(fake, clock=fake.clock, device_of=fake.device_of, thread=False)


def _on_thread(fn: Callable[[], object]) -> list[BaseException]:
    """Run ``fn`` on another thread (the marker thread's role) and return what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    return raised


def test_the_fake_models_cudas_capture_rules() -> None:
    """Global mode: another thread's event query fails and invalidates; thread_local: it does not."""
    fake = FakeCuda(1)
    done = fake.Event()
    done.record()
    g = fake.CUDAGraph()
    with pytest.raises(RuntimeError, match=INVALIDATED), fake.graph(g):
        assert fake.is_current_stream_capturing()
        (raised,) = _on_thread(done.query)
        assert str(raised) == UNSUPPORTED
    g = fake.CUDAGraph()
    with fake.graph(g, capture_error_mode="thread_local"):
        assert _on_thread(done.query) == []
        inside = fake.Event()
        inside.record()  # into the capture: a node of the graph
    assert g.nodes == ["event"]
    with pytest.raises(RuntimeError, match="last recorded in a capturing stream"):
        inside.query()


def test_marker_rounds_pause_during_a_global_capture() -> None:
    """torch.cuda.graph's default mode: a marker round's event query would invalidate the capture."""
    fake = FakeCuda(1)
    mon = _monitor(fake)
    try:
        s = mon.stream("cuda:0")
        for _ in range(5):
            _op()
        mon.poll()  # markers wait on the default stream
        g = fake.CUDAGraph()
        with fake.graph(g):  # synchronizes, then captures on its own stream
            _op()  # captured, not launched
            assert _on_thread(mon.poll) == []  # the marker thread's round
        assert g.nodes == [fake.kernel_time] and g.foreign == 0
        assert s.error is None and mon.paused_rounds == 1
        mon.poll()
        assert (s.launched, s.value()) == (5, 0)
    finally:
        mon.close()


def test_the_frontend_records_no_marker_while_another_thread_captures() -> None:
    """A caught-up stream's launch queries the last marker: not while a global capture runs elsewhere."""
    fake = FakeCuda(1)
    mon = _monitor(fake)
    s = mon.stream("cuda:0")
    capturing, finish = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def capture() -> None:
        with fake.graph(fake.CUDAGraph()):
            capturing.set()
            finish.wait()

    th = threading.Thread(target=lambda: raised.extend(_catch(capture)))
    th.start()
    capturing.wait()
    try:
        s.launch(_op)  # on the default stream, which is not capturing: counted, but no marker
        s.synchronize()  # SYNC: skipped, it would invalidate the capture
    finally:
        finish.set()
        th.join()
        mon.close()
    assert raised == [] and s.launched == 1 and not s._markers and fake.syncs == 2


def test_watching_a_stream_during_a_capture_is_refused_and_harmless() -> None:
    """Calibrating the clock synchronizes: not while the calling thread captures."""
    fake = FakeCuda(1)
    mon = _monitor(fake)
    g = fake.CUDAGraph()
    try:
        with fake.graph(g), pytest.raises(RuntimeError, match="being captured"):
            mon.stream("cuda:0")
        assert mon.streams == () and fake.syncs == 1  # torch.cuda.graph's own synchronize only
    finally:
        mon.close()


def test_close_unwraps_the_graph_classes() -> None:
    fake = FakeCuda(1)
    mon = _monitor(fake)
    assert fake.CUDAGraph.capture_begin is not FakeGraph.capture_begin
    mon.close()
    assert fake.CUDAGraph.capture_begin is FakeGraph.capture_begin
    assert fake.CUDAGraph.capture_end is FakeGraph.capture_end


def _catch(fn: Callable[[], object]) -> list[BaseException]:
    try:
        fn()
    except BaseException as exc:
        return [exc]
    return []
