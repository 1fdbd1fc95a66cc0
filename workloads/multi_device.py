"""multi-device: the auto-parallelism text, made live.

20000 × ``mm`` of 100×100 on device 0, then on device 1, then on both at once, fed by one Python
thread, each phase ended by a synchronize and timed (the text's published figures on two GPUs: device 0
0.2989 s, device 1 0.3518 s, both 0.5076 s). With two GPUs the devices are ``cuda:0`` and ``cuda:1``
(untested on hardware); with one, device 1 is an emulated CPU stream. Without a GPU the devices are
two emulated CPU streams, each with one intra-op thread, so on two cores they can really overlap.
Rounds repeat until stopped; each round's three times and its speed-up are reported together when the
round ends (never one round's devices beside another round's "both"), and the lanes show the overlap
as it happens.
"""

from __future__ import annotations

import time

import torch

#: Runs on cuda:0 and cuda:1 where CUDA is available (the hello says so).
USES_CUDA = True
OPS = 20000
SIZE = 100
#: mm per launched item: the emulated stream's Python cost per item (12-19 µs) would otherwise dwarf a
#: 100×100 mm (about 20 µs on one core).
BATCH = 20


def _mm_batch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, k: int) -> None:
    for _ in range(k):
        torch.mm(x, w, out=out)


def run(agent, ops: int = OPS, size: int = SIZE, batch: int = BATCH) -> None:
    """Run rounds of the three phases until stopped."""
    agent.set_threads(1)
    if torch.cuda.is_available():
        streams, data = _cuda_lanes(agent, ops, size, batch)
    else:
        streams = [agent.emulated_stream(f"cpu-stream:{i}") for i in range(2)]
        agent.throughput_from(lambda: batch * sum(s.completed for s in streams), "mm/s")
        data = [(torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)) for _ in streams]
        agent.log(
            f"experiment multi-device: {ops} × mm({size}×{size}) per phase on 2 emulated CPU streams "
            f"(1 intra-op thread each), {batch} mm per launch"
        )
    launches = ops // batch
    rnd = 0
    while agent.running:
        rnd += 1
        times = {}
        for label, targets in (("device 0", [0]), ("device 1", [1]), ("both", [0, 1])):
            t0 = time.perf_counter()
            for _ in range(launches):
                for i in targets:
                    agent.launch(streams[i], _mm_batch, *data[i], batch)
                agent.step(batch * len(targets))
                if not agent.running:
                    return
            for i in targets:
                streams[i].synchronize()
            times[label] = time.perf_counter() - t0
        serial = times["device 0"] + times["device 1"]
        agent.round_results(
            rnd,
            [
                *(
                    (f"{label}{' at once' if label == 'both' else ' alone'}", times[label], "s")
                    for label in times
                ),
                ("speed-up of both", serial / times["both"], "×"),
            ],
        )
        agent.log(
            f"round {rnd}: device 0 {times['device 0']:.4f} s, device 1 {times['device 1']:.4f} s, "
            f"both {times['both']:.4f} s ({serial / times['both']:.2f}× of serial)"
        )


def _cuda_lanes(agent, ops: int, size: int, batch: int) -> tuple[list, list]:
    """Device i on ``cuda:i``; with one GPU, device 1 is an emulated CPU stream (and the log says so)."""
    gpus = min(2, torch.cuda.device_count())
    streams: list = [agent.cuda_stream(f"cuda:{i}", device=i) for i in range(gpus)]
    data = [
        (
            *tuple(torch.randn(size, size, device=f"cuda:{i}") for _ in range(2)),
            torch.empty(size, size, device=f"cuda:{i}"),
        )
        for i in range(gpus)
    ]
    if gpus == 1:
        agent.log("only 1 CUDA device: the auto-parallelism text needs 2; device 1 is an emulated CPU stream")
        streams.append(agent.emulated_stream("cpu-stream:1"))
        data.append((torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)))
    agent.throughput_from(
        lambda: (
            batch
            * sum(s.items_completed() if hasattr(s, "items_completed") else s.completed for s in streams)
        ),
        "mm/s",
    )
    agent.log(
        f"experiment multi-device: {ops} × mm({size}×{size}) per phase on "
        f"{', '.join(s.name for s in streams)}, {batch} mm per launch"
    )
    return streams, data
