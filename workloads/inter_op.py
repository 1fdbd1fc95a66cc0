"""inter-op: independent matmul chains forked on the inter-op pool (TorchScript ``fork``).

A scripted function forks ``CHAINS`` independent chains and returns their futures at once; the
futures not yet done are the queue (``outstanding``). ASYNC keeps forking while earlier batches run
(up to ``MAX_PENDING`` futures, then it waits on the oldest); SYNC waits on each batch at once.
"""

from __future__ import annotations

import torch

CHAINS = 4
LENGTH = 20
SIZE = 256
MAX_PENDING = 64


@torch.jit.script
def _chain(x: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = torch.tanh(torch.mm(x, w))
    return x


@torch.jit.script
def _fork_chains(xs: list[torch.Tensor], w: torch.Tensor, n: int) -> list[torch.jit.Future[torch.Tensor]]:
    futures = torch.jit.annotate(list[torch.jit.Future[torch.Tensor]], [])
    for x in xs:
        futures.append(torch.jit.fork(_chain, x, w, n))
    return futures


def run(agent, chains: int = CHAINS, length: int = LENGTH, size: int = SIZE) -> None:
    """Fork batches of chains until stopped."""
    pool = agent.interop_pool("inter-op pool")
    agent.throughput_from(lambda: pool.completed, "chains/s")
    w = torch.randn(size, size) / size**0.5
    xs = [torch.randn(size, size) for _ in range(chains)]
    agent.log(
        f"experiment inter-op: {chains} chains of {length} × tanh(mm {size}×{size}) per fork, "
        f"{torch.get_num_interop_threads()} inter-op threads"
    )
    while agent.running:
        pool.track(_fork_chains(xs, w, length))
        if agent.sync.enabled:
            pool.synchronize()
        while pool.outstanding() >= MAX_PENDING and agent.running:
            pool.wait_oldest()
        agent.step(chains)
    pool.synchronize()
