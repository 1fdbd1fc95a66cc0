"""async: the asynchronous-computation text, made live, with the text's own table.

Each item of the live loop is ``torch.mm(torch.randn(n, n), w)``, launched onto a stream (a CUDA stream
on a GPU, an emulated CPU stream otherwise). The text uses n = 1000; on a GPU that item takes well under
a millisecond, so a full 1024-deep queue is a fraction of a second of work. On two CPU cores the same
item takes about 25 ms and a full queue would take 25 s to drain after a switch to SYNC, so the CPU
emulation uses n = 256 (about 0.5 ms an item) to keep the queue's time scale, not the matrix size.

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

SIZE = 1000
CPU_SIZE = 256
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


def run(
    agent, size: int = CPU_SIZE, timing_every: float = TIMING_EVERY, first_timing: float = FIRST_TIMING_AFTER
) -> None:
    """Launch items until stopped (on ``cuda:0`` with n = 1000 when CUDA is available), with a round
    of the text's timings every ``timing_every`` seconds."""
    text_items = [0]  # items of the text's timings (left out of the live throughput on CUDA)
    if torch.cuda.is_available():
        size = SIZE if size == CPU_SIZE else size
        stream = agent.cuda_stream("cuda:0", device=0)
        agent.throughput_from(lambda: stream.items_completed() - text_items[0], "it/s")
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
