"""The built-in experiments, one small module each, from PyTorch's parallelism texts.

Each module has ``run(agent)``: it asks the agent for executors, loops until ``agent.running`` turns
false, and reports its own measured throughput. This registry imports none of them (no torch), so the
CLI can list and check names at once.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from torchpar_top.contract.snapshot import Experiment

EXPERIMENTS: dict[str, tuple[str, Experiment]] = {
    "async": (
        "async_compute",
        Experiment(
            "async",
            "randn + mm launched onto a stream (asynchronous computation)",
            "The frontend launches randn+mm items onto a stream and runs ahead; the launch queue fills to "
            "its capacity. SYNC waits for each item: the queue collapses. Every 15 s the live loop pauses "
            "for the text's own table: 10 × randn(1000²) + mm with numpy, torch's launches, torch + "
            "synchronize.",
        ),
    ),
    "multi-device": (
        "multi_device",
        Experiment(
            "multi-device",
            "20000 × mm(100×100) on device 0, device 1, both (auto-parallelism)",
            "One Python thread feeds two devices; run alone they take t0 and t1, together less than "
            "t0 + t1 when they overlap.",
        ),
    ),
    "intra-op": (
        "intra_op",
        Experiment(
            "intra-op",
            "a large matmul loop; +/- set_num_threads (intra-op threads)",
            "One operator split across the intra-op thread pool; the scaling table fills in as you try "
            "thread counts.",
        ),
    ),
    "inter-op": (
        "inter_op",
        Experiment(
            "inter-op",
            "independent matmul chains forked on the inter-op pool (TorchScript fork)",
            "A TorchScript function forks independent chains; pending futures are the queue.",
        ),
    ),
}

DEFAULT = "async"


def names() -> list[str]:
    """The experiment names, in menu order."""
    return list(EXPERIMENTS)


def info(name: str) -> Experiment:
    """Name, title and description of one experiment.

    Raises:
        KeyError: no such experiment.
    """
    return EXPERIMENTS[name][1]


def module(name: str) -> ModuleType:
    """Import the experiment's module (imports torch)."""
    return importlib.import_module(f"{__name__}.{EXPERIMENTS[name][0]}")


class _Loaded:
    """An experiment with its ``run``; ``uses_cuda``: it runs on CUDA where CUDA is available (its
    module's ``USES_CUDA``)."""

    def __init__(self, name: str) -> None:
        meta = info(name)
        self.name, self.title, self.description = meta.name, meta.title, meta.description
        mod = module(name)
        self.run = mod.run
        self.uses_cuda = bool(getattr(mod, "USES_CUDA", False))

    def device(self, cuda_available: bool) -> str:
        """What the experiment runs on, as its hello says: ``cuda`` or ``cpu``."""
        return "cuda" if self.uses_cuda and cuda_available else "cpu"


def get(name: str) -> _Loaded:
    """The experiment ``name``, ready to run."""
    return _Loaded(name)
