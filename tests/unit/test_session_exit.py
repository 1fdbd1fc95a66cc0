"""torchrun's end settles its ranks first: the last headless record must not show a rank that already
died as running (a CI run read rank 1 with no status and no note: its connection had closed as it died,
before it was a zombie, and it was to be settled at the next host reading, after the last record)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from fakes.steps import hello
from torchpar_top.contract import messages as m
from torchpar_top.contract.vocab import ChildState, LogSource
from torchpar_top.sources.live.session import Session


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


class _Listener:
    """Stands in for the ranks' listener: its drain reads rank 1's closed connection."""

    def __init__(self, session: Session) -> None:
        self.session, self.drains = session, 0

    def drain(self) -> None:
        self.drains += 1
        if self.drains == 1:
            self.session._on_rank_closed(1)


def test_torchruns_end_settles_the_ranks_that_died_before_it_is_told():
    session = Session("async", interval=0.05)  # never started
    pid = _dead_pid()
    store = session.store
    store.on_message(hello(pid, rank=1), 1)
    store.on_message(m.Exit(status=0, reason=""), 1)  # its code returned, then it aborted at exit
    store.add_log(LogSource.STDERR, f"... failed (exitcode: -6) local_rank: 1 (pid: {pid}) of binary: python")
    launcher = SimpleNamespace(pid=4242)  # torchrun, as _on_exit reads it
    session._child, session._listener = launcher, _Listener(session)  # type: ignore[assignment]
    session._on_exit(launcher, 1)  # type: ignore[arg-type]
    snap = store.snapshot()
    assert snap.child.state == ChildState.EXITED
    (rank,) = snap.ranks
    assert (rank.state, rank.exit_code) == (ChildState.EXITED, -6)
    assert rank.note == "rank 1 aborted (SIGABRT) at interpreter exit, after its work had finished"
    assert "rank 1 aborted (SIGABRT)" in snap.child.message  # the workload's end says why


def test_the_rank_that_failed_first_is_named_with_its_error():
    """Rank 1 raised; rank 0 then lost its peer and raised too: rank 1 is named, on its row and in the
    workload's end, with its own error (rank 0's follows from it and stays in the log)."""
    session = Session("async", interval=0.05)  # never started
    store = session.store
    for rank in (0, 1):
        store.on_message(hello(_dead_pid(), rank=rank), rank)
    store.on_message(m.Exit(status=1, reason="RuntimeError: CUDA out of memory"), 1)
    store.on_message(m.Exit(status=1, reason="RuntimeError: Connection closed by peer"), 0)
    for rank in (0, 1):  # rank 0's connection closes first: the order of the reports decides
        store.on_source_closed(rank)
    launcher = SimpleNamespace(pid=4242)
    session._child = launcher  # type: ignore[assignment]
    session._on_exit(launcher, 1)  # type: ignore[arg-type]
    snap = store.snapshot()
    notes = {r.rank: r.note for r in snap.ranks}
    assert notes == {0: "", 1: "rank 1 failed first: RuntimeError: CUDA out of memory"}
    assert "rank 1 failed first: RuntimeError: CUDA out of memory" in snap.child.message
    lines = [line.text for line in snap.log]
    assert "rank 1's code ended with status 1: RuntimeError: CUDA out of memory" in lines
    assert not any(t.startswith("rank 1 failed first") for t in lines[:-1])  # said once, at the end


def test_a_rank_that_returned_or_a_single_workload_is_not_called_failed():
    store = Session("async", interval=0.05).store
    store.on_message(hello(_dead_pid(), rank=0), 0)
    store.on_message(hello(_dead_pid(), rank=1), 1)
    store.on_message(m.Exit(status=0, reason=""), 0)
    store.on_message(m.Exit(status=2, reason="SystemExit: 2"), 1)
    store.on_source_closed(0)
    store.on_source_closed(1, exit_code=-9)  # its process ended otherwise than it reported: not said
    assert [r.note for r in store.snapshot().ranks] == ["", ""]
    single = Session("async", interval=0.05).store
    single.on_message(hello(_dead_pid()), 0)
    single.on_message(m.Exit(status=1, reason="ValueError: bad"), 0)
    single.on_source_closed(0, exit_code=1)
    assert [r.note for r in single.snapshot().ranks] == ["ValueError: bad"]  # its error, not "failed first"


def test_a_single_workloads_end_says_its_error():
    """One process (no torchrun) whose code raised: the workload's end (the status line, the report's
    first line and its verdict) says the exception's first line; the rest of it and the traceback are in
    the log. It read only *exited with status 1* (pytorch/examples' time_sequence_prediction, whose
    ``torch.load`` torch 2.6's ``weights_only`` refuses with a message of five lines)."""
    session = Session("async", interval=0.05)  # never started
    store = session.store
    store.on_message(hello(_dead_pid()), 0)
    first = "_pickle.UnpicklingError: Weights only load failed. \x1b[1mdo those steps\x1b[0m"
    reason = f"{first}\n\t(1) In PyTorch 2.6"
    store.on_message(m.Exit(status=1, reason=reason), 0)
    launcher = SimpleNamespace(pid=4242)
    session._child = launcher  # type: ignore[assignment]
    session._on_exit(launcher, 1)  # type: ignore[arg-type]
    snap = store.snapshot()
    assert snap.child.message == f"workload exited with status 1; {first}"
    from torchpar_top.sinks.verdict import RunTally, render

    text = render(RunTally().report(final=snap))
    assert (
        "\x1b" not in text
        and "verdict: failed: the workload exited with status 1; _pickle.Unpickling" in text
    )
    assert "failed. ␛[1mdo those steps" in text  # the escape made visible, not obeyed
    # a stop of ours: no error said (the agent reports 0, "stopped by torchpar-top")
    quiet = Session("async", interval=0.05).store
    quiet.on_message(hello(_dead_pid()), 0)
    quiet.on_message(m.Exit(status=0, reason="stopped by torchpar-top"), 0)
    quiet.on_source_closed(0, exit_code=0)
    assert quiet.exit_notes() == []
