"""Per-CTA bandwidth of GEMM kernels: every CTA moves its own tile's bytes at c·BW/SMs.

Expected values are derived here from the definition: a CTA of a t_m × t_n tile reads
min(t_m, m) rows of A and min(t_n, n) columns of B over all of k and writes its output
tile; with few CTAs the memory time is those bytes over the per-CTA bandwidth
c·BW·η/SMs (η the spec's achievable memory fraction), plus the loaded memory latency.
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
CONSTS = Constants().with_values({"gemm_cta_bandwidth.hopper": C_HOPPER}, "test")


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
    bw = hw.memory.bandwidth * hw.efficiency.memory
    latency = knobs_for(hw, "gemm", "fp8").memory_latency_s
    expected = own / (C_HOPPER * bw / hw.compute.units) + latency
    assert float(g.memory_s) == pytest.approx(expected, rel=1e-9)


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
