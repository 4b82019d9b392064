"""The bundled catalogue's provenance: every efficiency figure says where it came from,
and siblings take family values from one place (no stale copies)."""

from __future__ import annotations

import pytest

from perfmodel.hardware.catalog import list_hardware, load_hardware
from perfmodel.hardware.provenance import (
    family_problems,
    fitted_figures,
    fitted_sources,
    missing_provenance,
)
from perfmodel.hardware.spec import HardwareSpec


def _catalogue() -> dict[str, HardwareSpec]:
    return {i: load_hardware(i) for i in list_hardware()}


def _with(hw: HardwareSpec, figure: str, value: float, provenance: str) -> HardwareSpec:
    """``hw`` with one figure and its provenance replaced (no revalidation)."""
    eff = hw.efficiency
    if figure.startswith("compute."):
        eff = eff.model_copy(update={"compute": {**eff.compute,
                                                 figure.removeprefix("compute."): value}})
    else:
        eff = eff.model_copy(update={figure: value})
    eff = eff.model_copy(update={"provenance": {**eff.provenance, figure: provenance}})
    return hw.model_copy(update={"efficiency": eff})


# ------------------------------------------------------------------------- catalogue
@pytest.mark.parametrize("spec_id", list_hardware())
def test_every_figure_has_a_provenance(spec_id: str) -> None:
    hw = load_hardware(spec_id)
    assert missing_provenance(hw) == [], f"{spec_id}: add efficiency.provenance entries"
    for figure, text in hw.efficiency.provenance.items():
        kind = text.partition(":")[0]
        if kind == "cited":
            assert "[S" in text, f"{spec_id} {figure}: a citation names its [S#] source"


def test_siblings_agree_or_cite_their_own_figures() -> None:
    assert family_problems(_catalogue()) == []


def test_review_examples_follow_their_sibling() -> None:
    """The stale copies the review found now carry their sibling's value."""
    cat = _catalogue()
    for spec_id, parent in (("a100-40gb-sxm", "a100-80gb-pcie"),
                            ("a100-80gb-sxm", "a100-80gb-pcie"), ("mi250x", "mi210"),
                            ("h100-pcie", "h100-sxm"), ("h200-sxm", "h100-sxm"),
                            ("gh200", "h100-sxm"), ("h20", "h100-sxm")):
        hw = cat[spec_id]
        assert hw.efficiency.provenance["compute.fp32"] == f"family: {parent}"
        assert hw.efficiency.compute["fp32"] == cat[parent].efficiency.compute["fp32"]


def test_a_stale_copy_is_caught() -> None:
    cat = _catalogue()
    # A100 SXM keeps the 0.94 it was once copied with, still claiming the family value.
    stale = _with(cat["a100-40gb-sxm"], "compute.fp32", 0.94, "family: a100-80gb-pcie")
    problems = family_problems({**cat, "a100-40gb-sxm": stale})
    assert len(problems) == 1
    assert "a100-40gb-sxm" in problems[0]
    assert "0.94" in problems[0]


def test_an_unsourced_divergent_value_is_caught() -> None:
    cat = _catalogue()
    # H20 with its own assumed fp32 while the Hopper family has other values.
    mine = _with(cat["h20"], "compute.fp32", 0.82, "assumed: by family")
    problems = family_problems({**cat, "h20": mine})
    assert problems
    assert all("h20" in p for p in problems)
    assert "without its own cited or fitted source" in problems[0]
    # The same value with a citation of its own is allowed.
    cited = _with(cat["h20"], "compute.fp32", 0.82, "cited: [S1]")
    assert family_problems({**cat, "h20": cited}) == []


def test_family_cycles_and_unknown_siblings_are_caught() -> None:
    cat = _catalogue()
    a = _with(cat["h100-pcie"], "compute.fp32", 0.5, "family: h100-nvl")
    b = _with(cat["h100-nvl"], "compute.fp32", 0.5, "family: h100-pcie")
    problems = family_problems({**cat, "h100-pcie": a, "h100-nvl": b})
    assert any("cycle" in p for p in problems)
    lost = _with(cat["h20"], "memory", cat["h20"].efficiency.memory, "family: h999")
    assert any("no spec 'h999'" in p for p in family_problems({**cat, "h20": lost}))


def test_fitted_sources_of_bundled_specs() -> None:
    assert fitted_sources(load_hardware("h100-sxm")) == {"neusight"}
    assert fitted_sources(load_hardware("mi210")) == {"neusight", "llmcompass"}
    assert fitted_sources(load_hardware("b200")) == {"xla_ptable"}
    assert fitted_sources(load_hardware("a40")) == {"vidur"}
    assert fitted_sources(load_hardware("a100-80gb-sxm")) == frozenset()  # cited + family
    assert fitted_sources(load_hardware("b300")) == frozenset()  # inherited from b200
    assert fitted_figures(load_hardware("mi300x")) == {"compute.fp8": "xla_ptable",
                                                       "compute.tf32": "xla_ptable"}
