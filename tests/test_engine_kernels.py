"""Engine kernels: quantized GEMMs, attention kernel families, engine calls and run contexts.

Byte and FLOP counts are derived by hand here and compared with what the prediction path
reports (``Prediction.bytes_min``, ``stages``), never with a copy of the formula.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.engines import (
    STEP_OVERHEAD_S,
    attention_kernel,
    attention_kernel_for_label,
    engine_runs_on,
    gemm_kernel,
    gemm_kernel_for_label,
)
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import Constants
from perfmodel.timing.core import make_env
from perfmodel.timing.engine_costs import call_fixed_s, call_name, call_row_s, row_name
from perfmodel.timing.kernels import attention_family, tile_efficiency
from perfmodel.timing.knobs import knobs_for

PRIORS = Constants()


# ------------------------------------------------------------------------- GEMM bytes
@pytest.mark.parametrize(("quant", "dtype", "scales"), [
    # per-channel: one fp32 scale per output channel (n) and per token (m)
    ("per-channel", "fp8", lambda m, n, k: 4 * (m + n)),
    # block: activations 1×128 groups, weights 128×128 blocks, fp32 scales
    ("block", "fp8", lambda m, n, k: 4 * (m * -(-k // 128) + -(-n // 128) * -(-k // 128))),
    # nvfp4: one fp8 scale per 16 elements of A and of B
    ("nvfp4", "fp4", lambda m, n, k: (m * k + n * k) / 16),
    ("per-tensor", "fp8", lambda m, n, k: 0),
])
def test_quantized_gemm_bytes_by_hand(quant: str, dtype: str, scales: object) -> None:
    m, n, k = 300, 1000, 4096
    s_in = 0.5 if dtype == "fp4" else 1.0
    op = pm.Gemm(m=m, n=n, k=k, dtype=dtype, out_dtype="bf16", quant=quant, shared_b=True)
    expected = s_in * (m * k + n * k) + 2 * m * n + scales(m, n, k)  # type: ignore[operator]
    p = predict(op, "b200")
    assert float(p.bytes_min) == pytest.approx(expected)
    assert float(p.flops) == 2 * m * n * k


def test_activation_quantize_is_a_stage_with_its_own_bytes() -> None:
    m, n, k = 512, 4096, 4096
    op = pm.Gemm(m=m, n=n, k=k, dtype="fp8", out_dtype="bf16", quant="block",
                 quantize_input=True, shared_b=True)
    p = predict(op, "h100-sxm")
    names = [name for name, _ in p.stages]
    assert names == ["quantize", "gemm"]
    quant = dict(p.stages)["quantize"]
    # reads bf16 A (2 B), writes fp8 A (1 B) and one fp32 scale per 128 elements
    assert float(quant.bytes) == pytest.approx(m * k * (2 + 1 + 4 / 128))
    assert float(p.latency_s) == pytest.approx(sum(float(s.latency_s) for _, s in p.stages))
    assert float(p.details["kernels"]) == 2


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_engine_quantized_gemms_do_not_split_k(gpu: str) -> None:
    """A decode-shaped GEMM with few output tiles: cuBLAS splits K over idle SMs, the
    engines' quantized kernels (one CTA per output tile) do not, and so stream the weights
    through fewer SMs: slower. The unsplit call's memory time is at least its weight bytes
    at the bandwidth its CTAs can pull (CTAs × per-CTA rate, f·smem_per_SM / memory
    latency with the prior in-flight share f = 0.5)."""
    hw = pm.load_hardware(gpu)
    shape: dict[str, Any] = {"m": 16, "n": 768, "k": 65536, "dtype": "fp8", "out_dtype": "bf16"}
    split = predict(pm.Gemm(**shape, quant="per-tensor", impl="cublas"), hw, constants=PRIORS)
    assert float(split.details["split_k"]) > 1
    for impl, quant in (("deepgemm", "block"), ("cutlass", "per-tensor")):
        one = predict(pm.Gemm(**shape, quant=quant, impl=impl), hw, constants=PRIORS)
        gemm = dict(one.stages)["gemm"] if one.stages else one  # without the quantize stage
        assert float(gemm.details["split_k"]) == 1
        tiles = 768 / float(gemm.details["tile_n"]) * math.ceil(16 / float(
            gemm.details["tile_m"]))
        k = knobs_for(hw, "gemm", "fp8")
        weights = 768 * 65536  # one byte per fp8 element
        per_cta = 0.5 * k.smem_per_unit / k.memory_latency_s
        assert float(gemm.memory_s) >= weights / (tiles * per_cta)
        assert float(gemm.latency_s) > float(split.latency_s)


def test_quantized_gemm_rates_are_refined_per_architecture() -> None:
    """gemm.<impl>.<scheme>.efficiency.<arch> sets one architecture's rate; another
    architecture keeps the family's value, which an unmeasured architecture inherits."""
    op = pm.Gemm(m=8192, n=8192, k=8192, dtype="fp8", out_dtype="bf16", quant="block",
                 impl="cutlass")
    slow = PRIORS.with_values({"gemm.cutlass.block.efficiency.hopper": 0.5}, "test")
    family = PRIORS.with_values({"gemm.cutlass.block.efficiency": 0.5}, "test")
    h100 = [float(predict(op, "h100-sxm", constants=c).compute_s)
            for c in (PRIORS, slow, family)]
    l40s = [float(predict(op, "l40s", constants=c).compute_s) for c in (PRIORS, slow, family)]
    assert h100[1] == pytest.approx(2.0 * h100[0], rel=1e-9)
    assert h100[2] == pytest.approx(2.0 * h100[0], rel=1e-9)
    assert l40s[1] == l40s[0]
    assert l40s[2] == pytest.approx(2.0 * l40s[0], rel=1e-9)


def test_few_tiles_run_small_tiles_without_their_bandwidth_penalty() -> None:
    """A tile's efficiency e < 1 is the L2 operand bandwidth a small tile lacks when every
    SM draws on it; with C of the U slots busy its compute time is scaled by max(e, C/U).
    One output tile of an unsplit family runs at its SM's full rate, 2·t_m·t_n·k FLOPs
    (the padded tile) at R/U; a full wave of small tiles keeps the penalty: W·2·t_m·t_n·k
    at e·R/U."""
    hw = pm.load_hardware("h100-sxm")
    k = knobs_for(hw, "gemm", "fp8")
    eff = {(tm, tn): e for tm, tn, e in k.family.tensor_tiles}
    per_sm = k.rate * float(PRIORS["gemm.cutlass.per-tensor.efficiency"]) / k.units

    def gemm(m: int, n: int, kk: int) -> Any:
        p = predict(pm.Gemm(m=m, n=n, k=kk, dtype="fp8", out_dtype="bf16",
                            quant="per-tensor", impl="cutlass"), hw, constants=PRIORS)
        return dict(p.stages)["gemm"] if p.stages else p

    one = gemm(64, 64, 1 << 20)
    tm, tn = float(one.details["tile_m"]), float(one.details["tile_n"])
    assert float(one.compute_s) == pytest.approx(2.0 * tm * tn * (1 << 20) / per_sm,
                                                 rel=1e-9)
    full = gemm(64, 64 * k.units * int(k.family.tiles_per_unit), 4096)
    tm, tn = float(full.details["tile_m"]), float(full.details["tile_n"])
    assert eff[(tm, tn)] < 1.0
    expect = float(full.details["waves"]) * 2.0 * tm * tn * 4096 / (eff[(tm, tn)] * per_sm)
    assert float(full.compute_s) == pytest.approx(expect, rel=1e-9)
    # cuBLAS, which splits K instead, keeps the penalty even for a few tiles (k = 128
    # leaves it no split): each tile at its efficiency's share of the SM's rate
    lib = predict(pm.Gemm(m=64, n=64, k=128, dtype="fp8", out_dtype="bf16",
                          quant="per-tensor", impl="cublas"), hw, constants=PRIORS)
    lib = dict(lib.stages)["gemm"] if lib.stages else lib
    assert float(lib.details["split_k"]) == 1
    tm, tn = float(lib.details["tile_m"]), float(lib.details["tile_n"])
    rate = k.rate * float(PRIORS["gemm.cublas.per-tensor.efficiency.hopper"]) / k.units
    assert float(lib.compute_s) == pytest.approx(
        2.0 * tm * tn * 128 / (eff[(tm, tn)] * rate), rel=1e-9)


def test_quant_scheme_must_match_dtype() -> None:
    with pytest.raises(PerfmodelError, match="nvfp4"):
        pm.Gemm(m=1, n=1, k=1, dtype="fp8", quant="nvfp4")
    with pytest.raises(PerfmodelError, match="quant"):
        pm.Gemm(m=1, n=1, k=1, dtype="bf16", quant="block")
    with pytest.raises(PerfmodelError, match="quantize_input"):
        pm.Gemm(m=1, n=1, k=1, dtype="bf16", quantize_input=True)


# ------------------------------------------------------------------- attention prologue
def test_kv_write_and_rope_prologue_bytes_by_hand() -> None:
    b, s, hq, hkv, d = 2, 1024, 32, 8, 128
    op = pm.Attention(batch=b, heads=hq, kv_heads=hkv, seq_q=s, head_dim=d, causal=True,
                      dtype="bf16", kv_dtype="fp8", impl="fmha-v2", kv_write=True, rope=True)
    p = predict(op, "h100-sxm")
    stages = dict(p.stages)
    assert list(stages) == ["rope_kv_write", "attention"]
    kv_elems, q_elems = b * s * hkv * 2 * d, b * s * hq * d
    # reads K, V and Q in bf16; writes K, V into the fp8 cache and Q back in bf16
    expected = 2 * (kv_elems + q_elems) + 1 * kv_elems + 2 * q_elems
    assert float(stages["rope_kv_write"].bytes) == pytest.approx(expected)
    # the call's FLOPs: the attention's (exact causal pairs) + ~6 vector ops per element
    # the pre-processing kernel touches
    pairs = s * (s + 1) / 2
    attention = 2 * b * hq * pairs * (d + d)
    assert float(p.flops) == pytest.approx(attention + 6 * (kv_elems + q_elems))


def test_decode_prologue_writes_one_token_per_sequence() -> None:
    op = pm.Attention(batch=16, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                      impl="xqa", kv_write=True)
    stage = dict(predict(op, "a100-80gb-sxm").stages)["kv_write"]
    assert float(stage.bytes) == pytest.approx(2 * 2 * 16 * 8 * 2 * 128)


# ------------------------------------------------------------------- kernel families
def test_family_names_and_architecture_checks() -> None:
    for impl in ("fmha-v2", "xqa", "flashinfer", "triton", "flash2"):
        predict(pm.Attention(batch=1, heads=8, seq_q=512, impl=impl), "a100-80gb-sxm")
    for blackwell_only in ("trtllm-gen", "flashinfer-sm100"):
        with pytest.raises(PerfmodelError, match=blackwell_only):
            predict(pm.Attention(batch=1, heads=8, seq_q=512, impl=blackwell_only),
                    "h100-sxm")
    with pytest.raises(PerfmodelError, match="Hopper"):
        predict(pm.Attention(batch=1, heads=8, seq_q=512, impl="flash4"), "a100-80gb-sxm")


def test_persistent_kernels_are_not_halved_when_ctas_match_the_sms() -> None:
    """One CTA per SM saturates a warp-specialised (FA3-class) kernel: with as many query
    tiles as SMs it is not charged the half-empty second slot an FA2-class kernel is."""
    hw = pm.load_hardware("h100-sxm")
    tiles = hw.compute.units  # 132 query tiles of 128 rows, one head each
    fa3, fa2 = (predict(pm.Attention(batch=tiles, heads=1, seq_q=128, seq_kv=8192,
                                     head_dim=128, dtype="bf16", impl=impl), hw,
                        constants=PRIORS) for impl in ("flash3", "flash2"))
    assert float(fa3.compute_s) < 0.75 * float(fa2.compute_s)


@pytest.mark.parametrize("impl", ["flash3", "flash2"])
def test_tile_overlap_hides_the_fixed_time_of_later_tiles_in_persistent_kernels(
        impl: str) -> None:
    """A persistent kernel's SM pays tile_s whole for its first tile and (1 - h) of it for
    each later one: 10 waves of tiny decode tiles cost (1 + 9·(1 - h))·tile_s, h the
    family's decode_tile_overlap. Resident kernels (flash2) pay every wave whole whatever
    h is."""
    hw = pm.load_hardware("h100-sxm")
    tile_s, h = 4e-6, 0.75
    base = PRIORS.with_values({f"attn.{impl}.decode_tile_s": tile_s,
                               f"attn.{impl}.decode_tile_overlap": 0.0}, "test")
    hidden = base.with_values({f"attn.{impl}.decode_tile_overlap": h}, "test")
    # one query token, 4 keys, one head: one tile per sequence (no split: 4 keys < 64),
    # 10 tiles per SM for a persistent kernel (132 slots), 5 or 10 for a resident one
    op = pm.Attention(batch=10 * hw.compute.units, heads=1, seq_q=1, seq_kv=4, head_dim=128,
                      impl=impl)
    p0, p1 = (predict(op, hw, constants=c) for c in (base, hidden))
    assert float(p0.details["splits"]) == 1
    saved = float(p0.overhead_s) - float(p1.overhead_s)
    if impl == "flash3":
        assert float(p0.details["ctas"]) == 10 * hw.compute.units
        assert saved == pytest.approx(9 * h * tile_s, rel=1e-9)
    else:
        assert saved == 0.0


def _unhidden_tile(op: pm.Attention, hw: pm.HardwareSpec, what: str, tile_s: float) -> Any:
    """``op`` predicted on ``hw`` with its family's ``what`` (tile_s, decode_tile_s) set
    to ``tile_s`` and none of it hidden (tile_overlap and decode_tile_overlap 0), from the
    priors."""
    consts = PRIORS.with_values({f"attn.{op.impl}.{what}": tile_s,
                                 f"attn.{op.impl}.tile_overlap": 0.0,
                                 f"attn.{op.impl}.decode_tile_overlap": 0.0}, "test")
    return predict(op, hw, constants=consts)


@pytest.mark.parametrize("impl", ["flash3", "trtllm-gen"])
def test_decode_and_context_kernels_hide_their_own_share_of_later_tiles(impl: str) -> None:
    """A family's decode kernels are kernels of their own: their later tiles hide
    decode_tile_overlap of decode_tile_s, its context kernels tile_overlap of tile_s, and
    neither share moves the other phase. Decode: 10 one-token tiles per SM of a B200 (148
    slots), (1 + 9·(1 − h))·t; prefill: one 128-row query tile per sequence, 10 per SM."""
    hw = pm.load_hardware("b200")
    t = 4e-6
    base = PRIORS.with_values({f"attn.{impl}.decode_tile_s": t, f"attn.{impl}.tile_s": t,
                               f"attn.{impl}.tile_overlap": 0.0,
                               f"attn.{impl}.decode_tile_overlap": 0.0}, "test")
    units = 10 * hw.compute.units
    decode = pm.Attention(batch=units, heads=1, seq_q=1, seq_kv=4, head_dim=128, impl=impl)
    prefill = pm.Attention(batch=units, heads=1, seq_q=128, seq_kv=128, head_dim=128,
                           impl=impl)

    def overhead(op: pm.Attention, **shares: float) -> float:
        consts = base.with_values({f"attn.{impl}.{k}": v for k, v in shares.items()}, "t")
        return float(predict(op, hw, constants=consts).overhead_s)

    # D = D_v = 128: the tile-time factor is 1 whatever attn.tile_dim_share is; a decode
    # tile of 1 row costs 1 − u + u/8 of decode_tile_s (attn.decode_row_share u, prior 0)
    d0 = overhead(decode)
    assert d0 - overhead(decode, decode_tile_overlap=0.5) == pytest.approx(9 * 0.5 * t,
                                                                           rel=1e-9)
    assert overhead(decode, tile_overlap=0.5) == d0
    p0 = overhead(prefill)
    assert overhead(prefill, decode_tile_overlap=0.5) == p0
    assert overhead(prefill, tile_overlap=0.5) < p0


@pytest.mark.parametrize("impl", ["flash3", "flash2"])
def test_persistent_kernels_run_later_tiles_under_the_memory_stream(impl: str) -> None:
    """While a persistent kernel streams K/V, its producer warps load the next tile as the
    consumers finish the last one: once memory time exceeds the later tiles' serial parts,
    only each SM's first tile adds its tile time. Resident kernels (flash2) pay every wave.
    10 tiles per SM of 16k keys each: 1,320 × 16,384 × 128 × 2 (K, V) × 2 bytes = 11 GB,
    ~3.5 ms of memory against 9 × 4 µs of later tiles."""
    hw = pm.load_hardware("h100-sxm")
    op = pm.Attention(batch=10 * hw.compute.units, heads=1, seq_q=1, seq_kv=16384,
                      head_dim=128, impl=impl)
    p = _unhidden_tile(op, hw, "decode_tile_s", 2e-6)
    lo, hi = float(p.overhead_s), float(_unhidden_tile(op, hw, "decode_tile_s", 4e-6).overhead_s)
    assert float(p.details["splits"]) == 1
    assert float(p.memory_s) > 50 * 9 * 4e-6
    # flash2 at D = 128: Q tile 128 × 128 plus two 64-key K/V tiles of 2 × 128 columns,
    # (128·128 + 2·64·256) × 2 B = 96 KiB, two CTAs in 228 KiB: 1,320 / 264 = 5 waves
    waves = 1 if impl == "flash3" else 5
    assert hi - lo == pytest.approx(waves * 2e-6, rel=1e-9)


def test_persistent_kernels_add_later_tiles_to_the_matrix_work() -> None:
    """The serial part of a persistent kernel's later tiles is consumer-warp work, as the
    matrix work is: where compute bounds the call it adds in full. Prefill, 8 sequences of
    8,192 tokens, 16 heads, D = 128 (FA3 tile 128 × 128): 8 × 16 × 64 = 8,192 query tiles,
    ⌈8,192 / 132⌉ = 63 waves on H100, 63 tile times."""
    hw = pm.load_hardware("h100-sxm")
    op = pm.Attention(batch=8, heads=16, seq_q=8192, seq_kv=8192, head_dim=128,
                      impl="flash3", phase="prefill")
    p = _unhidden_tile(op, hw, "tile_s", 2e-6)
    lo, hi = float(p.overhead_s), float(_unhidden_tile(op, hw, "tile_s", 4e-6).overhead_s)
    assert float(p.details["ctas"]) == 8 * 16 * 64
    assert float(p.compute_s) > 5 * float(p.memory_s)
    assert hi - lo == pytest.approx(63 * 2e-6, rel=1e-9)


def _decode_wave_tile(hw: pm.HardwareSpec, head_dim: int, group: int,
                      shares: dict[str, float]) -> float:
    """Overhead added to one wave of one-token, 4-key flash3 decode tiles on ``hw`` (as
    many sequences as SMs, one KV head of ``group`` query heads packed into one tile a
    sequence) when its decode tile time goes from 1 to 3 µs, with ``shares`` set."""
    def overhead(tile_s: float) -> float:
        consts = PRIORS.with_values({"attn.flash3.decode_tile_s": tile_s, **shares}, "test")
        op = pm.Attention(batch=hw.compute.units, heads=group, kv_heads=1, seq_q=1,
                          seq_kv=4, head_dim=head_dim, impl="flash3")
        p = predict(op, hw, constants=consts)
        assert float(p.details["ctas"]) == hw.compute.units
        return float(p.overhead_s)

    return overhead(3e-6) - overhead(1e-6)


def test_tile_time_grows_with_the_head_dims_by_its_dim_share() -> None:
    """A tile's serial time has a part proportional to D + D_v (Q load, output rescale
    and store): with share w, t_tile = tile_s·(1 − w + w·(D + D_v)/256). One wave of
    one-token, 4-key decode tiles (132 sequences, one head) on H100 at D = 64 and 256."""
    hw = pm.load_hardware("h100-sxm")
    w = 0.4
    for d in (64, 256):
        added = _decode_wave_tile(hw, d, 1, {"attn.tile_dim_share": w})
        assert added == pytest.approx(2e-6 * (1 - w + w * 2 * d / 256), rel=1e-9)


def test_decode_tile_time_grows_with_its_rows_by_its_row_share() -> None:
    """A decode tile's serial time has a part proportional to the query rows it holds
    (their Q load, output rescale and store): with share u, t = decode_tile_s·(1 − u +
    u·r/8), r = the G query heads packed into the tile. One wave of one-token, 4-key
    flash3 decode tiles on H100 (as many sequences as SMs, one KV head of G query heads,
    D = 128: no head-dim factor), the decode tile time raised from 1 to 3 µs."""
    hw = pm.load_hardware("h100-sxm")
    u = 0.5
    for group in (1, 8, 16):
        added = _decode_wave_tile(hw, 128, group, {"attn.decode_row_share": u})
        assert added == pytest.approx(2e-6 * (1 - u + u * group / 8), rel=1e-9)


@pytest.mark.parametrize("impl", ["trtllm-gen", "triton"])
def test_context_kernels_do_not_pack_heads_for_one_token_prompts(impl: str) -> None:
    """trtllm-gen and SGLang's Triton kernels have context kernels of their own: a prefill
    call of one-token prompts runs one CTA per (sequence, query head), 256 × 64 = 16,384,
    while the decode call of the same shape packs the 16 query heads of each of the 4 KV
    heads into one tile: 256 × 4 = 1,024 CTAs (no split: they fill the 148 SMs)."""
    def op(phase: str, kernel: str = impl) -> pm.Attention:
        return pm.Attention(batch=256, heads=64, kv_heads=4, seq_q=1, seq_kv=1,
                            head_dim=128, causal=True, impl=kernel, phase=phase)

    prefill, decode, auto = (predict(op(phase), "b200")
                             for phase in ("prefill", "decode", "auto"))
    assert float(prefill.details["ctas"]) == 256 * 64
    assert float(decode.details["ctas"]) == 256 * 4
    assert float(auto.details["ctas"]) == 256 * 4  # one query token without a phase: decode
    # FlashAttention-2's entry points pack one-token rows in either phase
    fa2 = predict(op("prefill", "flash2"), "a100-80gb-sxm")
    assert float(fa2.details["ctas"]) < 256 * 64


def test_triton_tiles_follow_head_dim_and_architecture() -> None:
    """SGLang's Triton kernels shrink BLOCK_M for large head dims: the same work at head
    dim 512 gets a 32-row tile on Hopper and runs slower per FLOP than at 128 (eight
    sequences: many waves of tiles at both head dims, so the rate, not a one-wave call's
    longest tile, sets the time)."""
    small, large = (predict(pm.Attention(batch=8, heads=8, seq_q=4096, causal=True,
                                         dtype="bf16", impl="triton", head_dim=d),
                            "h100-sxm", constants=PRIORS) for d in (128, 512))
    assert float(large.details["q_tile"]) == 32
    assert float(small.details["q_tile"]) == 128
    rate = float(small.flops) / float(small.compute_s)
    assert float(large.flops) / float(large.compute_s) < 0.8 * rate


@pytest.mark.parametrize(("gpu", "share"), [("a100-80gb-sxm", 1.0), ("l40s", 1.0),
                                            ("h100-sxm", 0.5), ("b200", 0.25)])
@pytest.mark.parametrize("impl", ["flash2", "triton"])
def test_ampere_style_kernels_run_at_the_synchronous_mma_share(gpu: str, share: float,
                                                               impl: str) -> None:
    """Kernels written for Ampere issue mma.sync, which on Hopper runs at half the dense
    peak (FA2: 73 % of the A100, 35 % of the H100) and on Blackwell at a quarter. Their
    matrix time, from the priors, is 1/share that of the same kernel with the share
    removed: the FA3-class kernel's on the same GPU shows what the rate would be."""
    hw = pm.load_hardware(gpu)
    op = pm.Attention(batch=4, heads=32, seq_q=8192, head_dim=128, dtype="bf16",
                      causal=False, impl=impl)
    p = predict(op, hw, constants=PRIORS)
    # 2·B·H·S²·(D + D) FLOPs at the spec's achievable rate × the spec's attention share ×
    # the tile's efficiency (the family's tile for head dim 128; 128×64 by default)
    k = knobs_for(hw, "attention", "bf16")
    q_t = float(p.details["q_tile"])
    rule = attention_family(impl).tile(hw.arch, 128.0)
    kv_t = rule[1] if rule else 64.0
    flops = 2.0 * 4 * 32 * 8192 * 8192 * (128 + 128)
    tensor_s = flops / (k.rate * k.attention_efficiency * float(tile_efficiency(q_t, kv_t))
                        * share)
    # the padded tiles match the shape exactly (8192 = 64·128), so the tensor time is the
    # compute time unless the softmax is the longer part
    assert float(p.compute_s) >= tensor_s * (1 - 1e-9)
    assert float(p.compute_s) == pytest.approx(tensor_s, rel=0.35)
    if share < 1.0:  # never faster than the share allows
        assert float(p.flops) / float(p.compute_s) <= share * k.rate * (1 + 1e-9)


@pytest.mark.parametrize(("seq", "ctas"), [
    (16, 4 * 1),    # 112 packed rows fill 7/8 of a 128-row tile, unpacked 1/8: pack
    (20, 4 * 2),    # 140 rows in two tiles (fill .55) vs 20/128 (.16): pack
    (100, 4 * 6),   # 700/768 = .91 vs 100/128 = .78 < .9 × .91: pack
    (128, 28 * 1),  # both fill their tiles exactly: stay unpacked, one CTA per query head
    (120, 28 * 1),  # 120/128 = .94 vs 840/896 = .94: not 10 % better, unpacked
])
def test_flash3_packs_gqa_heads_when_that_fills_the_tiles_better(seq: int, ctas: int) -> None:
    """FA3's rule (hopper/heuristics.h): pack the 7 query heads of a KV head into the tile
    rows when unpacked tiles would be filled less than 0.9x as well; 128-row tiles at d 128."""
    op = pm.Attention(batch=1, heads=28, kv_heads=4, seq_q=seq, seq_kv=seq, head_dim=128,
                      causal=True, impl="flash3")
    assert float(predict(op, "h100-sxm").details["ctas"]) == ctas


def test_xqa_fallback_reads_kv_once_per_query_head_beyond_its_group_limit() -> None:
    packed, fallback = (predict(pm.Attention(batch=4, heads=h, kv_heads=1, seq_q=1,
                                             seq_kv=8192, head_dim=128, impl="xqa"),
                                "h100-sxm", constants=PRIORS) for h in (32, 64))
    kv = 4 * 1 * 8192 * 2 * 128 * 2
    assert float(fallback.bytes) - float(packed.bytes) == pytest.approx(63 * kv, rel=0.01)


@pytest.mark.parametrize("impl", ["flash2", "paged", "flashinfer"])
def test_decode_packs_any_group_of_query_heads(impl: str) -> None:
    """A one-token query packs all G query heads of a KV head into one tile's rows, however
    large G (FA2's seqlenq_ngroups_swapped, FlashInfer's tensor-core decode have no upper
    limit): G = 128 fills a 128-row tile, one CTA per (sequence, KV head), as G = 32 gives
    one 32-row tile (FA2: its smallest query tile, 64 rows); unpacked it would be one tile
    per query head. FA2's KV-cache entry point (``paged``) runs its split-KV kernel, whose
    tiles are 64 rows: G = 128 takes two of them per (sequence, KV head)."""
    least = 64 if impl in ("flash2", "paged") else 16
    most = 64 if impl == "paged" else 128
    for group, rows in ((32, max(32, least)), (128, most)):
        p = predict(pm.Attention(batch=4, heads=group, kv_heads=1, seq_q=1, seq_kv=64,
                                 head_dim=128, impl=impl, num_splits=1), "a100-80gb-sxm")
        assert float(p.details["q_tile"]) == rows
        assert float(p.details["ctas"]) == 4 * 1 * -(-group // rows)


@pytest.mark.parametrize(("impl", "rows"), [("flash2", 64), ("paged", 64), ("flash3", 16),
                                            ("flashinfer", 16)])
def test_fa2_computes_at_least_its_64_row_query_tile(impl: str, rows: int) -> None:
    """FlashAttention-2's split-KV kernel fixes kBlockM = 64 for every head dim (its
    forward kernels use 64 or 128): a decode tile of 4 packed query heads costs 64 rows of
    MMA work, where other tensor-core kernels pad to the MMA granularity (16)."""
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                      impl=impl, num_splits=1)
    arch_gpu = "h100-sxm" if impl == "flash3" else "a100-80gb-sxm"
    assert float(predict(op, arch_gpu).details["q_tile"]) == rows


def test_fa2_split_heuristic_counts_two_ctas_per_sm_and_its_kv_blocks() -> None:
    """flash_api.cpp: num_splits_heuristic(B·H·m_blocks, 2 × SMs, n_blocks, 128) with
    block_n = 256 / 128 / 64 keys for head dims to 64 / 128 / above. On an A100 (108 SMs)
    128 (sequence, KV head) CTAs fill 80 % of 108 SMs but not of 216 slots: FA2 splits;
    and a 1,024-key cache has 4 blocks at head dim 64, 16 at 256, so at most 4 or 16
    splits."""
    def splits(impl: str, batch: int, kv_heads: int, seq_kv: int, d: int) -> float:
        op = pm.Attention(batch=batch, heads=kv_heads * 4, kv_heads=kv_heads, seq_q=1,
                          seq_kv=seq_kv, head_dim=d, impl=impl)
        return float(predict(op, "a100-80gb-sxm").details["splits"])

    assert splits("flash2", 16, 8, 8192, 128) > 1  # 128 < 0.8 x 216
    assert splits("flashinfer", 16, 8, 8192, 128) == 1  # 128 >= 0.8 x 108
    assert splits("flash2", 1, 1, 1024, 64) <= 4
    assert 4 < splits("flash2", 1, 1, 1024, 256) <= 16


def test_fa3_before_hopper_is_its_sm8x_family_with_fa3_scheduling() -> None:
    """FlashAttention-3's SM8x build (what SGLang's FlashAttention backend runs on an
    A100): ``flash3`` resolves to ``flash3-sm8x`` on Ampere and Ada, resident CTAs (no
    warp specialisation); unlike FA2's varlen entry point it splits the keys of a decode
    step whatever the group size (FA3's heuristic over 108 SMs: 8 (sequence, head) tiles
    of 128 key blocks, the smallest split reaching 85 % of the best wave fill is 12, 96
    CTAs), always packs GQA (prefill too: 16 tokens × 4 query heads in one tile per KV
    head) and computes 128 query rows per tile; before Ampere it is refused."""
    mha = pm.Attention(batch=1, heads=8, seq_q=1, seq_kv=16384, head_dim=128)
    fa3 = predict(dataclasses.replace(mha, impl="flash3"), "a100-80gb-sxm", constants=PRIORS)
    fa2 = predict(dataclasses.replace(mha, impl="flash2", num_splits="gqa"), "a100-80gb-sxm",
                  constants=PRIORS)
    assert fa3.details["impl"] == "flash3-sm8x"
    assert not attention_family("flash3-sm8x").persistent
    assert float(fa3.details["splits"]) == 12
    assert float(fa3.details["ctas"]) == 96
    assert float(fa2.details["splits"]) == 1
    assert float(fa3.details["q_tile"]) == 128
    assert predict(dataclasses.replace(mha, impl="flash3"), "l40s",
                   constants=PRIORS).details["impl"] == "flash3-sm8x"
    assert predict(dataclasses.replace(mha, impl="flash3"), "h100-sxm",
                   constants=PRIORS).details["impl"] == "flash3"
    prefill = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=16, seq_kv=16, head_dim=128,
                           causal=True, impl="flash3", num_splits=1)
    assert float(predict(prefill, "a100-80gb-sxm", constants=PRIORS).details["ctas"]) == 2 * 8
    with pytest.raises(PerfmodelError, match="impl"):
        predict(dataclasses.replace(mha, impl="flash3", dtype="fp16", kv_dtype="fp16"),
                "v100-sxm2-32gb")
    # the collectors' label on an A100 (their FlashAttention backend)
    assert attention_kernel_for_label("sglang", "flash_attention", "ampere",
                                      "decode").impl == "flash3"
    assert attention_kernel("vllm", "ampere", "decode").impl == "flash2"


def test_flashinfer_prefill_packs_the_query_heads_of_a_kv_head() -> None:
    """FlashInfer's prefill tiles hold (query, head) rows of one KV head: 16 tokens × 4
    query heads per KV head = 64 rows, one 64-row tile per (sequence, KV head): 2 × 8 CTAs,
    where FA2 runs one 16-row tile per (sequence, query head): 2 × 32."""
    def ctas(impl: str) -> float:
        op = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=16, seq_kv=16, head_dim=128,
                          causal=True, impl=impl, num_splits=1)
        return float(predict(op, "l40s").details["ctas"])
    assert ctas("flashinfer") == 2 * 8
    assert ctas("flash2") == 2 * 32


def test_sglang_flashinfer_decode_runs_cuda_cores_below_four_query_heads() -> None:
    """SGLang asks FlashInfer for its CUDA-core decode kernel over a 16-bit cache when a KV
    head has fewer than 4 query heads: no 16-row MMA padding (q_tile = G), more CTAs
    resident per SM (shared memory at G = 1, D = 128: 2 stages × K,V × 4·8 keys × 128 × 2 B
    = 32 KiB, three per 100 KiB L40S SM; the tensor-core kernel's launcher counts its
    128-row query tile and a 16-key K/V slice, 32 + 8 KiB: two)."""
    for group in (1.0, 2.0, 3.0):
        assert attention_kernel("sglang", "ada", "decode",
                                group=group).tensor_core_min_group == 4.0
    assert attention_kernel("vllm", "ada", "decode", kv_dtype="fp8",
                            group=1.0).tensor_core_min_group == 0.0
    assert attention_kernel_for_label("sglang", "flashinfer", "ada",
                                      "decode").tensor_core_min_group == 4.0

    def run(heads: int, kv_heads: int, tc_group: float, dtype: str = "bf16") -> Any:
        return predict(pm.Attention(batch=1024, heads=heads, kv_heads=kv_heads, seq_q=1,
                                    seq_kv=8, head_dim=128, dtype=dtype, impl="flashinfer",
                                    tensor_core_min_group=tc_group), "l40s")

    cuda, tensor = run(24, 24, 4.0), run(24, 24, 0.0)
    assert float(cuda.details["q_tile"]) == 1
    assert float(tensor.details["q_tile"]) == 16
    assert float(cuda.details["ctas"]) == float(tensor.details["ctas"]) == 1024 * 24
    assert (float(cuda.details["resident"]), float(tensor.details["resident"])) == (3, 2)
    # three resident CTAs per SM instead of two: fewer waves of the per-tile time
    assert float(cuda.latency_s) < 0.85 * float(tensor.latency_s)
    # grouped heads (G ≥ 4) and an fp8 cache keep the tensor-core kernel
    assert float(run(32, 8, 4.0).latency_s) == float(run(32, 8, 0.0).latency_s)
    assert float(run(24, 24, 4.0, "fp8").latency_s) == float(run(24, 24, 0.0, "fp8").latency_s)
    # families without a CUDA-core decode kernel ignore the setting
    a, b = (predict(pm.Attention(batch=64, heads=8, seq_q=1, seq_kv=512, impl="flash2",
                                 tensor_core_min_group=g), "l40s") for g in (0.0, 4.0))
    assert float(a.latency_s) == float(b.latency_s)


def test_cuda_core_decode_does_its_dot_products_at_the_fp32_fma_rate() -> None:
    """B·H·S·(D + D_v) fused multiply-adds (Q·K and P·V, one query token, G = 1) at the
    fp32 peak / 2 FMAs per second: the compute time is at least that (the softmax may add
    to it, never subtract)."""
    hw = pm.load_hardware("l40s")
    op = pm.Attention(batch=64, heads=8, seq_q=1, seq_kv=4096, head_dim=128, impl="flashinfer",
                      tensor_core_min_group=4.0, num_splits=1)
    p = predict(op, hw, constants=PRIORS)
    k = knobs_for(hw, "attention", "bf16")
    fmas = 64 * 8 * 4096 * (128 + 128)
    assert float(p.details["q_tile"]) == 1
    assert float(p.compute_s) >= fmas / k.vector_op_rate * (1 - 1e-9)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "4"])
def test_tensor_core_min_group_rejects_nonsense(bad: object) -> None:
    with pytest.raises(PerfmodelError, match="tensor_core_min_group"):
        pm.Attention(seq_q=1, seq_kv=64, tensor_core_min_group=bad)  # type: ignore[arg-type]


def test_varlen_flash2_splits_only_packed_gqa_decode() -> None:
    mha, gqa = (predict(pm.Attention(batch=1, heads=h, kv_heads=8, seq_q=1, seq_kv=65536,
                                     head_dim=128, impl="flash2", num_splits="gqa"),
                        "a100-80gb-sxm") for h in (8, 64))
    assert float(mha.details["splits"]) == 1
    assert float(gqa.details["splits"]) > 1


def test_masked_mha_keeps_32_warps_per_sm_as_its_launch_does() -> None:
    """TensorRT-LLM's masked-MHA launch: 256-thread CTAs, four resident per SM (32 warps by
    registers) once sequences × heads reach 4× the SMs; below that, larger CTAs holding the
    same warps. On H100 (132 SMs), with one CTA per sequence (one head, 64 keys: no split):
    528 CTAs are one wave of tile time and 1,056 two; 132 CTAs get a whole SM each, so 264
    take twice their compute time, not the same (as two 2-per-SM slots would give)."""
    def run(n: int) -> Any:
        return predict(pm.Attention(batch=n, heads=1, kv_heads=1, seq_q=1, seq_kv=64,
                                    head_dim=128, impl="mmha"), "h100-sxm", constants=PRIORS)
    tile = PRIORS["attn.mmha.decode_tile_s.hopper.none"]
    assert float(run(1056).overhead_s) - float(run(528).overhead_s) == pytest.approx(tile)
    assert float(run(1584).overhead_s) - float(run(1056).overhead_s) == pytest.approx(tile)
    assert float(run(264).compute_s) == pytest.approx(2.0 * float(run(132).compute_s))


# ------------------------------------------------------------------------ run contexts
def test_graph_launch_and_warm_l2() -> None:
    hw = pm.load_hardware("l40s")
    tiny = pm.Gemm(m=16, n=64, k=64)
    stream = predict(tiny, hw, constants=PRIORS)
    graph = predict(tiny, hw, context=RunContext(launch="graph"), constants=PRIORS)
    # the graph floor is stated at the reference SM clock: × 1.5 GHz / 2.52 GHz on L40S
    assert float(stream.overhead_s) - float(graph.overhead_s) == pytest.approx(
        hw.efficiency.kernel_overhead - PRIORS["graph_kernel_s"] * 1.5e9 / 2.52e9)
    fits = pm.Gemm(m=4096, n=1024, k=1024)  # 12 MiB of operands, L2 96 MiB
    cold = predict(fits, hw, constants=PRIORS)
    warm = predict(fits, hw, context=RunContext(l2="warm"), constants=PRIORS)
    assert float(warm.memory_s) < 0.5 * float(cold.memory_s)
    huge = pm.Gemm(m=16, n=65536, k=8192)  # 1 GiB of weights: no L2 can hold it
    assert float(predict(huge, hw, context=RunContext(l2="warm"),
                         constants=PRIORS).memory_s) == pytest.approx(
        float(predict(huge, hw, constants=PRIORS).memory_s), rel=1e-3)
    # twenty rotated copies of its 10 MiB of weights and output no longer fit the L2
    rotated = predict(fits, hw, context=RunContext(l2="warm", copies=20.0), constants=PRIORS)
    assert float(rotated.memory_s) > 0.9 * float(cold.memory_s)


def test_a_partitioned_l2_holds_a_repeated_working_set_in_each_half() -> None:
    """A100 and H100 split their L2 into two SM-side partitions that each cache what their
    SMs read (spec ``memory.l2_partitions: 2``): a repeated call's data, read by SMs of both
    halves, stays resident up to L2 / 2 × ``l2_capacity_fraction``, not the whole L2."""
    h100 = pm.load_hardware("h100-sxm")
    assert h100.memory.l2_partitions == 2
    assert pm.load_hardware("l40s").memory.l2_partitions == 1
    whole = h100.model_copy(update={"memory": h100.memory.model_copy(
        update={"l2_partitions": 1})})
    frac = PRIORS["l2_capacity_fraction"]
    env = make_env(knobs_for(h100, "gemm", "bf16"), RunContext(l2="warm"), PRIORS)
    assert env.l2_capacity == pytest.approx(50 * 2**20 / 2 * frac)
    # 24 MiB of bf16 weights (16 × 4096 × 3072 GEMM; a one-sequence decode over 6144 keys of
    # 8 KV heads): inside 0.7 × 50 MiB but past 0.7 × 25 MiB
    ops = (pm.Gemm(m=16, n=4096, k=3072),
           pm.Attention(batch=1, heads=8, kv_heads=8, seq_q=1, seq_kv=6144, head_dim=128))
    warm = RunContext(l2="warm")
    for op in ops:
        split = float(predict(op, h100, context=warm, constants=PRIORS).memory_s)
        one = float(predict(op, whole, context=warm, constants=PRIORS).memory_s)
        assert split > 1.5 * one
    # far inside both (1 MiB): the same
    small = pm.Gemm(m=16, n=512, k=1024)
    assert float(predict(small, h100, context=warm, constants=PRIORS).memory_s) == \
        pytest.approx(float(predict(small, whole, context=warm, constants=PRIORS).memory_s),
                      rel=1e-3)


def test_eager_call_is_host_bound_below_the_host_time() -> None:
    op = pm.Gemm(m=8, n=256, k=256)
    ctx = RunContext(launch="eager", host_s=100e-6)
    assert float(predict(op, "h100-sxm", context=ctx).latency_s) == pytest.approx(100e-6)
    big = pm.Gemm(m=8192, n=8192, k=8192)
    assert float(predict(big, "h100-sxm", context=ctx).latency_s) == pytest.approx(
        float(predict(big, "h100-sxm").latency_s))


def test_engine_bookkeeping_is_its_own_stage() -> None:
    op = pm.Gemm(m=64, n=4096, k=4096, dtype="fp8", out_dtype="bf16", quant="per-tensor",
                 quantize_input=True, impl="cublas")
    name = call_name("trtllm", "gemm-per-tensor")
    consts = PRIORS.with_values({name: 7e-6, row_name("trtllm", "gemm-per-tensor"): 1e-6},
                                "test")
    ctx = RunContext(engine="trtllm")
    p = predict(op, "h100-sxm", context=ctx, constants=consts)
    engine = dict(p.stages)["engine"]
    # SM time at the reference clock (1.5 GHz), on H100's 132 SMs at 1.98 GHz
    assert float(engine.latency_s) == pytest.approx((7e-6 + 64 * 1e-6 / 132) * 1.5 / 1.98)
    without = predict(op, "h100-sxm", context=ctx, constants=PRIORS)
    assert float(p.latency_s) - float(without.latency_s) == pytest.approx(
        float(engine.latency_s))
    assert "engine" not in dict(without.stages)


def test_context_rejects_nonsense() -> None:
    with pytest.raises(PerfmodelError, match="launch"):
        RunContext(launch="warp")  # type: ignore[arg-type]
    with pytest.raises(PerfmodelError, match="copies"):
        RunContext(copies=0.5)


# --------------------------------------------------------------------- engine profiles
def test_engine_kernel_choices_per_architecture() -> None:
    assert attention_kernel("trtllm", "hopper", "prefill").impl == "fmha-v2"
    assert attention_kernel("trtllm", "hopper", "decode").impl == "xqa"
    # one query head per KV head: TRT-LLM's masked-MHA decode kernel, grouped heads: XQA
    assert attention_kernel("trtllm", "ampere", "decode", group=1.0).impl == "mmha"
    assert attention_kernel("trtllm", "hopper", "decode", group=8.0).impl == "xqa"
    assert attention_kernel("trtllm", "hopper", "prefill", group=1.0).impl == "fmha-v2"
    assert attention_kernel("trtllm", "blackwell", "decode", group=1.0).impl == "trtllm-gen"
    # more than 32 query heads per KV head: masked MHA on every architecture, decode only
    for arch in ("ampere", "ada", "hopper", "blackwell"):
        assert attention_kernel("trtllm", arch, "decode", group=64.0).impl == "mmha"
        assert attention_kernel("trtllm", arch, "decode", group=32.0).impl != "mmha"
    assert attention_kernel("trtllm", "hopper", "prefill", group=64.0).impl == "fmha-v2"
    assert attention_kernel("vllm", "blackwell", "decode", group=64.0).impl == "trtllm-gen"
    assert attention_kernel_for_label("trtllm", "torch_flow", "ada", "decode",
                                      group=1.0).impl == "mmha"
    assert attention_kernel("trtllm", "blackwell", "decode").impl == "trtllm-gen"
    assert attention_kernel("vllm", "hopper", "prefill", head_dim=512).impl == "flash4"
    assert attention_kernel("sglang", "ada", "decode").impl == "flashinfer"
    assert attention_kernel("trtllm", "hopper", "prefill").rope
    assert not attention_kernel("vllm", "hopper", "prefill").rope
    assert gemm_kernel("vllm", "ada", "block").impl == "triton"
    assert gemm_kernel("sglang", "blackwell", "nvfp4").impl == "cutedsl"
    assert not gemm_kernel("trtllm", "hopper", "none").quantize_input
    recorded = attention_kernel_for_label("vllm", "vllm_flash_attn_fa4", "hopper", "decode")
    assert recorded.impl == "flash4"
    # vLLM's FlashInfer block-scale wrapper is a family of its own (its own host time),
    # its CUTLASS wrapper stays CUTLASS
    assert gemm_kernel_for_label("vllm", "FlashInferFp8BlockScaledMMKernel", "hopper",
                                 "block").impl == "flashinfer"
    assert gemm_kernel_for_label("vllm", "CutlassFp8BlockScaledMMKernel", "hopper",
                                 "block").impl == "cutlass"
    # SGLang's FlashInfer path: its FA2 templates on Ada, its Blackwell backends (a family
    # of their own, persistent) on B200
    assert attention_kernel_for_label("sglang", "flashinfer", "ada",
                                      "prefill").impl == "flashinfer"
    on_b200 = attention_kernel_for_label("sglang", "flashinfer", "blackwell", "prefill")
    assert on_b200.impl == "flashinfer-sm100"
    assert attention_family(on_b200.impl).persistent
    with pytest.raises(PerfmodelError, match="engine"):
        attention_kernel("tgi", "hopper", "prefill")


def test_model_with_an_engine_runs_its_kernels() -> None:
    neutral = pm.predict_model("llama-3.1-8b", "h100-sxm", phase="decode", batch=8,
                               context_len=2048)
    trt = pm.predict_model("llama-3.1-8b", "h100-sxm", phase="decode", batch=8,
                           context_len=2048, engine="trtllm")
    assert any("xqa" in a for a in trt.assumptions) or trt.latency_s != neutral.latency_s
    assert float(trt.latency_s) > 0


def test_trtllm_models_take_fp8_activations_from_the_norm() -> None:
    """In a whole TensorRT-LLM model the RMSNorm emits the fp8 activations of the QKV
    projection: its GEMM runs alone (no quantize kernel, no scale bookkeeping), as one op
    does with quantize_input=False; vLLM still quantizes in the call."""
    b, hidden, kv = 16, 4096, 8 * 128  # llama-3.1-8b: n = 4096 + 2·1024, k = 4096
    kw: dict[str, Any] = {"phase": "decode", "batch": b, "context_len": 1024,
                          "weight_dtype": "fp8", "step_overhead_s": 0.0}
    ctx = RunContext(launch="graph", engine="trtllm")
    alone = pm.Gemm(m=b, n=hidden + 2 * kv, k=hidden, dtype="fp8", out_dtype="bf16",
                    quant="per-tensor", impl="cublas")
    quantizing = pm.Gemm(m=b, n=hidden + 2 * kv, k=hidden, dtype="fp8", out_dtype="bf16",
                         quant="per-tensor", impl="cublas", quantize_input=True)
    one = predict(alone, "h100-sxm", context=ctx)
    assert [name for name, _ in one.stages] in ([], ["gemm"])
    trt = pm.predict_model("llama-3.1-8b", "h100-sxm", engine="trtllm", **kw)
    assert trt.decode is not None
    row = trt.decode.op("qkv_proj")
    assert float(row.latency_s) / float(row.count) == pytest.approx(one.latency_s, rel=1e-9)
    assert predict(quantizing, "h100-sxm", context=ctx).latency_s > one.latency_s
    assert any("quantized by the kernel before" in a for a in trt.assumptions)
    vllm = pm.predict_model("llama-3.1-8b", "h100-sxm", engine="vllm", **kw)
    assert any("quantized in the call" in a for a in vllm.assumptions)


def test_engines_compute_in_fp8_over_an_fp8_cache_where_they_do() -> None:
    """TensorRT-LLM's context FMHA on Hopper computes in fp8 over an fp8 KV cache (its
    attention op is then the fp8 op AIConfigurator's rows time), vLLM's FA3 in bf16; a
    decode call over an fp8 cache is the fp8 op the decode rows were fitted as."""
    assert attention_kernel("trtllm", "hopper", "prefill", kv_dtype="fp8").fp8_compute
    assert not attention_kernel("trtllm", "hopper", "prefill").fp8_compute  # bf16 cache
    assert not attention_kernel("trtllm", "ada", "prefill", kv_dtype="fp8").fp8_compute
    assert not attention_kernel("vllm", "hopper", "prefill", kv_dtype="fp8").fp8_compute
    assert attention_kernel("vllm", "blackwell", "prefill", kv_dtype="fp8").fp8_compute
    assert attention_kernel("vllm", "hopper", "decode", kv_dtype="fp8").fp8_compute
    b, ctx_len = 32, 8192  # llama-3.1-8b: 32 query heads, 8 KV heads, head dim 128
    trt = pm.predict_model("llama-3.1-8b", "h100-sxm", engine="trtllm", phase="decode",
                           batch=b, context_len=ctx_len, kv_dtype="fp8", step_overhead_s=0.0)
    assert trt.decode is not None
    row = trt.decode.op("attention")
    op = pm.Attention(batch=b, heads=32, kv_heads=8, seq_q=1, seq_kv=ctx_len, head_dim=128,
                      dtype="fp8", kv_dtype="fp8", impl="xqa", kv_write=True, causal=True,
                      phase="decode")
    alone = predict(op, "h100-sxm", context=RunContext(launch="graph", engine="trtllm"))
    assert float(row.latency_s) / float(row.count) == pytest.approx(float(alone.latency_s),
                                                                     rel=1e-9)
    assert any("in fp8 over the fp8 KV cache" in a for a in trt.assumptions)


def test_engine_host_time_is_one_row_per_pass() -> None:
    """Under an engine each pass (the prefill, every decode step) pays the host time once:
    its own row, counted as fixed overhead; the kernels are the same with or without it."""
    kw: dict[str, Any] = {"phase": "generate", "batch": 4, "prompt_len": 512, "gen_len": 65,
                          "engine": "vllm"}
    bare = pm.predict_model("llama-3.1-8b", "h100-sxm", step_overhead_s=0.0, **kw)
    host = 2.5e-3
    slow = pm.predict_model("llama-3.1-8b", "h100-sxm", step_overhead_s=host, **kw)
    assert float(slow.ttft_s) == pytest.approx(float(bare.ttft_s) + host, rel=1e-12)
    assert float(slow.tpot_s) == pytest.approx(float(bare.tpot_s) + host, rel=1e-12)
    # e2e = TTFT + (G - 1) TPOT: the host time 1 + 64 times
    assert float(slow.e2e_s) == pytest.approx(float(bare.e2e_s) + 65 * host, rel=1e-12)
    assert slow.decode is not None
    assert bare.decode is not None
    assert slow.decode.op("engine step (host)").latency_s == host
    assert float(slow.decode.overhead_s) == pytest.approx(
        float(bare.decode.overhead_s) + host, rel=1e-12)
    assert sum(float(r.share) for r in slow.decode.ops) == pytest.approx(1.0)
    assert any("host time 2.5 ms" in a for a in slow.assumptions)
    # default: the engine's table value; engine-neutral: no host row at all
    dflt = pm.predict_model("llama-3.1-8b", "h100-sxm", **kw)
    assert float(dflt.tpot_s) == pytest.approx(float(bare.tpot_s) + STEP_OVERHEAD_S)
    neutral = pm.predict_model("llama-3.1-8b", "h100-sxm", phase="decode", batch=4,
                               context_len=600)
    assert neutral.decode is not None
    assert all(r.name != "engine step (host)" for r in neutral.decode.ops)


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf"), 11.0, "1ms", True])
def test_engine_host_time_rejects_nonsense(bad: object) -> None:
    with pytest.raises(PerfmodelError, match="step_overhead_s"):
        pm.predict_model("llama-3.1-8b", "h100-sxm", phase="decode", batch=1,
                         context_len=100, engine="trtllm", step_overhead_s=bad)  # type: ignore[arg-type]


def test_trtllm_model_decode_picks_mmha_only_without_grouped_heads() -> None:
    kw: dict[str, Any] = {"phase": "decode", "batch": 8, "context_len": 2048,
                          "engine": "trtllm"}
    mha = pm.predict_model("llama-2-7b", "h100-sxm", **kw)       # 32 heads, 32 KV heads
    gqa = pm.predict_model("llama-3.1-8b", "h100-sxm", **kw)     # 32 heads, 8 KV heads
    assert any("runs mmha" in a for a in mha.assumptions)
    assert any("runs xqa" in a for a in gqa.assumptions)


# ------------------------------------------------------------------------ monotonicity
@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "h100-sxm", "b200", "mi300x", "t4",
                                 "arc-pro-b60"])
def test_more_gemm_work_never_predicts_less_time(gpu: str) -> None:
    """Each candidate kernel's time grows with the work (a CTA's own bytes, the waves, the
    traffic), so the fastest candidate's does too; the one exception is a deeper split-K
    becoming eligible as k grows (each split keeps at least 128 of k), so any drop must
    come with a change of split-K factor. (Measured cuBLAS times do drop: in
    AIConfigurator's bf16 rows the next larger m is >10 % faster in 2.5-5.5 % of steps, by
    up to 9× on L40S; the model no longer follows those.) Before each CTA moved its own
    tile's bytes, the shared traffic divided among more CTAs made 0.03-0.15 % of these
    random pairs faster, by up to 22 % (Arc Pro B60)."""
    rng = np.random.default_rng(7)
    hw = pm.load_hardware(gpu)
    dtype = "bf16" if "bf16" in hw.peaks else "fp16"
    m, n, k = (rng.integers(1, 8192, 4000).astype(float) for _ in range(3))
    grow = rng.uniform(1.0, 2.0, 4000)
    axis = rng.integers(0, 3, 4000)
    m2, n2, k2 = (np.where(axis == i, np.ceil(x * grow), x) for i, x in enumerate((m, n, k)))
    a = predict(pm.Gemm(m=m, n=n, k=k, dtype=dtype), hw)
    b = predict(pm.Gemm(m=m2, n=n2, k=k2, dtype=dtype), hw)
    drop = np.asarray(b.latency_s) < np.asarray(a.latency_s) * (1 - 1e-9)
    split_changed = np.asarray(a.details["split_k"]) != np.asarray(b.details["split_k"])
    assert np.all(split_changed[drop])


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "h100-sxm", "b200"])
def test_longer_kv_never_makes_decode_faster(gpu: str) -> None:
    impl = {"ampere": "xqa", "ada": "xqa", "hopper": "flash3", "blackwell": "trtllm-gen"}[
        pm.load_hardware(gpu).arch]
    kv = np.arange(16, 65536, 97, dtype=float)
    p = predict(pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=kv, head_dim=128,
                             impl=impl, kv_write=True), gpu)
    lat = np.asarray(p.latency_s)
    assert np.all(lat[1:] >= lat[:-1] * 0.97)


def test_trtllm_context_fmha_on_hopper_is_its_warp_specialised_family() -> None:
    op = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=2048, seq_kv=2048, head_dim=128,
                      causal=True, impl="fmha-v2")
    assert predict(op, "h100-sxm", constants=PRIORS).details["impl"] == "fmha-v2-sm90"
    for gpu in ("a100-80gb-sxm", "l40s"):
        assert predict(op, gpu, constants=PRIORS).details["impl"] == "fmha-v2"
    assert attention_family("fmha-v2-sm90").persistent
    assert not attention_family("fmha-v2").persistent
    # its constants are its own: the SM80/SM89 kernels' rate does not move Hopper's
    slow_v2 = PRIORS.with_values({"attn.fmha-v2.efficiency": 0.3}, "test")
    slow_ws = PRIORS.with_values({"attn.fmha-v2-sm90.efficiency": 0.3}, "test")

    def t(gpu: str, consts: Constants) -> float:
        return float(predict(op, gpu, constants=consts).latency_s)

    assert t("h100-sxm", slow_v2) == pytest.approx(t("h100-sxm", PRIORS))
    assert t("h100-sxm", slow_ws) > 1.5 * t("h100-sxm", PRIORS)
    assert t("a100-80gb-sxm", slow_v2) > 1.5 * t("a100-80gb-sxm", PRIORS)


def test_fa4_on_hopper_is_its_sm90_kernel_and_blackwell_takes_none_of_its_fit() -> None:
    """FlashAttention-4 builds one kernel per architecture behind one interface
    (flash_attn/cute/flash_fwd_sm90.py, flash_fwd_sm100.py): ``flash4`` resolves to
    ``flash4-sm90`` on Hopper, and what Hopper's FA4 rows fit does not reach the Blackwell
    kernel, which takes its kin's (trtllm-gen's) constants until it is measured."""
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                      impl="flash4")
    assert predict(op, "h100-sxm", constants=PRIORS).details["impl"] == "flash4-sm90"
    assert predict(op, "b200", constants=PRIORS).details["impl"] == "flash4"
    hopper_fit = PRIORS.with_values({"attn.flash4-sm90.decode_tile_s": 2e-5,
                                     "attn.flash4-sm90.decode_tile_s.hopper": 2e-5,
                                     "attn.flash4-sm90.efficiency": 0.3,
                                     "attn.flash4-sm90.efficiency.hopper": 0.3}, "test")
    gen_fit = PRIORS.with_values({"attn.trtllm-gen.decode_tile_s": 9e-6,
                                  "attn.trtllm-gen.decode_tile_s.blackwell": 9e-6}, "test")

    def t(gpu: str, consts: Constants) -> float:
        return float(predict(op, gpu, constants=consts).latency_s)

    assert t("b200", hopper_fit) == pytest.approx(t("b200", PRIORS), rel=1e-12)
    assert t("h100-sxm", hopper_fit) > t("h100-sxm", PRIORS) + 15e-6
    # the kin's decode tile (9 µs against the 1 µs prior) is FA4's on Blackwell
    assert t("b200", gen_fit) > t("b200", PRIORS) + 7e-6
    assert "trtllm-gen" in gen_fit.provenance("attn.flash4.decode_tile_s.blackwell")


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300"])
def test_no_fa3_on_blackwell_its_fused_kernel_is_fa4(gpu: str) -> None:
    """FlashAttention-3 has no Blackwell build (its warpgroup MMA is SM90-only): there the
    native fused kernel (``flash``), ``flash3`` and its alias ``cudnn`` are FA4's kernel,
    and Hopper's FA3 fit does not reach them."""
    op = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=2048, seq_kv=2048, head_dim=128,
                      causal=True)
    for impl in ("flash", "flash3", "cudnn", "flash4"):
        p = predict(dataclasses.replace(op, impl=impl), gpu, constants=PRIORS)
        assert p.details["impl"] == "flash4"
    assert predict(op, "h100-sxm", constants=PRIORS).details["impl"] == "flash3"
    # with Blackwell's trtllm-gen measured (FA4's first kin), an FA3 fit moves Hopper only
    gen = PRIORS.with_values({"attn.trtllm-gen.tile_s": 1e-6}, "test")
    fa3_fit = gen.with_values({"attn.flash3.efficiency": 0.3,
                               "attn.flash3.efficiency.hopper": 0.3}, "test")

    def t(g: str, consts: Constants) -> float:
        return float(predict(op, g, constants=consts).latency_s)

    assert t(gpu, fa3_fit) == pytest.approx(t(gpu, gen), rel=1e-12)
    assert t("h100-sxm", fa3_fit) > 1.5 * t("h100-sxm", gen)


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_rtx_blackwell_runs_cutlass_for_block_fp8_and_nvfp4(engine: str) -> None:
    """SM120 (RTX PRO 6000, RTX 5090) has neither DeepGEMM nor the SM100 CuTe-DSL
    kernels: block-scaled fp8 and nvfp4 calls run CUTLASS's SM120 GEMMs; datacenter
    Blackwell keeps its own choices."""
    for quant in ("block", "nvfp4"):
        assert gemm_kernel(engine, "blackwell-consumer", quant).impl == "cutlass"
    assert gemm_kernel(engine, "blackwell", "block").impl == "deepgemm"
    choice = gemm_kernel(engine, pm.load_hardware("rtx-pro-6000-server").arch, "block")
    p = predict(pm.Gemm(m=64, n=4096, k=4096, dtype="fp8", quant="block", out_dtype="bf16",
                        shared_b=True, impl=choice.impl), "rtx-pro-6000-server",
                context=RunContext(launch="graph", l2="warm", engine=engine))
    assert p.details["impl"] == "cutlass"
    assert 0.0 < float(p.latency_s) < 1e-3


def test_engines_off_nvidia() -> None:
    """TensorRT-LLM is NVIDIA-only: asking for it on an AMD GPU names the engine and the
    way out; vLLM and SGLang (ROCm builds) fall back to the architecture's own kernels and
    say so."""
    with pytest.raises(PerfmodelError, match="NVIDIA GPUs only"):
        attention_kernel("trtllm", "cdna3", "decode")
    with pytest.raises(PerfmodelError, match="engine"):
        gemm_kernel("trtllm", "cdna4", "per-tensor")
    for engine in ("vllm", "sglang"):
        att = attention_kernel(engine, "cdna3", "prefill")
        assert att.impl == "flash"
        assert "not modelled" in att.source
        assert gemm_kernel(engine, "cdna3", "per-tensor").impl == "auto"
    assert attention_kernel("vllm", "hopper", "prefill").impl == "flash3"


def test_cli_refuses_trtllm_on_amd(capsys: pytest.CaptureFixture[str]) -> None:
    from perfmodel.cli.main import main
    code = main(["model", "llama-3.1-8b", "--gpu", "mi300x", "--prompt", "128", "--gen",
                 "8", "--engine", "trtllm"])
    err = capsys.readouterr().err
    assert code == 2
    assert "TensorRT-LLM runs on NVIDIA GPUs only" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(("gpu", "runs"), [
    ("mi100", set()), ("mi210", {"vllm"}), ("mi250x", {"vllm"}),
    ("mi300x", {"vllm", "sglang"}), ("mi355x", {"vllm", "sglang"})])
def test_engines_on_amd_gpus_run_where_their_rocm_builds_do(gpu: str, runs: set[str]) -> None:
    """vLLM's ROCm build covers MI200 (gfx90a) and later, not MI100 (gfx908); sgl-kernel's
    ROCm build stops on anything but gfx942/gfx950 (MI300X, MI325X, MI355X); TensorRT-LLM
    is NVIDIA-only. Elsewhere the refusal names the engines that do run (both were
    predicted on every AMD GPU)."""
    hw = pm.load_hardware(gpu)
    cfg = pm.load_model("llama-3.1-8b")
    for engine in ("trtllm", "vllm", "sglang"):
        assert engine_runs_on(engine, hw.arch) == (engine in runs)
        if engine in runs:
            p = pm.predict_model(cfg, hw, phase="decode", batch=1, context_len=128,
                                 engine=engine)
            assert 0.0 < p.latency_s < 1.0
            continue
        with pytest.raises(PerfmodelError) as info:
            pm.predict_model(cfg, hw, phase="decode", batch=1, context_len=128, engine=engine)
        assert info.value.field == "engine"
        fix = info.value.fix
        assert all(e in fix for e in runs)
        assert not any(e in fix for e in {"trtllm", "vllm", "sglang"} - runs)


def test_one_op_in_an_engines_context_is_refused_where_the_engine_does_not_run() -> None:
    """A single op predicted in an engine's context (``RunContext(engine=...)``, or
    ``predict gemm --engine``) on a GPU that engine does not run on raises the engine's
    error, a bf16 GEMM too (it predicted with the engine's call costs on a V100 and
    TensorRT-LLM's on an MI300X)."""
    gemm = pm.Gemm(m=16, n=4096, k=4096, dtype="fp16")
    for gpu, engine in (("v100-sxm2-32gb", "vllm"), ("mi210", "sglang"), ("mi300x", "trtllm")):
        arch = pm.load_hardware(gpu).arch
        with pytest.raises(PerfmodelError) as info:
            predict(gemm, gpu, context=RunContext(launch="graph", engine=engine))
        assert info.value.field == "engine"
        with pytest.raises(PerfmodelError):
            gemm_kernel(engine, arch, "none")
        assert predict(gemm, gpu).latency_s > 0  # engine-neutral still predicts
    assert predict(gemm, "t4", context=RunContext(launch="graph", engine="vllm")).latency_s > 0


def test_cli_comparison_names_the_gpu_an_engine_does_not_run_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``model --gpu A,B --engine E`` where E does not run on B is one error line naming B
    (it said "this GPU" without saying which)."""
    from perfmodel.cli.main import main
    code = main(["model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm,v100-sxm2-32gb", "--prompt",
                 "128", "--gen", "8", "--engine", "vllm"])
    err = capsys.readouterr().err
    assert code == 2
    assert "v100-sxm2-32gb: vLLM runs on NVIDIA GPUs from Turing" in err
    assert "drop v100-sxm2-32gb from --gpu" in err
    assert err.count("\n") == 1
    assert main(["model", "llama-3.1-8b", "--gpu", "a100-80gb-sxm,t4", "--prompt", "128",
                 "--gen", "8", "--engine", "vllm"]) == 0


def _pooled(fitted: dict[str, float]) -> Constants:
    """A table of fitted engine-call constants with every parent pooled from them, as a
    fit leaves it (:func:`perfmodel.calibrate.constants.pool_parents`)."""
    from perfmodel.calibrate.constants import pool_parents

    return pool_parents(Constants().with_values(fitted, "test"), "test")


def test_an_unmeasured_quantized_scheme_takes_the_engines_other_schemes_costs() -> None:
    """The bookkeeping around a quantized GEMM is the engine's: a scheme it was never
    measured with (here nvfp4) inherits the mean of its measured schemes' fixed and
    per-row costs, not 0; another engine's values do not leak in."""
    pooled = _pooled({
        call_name("vllm", "gemm-per-tensor.cutlass") + ".hopper": 2e-6,
        call_name("vllm", "gemm-block.deepgemm") + ".hopper": 4e-6,
        row_name("vllm", "gemm-per-tensor.cutlass") + ".hopper": 1e-7,
        row_name("vllm", "gemm-block.deepgemm") + ".hopper": 3e-7,
        call_name("sglang", "gemm-per-channel.cutlass") + ".hopper": 9e-6,
    })
    assert call_fixed_s("vllm", "gemm-nvfp4", pooled, "blackwell", "cutedsl") == \
        pytest.approx(3e-6)
    assert call_row_s("vllm", "gemm-nvfp4", pooled, "blackwell", "cutedsl") == \
        pytest.approx(2e-7)
    # measured schemes keep their own values; bf16 calls are not a quantized kind
    assert call_fixed_s("vllm", "gemm-block", pooled, "hopper", "deepgemm") == \
        pytest.approx(4e-6)
    assert call_fixed_s("vllm", "gemm-none", pooled, "hopper", "auto") == 0.0
    assert call_fixed_s("trtllm", "gemm-nvfp4", pooled, "blackwell", "cutlass") == 0.0


def test_an_unmeasured_fp8_attention_call_costs_the_engines_bf16_call() -> None:
    """An fp8 attention call runs the engine's bf16 bookkeeping plus its own (quantizing
    the query): until measured with that engine it costs the engine's bf16 call of the
    same phase, not 0; measured fp8 calls keep their own values and do not move the bf16
    ones (the fp8 kind is not a case of the bf16 kind)."""
    pooled = _pooled({
        call_name("vllm", "attention-prefill.flash3") + ".hopper": 2e-6,
        row_name("vllm", "attention-prefill.flash3") + ".hopper": 1e-7,
        call_name("vllm", "attention-decode.flash3") + ".hopper": 5e-6,
        call_name("trtllm", "attention-prefill-fp8.fmha-v2-sm90") + ".hopper": 9e-6,
        call_name("trtllm", "attention-prefill.fmha-v2-sm90") + ".hopper": 3e-6,
    })
    for kind, call in (("attention-prefill", 2e-6), ("attention-decode", 5e-6)):
        assert call_fixed_s("vllm", kind + "-fp8", pooled, "blackwell", "trtllm-gen") == \
            pytest.approx(call)
    assert call_row_s("vllm", "attention-prefill-fp8", pooled, "blackwell", "trtllm-gen") \
        == pytest.approx(1e-7)
    # a measured fp8 kind keeps its own value; the bf16 kind stays its own cases' mean
    assert call_fixed_s("trtllm", "attention-prefill-fp8", pooled, "blackwell",
                        "trtllm-gen") == pytest.approx(9e-6)
    assert call_fixed_s("trtllm", "attention-prefill", pooled, "blackwell",
                        "trtllm-gen") == pytest.approx(3e-6)
    # another engine's values do not leak in
    assert call_fixed_s("sglang", "attention-prefill-fp8", pooled, "blackwell",
                        "trtllm-gen") == 0.0


def test_every_engine_predicts_attention_on_every_nvidia_gpu() -> None:
    """An engine's kernel choice exists on the GPU it is asked for: on every NVIDIA GPU of
    the catalogue with a 16-bit peak, each engine's prefill and decode calls predict a
    finite, positive time (SGLang once chose FA3 on SM120, which has no SM120 build, and
    before Ampere, where FA3 does not run: those calls were refused)."""
    gpus = [hw for hw in (pm.load_hardware(g) for g in pm.list_hardware())
            if hw.vendor == "nvidia" and ("bf16" in hw.peaks or "fp16" in hw.peaks)]
    assert {"blackwell-consumer", "volta", "turing", "pascal"} & {hw.arch for hw in gpus} \
        == {"blackwell-consumer", "volta", "turing", "pascal"}
    for hw in gpus:
        dtype = "bf16" if "bf16" in hw.peaks else "fp16"
        for engine in ("trtllm", "vllm", "sglang"):
            if not engine_runs_on(engine, hw.arch):
                continue  # refused: test_engines_before_ampere
            for seq_q, seq_kv in ((2048, 2048), (1, 4096)):
                phase = "decode" if seq_q == 1 else "prefill"
                choice = attention_kernel(engine, hw.arch, phase, group=4.0)
                op = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=seq_q, seq_kv=seq_kv,
                                  head_dim=128, causal=seq_q > 1, dtype=dtype,
                                  impl=choice.impl, kv_write=choice.kv_write,
                                  tensor_core_min_group=choice.tensor_core_min_group)
                t = float(predict(op, hw, context=RunContext(launch="graph",
                                                             engine=engine)).latency_s)
                assert 0.0 < t < 1.0, (hw.id, engine, phase, choice.impl)
    assert attention_kernel("sglang", "blackwell-consumer", "decode").impl == "flashinfer"


@pytest.mark.parametrize("gpu", ["v100-sxm2-32gb", "t4", "p100-pcie-16gb"])
def test_engines_before_ampere(gpu: str) -> None:
    """Each engine runs from its own floor on: TensorRT-LLM from Ampere (its
    supported-hardware page), vLLM and SGLang from Turing (vLLM's installation page:
    compute capability 7.5; SGLang's model runner refuses below SM75). On Turing both run
    their Triton attention backend (no FlashAttention-2 or FlashInfer build there: it was
    predicted as FlashAttention-2, a kernel that does not run there); below its floor an
    engine is refused with a message that says so and names the engines that do run, for
    attention, GEMMs and whole models alike (vLLM and SGLang were predicted on V100 and
    P100, where neither starts)."""
    arch = pm.load_hardware(gpu).arch
    turing = arch == "turing"
    cfg = pm.load_model("llama-2-7b")
    for engine in ("trtllm", "vllm", "sglang"):
        runs = engine != "trtllm" and turing
        assert engine_runs_on(engine, arch) == runs
        if runs:
            for phase in ("prefill", "decode"):
                assert attention_kernel(engine, arch, phase, group=4.0).impl == "triton"
            p = pm.predict_model(cfg, gpu, phase="decode", batch=1, context_len=128,
                                 engine=engine)
            assert 0.0 < p.latency_s < 1.0
            continue
        floor = "from Ampere on" if engine == "trtllm" else "from Turing"
        fix = "vllm or sglang" if turing else "--engine none"
        for phase in ("prefill", "decode"):
            with pytest.raises(PerfmodelError, match=floor):
                attention_kernel(engine, arch, phase, group=4.0)
        with pytest.raises(PerfmodelError, match=floor):
            gemm_kernel(engine, arch, "per-tensor")
        with pytest.raises(PerfmodelError, match=fix):
            pm.predict_model(cfg, gpu, phase="decode", batch=1, context_len=128,
                             engine=engine)
    assert engine_runs_on("none", arch)
    # Ampere keeps FlashAttention-2 in vLLM and TensorRT-LLM's kernels
    for engine in ("trtllm", "vllm", "sglang"):
        assert engine_runs_on(engine, "ampere")
    assert attention_kernel("vllm", "ampere", "decode").impl == "flash2"
    assert attention_kernel("trtllm", "ampere", "decode", group=4.0).impl == "xqa"
    assert not engine_runs_on("trtllm", "cdna3")
    assert engine_runs_on("vllm", "cdna3")


@pytest.mark.parametrize("arch", ["ampere", "ada", "blackwell-consumer", "hopper"])
def test_heads_wider_than_flashattention_supports_go_to_the_engines_next_backend(
        arch: str) -> None:
    """FlashAttention-2 and -3 have kernels for head dims up to 256: wider heads (512)
    take the engine's next backend, FA4 in vLLM and Triton in SGLang on Hopper (as
    AIConfigurator's H100 rows show), FlashInfer in vLLM where its flash backend is FA2;
    SGLang off Hopper runs FlashInfer at every head dim; head dims up to 256 keep
    FlashAttention (before, a 512-wide head ran FA2 or FA3's SM8x kernel off Hopper, which
    have none)."""
    for phase in ("prefill", "decode"):
        narrow = {e: attention_kernel(e, arch, phase, head_dim=256.0, group=4.0).impl
                  for e in ("vllm", "sglang")}
        wide = {e: attention_kernel(e, arch, phase, head_dim=512.0, group=4.0).impl
                for e in ("vllm", "sglang")}
        if arch == "hopper":
            assert narrow == {"vllm": "flash3", "sglang": "flash3"}
            assert wide == {"vllm": "flash4", "sglang": "triton"}
        else:
            assert narrow["vllm"] == "flash2"
            assert wide["vllm"] == "flashinfer"
            assert wide["sglang"] == narrow["sglang"] == "flashinfer"
    cfg = pm.load_model("llama-3.1-8b").model_copy(update={"head_dim": 512})
    gpu = {"ampere": "a100-80gb-sxm", "ada": "l40s", "blackwell-consumer": "rtx-5090",
           "hopper": "h100-sxm"}[arch]
    p = pm.predict_model(cfg, gpu, phase="decode", batch=4, context_len=2048, engine="vllm")
    assert 0.0 < p.latency_s < 1.0
    expected = "flash4" if arch == "hopper" else "flashinfer"
    assert any(a.startswith(f"vllm: decode attention runs {expected} ") for a in p.assumptions)


@pytest.mark.parametrize("arch", ["ampere", "ada", "blackwell-consumer"])
def test_vllm_runs_flashinfer_over_an_fp8_cache_where_its_flash_backend_is_fa2(arch: str) -> None:
    """vLLM's FlashAttention-2 backend takes no fp8 KV cache (FA3 does): over one it runs
    FlashInfer on every FA2 architecture, as AIConfigurator's L40S rows show for Ada (on
    Ampere and SM120 it ran FA2 converting fp8 elements, a kernel that does not exist)."""
    for phase in ("prefill", "decode"):
        assert attention_kernel("vllm", arch, phase).impl == "flash2"
        assert attention_kernel("vllm", arch, phase, kv_dtype="fp8").impl == "flashinfer"
    assert attention_kernel("vllm", "hopper", "decode", kv_dtype="fp8").impl == "flash3"
    assert attention_kernel("vllm", "turing", "decode", kv_dtype="fp8").impl == "triton"


def test_trtllm_prefill_charges_rope_only_to_models_with_rotary_embeddings() -> None:
    """TensorRT-LLM applies RoPE in its attention pre-processing kernel, so a model without
    rotary embeddings (ALiBi, learned positions) does not pay it there (it did: the same
    prefill time with rotary=False)."""
    from perfmodel.models.config import TransformerConfig, load_model

    cfg = load_model("llama-3.1-8b")
    no_rope = TransformerConfig(**{**cfg.model_dump(), "rotary": False, "name": "no-rope"})
    kw: dict[str, Any] = {"phase": "prefill", "prompt_len": 8192, "engine": "trtllm"}
    with_rope = {r.name: r for r in pm.predict_model(cfg, "h100-sxm", **kw).ops}
    without = {r.name: r for r in pm.predict_model(no_rope, "h100-sxm", **kw).ops}
    assert "rotary" not in without
    assert float(without["attention"].latency_s) < float(with_rope["attention"].latency_s)
    # every other op is the same
    for name, row in without.items():
        if name != "attention":
            assert float(row.latency_s) == float(with_rope[name].latency_s)


def test_pytorch_mem_efficient_sdpa_is_its_own_kernel_not_the_native_flash() -> None:
    """PyTorch's memory-efficient SDPA backend (the CUTLASS kernel from xformers) read from a
    trace was predicted as the architecture's native fused kernel (FA3 on an H100). It is
    a family of its own: one CTA per (query block, head, sequence), no split of the keys,
    a whole 64-row query block for a one-token query at head dim ≤ 128 (32 above), no
    grouped-query support (each query head reads its own K/V), FA2's constants until
    measured."""
    from perfmodel.validation import kernel_path

    for text in ("sdpa mem-efficient", "fmha_cutlassF_bf16_aligned_64x128_rf_sm80"):
        assert kernel_path(text)[0] == "mem-efficient"
    assert kernel_path("sdpa cudnn")[0] == "flash3"
    assert pm.Attention(heads=8, seq_q=4, head_dim=64, impl="efficient").impl == \
        "mem-efficient"

    b, h, hkv, s, d = 1, 32, 8, 32768, 128
    dec = predict(pm.Attention(batch=b, heads=h, kv_heads=hkv, seq_q=1, seq_kv=s,
                               head_dim=d, dtype="bf16", impl="mem-efficient"), "h100-sxm")
    assert dec.details["impl"] == "mem-efficient"
    assert float(dec.details["ctas"]) == b * h  # no split, no packing
    assert float(dec.details["q_tile"]) == 64.0
    q = o = b * h * 1 * d * 2.0
    kv = b * hkv * s * 2 * d * 2.0
    assert float(dec.bytes) == pytest.approx(q + o + kv * (h // hkv), rel=1e-12)
    wide = predict(pm.Attention(batch=1, heads=8, seq_q=1, seq_kv=4096, head_dim=256,
                                dtype="bf16", impl="mem-efficient"), "h100-sxm")
    assert float(wide.details["q_tile"]) == 32.0
    # FA3, the native kernel, splits the keys and packs the group: far faster here
    fa3 = predict(pm.Attention(batch=b, heads=h, kv_heads=hkv, seq_q=1, seq_kv=s,
                               head_dim=d, dtype="bf16", impl="flash"), "h100-sxm")
    assert fa3.details["impl"] == "flash3"
    assert float(dec.latency_s) > 3.0 * float(fa3.latency_s)
    # its rates and tile times are FlashAttention-2's until it is measured
    base = Constants({"attn.flash2.efficiency": 1.0})
    slow = Constants({"attn.flash2.efficiency": 0.5})
    pre = pm.Attention(batch=4, heads=32, seq_q=2048, seq_kv=2048, head_dim=128,
                       causal=True, dtype="bf16", impl="mem-efficient")
    own = Constants({"attn.mem-efficient.efficiency": 0.5})

    def t(c: Constants) -> float:
        return float(predict(pre, "a100-80gb-sxm", constants=c).latency_s)

    assert t(slow) > 1.2 * t(base)
    assert t(slow) == pytest.approx(t(own), rel=1e-12)
    assert "kin" in base.provenance("attn.mem-efficient.efficiency.ampere")


@pytest.mark.parametrize("gpu", ["v100-sxm2-32gb", "t4", "p100-pcie-16gb"])
def test_the_native_fused_attention_before_ampere_is_pytorchs_mem_efficient_kernel(
        gpu: str) -> None:
    """FlashAttention-2 needs SM80: before Ampere the fused kernel PyTorch runs is its
    memory-efficient backend, so ``flash`` there is ``mem-efficient`` (it was FA2), with
    its unsplit, ungrouped decode; Ampere keeps FlashAttention-2."""
    dec = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=2048, head_dim=128,
                       dtype="fp16")
    p = predict(dec, gpu)
    assert p.details["impl"] == "mem-efficient"
    assert float(p.details["ctas"]) == 8 * 32
    kv = 8 * 8 * 2048 * 2 * 128 * 2.0
    assert float(p.bytes) >= 4 * kv  # each of the 4 query heads of a group reads its K/V
    assert predict(dec, "a100-80gb-sxm").details["impl"] == "flash2"


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_sglang_on_ampere_runs_its_default_flashinfer_backend(kv: str) -> None:
    """SGLang's default attention backend for MHA models is FA3 on Hopper and FlashInfer
    off it (its model runner; "Default for Non-Hopper Machines, e.g., A100"): a whole
    model under ``--engine sglang`` on an A100 runs FlashInfer, with SGLang's tensor-core
    threshold, over a 16-bit or an fp8 cache. AIConfigurator's A100 rows, which its
    collector ran on SGLang's FlashAttention backend, keep that recorded kernel."""
    for phase in ("prefill", "decode"):
        choice = attention_kernel("sglang", "ampere", phase, kv_dtype=kv, group=4.0)
        assert (choice.impl, choice.tensor_core_min_group) == ("flashinfer", 4.0)
        assert "FlashInfer" in choice.source
    p = pm.predict_model(pm.load_model("llama-3.1-8b"), "a100-80gb-sxm", phase="decode",
                         batch=8, context_len=4096, engine="sglang", kv_dtype=kv)
    assert any(a.startswith("sglang: decode attention runs flashinfer ")
               for a in p.assumptions)
    label = attention_kernel_for_label("sglang", "flash_attention", "ampere", "decode",
                                       kv_dtype=kv, group=4.0)
    assert (label.impl, label.tensor_core_min_group) == ("flash3", 0.0)


def test_attention_sinks_run_triton_where_an_engine_would_run_fa2_or_flashinfer() -> None:
    """SGLang picks FlashInfer only for models without attention sinks; gpt-oss runs
    trtllm_mha on SM100, FA3 on SM90 and Triton elsewhere (its server args). vLLM's
    FlashAttention takes sinks on Hopper only; gpt-oss runs TRITON_ATTN on Ampere (its
    recipe)."""
    for arch, plain, sinks in (("ampere", "flashinfer", "triton"),
                               ("ada", "flashinfer", "triton"),
                               ("blackwell-consumer", "flashinfer", "triton"),
                               ("hopper", "flash3", "flash3"),
                               ("blackwell", "trtllm-gen", "trtllm-gen")):
        for phase in ("prefill", "decode"):
            assert attention_kernel("sglang", arch, phase, group=8.0).impl == plain
            assert attention_kernel("sglang", arch, phase, group=8.0, sinks=True).impl == sinks
    for arch, plain, sinks in (("ampere", "flash2", "triton"), ("ada", "flash2", "triton"),
                               ("hopper", "flash3", "flash3"),
                               ("blackwell", "trtllm-gen", "trtllm-gen")):
        assert attention_kernel("vllm", arch, "decode", group=8.0).impl == plain
        assert attention_kernel("vllm", arch, "decode", group=8.0, sinks=True).impl == sinks
    # vLLM over an fp8 cache off Hopper (FlashInfer) too
    assert attention_kernel("vllm", "ada", "decode", kv_dtype="fp8", sinks=True).impl == "triton"
    # TensorRT-LLM's own kernels take sinks (AIConfigurator's gpt-oss rows)
    assert attention_kernel("trtllm", "ada", "decode", group=8.0, sinks=True) == \
        attention_kernel("trtllm", "ada", "decode", group=8.0)
    oss = pm.load_model("gpt-oss-20b")
    assert oss.attention_sinks
    p = pm.predict_model(oss, "l40s", phase="decode", batch=8, context_len=4096,
                         engine="sglang")
    assert any(a.startswith("sglang: decode attention runs triton ") for a in p.assumptions)
    q = pm.predict_model(pm.load_model("llama-3.1-8b"), "l40s", phase="decode", batch=8,
                         context_len=4096, engine="sglang")
    assert any(a.startswith("sglang: decode attention runs flashinfer ") for a in q.assumptions)
    op = pm.Attention(batch=8, heads=64, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=64,
                      causal=True)
    assert pm.engine_call(op, "sglang", "l40s", sinks=True).impl == "triton"
    assert pm.engine_call(op, "sglang", "l40s").impl == "flashinfer"
