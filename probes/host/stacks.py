"""The frontend thread's Python stack, from ``py-spy dump --json --nonblocking``, and what it waits in.

Never blocking mode: it stops every thread of the target, and a torch process has many (py-spy #872).
py-spy (0.4) prints a JSON list of threads, each ``{pid, thread_id, thread_name, os_thread_id, active,
owns_gil, frames: [{name, filename, line, ...}]}``, frames innermost first; ``active: false`` is its
idle verdict (from the OS thread state). On failure it exits 1 with a message on stderr.
Functions implemented in C (``time.sleep``, ``Tensor.item``) have no frame of their own, so the source
line of the innermost frame is read too (``linecache``) to tell what it calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from torchpar_top.contract.messages import StackFrame
from torchpar_top.contract.snapshot import StackView
from torchpar_top.model.stacks import classify_wait, source_line
from torchpar_top.probes.agent.usercode_exec import user_frames
from torchpar_top.probes.host.process import describe_pid

TIMEOUT_S = 2.0
MSG_NO_PYSPY = "py-spy not found: pip install py-spy"
MSG_PTRACE = (
    "ptrace not permitted: run as the same user and set /proc/sys/kernel/yama/ptrace_scope to 0, or run "
    "torchpar-top with sudo / CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE)"
)
MSG_TIMEOUT = "py-spy timed out"
MSG_RACE = "py-spy read the stack while it changed (nonblocking); retrying"

_PERMISSION = ("permission denied", "operation not permitted")
_GONE = ("no such file or directory (os error 2)", "no such process", "check if it is running")
_RACE = ("failed to get stack traces", "failed to copy", "bad address")
_NOT_PYTHON = ("python version", "python interpreter", "python binary", "libpython", "interpreter address")


def find_py_spy() -> str | None:
    """The ``py-spy`` next to ``sys.executable`` (a venv's bin), else the one on PATH, else None."""
    for bindir in (Path(sys.executable).parent, Path(sys.executable).resolve().parent):
        candidate = bindir / "py-spy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("py-spy")


def parse_dump(
    text: str, pid: int, t: float, source: Callable[[str, int], str] = source_line
) -> StackView | None:
    """Turn py-spy's JSON into the main thread's :class:`StackView` (with the ids of every Python thread it
    lists); None when it lists no thread."""
    threads: list[dict[str, Any]] = json.loads(text)
    if not threads:
        return None
    main = next((th for th in threads if th.get("os_thread_id") == pid), None)
    main = main or next((th for th in threads if th.get("thread_name") == "MainThread"), None)
    main = main or threads[-1]  # py-spy lists the newest thread first: the main thread comes last
    frames = tuple(
        user_frames(  # a process under `torchpar-top run`: from the user's code on, as the agent shows it
            [
                StackFrame(str(fr.get("name", "?")), str(fr.get("filename", "")), int(fr.get("line") or 0))
                for fr in reversed(main.get("frames") or [])
            ]
        )
    )
    tid = main.get("os_thread_id")
    name = main.get("thread_name") or ("MainThread" if tid == pid else f"thread {tid or main['thread_id']}")
    python_tids = tuple(
        sorted(
            {
                int(th["os_thread_id"])
                for th in threads
                if isinstance(th.get("os_thread_id"), int) and th["os_thread_id"] > 0
            }
        )
    )
    return StackView(
        pid,
        name,
        frames,
        not main.get("active", True),
        t,
        classify_wait(frames, source),
        python_tids=python_tids,
    )


def _process(pid: int) -> tuple[bool, bool]:
    """``(alive, is_python)`` for ``pid`` from /proc; ``is_python`` is True when it cannot be told."""
    info = describe_pid(pid)
    if isinstance(info, str):
        return not info.startswith(("no process", f"process {pid} has exited")), True
    return True, info.is_python


def explain_error(stderr: str, pid: int, *, alive: bool | None = None, python: bool | None = None) -> str:
    """One line saying why py-spy failed, from its stderr and what /proc says about ``pid``."""
    low = stderr.lower()
    if alive is None or python is None:
        found = _process(pid)
        alive = found[0] if alive is None else alive
        python = found[1] if python is None else python
    if not alive:
        return f"process {pid} has exited"
    if any(s in low for s in _PERMISSION):
        return MSG_PTRACE
    if "unsupported version of python" in low:
        return f"process {pid} runs a Python version this py-spy does not support: pip install -U py-spy"
    if any(s in low for s in _RACE):
        return MSG_RACE
    if any(s in low for s in _NOT_PYTHON + _GONE):  # alive, yet no executable or no interpreter found
        # under heavy thread churn py-spy can miss the interpreter of a real Python process
        return MSG_RACE if python else f"process {pid} is not running Python (py-spy found no interpreter)"
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("Error")), "")
    return f"py-spy failed: {first or stderr.strip()[:200] or 'no message'}"


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class StackSampler:
    """Dumps the frontend (main) thread's stack of process ``pid`` with py-spy, one call per sample."""

    def __init__(
        self,
        pid: int,
        *,
        py_spy: str | None = None,
        runner: Runner = subprocess.run,
        source: Callable[[str, int], str] = source_line,
    ) -> None:
        """Watch ``pid``; ``py_spy`` is found with :func:`find_py_spy` when not given."""
        self.pid = pid
        self.py_spy = py_spy or find_py_spy()
        self._run = runner
        self._source = source

    def sample(self) -> tuple[StackView | None, str]:
        """One dump: ``(view, '')``, or ``(None, why)``; never raises. A torn read is retried once."""
        view, status = self._dump()
        return self._dump() if status == MSG_RACE else (view, status)

    def _dump(self) -> tuple[StackView | None, str]:
        """Run py-spy once and interpret what it printed."""
        if not self.py_spy:
            return None, MSG_NO_PYSPY
        cmd = [self.py_spy, "dump", "--json", "--nonblocking", "--pid", str(self.pid)]
        env = {**os.environ, "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}
        try:
            proc = self._run(
                cmd, capture_output=True, encoding="utf-8", errors="replace", timeout=TIMEOUT_S, env=env
            )
        except subprocess.TimeoutExpired:
            return None, MSG_TIMEOUT
        except FileNotFoundError:
            return None, MSG_NO_PYSPY
        except OSError as exc:
            return None, f"cannot run {self.py_spy}: {exc.strerror or exc}"
        if proc.returncode != 0:
            return None, explain_error(proc.stderr or "", self.pid)
        try:
            view = parse_dump(proc.stdout, self.pid, time.time(), self._source)
        except (ValueError, TypeError, AttributeError) as exc:
            return None, f"py-spy printed something unexpected: {exc}"
        return (view, "") if view else (None, f"process {self.pid} has no Python thread")


class Sampler(Protocol):
    """Anything with :meth:`StackSampler.sample`'s signature."""

    def sample(self) -> tuple[StackView | None, str]:
        """One ``(view, status)``."""
        ...


class StackPoller:
    """Calls ``sampler.sample()`` every ``interval`` seconds in a daemon thread; keeps the latest."""

    def __init__(self, sampler: Sampler, interval: float = 0.5) -> None:
        """Nothing runs until :meth:`start`."""
        self.sampler = sampler
        self.interval = interval
        self._latest: tuple[StackView | None, str] = (None, "waiting for the first stack")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def latest(self) -> tuple[StackView | None, str]:
        """The most recent ``(view, status)``."""
        with self._lock:
            return self._latest

    def start(self) -> None:
        """Start polling (a daemon thread: it never keeps the process alive)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="torchpar-stacks", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = TIMEOUT_S + 1.0) -> None:
        """Stop polling and join the thread (at most ``timeout``: a py-spy call may be under way)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        """Sample until stopped; a failure becomes the status, never an exception."""
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                result = self.sampler.sample()
            except Exception as exc:
                result = (None, f"stack sampling failed: {exc}")
            with self._lock:
                if result[1] == MSG_RACE and self._latest[0] is not None:
                    result = (self._latest[0], result[1])  # keep the last stack through a torn read
                self._latest = result
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))
