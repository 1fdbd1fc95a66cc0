"""The layers import one way only:
contract → analysis → model → workloads → probes → sources → sinks → tui → cli.

Each layer may import itself and the layers before it, never one after it (so there are no cycles);
the ground floor imports only the standard library; the UI never measures or spawns.
"""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Folders in layer order, and the package each is installed as.
LAYERS = ("contract", "analysis", "model", "workloads", "probes", "sources", "sinks", "tui", "cli")
PACKAGE = {folder: f"torchpar_top.{folder}" for folder in LAYERS} | {"cli": "torchpar_top"}


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The import nodes under ``if TYPE_CHECKING:``: type checkers read them, Python never runs them."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
        if name == "TYPE_CHECKING":
            out.update(n for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(folder, runtime_only=False):
    """Every import in the folder's modules (``runtime_only``: less those only type checkers read)."""
    for path in (ROOT / folder).rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_only(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if node in skip:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:  # "from torchpar_top import workloads" is torchpar_top.workloads
                    yield path, f"{node.module}.{alias.name}"


def layer_of(module: str) -> str | None:
    """The layer a ``torchpar_top...`` module belongs to (``torchpar_top.main`` is the cli's)."""
    parts = module.split(".")
    if parts[0] != "torchpar_top":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS[:-1] else "cli"


@pytest.mark.parametrize("folder", [f for f in LAYERS if (ROOT / f).is_dir()])
def test_each_layer_imports_only_itself_and_the_layers_below(folder):
    allowed = set(LAYERS[: LAYERS.index(folder) + 1])
    for path, name in imports(folder):
        layer = layer_of(name)
        assert layer is None or layer in allowed, f"{path.relative_to(ROOT)} imports {name} (layer {layer})"


#: The ground floor's one import beyond the standard library, and why it may be missing.
OPTIONAL = {"orjson": "contract/codec.py parses with it where installed and with json where not"}


def test_the_ground_floor_needs_only_the_standard_library():
    for folder in ("contract", "analysis"):
        if not (ROOT / folder).is_dir():
            continue
        for path, name in imports(folder, runtime_only=True):  # what type checkers read is no dependency
            top = name.split(".")[0]
            assert top == "torchpar_top" or top in sys.stdlib_module_names or top in OPTIONAL, (
                f"{path} imports {name}"
            )


def test_nothing_below_the_ui_imports_textual():
    for folder in ("contract", "analysis", "model", "workloads", "probes", "sources", "sinks"):
        if not (ROOT / folder).is_dir():
            continue
        for path, name in imports(folder):
            assert not name.startswith(("textual", "rich", "torchpar_top.tui")), f"{path} imports {name}"


def test_the_tui_does_not_measure_or_spawn():
    forbidden = {
        "psutil",
        "pynvml",
        "subprocess",
        "torch",
        "torchpar_top.probes",
        "torchpar_top.sources.live.child",
    }
    for path, name in imports("tui"):
        parts = name.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        assert not prefixes & forbidden, f"{path} imports {name}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: pathlib.Path) -> str:
    """The installed name of a product file (``model/store.py`` is ``torchpar_top.model.store``)."""
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [PACKAGE[folder], *rest]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(here: str, is_package: bool, source: str) -> list[str]:
    """``module: name`` for each private name (``_x``) of another product module that the module
    ``here`` imports (a private module in the path counts too)."""
    package = here if is_package else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if not module.startswith("torchpar_top") or module == here:
                continue
            found += [f"{module}: {p}" for p in module.split(".") if _private(p)]
            found += [f"{module}: {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torchpar_top"):
                    found += [f"{alias.name}: {p}" for p in alias.name.split(".") if _private(p)]
    return found


def test_no_module_imports_a_private_name_of_another():
    """What a module keeps private may change without its importers breaking; a seam that needs it
    wants a public name. (Tests may import privates: they test them.)"""
    found = [
        f"{path.relative_to(ROOT)} imports {hit}"
        for folder in LAYERS
        if (ROOT / folder).is_dir()
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in private_imports(module_name(path), path.name == "__init__.py", path.read_text())
    ]
    assert not found, "\n".join(found)


def test_the_private_import_check_sees_one():
    here = module_name(ROOT / "sinks" / "export.py")
    assert here == "torchpar_top.sinks.export"
    assert private_imports(
        here, False, "from torchpar_top.contract.recording import _read_bytes, Recorder"
    ) == ["torchpar_top.contract.recording: _read_bytes"]
    assert private_imports(here, False, "from . import headless\nfrom .export import _us") == []  # itself
    assert private_imports(here, False, "from ._kept import thing\nimport torchpar_top.sinks._kept") == [
        "torchpar_top.sinks._kept: _kept",
        "torchpar_top.sinks._kept: _kept",
    ]


def test_mypy_sees_every_package_where_it_is_installed():
    """``mypy`` reads the checkout through ``.typecheck/``'s links (it cannot read setuptools' package-dir
    mapping): every mapped folder needs its link and its entry in ``[tool.mypy] packages``."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    assert set(pyproject["tool"]["mypy"]["packages"]) == set(mapping)
    for package, folder in mapping.items():
        parts = package.split(".")
        link = ROOT / ".typecheck" / ("root" if len(parts) == 1 else "layers") / pathlib.Path(*parts)
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), f"{link} -> {folder}/"
