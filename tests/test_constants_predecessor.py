"""Predecessor architectures (timing.constants.ARCH_PREDECESSOR): a kernel-design constant
with no value fitted for its own architecture takes the value fitted for its nearest
predecessor of the same SM design (Ada ← Ampere, Blackwell ← Hopper, the RTX Blackwell
SM120 ← Ada ← Ampere) before the mean over every architecture; never the other way round;
device and host constants keep the mean; fits run without the lookup."""

from __future__ import annotations

import dataclasses

import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import (
    ARCH_FAMILIES,
    ARCH_PREDECESSOR,
    PARAMS,
    PREDECESSOR_PREFIXES,
    Constants,
)

GRAPH = RunContext(launch="graph")


def test_predecessors_follow_the_two_sm_designs_forward() -> None:
    assert dict(ARCH_PREDECESSOR) == {"ada": "ampere", "blackwell": "hopper",
                                      "blackwell-consumer": "ada"}
    assert set(ARCH_PREDECESSOR) | set(ARCH_PREDECESSOR.values()) <= set(ARCH_FAMILIES)
    # every prefix names declared constants refined per architecture
    for prefix in PREDECESSOR_PREFIXES:
        assert any(n.startswith(prefix) and n.endswith(".hopper") for n in PARAMS), prefix


def test_a_kernel_constant_takes_its_predecessors_value_before_the_mean() -> None:
    c = Constants({"gemm_cta_bandwidth": 4.0, "gemm_cta_bandwidth.hopper": 6.0,
                   "gemm_cta_bandwidth.ada": 9.0,
                   "attn.xqa.decode_tile_s": 5e-6, "attn.xqa.decode_tile_s.ampere": 7e-6,
                   "attn.xqa.decode_tile_s.hopper.trtllm": 3e-6})
    assert c["gemm_cta_bandwidth.blackwell"] == 6.0
    assert c["attn.xqa.decode_tile_s.ada"] == 7e-6
    assert c["attn.xqa.decode_tile_s.blackwell.trtllm"] == 3e-6  # engine for engine
    # an engine the predecessor has no value for follows its own chain, to the
    # predecessor's architecture value where there is one
    assert c["attn.xqa.decode_tile_s.ada.vllm"] == 7e-6
    assert c["attn.xqa.decode_tile_s.blackwell.vllm"] == 5e-6
    assert "predecessor" in c.provenance("gemm_cta_bandwidth.blackwell")
    # not backwards: Ampere keeps the mean though Ada has a value, Hopper though Blackwell
    assert c["gemm_cta_bandwidth.ampere"] == 4.0
    back = Constants({"attn.xqa.decode_tile_s": 5e-6, "attn.xqa.decode_tile_s.blackwell": 2e-6})
    assert back["attn.xqa.decode_tile_s.hopper"] == 5e-6
    # the architecture's own value wins
    own = Constants({**c.fitted, "gemm_cta_bandwidth.blackwell": 3.0})
    assert own["gemm_cta_bandwidth.blackwell"] == 3.0
    # while a fit runs (stand-ins off), the mean
    assert dataclasses.replace(c, kin=False)["gemm_cta_bandwidth.blackwell"] == 4.0


def test_device_and_host_constants_keep_the_mean() -> None:
    """The graph-replayed kernel floor is the device's, an engine's per-call cost its
    host's and bookkeeping's: neither is a kernel design the successor inherits."""
    c = Constants({"graph_kernel_s": 2e-6, "graph_kernel_s.hopper": 3e-6,
                   "call.trtllm.attention-decode.xqa_s": 1e-6,
                   "call.trtllm.attention-decode.xqa_s.hopper": 2e-6})
    assert c["graph_kernel_s.blackwell"] == 2e-6
    assert c["call.trtllm.attention-decode.xqa_s.blackwell"] == 1e-6


def test_an_unmeasured_architecture_predicts_with_its_predecessors_kernel_constants() -> None:
    """A B200 GEMM of few CTAs (memory time set by each CTA's own bytes) predicts with
    Hopper's fitted per-CTA bandwidth when Blackwell has none."""
    op = pm.Gemm(m=64, n=512, k=16384, dtype="bf16")

    def t(table: dict[str, float]) -> float:
        return float(predict(op, "b200", context=GRAPH, constants=Constants(table)).latency_s)

    mean = {"gemm_cta_bandwidth": 2.0}
    earlier = {**mean, "gemm_cta_bandwidth.hopper": 8.0}
    assert t(earlier) == t({**mean, "gemm_cta_bandwidth.blackwell": 8.0})
    assert t(earlier) < 0.95 * t(mean)
    # Ampere is not Blackwell's predecessor: no change
    assert t({**mean, "gemm_cta_bandwidth.ampere": 8.0}) == pytest.approx(t(mean), rel=1e-12)


def test_sm120_takes_adas_kernel_constants_then_amperes_never_the_datacenter_blackwells() -> None:
    """The RTX Blackwell GPUs (SM120) run synchronous warp-level MMA kernels, Ada's design:
    with no value of their own they take Ada's, then (Ada unmeasured) Ampere's, before the
    mean; a value fitted on SM100 or Hopper never reaches them."""
    c = Constants({"attn.xqa.decode_tile_s": 5e-6, "attn.xqa.decode_tile_s.ada": 4e-6,
                   "attn.xqa.decode_tile_s.blackwell": 1e-6,
                   "attn.xqa.decode_tile_s.hopper": 2e-6,
                   "attn.flash2.tile_s": 3e-6, "attn.flash2.tile_s.ampere": 6e-6,
                   "gemm_cta_bandwidth": 4.0, "gemm_cta_bandwidth.blackwell": 9.0})
    assert c["attn.xqa.decode_tile_s.blackwell-consumer"] == 4e-6
    assert c["attn.xqa.decode_tile_s.blackwell-consumer.trtllm"] == 4e-6
    assert c["attn.flash2.tile_s.blackwell-consumer"] == 6e-6  # Ada has none: Ampere's
    assert c["gemm_cta_bandwidth.blackwell-consumer"] == 4.0  # SM100's is not its design
    assert "predecessor" in c.provenance("attn.xqa.decode_tile_s.blackwell-consumer")
    # Ada does not take SM120's (not backwards)
    back = Constants({"attn.xqa.decode_tile_s": 5e-6,
                      "attn.xqa.decode_tile_s.blackwell-consumer": 1e-6})
    assert back["attn.xqa.decode_tile_s.ada"] == 5e-6


def test_an_rtx_blackwell_prediction_follows_adas_fit_not_the_other_architectures() -> None:
    """TensorRT-LLM's XQA decode on an RTX 5090 (SM120) moves with Ada's fitted tile time
    and not with Hopper's or datacenter Blackwell's."""
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=512, head_dim=128,
                      dtype="bf16", impl="xqa")
    ctx = RunContext(launch="graph", engine="trtllm")

    def t(table: dict[str, float]) -> float:
        return float(predict(op, "rtx-5090", context=ctx,
                             constants=Constants(table)).latency_s)

    base = {"attn.xqa.decode_tile_s": 4e-6}
    ada = {**base, "attn.xqa.decode_tile_s.ada": 12e-6}
    assert t(ada) > 1.2 * t(base)
    for other in ("hopper", "blackwell"):
        assert t({**base, f"attn.xqa.decode_tile_s.{other}": 12e-6}) == \
            pytest.approx(t(base), rel=1e-12), other
    # Ampere's only through Ada: with Ada measured, Ampere's value does not matter
    assert t({**ada, "attn.xqa.decode_tile_s.ampere": 1e-6}) == pytest.approx(t(ada), rel=1e-12)
