"""Meaning computed once in the session: verdicts and notes from recorded measurements."""

from __future__ import annotations

from torchpar_top.contract.snapshot import ExecutorView, ThreadGroup
from torchpar_top.contract.vocab import DataBound, ExecutorKind, Mode, Quantity, Role
from torchpar_top.model import derive


def _g(role: Role, cpu: float, wait: float = 0.0, count: int = 1) -> ThreadGroup:
    return ThreadGroup(role, count, count, cpu, tuple(range(count)), wait)


def test_data_verdict_needs_a_loader_and_a_wait() -> None:
    assert derive.data_verdict(0.62, True).bound == DataBound.INPUT
    assert derive.data_verdict(0.30, True).bound == DataBound.COMPUTE  # at the threshold: not input-bound
    assert derive.data_verdict(0.31, True).wait == 0.31
    assert derive.data_verdict(0.62, False) is None
    assert derive.data_verdict(None, True) is None


def test_starved_above_half_a_core_and_a_fifth_of_runnable_time() -> None:
    run = (
        _g(Role.FRONTEND, 41.0, 18.0),
        _g(Role.INTRAOP, 41.0, 24.0, 2),
        _g(Role.DATA_WORKERS, 32.0, 22.0, 6),
    )
    assert derive.starved(run) == 0.64
    assert (
        derive.starved(
            tuple(
                ThreadGroup(g.role, g.count, g.busy, g.cpu_percent, g.tids, g.wait_percent / 2) for g in run
            )
        )
        is None
    )
    # 60 busy threads each waiting 2 % of the time: 1.2 cores of wait, but 2 % of their runnable time.
    many = tuple(_g(Role.INTRAOP, 98.0, 2.0) for _ in range(60))
    assert derive.starved(many) is None
    assert derive.starved(()) is None


def _stream(kind: ExecutorKind) -> ExecutorView:
    return ExecutorView("s", kind, Quantity.DEPTH, 0, 1024, 0, 0, False, (), (), ())


def test_a_hot_frontend_is_waiting_only_in_sync_on_a_cuda_stream() -> None:
    cuda = [_stream(ExecutorKind.CUDA_STREAM)]
    assert derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 81.0),), cuda)
    assert not derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 80.0),), cuda)
    assert not derive.frontend_hot_in_sync(Mode.ASYNC, (_g(Role.FRONTEND, 99.0),), cuda)
    assert derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 170.0, count=2),), cuda)
    assert not derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 150.0, count=2),), cuda)
    assert not derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.INTRAOP, 99.0),), cuda)
    # on the CPU a hot frontend in SYNC is computing: eager ops run on it; an emulated stream's
    # synchronize blocks
    for kind in (ExecutorKind.EAGER, ExecutorKind.EMULATED_STREAM, ExecutorKind.DATALOADER):
        assert not derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 99.0),), [_stream(kind)])
    assert not derive.frontend_hot_in_sync(Mode.SYNC, (_g(Role.FRONTEND, 99.0),), [])


def test_arguments_leave_out_what_the_target_says() -> None:
    assert derive.arguments("train.py --epochs 3", "run train.py") == "--epochs 3"
    assert derive.arguments("ddp_train.py", "run ddp_train.py ×2 ranks") == ""
    assert derive.arguments("emulated CPU streams", "async") == "emulated CPU streams"
