"""The Blackwell Ultra (B300, GB300), RTX PRO 6000 Server Edition and Arc Pro B60 specs: they load,
their tensor peaks agree with units x clock x FLOPs per clock per unit (the per-unit rates written
here by hand from the architecture, not read from the specs), ``specs show`` prints them, and a
GEMM and an attention op predict on each (Arc Pro B60 through its own Xe2 family)."""

from __future__ import annotations

import math
from typing import get_args

import pytest
import yaml

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import bundled_path, load_hardware
from perfmodel.hardware.spec import PEAK_TOLERANCE, Arch
from perfmodel.ops.attention import Attention
from perfmodel.ops.gemm import Gemm
from perfmodel.timing import predict
from perfmodel.timing.family import FAMILIES

NEW_IDS = ("b300", "gb300", "rtx-pro-6000-server", "arc-pro-b60")

# Dense tensor FLOPs (or integer ops) per clock per SM / Xe-core, by architecture:
# - Blackwell datacenter SM (B200 and Blackwell Ultra): tf32 4096, bf16/fp16 8192, fp8 16384;
#   fp4 is 6x bf16 on Blackwell Ultra (15 PF = 6 x 2.5 PF on GB300) instead of 4x on B200.
# - GB202 SM on RTX PRO parts (FP32 accumulate at full rate): tf32 512, bf16/fp16 1024, fp8/int8
#   2048, fp4 4096 (the GeForce RTX 5090 halves these with FP32 accumulate).
# - Xe2 core: 8 XMX engines; Intel's 197 INT8 TOPS at 2.4 GHz on 20 cores is 4096 per core per
#   clock; FP16/BF16 half of it, INT4 twice it.
_BLACKWELL_ULTRA = {"tf32": 4096.0, "bf16": 8192.0, "fp16": 8192.0, "fp8": 16384.0, "fp4": 49152.0}
_GB202_PRO = {"tf32": 512.0, "bf16": 1024.0, "fp16": 1024.0, "fp8": 2048.0, "int8": 2048.0,
              "fp4": 4096.0}
_XE2 = {"bf16": 2048.0, "fp16": 2048.0, "int8": 4096.0, "int4": 8192.0}

# (units, clock the tensor peaks are quoted at in Hz, per-unit rates, tensor dtypes without a
# published per-unit rate). Clocks: B200's 1860 MHz tensor clock, GB200's ~2060 MHz, the RTX PRO
# 6000 Server Edition's 120 TFLOPS FP32 / (188 SMs x 256 FLOP/clock), Intel's 2400 MHz.
HAND: dict[str, tuple[int, float, dict[str, float], frozenset[str]]] = {
    "b300": (148, 1.86e9, _BLACKWELL_ULTRA, frozenset({"int8"})),
    "gb300": (148, 2.06e9, _BLACKWELL_ULTRA, frozenset({"int8"})),
    "rtx-pro-6000-server": (188, 120e12 / (188 * 256), _GB202_PRO, frozenset()),
    "arc-pro-b60": (20, 2.4e9, _XE2, frozenset()),
}


@pytest.mark.parametrize("spec_id", NEW_IDS)
def test_new_spec_loads_with_its_own_id(spec_id: str) -> None:
    hw = load_hardware(spec_id)
    assert hw.id == spec_id
    assert hw.name
    assert hw.sources


@pytest.mark.parametrize("spec_id", NEW_IDS)
def test_tensor_peaks_match_units_clock_and_rate_per_unit(spec_id: str) -> None:
    units, clock, rates, unpublished = HAND[spec_id]
    hw = load_hardware(spec_id)
    assert hw.compute.units == units
    tensor = {dt for dt, pk in hw.peaks.items() if pk.unit == "tensor"}
    assert tensor == set(rates) | unpublished, "a tensor dtype without a hand-checked rate"
    for dt, per_unit in rates.items():
        pk = hw.peaks[dt]  # type: ignore[index]
        assert pk.flops_per_clock_per_unit == per_unit, dt
        expected = units * clock * per_unit
        assert abs(pk.peak / expected - 1.0) <= PEAK_TOLERANCE, (dt, pk.peak, expected)
    for dt in unpublished:
        assert hw.peaks[dt].flops_per_clock_per_unit is None  # type: ignore[index]


def test_datasheet_headline_figures() -> None:
    """Figures as NVIDIA and Intel print them (dense), converted to SI by hand."""
    b300, gb300 = load_hardware("b300"), load_hardware("gb300")
    assert b300.peak("bf16") == pytest.approx(2.25e15)
    assert gb300.peak("bf16") == pytest.approx(2.5e15)
    assert gb300.peak("fp4") == pytest.approx(15e15)
    # NVIDIA's per-GPU table rounds the B300's 13.5 PF (6 x 2.25) to 14 (D28).
    assert b300.peak("fp4") == pytest.approx(14e15, rel=0.04)
    assert b300.memory.bandwidth == pytest.approx(7.7e12)
    assert gb300.memory.bandwidth == pytest.approx(8e12)
    assert b300.memory.capacity == 270 * 2**30
    assert gb300.memory.capacity == 279 * 2**30
    assert b300.tdp == 1100.0
    assert gb300.tdp == 1400.0
    pro = load_hardware("rtx-pro-6000-server")
    assert pro.peak("fp32") == pytest.approx(120e12)
    assert pro.memory.bandwidth == pytest.approx(1597e9)
    assert pro.memory.capacity == 96 * 2**30
    arc = load_hardware("arc-pro-b60")
    assert arc.peak("int8") == pytest.approx(197e12, rel=0.01)
    assert arc.peak("fp32") == pytest.approx(12.28e12, rel=0.01)
    assert arc.memory.bandwidth == pytest.approx(19e9 * 192 / 8)  # 19 Gbps on a 192-bit bus
    assert arc.memory.capacity == 24 * 2**30


def test_blackwell_ultra_trades_fp64_and_int8_for_fp4() -> None:
    """B300 keeps B200's bf16/fp8 rates, cuts FP64 (37 -> 1.25 TFLOP/s) and INT8, has 1.5x FP4."""
    b200, b300 = load_hardware("b200"), load_hardware("b300")
    gb200, gb300 = load_hardware("gb200"), load_hardware("gb300")
    for old, new in ((b200, b300), (gb200, gb300)):
        assert new.peak("bf16") == old.peak("bf16")
        assert new.peak("fp8") == old.peak("fp8")
        assert new.peak("fp64") < old.peak("fp64") / 20
        assert new.peak("int8") < old.peak("int8") / 20
        assert new.peak("fp4") == pytest.approx(1.5 * old.peak("fp4"), rel=0.01)
    assert b300.peak("fp64") == pytest.approx(1.25e12)
    assert b300.compute.special_function_rate == pytest.approx(10.7e12)


def test_intel_has_no_tf32_or_fp8() -> None:
    """XMX datatypes are FP16, BF16, INT8, INT4, INT2: a tf32 or fp8 prediction must be refused."""
    arc = load_hardware("arc-pro-b60")
    assert arc.vendor == "intel"
    assert arc.arch == "xe2"
    assert arc.compute.unit_name == "Xe-core"
    assert not arc.supports("tf32")
    assert not arc.supports("fp8")


@pytest.mark.parametrize(
    ("spec_id", "parent", "inherited"),
    [
        ("b300", "b200", ("efficiency", "interconnect.gpu_link")),
        ("gb300", "gb200", ("efficiency", "interconnect")),
        ("rtx-pro-6000-server", "rtx-5090", ("memory.smem_per_unit", "interconnect.gpu_link")),
    ],
)
def test_family_values_come_from_the_sibling(
    spec_id: str, parent: str, inherited: tuple[str, ...]
) -> None:
    """Siblings extend one spec instead of copying its family values."""
    raw = yaml.safe_load(bundled_path(spec_id).read_text(encoding="utf-8"))
    assert raw["extends"] == parent
    child, base = load_hardware(spec_id), load_hardware(parent)
    for dotted in inherited:
        block, _, field = dotted.partition(".")
        if not field:
            assert block not in raw, f"{spec_id} repeats {block}; inherit it from {parent}"
            mine, theirs = getattr(child, block), getattr(base, block)
            if block == "efficiency":  # same figures; each inherited one says where from
                assert set(mine.provenance.values()) == {f"family: {parent}"}
                mine = mine.model_copy(update={"provenance": {}})
                theirs = theirs.model_copy(update={"provenance": {}})
            assert mine == theirs
        else:
            assert field not in (raw.get(block) or {}), f"{spec_id} repeats {dotted}"
            assert getattr(getattr(child, block), field) == getattr(getattr(base, block), field)
    if spec_id == "rtx-pro-6000-server":
        # the link is the 5090's; only the server's PCIe switches are its own (S66)
        mine_link, their_link = child.interconnect.host_link, base.interconnect.host_link
        assert mine_link is not None
        assert their_link is not None
        assert (mine_link.peer_switch, their_link.peer_switch) == (True, False)
        assert mine_link.model_copy(update={"peer_switch": False}) == their_link
        assert child.efficiency.memory == base.efficiency.memory
        assert child.efficiency.kernel_overhead == base.efficiency.kernel_overhead
        assert child.efficiency.provenance["memory"] == f"family: {parent}"
        assert child.efficiency.provenance["kernel_overhead"] == f"family: {parent}"


def test_every_architecture_has_a_family() -> None:
    assert set(get_args(Arch)) <= set(FAMILIES)
    assert FAMILIES["xe2"].flash_impl == "flash2"


@pytest.mark.parametrize("spec_id", NEW_IDS)
def test_specs_show_prints_each_new_spec(spec_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = {
        # capacities as vendors print them ("GB" = GiB), with the bytes: 270 × 2^30 B is
        # 289.9 × 10⁹ B, 279 × 2^30 B 299.6 × 10⁹ B, 96 × 2^30 B 103.1 × 10⁹ B
        "b300": ("NVIDIA B300", "1.25 TFLOP/s", "13500 TFLOP/s", "270 GB", "(289.9 × 10⁹ B)",
                 "1100 W"),
        "gb300": ("NVIDIA GB300", "1.39 TFLOP/s", "15000 TFLOP/s", "279 GB", "(299.6 × 10⁹ B)",
                  "1400 W"),
        "rtx-pro-6000-server": ("RTX PRO 6000", "480 TFLOP/s", "1.597 TB/s", "96 GB",
                                "(103.1 × 10⁹ B)", "600 W"),
        "arc-pro-b60": ("Intel Arc Pro B60", "98.3 TFLOP/s", "456 GB/s", "Xe-core", "200 W"),
    }[spec_id]
    code = main(["specs", "show", spec_id])
    out, err = capsys.readouterr()
    assert code == 0, err
    for text in expected:
        assert text in out, text
    assert "sources" in out


@pytest.mark.parametrize("spec_id", NEW_IDS)
def test_gemm_predicts_within_the_roofline(spec_id: str) -> None:
    hw = load_hardware(spec_id)
    p = predict(Gemm(m=8192, n=8192, k=8192, dtype="bf16"), hw)
    assert math.isfinite(p.latency_s)
    # No prediction may beat the dense peak or the memory bandwidth.
    assert p.latency_s >= 2 * 8192**3 / hw.peak("bf16")
    assert p.latency_s >= p.bytes_min / hw.memory.bandwidth
    assert p.bottleneck == "compute"


@pytest.mark.parametrize("spec_id", NEW_IDS)
def test_attention_predicts_prefill_and_decode(spec_id: str) -> None:
    hw = load_hardware(spec_id)
    prefill = predict(Attention(batch=1, heads=32, kv_heads=8, seq_q=4096, head_dim=128,
                                causal=True, dtype="bf16"), hw)
    decode = predict(Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096,
                               head_dim=128, dtype="bf16"), hw)
    for p in (prefill, decode):
        assert math.isfinite(p.latency_s)
        assert p.latency_s > 0
    assert prefill.latency_s >= prefill.flops / hw.peak("bf16")
    # Decode reads the whole KV cache: 8 x 8 heads x 4096 x 128 x 2 (K, V) x 2 bytes.
    kv_bytes = 8 * 8 * 4096 * 128 * 2 * 2
    assert decode.latency_s >= kv_bytes / hw.memory.bandwidth
    assert decode.bottleneck == "memory"


def test_fp4_gemm_is_faster_on_b300_than_b200() -> None:
    """A large fp4 GEMM is compute-bound: B300's 1.5x fp4 rate shows in the prediction."""
    op = Gemm(m=16384, n=16384, k=16384, dtype="fp4")
    t_b200 = predict(op, "b200").latency_s
    t_b300 = predict(op, "b300").latency_s
    assert t_b300 < t_b200 / 1.3


def test_arc_pro_b60_uses_the_xe2_family() -> None:
    p = predict(Attention(batch=1, heads=32, kv_heads=8, seq_q=2048, head_dim=128, causal=True,
                          dtype="fp16", impl="flash"), "arc-pro-b60")
    assert p.details.get("impl") == "flash2"
    with pytest.raises(PerfmodelError, match="flash3"):
        predict(Attention(seq_q=2048, impl="flash3", dtype="fp16"), "arc-pro-b60")
