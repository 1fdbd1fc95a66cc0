"""Per-thread CPU of a process, from ``/proc/<pid>/task/<tid>/{stat,schedstat}``, and what each thread is for.

Roles are :class:`~torchpar_top.contract.vocab.Role` members. The agent in the child may name threads
itself (a mapping tid -> :class:`~torchpar_top.contract.messages.ThreadRole`, which always wins);
otherwise :func:`classify` guesses from the kernel's thread name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import psutil
from torchpar_top.contract.messages import ThreadRole
from torchpar_top.contract.snapshot import ThreadInfo
from torchpar_top.contract.vocab import Role
from torchpar_top.probes.agent.cputime import parse_schedstat

# DataLoader pin-memory thread / worker processes (torch.utils.data sets these names) and generic ones.
_DATA_PREFIXES = ("pt_data",)
_DATA_WORDS = ("dataloader", "pin_memory", "pin_mem")
# Other threads PyTorch names itself that do no tensor math (distributed runtime, elastic agent...).
_TORCH_SERVICE_PREFIXES = ("pt_elastic", "pt_tcpstore", "pt_gloo", "pt_dist", "pt_workerserver")


def parse_stat(text: str) -> tuple[str, str, int, int]:
    """Parse one ``/proc/<pid>/task/<tid>/stat`` line.

    ``comm`` sits in parentheses and may itself contain spaces and ``)``, so the fields after it are
    found from the *last* ``)``.

    Returns:
        ``(comm, state, utime + stime, starttime)``: the CPU time, and when the thread started after
        boot, both in clock ticks (``SC_CLK_TCK``).
    """
    close = text.rindex(")")
    comm = text[text.index("(") + 1 : close]
    rest = text[close + 1 :].split()  # rest[0] is field 3 (state), so field n is rest[n - 3]
    return comm, rest[0], int(rest[11]) + int(rest[12]), int(rest[19])


def classify(
    tid: int, comm: str, pid: int, roles: Mapping[int, ThreadRole] | None = None
) -> tuple[Role, str]:
    """The role of thread ``tid`` (named ``comm``) of process ``pid`` and the executor it serves ('' for
    none); ``roles`` from the agent win."""
    if roles and tid in roles:
        return roles[tid].role, roles[tid].executor
    return classify_own(tid, comm, pid), ""


def classify_descendant(comm: str) -> Role:
    """The role of a thread of a process started by the watched one: DataLoader workers name
    themselves ``pt_data_worker`` (and their threads inherit it); anything else is a child process."""
    return Role.DATA_WORKERS if comm.startswith(_DATA_PREFIXES) else Role.SUBPROCESS


def classify_own(tid: int, comm: str, pid: int) -> Role:
    """The role of thread ``tid`` of the watched process ``pid`` from its kernel name alone."""
    low = comm.lower()
    if tid == pid or comm.startswith("pt_main_thread"):
        return Role.FRONTEND
    if comm.startswith("PTThreadPool"):
        return Role.INTEROP
    if comm.startswith("pt_autograd"):
        return Role.AUTOGRAD
    if comm.startswith(_DATA_PREFIXES) or any(w in low for w in _DATA_WORDS):
        return Role.DATA
    if comm.startswith(_TORCH_SERVICE_PREFIXES):
        return Role.OTHER
    # OpenMP / MKL workers are never renamed: they inherit the name of the thread that created them
    # ("python", "pt_main_thread"...), so an unrecognised name is most likely an intra-op worker.
    # Plain Python threads look the same: the agent lists them (Role.PYTHON) in its ``roles``, which win.
    return Role.INTRAOP


class ThreadSampler:
    """Per-thread CPU of one process and of the processes it started, as a share of one core since
    the previous :meth:`sample`, and the time each thread spent runnable but waiting for a core."""

    def __init__(self, pid: int, *, descendants: bool = True) -> None:
        """Watch process ``pid`` (and, with ``descendants``, every process below it, such as DataLoader
        workers); nothing is read until the first :meth:`sample`."""
        self.pid = pid
        self.error: str | None = None
        """Why the last sample was empty (process gone, permission denied), else ``None``."""
        self._hz = float(os.sysconf("SC_CLK_TCK"))
        self._prev: dict[int, tuple[float, float]] = {}
        self._prev_t: float | None = None
        self._descendants = descendants
        self._children: list[int] = []
        self._children_t = float("-inf")
        self.started: dict[int, int] = {}
        """When each thread of the last :meth:`sample` started (tid -> clock ticks after boot)."""

    def read_ticks(self) -> dict[int, tuple[str, int]]:
        """Read ``{tid: (comm, utime + stime ticks)}`` for the live threads (``/proc/.../stat``)."""
        return {tid: (comm, ticks) for tid, (comm, ticks, _) in self.read_times().items()}

    def read_times(self) -> dict[int, tuple[str, int, int | None]]:
        """Read ``{tid: (comm, ticks, ns)}``: ``ns`` is the time on CPU from ``schedstat``.

        ``schedstat`` counts nanoseconds, so a 0.1 s sample is exact; ``stat``'s ticks (100 Hz) would
        make each reading of a 0.1 s window uncertain by 10 points. ``ns`` is None where the kernel has
        no schedstat (then ticks are used). Threads that vanish while being read are skipped.

        Raises:
            ProcessLookupError: the process has exited (or is a zombie).
            PermissionError: ``/proc/<pid>/task`` is not readable.
        """
        return {
            tid: (comm, ticks, run)
            for tid, (comm, ticks, run, _, _) in _read_task(self.pid, own=True).items()
        }

    def children(self) -> list[int]:
        """Pids of the processes below the watched one, looked up again at most once a second."""
        now = time.monotonic()
        if self._descendants and now - self._children_t >= CHILDREN_REFRESH_S:
            self._children_t = now
            try:
                self._children = descendants(self.pid)
            except psutil.Error:
                self._children = []
        return self._children

    def sample(self, roles: Mapping[int, ThreadRole] | None = None) -> tuple[ThreadInfo, ...]:
        """The process's threads, then its descendants', with their CPU share since the previous call.

        Args:
            roles: tid -> the agent's word on that thread; overrides :func:`classify`'s guess.

        Returns:
            One :class:`ThreadInfo` per live thread (``cpu_percent`` and ``wait_percent`` are 0.0 on
            the first call and for threads new since the previous one), or ``()`` with :attr:`error`
            set when the watched process itself cannot be read.
        """
        now = time.monotonic()
        try:
            own = _read_task(self.pid, own=True)
        except ProcessLookupError:
            return self._fail(f"process {self.pid} has exited")
        except PermissionError:
            return self._fail(f"permission denied reading /proc/{self.pid}/task (another user's process?)")
        except OSError as exc:
            return self._fail(f"cannot read threads of process {self.pid}: {exc}")
        readings = [(self.pid, own)]
        for child in self.children():
            try:
                readings.append((child, _read_task(child, own=False)))
            except OSError:
                continue  # ended, or not ours to read: the watched process is what matters
        dt = now - self._prev_t if self._prev_t is not None else 0.0
        self.started = {}
        infos = []
        current: dict[int, tuple[float, float]] = {}
        for pid, times in readings:
            for tid in sorted(times):
                comm, ticks, run_ns, wait_ns, started = times[tid]
                run = run_ns if run_ns is not None else ticks * 1e9 / self._hz
                wait = wait_ns if wait_ns is not None else 0.0
                current[tid] = (run, wait)
                prev = self._prev.get(tid)
                if prev is not None and dt > 0:
                    pct = max(0.0, (run - prev[0]) / 1e9 / dt * 100.0)
                    wait_pct = max(0.0, (wait - prev[1]) / 1e9 / dt * 100.0)
                else:
                    pct = wait_pct = 0.0
                role, executor = (
                    classify(tid, comm, pid, roles) if pid == self.pid else (classify_descendant(comm), "")
                )
                infos.append(ThreadInfo(tid, comm, role, pct, wait_pct, pid, executor))
                self.started[tid] = started
        self._prev = current
        self._prev_t = now
        self.error = None
        return tuple(infos)

    def _fail(self, message: str) -> tuple[ThreadInfo, ...]:
        """Record ``message`` as the error, forget previous readings, and return no threads."""
        self.error = message
        self._prev, self._prev_t = {}, None
        return ()


CHILDREN_REFRESH_S = 1.0
"""How often :meth:`ThreadSampler.children` walks the process tree again."""


def descendants(pid: int) -> list[int]:
    """Pids of every process below ``pid``, parents before their children.

    Read from ``/proc/<pid>/task/<tid>/children`` (each thread's children; Linux 3.5+ with
    ``CONFIG_PROC_CHILDREN``): a read per thread of the tree, where psutil's ``children()`` reads the
    ``stat`` of every process on the machine. Where the kernel has no such file, psutil's walk.

    Raises:
        psutil.Error: the fallback could not read the tree (``pid`` gone).
    """
    out: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # ended while the tree was walked
        for tid in tids:
            try:
                text = _read_all(f"/proc/{parent}/task/{tid}/children")
            except FileNotFoundError:
                if parent == pid and tid == str(pid) and os.path.exists(f"/proc/{pid}"):
                    return [c.pid for c in psutil.Process(pid).children(recursive=True)]  # no such file
                continue  # the thread ended
            except OSError:
                continue
            kids = [int(k) for k in text.split()]
            out.extend(kids)
            queue.extend(kids)
    return out


def _read_task(pid: int, *, own: bool) -> dict[int, tuple[str, int, int | None, int | None, int]]:
    """``{tid: (comm, ticks, run_ns, wait_ns, started)}`` for the live threads of ``pid``.

    ``run_ns`` and ``wait_ns`` are the first two fields of ``schedstat``: time on a CPU, and time
    runnable but waiting on a run queue (None where the kernel keeps no schedstat); ``started`` is when
    the thread started, in clock ticks after boot.

    Raises:
        ProcessLookupError: the process has exited (for ``own``, a zombie counts as exited).
        PermissionError: ``/proc/<pid>/task`` is not readable.
    """
    task = f"/proc/{pid}/task"
    try:
        names = os.listdir(task)
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    out: dict[int, tuple[str, int, int | None, int | None, int]] = {}
    for name in names:
        try:
            comm, state, ticks, started = parse_stat(
                _read_small(f"{task}/{name}/stat").decode("utf-8", "replace")
            )
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between listdir and open
        if int(name) == pid and state in ("Z", "X"):
            if own:
                raise ProcessLookupError(pid)  # exited, not yet reaped
            return {}  # a descendant that has ended: nothing of it is running
        run_ns, wait_ns = _read_schedstat_ns(f"{task}/{name}/schedstat")
        out[int(name)] = (comm, ticks, run_ns, wait_ns, started)
    if not out and not os.path.exists(f"/proc/{pid}"):
        raise ProcessLookupError(pid)
    return out


def _read_all(path: str) -> bytes:
    """A /proc file's bytes, read to its end (a list of children may pass one read's 4 KiB)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_small(path: str) -> bytes:
    """A small /proc file's bytes with one ``read`` (no file object: at 10 Hz over every thread, Python's
    ``open`` cost most of the sampler's time)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _read_schedstat_ns(path: str) -> tuple[int | None, int | None]:
    """``(on CPU, waiting on a run queue)`` in nanoseconds from ``schedstat``; Nones when unavailable."""
    try:
        reading = parse_schedstat(_read_small(path))
    except OSError:
        return None, None
    return reading if reading is not None else (None, None)
