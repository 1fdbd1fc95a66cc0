"""The wheel holds every module of the source tree, under the one import name, and they import."""

import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: top-level folder -> package name, as pyproject.toml's package-dir maps them
MAPPING = {
    "cli": "torchpar_top",
    "contract": "torchpar_top.contract",
    "analysis": "torchpar_top.analysis",
    "model": "torchpar_top.model",
    "workloads": "torchpar_top.workloads",
    "probes": "torchpar_top.probes",
    "sources": "torchpar_top.sources",
    "sinks": "torchpar_top.sinks",
    "tui": "torchpar_top.tui",
}


def source_modules():
    for folder, package in MAPPING.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([package, *parts]), f"{package.replace('.', '/')}/{rel.as_posix()}.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    return next(out.glob("torchpar_top-*.whl"))


def test_wheel_contains_every_module_and_the_stylesheet(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [path for _, path in source_modules() if path not in names]
    assert not missing, f"not in the wheel (add the subpackage to pyproject.toml): {missing}"
    assert "torchpar_top/tui/app.tcss" in names
    assert not any(n.startswith(("tui/", "probes/", "tests/")) for n in names)


def test_every_module_imports_from_the_wheel(wheel, tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path), str(wheel)],
        check=True,
    )
    modules = sorted(m for m, _ in source_modules() if not m.endswith("__main__"))
    code = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    mod = importlib.import_module(m)\n"
        "    assert mod.__file__.startswith(sys.path[1]), (m, mod.__file__)\n"  # from the wheel, not the tree
        "print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *modules],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_numpy_is_a_runtime_dependency(wheel):
    """The README's install gives the async experiment's numpy row, and torch no NumPy warning."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(name).decode()
    requires = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    assert any(r.split(";")[0].strip().startswith("numpy") and "extra" not in r for r in requires), requires
