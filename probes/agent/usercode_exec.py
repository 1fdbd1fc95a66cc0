"""Execute the user's script or module as ``python`` would: a fresh ``__main__``, argv, sys.path[0].

- ``SCRIPT``: ``sys.argv = [SCRIPT, *ARGS]``; ``sys.path[0]`` is the script's directory (symbolic links
  resolved); ``__file__`` is absolute; the code runs in a new ``__main__`` module that stays in
  ``sys.modules`` (pickling and spawn-started workers find it). A directory or zip file runs its
  ``__main__`` with ``sys.path[0]`` set to it, as python does.
- ``-m MODULE``: ``sys.path[0]`` is the working directory, ``sys.argv[0]`` the module's file, and the
  module runs through ``runpy``'s ``_run_module_as_main`` in a new ``__main__`` module, which is what
  ``python -m`` does (its tracebacks show the same ``<frozen runpy>`` frames).
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import runpy
import sys
import types
import zipfile
from typing import Any, Protocol, TypeVar


class _HasFilename(Protocol):
    @property
    def filename(self) -> str: ...


F = TypeVar("F", bound=_HasFilename)

#: Frames from files below this directory belong to torchpar-top and are cut from user tracebacks.
OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


AGENT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The agent's own files (``run.py``, this one, the bootstrap)."""


def _starter(filename: str) -> bool:
    """A frame of what starts the user's code: the agent's files, or runpy (``python -m``, ``-m MODULE``)."""
    return (
        filename.startswith(AGENT_DIR)
        or filename.startswith("<frozen runpy")
        or filename.endswith("runpy.py")
    )


#: The agent's wrappers around the user's calls (the backward wrapper, the root module's call, the
#: DataLoader watch, the step hooks): frames of these files inside a user's stack are left out of it.
WRAPPERS = tuple(
    AGENT_DIR + name
    for name in (
        "usercode.py",
        "usercode_phases.py",
        "usercode_data.py",
        "usercode_steps.py",
        "usercode_sampling.py",
    )
)


#: The agent's files that call into the code it runs (the user's script, an experiment): a frame outside
#: the agent called from another of its files is the agent at work (its start-up calling ``warnings``).
ENTRIES = tuple(AGENT_DIR + name for name in ("run.py", "usercode_exec.py", "bootstrap.py"))


def _entry(filename: str) -> bool:
    return filename.startswith(ENTRIES) or (_starter(filename) and not filename.startswith(AGENT_DIR))


def user_frames(frames: list[F]) -> list[F]:
    """``frames`` (outermost first) from the user's code on: the agent's and runpy's frames that start it
    (``run.py``, ``usercode_exec.py`` above the script's ``<module>``) are an implementation detail, and so
    are the agent's wrappers inside it (``WRAPPERS``: ``Tensor.backward`` then torch's ``backward``, not
    the phase clock's wrapper between them). A stack with nothing below them (the agent's own threads),
    or whose first frame outside them was called by the agent's own work rather than by what starts the
    code (the instrumentation's install calling ``warnings.filterwarnings``, before the user's code
    began: a fast crash's last stack read as the user's), is kept whole."""
    for i, frame in enumerate(frames):
        if not _starter(frame.filename):
            if i and not _entry(frames[i - 1].filename):
                return frames
            user = [f for f in frames[i:] if not f.filename.startswith(WRAPPERS)]
            return user or frames[i:]
    return frames


def run_user_code(target: str, is_module: bool, args: list[str]) -> None:
    """Run the code; its exceptions (SystemExit included) propagate to the caller."""
    if is_module:
        sys.argv = ["-m", *args]
        sys.path[0] = os.getcwd()
        _run_as_main(target, alter_argv=True)
    elif os.path.isdir(target) or zipfile.is_zipfile(target):
        sys.argv = [target, *args]
        sys.path[0] = target
        _run_as_main("__main__", alter_argv=False)
    elif target.endswith(".pyc"):
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        run_script(target)


def run_script(path: str) -> None:
    """Compile and execute ``path`` in a new ``__main__`` module (like ``python path``)."""
    path = os.path.abspath(path)
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = _new_main()
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__file__ = path
    main.__dict__["__cached__"] = None  # as runpy sets it: no bytecode cache for __main__
    exec(code, main.__dict__)


def _new_main() -> types.ModuleType:
    """A fresh ``__main__`` as python's startup makes it, installed in ``sys.modules``."""
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    return main


def _run_as_main(module: str, alter_argv: bool) -> None:
    """Run ``module`` as ``python -m`` does, in a fresh ``__main__``."""
    _new_main()
    run_as_main: Any = getattr(runpy, "_run_module_as_main", None)
    if run_as_main is not None:
        run_as_main(module, alter_argv)
    else:  # a Python without the private helper: same effect bar the module object's identity
        runpy.run_module(module, run_name="__main__", alter_sys=True)


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without its leading frames from torchpar-top's own files (the bootstrap)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(OWN_DIR):
        tb = tb.tb_next
    return tb
