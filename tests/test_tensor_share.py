"""A product that runs its SM design's tensor units below the design's rate (the H20's
product limit; GeForce cards' FP32-accumulate MMA at half rate) keeps the rest of the SM:
the losses measured on full-rate parts (small GEMM tiles' operand feeds, attention kernels'
softmax and issue limits) cost it less of its own, lower tensor rate
(:func:`perfmodel.timing.core.share_limited_efficiency`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel._errors import SpecError
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.timing import RunContext, predict

GEMMS = [pm.Gemm(m=m, n=n, k=k, dtype="bf16")
         for m in (1, 8, 16, 64, 300, 4096) for n, k in ((4096, 4096), (1536, 8192))]
ATTENTION = [
    pm.Attention(batch=b, heads=32, kv_heads=8, seq_q=q, seq_kv=kv, head_dim=128,
                 causal=q > 1, dtype="bf16", impl=impl)
    for b, q, kv in ((1, 4096, 4096), (8, 1, 4096), (64, 1, 512), (2, 512, 8192))
    for impl in ("flash", "flash2", "xqa")
]


def test_tensor_share_from_the_spec() -> None:
    h20 = pm.load_hardware("h20")
    # 148 TFLOP/s of GH100's 78 SMs x 1.98 GHz x 4096 dense BF16 FLOPs per clock
    assert h20.tensor_share("bf16") == pytest.approx(148e12 / (78 * 1.98e9 * 4096))
    assert h20.tensor_share("fp8") == pytest.approx(296e12 / (78 * 1.98e9 * 8192))
    rtx = pm.load_hardware("rtx-4090")
    assert rtx.tensor_share("bf16") == pytest.approx(165.2e12 / (128 * 2.52e9 * 1024))
    assert rtx.tensor_share("int8") == 1.0  # INT32 accumulate runs at full rate
    for gpu in ("h100-sxm", "b200", "l40s", "a100-80gb-sxm", "rtx-pro-6000-server"):
        hw = pm.load_hardware(gpu)
        assert all(hw.tensor_share(dt) == 1.0 for dt in hw.peaks)


def _spec(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "cut.yaml"
    path.write_text(
        "id: cut\nname: cut\nvendor: nvidia\narch: hopper\n"
        "compute: {units: 100, boost_clock: 2 GHz}\n"
        f"peaks:\n  {line}\n"
        "memory: {type: HBM3, capacity: 80 GiB, bandwidth: 3 TB/s}\n"
        "form_factor: SXM\nlaunch_year: 2024\n"
        "sources: {peaks: test, compute: test, memory: test}\n", encoding="utf-8")
    return path


def test_a_full_rate_below_the_product_rate_is_refused(tmp_path: Path) -> None:
    # 100 SMs x 2 GHz x 1024 = 204.8 TFLOP/s < the 400 TFLOP/s peak
    bad = _spec(tmp_path, "bf16: {peak: 400 TFLOP/s, full_rate_flops_per_clock_per_unit: 1024}")
    with pytest.raises(SpecError, match="full_rate_flops_per_clock_per_unit"):
        pm.load_hardware(str(bad))
    vec = _spec(tmp_path, "fp32: {peak: 50 TFLOP/s, unit: vector, "
                          "full_rate_flops_per_clock_per_unit: 512}")
    with pytest.raises(SpecError, match="only a tensor peak"):
        pm.load_hardware(str(vec))
    ok = _spec(tmp_path, "bf16: {peak: 200 TFLOP/s, flops_per_clock_per_unit: 1000, "
                          "full_rate_flops_per_clock_per_unit: 4000}")
    assert pm.load_hardware(str(ok)).tensor_share("bf16") == pytest.approx(0.25)


def _cut(hw: HardwareSpec, share: float) -> HardwareSpec:
    """``hw`` whose bf16 tensor units run at ``share`` of its SM design's rate."""
    pk = hw.peaks["bf16"]
    clock = hw.compute.tensor_clock or hw.compute.boost_clock
    full = pk.peak / (hw.compute.units * clock)
    cut = pk.model_copy(update={"peak": pk.peak * share,
                                "full_rate_flops_per_clock_per_unit": full})
    return hw.model_copy(update={"peaks": {**hw.peaks, "bf16": cut},
                                 "id": f"{hw.id}-cut{share:g}"})


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb-sxm", "l40s"])
@pytest.mark.parametrize("share", [1.0, 0.5, 0.234])
def test_a_cut_device_sits_between_the_design_and_the_design_scaled_down(
        gpu: str, share: float) -> None:
    """The cut device is never faster than its full-rate design, never slower than the
    design with every rate scaled by the share (what a spec without the field predicted),
    and its matrix work never beats its own achievable peak. At share 1 the field
    changes nothing."""
    design = pm.load_hardware(gpu)
    cut = _cut(design, share)
    pk = cut.peaks["bf16"]
    scaled = cut.model_copy(update={"peaks": {**cut.peaks, "bf16": pk.model_copy(
        update={"full_rate_flops_per_clock_per_unit": None})}})
    graph = RunContext(launch="graph")
    rate = pk.peak * cut.efficiency.compute_fraction("bf16", "tensor")
    for op in GEMMS + ATTENTION:
        t_design = float(predict(op, design, context=graph).latency_s)
        p_cut = predict(op, cut, context=graph)
        t_cut = float(p_cut.latency_s)
        t_scaled = float(predict(op, scaled, context=graph).latency_s)
        if share == 1.0:
            assert t_cut == t_design == t_scaled
            continue
        assert t_design <= t_cut * (1 + 1e-12), op
        assert t_cut <= t_scaled * (1 + 1e-12), op
        if isinstance(op, pm.Gemm):
            assert float(p_cut.compute_s) >= 2.0 * op.m * op.n * op.k / rate * (1 - 1e-9)
    # a decode GEMM and a decode attention: where padded small tiles at the design's losses
    # made them compute-bound on the scaled-down design (compute c above memory m), the cut
    # device, which keeps the design's operand feeds, wins back at least half of that
    # excess, 1 − m/c of the scaled time (a fixed share would not hold near the ridge,
    # where the overlap of the two leaves little to win)
    relieved = 0
    for op in (pm.Gemm(m=8, n=4096, k=4096, dtype="bf16"),
               pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096,
                            head_dim=128, dtype="bf16", impl="xqa")):
        p_scaled = predict(op, scaled, context=graph)
        c, m = float(p_scaled.compute_s), float(p_scaled.memory_s)
        if share < 1.0 and c > m:
            t_cut = float(predict(op, cut, context=graph).latency_s)
            assert t_cut < (1.0 - 0.5 * (1.0 - m / c)) * float(p_scaled.latency_s), op
            relieved += 1
    if gpu == "h100-sxm" and share < 0.5:
        assert relieved == 2


def test_h20_decodes_about_as_fast_as_the_h100() -> None:
    """A published single-GPU benchmark (Llama-2-13B, FP16, batch 16; Architects' Tech
    Alliance, "Performance Analysis of NVIDIA H20 and L20 AI Inference Chips") measured the
    H20's decode faster than the H100's: it has the larger bandwidth (4.0 vs 3.35 TB/s),
    and a batch-16 decode step is memory-bound. With GH100's full tensor rate as the H20's
    SM design, its decode GEMMs are no longer predicted compute-bound on padded tiles at a
    quarter of the design's rate (which made its step 2.0x the H100's)."""
    tpot = {g: pm.predict_model("llama-2-13b", g, phase="generate", batch=16,
                                prompt_len=512, gen_len=512).tpot_s
            for g in ("h20", "h100-sxm")}
    assert tpot["h20"] < 1.1 * tpot["h100-sxm"]
