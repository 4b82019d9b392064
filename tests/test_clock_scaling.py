"""Fixed kernel times are stated at the reference SM clock (timing.constants
.REFERENCE_CLOCK_HZ) and scale with 1 / a device's clock: the graph kernel floor and an
engine's bookkeeping kernels; an attention tile's non-overlapped time (memory round trips)
does not."""

from __future__ import annotations

import pytest

import perfmodel as pm
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import REFERENCE_CLOCK_HZ, Constants
from perfmodel.timing.engine_costs import call_name

GRAPH = RunContext(launch="graph")


def _clocked(hw: HardwareSpec, factor: float) -> HardwareSpec:
    """``hw`` with its boost clock × ``factor`` (everything else as it is)."""
    compute = hw.compute.model_copy(update={"boost_clock": hw.compute.boost_clock * factor})
    return hw.model_copy(update={"compute": compute, "id": f"{hw.id}-x{factor:g}"})


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "h100-sxm", "b200"])
def test_graph_floor_is_cycles_at_the_reference_clock(gpu: str) -> None:
    hw = pm.load_hardware(gpu)
    op = pm.Gemm(m=16, n=16, k=16, dtype="bf16")

    def t(spec: HardwareSpec, floor: float) -> float:
        consts = Constants({"graph_kernel_s": floor,
                            f"graph_kernel_s.{hw.arch}": floor})
        return float(predict(op, spec, context=GRAPH, constants=consts).latency_s)

    # one kernel: 4 µs more of floor at the reference clock is 4 µs × 1.5 GHz / clock
    expected = 4e-6 * REFERENCE_CLOCK_HZ / hw.compute.boost_clock
    assert t(hw, 5e-6) - t(hw, 1e-6) == pytest.approx(expected, rel=1e-6)
    fast = _clocked(hw, 2.0)
    assert t(fast, 5e-6) - t(fast, 1e-6) == pytest.approx(expected / 2.0, rel=1e-6)


def test_engine_bookkeeping_scales_with_the_clock() -> None:
    hw = pm.load_hardware("h100-sxm")
    op = pm.Gemm(m=64, n=4096, k=4096, dtype="fp8", out_dtype="bf16", quant="per-tensor",
                 quantize_input=True, impl="cublas")
    consts = Constants({call_name("trtllm", "gemm-per-tensor"): 9e-6})
    ctx = RunContext(engine="trtllm")
    at = {f: float(dict(predict(op, _clocked(hw, f), context=ctx,
                                constants=consts).stages)["engine"].latency_s)
          for f in (1.0, 1.5)}
    assert at[1.0] == pytest.approx(9e-6 * 1.5e9 / 1.98e9)
    assert at[1.5] == pytest.approx(at[1.0] / 1.5)


def test_attention_tile_time_does_not_scale_with_the_clock() -> None:
    hw = pm.load_hardware("h100-sxm")
    op = pm.Attention(batch=1, heads=8, kv_heads=8, seq_q=1, seq_kv=64, head_dim=128,
                      impl="flash3")

    def t(spec: HardwareSpec, tile: float) -> float:
        consts = Constants({"attn.flash3.decode_tile_s": tile})
        return float(predict(op, spec, constants=consts).latency_s)

    slow = t(hw, 5e-6) - t(hw, 1e-6)
    assert slow > 3e-6
    assert t(_clocked(hw, 2.0), 5e-6) - t(_clocked(hw, 2.0), 1e-6) == pytest.approx(slow)
