"""Kin of kernel families (timing.constants.KIN, AttentionFamily.kin): a family with no
fitted constant at all takes its kin's, case for case, before its class's mean; fits run
without that lookup and return tables with it on."""

from __future__ import annotations

import dataclasses

import pytest

import perfmodel as pm
from perfmodel.calibrate.constants import Stage, fit_public, pool_parents
from perfmodel.measurements import Measurement, MeasurementSet
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import KIN, PARAMS, Constants
from perfmodel.timing.kernels import _ATTN_CONSTANTS, ATTENTION_FAMILIES, attention_class
from perfmodel.validation import prepare

GRAPH = RunContext(launch="graph")
EFF = "attn.{}.efficiency"


def test_declared_kin_are_families_of_the_same_class() -> None:
    """Kin of the same class stand in for anything their kin_excludes allow; a kin of the
    other class (trtllm-gen's XQA) only for the decode tile time, since rates, bandwidth
    and the pipeline's overlap differ between persistent and resident kernels."""
    assert KIN  # FlashInfer's FA2 templates, FA4, the paged entry point, FlashInfer SM100
    for fam in ATTENTION_FAMILIES.values():
        for other in fam.kin:
            assert other in ATTENTION_FAMILIES
            assert other != fam.name
            if attention_class(ATTENTION_FAMILIES[other]) != attention_class(fam):
                shared = set(_ATTN_CONSTANTS) - set(fam.kin_excludes)
                assert shared == {"decode_tile_s"}, (fam.name, other, shared)


def test_trtllm_gen_decode_tiles_are_xqas_until_measured() -> None:
    """TensorRT-LLM's Blackwell generation kernels replace XQA: an unmeasured trtllm-gen
    takes XQA's decode tile time, engine for engine, and nothing else of XQA's."""
    c = Constants({"attn.xqa.decode_tile_s": 4e-6, "attn.xqa.decode_tile_s.hopper": 3e-6,
                   EFF.format("xqa"): 0.5, "attn.xqa.cta_bandwidth": 0.6,
                   "attn.persistent.tile_s": 7e-6, EFF.format("persistent"): 1.2,
                   "attn.persistent.cta_bandwidth": 1.9})
    gen = "attn.trtllm-gen."
    # on Blackwell XQA's Hopper value (its predecessor), on Ada (whose predecessor has
    # no value) its mean
    assert c[gen + "decode_tile_s.blackwell.vllm"] == 3e-6
    assert c[gen + "decode_tile_s.ada.vllm"] == 4e-6
    assert c[gen + "decode_tile_s.hopper"] == 3e-6
    assert "kin kernel family" in c.provenance(gen + "decode_tile_s.blackwell")
    assert c[gen + "efficiency.blackwell.trtllm"] == 1.2  # the persistent class's
    assert c[gen + "cta_bandwidth.blackwell"] == 1.9
    assert c[gen + "tile_s.blackwell"] == 7e-6
    # through a prediction: a B200 decode call of TensorRT-LLM moves with XQA's decode
    # tile time and not with XQA's rate
    op = pm.Attention(batch=64, heads=32, kv_heads=8, seq_q=1, seq_kv=2048, head_dim=128,
                      phase="decode", impl="trtllm-gen")
    ctx = RunContext(launch="graph", engine="trtllm")

    def t(table: dict[str, float]) -> float:
        return float(predict(op, "b200", context=ctx, constants=Constants(table)).latency_s)

    base = {"attn.xqa.decode_tile_s": 4e-6, EFF.format("xqa"): 0.5}
    assert t({**base, "attn.xqa.decode_tile_s": 12e-6}) > t(base) + 7e-6
    assert t({**base, EFF.format("xqa"): 0.05}) == pytest.approx(t(base), rel=1e-12)


def test_an_unmeasured_family_takes_its_kins_values_case_for_case() -> None:
    table = {EFF.format("flash2") + ".ampere.sglang": 0.9,
             EFF.format("flash2") + ".ampere": 0.8, EFF.format("flash2"): 0.7,
             EFF.format("resident"): 0.3}
    c = Constants(table)
    fi = EFF.format("flashinfer")
    assert c[fi + ".ampere.sglang"] == 0.9
    assert c[fi + ".ampere.vllm"] == 0.8
    # FA2's own chain: on Ada its value on Ampere (its predecessor), on Hopper (no
    # predecessor) its family value
    assert c[fi + ".ada.sglang"] == 0.9
    assert c[fi + ".hopper.sglang"] == 0.7
    assert "kin kernel family" in c.provenance(fi + ".ampere.sglang")
    # a family without declared kin keeps its class's value
    assert c[EFF.format("xqa")] == 0.3
    # the lookup off (as during a fit): the class's value
    assert dataclasses.replace(c, kin=False)[fi + ".ampere.sglang"] == 0.3
    # once the family has any fitted value, its own chain applies, not its kin's
    own = Constants({**table, "attn.flashinfer.tile_s.ada": 3e-6})
    assert own[fi + ".ampere.sglang"] == 0.3
    # a kin without fitted values is no help: the class's value
    assert Constants({EFF.format("resident"): 0.3})[fi + ".ampere.sglang"] == 0.3


def test_kin_is_what_an_unmeasured_family_predicts_with() -> None:
    op = pm.Attention(batch=4, heads=32, kv_heads=8, seq_q=512, seq_kv=512, head_dim=128,
                      causal=True, impl="flashinfer")

    def t(table: dict[str, float]) -> float:
        return float(predict(op, "l40s", context=GRAPH, constants=Constants(table)).latency_s)

    base = {EFF.format("resident"): 0.5}
    slow_kin = {**base, EFF.format("flash2"): 0.25}
    assert t(slow_kin) > 1.3 * t(base)
    measured = {**slow_kin, "attn.flashinfer.tile_s": 1e-6}  # FlashInfer measured now
    assert t(measured) < t(slow_kin)


def _rows(kernel: str, truth: dict[str, float]) -> list[Measurement]:
    """vLLM prefill calls on A100 recorded as ``kernel``, timed as validation predicts
    them with the constants ``truth``."""
    rows = [Measurement(row=i, op="attention", dtype="bf16", measured_s=1.0,
                        spec="a100-80gb-sxm", source="synthetic",
                        timing="aic_cuda_graph_replay_mean", phase="prefill", causal=True,
                        batch=b, heads=32, kv_heads=8, seq_q=s, seq_kv=s, head_dim=128,
                        engine="vllm", kernel=kernel)
            for i, (b, s) in enumerate(((1, 1024), (2, 2048), (4, 4096), (1, 8192)))]
    pred = prepare(MeasurementSet(tuple(rows))).predict(Constants(truth))
    return [dataclasses.replace(r, measured_s=float(t)) for r, t in zip(rows, pred,
                                                                          strict=True)]


def test_public_fit_returns_the_kin_lookup_on() -> None:
    name = EFF.format("flash2") + ".ampere.vllm"
    assert name in PARAMS
    stage = (Stage("fa2", lambda r: True, (EFF.format("flash2") + "*",)),)
    prep = prepare(MeasurementSet(tuple(_rows("vllm_flash_attn", {name: 0.4}))))
    fitted = fit_public(prep, stages=stage, cycles=2)
    assert fitted.kin
    assert fitted[name] == pytest.approx(0.4, rel=0.05)
    # FlashInfer had no rows: it predicts with FA2's fitted value, case for case
    assert fitted[EFF.format("flashinfer") + ".ampere.vllm"] == pytest.approx(fitted[name])
    assert "kin kernel family" in fitted.provenance(EFF.format("flashinfer") + ".ampere.vllm")


def test_kin_does_not_stand_in_where_the_designs_differ() -> None:
    """FlashInfer takes FA2's rates and tile times, not its per-CTA bandwidth (FlashInfer's
    paged-KV pipeline is its own) nor its decode tile time (its decode kernels are its
    own): those follow FlashInfer's own parents, the resident class's bandwidth and
    FlashInfer's prefill tile time (FA2's pooled one, by kin)."""
    c = Constants({"attn.flash2.cta_bandwidth.ampere": 0.7, "attn.resident.cta_bandwidth": 1.6,
                   "attn.flash2.tile_s.ampere": 3e-6, "attn.flash2.tile_s": 4e-6,
                   "attn.flash2.decode_tile_s.ampere": 9e-6,
                   EFF.format("flash2") + ".ampere": 0.8})
    assert c[EFF.format("flashinfer") + ".ampere"] == 0.8
    assert c["attn.flashinfer.tile_s.ampere"] == 3e-6
    assert c["attn.flashinfer.cta_bandwidth.ampere"] == 1.6
    assert c["attn.flashinfer.decode_tile_s.ampere"] == 4e-6
    assert c["attn.flashinfer.decode_tile_s.ampere.vllm"] == 4e-6
    assert "kin" not in c.provenance("attn.flashinfer.cta_bandwidth.ampere")
    # the paged entry point is FA2's own kernel: it takes all of FA2's
    assert c["attn.paged.cta_bandwidth.ampere"] == 0.7
    assert c["attn.paged.decode_tile_s.ampere"] == 9e-6


def test_triton_does_not_set_its_classs_values() -> None:
    """Triton's fitted constants (its compiler's fp8 conversion: 10-33 operations per
    element on AIConfigurator's rows, against ~2 for the CUDA kernels) describe Triton
    only: pooling leaves the resident class to the hand-written kernels, so an
    unmeasured CUDA kernel never inherits Triton's conversion cost."""
    fitted = {"attn.triton.dequant_ops.hopper": 30.0, "attn.triton.dequant_ops": 30.0,
              "attn.fmha-v2.dequant_ops.ada": 2.0, "attn.fmha-v2.dequant_ops": 2.0}
    pooled = pool_parents(Constants(fitted), "test")
    assert pooled["attn.resident.dequant_ops"] == pytest.approx(2.0)
    assert pooled["attn.triton.dequant_ops"] == pytest.approx(30.0)  # its own stands
    # with only Triton measured, the class keeps its prior
    only = pool_parents(Constants({"attn.triton.dequant_ops": 30.0}), "test")
    assert only["attn.resident.dequant_ops"] == PARAMS["attn.resident.dequant_ops"].default
    # the other resident families do pool (the geometric mean of their values)
    both = pool_parents(Constants({**fitted, "attn.flashinfer.dequant_ops": 8.0}), "test")
    assert both["attn.resident.dequant_ops"] == pytest.approx(4.0)


def test_an_unmeasured_vendor_library_fp8_gemm_takes_cublas_rate() -> None:
    """``auto`` is the vendor library: its per-tensor fp8 GEMM, never measured as such,
    takes TensorRT-LLM's cuBLASLt rate architecture by architecture (and on an AMD GPU,
    where vLLM's fp8 calls run hipBLASLt, cuBLASLt's mean), not the mean of the engines'
    own quantized kernels; the fits see no kin."""
    c = Constants({"gemm.cublas.per-tensor.efficiency": 0.8,
                   "gemm.cublas.per-tensor.efficiency.hopper": 0.95,
                   "gemm.cutlass.per-tensor.efficiency": 0.5,
                   "gemm.quantized.efficiency": 0.6})
    assert c["gemm.auto.per-tensor.efficiency.hopper"] == 0.95
    assert c["gemm.auto.per-tensor.efficiency.blackwell"] == 0.95  # Hopper's: its predecessor
    assert c["gemm.auto.per-tensor.efficiency.ada"] == 0.8
    assert c["gemm.auto.per-tensor.efficiency"] == 0.8
    assert "cublas" in c.provenance("gemm.auto.per-tensor.efficiency.hopper")
    fitting = dataclasses.replace(c, kin=False)
    assert fitting["gemm.auto.per-tensor.efficiency.hopper"] == 0.6
    # other schemes of the vendor library keep the class's value
    assert c["gemm.auto.block.efficiency.hopper"] == 0.6

    def t(impl: str, gpu: str, consts: Constants) -> float:
        op = pm.Gemm(m=4096, n=4096, k=4096, dtype="fp8", quant="per-tensor",
                     out_dtype="bf16", impl=impl)
        return float(predict(op, gpu, context=GRAPH, constants=consts).latency_s)

    assert t("auto", "h100-sxm", c) == pytest.approx(t("cublas", "h100-sxm", c))
    assert t("auto", "mi300x", c) < t("auto", "mi300x", fitting)
