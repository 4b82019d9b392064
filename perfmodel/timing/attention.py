"""Fused (flash) attention timing: prefill, chunked prefill and decode.

Kernel model (FA2/FA3-class):

- Query tile q_t from SRAM: 128 rows if (128·D + 2·64·(D + D_v))·s fits in shared memory per
  SM, else 64; key tile 128 for D ≤ 64, else 64. CTAs resident per SM: 1–2 by SRAM.
- Work units: B·H_q·⌈S_q/q_t⌉ CTAs. For decode (FA2: S_q = 1; FA3: S_q·H_q/H_kv ≤ 64)
  the G = H_q/H_kv query heads of a group are packed into one 64-row tile, giving B·H_kv CTAs;
  the matrix and softmax work then runs on the whole padded tile (64/(G·S_q) times the
  useful work), which is what makes batch-1 decode slow per CTA. In prefill the last query
  tile is likewise padded to q_t rows.
- Split-KV: ``num_splits`` (or, for ``"auto"``, the smallest split that fills the device to
  85 % of the best wave efficiency, as FlashAttention's heuristic does) multiplies CTAs and
  adds a combine kernel and fp32 partial outputs.
- Compute: tensor time 2·B·H_q·pairs_c·(D + D_v) / (R·e_attn), pairs_c including the whole
  diagonal tiles under a causal mask (the paged-KV kernel in prefill computes the whole
  S_q×S_kv rectangle at ``paged_prefill_efficiency`` of the rate); softmax time
  B·H_q·pairs_c·(1/R_sfu + v/R_vec) with v vector ops per pair. FA2-class kernels serialise
  the two, FA3-class overlap them (``softmax_overlap``). Divided by the wave efficiency
  CTAs / (⌈CTAs/slots⌉·slots).
- Memory: :meth:`Attention.flash_bytes` at the bandwidth min(1, CTAs·c/U) of the achievable.
- Launches: the main kernel, a combine kernel when split, and for the paged-KV entry point in
  decode with G > 1 two layout copies (Q into the packed layout, O back).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfmodel.dtypes import bytes_per_element
from perfmodel.ops.attention import Attention
from perfmodel.ops.cost import Array
from perfmodel.timing.core import memory_time, overlap
from perfmodel.timing.knobs import Knobs

__all__ = ["auto_splits", "resolve_impl", "time_flash"]

#: Query rows per tile of the split-KV / KV-cache decode kernels (FlashAttention uses 64).
_DECODE_TILE = 64.0


def resolve_impl(op: Attention, k: Knobs) -> str:
    """The concrete kernel path: ``flash`` becomes the family's native fused kernel."""
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


def time_flash(op: Attention, k: Knobs) -> dict[str, Any]:
    """Timing of the fused kernel paths (flash2, flash3, paged)."""
    impl = resolve_impl(op, k)
    s = bytes_per_element(op.dtype)
    d, dv = op.head_dim, op.value_dim
    smem = k.smem_per_unit
    need128 = (128.0 * d + 2.0 * 64.0 * (d + dv)) * s
    q_tile = np.where(need128 <= smem, 128.0, 64.0)
    k_tile = np.where(d <= 64, 128.0, 64.0)
    need = (q_tile * d + 2.0 * k_tile * (d + dv)) * s
    per_unit = np.clip(np.floor(smem / need), 1.0, 2.0)
    slots = k.units * per_unit

    group = op.heads / op.kv_heads
    # FA2's KV-cache path packs a group's query heads only for a single query token; FA3
    # packs whenever the group's rows fit one tile
    if impl == "flash3":
        packed = op.seq_q * group <= _DECODE_TILE
    else:
        packed = (op.seq_q == 1) & (group <= _DECODE_TILE)
    q_tile = np.where(packed, _DECODE_TILE, q_tile)
    base = np.where(packed, op.batch * op.kv_heads,
                    op.batch * op.heads * np.ceil(op.seq_q / q_tile))
    if op.num_splits == "auto":
        splits = auto_splits(base, op.seq_kv, k.units)
    else:
        splits = np.full(np.shape(base), float(op.num_splits))
    splits = np.minimum(splits, np.maximum(np.ceil(op.seq_kv / 64.0), 1.0))
    ctas = base * splits

    prefill = ~packed
    if impl == "paged":
        rect = op.seq_q * op.seq_kv
        pairs_c = np.where(prefill, rect, op.computed_pairs(q_tile, k_tile))
        paged_rate = np.where(prefill, k.paged_prefill_efficiency, 1.0)
    else:
        pairs_c = op.computed_pairs(q_tile, k_tile)
        paged_rate = np.ones(())
    # decode packs G·S_q query rows into one tile: the MMA and softmax run on whole tiles
    # in prefill a partly filled last query tile costs a whole tile
    rows_eff = np.where(packed, q_tile / np.maximum(group * op.seq_q, 1.0),
                        np.ceil(op.seq_q / q_tile) * q_tile / op.seq_q)
    bh_pairs = op.batch * op.heads * pairs_c * rows_eff
    t_tensor = 2.0 * bh_pairs * (d + dv) / (k.rate * k.attention_efficiency * paged_rate)
    t_soft = bh_pairs * (1.0 / k.sfu_rate + k.family.softmax_vector_ops / k.vector_op_rate)
    ov = k.fa3_softmax_overlap if impl == "flash3" else k.softmax_overlap
    compute_raw = np.maximum(t_tensor, t_soft) + (1.0 - ov) * np.minimum(t_tensor, t_soft)
    waves = np.ceil(ctas / slots)
    wave_eff = ctas / (waves * slots)
    compute = compute_raw / wave_eff

    heads_in_flight = np.maximum(slots / np.maximum(base / (op.batch * op.heads), 1.0), 1.0)
    traffic = op.flash_bytes(q_tile, heads_in_flight, k.l2_bytes)
    partial = np.where(splits > 1, 2.0 * op.batch * op.heads * op.seq_q * splits * (dv + 2.0)
                       * 4.0, 0.0)
    traffic = traffic + partial
    memory = memory_time(traffic, k, ctas=np.minimum(ctas, slots))
    launches = np.where(splits > 1, 2.0, 1.0)
    if impl == "paged":
        # the KV-cache entry point packs the G query heads of a group into the row dimension
        # for decode: Q is transposed into that layout and O back, two extra copy kernels
        launches = launches + np.where(packed & (group > 1), 2.0, 0.0)
    overhead = launches * k.overhead_s
    latency = overlap(compute, memory, k.overlap_p) + overhead
    shape = op.shape

    def full(x: Any) -> Array:
        return np.asarray(np.broadcast_to(np.asarray(x, dtype=np.float64), shape))

    return {
        "latency_s": full(latency), "compute_s": full(compute), "memory_s": full(memory),
        "overhead_s": full(overhead), "bytes": full(traffic), "launches": full(launches),
        "q_tile": full(q_tile), "splits": full(splits), "ctas": full(ctas), "impl": impl,
        "useful_flops": full(op.flops()),
    }
