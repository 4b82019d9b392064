"""Provenance of the spec efficiency figures: the ``efficiency.provenance`` schema, how
``extends`` labels inherited figures, and ``fitted_sources``."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel._errors import SpecError
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.provenance import (
    DATASET_SOURCES,
    fitted_figures,
    fitted_sources,
    missing_provenance,
)
from perfmodel.hardware.spec import spec_fitted_sources

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data" / "measurements"


# ------------------------------------------------------------------------ schema
MINIMAL = """id: test-gpu
name: Test GPU
vendor: nvidia
arch: hopper
compute: {units: 132, boost_clock: 1980 MHz}
peaks:
  bf16: {peak: 989.4 TFLOP/s}
memory: {type: HBM3, capacity: 80 GiB, bandwidth: 3.35 TB/s}
sources: {all: test}
"""


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "test-gpu.yaml"
    path.write_text(MINIMAL + extra, encoding="utf-8")
    return path


def _errors(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_hardware(path)
    return info.value.errors


def test_provenance_key_that_names_no_figure_is_rejected_with_a_suggestion(
        tmp_path: Path) -> None:
    path = _write(tmp_path, "efficiency:\n  compute: {fp32: 0.8}\n  provenance:\n"
                            "    compute.fp3: 'cited: [S1]'\n")
    errors = _errors(path)
    assert len(errors) == 1
    assert "efficiency.provenance.compute.fp3" in errors[0]
    assert "did you mean 'compute.fp32'?" in errors[0]


def test_provenance_text_must_say_its_kind(tmp_path: Path) -> None:
    path = _write(tmp_path, "efficiency:\n  provenance:\n    memory: 'measured: our runs'\n"
                            "    kernel_overhead: 'fitted:'\n")
    errors = _errors(path)
    assert any("efficiency.provenance.memory" in e and "does not say its kind" in e
               and "'cited:'" in e for e in errors)
    assert any("efficiency.provenance.kernel_overhead" in e and "needs a detail" in e
               for e in errors)


def test_sustained_clock_takes_a_provenance_only_when_set(tmp_path: Path) -> None:
    path = _write(tmp_path, "efficiency:\n  provenance:\n    sustained_clock: datasheet\n")
    assert "names no figure" in _errors(path)[0]
    text = MINIMAL.replace("boost_clock: 1980 MHz}", "boost_clock: 1980 MHz, "
                           "sustained_clock: 1.6 GHz}")
    path.write_text(text + "efficiency:\n  provenance:\n    sustained_clock: datasheet\n",
                    encoding="utf-8")
    hw = load_hardware(path)
    assert hw.efficiency_figures()["sustained_clock"] == 1.6e9
    assert hw.efficiency.provenance == {"sustained_clock": "datasheet"}


def test_extends_labels_inherited_figures_and_drops_overridden_ones(tmp_path: Path) -> None:
    parent = _write(tmp_path, "efficiency:\n  compute: {default: 0.8, fp8: 0.7}\n"
                              "  provenance:\n    compute.default: 'cited: [S1]'\n"
                              "    compute.fp8: 'fitted: xla_matmul_perf_table.csv (x.py)'\n"
                              "    memory: 'cited: [S25]'\n    kernel_overhead: 'assumed: x'\n")
    assert fitted_sources(load_hardware(parent)) == {"xla_ptable"}
    path = tmp_path / "mine.yaml"
    path.write_text("extends: test-gpu.yaml\nid: mine\nname: Mine\n"
                    "efficiency: {memory: 0.80, compute: {fp8: 0.5}}\n", encoding="utf-8")
    hw = load_hardware(path)
    prov = hw.efficiency.provenance
    assert "memory" not in prov
    assert "compute.fp8" not in prov
    assert missing_provenance(hw) == ["compute.fp8", "memory"]
    assert prov == {"compute.default": "family: test-gpu", "kernel_overhead": "family: test-gpu"}
    assert fitted_sources(hw) == frozenset()  # the parent's fit was on the parent's rows


# ---------------------------------------------------------------- fitted_sources
def test_fitted_sources_of_a_user_spec(tmp_path: Path) -> None:
    path = _write(tmp_path, "efficiency:\n  compute: {bf16: 0.7}\n  provenance:\n"
                            "    compute.bf16: 'fitted: data/vidur_gemm.csv, ours.csv (fit.py)'\n"
                            "    memory: 'cited: [S1]'\n")
    hw = load_hardware(path)
    assert fitted_sources(hw) == {"vidur", "ours"}
    assert spec_fitted_sources(hw) == {"vidur", "ours"}  # what validate's in-sample mark reads
    assert fitted_figures(hw) == {"compute.bf16": "ours"}


def test_dataset_sources_match_the_shared_files() -> None:
    if not SHARED.is_dir():
        pytest.skip("the public data set (../shared) is absent")
    for name, source in DATASET_SOURCES.items():
        with (SHARED / name).open(encoding="utf-8") as f:
            header = f.readline().strip().split(",")
            row = f.readline().strip().split(",")
        assert row[header.index("source")] == source, name
