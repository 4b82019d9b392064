"""Predecessor architectures (timing.constants.ARCH_PREDECESSOR): a kernel-design constant
with no value fitted for its own architecture takes the value fitted for its predecessor of
the same SM design (Ada ← Ampere, Blackwell ← Hopper) before the mean over every
architecture; never the other way round; device and host constants keep the mean; fits run
without the lookup."""

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
    assert dict(ARCH_PREDECESSOR) == {"ada": "ampere", "blackwell": "hopper"}
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
