"""Per-CTA bandwidth of GEMM kernels: every CTA moves its own tile's bytes at c·BW/SMs.

Expected values are derived here from the definition: a CTA of a t_m × t_n tile reads
min(t_m, m) rows of A and min(t_n, n) columns of B over all of k and writes its output
tile; with few CTAs the memory time is those bytes over the per-CTA bandwidth
c·BW·η/SMs (η the spec's achievable memory fraction), plus the loaded memory latency. For
a kernel family that never splits K (the engines' own kernels) the per-CTA rate is its
pipeline's, f·smem_per_SM / memory latency (Little's law), whatever the device's bandwidth.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import Constants
from perfmodel.timing.knobs import knobs_for

C_HOPPER = 2.0
F_CUTLASS = 0.3
CONSTS = Constants().with_values({"gemm_cta_bandwidth.hopper": C_HOPPER,
                                  "gemm.cutlass.per-tensor.cta_inflight.hopper": F_CUTLASS},
                                 "test")


def _gemm_stage(p: pm.Prediction) -> pm.Prediction:
    return dict(p.stages)["gemm"] if p.stages else p


def test_a_few_ctas_move_their_own_tiles_at_the_per_cta_bandwidth() -> None:
    hw = pm.load_hardware("h100-sxm")
    m, n, k = 64, 128, 8192
    op = pm.Gemm(m=m, n=n, k=k, dtype="fp8", out_dtype="bf16", quant="per-tensor",
                 impl="cutlass")
    g = _gemm_stage(predict(op, hw, constants=CONSTS))
    rows = min(float(g.details["tile_m"]), m)
    cols = min(float(g.details["tile_n"]), n)
    # a few CTAs (≤ 8 tiles): their bytes at c/132 of the bandwidth exceed all the traffic
    assert (m / rows) * (n / cols) <= 8
    own = rows * k * 1 + cols * k * 1 + rows * cols * 2  # fp8 A rows, B columns; bf16 out
    latency = knobs_for(hw, "gemm", "fp8").memory_latency_s
    # CUTLASS never splits K: its CTA pulls f·smem_per_SM / latency (228 KiB per SM)
    smem = 228 * 1024
    expected = own / (F_CUTLASS * smem / latency) + latency
    assert float(g.memory_s) == pytest.approx(expected, rel=1e-9)


def test_a_splitting_library_keeps_the_architectures_multiple_of_the_fair_share() -> None:
    """cuBLAS-class kernels (``auto``) take gemm_cta_bandwidth.<arch>·BW/SMs: a single
    16-row tile over a short k (no split-K below 2 × 128 of k) on an H100."""
    hw = pm.load_hardware("h100-sxm")
    op = pm.Gemm(m=16, n=64, k=192, dtype="bf16")
    g = _gemm_stage(predict(op, hw, constants=CONSTS))
    assert float(g.details["split_k"]) == 1.0
    rows = min(float(g.details["tile_m"]), 16)
    cols = min(float(g.details["tile_n"]), 64)
    own = (rows * 192 + cols * 192 + rows * cols) * 2
    bw = hw.memory.bandwidth * hw.efficiency.memory
    latency = knobs_for(hw, "gemm", "bf16").memory_latency_s
    expected = max(own / (C_HOPPER * bw / hw.compute.units), (16 * 192 + 192 * 64 + 16 * 64) * 2
                   / bw) + latency
    assert float(g.memory_s) == pytest.approx(expected, rel=1e-9)


def test_an_unsplit_kernels_ctas_pull_what_their_pipeline_holds_not_a_share_of_the_bandwidth(
        ) -> None:
    """A one-CTA DeepGEMM call over a long k takes the same memory time on an H100 with
    twice the memory bandwidth (the CTA's rate is f·smem/latency), and twice the time with
    half the in-flight share; a cuBLAS-class call of one tile gets faster with the
    bandwidth."""
    hw = pm.load_hardware("h100-sxm")
    fast = hw.model_copy(update={"memory": hw.memory.model_copy(
        update={"bandwidth": 2.0 * hw.memory.bandwidth})})
    op = pm.Gemm(m=1, n=128, k=65536, dtype="fp8", quant="block", out_dtype="bf16",
                 impl="deepgemm")
    name = "gemm.deepgemm.block.cta_inflight.hopper"

    def mem(spec: Any, f: float, gemm: pm.Gemm = op) -> float:
        c = Constants().with_values({name: f}, "test")
        return float(_gemm_stage(predict(gemm, spec, constants=c)).memory_s)

    lat = knobs_for(hw, "gemm", "fp8").memory_latency_s
    assert mem(fast, 0.4) == pytest.approx(mem(hw, 0.4), rel=1e-9)
    assert mem(hw, 0.2) - lat == pytest.approx(2.0 * (mem(hw, 0.4) - lat), rel=1e-9)
    plain = pm.Gemm(m=16, n=64, k=192, dtype="bf16")
    assert mem(fast, 0.4, plain) < 0.9 * mem(hw, 0.4, plain)


def test_a_calibrated_cta_bandwidth_replaces_the_pipeline_rate() -> None:
    from perfmodel.calibrate.fit import apply_params

    hw = pm.load_hardware("h100-sxm")
    op = pm.Gemm(m=1, n=128, k=65536, dtype="fp8", quant="block", out_dtype="bf16",
                 impl="deepgemm")
    slow = apply_params(hw, {"gemm/fp8": {"cta_bandwidth": 0.5}})
    fast = apply_params(hw, {"gemm/fp8": {"cta_bandwidth": 5.0}})
    t_slow, t_fast = (float(_gemm_stage(predict(op, h)).memory_s) for h in (slow, fast))
    assert t_slow > 5.0 * t_fast


def test_ctas_sharing_a_panel_each_wait_for_all_of_it() -> None:
    """Eight 64-row tiles sharing the same 128 columns of B: L2 fetches B once, but every
    CTA loads all of it, so the memory time is not eight times shorter per byte (it was:
    the shared traffic was divided among the CTAs, and 512 rows took 0.4× the time of
    64)."""
    hw = pm.load_hardware("h100-sxm")
    ops = [pm.Gemm(m=m, n=128, k=8192, dtype="fp8", quant="per-tensor", impl="cutlass")
           for m in (64, 512)]
    one, eight = (_gemm_stage(predict(op, hw, constants=CONSTS)) for op in ops)
    assert float(eight.memory_s) >= float(one.memory_s)
    assert float(eight.latency_s) >= float(one.latency_s)


ENGINE_GEMMS = [
    ("h100-sxm", "fp8", "per-tensor", "cutlass", "trtllm"),
    ("h100-sxm", "fp8", "block", "deepgemm", "sglang"),
    ("b200", "fp8", "block", "deepgemm", "vllm"),
    ("b200", "fp4", "nvfp4", "cutedsl", "vllm"),
    ("l40s", "fp8", "block", "triton", "vllm"),
    ("a100-80gb-sxm", "bf16", "none", "cutlass", "sglang"),
]


@pytest.mark.parametrize(("gpu", "dtype", "quant", "impl", "engine"), ENGINE_GEMMS)
@pytest.mark.parametrize("graph", [False, True])
def test_engine_gemm_time_never_falls_as_a_dimension_grows(gpu: str, dtype: str, quant: str,
                                                           impl: str, engine: str,
                                                           graph: bool) -> None:
    """Kernels that never split K choose among tiles only: the fastest of candidates whose
    times each grow with the work grows with it, with no sawtooth at all (before, a
    976×128×8192 fp8 GEMM on an H100 took 0.54× the time of 64×128×8192)."""
    ctx = RunContext(launch="graph", l2="warm", engine=engine) if graph \
        else RunContext(engine=engine)
    grid = np.unique(np.round(np.geomspace(1, 16384, 120)))
    for fixed in (64.0, 128.0, 1024.0, 8192.0):
        for axis in ("m", "n", "k"):
            shape: dict[str, Any] = {"m": fixed, "n": 128.0, "k": 8192.0, axis: grid}
            op = pm.Gemm(dtype=dtype, quant=quant, impl=impl, **shape)
            lat = np.asarray(predict(op, gpu, context=ctx).latency_s)
            assert np.all(np.diff(lat) >= -1e-9 * lat[:-1]), (axis, fixed)


@pytest.mark.parametrize(("gpu", "dtype"), [("mi355x", "fp64"), ("a100-80gb-sxm", "fp32"),
                                            ("p100-pcie-16gb", "fp16")])
def test_few_row_vector_gemm_never_gets_faster_with_more_batch(gpu: str, dtype: str) -> None:
    """The GEMV-style kernel of a few-row GEMM on a vector unit takes the tile that makes it
    fastest, not the padded kernel's (whose B columns every CTA moves): a batch of 251
    one-row fp64 GEMMs on an MI355X took 87.8 µs, 252 took 45.1 µs. Scalar calls agree with
    the vectorised one."""
    batch = np.arange(1.0, 600.0)
    for m in (1.0, 8.0, 16.0):
        op = pm.Gemm(m=m, n=128, k=8192, batch=batch, dtype=dtype, shared_b=True)
        lat = np.asarray(predict(op, gpu).latency_s)
        assert np.all(np.diff(lat) >= -1e-9 * lat[:-1]), m
        for i in (0, 250, 251, 598):
            one = pm.Gemm(m=m, n=128, k=8192, batch=float(batch[i]), dtype=dtype,
                          shared_b=True)
            assert float(predict(one, gpu).latency_s) == pytest.approx(lat[i], rel=1e-12)
