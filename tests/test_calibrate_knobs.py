"""Extended calibration knobs (tile fill, per-CTA bandwidth, tile efficiencies, softmax
overlap, paged prefill rate), the kernel-ridge residual table, and the "never worse than
uncalibrated" choice of fit_auto."""

from __future__ import annotations

import math

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.calibrate.data import Dataset, dataset_from_rows
from perfmodel.calibrate.fit import apply_params, fit, fit_auto, gp_table
from perfmodel.calibrate.suite import Case, design_suite
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.timing.family import family_params
from perfmodel.timing.knobs import knobs_for
from perfmodel.timing.residual import GP_SUFFIX, gp_values


@pytest.fixture(scope="module")
def h100() -> HardwareSpec:
    return pm.load_hardware("h100-sxm")


def _gemm_cases() -> list[Case]:
    return [c for c in design_suite("cuda", 132, fill=60) if c.op == "gemm"]


def _measured(hw: HardwareSpec, cases: list[Case], truth: dict[str, dict[str, float]],
              noise: float, seed: int = 0) -> Dataset:
    probe = dataset_from_rows([c.as_row() for c in cases])
    t = probe.predict(apply_params(hw, truth))
    t = t * np.exp(np.random.default_rng(seed).normal(0.0, noise, t.size))
    return dataset_from_rows([c.as_row(float(x)) for c, x in zip(cases, t, strict=True)])


def test_knobs_default_to_the_family_values(h100: HardwareSpec) -> None:
    k = knobs_for(h100, "gemm", "bf16")
    fam = family_params(h100.arch)
    assert k.fill_waves == fam.fill_waves
    assert k.cta_bandwidth == fam.cta_bandwidth
    assert k.tile_exponent == 1.0
    assert k.softmax_overlap == fam.softmax_overlap
    assert k.fa3_softmax_overlap == fam.fa3_softmax_overlap
    assert k.paged_prefill_efficiency == fam.paged_prefill_efficiency


def test_calibrated_knobs_reach_scalar_and_vector_predictions(h100: HardwareSpec) -> None:
    hw = apply_params(h100, {"gemm/bf16": {"fill_waves": 3.0, "cta_bandwidth": 0.5,
                                           "tile_efficiency_exponent": 2.0}})
    ms = np.asarray([1.0, 64.0, 300.0, 4096.0])
    vec = np.asarray(pm.predict(pm.Gemm(m=ms, n=4096, k=4096, dtype="bf16"), hw).latency_s)
    base = np.asarray(pm.predict(pm.Gemm(m=ms, n=4096, k=4096, dtype="bf16"), h100).latency_s)
    for i, m in enumerate(ms):
        one = pm.predict(pm.Gemm(m=float(m), n=4096, k=4096, dtype="bf16"), hw)
        assert float(one.latency_s) == pytest.approx(float(vec[i]), rel=1e-12)
    assert np.all(vec > base)


def test_recovers_fill_and_cta_bandwidth(h100: HardwareSpec) -> None:
    """The fit starts from the fitted model constant (gemm_cta_bandwidth, ~5 on Hopper): a
    truth half of it is recovered. (A truth of 0.6, where every CTA's own bytes set nearly
    every time, is not: the local fit stops at 0.9 with the tile exponent at 2.3.)"""
    truth = {"gemm/bf16": {"compute_fraction": 0.7, "memory_fraction": 0.8,
                           "overhead_s": 3e-6, "fill_waves": 2.5, "cta_bandwidth": 2.5}}
    data = _measured(h100, _gemm_cases(), truth, noise=0.01)
    got = fit(data, h100, prior=0.01, params="extended").params["gemm/bf16"]
    assert got["fill_waves"] == pytest.approx(2.5, rel=0.15)
    assert got["cta_bandwidth"] == pytest.approx(2.5, rel=0.15)
    assert got["compute_fraction"] == pytest.approx(0.7, rel=0.05)
    # the basic parameters alone cannot explain it as well
    basic = fit(data, h100, prior=0.01)
    ext = fit(data, h100, prior=0.01, params="extended")
    assert ext.error_after["all.median_ape"] < 0.02
    assert ext.error_after["all.p90_ape"] < basic.error_after["all.p90_ape"]


def test_recovers_tile_efficiency_exponent(h100: HardwareSpec) -> None:
    truth = {"gemm/bf16": {"compute_fraction": 0.7, "tile_efficiency_exponent": 1.8}}
    data = _measured(h100, _gemm_cases(), truth, noise=0.01)
    got = fit(data, h100, prior=0.01, params="extended").params["gemm/bf16"]
    assert got["tile_efficiency_exponent"] == pytest.approx(1.8, rel=0.15)


def test_gp_table_corrects_inside_and_fades_outside() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(4.0, 12.0, size=(40, 2))
    e = 0.2 * np.sin(x[:, 0] / 2.0) + 0.1 * np.cos(x[:, 1] / 3.0)
    table = gp_table(x, e)
    assert len(table) == 41
    assert len(table[0]) == 3
    q = rng.uniform(5.0, 11.0, size=(50, 2))
    truth = 0.2 * np.sin(q[:, 0] / 2.0) + 0.1 * np.cos(q[:, 1] / 3.0)
    assert np.median(np.abs(gp_values(table, q) - truth)) < 0.03
    far = np.asarray([[40.0, 40.0]])
    assert abs(float(gp_values(table, far)[0])) < 1e-6


def test_gp_table_reaches_predictions(h100: HardwareSpec) -> None:
    op = pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    x = [12.0, 12.0, 12.0, 0.0]
    hw = apply_params(h100, {}, {"gemm/bf16" + GP_SUFFIX: [[1.0] * 4 + [0.0],
                                                          [*x, math.log(1.5)]]})
    assert float(pm.predict(op, hw).latency_s) == pytest.approx(
        float(pm.predict(op, h100).latency_s) * 1.5)
    far = pm.Gemm(m=8, n=8, k=8, dtype="bf16")
    assert float(pm.predict(far, hw).latency_s) == pytest.approx(
        float(pm.predict(far, h100).latency_s))


def test_an_attention_table_of_one_mask_corrects_the_other(h100: HardwareSpec) -> None:
    # a calibration whose attention rows were all non-causal: its table on the same kernel
    # path still corrects a causal call (before: no table matched, no correction at all);
    # a table of the call's own mask comes first
    causal = pm.Attention(batch=2, heads=16, seq_q=2048, seq_kv=2048, head_dim=128,
                          causal=True, impl="flash3")
    point = [1.0, 4.0, 4.0, 11.0, 11.0, 7.0]  # log2 of batch, heads, kv heads, S_q, S_kv, D
    plain = float(pm.predict(causal, h100).latency_s)

    def with_tables(tables: dict[str, float]) -> float:
        hw = apply_params(h100, {}, {
            key + GP_SUFFIX: [[1.0] * 6 + [0.0], [*point, math.log(factor)]]
            for key, factor in tables.items()})
        return float(pm.predict(causal, hw).latency_s)

    assert with_tables({"attention/flash3/bf16": 1.5}) == pytest.approx(plain * 1.5)
    assert with_tables({"attention/flash3/bf16": 1.5, "attention/flash3-causal/bf16": 0.8}) \
        == pytest.approx(plain * 0.8)
    assert with_tables({"attention/flash2/bf16": 1.5}) == pytest.approx(plain)


def test_gp_table_gives_each_coordinate_its_own_length_scale() -> None:
    # the error varies along the first coordinate only; the three spread alike, so one
    # length scale for all (or one per spread) would treat them alike
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 10.0, size=(120, 3))
    e = 0.3 * np.sin(x[:, 0])
    h = gp_table(x, e)[0][:3]
    assert h[1] > 4.0 * h[0]
    assert h[2] > 4.0 * h[0]
    q = rng.uniform(1.0, 9.0, size=(200, 3))
    assert np.median(np.abs(gp_values(gp_table(x, e), q) - 0.3 * np.sin(q[:, 0]))) < 0.02


def test_gp_table_with_the_regime_reaches_predictions(h100: HardwareSpec) -> None:
    # coordinates: log2 shape (m, n, k, batch), then log2 of the uncorrected latency in µs
    # and of FLOPs per byte moved, worked out here from the prediction
    op = pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    p = pm.predict(op, h100)
    lat_us = float(p.latency_s) * 1e6
    intensity = 2.0 * 4096**3 / float(p.bytes)
    point = [12.0, 12.0, 12.0, 0.0, math.log2(lat_us), math.log2(intensity)]
    key = "gemm/bf16" + GP_SUFFIX
    hw = apply_params(h100, {}, {key: [[1.0] * 6 + [0.0], [*point, math.log(1.5)]]})
    assert float(pm.predict(op, hw).latency_s) == pytest.approx(float(p.latency_s) * 1.5)
    # one log2 unit of latency away along a length scale of 1: weight exp(-1/2)
    shifted = [*point[:4], point[4] + 1.0, point[5]]
    hw = apply_params(h100, {}, {key: [[1.0] * 6 + [0.0], [*shifted, math.log(1.5)]]})
    assert float(pm.predict(op, hw).latency_s) == pytest.approx(
        float(p.latency_s) * 1.5 ** math.exp(-0.5))


def test_fit_auto_keeps_the_defaults_when_they_are_right(h100: HardwareSpec) -> None:
    cases = _gemm_cases()[::3]
    data = _measured(h100, cases, {}, noise=0.03, seed=2)
    result, sel = fit_auto(data, h100, params="basic")
    assert math.isinf(sel.prior)
    assert sel.residual in ("off", "scale")
    assert result.params == {}
    assert "prior=inf,residual=off,params=basic" in sel.scores


def test_calibrated_attention_cta_bandwidth_reaches_fused_attention(h100: HardwareSpec) -> None:
    """The attention knob ``cta_bandwidth`` replaces the kernel family's constant (it was
    ignored: a fitted value changed no prediction)."""
    slow = apply_params(h100, {"attention": {"cta_bandwidth": 0.2}})
    for impl in ("flash3", "xqa"):
        # one sequence, 8 KV heads: a few CTAs stream a long KV cache
        op = pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=1, seq_kv=8192, head_dim=128,
                          impl=impl, num_splits=1)
        assert float(pm.predict(op, slow).memory_s) > 2.0 * float(pm.predict(op, h100).memory_s)


def test_a_knob_no_row_depends_on_is_neither_fitted_nor_written(h100: HardwareSpec) -> None:
    """Compute-bound FA3 prefill rows cannot see the per-CTA bandwidth: an extended fit
    leaves it out (it wrote its starting value, 1.5, which then replaced every attention
    family's constant: Triton decode on an H100 went 28.5 → 16.5 µs)."""
    cases = [Case("attention", "bf16", (("batch", b), ("heads", 32), ("kv_heads", 8),
                                        ("seq_q", s), ("seq_kv", s), ("head_dim", 128)),
                  impl="flash3", causal=True, phase="prefill")
             for b in (1, 2, 4) for s in (1024, 2048, 4096, 8192)]
    probe = dataset_from_rows([c.as_row() for c in cases])
    exact = probe.predict(h100)  # the uncalibrated model itself
    data = dataset_from_rows([c.as_row(float(x)) for c, x in zip(cases, exact, strict=True)])
    kf = fit(data, h100, params="extended").keys[0]
    assert "cta_bandwidth" not in kf.params
    assert "cta_bandwidth" in kf.fixed
    decode = pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, impl="triton")
    cal = apply_params(h100, {kf.key: kf.params})
    # the knobs it does write are refitted to the exact rows, to float precision (the fitted
    # overhead_s can come back an ulp off): the same time to 1e-12, not the 42 % of the bug
    assert float(pm.predict(decode, cal).latency_s) == pytest.approx(
        float(pm.predict(decode, h100).latency_s), rel=1e-12)


def test_softmax_overlap_knobs_of_the_two_kernel_classes_are_apart(h100: HardwareSpec) -> None:
    """A fit on FA3-class rows alone leaves FA2-class kernels as they were (one knob set both:
    on a B200 such a fit moved flash2 4k causal prefill 522.6 → 489.2 µs); the knob of
    profiles written before the split still sets both."""
    fa2 = pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=4096, seq_kv=4096, causal=True,
                       impl="flash2")
    fa3 = pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=4096, seq_kv=4096, causal=True,
                       impl="flash3")

    def lat(op: pm.Attention, hw: HardwareSpec) -> float:
        return float(pm.predict(op, hw).latency_s)

    only3 = apply_params(h100, {"attention": {"fa3_softmax_overlap": 0.0}})
    assert lat(fa2, only3) == lat(fa2, h100)
    assert lat(fa3, only3) > lat(fa3, h100)
    only2 = apply_params(h100, {"attention": {"fa2_softmax_overlap": 1.0}})
    assert lat(fa2, only2) < lat(fa2, h100)
    assert lat(fa3, only2) == lat(fa3, h100)
    both = apply_params(h100, {"attention": {"softmax_overlap": 0.0}})
    assert lat(fa2, both) > lat(fa2, h100)
    assert lat(fa3, both) > lat(fa3, h100)
    # an extended fit on exact FA3 prefill rows writes no FA2-class overlap
    cases = [Case("attention", "bf16", (("batch", b), ("heads", 32), ("kv_heads", 8),
                                        ("seq_q", s), ("seq_kv", s), ("head_dim", 128)),
                  impl="flash3", causal=True, phase="prefill")
             for b in (1, 2, 4) for s in (1024, 2048, 4096, 8192)]
    probe = dataset_from_rows([c.as_row() for c in cases])
    exact = probe.predict(h100)
    data = dataset_from_rows([c.as_row(float(x)) for c, x in zip(cases, exact, strict=True)])
    kf = fit(data, h100, params="extended").keys[0]
    assert "fa2_softmax_overlap" not in kf.params
    assert lat(fa2, apply_params(h100, {kf.key: kf.params})) == lat(fa2, h100)
