"""``scripts/fit_spec_figures.py``: the fitted spec figures are exactly the ones it makes,
with the values it recomputes, and its YAML edits keep everything else."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from _scripts import load_script

from perfmodel.hardware.catalog import bundled_path, list_hardware, load_hardware

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data" / "measurements"


def _script() -> ModuleType:
    return load_script("fit_spec_figures")


def test_fitted_labels_are_exactly_the_scripts_figures() -> None:
    script = _script()
    made = {(f.spec, f.figure): script.label(f) for f in script.FITS}
    specs = {i: load_hardware(i) for i in list_hardware()}
    labelled = {(spec_id, figure): text for spec_id, hw in specs.items()
                for figure, text in hw.efficiency.provenance.items() if text.startswith("fitted:")}
    assert labelled == made


@pytest.mark.skipif(not SHARED.is_dir(), reason="the public data set (../shared) is absent")
def test_spec_figures_are_what_the_script_recomputes() -> None:
    """Rerunning the fit gives the values in the specs (within one rounding step: a change
    of the timing model or the model constants needs a rerun with --write)."""
    script = _script()
    for res in script.run_fits(SHARED, rounds=1):
        step = 0.1e-6 if res.fit.figure == "kernel_overhead" else 0.01
        assert res.new == pytest.approx(res.old, abs=step * 1.01), (
            f"{res.fit.spec} {res.fit.figure}: spec {res.old:g}, recomputed {res.new:g}; "
            "run python scripts/fit_spec_figures.py --write")


YAML = """efficiency:
  # a comment that stays
  compute: {default: 0.80, fp32: 0.82}
  memory: 0.85
  kernel_overhead: 4 us  # old note
  provenance:
    compute.default: "cited: [S1]"
    compute.fp32: "family: x"
sources:
  efficiency: "x"
"""


def test_yaml_edit_keeps_comments_and_sets_value_provenance_and_rule() -> None:
    script = _script()
    out = script.set_figure_text(YAML, "compute.fp32", 0.761, "fitted: a.csv (s.py)", "rule")
    out = script.set_figure_text(out, "kernel_overhead", 4.3e-6, "fitted: a.csv (s.py)", "r2")
    assert out.splitlines() == [
        "efficiency:",
        "  # a comment that stays",
        "  compute: {default: 0.80, fp32: 0.76}",
        "  memory: 0.85",
        "  kernel_overhead: 4.3 us",
        "  # fitted compute.fp32 0.76: rule",
        "  # fitted kernel_overhead 4.3 us: r2",
        "  provenance:",
        '    kernel_overhead: "fitted: a.csv (s.py)"',
        '    compute.default: "cited: [S1]"',
        '    compute.fp32: "fitted: a.csv (s.py)"',
        "sources:",
        '  efficiency: "x"',
    ]
    again = script.set_figure_text(out, "compute.fp32", 0.7, "fitted: a.csv (s.py)", "rule")
    assert again.count("# fitted compute.fp32") == 1
    assert "fp32: 0.70}" in again


def test_yaml_edit_of_every_bundled_fitted_figure_is_a_no_op() -> None:
    """The script can find each figure it fits in its spec file, and writing the value it
    already has changes nothing but the lines it owns."""
    script = _script()
    for fit in script.FITS:
        path = bundled_path(fit.spec)
        text = path.read_text(encoding="utf-8")
        value = load_hardware(fit.spec).efficiency_figures()[fit.figure]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  # fitted {fit.figure} "))
        rule = line.split(": ", 1)[1]
        assert script.set_figure_text(text, fit.figure, value, script.label(fit), rule) == text
