"""``python -m torchpar_top.probes.agent.run`` on real user-style scripts (tests/scripts/), over a socketpair.

Each test starts a real child with :class:`ChildProcess` and waits for conditions with deadlines; no
assertion depends on how fast this machine is.
"""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from torchpar_top.contract import messages as msgs
from torchpar_top.contract.vocab import ENV_SOCKET as ENV_VAR
from torchpar_top.contract.vocab import SyncScope
from torchpar_top.sources.live.child import ChildProcess
from torchpar_top.sources.live.listener import AgentListener
from waiting import running

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
RUN = [sys.executable, "-m", "torchpar_top.probes.agent.run"]


class Child:
    """One run under the agent: its messages, stdout and stderr lines, exit status."""

    def __init__(self, *args: str, interval: float = 0.1) -> None:
        self.messages, self.stdout, self.stderr = [], [], []
        self.exited = threading.Event()
        self.rc = None
        self.proc = ChildProcess(
            lambda fd: [*RUN, "--fd", str(fd), "--interval", str(interval), *args],
            on_message=self.messages.append,
            on_output=self._output,
            on_exit=self._exit,
        )
        self.proc.start()

    def _output(self, source, line):
        (self.stdout if source == "stdout" else self.stderr).append(line)

    def _exit(self, rc):
        self.rc = rc
        self.exited.set()

    def wait(self, timeout: float = 60.0) -> int:
        """The exit status (fails the test after ``timeout``)."""
        if not self.exited.wait(timeout):
            self.proc.stop()
            pytest.fail(f"child still running after {timeout} s")
        return self.rc

    def of_type(self, kind):
        return [m for m in list(self.messages) if isinstance(m, kind)]


def wait_for(predicate, timeout=60.0):
    """Poll until predicate() is truthy; return its value or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"condition not met within {timeout} s")


def plain(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The same command under plain python, for comparison."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_script_sees_argv_main_and_path_as_under_python(monkeypatch):
    monkeypatch.chdir(ROOT)
    child = Child("tests/scripts/argv_echo.py", "a", "b", "3")
    assert child.wait() == 3
    ref = plain("tests/scripts/argv_echo.py", "a", "b", "3", cwd=ROOT)
    assert ref.returncode == 3
    assert child.stdout == ref.stdout.splitlines() and child.stderr == []
    (hello,) = child.of_type(msgs.Hello)
    assert (hello.experiment, hello.rank, hello.world_size) == ("run", None, None)
    assert [(m.status, m.reason) for m in child.of_type(msgs.Exit)] == [(3, "")]


def test_a_module_runs_as_under_python_m(monkeypatch):
    monkeypatch.chdir(SCRIPTS)
    child = Child("-m", "pkgdemo", "2")
    assert child.wait() == 0
    ref = plain("-m", "pkgdemo", "2", cwd=SCRIPTS)
    assert ref.returncode == 0 and child.stdout == ref.stdout.splitlines()
    assert child.of_type(msgs.Hello)[0].experiment == "run"


def test_an_uncaught_exception_prints_pythons_traceback_and_exits_1(monkeypatch):
    monkeypatch.chdir(ROOT)
    child = Child("tests/scripts/raises.py")
    assert child.wait() == 1
    assert child.stdout == ["about to fail"]
    ref = plain("tests/scripts/raises.py", cwd=ROOT)
    assert child.stderr == ref.stderr.splitlines()  # none of the bootstrap's frames
    assert child.stderr[0] == "Traceback (most recent call last):"
    assert child.stderr[-1] == "ValueError: bad value 42"
    assert [(m.status, m.reason) for m in child.of_type(msgs.Exit)] == [(1, "ValueError: bad value 42")]


def test_an_input_bound_loop_shows_steps_prefetch_and_data_wait(monkeypatch):
    monkeypatch.chdir(ROOT)
    child = Child("tests/scripts/train_dataloader.py", "40", "0.01")
    wait_for(lambda: any(m.unit == "steps/s" for m in child.of_type(msgs.Sample)))
    child.proc.send(msgs.SetSync(value=True, scope=SyncScope.STEP))
    assert child.wait() == 0
    assert child.stdout[-1] == "done"
    samples = [m for m in child.of_type(msgs.Sample) if m.unit == "steps/s"]
    assert samples and max(m.throughput for m in samples) > 0
    loaders = [r for m in samples for r in m.executors if r.kind == "dataloader"]
    assert loaders and {r.name for r in loaders} == {"dataloader:0"}
    assert any(r.value > 0 for r in loaders) and all(r.value <= r.capacity == 4 for r in loaders)
    assert all(r.ready is not None for r in loaders)
    mean_wait = sum(m.data_wait for m in samples) / len(samples)
    assert mean_wait > 0.5, [m.data_wait for m in samples]  # the workers' sleeps bound the loop
    assert any(m.mode == "sync" for m in samples)
    assert any(a.detail == "SYNC (synchronize after every step)" for a in child.of_type(msgs.Ack))
    assert any("already synchronous" in m.text for m in child.of_type(msgs.Log))


def test_item_every_step_is_a_sync_point_on_its_line(monkeypatch):
    monkeypatch.chdir(ROOT)
    line = next(
        i
        for i, text in enumerate((SCRIPTS / "item_every_step.py").read_text().splitlines(), 1)
        if "ITEM_LINE" in text
    )
    child = Child("--every-op", "tests/scripts/item_every_step.py", "300")  # exact: every op is seen
    assert child.wait() == 0
    last = child.of_type(msgs.SyncPoints)[-1]
    assert last.sites[0] == msgs.SyncCount(f"tests/scripts/item_every_step.py:{line}", "item()", 300)
    assert last.covered is None  # not sampled
    assert all(m.op_coverage is None for m in child.of_type(msgs.Sample))


def test_by_default_ops_and_sync_points_are_sampled_in_slices(monkeypatch):
    """A loop with no step and no batch: the op counter is on for slices (switched by the fallback signal);
    ops/s and the sync-point rate are scaled from what the slices saw."""
    monkeypatch.chdir(ROOT)
    line = next(
        i
        for i, text in enumerate((SCRIPTS / "tiny_ops_loop.py").read_text().splitlines(), 1)
        if "LOOP_ITEM" in text
    )
    child = Child("tests/scripts/tiny_ops_loop.py", "4")
    assert child.wait() == 0
    rounds = int(child.stdout[-1].split()[1])
    samples = [m for m in child.of_type(msgs.Sample) if m.op_coverage is not None]
    assert samples and all(m.unit == "ops/s" for m in samples)
    covered = sum(m.op_coverage * m.window for m in samples) / sum(m.window for m in samples)
    assert 0.005 < covered < 0.3, covered  # a small share of the time, never all of it
    last = child.of_type(msgs.SyncPoints)[-1]
    (site,) = [s for s in last.sites if s.call == "item()"]
    assert site.where == f"tests/scripts/tiny_ops_loop.py:{line}"
    assert last.covered is not None and 0 < site.count < rounds  # only the slices' calls were seen
    samples = child.of_type(msgs.Sample)
    assert all(m.unit in ("ops/s", "steps/s") for m in samples)


@pytest.mark.parametrize(
    "args, message",
    [
        (["tests/scripts/syntax_error.py"], "tests/scripts/syntax_error.py:4: SyntaxError: invalid syntax"),
        (["tests/scripts/missing.py"], "can't open file 'tests/scripts/missing.py': no such file"),
        (["-m", "no_such_module_xyz"], "No module named 'no_such_module_xyz'"),
    ],
)
def test_a_target_that_cannot_run_is_one_line_and_exit_2(monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    child = Child(*args)
    assert child.wait() == 2
    assert child.stderr == [f"torchpar-top: error: {message}"]
    assert child.messages == [] and child.stdout == []


def test_without_a_connection_it_says_so_and_exits_2(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    proc = subprocess.run(
        [*RUN, "tests/scripts/argv_echo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    expected = f"torchpar-top: error: no --fd and {ENV_VAR} is not set: nothing to report to"
    assert proc.stderr.splitlines() == [expected]


def test_stop_interrupts_the_users_code_cleanly(monkeypatch):
    monkeypatch.chdir(ROOT)
    child = Child("tests/scripts/train_dataloader.py", "100000")
    wait_for(lambda: any(m.unit == "steps/s" for m in child.of_type(msgs.Sample)))
    assert child.proc.stop() == 0  # the stop command, not SIGTERM: the script unwound and exited 0
    assert [(m.status, m.reason) for m in child.of_type(msgs.Exit)] == [(0, "stopped by torchpar-top")]
    assert not any("Traceback" in line for line in child.stderr)


def test_when_torchpar_top_goes_away_what_the_code_started_ends_with_it(tmp_path):
    # torchpar-top killed (its end of the socket closes, no stop command): the agent interrupts the code,
    # which here unwinds at once (a loop of torch ops, well inside the stop's grace); a process it left
    # in a group of its own must end with it, as nobody else is left to end it (seen in a fresh-clone CI:
    # a signal woke the script's sleep, it unwound, and its daemon and grandchild stayed)
    script = tmp_path / "leaves_and_loops.py"
    script.write_text(
        textwrap.dedent(
            """
            import subprocess
            import torch
            child = subprocess.Popen(["sleep", "600"], process_group=0)
            print(child.pid, flush=True)
            x = torch.ones(4)
            while True:
                x = x * 1.0
            """
        )
    )
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [*RUN, "--fd", str(theirs.fileno()), str(script)],
        pass_fds=(theirs.fileno(),),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    theirs.close()
    sleeper = 0
    try:
        sleeper = int(proc.stdout.readline())
        assert running(sleeper)
        ours.close()  # torchpar-top is gone
        assert proc.wait(60) == 0, proc.stderr.read()
        wait_for(lambda: not running(sleeper), timeout=30)
    finally:
        ours.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if sleeper and running(sleeper):
            os.kill(sleeper, 9)


@pytest.fixture
def listener():
    got = []
    lis = AgentListener(lambda msg, conn: got.append((conn, msg)), lambda conn: None, lambda line: None)
    lis.got = got
    yield lis
    lis.close()


def test_a_rank_connects_through_the_socket_in_the_environment(listener):
    env = {**os.environ, ENV_VAR: listener.path, "RANK": "1", "WORLD_SIZE": "2"}
    proc = subprocess.run(
        [*RUN, "tests/scripts/argv_echo.py", "x"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    hello = wait_for(lambda: [m for _, m in listener.got if isinstance(m, msgs.Hello)], timeout=10)[0]
    assert (hello.rank, hello.world_size, hello.experiment) == (1, 2, "run")


def _gloo() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_ddp_with_gloo_under_torchrun_reports_each_rank(listener):
    env = {**os.environ, ENV_VAR: listener.path, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        f"--log-dir={listener.log_dir}",  # as the app does: removed with the listener
        *RUN[1:],
        "tests/scripts/ddp_gloo.py",
        "150",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done on 2 ranks" in proc.stdout
    wait_for(lambda: len({c for c, m in listener.got if isinstance(m, msgs.Hello)}) == 2, timeout=10)
    by_conn = {c: m for c, m in listener.got if isinstance(m, msgs.Hello)}
    assert sorted((m.rank, m.world_size) for m in by_conn.values()) == [(0, 2), (1, 2)]
    stepping = {c for c, m in listener.got if isinstance(m, msgs.Sample) and m.unit == "steps/s"}
    assert stepping == set(by_conn)
