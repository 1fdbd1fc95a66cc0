"""Real py-spy against real child processes: sleeping, spinning in torch.mm, blocked on a full emulated
stream, dead, not Python, and (as root) refused by ptrace permissions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from torchpar_top.contract.snapshot import StackView
from torchpar_top.contract.vocab import WaitKind
from torchpar_top.probes.host import stacks as st
from torchpar_top.probes.host.stacks import StackPoller, StackSampler

pytestmark = pytest.mark.slow

PY_SPY = st.find_py_spy()
if PY_SPY is None:
    pytest.skip(st.MSG_NO_PYSPY, allow_module_level=True)


def _probe_ptrace() -> str:
    """'' when py-spy can read a child Python process here, else its status message."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while True:
            view, status = StackSampler(child.pid).sample()
            if view is not None or status == st.MSG_PTRACE or time.monotonic() > deadline:
                return status
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()


_PTRACE = _probe_ptrace()
if _PTRACE:
    pytest.skip(f"py-spy cannot read a child process here: {_PTRACE}", allow_module_level=True)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start ``python script`` from source text; every child is killed at the end."""
    children: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> subprocess.Popen[bytes]:
        script = tmp_path / f"child{len(children)}.py"
        script.write_text(textwrap.dedent(code))
        children.append(subprocess.Popen([sys.executable, str(script)], cwd=tmp_path))
        return children[-1]

    yield start
    for c in children:
        c.kill()
        c.wait()


def sample_until(
    sampler: StackSampler, pred: Callable[[StackView], bool], timeout: float = 30.0
) -> StackView:
    """Sample until a view satisfies ``pred``; fail with the last status otherwise."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        view, status = sampler.sample()
        last = (view, status)
        if view is not None and pred(view):
            return view
        time.sleep(0.1)
    pytest.fail(f"no matching stack within {timeout} s; last: {last}")


def test_sleeping_child_waits_in_sleep(spawn):
    child = spawn(
        """
        import time
        def nap():
            time.sleep(60)
        nap()
        """
    )
    # py-spy's idle verdict is per dump: a dump taken as the call enters the sleep can read active, so
    # wait for a dump that reads idle (it must come: the thread sleeps for 60 s)
    view = sample_until(
        StackSampler(child.pid), lambda v: v.frames[-1:] and v.frames[-1].function == "nap" and v.idle
    )
    assert view.pid == child.pid and view.thread == "MainThread"
    assert [f.function for f in view.frames] == ["<module>", "nap"]
    assert view.frames[-1].filename.endswith("child0.py") and view.frames[-1].line == 4
    assert view.waiting_in == WaitKind.SLEEP


def test_spinning_child_shows_its_function(spawn):
    child = spawn(
        """
        import threading, time, torch
        torch.set_num_threads(2)
        a = torch.randn(256, 256)
        threading.Thread(target=time.sleep, args=(60,), daemon=True, name="side").start()
        def spin():
            while True:
                torch.mm(a, a)
        spin()
        """
    )
    view = sample_until(StackSampler(child.pid), lambda v: any(f.function == "spin" for f in v.frames))
    assert view.thread == "MainThread"  # not the side thread
    assert view.frames[-1].function == "spin" and view.waiting_in == ""


def test_full_emulated_stream_blocks_launch(spawn):
    child = spawn(
        """
        import torch
        from torchpar_top.probes.agent.stream import EmulatedStream
        torch.set_num_threads(1)
        s = EmulatedStream("cpu-stream:0", capacity=2)
        a = torch.randn(400, 400)
        def feed():
            while True:
                s.launch(torch.mm, a, a)
        feed()
        """
    )
    view = sample_until(StackSampler(child.pid), lambda v: v.waiting_in == WaitKind.EMU_FULL)
    assert any(f.function.endswith("launch") for f in view.frames)


def test_dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert StackSampler(child.pid).sample() == (None, f"process {child.pid} has exited")


def test_exited_but_unreaped_child_has_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert StackSampler(child.pid).sample() == (None, f"process {child.pid} has exited")
    finally:
        child.wait()


def test_non_python_pid():
    child = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        status = StackSampler(child.pid).sample()
        assert status == (None, f"process {child.pid} is not running Python (py-spy found no interpreter)")
    finally:
        child.kill()
        child.wait()


def test_poller_with_real_py_spy(spawn):
    child = spawn("import time\ntime.sleep(60)\n")
    poller = StackPoller(StackSampler(child.pid), interval=0.2)
    poller.start()
    try:
        deadline = time.monotonic() + 30
        while poller.latest[0] is None or poller.latest[0].waiting_in != WaitKind.SLEEP:
            assert time.monotonic() < deadline, poller.latest  # the first dumps may catch the start-up
            time.sleep(0.05)
        assert poller.latest[1] == ""
    finally:
        poller.stop()
    assert not poller._thread.is_alive()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to drop privileges"
)


@needs_root
def test_another_users_process_is_refused_with_a_clear_message(spawn):
    child = spawn("import time\ntime.sleep(60)\n")  # runs as root
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        binary = shutil.copy(PY_SPY, os.path.join(d, "py-spy"))  # /root may not be readable by nobody
        os.chmod(binary, 0o755)
        drop = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]

        def as_nobody(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*drop, *cmd], **kw, check=False)  # type: ignore[call-overload]

        assert StackSampler(child.pid, py_spy=binary, runner=as_nobody).sample() == (None, st.MSG_PTRACE)


@needs_root
def test_root_without_cap_sys_ptrace_is_refused_with_a_clear_message(spawn):
    child = spawn("import time\ntime.sleep(60)\n")

    def without_ptrace(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["setpriv", "--bounding-set=-sys_ptrace", *cmd], **kw, check=False)  # type: ignore[call-overload]

    assert StackSampler(child.pid, runner=without_ptrace).sample() == (None, st.MSG_PTRACE)
