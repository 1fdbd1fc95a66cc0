"""The one-way flow: probes and session never import the UI; the UI never measures or spawns; the analysis
layer stands on the standard library alone."""

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def imports(folder):
    for path in (ROOT / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                yield path, node.module


def test_probes_session_and_workloads_never_import_textual():
    for folder in ("probes", "session", "workloads"):
        for path, name in imports(folder):
            assert not name.startswith(("textual", "rich", "torchpar_top.tui")), f"{path} imports {name}"


def test_the_tui_does_not_measure_or_spawn():
    forbidden = {"psutil", "pynvml", "subprocess", "torch", "torchpar_top.probes", "torchpar_top.session.child"}
    for path, name in imports("tui"):
        parts = name.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        assert not prefixes & forbidden, f"{path} imports {name}"


def test_the_analysis_layer_uses_the_standard_library_and_itself_only():
    """analysis/ is the ground floor: session, probes and the TUI import it, never the other way."""
    for path, name in imports("analysis"):
        top = name.split(".")[0]
        if top == "torchpar_top":
            assert name.startswith("torchpar_top.analysis"), f"{path} imports {name}"
        else:
            assert top in sys.stdlib_module_names or top == "__future__", f"{path} imports {name}"
