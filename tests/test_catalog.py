"""The bundled hardware catalogue: every spec loads, is cited and self-consistent, and a few
figures derived by hand from the datasheets (``hardware_specs/SOURCES.md``) come out exactly."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest

from perfmodel.hardware.catalog import list_hardware, load_hardware, load_hardware_file, specs_dir
from perfmodel.hardware.spec import HardwareSpec

GPU_IDS: tuple[str, ...] = (
    "v100-sxm2-32gb", "v100-pcie-32gb", "p100-pcie-16gb", "p4", "t4", "a10", "a10g", "a30", "a40",
    "a100-40gb-pcie", "a100-40gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm", "l4", "l40s",
    "rtx-3090", "rtx-4090", "rtx-5090", "h20", "h100-pcie", "h100-sxm", "h100-nvl", "h200-sxm",
    "gh200", "b100", "b200", "gb200", "b300", "gb300", "rtx-pro-6000-server",
    "mi100", "mi210", "mi250x", "mi300x", "mi325x", "mi355x", "arc-pro-b60",
)
EXPECTED_IDS: tuple[str, ...] = (*GPU_IDS, "cpu-local")
ALL_IDS: list[str] = list_hardware()

# Vendor sparse (2:4) figures that must never appear as a dense peak.
KNOWN_SPARSE: dict[tuple[str, str], float] = {
    ("h100-sxm", "bf16"): 1978.9e12,
    ("h100-sxm", "fp16"): 1978.9e12,
    ("h100-sxm", "fp8"): 3957.8e12,
    ("h100-sxm", "tf32"): 989.4e12,
    ("h100-pcie", "bf16"): 1513e12,
    ("h200-sxm", "fp8"): 3957.8e12,
    ("gh200", "bf16"): 1978.9e12,
    ("a100-80gb-sxm", "bf16"): 624e12,
    ("a100-40gb-sxm", "tf32"): 312e12,
    ("b200", "bf16"): 4500e12,
    ("b200", "fp8"): 9000e12,
    ("gb200", "fp4"): 20000e12,
    # Blackwell Ultra: NVIDIA's per-GPU tables print bf16 4.5 / 5, fp8 9 / 10 PFLOPS with sparsity.
    ("b300", "bf16"): 4500e12,
    ("b300", "fp8"): 9000e12,
    ("gb300", "bf16"): 5000e12,
    ("gb300", "fp8"): 10000e12,
    ("l4", "fp8"): 485e12,
    ("mi300x", "bf16"): 2614.9e12,
    ("mi300x", "fp8"): 5229.8e12,
}


def _spec(spec_id: str) -> HardwareSpec:
    return load_hardware(spec_id)


def _rel(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


def test_expected_ids_are_bundled() -> None:
    assert len(GPU_IDS) == 37
    assert len(set(GPU_IDS)) == 37
    missing = sorted(set(EXPECTED_IDS) - set(ALL_IDS))
    assert not missing, f"bundled specs missing: {missing}"


def test_ids_unique_and_equal_to_file_stems() -> None:
    paths = sorted(Path(specs_dir()).rglob("*.yaml"))
    stems = Counter(p.stem for p in paths)
    duplicated = sorted(stem for stem, n in stems.items() if n > 1)
    assert not duplicated, f"the same file name appears in several vendor folders: {duplicated}"
    for path in paths:
        assert load_hardware_file(path).id == path.stem, path


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_spec_loads(spec_id: str) -> None:
    hw = _spec(spec_id)
    assert hw.id == spec_id
    assert hw.name
    assert hw.peaks


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_quantities_positive(spec_id: str) -> None:
    hw = _spec(spec_id)
    for dt, pk in hw.peaks.items():
        assert pk.peak > 0, dt
        if pk.sparse_peak is not None:
            assert pk.sparse_peak > 0, dt
    mem = hw.memory
    assert mem.bandwidth > 0
    assert mem.capacity > 0
    for size in (mem.l2, mem.smem_per_unit, mem.register_file_per_unit, mem.infinity_cache):
        assert size is None or size > 0
    assert hw.compute.units > 0
    assert hw.compute.boost_clock > 0
    for link in (hw.interconnect.gpu_link, hw.interconnect.host_link):
        if link is not None:
            assert link.bandwidth_per_direction > 0
    assert hw.tdp is None or hw.tdp > 0
    for fraction in (*hw.efficiency.compute.values(), hw.efficiency.memory):
        assert 0 < fraction <= 1.2


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_every_present_block_is_cited(spec_id: str) -> None:
    hw = _spec(spec_id)
    present = {"compute", "peaks", "memory", "efficiency"}
    if hw.interconnect.gpu_link is not None or hw.interconnect.host_link is not None:
        present.add("interconnect")
    if hw.tdp is not None:
        present.add("power")
    if hw.pricing is not None:
        present.add("pricing")
    cited = {key.split(".")[0] for key, text in hw.sources.items() if text.strip()}
    assert present <= cited, f"uncited blocks: {sorted(present - cited)}"


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_pricing_is_a_dated_assumption(spec_id: str) -> None:
    pricing = _spec(spec_id).pricing
    if pricing is None:
        return
    text = pricing.assumption.lower()
    assert "edit" in text
    assert re.search(r"\b20\d\d\b", text), "say which year the price is from"


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_ridge_point_positive(spec_id: str) -> None:
    hw = _spec(spec_id)
    dtype = next(dt for dt in ("bf16", "fp16", "fp32") if hw.supports(dt))
    ridge = hw.ridge_point(dtype)
    assert math.isfinite(ridge)
    assert ridge > 0


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_sparse_figures_are_twice_dense(spec_id: str) -> None:
    for dt, pk in _spec(spec_id).peaks.items():
        if pk.sparse_peak is not None:
            # 3 % slack: the L40S datasheet prints 362.05 dense but 733 sparse BF16.
            assert pk.sparse_peak / pk.peak == pytest.approx(2.0, rel=0.03), dt


@pytest.mark.parametrize("spec_id", ALL_IDS)
def test_lower_precision_is_not_slower(spec_id: str) -> None:
    """A sparse figure typed into the wrong row usually breaks this ordering."""
    peaks = _spec(spec_id).peaks
    chain = [peaks[dt].peak for dt in ("tf32", "bf16", "fp8", "fp4") if dt in peaks]
    assert chain == sorted(chain)


@pytest.mark.parametrize(("spec_id", "dtype"), sorted(KNOWN_SPARSE))
def test_no_dense_peak_is_a_known_sparse_figure(spec_id: str, dtype: str) -> None:
    hw = _spec(spec_id)
    sparse = KNOWN_SPARSE[(spec_id, dtype)]
    assert not math.isclose(hw.peak(dtype), sparse, rel_tol=0.005)
    assert hw.peak(dtype) == pytest.approx(sparse / 2, rel=0.01)


def test_h100_sxm_hand_figures() -> None:
    hw = _spec("h100-sxm")
    # 132 SMs x 1830 MHz x 4096 FLOP/clock = 989.4e12 (dense; NVIDIA's 1978.9 is sparse).
    assert _rel(hw.peak("bf16"), 989.4e12)
    assert hw.peak("bf16") != 1978.9e12
    assert _rel(hw.memory.bandwidth, 3.35e12)
    assert hw.memory.capacity == 80 * 2**30
    assert hw.ridge_point("bf16") == pytest.approx(989.4e12 / 3.35e12)


def test_a100_80gb_sxm_hand_figures() -> None:
    hw = _spec("a100-80gb-sxm")
    assert _rel(hw.peak("bf16"), 312e12)
    assert _rel(hw.memory.bandwidth, 2.039e12)
    assert hw.memory.capacity == 80 * 2**30


def test_mi300x_hand_figures() -> None:
    hw = _spec("mi300x")
    # 304 CUs x 2100 MHz x 2048 FLOP/clock = 1307.4e12.
    assert _rel(hw.peak("bf16"), 1307.4e12)
    assert _rel(hw.memory.bandwidth, 5.3e12)
    assert hw.memory.capacity == 192 * 2**30
    assert hw.memory.infinity_cache == 256 * 2**20


def test_amd_fp32_is_the_matrix_rate() -> None:
    """NeuSight's fp32 GEMMs on MI100/MI210 run on FP32 MFMA: the fp32 peak is the matrix rate."""
    assert _rel(_spec("mi100").peak("fp32"), 46.1e12)
    assert _rel(_spec("mi210").peak("fp32"), 45.3e12)
    for spec_id in ("mi100", "mi210", "mi250x", "mi300x", "mi325x", "mi355x"):
        assert _spec(spec_id).peaks["fp32"].unit == "tensor", spec_id


def test_tf32_only_where_supported() -> None:
    for spec_id in ("mi100", "mi210", "mi250x", "mi355x", "t4", "v100-sxm2-32gb", "p100-pcie-16gb"):
        assert not _spec(spec_id).supports("tf32"), spec_id
    for spec_id in ("mi300x", "mi325x", "a100-80gb-sxm", "h100-sxm", "b200"):
        assert _spec(spec_id).supports("tf32"), spec_id


def test_geforce_uses_fp32_accumulate_rate() -> None:
    assert _rel(_spec("rtx-3090").peak("bf16"), 71e12)
    assert _rel(_spec("rtx-4090").peak("bf16"), 165.2e12)
    assert _rel(_spec("rtx-5090").peak("bf16"), 209.5e12)


def test_hopper_tensor_clock() -> None:
    assert _rel(_spec("h100-sxm").compute.tensor_clock or 0.0, 1.83e9)
    assert _rel(_spec("h100-pcie").compute.tensor_clock or 0.0, 1.62e9)


def test_interconnect_is_per_direction() -> None:
    # Datasheets give bidirectional totals: NVLink4 900 GB/s, NVLink5 1.8 TB/s, MI300X IF 896 GB/s.
    link = _spec("h100-sxm").interconnect.gpu_link
    assert link is not None
    assert _rel(link.bandwidth_per_direction, 450e9)
    link = _spec("b200").interconnect.gpu_link
    assert link is not None
    assert _rel(link.bandwidth_per_direction, 900e9)
    link = _spec("mi300x").interconnect.gpu_link
    assert link is not None
    assert _rel(link.bandwidth_per_direction, 448e9)
    assert _spec("l4").interconnect.gpu_link is None


def test_cpu_local_is_a_documented_placeholder() -> None:
    hw = _spec("cpu-local")
    assert hw.vendor == "cpu"
    assert hw.arch == "cpu"
    assert hw.compute.unit_name == "core"
    assert "placeholder" in hw.notes
    assert "perfmodel calibrate run --device cpu" in hw.notes
    assert all("placeholder" in text for text in hw.sources.values())


def test_peaks_inherited_unchanged_from_a_bundled_spec_are_not_warned_of(
        tmp_path: Path) -> None:
    # the bundled H20 gives no FLOPs/clock for its tensor peaks (its clock is unpublished):
    # a user file extending it unchanged warned that every one was "not cross-checked"
    import warnings

    from perfmodel._errors import PerfmodelWarning
    from perfmodel.hardware.catalog import load_hardware_file

    same = tmp_path / "h20-copy.yaml"
    same.write_text("extends: h20\nid: h20-copy\nname: my H20\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfmodelWarning)
        assert load_hardware_file(same).peak("bf16") == 148e12
    changed = tmp_path / "h20-fast.yaml"
    changed.write_text("extends: h20\nid: h20-fast\nname: faster\n"
                       "peaks:\n  bf16: {peak: 296 TFLOP/s, unit: tensor}\n")
    with pytest.warns(PerfmodelWarning, match="bf16 not cross-checked"):
        load_hardware_file(changed)


def test_a_prefix_names_variants_not_other_gpus() -> None:
    # 'p100' names the one P100 variant bundled; 'l40' is an L40, not the L40S (twice the
    # tensor rate): refused with suggestions
    from perfmodel._errors import PerfmodelError
    from perfmodel.hardware.catalog import resolve_id

    assert resolve_id("p100") == "p100-pcie-16gb"
    with pytest.raises(PerfmodelError, match="unknown hardware"):
        resolve_id("l40")


def test_one_device_is_one_validation_group(tmp_path: Path) -> None:
    from perfmodel.validation import validate

    f = tmp_path / "m.csv"
    f.write_text("spec,op,dtype,m,n,k,measured_us\n" + "".join(
        f"{spec},gemm,bf16,4096,4096,4096,200\n"
        for spec in ("h100-sxm", "H100-SXM", "NVIDIA H100 80GB HBM3")))
    res = validate(f)
    assert [(g.spec, g.ours.n) for g in res.groups] == [("h100-sxm", 3)]
