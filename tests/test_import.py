"""``import perfmodel`` stays cheap and never loads torch; the lazy public names agree with
the names given to type checkers."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import perfmodel

PACKAGE_DIR = Path(perfmodel.__file__).resolve().parent
IMPORT_BUDGET_S = 0.3


def _python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (nothing imported by this test process leaks in)."""
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


def test_import_loads_no_torch() -> None:
    result = _python(
        "import sys, perfmodel\n"
        "print(sorted(m for m in ('torch', 'matplotlib', 'scipy', 'pydantic', 'numpy')"
        " if m in sys.modules))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_load_hardware_loads_no_torch() -> None:
    result = _python(
        "import sys, perfmodel\n"
        "hw = perfmodel.load_hardware('h100-sxm')\n"
        "print(hw.id, 'torch' in sys.modules, 'matplotlib' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["h100-sxm", "False", "False"]


def _cumulative_import_us(importtime_stderr: str, module: str) -> int:
    """Cumulative microseconds of ``module`` from ``python -X importtime`` output, whose lines
    read ``import time: <self us> | <cumulative us> | <indented module name>``."""
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return int(parts[1])
    raise AssertionError(f"{module} not in -X importtime output")


def test_importtime_parser() -> None:
    sample = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        120 |   perfmodel._errors\n"
              "import time:      2046 |      12345 | perfmodel\n")
    assert _cumulative_import_us(sample, "perfmodel") == 12345
    assert _cumulative_import_us(sample, "perfmodel._errors") == 120
    with pytest.raises(AssertionError):
        _cumulative_import_us(sample, "torch")


def test_import_time_budget() -> None:
    # Best of three fresh interpreters, so a busy machine does not fail the test by itself.
    times = []
    for _ in range(3):
        result = _python("import perfmodel", "-X", "importtime")
        assert result.returncode == 0, result.stderr
        times.append(_cumulative_import_us(result.stderr, "perfmodel") / 1e6)
    assert min(times) < IMPORT_BUDGET_S, f"import perfmodel took {min(times):.3f} s"


# ----------------------------------------------------------------------------- public names
def _type_checking_names() -> dict[str, str]:
    """Name -> module of every ``from M import N as N`` under ``if TYPE_CHECKING:``."""
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    for alias in stmt.names:
                        names[alias.asname or alias.name] = stmt.module
    return names


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


#: The stable public API, written out: adding, removing or renaming a public name fails
#: here until this list (and docs/embedding.md, which tests/test_docs.py checks) say so.
PUBLIC_API = [
    "Activation", "AllReduce", "Attention", "Cost", "DTYPES", "Elementwise", "Embedding",
    "Gemm", "HardwareSpec", "ModelPrediction", "Norm", "PerfmodelError", "PerfmodelWarning",
    "Prediction", "Rotary", "RunContext", "Softmax", "SpecError", "TransformerConfig",
    "__version__", "bytes_per_element", "engine_call", "format_quantity", "list_hardware",
    "list_models", "load_hardware",
    "load_model", "parse_quantity", "predict", "predict_model", "read_measurements",
    "validate",
]


def test_public_api_is_pinned() -> None:
    assert sorted(perfmodel.__all__) == sorted(PUBLIC_API)
    assert len(perfmodel.__all__) == len(set(perfmodel.__all__))
    for name in PUBLIC_API:
        assert getattr(perfmodel, name) is not None, name


def test_type_checking_block_matches_available_exports() -> None:
    exports: dict[str, str] = perfmodel._EXPORTS
    declared = _type_checking_names()
    available = {name: mod for name, mod in exports.items() if _module_exists(mod)}
    assert declared == available, (
        "perfmodel/__init__.py: the `if TYPE_CHECKING:` imports must list exactly the "
        "_EXPORTS whose module exists, from that module"
    )


def test_available_exports_resolve_and_missing_ones_raise_attribute_error() -> None:
    exports: dict[str, str] = perfmodel._EXPORTS
    for name, module in exports.items():
        if _module_exists(module):
            value = getattr(perfmodel, name)
            assert value is getattr(importlib.import_module(module), name)
        else:
            assert not hasattr(perfmodel, name)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        perfmodel.not_a_name  # noqa: B018
