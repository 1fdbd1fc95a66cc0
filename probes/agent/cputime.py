"""CPU time of the workload's own threads, as the kernel counts it: on a core, or runnable and waiting.

``/proc/self/task/<tid>/schedstat`` holds three numbers per thread: nanoseconds on a CPU, nanoseconds
runnable but waiting on a run queue (every core was taken), and time slices run. The agent reads it for
the threads it knows (the frontend, each emulated stream's executor thread) once per sample, from the
sampler thread. Where the kernel keeps no schedstat (``CONFIG_SCHED_INFO`` off, not Linux) a reading is
``None`` and the agent falls back to what its intervals alone can say (ARCHITECTURE.md, "Running,
waiting for a core, blocked").

The sampler reads its ``/proc`` files through :class:`ProcFile`: one descriptor kept open per file and
read again at offset 0 (the kernel writes such a file afresh at each read), holding the GIL. Opened and
read in Python each time, a file cost the sampler five calls that each let go of the GIL (open, fstat,
two reads, close), and each of those, beside a launch-bound loop that takes the GIL back between its
torch ops, a hand-over to the loop's thread and back: ~70-150 µs of the sampler's CPU per file on this
project's VM, and more of the loop's (``benchmarks/bench_interleaved.py``, docs/benchmarks.md, session 17).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable

Reading = tuple[int, int]
"""``(run_ns, wait_ns)``: cumulative nanoseconds on a core and waiting for one."""

#: Bytes read of a ``/proc`` file (schedstat and statm are well under 100).
READ_MAX = 256


def _pread_keeping_the_gil() -> Callable[[int, ctypes.Array[ctypes.c_char], int], int] | None:
    """libc's ``pread`` called through ``ctypes.PyDLL`` (which keeps the GIL for the call: a read of a
    small ``/proc`` file takes microseconds, a hand-over of the GIL more), or None without a C library."""
    try:
        libc = ctypes.PyDLL(None, use_errno=True)
        pread = libc.pread
    except (OSError, AttributeError):
        return None
    pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
    pread.restype = ctypes.c_ssize_t

    def read(fd: int, buf: ctypes.Array[ctypes.c_char], size: int) -> int:
        n = int(pread(fd, buf, size, 0))
        if n < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return n

    return read


_PREAD = _pread_keeping_the_gil()


def high_floor(below: int) -> int:
    """The descriptor number ``below`` under this process's limit (at most 2**20): where the agent
    moves the descriptors it keeps, out of the workload's way (the protocol socket 16 below, the kept
    ``/proc`` files 64 below)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (1 << 20 if soft == resource.RLIM_INFINITY else min(soft, 1 << 20)) - below


def _high_floor() -> int:
    """The lowest descriptor number the kept files move to: near the limit, out of the workload's way."""
    return high_floor(64)


class ProcFile:
    """A small ``/proc`` file read again and again through one descriptor kept open.

    The descriptor is moved to a high number (close-on-exec), as the protocol socket is, so a script that
    closes descriptors (``os.closerange``) or counts on the low numbers finds what it would under plain
    python, and none of its own files can take that number by chance; where it cannot move, its identity
    (device, inode) is checked before each read. A closed descriptor (``EBADF``: the workload closed it)
    is forgotten, never closed (the number may be the workload's by now), and the file opened afresh; a
    file that is gone (``ESRCH``: the thread ended) is closed. After a fork the child's copy is closed
    and the file opened anew (``/proc/self`` meant the parent when it was opened).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._pid = 0
        self._identity: tuple[int, int] | None = None
        """Checked before each read where the descriptor stayed low (None: moved high)."""
        self._buf = ctypes.create_string_buffer(READ_MAX)
        self._lock = threading.Lock()
        """One reader at a time (the sampler; the last sample may be taken on the frontend)."""

    def read(self) -> bytes | None:
        """The file's content now, None when it cannot be read."""
        with self._lock:
            return self._read()

    def _read(self) -> bytes | None:
        if self._fd >= 0 and self._pid != os.getpid():
            self._close()
        for _ in range(2):  # a second time where the workload had closed our descriptor
            if self._fd < 0 and not self._open():
                return None
            try:
                if self._identity is not None:
                    st = os.fstat(self._fd)
                    if (st.st_dev, st.st_ino) != self._identity:
                        raise OSError(errno.EBADF, "replaced")
                if _PREAD is not None:
                    n = _PREAD(self._fd, self._buf, READ_MAX)
                    return self._buf.raw[:n]
                return os.pread(self._fd, READ_MAX, 0)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    self._close()
                    return None
                self._fd = -1  # not ours any more: forgotten, not closed
        return None

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        identity: tuple[int, int] | None = None
        moved, floor = False, _high_floor()
        if fd < floor:
            try:
                high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
                os.close(fd)
                fd, moved = high, True
            except OSError:
                pass  # no higher number allowed
        if not moved:  # where the workload could take the number: checked before each read
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                return False
            identity = (st.st_dev, st.st_ino)
        self._fd, self._pid, self._identity = fd, os.getpid(), identity
        return True

    def close(self) -> None:
        """Close the descriptor (opened again at the next read)."""
        with self._lock:
            self._close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close()

    def _close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1


def parse_schedstat(data: bytes | None) -> Reading | None:
    """The first two fields of a schedstat file's content; None when it says nothing readable."""
    if data is None:
        return None
    try:
        fields = data.split()
        return int(fields[0]), int(fields[1])
    except (ValueError, IndexError):
        return None


class Schedstats:
    """``(run_ns, wait_ns)`` of ``/proc/self/task/<tid>/schedstat`` by thread id (None when unreadable),
    through kept descriptors (:class:`ProcFile`), for the few threads a sampler reads each time; the
    least recently read closes past :data:`KEEP` (threads that ended unread)."""

    KEEP = 16

    def __init__(self) -> None:
        self._files: OrderedDict[int, ProcFile] = OrderedDict()

    def __call__(self, tid: int) -> Reading | None:
        f = self._files.get(tid)
        if f is None:
            f = self._files[tid] = ProcFile(f"/proc/self/task/{tid}/schedstat")
            while len(self._files) > self.KEEP:
                self._files.popitem(last=False)[1].close()
        else:
            self._files.move_to_end(tid)
        reading = parse_schedstat(f.read())
        if reading is None:
            self._files.pop(tid, None)
            f.close()
        return reading

    def close(self) -> None:
        """Close every kept descriptor."""
        for f in self._files.values():
            f.close()
        self._files.clear()


class ThreadClock:
    """Per-thread run and wait time since the previous reading of the same thread.

    :meth:`take` returns seconds, not shares: the caller divides by its own window (readings are taken
    at the end of each window, so consecutive readings span one window).
    """

    def __init__(self, reader: Callable[[int], Reading | None] | None = None) -> None:
        self._read = Schedstats() if reader is None else reader
        self._last: dict[int, Reading] = {}

    def take(self, tid: int) -> tuple[float, float] | None:
        """``(run_s, wait_s)`` of ``tid`` since the previous call for it; None on the first call for a
        thread (no span yet) or when the kernel does not say."""
        now = self._read(tid)
        if now is None:
            self._last.pop(tid, None)
            return None
        before = self._last.get(tid)
        self._last[tid] = now
        if before is None:
            return None
        return max(0, now[0] - before[0]) / 1e9, max(0, now[1] - before[1]) / 1e9
