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


#: Layer order of DESIGN.md section 2 for the packages that have one: a module may import
#: its own layer or lower ones, never a higher one (cli and plots at the top).
_LAYERS = (
    ("perfmodel.hardware", "perfmodel.ops"),
    ("perfmodel.timing",),
    ("perfmodel.models", "perfmodel.sweeps"),
    ("perfmodel.serving",),
    ("perfmodel.planning", "perfmodel.planning_sim"),
    ("perfmodel.calibrate", "perfmodel.plots", "perfmodel.cli"),
)


def _layer(module: str) -> int | None:
    for i, packages in enumerate(_LAYERS):
        if any(_within(module, p) for p in packages):
            return i
    return None


def test_serving_and_planning_sit_in_their_layers() -> None:
    bad = []
    for p, name, imps in MODULES:
        mine = _layer(name)
        if mine is None or mine < _layer("perfmodel.serving"):  # type: ignore[operator]
            continue
        for i in imps:
            theirs = _layer(i.module)
            if theirs is not None and theirs > mine:
                bad.append(f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}")
    below = [f"{p.relative_to(PACKAGE_DIR.parent)}:{i.line} imports {i.module}"
             for p, name, imps in MODULES
             if (_layer(name) or 0) < 3 for i in imps if _within(i.module, "perfmodel.serving")]
    _violations("serving sits above models and below planning; planning below cli/plots",
                bad + below)
