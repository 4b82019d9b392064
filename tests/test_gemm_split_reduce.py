"""The reduce kernel of a split-K GEMM: under CUDA-graph replay it costs
ρ = ``gemm_split_reduce.<arch>`` kernel floors, so a split candidate pays (1 + ρ) floors
against an unsplit one's 1; a stream launch pays each kernel's own launch (ρ = 1).

Expected values are derived here: the floor is graph_kernel_s × (reference clock / the
device's clock), set to a known value in each test.
"""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import REFERENCE_CLOCK_HZ, Constants
from perfmodel.timing.knobs import clock_scale

GRAPH = RunContext(launch="graph")
FLOOR = 2.0e-6  # graph_kernel_s at the reference clock, s


def _consts(arch: str, rho: float | None) -> Constants:
    values = {f"graph_kernel_s.{arch}": FLOOR}
    if rho is not None:
        values[f"gemm_split_reduce.{arch}"] = rho
    return Constants().with_values(values, "test")


def test_a_split_gemm_pays_the_reduce_kernels_floors_under_graph_replay() -> None:
    hw = pm.load_hardware("h100-sxm")
    op = pm.Gemm(m=8, n=32, k=16384, dtype="bf16")  # one 32-column tile: splits K
    one = predict(op, hw, context=GRAPH, constants=_consts("hopper", 1.0))
    three = predict(op, hw, context=GRAPH, constants=_consts("hopper", 3.0))
    assert float(one.details["split_k"]) > 1
    assert float(three.details["split_k"]) == float(one.details["split_k"])
    # still two kernels (the GEMM and its reduce): the reduce's cost is what changed
    assert float(one.details["kernels"]) == float(three.details["kernels"]) == 2.0
    floor = FLOOR * clock_scale(hw)
    assert floor == pytest.approx(FLOOR * REFERENCE_CLOCK_HZ / hw.compute.boost_clock,
                                  rel=0.2)
    # two more floors, nothing else: same tile, same split, same bytes
    assert float(three.overhead_s) - float(one.overhead_s) == pytest.approx(2.0 * floor,
                                                                          rel=1e-9)
    assert float(three.memory_s) == float(one.memory_s)
    assert float(three.compute_s) == float(one.compute_s)
    assert float(three.latency_s) - float(one.latency_s) == pytest.approx(2.0 * floor,
                                                                        rel=1e-9)


def test_the_reduce_share_leaves_unsplit_gemms_and_stream_launches_alone() -> None:
    hw = pm.load_hardware("h100-sxm")
    short = pm.Gemm(m=16, n=64, k=192, dtype="bf16")  # below 2 × 128 of k: never splits
    a = predict(short, hw, context=GRAPH, constants=_consts("hopper", 1.0))
    b = predict(short, hw, context=GRAPH, constants=_consts("hopper", 3.0))
    assert float(a.details["split_k"]) == 1.0
    assert float(a.latency_s) == float(b.latency_s)
    skinny = pm.Gemm(m=8, n=32, k=16384, dtype="bf16")
    s1 = predict(skinny, hw, constants=_consts("hopper", 1.0))
    s3 = predict(skinny, hw, constants=_consts("hopper", 3.0))
    assert float(s1.details["split_k"]) > 1
    assert float(s1.latency_s) == float(s3.latency_s)


def test_a_dearer_reduce_can_make_the_unsplit_kernel_win() -> None:
    """Split-K wins a skinny GEMM by less than the extra floors cost: with ρ large enough
    the library's choice is the one-kernel candidate, never a slower one."""
    hw = pm.load_hardware("h100-sxm")
    op = pm.Gemm(m=8, n=32, k=2048, dtype="bf16")
    cheap = predict(op, hw, context=GRAPH, constants=_consts("hopper", 0.25))
    dear = predict(op, hw, context=GRAPH, constants=_consts("hopper", 4.0))
    assert float(cheap.details["split_k"]) > 1
    assert float(dear.details["split_k"]) == 1.0
    # more reduce cost never makes a GEMM faster
    assert float(dear.latency_s) >= float(cheap.latency_s)


@pytest.mark.parametrize("rho", [0.25, 2.5])
@pytest.mark.parametrize("count", [6, 600])  # every candidate on every shape; pruned search
def test_scalar_and_vectorised_searches_agree_whatever_the_reduce_costs(count: int,
                                                                        rho: float) -> None:
    """The pruned searches bound a split candidate with its own floors: a bound that
    assumed two would skip winners when ρ < 1."""
    hw = pm.load_hardware("b200")
    consts = _consts("blackwell", rho)
    rng = np.random.default_rng(7)
    ms = np.floor(2.0 ** rng.uniform(0, 7, count))
    ns = np.floor(2.0 ** rng.uniform(5, 10, count))
    ks = np.floor(2.0 ** rng.uniform(8, 16, count))
    vec = predict(pm.Gemm(m=ms, n=ns, k=ks, dtype="bf16"), hw, context=GRAPH,
                  constants=consts)
    splits = np.asarray(vec.details["split_k"])
    assert np.any(splits > 1)
    assert count < 100 or np.any(splits == 1)  # the large draw holds both kinds
    for i in range(0, count, max(1, count // 60)):
        one = predict(pm.Gemm(m=int(ms[i]), n=int(ns[i]), k=int(ks[i]), dtype="bf16"), hw,
                      context=GRAPH, constants=consts)
        assert float(np.asarray(vec.latency_s)[i]) == pytest.approx(float(one.latency_s),
                                                                    rel=1e-12)
        assert float(np.asarray(vec.details["kernels"])[i]) == \
            float(one.details["kernels"])


def test_blackwell_without_its_own_value_takes_hoppers() -> None:
    """The library's split-K path is a kernel design: an architecture with no fitted
    value takes its predecessor's (Blackwell: Hopper) before the mean."""
    hw = pm.load_hardware("b200")
    op = pm.Gemm(m=8, n=32, k=16384, dtype="bf16")

    def overhead(hopper: float) -> float:
        consts = Constants().with_values({"graph_kernel_s.blackwell": FLOOR,
                                          "gemm_split_reduce.hopper": hopper,
                                          "gemm_split_reduce.ampere": 1.0}, "test")
        p = predict(op, hw, context=GRAPH, constants=consts)
        assert float(p.details["split_k"]) > 1
        return float(p.overhead_s)

    assert overhead(3.0) - overhead(1.0) == pytest.approx(2.0 * FLOOR * clock_scale(hw),
                                                          rel=1e-9)
