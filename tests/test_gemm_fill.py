"""A GEMM's tile fill: the first k-slab of every concurrent tile and its store, paid once
per call on top of the overlapped compute and memory time.

The slab is 64 elements of k deep, or all of k when k is shorter (a tile that reduces 32
elements loads 32, not 64); a warm repeated call whose footprint fits L2 loads it from L2.
Expected values are derived here from the spec's figures and the chosen tile.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.timing.context import RunContext
from perfmodel.timing.knobs import knobs_for

GPU = "h100-sxm"
M, N = 8192, 32  # skinny: 64-row tiles over m, one tile over n, no split-K


def _gemm(k: int) -> pm.Prediction:
    return pm.predict(pm.Gemm(m=M, n=N, k=k, dtype="bf16", shared_b=True), GPU)


def test_fill_slab_is_never_deeper_than_k() -> None:
    """Below 64 the fill grows by (t_m + t_n)·s_in bytes per concurrent tile per element
    of k, at the achievable bandwidth; from 64 on it no longer grows."""
    hw = pm.load_hardware(GPU)
    knobs = knobs_for(hw, "gemm", "bf16")
    preds = {k: _gemm(k) for k in (16, 32, 48, 64, 128, 512)}
    tiles = {(p.details["tile_m"], p.details["tile_n"], p.details["split_k"])
             for p in preds.values()}
    assert len(tiles) == 1, "the shapes must share one tile for this test"
    tm, tn, split = tiles.pop()
    assert split == 1.0
    conc = min(math.ceil(M / tm) * math.ceil(N / tn), hw.compute.units)
    per_k = conc * (tm + tn) * 2.0 / knobs.achievable_bandwidth * knobs.fill_waves
    over = {k: float(p.overhead_s) for k, p in preds.items()}
    for lo, hi in ((16, 32), (32, 48), (48, 64)):
        assert over[hi] - over[lo] == pytest.approx(per_k * (hi - lo), rel=1e-9)
    assert over[128] == pytest.approx(over[64], rel=1e-12)
    assert over[512] == pytest.approx(over[64], rel=1e-12)


def test_a_warm_call_that_fits_l2_fills_from_l2() -> None:
    """The same skinny GEMM replayed warm (1 MiB footprint, far inside the L2) pays less
    fill than a cold one: its first slabs stream at the L2's rate, not DRAM's."""
    op = pm.Gemm(m=M, n=N, k=64, dtype="bf16", shared_b=True)
    cold = pm.predict(op, GPU, context=RunContext(launch="graph", l2="cold"))
    warm = pm.predict(op, GPU, context=RunContext(launch="graph", l2="warm"))
    assert warm.details["tile_m"] == cold.details["tile_m"]
    assert float(warm.overhead_s) < float(cold.overhead_s)


def test_fill_is_the_same_on_the_scalar_and_vector_paths() -> None:
    """k below, at and above the slab depth, one shape at a time and all at once."""
    ks = np.array([8, 24, 40, 64, 96, 4096])
    vec = pm.predict(pm.Gemm(m=M, n=N, k=ks, dtype="bf16", shared_b=True), GPU)
    for i, k in enumerate(ks):
        one = _gemm(int(k))
        assert float(np.asarray(vec.overhead_s)[i]) == pytest.approx(float(one.overhead_s),
                                                                     rel=1e-12)
        assert float(np.asarray(vec.latency_s)[i]) == pytest.approx(float(one.latency_s),
                                                                    rel=1e-12)
