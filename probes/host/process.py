"""What process a PID is, from ``/proc``, for ``torchpar-top attach PID``: alive, readable, Python or not.

Reading ``/proc/<pid>/exe`` and ``maps`` needs the same permission as ptrace's read mode (same user,
or CAP_SYS_PTRACE), so an error here also predicts that py-spy will be refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_PYTHON_EXE = re.compile(r"python(\d+(\.\d+)?)?[a-z]*(\.exe)?", re.IGNORECASE)  # python, python3.11d
_LIBPYTHON = re.compile(r"/libpython\d+(\.\d+)?[a-z]*\.so")


@dataclass(frozen=True)
class ProcessInfo:
    """A live process as ``/proc`` describes it."""

    pid: int
    name: str
    """The kernel's name for it (``comm``, at most 15 characters)."""
    exe: str
    """Path of the executable ('' when the kernel gives none)."""
    cmdline: tuple[str, ...]
    is_python: bool
    """The executable is ``python*`` or the process has ``libpython`` mapped (embedded interpreters)."""


def _read(path: str) -> str:
    """A /proc file as text (``FileNotFoundError`` / ``PermissionError`` pass through)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _state(pid: int) -> str | None:
    """The process state letter from ``/proc/<pid>/stat``, None when there is no such process."""
    try:
        return _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def is_python_exe(exe: str) -> bool:
    """Whether an executable's basename looks like a Python interpreter (``python``, ``python3.11``)."""
    base = os.path.basename(exe.removesuffix(" (deleted)"))
    return bool(_PYTHON_EXE.fullmatch(base))


def maps_libpython(maps: str) -> bool:
    """Whether ``/proc/<pid>/maps`` text shows a ``libpython`` loaded."""
    return bool(_LIBPYTHON.search(maps))


def describe_pid(pid: int) -> ProcessInfo | str:
    """The process ``pid``, or a one-line reason it cannot be described (see :func:`check_attach`)."""
    if pid <= 0:
        return f"no process with pid {pid}"
    state = _state(pid)
    if state is None:
        return f"no process with pid {pid}"
    if state in ("Z", "X"):
        return f"process {pid} has exited"
    try:
        name = _read(f"/proc/{pid}/comm").strip()
        cmdline = tuple(a for a in _read(f"/proc/{pid}/cmdline").split("\0") if a)
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except FileNotFoundError:
            exe = ""  # kernel threads have no executable
        python = is_python_exe(exe) if exe else False
        if exe and not python:
            python = maps_libpython(_read(f"/proc/{pid}/maps"))
    except PermissionError:
        return f"cannot read process {pid}: permission denied"
    except (FileNotFoundError, ProcessLookupError):
        return f"no process with pid {pid}"
    except OSError as exc:
        return f"cannot read process {pid}: {exc.strerror or exc}"
    return ProcessInfo(pid, name, exe, cmdline, python)


def check_attach(pid: int, *, require_python: bool = False) -> str | None:
    """One-line reason ``attach PID`` cannot watch ``pid``, or None when it can.

    Messages: ``no process with pid N``, ``process N has exited``, ``cannot read process N: permission
    denied``, and with ``require_python`` also ``process N (NAME) is not running Python``.
    """
    info = describe_pid(pid)
    if isinstance(info, str):
        return info
    if require_python and not info.is_python:
        return f"process {pid} ({info.name}) is not running Python"
    return None
