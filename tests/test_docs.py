"""The API documentation: every public name has a docstring whose ``Parameters`` section
names real parameters, and docs/embedding.md lists exactly the pinned public names and
runs as written. (scripts/check.sh also builds the HTML reference with pdoc, which fails
on an annotation or a module that does not import.)"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from test_import import PUBLIC_API

import perfmodel
import perfmodel.planning
import perfmodel.sweeps

DOC = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"


def documented_parameters(doc: str) -> list[str]:
    """Names listed in a numpy-style ``Parameters`` section (``a, b:`` or ``a : type``)."""
    lines = doc.expandtabs().splitlines()
    names: list[str] = []
    for i, line in enumerate(lines[:-1]):
        if line.strip() != "Parameters" or set(lines[i + 1].strip()) != {"-"}:
            continue
        indent = len(line) - len(line.lstrip())
        for entry in lines[i + 2:]:
            if not entry.strip():
                continue
            depth = len(entry) - len(entry.lstrip())
            if depth < indent or (depth == indent and not re.match(r"\s*[\w*][\w, *]*\s*:",
                                                                     entry)):
                break
            match = re.match(r"\s*([\w*][\w, *]*?)\s*:", entry) if depth == indent else None
            if match:
                names += [n.strip().lstrip("*") for n in match.group(1).split(",")]
    return names


def test_documented_parameters_reader() -> None:
    doc = """Do it.

    Parameters
    ----------
    a, b:
        Two.
    c : int
        Three: with a colon.

    Returns
    -------
    x:
        Not a parameter.
    """
    assert documented_parameters(doc) == ["a", "b", "c"]
    assert documented_parameters("No sections.") == []


def _public_callables() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    modules: list[tuple[str, Any]] = [("perfmodel", perfmodel)]
    modules += [(m.__name__, m) for m in (perfmodel.sweeps, perfmodel.planning)]
    for prefix, module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj):
                continue
            out.append((f"{prefix}.{name}", obj))
            if inspect.isclass(obj):
                out += [(f"{prefix}.{name}.{k}", v) for k, v in vars(obj).items()
                        if callable(v) and not k.startswith("_")]
    return out


CALLABLES = _public_callables()


@pytest.mark.parametrize("name", [n for n in PUBLIC_API if n not in ("__version__", "DTYPES")])
def test_public_name_has_a_docstring(name: str) -> None:
    doc = getattr(perfmodel, name).__doc__ or ""
    assert len(doc.strip()) >= 20, f"perfmodel.{name} needs a docstring"


@pytest.mark.parametrize(("name", "obj"), CALLABLES, ids=[n for n, _ in CALLABLES])
def test_documented_parameters_exist(name: str, obj: Any) -> None:
    """A parameter renamed in code but not in its docstring fails here."""
    names = documented_parameters(obj.__doc__ or "")
    if not names:
        return
    try:
        real = set(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return
    unknown = [n for n in names if n not in real]
    assert not unknown, f"{name} documents {unknown}, not among {sorted(real)}"


def test_embedding_page_lists_the_public_api() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Stable public names", 1)[1].split("\n## ", 1)[0]
    bullets = "\n".join(line for line in section.splitlines() if line.startswith(("- ", "  ")))
    listed = set(re.findall(r"`([A-Za-z_]+)`", bullets))
    assert listed == set(PUBLIC_API)


def test_embedding_page_code_runs() -> None:
    """The page's examples, as written except 10³ shapes instead of 10⁶ (for CI time)."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    with warnings.catch_warnings():  # the first block makes PerfmodelWarning an error
        for block in blocks:
            exec(compile(block.replace("1_000_000", "1_000"), str(DOC), "exec"), {})
