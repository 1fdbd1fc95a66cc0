"""A fake session for TUI tests: records every call and serves deterministic, realistic snapshots.

Nothing here reads a clock or a random source: the same arguments give the same snapshot, so
snapshot SVGs are stable.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from torchpar_top.session.model import (
    ChildStatus,
    ExecutorView,
    Experiment,
    GpuView,
    LogLine,
    ModeStats,
    ResultRow,
    ScalingPoint,
    Snapshot,
    ThreadGroup,
    ThreadInfo,
)

EXPERIMENTS = (
    Experiment("async", "async vs sync launch queue", "randn(1000,1000) + mm, key s toggles sync"),
    Experiment("multi-device", "two devices, one frontend", "20000 × mm of 100×100 on 0, then 1, then both"),
    Experiment("intra-op", "intra-op threads", "a large matmul loop; + / - change set_num_threads"),
    Experiment("inter-op", "inter-op pool", "independent matmul chains forked on the inter-op pool"),
)


def wave(n: int, base: float, amp: float, phase: float = 0.0, period: float = 7.0) -> tuple[float, ...]:
    """``n`` deterministic values around ``base``: a sine plus a small fixed ripple, clamped to 0..100."""
    return tuple(
        round(min(100.0, max(0.0, base + amp * math.sin((i + phase) / period * 2 * math.pi) + 3 * math.sin(i * 1.7 + phase))), 1)
        for i in range(n)
    )


def make_snapshot(
    *,
    cores: int = 2,
    executors: int = 1,
    mode: str = "async",
    paused: bool = False,
    gpus: int = 0,
    child_state: str = "running",
    exit_code: int | None = None,
    experiment: str = "async",
    eager: bool = False,
    unbounded: bool = False,
    num_threads: int = 2,
) -> Snapshot:
    """A realistic snapshot of the ``async`` experiment on an emulated CPU stream (or several).

    Args:
        cores: Number of CPU cores.
        executors: Number of emulated streams (0, 1 or 2 are typical).
        mode: ``async`` or ``sync``; in sync the queues are empty and the frontend waits.
        paused: ``Snapshot.paused``.
        gpus: Number of fake GPUs (0: ``gpu_status`` says why there are none).
        child_state: ``running``, ``exited``, ``failed`` or ``starting``.
        exit_code: The child's exit code when it exited.
        experiment: The experiment's name.
        eager: Add an eager CPU executor (depth 0, synchronous).
        unbounded: Add an inter-op pool (unbounded, outstanding futures).
        num_threads: ``torch.set_num_threads`` in the child.
    """
    sync = mode == "sync"
    n_hist = 60
    core_loads = tuple(round(97 - 4 * (i % 3) - (i * 37 % 61), 1) if i < 2 * num_threads else round((i * 13) % 9, 1) for i in range(cores))
    if cores == 2:
        core_loads = (97.0, 93.0)
    core_history = tuple(wave(20, load, 6 if load > 50 else 3, phase=i) for i, load in enumerate(core_loads))

    execs = []
    for k in range(executors):
        if sync:
            history = tuple(float(i % 2) for i in range(n_hist))
            busy = tuple(0.55 + 0.1 * math.sin(i / 3 + k) for i in range(n_hist))
            value, blocked = 1, 0.0
        else:
            history = tuple(float(min(1024, 40 * i + 17 * k)) for i in range(n_hist))
            busy = tuple(min(1.0, 0.3 + 0.05 * i) if k == 0 else min(1.0, 0.2 + 0.04 * i) for i in range(n_hist))
            value, blocked = (1024, 0.61) if k == 0 else (1008, 0.0)
        execs.append(
            ExecutorView(
                name=f"cpu-stream:{k}",
                kind="emulated-stream",
                quantity="depth",
                value=value,
                capacity=1024,
                launched=120_000 + 1000 * k,
                completed=120_000 + 1000 * k - value,
                emulated=True,
                history=history,
                busy=busy,
                blocked=blocked,
            )
        )
    if unbounded:
        execs.append(
            ExecutorView(
                name="interop-pool",
                kind="interop-pool",
                quantity="outstanding",
                value=3,
                capacity=None,
                launched=5000,
                completed=4997,
                emulated=False,
                history=tuple(float(i % 5) for i in range(n_hist)),
                busy=tuple(0.5 + 0.4 * math.sin(i / 4) for i in range(n_hist)),
                blocked=0.0,
            )
        )
    if eager:
        execs.append(
            ExecutorView(
                name="cpu:eager",
                kind="eager",
                quantity="depth",
                value=0,
                capacity=None,
                launched=900,
                completed=900,
                emulated=False,
                history=(0.0,) * n_hist,
                busy=(0.0,) * n_hist,
                blocked=0.0,
            )
        )

    threads = (
        ThreadInfo(4242, "python", "frontend (main)", 99.0 if sync else 18.0),
        ThreadInfo(4250, "python", "stream executor cpu-stream:0", 3.0 if sync else 98.0),
        *(ThreadInfo(4260 + i, "python", "intra-op workers", 71.0 - 10 * i) for i in range(max(1, num_threads - 1))),
        ThreadInfo(4270, "python", "torchpar agent", 1.0),
    )
    groups = (
        ThreadGroup("frontend (main)", 1, 1, 99.0 if sync else 18.0, (4242,)),
        ThreadGroup("stream executor cpu-stream:0", 1, 0 if sync else 1, 3.0 if sync else 98.0, (4250,)),
        ThreadGroup(
            "intra-op workers",
            max(1, num_threads - 1),
            max(1, num_threads - 1),
            sum(71.0 - 10 * i for i in range(max(1, num_threads - 1))),
            tuple(4260 + i for i in range(max(1, num_threads - 1))),
        ),
        ThreadGroup("torchpar agent", 1, 0, 1.0, (4270,)),
    )

    frontend_busy = tuple((0.2 if i % 3 else 0.7) if not sync else 0.1 for i in range(n_hist))
    frontend_wait = tuple(1.0 - b for b in frontend_busy)
    overlap = tuple(0.4 + 0.3 * math.sin(i / 5) for i in range(n_hist)) if len(execs) >= 2 else ()

    gpu_views = tuple(
        GpuView(
            index=g,
            label=f"cuda:{g}",
            name="NVIDIA A100-SXM4-80GB",
            util_percent=87.0 - 20 * g,
            util_history=wave(30, 87.0 - 20 * g, 8, phase=g),
            mem_used=(31 + 4 * g) * 1024**3,
            mem_total=80 * 1024**3,
            power_w=312.0 - 40 * g,
            power_limit_w=400.0,
            temperature_c=61.0 + g,
        )
        for g in range(gpus)
    )

    log = (
        LogLine(1, "app", "torchpar-top started; sampling every 0.1 s"),
        LogLine(2, "child", "experiment async started (1000×1000 randn + mm), capacity 1024"),
        LogLine(3, "stdout", "step 100: 12.4 it/s"),
        LogLine(4, "stderr", "UserWarning: TypedStorage is deprecated"),
    )
    last_stderr: tuple[str, ...] = ()
    if child_state in ("exited", "failed"):
        last_stderr = ("Traceback (most recent call last):", "RuntimeError: out of memory")
        log += (LogLine(5, "stderr", "RuntimeError: out of memory"),)

    return Snapshot(
        t=1000.0,
        experiment=experiment,
        description="emulated CPU streams",
        mode=mode,
        paused=paused,
        interval=0.1,
        child=ChildStatus(
            pid=4242,
            state=child_state,
            exit_code=exit_code,
            message="",
            last_stderr=last_stderr,
        ),
        cores=core_loads,
        core_history=core_history,
        threads=threads,
        thread_groups=groups,
        executors=tuple(execs),
        frontend_busy=frontend_busy,
        frontend_wait=frontend_wait,
        overlap=overlap,
        throughput=9.1 if sync else 12.4,
        throughput_history=tuple(12.0 + 0.1 * (i % 5) for i in range(n_hist)),
        num_threads=num_threads,
        interop_threads=1,
        scoreboard=(
            ModeStats("async", 42.0, 12.4, 1013.0, 0.004),
            ModeStats("sync", 12.0, 9.1, 1.0, 0.71),
        ),
        results=(
            ResultRow("mm 1000×1000 (async)", 80.6, "ms/it"),
            ResultRow("mm 1000×1000 (sync)", 109.9, "ms/it"),
        ),
        scaling=(ScalingPoint(1, 21.5, 30), ScalingPoint(2, 40.2, 25)),
        gpus=gpu_views,
        gpu_status="" if gpus else "no GPU: NVML library not found",
        log=log,
    )


class FakeSession:
    """A :class:`~torchpar_top.session.model.SessionLike` for tests.

    Every call is appended to :attr:`calls` (``("toggle_sync",)``, ``("change_threads", 1)``...).
    Commands also change the served snapshot the way a real session would (mode flips, paused,
    experiment name, thread count), so a test can check the screen after a key.
    """

    def __init__(self, snapshot: Snapshot | None = None, experiments: Sequence[Experiment] = EXPERIMENTS) -> None:
        self.snapshot_value = snapshot if snapshot is not None else make_snapshot()
        """What :meth:`snapshot` returns; tests may set it."""
        self.experiment_list = tuple(experiments)
        self.calls: list[tuple] = []
        """Every call, in order."""

    def names(self) -> list[str]:
        """The called method names, in order."""
        return [c[0] for c in self.calls]

    def start(self) -> None:
        """Record the call."""
        self.calls.append(("start",))

    def close(self) -> None:
        """Record the call."""
        self.calls.append(("close",))

    def snapshot(self) -> Snapshot:
        """The settable snapshot (not recorded: the render path calls it often)."""
        return self.snapshot_value

    def experiments(self) -> Sequence[Experiment]:
        """The fake's experiments (not recorded)."""
        return self.experiment_list

    def toggle_sync(self) -> None:
        """Record; flip the snapshot's mode."""
        self.calls.append(("toggle_sync",))
        mode = "sync" if self.snapshot_value.mode == "async" else "async"
        self.snapshot_value = dataclasses.replace(self.snapshot_value, mode=mode)

    def change_threads(self, delta: int) -> None:
        """Record; change ``num_threads`` (at least 1)."""
        self.calls.append(("change_threads", delta))
        n = max(1, (self.snapshot_value.num_threads or 1) + delta)
        self.snapshot_value = dataclasses.replace(self.snapshot_value, num_threads=n)

    def switch_experiment(self, name: str) -> None:
        """Record; rename the snapshot's experiment."""
        self.calls.append(("switch_experiment", name))
        self.snapshot_value = dataclasses.replace(self.snapshot_value, experiment=name)

    def set_paused(self, paused: bool) -> None:
        """Record; set the snapshot's ``paused``."""
        self.calls.append(("set_paused", paused))
        self.snapshot_value = dataclasses.replace(self.snapshot_value, paused=paused)
