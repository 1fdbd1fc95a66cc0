"""async: the asynchronous-computation text, made live.

Each item is ``torch.mm(torch.randn(n, n), w)``, launched onto a stream (a CUDA stream on a GPU, an
emulated CPU stream otherwise). The text uses n = 1000; on a GPU that item takes well under a
millisecond, so a full 1024-deep queue is a fraction of a second of work. On two CPU cores the same
item takes about 25 ms and a full queue would take 25 s to drain after a switch to SYNC, so the CPU
emulation uses n = 256 (about 0.5 ms an item) to keep the queue's time scale, not the matrix size.

The Python frontend only launches, so it runs ahead until the launch
queue is full and launch blocks. In SYNC mode the frontend waits for each item: depth 0 or 1. The
throughput is the rate at which the stream *completes* items, in both modes.
"""

from __future__ import annotations

import torch

SIZE = 1000
CPU_SIZE = 256


def _item(n: int, w: torch.Tensor) -> None:
    torch.mm(torch.randn(n, n), w)


def _cuda_item(n: int, w: torch.Tensor) -> None:
    torch.mm(torch.randn(n, n, device=w.device), w)


def run(agent, size: int = CPU_SIZE) -> None:
    """Launch items until stopped (on ``cuda:0`` with n = 1000 when CUDA is available)."""
    if torch.cuda.is_available():
        _run_cuda(agent, SIZE if size == CPU_SIZE else size)
        return
    stream = agent.emulated_stream("cpu-stream:0")
    agent.throughput_from(lambda: stream.completed, "it/s")
    agent.log(f"experiment async: randn({size},{size}) + mm per item on {stream.name} "
              f"(emulated CPU stream, capacity {stream.capacity})")
    w = torch.randn(size, size)
    while agent.running:
        agent.launch(stream, _item, size, w)
        agent.step()


def _run_cuda(agent, size: int) -> None:
    """The same loop on ``cuda:0``'s current stream; throughput counts items whose ops completed."""
    stream = agent.cuda_stream("cuda:0", device=0)
    agent.throughput_from(stream.items_completed, "it/s")
    agent.log(f"experiment async: randn({size},{size}) + mm per item on cuda:0 (CUDA stream; queue shown "
              f"as outstanding ops, capacity {stream.capacity})")
    w = torch.randn(size, size, device="cuda:0")
    while agent.running:
        agent.launch(stream, _cuda_item, size, w)
        agent.step()
