"""Step anatomy measured by the agent in real child processes (tests/scripts/steps_*.py), from the wire.

The scripts time their own data loading and forward; the agent's phases must agree with them. No
assertion depends on how fast this machine is: the agent and the script measure the same calls.
"""

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from torchpar_top.contract import messages as msgs
from torchpar_top.contract.vocab import ENV_SOCKET, PHASES, StepSource
from torchpar_top.model.store import SessionStore
from torchpar_top.probes.agent.usercode import MEMORY_EVERY
from torchpar_top.sources.live.child import ChildProcess
from torchpar_top.sources.live.listener import AgentListener

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
RUN = [sys.executable, "-m", "torchpar_top.probes.agent.run"]


class Child:
    """One script under the agent over a socketpair: its messages, stdout lines and exit status."""

    def __init__(self, *args: str) -> None:
        self.messages, self.stdout = [], []
        self.exited = threading.Event()
        self.proc = ChildProcess(
            lambda fd: [*RUN, "--fd", str(fd), "--interval", "0.1", *args],
            on_message=self.messages.append,
            on_output=lambda source, line: source == "stdout" and self.stdout.append(line),
            on_exit=lambda rc: self.exited.set(),
        )
        self.proc.start()

    def wait(self, timeout: float = 120.0) -> None:
        if not self.exited.wait(timeout):
            self.proc.stop()
            pytest.fail(f"child still running after {timeout} s")

    def samples(self) -> list[msgs.Sample]:
        return [m for m in list(self.messages) if isinstance(m, msgs.Sample)]


def per_step(steps: msgs.Steps) -> dict[str, float]:
    return {p: getattr(steps.phases, p) / steps.count for p in PHASES}


def adds_up(steps: msgs.Steps) -> bool:
    total = sum(getattr(steps.phases, p) for p in PHASES)
    return abs(total - steps.seconds) <= 0.05 * steps.seconds


def test_a_manual_sgd_loop_gets_steps_from_backward():
    child = Child(str(SCRIPTS / "steps_manual_sgd.py"), "3")
    child.wait()
    with_steps = [s for s in child.samples() if s.steps is not None]
    assert with_steps, "no sample carried steps"
    last = with_steps[-1].steps
    assert last.source == StepSource.BACKWARD and last.count > 10
    assert adds_up(last)
    assert last.phases.backward > 0 and last.phases.forward > 0
    assert any(s.unit == "steps/s" and s.throughput > 0 for s in with_steps)
    samples = child.samples()
    read = [s.t for s in samples if s.memory is not None and s.memory.rss_bytes > 0]
    assert samples[0].memory is not None and len(read) < len(samples)  # the first, then every MEMORY_EVERY
    assert len(read) >= 2 and max(b - a for a, b in itertools.pairwise(read)) < MEMORY_EVERY + 1.0
    counts = [s.steps.count for s in with_steps]
    assert counts == sorted(counts)  # cumulative: never goes back


@pytest.mark.parametrize("workers", ["0", "1"])
def test_data_and_forward_phases_agree_with_what_the_script_times(workers):
    child = Child(str(SCRIPTS / "steps_phases.py"), "30", "0.02", workers)
    child.wait()
    mine = json.loads(child.stdout[-1])
    last = next(s for s in reversed(child.samples()) if s.steps is not None)
    steps = last.steps
    assert steps.source == StepSource.OPTIMIZER
    assert steps.count >= mine["steps"]  # every step (the first included) went out before the end
    assert adds_up(steps)
    agent = per_step(steps)
    # the agent's mean over all its steps, the script's over all but the first: within 15 %
    assert agent["forward"] == pytest.approx(mine["forward"], rel=0.15)
    if workers == "0":  # the dataset sleeps in this process: every batch costs the same
        assert agent["data"] == pytest.approx(mine["data"], rel=0.15)
        # loading in the main process is data time, not a wait for the device
        loading = [s for s in child.samples() if s.steps is not None and s.data_wait]
        assert max(s.data_wait for s in loading) > 0.3
        assert all(s.frontend.wait < 0.05 for s in loading)
    else:  # workers prefetch: the frontend waits less than they sleep
        assert 0 < agent["data"] < 2 * mine["data"] + 0.01


def _torchrun_ranks(script: str, *args: str, nproc: int = 2, timeout: float = 240.0) -> dict[int, list]:
    """Run ``script`` under torchrun with the agent on every rank; each rank's messages by rank."""
    by_conn: dict[int, list] = {}
    listener = AgentListener(
        on_message=lambda msg, conn: by_conn.setdefault(conn, []).append(msg),
        on_closed=lambda conn: None,
        on_error=lambda line: None,
        expected=nproc,
    )
    env = dict(os.environ, **{ENV_SOCKET: listener.path})
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--log-dir={listener.log_dir}",  # as the app does: removed with the listener
        "-m",
        "torchpar_top.probes.agent.run",
        "--interval",
        "0.1",
        str(SCRIPTS / script),
        *args,
    ]
    try:
        # its exit status is not looked at: 2-rank Gloo jobs sometimes abort at interpreter exit
        subprocess.run(
            cmd, check=False, env=env, timeout=timeout, capture_output=True, start_new_session=True
        )
    finally:
        time.sleep(0.3)
        listener.close()
    ranks = {}
    for messages in by_conn.values():
        hello = next((m for m in messages if isinstance(m, msgs.Hello)), None)
        if hello is not None and hello.rank is not None:
            ranks[hello.rank] = messages
    return ranks


def _last_steps(messages: list) -> msgs.Steps:
    return next(m.steps for m in reversed(messages) if isinstance(m, msgs.Sample) and m.steps is not None)


def test_in_ddp_the_fast_rank_waits_in_comm_for_the_slow_ranks_forward():
    ranks = _torchrun_ranks("steps_ddp_slow.py", "80", "1", "0.02")
    assert sorted(ranks) == [0, 1]
    fast, slow = (per_step(_last_steps(ranks[r])) for r in (0, 1))
    for r in (0, 1):
        steps = _last_steps(ranks[r])
        assert steps.source == StepSource.OPTIMIZER and adds_up(steps)
    assert slow["forward"] > fast["forward"] + 0.015  # the 20 ms sleep
    assert fast["comm"] > slow["comm"] + 0.01  # the fast rank waits for it in the all-reduce


@pytest.mark.parametrize("seconds", ["0.02", "0.45"])
def test_the_last_sample_counts_every_step_the_script_made(seconds):
    """The code returns between two samples (or before the first): one last sample still counts the
    steps since the sampler's last window, before the exit is said."""
    child = Child(str(SCRIPTS / "steps_manual_sgd.py"), seconds)
    child.wait()
    made = int(next(line for line in child.stdout if line.startswith("steps ")).split()[1])
    with_steps = [s for s in child.samples() if s.steps is not None]
    assert with_steps, "no sample carried steps"
    assert with_steps[-1].steps.count == made
    last = max(i for i, m in enumerate(child.messages) if isinstance(m, msgs.Sample))
    exits = [i for i, m in enumerate(child.messages) if isinstance(m, msgs.Exit)]
    assert exits and exits[0] > last  # the exit is said after the last sample


def test_a_late_first_optimizer_step_is_said_and_the_count_goes_on():
    """Backward calls went out as steps before the first optimizer step (gradient accumulation): the log
    says how many, and the agent's count goes on from them (it never goes back); the sample says how many
    were the backward calls', so the steps shown are the optimizer's alone."""
    child = Child(str(SCRIPTS / "steps_accumulate.py"), "2.5", "80")  # 1.6 s a step: past HOLD_S
    child.wait()
    made = int(next(line for line in child.stdout if line.startswith("optimizer steps ")).split()[2])
    said = [m.text for m in child.messages if isinstance(m, msgs.Log) and m.text.startswith("steps:")]
    assert len(said) == 1, said
    before = int(said[0].split("the first ")[1].split()[0])
    assert "counted from optimizer steps from now on" in said[0] and "were backward calls" in said[0]
    assert 0 < before <= 80  # the micro-batches before the first optimizer step (the first group's)
    last = [s.steps for s in child.samples() if s.steps is not None][-1]
    assert last.source == StepSource.OPTIMIZER and last.count == made + before
    assert last.before == before  # carried in the sample: the monitor counts the optimizer's steps alone
    store = SessionStore("run", interval=0.1)
    for msg in list(child.messages):
        store.on_message(msg)
    steps = store.snapshot().steps
    assert steps is not None and steps.count == made


def test_a_rank_that_stops_stepping_is_said_stalled_with_where_it_waits():
    """The script's forward sleeps 5 s after 1.5 s of steps: fed to the store as they came, the samples
    say it stalled (seconds since its last step, counting up) and where its frontend waits: the sleep, on
    the script's own line, in its forward; once it steps again, it is not stalled."""
    child = Child(str(SCRIPTS / "steps_stall.py"), "1.5", "5", "1")
    child.wait()
    assert any(line.startswith("stalled at") for line in child.stdout)
    store = SessionStore("run", interval=0.1)
    seen = []
    for msg in list(child.messages):
        store.on_message(msg)
        if isinstance(msg, msgs.Sample):
            snap = store.snapshot()
            (rank,) = snap.ranks
            if snap.steps is not None:
                seen.append((snap.steps.stalled, rank.at))
    stalled = [s for s, _ in seen if s is not None]
    assert stalled and max(stalled) > 3.5, seen  # up to ~5 s, on a loaded machine a little less
    assert stalled == sorted(stalled), stalled  # counting up, one stall
    line = next(
        i
        for i, text in enumerate((SCRIPTS / "steps_stall.py").read_text().splitlines(), 1)
        if "# the stall" in text
    )
    assert any(at == f"sleep at steps_stall.py:{line} (forward)" for s, at in seen if s is not None), seen
    assert seen[-1][0] is None  # stepping again


def test_the_op_counter_keeps_its_duty_when_switches_fall_in_a_custom_backward():
    """The agent's switch signal lands in a custom autograd Function's backward, where the autograd engine
    runs with a mode stack of its own: the counter must not be switched there (a mode pushed inside a node
    is gone when it returns, and the counter then waited for it forever: 100 % "on", a profile hook on
    every Python call; pytorch/examples' FSDP2 took 3.3× as long in Adam's step)."""
    child = Child(str(SCRIPTS / "custom_backward.py"), "6")
    child.wait()
    samples = [s for s in child.samples() if s.steps is not None and s.op_coverage is not None]
    assert len(samples) > 20, len(samples)
    window = sum(s.window for s in samples)
    covered = sum(s.op_coverage * s.window for s in samples)
    assert covered / window < 0.25, (covered / window, [s.op_coverage for s in samples])
