"""Imports point down the layers of DESIGN.md section 2, checked by reading every module
under perfmodel/ with ast (so new modules are covered as they are added)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import perfmodel

PACKAGE_DIR = Path(perfmodel.__file__).resolve().parent


@dataclass(frozen=True)
class Import:
    """One imported module, with whether it runs at import time of the importing module."""

    module: str
    top_level: bool
    line: int


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    """``perfmodel/ops/gemm.py`` -> ``perfmodel.ops.gemm`` (``__init__`` -> the package)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports_of(source: str, name: str, is_package: bool = False) -> list[Import]:
    """Absolute names of every module ``source`` (the module ``name``) imports.

    ``from X import Y`` yields X and X.Y (Y may be a submodule). Relative imports are resolved.
    Imports inside functions, and under ``if TYPE_CHECKING:``, are not top level.
    """
    package = name if is_package else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_top = top
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                child_top = False
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, False)
                for stmt in child.orelse:
                    visit_stmt(stmt, top)
                continue
            visit_stmt(child, child_top)

    def visit_stmt(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, top, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(Import(target, top, node.lineno))
            found.extend(Import(f"{target}.{a.name}", top, node.lineno) for a in node.names)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "importlib.import_module", "import_module", "__import__"
        ) and node.args and isinstance(node.args[0], ast.Constant):
            found.append(Import(str(node.args[0].value), top, node.lineno))
        visit(node, top)

    visit(ast.parse(source), True)
    return found


def _modules() -> list[tuple[Path, str, list[Import]]]:
    out = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        name = module_name(path)
        source = path.read_text(encoding="utf-8")
        out.append((path, name, imports_of(source, name, path.name == "__init__.py")))
    return out


MODULES = _modules()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(rule: str, bad: list[str]) -> None:
    assert not bad, f"{rule}:\n  " + "\n  ".join(bad)


# ------------------------------------------------------------------------------- the rules
def test_ops_never_import_hardware() -> None:
    bad = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}"
           for p, name, imps in MODULES if _within(name, "perfmodel.ops")
           for i in imps if _within(i.module, "perfmodel.hardware")]
    _violations("perfmodel.ops knows nothing of any GPU (DESIGN.md section 2)", bad)


def test_hardware_never_imports_ops() -> None:
    bad = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}"
           for p, name, imps in MODULES if _within(name, "perfmodel.hardware")
           for i in imps if _within(i.module, "perfmodel.ops")]
    _violations("perfmodel.hardware knows nothing of ops (DESIGN.md section 2)", bad)


def test_torch_only_in_calibrate_at_top_level() -> None:
    bad = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module} at top level"
           for p, name, imps in MODULES if not _within(name, "perfmodel.calibrate")
           for i in imps if i.top_level and _within(i.module, "torch")]
    _violations("torch is imported lazily, inside functions, outside perfmodel.calibrate", bad)


def test_only_cli_imports_cli() -> None:
    allowed = ("perfmodel.cli", "perfmodel.__main__")
    bad = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}"
           for p, name, imps in MODULES if not any(_within(name, a) for a in allowed)
           for i in imps if _within(i.module, "perfmodel.cli")]
    _violations("nothing imports perfmodel.cli but the CLI itself and __main__", bad)


def test_foundation_imports_nothing_above_it() -> None:
    base = ("perfmodel._errors", "perfmodel._limits", "perfmodel._units", "perfmodel.dtypes")
    bad = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}"
           for p, name, imps in MODULES if name in base
           for i in imps if _within(i.module, "perfmodel")
           and not any(_within(i.module, b) for b in base)]
    _violations("units, dtypes and errors sit at the bottom", bad)


def test_every_module_was_read() -> None:
    names = {name for _, name, _ in MODULES}
    assert {"perfmodel", "perfmodel._units", "perfmodel.hardware.spec",
            "perfmodel.cli.main"} <= names


# ------------------------------------------------------------- the import reader itself
def _names(source: str, name: str, top_only: bool = False) -> set[str]:
    return {i.module for i in imports_of(source, name) if i.top_level or not top_only}


def test_reader_resolves_relative_imports() -> None:
    src = "from ..hardware import spec\nfrom . import cost\nfrom .gemm import Gemm\n"
    names = _names(src, "perfmodel.ops.attention")
    assert {"perfmodel.hardware", "perfmodel.hardware.spec", "perfmodel.ops.cost",
            "perfmodel.ops.gemm"} <= names


def test_reader_tells_top_level_from_lazy() -> None:
    src = (
        "import numpy\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import matplotlib\n"
        "try:\n    import scipy\nexcept ImportError:\n    pass\n"
        "class A:\n    import yaml\n"
        "def f():\n    import torch\n    return torch\n"
        "g = lambda: __import__('pandas')\n"
    )
    assert _names(src, "perfmodel.x", top_only=True) >= {"numpy", "scipy", "yaml"}
    assert _names(src, "perfmodel.x", top_only=True).isdisjoint({"torch", "matplotlib", "pandas"})
    assert {"torch", "matplotlib", "pandas"} <= _names(src, "perfmodel.x")


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        ("import perfmodel.hardware.spec", "perfmodel.ops.gemm", "perfmodel.hardware.spec"),
        ("from perfmodel import hardware", "perfmodel.ops.gemm", "perfmodel.hardware"),
        ("import importlib\nimportlib.import_module('perfmodel.cli.main')", "perfmodel.timing",
         "perfmodel.cli.main"),
    ],
)
def test_reader_sees_each_import_form(source: str, name: str, expected: str) -> None:
    assert expected in _names(source, name)


def test_module_name() -> None:
    assert module_name(PACKAGE_DIR / "ops" / "gemm.py") == "perfmodel.ops.gemm"
    assert module_name(PACKAGE_DIR / "__init__.py") == "perfmodel"
    assert module_name(PACKAGE_DIR / "cli" / "__init__.py") == "perfmodel.cli"


#: The layers of DESIGN.md section 2, bottom first: every module of perfmodel belongs to
#: one (test_every_module_has_a_layer), and imports, top level or lazy, point to its own
#: layer or lower ones. The foundation holds the helpers everything uses and the data
#: packages (an engine profile is data, not a layer); hardware and ops sit side by side
#: (the two rules above keep them apart); the package root is the facade on top that
#: re-exports public names lazily.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("perfmodel._errors", "perfmodel._limits", "perfmodel._units", "perfmodel._xp",
     "perfmodel.dtypes", "perfmodel.engines", "perfmodel.data"),
    ("perfmodel.hardware", "perfmodel.ops"),
    ("perfmodel.timing", "perfmodel.measurements"),
    ("perfmodel.models", "perfmodel.sweeps", "perfmodel.validation"),
    ("perfmodel.serving",),
    ("perfmodel.planning", "perfmodel.planning_sim"),
    ("perfmodel.calibrate",),
    ("perfmodel.cli", "perfmodel.plots", "perfmodel.__main__", "perfmodel"),
)
#: Names of the root any layer may import: the version string (the root's other names are
#: re-exports of lower layers, imported lazily).
ROOT_NAMES = ("perfmodel", "perfmodel.__version__")


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of a perfmodel module (the root only by its exact name)."""
    for i, packages in enumerate(LAYERS):
        for p in packages:
            if module == p or (p != "perfmodel" and module.startswith(p + ".")):
                return i
    return None


def upward_imports(modules: list[tuple[Path, str, list[Import]]]) -> list[str]:
    """Every import of a perfmodel module from a lower layer than the importer's own."""
    bad = []
    for path, name, imps in modules:
        mine = layer_of(name)
        for i in imps:
            if not _within(i.module, "perfmodel") or i.module in ROOT_NAMES:
                continue
            theirs = layer_of(i.module)
            if mine is None or theirs is None or theirs > mine:
                bad.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{i.line} ({name}, layer "
                           f"{mine}) imports {i.module} (layer {theirs})")
    return bad


def test_every_module_has_a_layer() -> None:
    missing = [name for _, name, _ in MODULES if layer_of(name) is None]
    _violations("every module of perfmodel belongs to a layer of LAYERS (add new packages "
                "there, where DESIGN.md section 2 puts them)", missing)


def test_imports_point_down_the_whole_table() -> None:
    _violations("imports point down the layers (DESIGN.md section 2)", upward_imports(MODULES))


def test_an_upward_import_is_reported() -> None:
    fake = PACKAGE_DIR / "models" / "fake.py"
    src = "from perfmodel.serving import simulator\nfrom perfmodel import __version__\n"
    mods = [(fake, "perfmodel.models.fake", imports_of(src, "perfmodel.models.fake"))]
    bad = upward_imports(mods)
    assert len(bad) == 2  # the package and its module, both from a higher layer
    assert all("perfmodel.serving" in b for b in bad)
    lazy = "def f():\n    from perfmodel.cli import main\n"
    mods = [(fake, "perfmodel.ops.fake", imports_of(lazy, "perfmodel.ops.fake"))]
    assert upward_imports(mods)  # a lazy import counts too
