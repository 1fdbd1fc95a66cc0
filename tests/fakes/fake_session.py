"""A fake session for TUI tests: records every call and serves deterministic, realistic snapshots.

Nothing here reads a clock or a random source: the same arguments give the same snapshot, so
snapshot SVGs are stable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from torchpar_top.contract.messages import StepPhases, StepRecord
from torchpar_top.contract.snapshot import (
    ChildStatus,
    DataVerdict,
    ExecutorView,
    Experiment,
    GpuView,
    LogLine,
    ModeStats,
    RankMemory,
    RankView,
    ResultRow,
    ScalingPoint,
    Snapshot,
    StackFrame,
    StackView,
    StepsView,
    Straggler,
    SyncSite,
    ThreadGroup,
    ThreadInfo,
)
from torchpar_top.contract.vocab import (
    PHASES,
    ChildState,
    DataBound,
    ExecutorKind,
    LogSource,
    Mode,
    Quantity,
    Role,
    StepSource,
    ThroughputUnit,
    WaitKind,
)
from torchpar_top.model import derive
from torchpar_top.model.snapshot import rebuild

EXPERIMENTS = (
    Experiment("async", "async vs sync launch queue", "randn(1000,1000) + mm, key s toggles sync"),
    Experiment("multi-device", "two devices, one frontend", "20000 × mm of 100×100 on 0, then 1, then both"),
    Experiment("intra-op", "intra-op threads", "a large matmul loop; + / - change set_num_threads"),
    Experiment("inter-op", "inter-op pool", "independent matmul chains forked on the inter-op pool"),
)


def typed(snap: Snapshot) -> Snapshot:
    """The snapshot as the real session serves it: words as enums, the meaning the store derives
    (attached, starved, frontend hot in SYNC, the description less the target) computed by the same
    :mod:`torchpar_top.model.derive` functions, and the figures every snapshot derives
    (:func:`torchpar_top.model.snapshot.rebuild`)."""
    groups = tuple(dataclasses.replace(g, role=Role(g.role)) for g in snap.thread_groups)
    mode = Mode(snap.mode)
    return rebuild(
        snap,
        mode=mode,
        child=dataclasses.replace(snap.child, state=ChildState(snap.child.state)),
        threads=tuple(dataclasses.replace(t, role=Role(t.role)) for t in snap.threads),
        thread_groups=groups,
        executors=tuple(
            dataclasses.replace(e, kind=ExecutorKind(e.kind), quantity=Quantity(e.quantity))
            for e in snap.executors
        ),
        scoreboard=tuple(dataclasses.replace(m, mode=Mode(m.mode)) for m in snap.scoreboard),
        log=tuple(dataclasses.replace(line, source=LogSource(line.source)) for line in snap.log),
        ranks=tuple(
            dataclasses.replace(r, state=ChildState(r.state), unit=ThroughputUnit(r.unit)) for r in snap.ranks
        ),
        throughput_unit=ThroughputUnit(snap.throughput_unit),
        stack=None
        if snap.stack is None
        else dataclasses.replace(snap.stack, waiting_in=WaitKind(snap.stack.waiting_in)),
        description=derive.arguments(snap.description, snap.target),
        attached=ChildState(snap.child.state) == ChildState.ATTACHED,
        starved=derive.starved(groups),
        frontend_hot_in_sync=derive.frontend_hot_in_sync(
            mode, groups, [dataclasses.replace(e, kind=ExecutorKind(e.kind)) for e in snap.executors]
        ),
    )


def wave(n: int, base: float, amp: float, phase: float = 0.0, period: float = 7.0) -> tuple[float, ...]:
    """``n`` deterministic values around ``base``: a sine plus a small fixed ripple, clamped to 0..100."""
    return tuple(
        round(
            min(
                100.0,
                max(
                    0.0,
                    base + amp * math.sin((i + phase) / period * 2 * math.pi) + 3 * math.sin(i * 1.7 + phase),
                ),
            ),
            1,
        )
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
    core_loads = tuple(
        round(97 - 4 * (i % 3) - (i * 37 % 61), 1) if i < 2 * num_threads else round((i * 13) % 9, 1)
        for i in range(cores)
    )
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
            busy = tuple(
                min(1.0, 0.3 + 0.05 * i) if k == 0 else min(1.0, 0.2 + 0.04 * i) for i in range(n_hist)
            )
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
                running=tuple(round(b * (0.8 if k == 0 else 0.55), 3) for b in busy),
                core_wait=tuple(round(b * (0.15 if k == 0 else 0.4), 3) for b in busy),
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
        ThreadInfo(4250, "python", Role.STREAM_EXECUTOR, 3.0 if sync else 98.0, executor="cpu-stream:0"),
        *(
            ThreadInfo(4260 + i, "python", "intra-op workers", 71.0 - 10 * i)
            for i in range(max(1, num_threads - 1))
        ),
        ThreadInfo(4270, "python", "torchpar agent", 1.0),
    )
    groups = (
        ThreadGroup("frontend (main)", 1, 1, 99.0 if sync else 18.0, (4242,)),
        ThreadGroup(
            Role.STREAM_EXECUTOR, 1, 0 if sync else 1, 3.0 if sync else 98.0, (4250,), executor="cpu-stream:0"
        ),
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
    frontend_core_wait = tuple(0.05 if i % 4 == 0 else 0.0 for i in range(n_hist))
    frontend_wait = tuple(
        round(1.0 - b - c, 3) for b, c in zip(frontend_busy, frontend_core_wait, strict=True)
    )
    in_progress = tuple(0.4 + 0.3 * math.sin(i / 5) for i in range(n_hist)) if len(execs) >= 2 else ()
    overlap = tuple(round(0.5 * x, 3) for x in in_progress)

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

    return typed(
        Snapshot(
            t=1000.0,
            monitor_cpu=0.052,
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
            frontend_core_wait=frontend_core_wait,
            overlap=overlap,
            overlap_high=tuple(round(0.8 * x, 3) for x in in_progress),
            overlap_in_progress=in_progress,
            throughput=9.1 if sync else 12.4,
            throughput_history=tuple(12.0 + 0.1 * (i % 5) for i in range(n_hist)),
            num_threads=num_threads,
            interop_threads=1,
            scoreboard=(
                ModeStats("async", 42.0, 12.4, 1013.0, 0.004),
                ModeStats("sync", 12.0, 9.1, 1.0, 0.71),
            ),
            # the async text's table, round 3 of 3 (the text: 1.0704 s, 0.0013 s, 0.0049 s on a GPU)
            results=(
                ResultRow("numpy", 0.4612, "s", 3, 0.4655, 0.4581, 0.5012, 3),
                ResultRow("torch launch", 0.000267, "s", 3, 0.000281, 0.000243, 0.000402, 3),
                ResultRow("torch + sync", 0.1903, "s", 3, 0.1911, 0.1874, 0.2044, 3),
                ResultRow("launch/complete", 0.14, "%", 3, 0.147, 0.12, 0.21, 3),
            ),
            scaling=(ScalingPoint(1, 21.5, 30), ScalingPoint(2, 40.2, 25)),
            gpus=gpu_views,
            gpu_status="" if gpus else "no GPU: NVML library not found",
            log=log,
        )
    )


SITE_PACKAGES = "/home/user/.venv/lib/python3.11/site-packages/"
STDLIB = "/usr/lib/python3.11/"

ATTACH_NOTICE = "attached: cores, threads, GPU use and stacks only — queue depth needs `torchpar-top run`"
"""As the real session says it (a copy: the snapshots must not change when that wording does)."""

PTRACE_MESSAGE = (
    "ptrace not permitted: run as the same user and set /proc/sys/kernel/yama/ptrace_scope to 0, or run "
    "torchpar-top with sudo / CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE)"
)
"""As the stacks probe says it (a copy, for the same reason)."""


def _eager(name: str, ops: int, n_hist: int = 60) -> ExecutorView:
    """The CPU running eager ops on the frontend thread: L = S = C, depth 0."""
    return ExecutorView(
        name, "eager", "depth", 0, None, ops, ops, False, (0.0,) * n_hist, (0.0,) * n_hist, 0.0
    )


def _dataloader(
    name: str, value: int, capacity: int, busy: float, n_hist: int = 60, phase: int = 0
) -> ExecutorView:
    """A DataLoader's prefetch queue: ``outstanding`` batches in the workers, capped at prefetch × workers."""
    history = tuple(
        float(max(0, min(capacity, value - (1 if (i + phase) % 7 == 0 else 0)))) for i in range(n_hist)
    )
    busy_hist = tuple(round(min(1.0, busy + 0.05 * math.sin(i / 3 + phase)), 3) for i in range(n_hist))
    launched = 7440 + 100 * phase
    return ExecutorView(
        name,
        "dataloader",
        "outstanding",
        value,
        capacity,
        launched,
        launched - value,
        False,
        history,
        busy_hist,
        0.0,
    )


def _frames(*spec: tuple[str, str, int]) -> tuple[StackFrame, ...]:
    """Frames from ``(function, filename, line)``, outermost first."""
    return tuple(StackFrame(function, filename, line) for function, filename, line in spec)


def make_run_snapshot(
    *, mode: str = "async", child_state: str = "running", exit_code: int | None = None
) -> Snapshot:
    """``torchpar-top run train.py --epochs 3`` on the CPU: one agent, no rank number.

    The loop is input-bound: a DataLoader with 2 workers (prefetch 2 × 2 = 4) whose queue sits at its
    cap, the frontend waits for data 62% of the time, and py-spy finds it waiting in the DataLoader.
    The workers' threads wait for a core (0.64 cores' worth of run-queue delay in all: starved).
    Six sync-point sites (``.item()`` every step, printing a tensor...).
    """
    base = make_snapshot(cores=4, executors=0, mode=mode, child_state=child_state, exit_code=exit_code)
    n_hist = 60
    frontend_busy = tuple(0.38 + (0.1 if i % 4 == 0 else 0.0) for i in range(n_hist))
    threads = (
        ThreadInfo(4242, "python", "frontend (main)", 41.0, 18.0, 4242),
        ThreadInfo(4243, "python", "intra-op workers", 22.0, 13.0, 4242),
        ThreadInfo(4244, "python", "intra-op workers", 19.0, 11.0, 4242),
        ThreadInfo(4251, "pt_autograd_0", "autograd", 6.0, 0.0, 4242),
        ThreadInfo(4270, "python", "torchpar agent", 1.0, 0.0, 4242),
        # Two DataLoader worker processes (children of the script), three threads each.
        *(
            ThreadInfo(
                4300 + 10 * w + i,
                "pt_data_worker",
                "DataLoader workers",
                12.0 if i == 0 else 2.0,
                9.0 if i == 0 else 1.0,
                4300 + 10 * w,
            )
            for w in range(2)
            for i in range(3)
        ),
    )
    groups = (
        ThreadGroup("frontend (main)", 1, 1, 41.0, (4242,), 18.0),
        ThreadGroup("intra-op workers", 2, 2, 41.0, (4243, 4244), 24.0),
        ThreadGroup("autograd", 1, 0, 6.0, (4251,)),
        ThreadGroup("DataLoader workers", 6, 2, 32.0, (4300, 4301, 4302, 4310, 4311, 4312), 22.0),
        ThreadGroup("torchpar agent", 1, 0, 1.0, (4270,)),
    )
    stack = StackView(
        pid=4242,
        thread="MainThread",
        frames=_frames(
            ("<module>", "/home/user/proj/train.py", 88),
            ("main", "/home/user/proj/train.py", 71),
            ("train_epoch", "/home/user/proj/train.py", 52),
            ("__next__", SITE_PACKAGES + "torch/utils/data/dataloader.py", 733),
            ("_next_data", SITE_PACKAGES + "torch/utils/data/dataloader.py", 1480),
            ("_get_data", SITE_PACKAGES + "torch/utils/data/dataloader.py", 1442),
            ("_try_get_data", SITE_PACKAGES + "torch/utils/data/dataloader.py", 1295),
            ("get", STDLIB + "multiprocessing/queues.py", 113),
            ("poll", STDLIB + "multiprocessing/connection.py", 257),
            ("wait", STDLIB + "multiprocessing/connection.py", 1136),
            ("select", STDLIB + "selectors.py", 415),
        ),
        idle=True,
        t=999.6,
        waiting_in="DataLoader",
        source="agent",
    )
    log = (
        LogLine(1, "app", "torchpar-top started; sampling every 0.1 s"),
        LogLine(2, "app", "starting run train.py"),
        LogLine(3, "child", "agent ready: counting ops, DataLoader prefetch, sync points"),
        LogLine(4, "stdout", "epoch 0  step 100  loss 2.3026"),
        LogLine(5, "stdout", "epoch 0  step 200  loss 1.8713  tensor(0.4180)"),
    )
    if child_state == "exited":
        log += (
            LogLine(6, "app", f"pid 4242: workload exited with status {exit_code}; press r to run it again"),
        )
    return typed(
        dataclasses.replace(
            base,
            experiment="run",
            description="train.py --epochs 3",
            target="run train.py",
            executors=(_eager("cpu (eager)", 91_230), _dataloader("dataloader:0", 4, 4, 0.93)),
            threads=threads,
            thread_groups=groups,
            frontend_busy=frontend_busy,
            frontend_wait=tuple(round(1.0 - b - 0.02, 3) for b in frontend_busy),
            frontend_core_wait=(0.02,) * n_hist,
            overlap=(),
            throughput=6.2,
            throughput_unit="steps/s",
            throughput_history=tuple(6.0 + 0.1 * (i % 5) for i in range(n_hist)),
            num_threads=2,
            scoreboard=(ModeStats("async", 38.0, 6.2, 4.0, 0.62), ModeStats("sync", 0.0, None, None, None)),
            results=(),
            scaling=(),
            log=log,
            sample_t=999.95,
            ranks=(
                RankView(
                    None,
                    4242,
                    child_state if child_state == "exited" else "running",
                    6.2,
                    "steps/s",
                    4,
                    0.62,
                    exit_code,
                ),
            ),
            syncpoints=(
                SyncSite("train.py:57", "item()", 1860, 6.2),
                SyncSite("train.py:61", "print/repr(tensor)", 62, 0.2),
                SyncSite("train.py:49", "to('cpu')", 1860, 6.2),
                SyncSite("metrics.py:14", "tolist()", 300, 1.0),
                SyncSite("train.py:66", "bool(tensor)", 19, 0.0),
                SyncSite("metrics.py:22", "nonzero()", 3, 0.0),
            ),
            data_verdict=DataVerdict(DataBound.INPUT, 0.62),
            stack=stack,
            stack_status="",
        )
    )


def make_torchrun_snapshot(*, ranks: int = 2, dead: int | None = 1) -> Snapshot:
    """``torchpar-top run --nproc-per-node 2 ddp_train.py``: Gloo DDP on the CPU, one rank died.

    Args:
        ranks: How many ranks (2 to 4 are typical); each has an eager executor and a DataLoader,
            prefixed ``rN:``.
        dead: The rank that exited with code 1 (``None``: all running).
    """
    base = make_snapshot(cores=4, executors=0)
    n_hist = 60
    executors: list[ExecutorView] = []
    rank_views = []
    for r in range(ranks):
        exited = r == dead
        executors.append(dataclasses.replace(_eager("cpu (eager)", 40_000 + 1000 * r, n_hist), rank=r))
        executors.append(
            dataclasses.replace(
                _dataloader("dataloader:0", 0 if exited else 1, 4, 0.35, n_hist, phase=r), rank=r
            )
        )
        rank_views.append(
            RankView(
                r,
                5101 + r,
                "exited" if exited else "running",
                5.6 if exited else 5.8 - 0.1 * r,
                "steps/s",
                0 if exited else 1,
                0.10 if exited else 0.12 + 0.01 * r,
                1 if exited else None,
            )
        )
    alive = ranks - (dead is not None)
    groups = (
        ThreadGroup("frontend (main)", alive, alive, 91.0 * alive, tuple(5101 + r for r in range(alive))),
        ThreadGroup("intra-op workers", alive, alive, 58.0 * alive, tuple(5201 + r for r in range(alive))),
        ThreadGroup("autograd", alive, 0, 4.0 * alive, tuple(5301 + r for r in range(alive))),
        ThreadGroup("other", 2 * alive, 1, 12.0, tuple(5401 + r for r in range(2 * alive))),
        ThreadGroup("torchpar agent", alive, 0, 1.0 * alive, tuple(5501 + r for r in range(alive))),
    )
    frontend_busy = tuple(0.8 + (0.1 if i % 5 == 0 else 0.0) for i in range(n_hist))
    stack = StackView(
        pid=5101,
        thread="MainThread",
        frames=_frames(
            ("<module>", "/home/user/proj/ddp_train.py", 95),
            ("main", "/home/user/proj/ddp_train.py", 80),
            ("train_step", "/home/user/proj/ddp_train.py", 41),
            ("backward", SITE_PACKAGES + "torch/_tensor.py", 648),
            ("backward", SITE_PACKAGES + "torch/autograd/__init__.py", 353),
            ("_engine_run_backward", SITE_PACKAGES + "torch/autograd/graph.py", 824),
        ),
        idle=False,
        t=999.7,
        waiting_in="",
        source="agent",
    )
    log = (
        LogLine(1, "app", "torchpar-top started; sampling every 0.1 s"),
        LogLine(2, "app", "starting run ddp_train.py ×2 ranks"),
        LogLine(3, "stdout", "[rank0] step 100  loss 0.6931"),
        LogLine(4, "stderr", "[rank1]: RuntimeError: injected failure at step 120"),
        LogLine(5, "app", "agent connection 2 closed (a rank ended)"),
    )
    return typed(
        dataclasses.replace(
            base,
            experiment="run",
            description="ddp_train.py",
            target=f"run ddp_train.py ×{ranks} ranks",
            child=ChildStatus(pid=5100, state="running"),
            executors=tuple(executors),
            threads=(),
            thread_groups=groups,
            frontend_busy=frontend_busy,
            frontend_wait=tuple(round(1.0 - b, 3) for b in frontend_busy),
            overlap=tuple(round(0.2 + 0.1 * math.sin(i / 4), 3) for i in range(n_hist)),
            throughput=5.8,
            throughput_unit="steps/s",
            throughput_history=tuple(5.6 + 0.1 * (i % 4) for i in range(n_hist)),
            num_threads=2,
            scoreboard=(ModeStats("async", 25.0, 5.8, 1.0, 0.12), ModeStats("sync", 0.0, None, None, None)),
            results=(),
            scaling=(),
            log=log,
            sample_t=999.95,
            ranks=tuple(rank_views),
            syncpoints=(
                SyncSite("ddp_train.py:48", "item()", 700, 5.8, 0),
                *((SyncSite("ddp_train.py:48", "item()", 690, 0.0, 1),) if ranks > 1 else ()),
            ),
            data_verdict=DataVerdict(DataBound.COMPUTE, 0.12),
            stack=stack,
        )
    )


#: Seconds per step in each phase on the two ranks of :func:`make_steps_snapshot` (rank 1's forward is
#: 4x: rank 0 waits for it in DDP's all-reduce, its ``comm``).
STEP_PHASES = (
    StepPhases(
        data=0.0008,
        transfer=0.0002,
        forward=0.0030,
        backward=0.0050,
        comm=0.0110,
        optimizer=0.0010,
        sync=0.0003,
        other=0.0007,
    ),
    StepPhases(
        data=0.0009,
        transfer=0.0002,
        forward=0.0120,
        backward=0.0052,
        comm=0.0018,
        optimizer=0.0010,
        sync=0.0002,
        other=0.0007,
    ),
)


def make_steps_snapshot(*, ranks: int = 2, straggler: bool = True) -> Snapshot:
    """:func:`make_torchrun_snapshot` with every rank running and stepping (:data:`STEP_PHASES`): the
    straggler (rank 1's forward), memory per rank (one slowly growing), and a few whole recent steps."""
    base = make_torchrun_snapshot(ranks=ranks, dead=None)
    views, memory = [], []
    for r, view in enumerate(base.ranks):
        phases = STEP_PHASES[min(r, 1)] if straggler else STEP_PHASES[0]
        step = sum(getattr(phases, p) for p in PHASES)
        recent = tuple(StepRecord(999.0 + i * step, phases) for i in range(4))
        steps = StepsView(
            StepSource.BACKWARD, 1200 + r, 1 / 0.0230, step, phases, step * 1.01, phases, recent=recent
        )
        views.append(dataclasses.replace(view, throughput=steps.per_second, steps=steps))
        memory.append(RankMemory(r, 812_000_000 + 4_000_000 * r, (), 120_000.0 if r else 0.0))
    return typed(
        dataclasses.replace(
            base,
            ranks=tuple(views),
            steps=dataclasses.replace(views[0].steps, recent=()),
            throughput=views[0].steps.per_second,
            straggler=Straggler(1, "forward", 4.0, 0.0092) if straggler else None,
            straggler_windows=12 if ranks > 1 else 0,
            memory=tuple(memory),
        )
    )


def make_attach_snapshot() -> Snapshot:
    """``torchpar-top attach 31337`` without ptrace permission: cores and threads, no agent, no stack."""
    base = make_snapshot(cores=8, executors=0)
    groups = (
        ThreadGroup("frontend (main)", 1, 1, 97.0, (31337,)),
        ThreadGroup("intra-op workers", 3, 3, 236.0, (31338, 31339, 31340)),
        ThreadGroup("data", 2, 0, 3.0, (31341, 31342)),
        ThreadGroup("other", 4, 0, 1.0, (31343, 31344, 31345, 31346)),
    )
    log = (
        LogLine(1, "app", "torchpar-top started; sampling every 0.1 s"),
        LogLine(2, "app", "attached to pid 31337 (python train_big.py)"),
    )
    return typed(
        dataclasses.replace(
            base,
            experiment="attach",
            description="watching pid 31337 (not started by torchpar-top)",
            target="attach 31337",
            child=ChildStatus(
                pid=31337, state="attached", message="watching pid 31337 (not started by torchpar-top)"
            ),
            executors=(),
            threads=(),
            thread_groups=groups,
            frontend_busy=(),
            frontend_wait=(),
            overlap=(),
            throughput=None,
            throughput_history=(),
            num_threads=None,
            interop_threads=None,
            scoreboard=(ModeStats("async", 0.0, None, None, None), ModeStats("sync", 0.0, None, None, None)),
            results=(),
            scaling=(),
            log=log,
            notice=ATTACH_NOTICE,
            stack=None,
            stack_status=PTRACE_MESSAGE,
        )
    )


class FakeSession:
    """A :class:`~torchpar_top.contract.snapshot.SnapshotSource` with live and replay controls, for tests.

    Every call is appended to :attr:`calls` (``("toggle_sync",)``, ``("change_threads", 1)``...).
    Commands also change the served snapshot the way a real session would (mode flips, paused,
    experiment name, thread count), so a test can check the screen after a key.
    """

    def __init__(
        self, snapshot: Snapshot | None = None, experiments: Sequence[Experiment] = EXPERIMENTS
    ) -> None:
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
        mode = Mode.SYNC if self.snapshot_value.mode == Mode.ASYNC else Mode.ASYNC
        self.snapshot_value = typed(dataclasses.replace(self.snapshot_value, mode=mode))

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

    def profile(self, seconds: float = 1.0) -> None:
        """Record."""
        self.calls.append(("profile", seconds))

    def restart(self) -> None:
        """Record; the child runs again (state ``running``, no exit code)."""
        self.calls.append(("restart",))
        child = dataclasses.replace(self.snapshot_value.child, state=ChildState.RUNNING, exit_code=None)
        self.snapshot_value = dataclasses.replace(self.snapshot_value, child=child)

    def step(self, frames: int) -> None:
        """Record; a replay pauses to step (as :class:`~torchpar_top.sources.trace.TraceReplay` does)."""
        self.calls.append(("step", frames))
        if self.snapshot_value.replay is not None:
            self.snapshot_value = dataclasses.replace(self.snapshot_value, paused=True)

    def seek(self, share: float) -> None:
        """Record."""
        self.calls.append(("seek", share))

    def seek_start(self) -> None:
        """Record."""
        self.calls.append(("seek_start",))

    def change_speed(self, factor: float) -> None:
        """Record."""
        self.calls.append(("change_speed", factor))
