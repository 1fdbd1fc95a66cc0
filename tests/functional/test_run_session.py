"""`torchpar-top run` end to end: the user's scripts in a real child, through the session and the CLI."""

import os
import pathlib
import signal
import subprocess
import sys

import pytest
from torchpar_top.sources.live.session import Session
from torchpar_top.sources.live.targets import ScriptTarget
from waiting import running, wait_for

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"
pytestmark = pytest.mark.slow


@pytest.fixture
def run_session():
    made = []

    def make(script, *args, **kw):
        s = Session(ScriptTarget(str(SCRIPTS / script), tuple(args), **kw))
        made.append(s)
        s.start()
        return s

    yield make
    for s in made:
        s.close()


def test_an_input_bound_training_loop(run_session):
    s = run_session("train_dataloader.py", "100000")
    # the verdict is over the last second: wait for a few seconds of steps (workers started)
    snap = wait_for(
        lambda: (
            (sn := s.snapshot()).data_verdict
            and sn.throughput_unit == "steps/s"
            and len(sn.frontend_busy) >= 30
            and sn
        ),
        timeout=90,
    )
    # steps come a batch at a time (a batch every ~0.1 s or more): some 0.1 s windows hold none
    assert max(snap.throughput_history) > 0
    assert snap.data_verdict.bound == "input-bound" and snap.data_verdict.wait > 0.3
    loaders = [e for e in snap.executors if e.kind == "dataloader"]
    assert loaders and loaders[0].quantity == "outstanding"
    wait_for(lambda: max(next(e for e in s.snapshot().executors if e.kind == "dataloader").history) > 0)
    assert snap.target.startswith("run ") and snap.ranks[0].pid == snap.child.pid


def test_a_sleeping_frontend_is_idle_not_busy(run_session):
    """The frontend lane's busy share is its thread's run time: a script in ``time.sleep`` is idle."""
    s = run_session("sleeps.py")
    snap = wait_for(
        lambda: (sn := s.snapshot()).frontend_core_wait and len(sn.frontend_busy) >= 10 and sn, timeout=90
    )
    recent = snap.frontend_busy[-5:]
    assert max(recent) < 0.3, recent  # 1 tiny op per 50 ms of sleep: about 1 % of a core
    assert max(snap.frontend_wait[-5:]) == 0.0  # sleeping is not a recorded wait either: it is idle


def test_sync_points_are_attributed_to_the_line(run_session):
    # long enough to outlast the rate: once steps are found the op counter samples 1 % of the time, in
    # slices ~2.5 s apart, and a rate needs two reports (100,000 steps ended in 7 s on a quiet VM)
    s = run_session("item_every_step.py", "100000000")
    site = wait_for(
        lambda: next((x for x in s.snapshot().syncpoints if x.call.startswith("item")), None), timeout=90
    )
    source = (SCRIPTS / "item_every_step.py").read_text().splitlines()
    file, line = site.where.rsplit(":", 1)
    assert file.endswith("item_every_step.py") and ".item()" in source[int(line) - 1]
    wait_for(lambda: next(x for x in s.snapshot().syncpoints if x.call.startswith("item")).per_second > 0)


def test_sync_toggle_in_user_code_says_cpu_ops_are_synchronous(run_session):
    s = run_session("item_every_step.py", "100000")
    wait_for(lambda: s.snapshot().throughput)
    s.toggle_sync()
    wait_for(lambda: s.snapshot().mode == "sync")
    wait_for(lambda: any("synchronous" in line.text for line in s.snapshot().log))


def test_a_script_that_raises_is_shown_with_its_traceback_and_can_restart(run_session):
    s = run_session("raises.py")
    child = wait_for(lambda: (c := s.snapshot().child).state == "exited" and c, timeout=60)
    assert child.exit_code == 1
    assert child.last_stderr[-1] == "ValueError: bad value 42"
    assert any(line.text == "about to fail" for line in s.snapshot().log)
    first = child.pid
    s.restart()
    again = wait_for(lambda: (c := s.snapshot().child).state == "exited" and c.pid != first and c, timeout=60)
    assert again.exit_code == 1


def test_torchrun_ranks_are_shown_and_a_dead_rank_is_marked(run_session):
    s = run_session("ddp_gloo.py", "1000000", nproc=2)
    ranks = wait_for(
        lambda: (r := s.snapshot().ranks) and len(r) == 2 and all(x.throughput for x in r) and r, timeout=120
    )
    assert sorted(r.rank for r in ranks) == [0, 1]
    # every rank is in: the private socket directory is gone already (a SIGKILL now leaves nothing)
    assert not os.path.exists(s._listener.directory)
    names = {(e.rank, e.name) for e in s.snapshot().executors}
    assert {(0, "cpu (eager)"), (1, "cpu (eager)")} <= names
    victim = next(r for r in ranks if r.rank == 1)
    os.kill(victim.pid, signal.SIGKILL)
    wait_for(lambda: next(r for r in s.snapshot().ranks if r.rank == 1).state == "exited", timeout=60)
    # torchrun starts each rank in a session of its own, out of reach of our process group:
    # closing must still end the surviving rank.
    survivor = next(r for r in ranks if r.rank == 0).pid
    launcher = s.snapshot().child.pid
    s.close()
    wait_for(lambda: not running(survivor) and not running(launcher), timeout=15)


def _wait_in_loop(s):
    """Both ranks of ``ranks_clean_up.py`` known by pid and inside their ``try`` block (each said so):
    stopped earlier, a rank still starting has no ``finally`` to run (a CI run on a slow VM stopped rank 0
    between its hello and its loop). Returns the ranks."""
    ranks = wait_for(
        lambda: (r := s.snapshot().ranks) and len(r) == 2 and all(x.pid for x in r) and r, timeout=120
    )
    wait_for(lambda: sum("in its loop" in line.text for line in s.snapshot().log) == 2, timeout=120)
    return ranks


def test_stopping_torchrun_lets_every_rank_clean_up(run_session, tmp_path):
    """Closing a torchrun session sends each rank's agent the stop first (as Ctrl-C would), so the
    ranks' finally blocks run before anything is signalled."""
    s = run_session("ranks_clean_up.py", str(tmp_path), nproc=2)
    _wait_in_loop(s)
    s.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def test_a_hang_up_stops_the_ranks_at_once_as_it_would_without_torchpar_top(run_session, tmp_path):
    """After SIGHUP (the terminal closed) the close sends SIGTERM at once: the ranks' finally blocks do
    not run (SIGTERM's default, as SIGHUP's would have been in that terminal), and nothing is left."""
    s = run_session("ranks_clean_up.py", str(tmp_path), nproc=2)
    ranks = _wait_in_loop(s)
    launcher = s.snapshot().child.pid
    s.hang_up()
    s.close()
    assert list(tmp_path.iterdir()) == []
    wait_for(lambda: not any(running(p) for p in (launcher, *(r.pid for r in ranks))), timeout=15)


def test_a_rank_that_raises_shows_its_status_and_why(run_session):
    s = run_session("ddp_gloo.py", "1000000", "1", nproc=2)
    rank1 = wait_for(
        lambda: (r := [x for x in s.snapshot().ranks if x.rank == 1]) and r[0].state == "exited" and r[0],
        timeout=120,
    )
    # The rank is torchrun's child, not ours: this status is the one its agent reported.
    assert rank1.exit_code == 1
    assert any(
        line.text == "rank 1's code ended with status 1: RuntimeError: rank 1 gives up at step 20"
        for line in s.snapshot().log
    )
    # torchrun then stops the other rank and exits with a failure of its own.
    child = wait_for(lambda: (c := s.snapshot().child).state == "exited" and c, timeout=120)
    assert child.exit_code != 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["no_such_script.py"], "no_such_script.py"),
        ([str(SCRIPTS / "syntax_error.py")], "syntax_error.py:4"),
        (["-m", "no_such_module_xyz"], "no_such_module_xyz"),
        ([], "needs a script"),
        (["--"], "needs a script"),
        (["--", "no_such_script.py"], "no_such_script.py"),
    ],
)
def test_run_errors_are_one_line(args, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "torchpar_top", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("torchpar-top: error:")


CLOSERANGE = """
import os, sys, time
print("closing", flush=True)
os.closerange(3, 1024 if sys.argv[2] == "1024" else os.sysconf("SC_OPEN_MAX"))
with open(sys.argv[1], "w") as f:  # takes the lowest free number: fd 3, as under plain python
    f.write(str(f.fileno()))
for i in range(400):
    time.sleep(0.05)
    if os.path.exists(sys.argv[1] + ".stop"):
        break
print("done", flush=True)
sys.exit(7)
"""


@pytest.mark.parametrize("upto", ["1024", "all"])
def test_a_script_that_closes_every_descriptor_runs_on_and_its_status_is_its_own(tmp_path, upto):
    """``os.closerange(3, 1024)`` in the script: the agent's channel is out of its reach (commands still
    work); closing every descriptor loses it (the app says monitoring is lost). Either way it is never
    taken for torchpar-top going away: the script runs to its end and its own status is reported."""
    script = tmp_path / "closerange.py"
    script.write_text(CLOSERANGE)
    marker = tmp_path / "fd.txt"
    s = Session(ScriptTarget(str(script), (str(marker), upto)))
    try:
        s.start()
        wait_for(lambda: any(line.text == "closing" for line in s.snapshot().log), timeout=90)
        wait_for(lambda: marker.exists() and marker.read_text(), timeout=30)
        assert marker.read_text() == "3"
        s.toggle_sync()  # a command after the descriptors were closed (this used to stop the script)
        if upto == "1024":
            wait_for(lambda: s.snapshot().mode == "sync", timeout=30)
        else:
            wait_for(lambda: s.snapshot().notice.startswith("monitoring lost"), timeout=30)
        assert s.snapshot().child.state == "running"
        (tmp_path / "fd.txt.stop").write_text("")
        child = wait_for(lambda: (c := s.snapshot().child).state == "exited" and c, timeout=60)
        assert child.exit_code == 7
        assert any(line.text == "done" for line in s.snapshot().log)
    finally:
        s.close()


PYTHON_THREADS = """
import threading, torch
x = torch.randn(256, 256)
(x @ x).sum()  # starts the intra-op (OpenMP) team
stop = threading.Event()
threads = [threading.Thread(target=stop.wait, daemon=True) for _ in range(200)]
for t in threads:
    t.start()
print("threads started", flush=True)
stop.wait(600)
"""


def test_a_scripts_own_python_threads_are_not_intra_op_workers(tmp_path):
    """200 plain Python threads: a group of their own; the intra-op workers are only OpenMP's."""
    script = tmp_path / "threads.py"
    script.write_text(PYTHON_THREADS)
    s = Session(ScriptTarget(str(script)))
    try:
        s.start()

        def groups():
            snap = s.snapshot()
            return {g.role: g.count for g in snap.thread_groups}, snap.num_threads

        (by_role, num_threads) = wait_for(
            lambda: (g := groups())[0].get("Python threads") == 200 and g, timeout=90
        )
        # what plain python has after one matmul on this machine: a few native threads, not the 200
        assert by_role.get("intra-op workers", 0) <= num_threads
    finally:
        s.close()


def test_closing_during_a_restart_leaves_nothing_running(tmp_path):
    """``r`` then ``q`` at once: the restart (seconds, to stop a script that ignores signals) runs in a
    worker thread while the app closes the session; the restart starts nothing once closing began."""
    import threading

    from waiting import processes_running, unique_tag

    tag = unique_tag()
    s = Session(ScriptTarget(str(SCRIPTS / "stubborn.py"), (tag,)))
    s.start()
    try:
        wait_for(
            lambda: any(line.text == f"stubborn script ready {tag}" for line in s.snapshot().log), timeout=90
        )
        restart = threading.Thread(target=s.restart)
        restart.start()
        wait_for(lambda: not s._child, timeout=10)  # the restart is stopping the old script
        s.close()
        restart.join(30)
        assert not restart.is_alive()
        assert not processes_running(tag)
    finally:
        s.close()
