"""Fused attention timing: prefill, chunked prefill and decode, per kernel family.

Kernel model (the family's traits: :mod:`perfmodel.timing.kernels`):

- **Tiles.** Query tile q_t rows (the family's, 128 for head dims ≤ 128; 64 where shared
  memory cannot hold Q plus two K/V tiles). Packed GQA (decode, or short queries for
  FA3-class kernels) puts the G = H_q/H_kv query heads of a KV head into one tile's rows:
  a head unit then has R = G·S_q rows, else R = S_q per query head. Tiles are padded to the
  MMA granularity (16 rows): q_eff = min(q_t, 16·⌈R/16⌉). Work tiles:
  T₀ = B·H_u·⌈R/q_eff⌉, H_u = H_kv packed, H_q otherwise.
- **Split-KV** (``auto`` families): when T₀ does not fill the device, the keys are split
  over s CTAs (the smallest s reaching 85 % of the best wave efficiency, as FlashAttention
  chooses), plus a combine kernel and fp32 partial outputs: T = T₀·s tiles.
- **Work per tile.** Keys a tile visits k̄ = computed pairs per row / s (causal: with the
  whole diagonal tiles), padded to the key tile: k_pad = kv_t·⌈k̄/kv_t⌉. Matrix FLOPs
  2·q_eff·k_pad·(D + D_v) per tile; softmax q_eff·k_pad exponentials (special-function
  unit) and v vector ops; FA2-class kernels serialise softmax and MMA, FA3-class overlap
  them (``softmax_overlap``). An fp8 KV cache read by a bf16 kernel costs ``dequant_ops``
  vector operations per loaded element.
- **Scheduling.** Slots = SMs for persistent families, SMs × resident CTAs (1–2 by shared
  memory) otherwise; compute = Σ tile work / (rate · e_family · wave efficiency),
  wave efficiency T / (⌈T/slots⌉·slots). Each wave also pays the family's non-overlapped
  per-tile time ``tile_s`` (first dependent loads, output store): ⌈T/slots⌉·t_tile.
- **Memory.** :meth:`Attention.flash_bytes` (Q once, O once, K/V once per query tile that
  misses L2) + split partials, at the bandwidth the active CTAs can pull (or from L2 for a
  warm repeated call).
- **Kernels.** The main kernel, the combine kernel when split; for the paged-KV entry point
  in decode with G > 1, two layout copies (Q in, O out).

latency = overlap(compute, memory) + ⌈T/slots⌉·t_tile + kernels·t_kernel.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from perfmodel.dtypes import bytes_per_element
from perfmodel.ops.attention import Attention
from perfmodel.ops.cost import Array
from perfmodel.timing.constants import Constants
from perfmodel.timing.core import Env, overlap, stream_time
from perfmodel.timing.kernels import (
    OVERLAPPED_SOFTMAX,
    AttentionFamily,
    attention_family,
    attn_constant,
    tile_efficiency,
)
from perfmodel.timing.knobs import Knobs

__all__ = ["auto_splits", "resolve_impl", "time_flash"]

#: Rows of an MMA instruction: a query tile is padded to a multiple of this.
_MMA_ROWS = 16.0


def resolve_impl(op: Attention, k: Knobs) -> str:
    """The concrete kernel family: ``flash`` becomes the family native to the architecture."""
    return k.family.flash_impl if op.impl == "flash" else op.impl


def auto_splits(base_ctas: Array, seq_kv: Array, units: int, max_splits: int = 64,
                kv_block: float = 256.0) -> Array:
    """Split-KV factor: 1 if the base CTAs fill 80 % of the units; else the smallest s
    whose wave efficiency x/⌈x⌉ (x = CTAs·s/U) reaches 85 % of the best over
    s ≤ min(max_splits, ⌈S_kv/kv_block⌉)."""
    base_ctas, seq_kv = np.broadcast_arrays(np.asarray(base_ctas, dtype=np.float64),
                                            np.asarray(seq_kv, dtype=np.float64))
    s = np.arange(1.0, max_splits + 1.0).reshape((-1,) + (1,) * base_ctas.ndim)
    allowed = s <= np.maximum(np.ceil(seq_kv / kv_block), 1.0)
    x = base_ctas * s / units
    eff = np.where(allowed, x / np.ceil(x), 0.0)
    best = np.max(eff, axis=0)
    ok = eff >= 0.85 * best
    first = np.argmax(ok, axis=0) + 1.0
    return np.asarray(np.where(base_ctas >= 0.8 * units, 1.0, first), dtype=np.float64)


def _tiles(fam: AttentionFamily, arch: str, d: Array, dv: Array, s: float,
           smem: float) -> tuple[Array, Array]:
    """(query rows, keys) per tile for each head dim: the family's rule for the
    architecture (an architecture-agnostic rule halves its rows where shared memory cannot
    hold Q and two K/V tiles), else 128×128 halved likewise."""
    dims = np.asarray(d, dtype=np.float64)
    q = np.full(dims.shape, 128.0)
    kv = np.full(dims.shape, 128.0)
    for val in np.unique(dims):
        rule = fam.tile(arch, float(val))
        if rule is None:
            kv_v = 128.0
            q_v = 128.0 if (128.0 * val + 2.0 * kv_v * (val + val)) * s <= smem else 64.0
        else:
            q_v, kv_v = rule
            if not fam.arch_tiles and (q_v * val + 2.0 * kv_v * (val + val)) * s > smem:
                # an architecture-agnostic rule: the kernel's smaller-SRAM variant
                q_v = q_v / 2.0
        sel = dims == val
        q = np.where(sel, q_v, q)
        kv = np.where(sel, kv_v, kv)
    del dv
    return q, kv


def _pack_pays(seq_q: Any, group: Any, q_t: Any) -> Any:
    """FlashAttention-3's rule (hopper/heuristics.h ``should_pack_gqa``): pack the G query
    heads of a KV head into the rows of one tile when the row tiles would be filled less
    than 0.9× as well without packing, fill(r) = r / (q_t·⌈r/q_t⌉). (Its variable-length
    entry point, which vLLM and SGLang call, packs whenever G > 1; on AIConfigurator's H100
    rows that scored the same or worse, so one rule is kept.)"""
    def fill(r: Any) -> Any:
        return r / (q_t * np.ceil(r / q_t))
    return (group > 1) & (fill(seq_q) < 0.9 * fill(seq_q * group))


def time_flash(op: Attention, k: Knobs, env: Env, consts: Constants) -> dict[str, Any]:
    """Timing of a fused attention kernel of ``op``'s family (see the module doc)."""
    impl = resolve_impl(op, k)
    fam = attention_family(impl)
    arch = k.arch
    s = bytes_per_element(op.dtype)
    d, dv = op.head_dim, op.value_dim
    smem = k.smem_per_unit
    q_t, kv_t = _tiles(fam, arch, d, dv, s, smem)
    need = (q_t * d + 2.0 * kv_t * (d + dv)) * s
    per_unit = 1.0 if fam.persistent else np.clip(np.floor(smem / need), 1.0, 2.0)
    slots = k.units * per_unit

    group = op.heads / op.kv_heads
    if fam.pack_gqa == "short":
        packed = op.seq_q * group <= q_t
    elif fam.pack_gqa == "efficiency":
        packed = _pack_pays(op.seq_q, group, q_t)
    elif fam.pack_gqa == "decode":
        packed = (op.seq_q == 1) & (group <= 64)
    else:
        packed = np.zeros(np.shape(op.seq_q), dtype=bool)
    fallback = group > fam.max_group  # the family's unpacked, unsplit fallback kernel
    packed = packed & ~fallback
    rows = np.where(packed, op.seq_q * group, op.seq_q)
    q_eff = np.minimum(q_t, _MMA_ROWS * np.ceil(rows / _MMA_ROWS))
    q_tiles = np.ceil(rows / q_eff)
    heads_u = np.where(packed, op.kv_heads, op.heads)
    base = op.batch * heads_u * q_tiles
    if op.num_splits not in ("auto", "gqa"):
        splits = np.full(np.shape(base), float(op.num_splits))
    elif fam.split_kv == "auto":
        splits = np.minimum(auto_splits(base, op.seq_kv, k.units), fam.max_splits)
        if op.num_splits == "gqa":
            splits = np.where(packed & (group > 1), splits, 1.0)
        splits = np.where(fallback, 1.0, splits)
        if op.kv_dtype == "fp8" and arch in fam.fp8_unsplit:
            splits = np.ones(np.shape(base))
    else:
        splits = np.ones(np.shape(base))
    splits = np.minimum(splits, np.maximum(np.ceil(op.seq_kv / 64.0), 1.0))
    tiles = base * splits

    # keys each query row visits (causal: with the whole diagonal tiles), per split
    pairs_row = op.computed_pairs(q_t, kv_t) / op.seq_q
    paged_rate = np.ones(())
    if impl == "paged":  # the paged kernel computes the whole rectangle in prefill
        prefill = ~packed
        pairs_row = np.where(prefill, op.seq_kv, pairs_row)
        paged_rate = np.where(prefill, k.paged_prefill_efficiency, 1.0)
    keys = pairs_row / splits
    k_pad = kv_t * np.ceil(keys / kv_t)
    tile_pairs = q_eff * k_pad
    all_pairs = tiles * tile_pairs

    fp8 = op.dtype == "fp8"
    eng = env.engine
    eff = attn_constant(impl, "fp8_efficiency" if fp8 else "efficiency", arch, consts, eng)
    eff = eff * tile_efficiency(q_t, kv_t)
    t_tensor = 2.0 * all_pairs * (d + dv) / (k.rate * k.attention_efficiency * eff * paged_rate)
    t_soft = all_pairs * (1.0 / k.sfu_rate + k.family.softmax_vector_ops / k.vector_op_rate)
    if op.kv_dtype == "fp8" and not fp8:
        # the bf16 kernel converts every K/V element it loads
        loaded = tiles * k_pad * (d + dv) * np.where(packed, 1.0, 1.0 / group)
        t_soft = t_soft + loaded * attn_constant(impl, "dequant_ops", arch, consts) \
            / k.vector_op_rate
    ov = k.fa3_softmax_overlap if impl in OVERLAPPED_SOFTMAX else k.softmax_overlap
    compute_raw = np.maximum(t_tensor, t_soft) + (1.0 - ov) * np.minimum(t_tensor, t_soft)
    waves = np.ceil(tiles / slots)
    wave_eff = tiles / (waves * slots)
    compute = compute_raw / wave_eff

    heads_in_flight = np.maximum(slots / np.maximum(base / (op.batch * op.heads), 1.0), 1.0)
    traffic = op.flash_bytes(q_t, heads_in_flight, k.l2_bytes)
    partial = np.where(splits > 1, 2.0 * op.batch * op.heads * op.seq_q * splits * (dv + 2.0)
                       * 4.0, 0.0)
    # the fallback kernel of an over-large group reads each KV head once per query head
    traffic = traffic + np.where(fallback, (group - 1.0) * op.kv_bytes(), 0.0) + partial
    footprint = op.bytes_min() * env.copies
    k_attn = replace(k, cta_bandwidth=attn_constant(impl, "cta_bandwidth", arch, consts))
    memory = stream_time(traffic, footprint, k_attn, env, ctas=np.minimum(tiles, slots))
    launches = np.where(splits > 1, 2.0, 1.0)
    if impl == "paged":
        # the KV-cache entry point packs the G query heads of a group into the row dimension
        # for decode: Q is transposed into that layout and O back, two extra copy kernels
        launches = launches + np.where(packed & (group > 1), 2.0, 0.0)
    tile_s = np.where(op.seq_q == 1, attn_constant(impl, "decode_tile_s", arch, consts, eng),
                      attn_constant(impl, "tile_s", arch, consts, eng))
    overhead = launches * env.kernel_s + waves * tile_s
    latency = overlap(compute, memory, k.overlap_p) + overhead
    shape = op.shape

    def full(x: Any) -> Array:
        return np.asarray(np.broadcast_to(np.asarray(x, dtype=np.float64), shape))

    return {
        "latency_s": full(latency), "compute_s": full(compute), "memory_s": full(memory),
        "overhead_s": full(overhead), "bytes": full(traffic), "launches": full(launches),
        "q_tile": full(q_eff), "splits": full(splits), "ctas": full(tiles), "impl": impl,
        "useful_flops": full(op.flops()),
    }
