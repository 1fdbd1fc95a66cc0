"""Meaning computed once from measurements: verdicts and notes the screen and headless output share.

Pure functions of snapshot pieces; the store calls them when it builds a
:class:`~torchpar_top.contract.snapshot.Snapshot`. The TUI formats what they return, headless serialises it.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchpar_top.contract.snapshot import DataVerdict, ExecutorView, ThreadGroup
from torchpar_top.contract.vocab import DataBound, ExecutorKind, Mode, Role

#: A DataLoader-fed frontend waiting for its next batch more than this share of the time (the store
#: gives the last second's mean) is input-bound.
INPUT_BOUND_WAIT = 0.3

#: Run-queue wait summed over every thread above this (percent of one core: half a core) is "starved"...
STARVED_WAIT_PERCENT = 50.0
#: ...if it is also above this share of the time the threads wanted a core (ran + waited).
STARVED_SHARE = 0.2

#: A frontend above this share of a core (per thread of its group) while in SYNC is spinning in a wait.
HOT_FRONTEND_PERCENT = 80.0


def data_verdict(data_wait: float | None, has_dataloader: bool) -> DataVerdict | None:
    """Input-bound when the frontend waited for data more than :data:`INPUT_BOUND_WAIT`, else
    compute-bound; None without a watched DataLoader or a measured wait."""
    if data_wait is None or not has_dataloader:
        return None
    return DataVerdict(DataBound.INPUT if data_wait > INPUT_BOUND_WAIT else DataBound.COMPUTE, data_wait)


def starved(groups: Sequence[ThreadGroup]) -> float | None:
    """Cores' worth of run-queue wait when the threads were starved of CPU, else None.

    Starved: the wait (the kernel's run-queue delay, ``schedstat``) is above half a core in all and
    above :data:`STARVED_SHARE` of the time the threads wanted a core (run + wait): on a large machine a
    little wait spread over many busy threads is not starvation. The cores were all taken, by this
    workload's own threads (oversubscription) or by other processes (the cores panel tells which).
    """
    wait = sum(g.wait_percent for g in groups)
    ran = sum(g.cpu_percent for g in groups)
    if wait <= STARVED_WAIT_PERCENT or wait <= STARVED_SHARE * (wait + ran):
        return None
    return wait / 100.0


def frontend_hot_in_sync(
    mode: Mode, groups: Sequence[ThreadGroup], executors: Sequence[ExecutorView]
) -> bool:
    """SYNC with a CUDA stream to synchronize with, and the frontend runs above
    :data:`HOT_FRONTEND_PERCENT` of a core per thread: a thread spinning in ``cudaDeviceSynchronize`` is
    waiting, not working. Not on the CPU: there eager ops run on the frontend thread (SYNC changes nothing
    there) and an emulated stream's synchronize blocks, so a hot frontend is working."""
    return (
        mode == Mode.SYNC
        and any(e.kind == ExecutorKind.CUDA_STREAM for e in executors)
        and any(
            g.role == Role.FRONTEND and g.cpu_percent > HOT_FRONTEND_PERCENT * max(1, g.count) for g in groups
        )
    )


def arguments(description: str, target: str) -> str:
    """The description less what the target label already says: ``train.py --epochs 3`` after
    ``run train.py`` becomes ``--epochs 3``."""
    first, _, rest = description.partition(" ")
    return rest if first and first in target.split() else description
