"""`torchpar-top run` end to end: the user's scripts in a real child, through the session and the CLI."""

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from torchpar_top.session.session import Session
from torchpar_top.session.targets import ScriptTarget

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
    snap = wait_for(lambda: (sn := s.snapshot()).data_verdict and sn.throughput_unit == "steps/s" and sn,
                    timeout=90)
    assert snap.throughput > 0
    assert snap.data_verdict.bound == "input-bound" and snap.data_verdict.wait > 0.3
    loaders = [e for e in snap.executors if e.kind == "dataloader"]
    assert loaders and loaders[0].quantity == "outstanding"
    wait_for(lambda: max(next(e for e in s.snapshot().executors if e.kind == "dataloader").history) > 0)
    assert snap.target.startswith("run ") and snap.ranks[0].pid == snap.child.pid


def test_a_sleeping_frontend_is_idle_not_busy(run_session):
    """The frontend lane's busy share is its thread's run time: a script in ``time.sleep`` is idle."""
    s = run_session("sleeps.py")
    snap = wait_for(lambda: (sn := s.snapshot()).frontend_core_wait and len(sn.frontend_busy) >= 10 and sn,
                    timeout=90)
    recent = snap.frontend_busy[-5:]
    assert max(recent) < 0.3, recent  # 1 tiny op per 50 ms of sleep: about 1 % of a core
    assert max(snap.frontend_wait[-5:]) == 0.0  # sleeping is not a recorded wait either: it is idle


def test_sync_points_are_attributed_to_the_line(run_session):
    s = run_session("item_every_step.py", "100000")
    site = wait_for(lambda: next((x for x in s.snapshot().syncpoints if x.call.startswith("item")), None), timeout=90)
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
    ranks = wait_for(lambda: (r := s.snapshot().ranks) and len(r) == 2 and all(x.throughput for x in r) and r,
                     timeout=120)
    assert sorted(r.rank for r in ranks) == [0, 1]
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


def test_a_rank_that_raises_shows_its_status_and_why(run_session):
    s = run_session("ddp_gloo.py", "1000000", "1", nproc=2)
    rank1 = wait_for(lambda: (r := [x for x in s.snapshot().ranks if x.rank == 1]) and r[0].state == "exited"
                     and r[0], timeout=120)
    # The rank is torchrun's child, not ours: this status is the one its agent reported.
    assert rank1.exit_code == 1
    assert any(line.text == "rank 1's code ended with status 1: RuntimeError: rank 1 gives up at step 20"
               for line in s.snapshot().log)
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
    ],
)
def test_run_errors_are_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "torchpar_top", "run", *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("torchpar-top: error:")
