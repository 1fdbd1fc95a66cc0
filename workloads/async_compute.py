"""async: the asynchronous-computation text, made live, with the text's own table.

Each item of the live loop is ``torch.mm(torch.randn(n, n), w)``, launched onto a stream (a CUDA stream
on a GPU, an emulated CPU stream otherwise). The text uses n = 1000; on a GPU that item takes well under
a millisecond, so a full 1024-deep queue is a fraction of a second of work. On two CPU cores the same
item takes about 25 ms and a full queue would take 25 s to drain after a switch to SYNC, so the CPU
emulation uses n = 256 (about 0.5 ms an item) to keep the queue's time scale, not the matrix size.

**Sized to the GPU.** Asynchronous launch pays where the GPU's time per item is at least the frontend's:
then ASYNC keeps the GPU busy while the frontend launches ahead and fills the queue, and SYNC pays
both, one after the other. On an NVIDIA H200 the text's item takes 58 µs of GPU time while the
frontend, under the agent, spends about 250 µs launching it (its launch counter's Python per torch call
and its completion markers): the queue never filled (17 calls outstanding) and SYNC was as fast as
ASYNC. So on CUDA (when no size is given) the loop first times the frontend's launch of an item and
the GPU's time per item at each size of :data:`CUDA_SIZES` (:func:`fit_size`) and runs the smallest
whose GPU time is :data:`GPU_OVER_FRONTEND` times the frontend's, logging both figures; the text's
rounds keep n = 1000. Its first run on the H200 timed the frontend's first 20 launches (cuBLAS starting:
4.1 ms an item) and took n = 6000 (95 items/s); it now takes the median launch after a warm-up and
sizes up to 3000: untested on hardware in this form.

The Python frontend only launches, so it runs ahead until the launch queue is full and launch blocks.
In SYNC mode the frontend waits for each item: depth 0 or 1. The throughput is the rate at which the
stream *completes* live items, in both modes.

**The text's table.** The text times 10 × (``randn(1000, 1000)`` + ``mm``) three ways: with numpy
(1.0704 s on its machine), with torch timing only the launches (0.0013 s: the frontend returns at once)
and with torch plus a synchronize (0.0049 s), on a GPU. Every :data:`TIMING_EVERY` seconds the live loop
pauses for one such round (:func:`text_round`: the emulated stream is held with its backlog queued and
the text's items run on an idle stream of their own; a CUDA stream drains first), so each timing starts
on an idle device, and the round's samples are marked ``timing`` (they count in neither mode's
scoreboard). The round's four figures are reported
together and logged, as ``multi-device`` does: *numpy*, *torch launch* (the launches alone), *torch +
sync* (launches and a synchronize) and *launch/complete*, the second over the third in percent (27 %
in the text).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: Runs on cuda:0 where CUDA is available (the hello says so).
USES_CUDA = True
SIZE = 1000
CPU_SIZE = 256
#: The sizes the CUDA loop may take, smallest first (:func:`fit_size`). An H200's GPU µs per item: 59,
#: 194, 360, 1260; the largest keeps a full queue's drain (1024 items) near a second.
CUDA_SIZES = (1000, 1500, 2000, 3000)
#: The GPU's time per item over the frontend's that :func:`fit_size` looks for: ASYNC then keeps the GPU
#: busy and fills the queue (the GPU falls behind by a sixth of an item per item), and SYNC, paying both
#: one after the other, runs at about 1 / (1 + 1 / this) of its speed: the most a switch can show is where
#: the two are equal.
GPU_OVER_FRONTEND = 1.2
#: Items timed per size when fitting.
FIT_ITEMS = 20
#: The text's table: this many times ``randn(TEXT_SIZE, TEXT_SIZE)`` + ``mm``, per timing.
TEXT_REPEATS = 10
TEXT_SIZE = 1000
#: Seconds of live loop before the first timing round (the queue fills first) and between rounds.
FIRST_TIMING_AFTER = 5.0
TIMING_EVERY = 15.0


def _item(n: int, w: torch.Tensor) -> None:
    torch.mm(torch.randn(n, n), w)


def _cuda_item(n: int, w: torch.Tensor) -> None:
    torch.mm(torch.randn(n, n, device=w.device), w)


def fit_size(
    frontend_s: float,
    gpu_s: Callable[[int], float],
    sizes: tuple[int, ...] = CUDA_SIZES,
    ratio: float = GPU_OVER_FRONTEND,
) -> tuple[int, float]:
    """The smallest of ``sizes`` whose GPU time per item (``gpu_s(n)``, seconds) is ``ratio`` times the
    frontend's time to launch one (``frontend_s``), else the largest; with that GPU time."""
    gpu = 0.0
    for n in sizes:
        gpu = gpu_s(n)
        if gpu >= ratio * frontend_s:
            return n, gpu
    return sizes[-1], gpu


def _cuda_gpu_seconds(n: int, device: str = "cuda:0", items: int = FIT_ITEMS) -> float:
    """GPU seconds per item of size ``n``: CUDA events around ``items`` items launched back to back (at the
    sizes fitted, the GPU is the slower: it runs them without gaps). Synchronizes the device."""
    w = torch.randn(n, n, device=device)
    _cuda_item(n, w)  # the kernels for this size loaded, the allocator's blocks taken
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(items):
        _cuda_item(n, w)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / items


def _cuda_frontend_seconds(stream: Any, n: int, w: torch.Tensor, items: int = FIT_ITEMS) -> float:
    """The frontend's seconds to launch one item through the watched stream, as the loop does (these are
    live items), the queue far from full: the median of ``items`` launches after a few that load the
    kernels and start cuBLAS (on an H200 the mean of the first 20 read 4.1 ms against ~0.25 ms in the
    loop's steady state); then waits for them."""
    for _ in range(3):
        stream.launch(_cuda_item, n, w)
    stream.synchronize()
    times = []
    for _ in range(items):
        t0 = time.perf_counter()
        stream.launch(_cuda_item, n, w)
        times.append(time.perf_counter() - t0)
    stream.synchronize()
    return sorted(times)[len(times) // 2]


def run(
    agent, size: int = CPU_SIZE, timing_every: float = TIMING_EVERY, first_timing: float = FIRST_TIMING_AFTER
) -> None:
    """Launch items until stopped (on ``cuda:0`` when CUDA is available, at the size :func:`fit_size`
    finds unless one is given), with a round of the text's timings every ``timing_every`` seconds."""
    text_items = [0]  # items of the text's timings (left out of the live throughput on CUDA)
    if torch.cuda.is_available():
        stream = agent.cuda_stream("cuda:0", device=0)
        agent.throughput_from(lambda: stream.items_completed() - text_items[0], "it/s")
        if size == CPU_SIZE:
            frontend = _cuda_frontend_seconds(stream, SIZE, torch.randn(SIZE, SIZE, device="cuda:0"))
            timed: dict[int, float] = {}

            def gpu_at(n: int) -> float:
                timed[n] = _cuda_gpu_seconds(n)
                return timed[n]

            size, gpu = fit_size(frontend, gpu_at)
            agent.log(
                f"experiment async: item size fitted to cuda:0: randn({size},{size}) + mm takes "
                f"{gpu * 1e6:.0f} µs of GPU time against {frontend * 1e6:.0f} µs for the frontend to "
                f"launch one (asynchronous launch pays where the GPU is the slower; GPU µs per item by "
                f"size: {', '.join(f'{n}: {t * 1e6:.0f}' for n, t in timed.items())})"
            )
        agent.log(
            f"experiment async: randn({size},{size}) + mm per item on cuda:0 (CUDA stream; queue shown "
            f"as outstanding ops, capacity {stream.capacity})"
        )
        w = torch.randn(size, size, device="cuda:0")
        item: Callable[..., None] = _cuda_item
        device = "cuda:0"
    else:
        stream = agent.emulated_stream("cpu-stream:0")
        agent.throughput_from(
            lambda: stream.completed, "it/s"
        )  # the text's items run on a stream of their own
        agent.log(
            f"experiment async: randn({size},{size}) + mm per item on {stream.name} "
            f"(emulated CPU stream, capacity {stream.capacity})"
        )
        w = torch.randn(size, size)
        item = _item
        device = "cpu"
    agent.log(
        f"the text's table every {timing_every:g} s: {TEXT_REPEATS} × (randn({TEXT_SIZE}, {TEXT_SIZE}) "
        f"+ mm) with numpy, with torch timing the launches, and with torch + synchronize (the live "
        f"loop pauses: {stream.name} holds its backlog while the text's items run on a stream of "
        f"their own)"
        if device == "cpu"
        else f"the text's table every {timing_every:g} s: {TEXT_REPEATS} × (randn({TEXT_SIZE}, {TEXT_SIZE}) "
        f"+ mm) with numpy, with torch timing the launches, and with torch + synchronize on "
        f"{stream.name} (the live loop pauses and drains first)"
    )
    next_round, rnd = time.monotonic() + first_timing, 0
    while agent.running:
        agent.launch(stream, item, size, w)
        agent.step()
        if time.monotonic() >= next_round:
            rnd += 1
            text_round(agent, stream, rnd, device, text_items)
            next_round = time.monotonic() + timing_every


def _text_item(n: int, device: str, counted: list[int]) -> None:
    """The text's loop body: ``a = torch.randn(size=(n, n)); b = torch.mm(a, a)``."""
    a = torch.randn(size=(n, n), device=device)
    torch.mm(a, a)
    counted[0] += 1


_TEXT_STREAMS: dict[int, Any] = {}


def _text_stream(agent: Any) -> Any:
    """The emulated stream the text's items run on while the live one is held (one per agent)."""
    stream = _TEXT_STREAMS.get(id(agent))
    if stream is None:
        stream = _TEXT_STREAMS[id(agent)] = agent.side_stream("text")
    return stream


@contextmanager
def _drained(stream: Any) -> Iterator[None]:
    """Wait for the live backlog (a CUDA stream cannot be held), then run the block."""
    stream.synchronize()
    yield


def numpy_time(repeats: int = TEXT_REPEATS, n: int = TEXT_SIZE) -> float | None:
    """The text's numpy timing: ``repeats`` × (``normal(size=(n, n))`` + ``dot``); None without numpy."""
    try:
        import numpy
    except ImportError:
        return None
    t0 = time.perf_counter()
    for _ in range(repeats):
        a = numpy.random.normal(size=(n, n))
        numpy.dot(a, a)
    return time.perf_counter() - t0


def text_round(
    agent: Any,
    stream: Any,
    number: int,
    device: str,
    counted: list[int],
    repeats: int = TEXT_REPEATS,
    n: int = TEXT_SIZE,
) -> dict[str, float]:
    """One round of the text's three timings, the live loop paused; reports and logs them.

    Each timing must start on an idle device. An emulated stream is *held*: its executor finishes the
    item it runs and leaves the live backlog queued, and the text's items run on a stream of their own
    (``text``, an executor thread not drawn as one): the live queue is as full after the round as
    before it, and the round does not wait for 1024 items to drain (0.5 s on an idle 2-core machine,
    10 s and more when other work takes the cores). A CUDA stream is drained first (a fraction of a
    second on a GPU). The launches timed alone are waited for (untimed) before the synchronized
    timing. Launches go straight to the stream, whatever the SYNC setting: these are the text's own
    loops. Returns the times (and ``paused``, how long the live loop waited).
    """
    paused = time.perf_counter()
    hold = getattr(stream, "hold", None)
    with agent.timing_round(), hold() if hold is not None else _drained(stream):
        if hold is not None:
            stream = _text_stream(agent)
        t_numpy = numpy_time(repeats, n)
        t0 = time.perf_counter()
        for _ in range(repeats):
            stream.launch(_text_item, n, device, counted)
        t_launch = time.perf_counter() - t0
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            stream.launch(_text_item, n, device, counted)
        stream.synchronize()
        t_sync = time.perf_counter() - t0
    paused = time.perf_counter() - paused
    rows = [] if t_numpy is None else [("numpy", t_numpy, "s")]
    rows += [
        ("torch launch", t_launch, "s"),
        ("torch + sync", t_sync, "s"),
        ("launch/complete", 100.0 * t_launch / t_sync, "%"),
    ]
    agent.round_results(number, rows)
    numpy_text = "numpy not installed" if t_numpy is None else f"numpy {t_numpy:.4f} s"
    agent.log(
        f"text round {number}: {repeats} × randn({n}, {n}) + mm: {numpy_text}, torch {t_launch:.4f} s "
        f"(launches returned), torch + synchronize {t_sync:.4f} s (launch/complete "
        f"{100 * t_launch / t_sync:.2g} %); the live loop paused {paused:.2f} s"
    )
    return {"numpy": t_numpy or 0.0, "launch": t_launch, "sync": t_sync, "paused": paused}
