"""Can this script or module run? One clear line when not. Standard library only, no user code runs.

Used by the child before it runs anything, and by the parent CLI before it spawns (the same message).
Modules are looked up the way ``python -m`` would (``sys.meta_path`` finders, the working directory
first on the path) without importing them, so no package ``__init__`` runs in the caller.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import zipfile
from typing import Any

#: Bytes read to tell a binary from a text file.
SNIFF = 8192


def check_target(script_or_module: str, is_module: bool) -> str | None:
    """The reason ``python SCRIPT`` / ``python -m MODULE`` would fail before running any code, or None."""
    if is_module:
        return _check_module(script_or_module)
    return _check_script(script_or_module)


def _check_script(path: str) -> str | None:
    """Why ``python path`` would fail before running code, or None."""
    if not path:
        return "no script given"
    if not os.path.exists(path):
        return f"can't open file {path!r}: no such file"
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        if not _has_main(path):
            return f"can't find '__main__' module in {path!r}"
        return None
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return f"can't open file {path!r}: {exc.strerror or exc}"
    if path.endswith(".pyc") and source[:4] == importlib.util.MAGIC_NUMBER:
        return None
    return check_source(source, path)


def check_source(source: bytes, path: str) -> str | None:
    """Why ``source`` is not runnable Python (binary, not text, a syntax error), or None."""
    if b"\0" in source[:SNIFF]:
        return f"{path}: not a Python file (binary content)"
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        if (exc.msg or "").startswith("(unicode error)"):
            return f"{path}: not a Python file (not UTF-8 text and no coding declaration)"
        return f"{exc.filename or path}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{path}: not a Python file ({exc})"
    return None


def _has_main(path: str) -> bool:
    """True when a directory or zip file holds a ``__main__`` python can run."""
    if os.path.isdir(path):
        return any(os.path.isfile(os.path.join(path, f"__main__.{ext}")) for ext in ("py", "pyc"))
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n in zf.namelist() for n in ("__main__.py", "__main__.pyc"))
    except (OSError, zipfile.BadZipFile):
        return False


def _check_module(name: str) -> str | None:
    """Why ``python -m name`` would fail before running code, or None."""
    if not name or not all(part.isidentifier() for part in name.split(".")):
        return f"No module named {name!r}"
    try:
        spec = find_module_spec(name)
    except _NotFound as exc:
        return str(exc)
    if spec.submodule_search_locations is not None:
        main = f"{name}.__main__"
        try:
            spec = find_module_spec(main, start=spec)
        except _NotFound:
            return f"No module named {main!r}; {name!r} is a package and cannot be directly executed"
    origin = spec.origin or ""
    if origin in ("built-in",) or spec.loader is None:
        return f"No code object available for {name!r}"
    if origin.endswith(".py") and os.path.isfile(origin):
        try:
            with open(origin, "rb") as f:
                return check_source(f.read(), origin)
        except OSError as exc:
            return f"can't open file {origin!r}: {exc.strerror or exc}"
    return None


class _NotFound(Exception):
    """The module (or one of its parents) cannot be found."""


def find_module_spec(name: str, start: Any = None) -> Any:
    """The spec of ``name`` found without importing anything (``start``: the parent package's spec).

    Raises:
        _NotFound: with Python's wording.
    """
    parts = name.split(".")
    spec, first = start, (len(parts) - 1 if start is not None else 0)
    for i in range(first, len(parts)):
        full = ".".join(parts[: i + 1])
        path = spec.submodule_search_locations if spec is not None else None
        if spec is not None and path is None:
            raise _NotFound(f"No module named {full!r}; {spec.name!r} is not a package")
        spec = _find_one(full, path)
        if spec is None:
            raise _NotFound(f"No module named {full!r}")
    return spec


def _find_one(full: str, path: list[str] | None) -> Any:
    """Ask each ``sys.meta_path`` finder for one module's spec (no import); None if none knows it."""
    loaded = sys.modules.get(full)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    top_path = [os.getcwd(), *sys.path[1:]]  # python -m puts the working directory first
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        search = top_path if path is None and finder is importlib.machinery.PathFinder else path
        try:
            spec = find(full, search)
        except (ImportError, ValueError, OSError):
            continue
        if spec is not None:
            return spec
    return None
