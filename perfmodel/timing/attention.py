"""Fused attention timing: prefill, chunked prefill and decode, per kernel family.

Kernel model (the family's traits: :mod:`perfmodel.timing.kernels`):

- **Tiles.** Query tile q_t rows (the family's, 128 for head dims ≤ 128; 64 where shared
  memory cannot hold Q plus the family's K/V tiles; a call through a paged KV cache may run
  another kernel of the family, with its own tiles: FlashAttention-2's split-KV kernel,
  64 rows). Packed GQA (decode, or short queries for
  FA3-class kernels) puts the G = H_q/H_kv query heads of a KV head into one tile's rows:
  a head unit then has R = G·S_q rows, else R = S_q per query head. Tiles are padded to the
  MMA granularity (16 rows): q_eff = min(q_t, 16·⌈R/16⌉). Work tiles:
  T₀ = B·H_u·⌈R/q_eff⌉, H_u = H_kv packed, H_q otherwise.
- **CUDA-core decode** (FlashInfer, when the caller asks for it: a one-token query over a
  16-bit cache with G < ``tensor_core_min_group``): one CTA per (sequence, KV head) with
  q_eff = G rows (no MMA padding), 32-key steps, the dot products as fp32 FMAs, and as many
  resident CTAs as its shared memory allows (at most 4).
- **Split-KV** (``auto`` families): when T₀ does not fill the device, the keys are split
  over s CTAs (the smallest s reaching 85 % of the best wave efficiency, as FlashAttention
  chooses), plus a combine kernel and fp32 partial outputs: T = T₀·s tiles. TensorRT-LLM's
  XQA (``trtllm`` families) splits by its own multi-block rule instead
  (:func:`trtllm_multi_block`).
- **Work per tile.** Keys a tile visits k̄ = computed pairs per row / s (causal: with the
  whole diagonal tiles), padded to the key tile: k_pad = kv_t·⌈k̄/kv_t⌉. Matrix FLOPs
  2·q_eff·k_pad·(D + D_v) per tile; softmax q_eff·k_pad exponentials (special-function
  unit) and v vector ops; FA2-class kernels serialise softmax and MMA, FA3-class overlap
  them (``softmax_overlap``). An fp8 KV cache read by a bf16 kernel costs ``dequant_ops``
  vector operations per loaded element.
- **Scheduling.** Slots = SMs for persistent families, SMs × resident CTAs otherwise (1–2
  by the shared memory of Q and the family's K/V stages, :func:`_tile_smem`; a family
  whose launch fixes it, ``resident`` r: r per SM once the base CTAs number r·SMs, else
  r/⌈r·SMs/base⌉ larger CTAs); compute = Σ tile work / (rate · e_family · wave
  efficiency), and a call of p > 1 resident CTAs per SM with no more tiles than SMs runs
  each tile alone at ``attn.lone_cta_share`` c of its SM (× 1/(p·c); a decode tile at
  ``attn.lone_decode_share``), with
  e_family × the architecture's ``sync_mma_fraction`` for kernels written for Ampere
  (synchronous MMA) on Hopper and Blackwell, and on a device that runs its SM design's
  tensor units at a share c < 1 of their rate (H20, GeForce FP32 accumulate) e → max(e,
  min(e/c, 1)) (:func:`perfmodel.timing.core.share_limited_efficiency`),
  wave efficiency T / (⌈T/slots⌉·slots), and never less than the longest CTA alone on its
  slot: under a causal mask the last query tile of a split visits all its keys, k_last =
  kv_t·⌈S_kv/(s·kv_t)⌉, r = k_last/k_pad times the average tile's work, so compute ≥
  r·compute_raw·slots/T (one wave of causal tiles takes as long as the unmasked call).
  With more causal tiles than slots, a family whose tiles start in launch order, each
  sequence's shortest first (``causal_order`` ``in_order``), ends about when its last
  tile, a longest one, started halfway through the others' work ends: compute ≥
  compute_raw + longest − mean/2, mean = compute_raw·slots/T (greedy list scheduling's
  bound is compute_raw + longest; exact simulations of the dispatch over 1-40 waves fall
  within 0.95-1.17 of the rule, median 1.00-1.07 by waves). Each
  wave also pays the family's non-overlapped
  per-tile time t_tile (first dependent loads, output store): ``tile_s`` (``decode_tile_s``
  for one-token decode kernels) × (1 − w + w·(D + D_v)/256), the share w
  (``attn.tile_dim_share``) being per-element work on the Q tile and the output; a decode
  tile's also × (1 − u + u·R/8), the share u (``attn.decode_row_share``) being work per
  query row it holds (their Q load, their output rows' rescale and store; decode_tile_s
  is an 8-row tile's). A family's pipeline hides the share h of it (``tile_overlap``,
  ``decode_tile_overlap`` for its decode kernels; persistent families, 0 for the others)
  for every tile an SM runs after its first, leaving
  t_later = (⌈T/slots⌉ − 1)·(1 − h)·t_tile. In a persistent (warp-specialised) kernel
  that is the consumer warps' work, as the matrix work is, while the producer warps stream
  the next tile's K/V: it adds to compute and overlaps memory. A resident kernel's waves
  add theirs to both.
- **Memory.** :func:`perfmodel.ops.attention.flash_bytes` (Q once, O once, K/V once per query
  tile that misses L2) + split partials, at the bandwidth the active CTAs can pull (or from
  L2 for a warm repeated call, whose footprint is copies·(K/V + O) + Q, copies·Q where the
  harness rotates its inputs too).
- **Kernels.** The main kernel, the combine kernel when split; for the paged-KV entry point
  in decode with G > 1, two layout copies (Q in, O out).

latency = overlap(compute + t_later, memory) + t_tile + kernels·t_kernel (persistent),
latency = overlap(compute, memory) + t_later + t_tile + kernels·t_kernel (resident).

One formula (:func:`_flash`) runs on plain floats for one shape (the scalar fast path) and
on numpy arrays for many; both give the same numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._xp import SCALAR, VECTOR, Ops
from perfmodel.dtypes import bytes_per_element
from perfmodel.engines import FA_MAX_HEAD_DIM, trtllm_history_blocks
from perfmodel.ops.attention import (
    Attention,
    computed_pairs,
    flash_bytes,
    kv_bytes,
    o_bytes,
    pairs,
    q_bytes,
)
from perfmodel.ops.cost import Array
from perfmodel.timing.constants import Constants
from perfmodel.timing.core import Env, overlap, share_limited_efficiency, stream_time
from perfmodel.timing.kernels import (
    ATTENTION_FAMILIES,
    OVERLAPPED_SOFTMAX,
    AttentionFamily,
    attention_family,
    attn_constant,
    decode_rows_scale,
    tile_efficiency,
    tile_time_scale,
)
from perfmodel.timing.knobs import Knobs

__all__ = ["auto_splits", "resolve_impl", "time_flash"]

#: Rows of an MMA instruction: a query tile is padded to a multiple of this.
_MMA_ROWS = 16.0
#: Shape fields of an attention op, in the order :func:`_flash` takes them.
_SHAPE = ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "value_dim")


def _wide_heads(op: Attention) -> bool:
    """Whether every row's head (query/key or value) is wider than FlashAttention-2/3's
    widest (:data:`perfmodel.engines.FA_MAX_HEAD_DIM`); a call mixing such rows with
    narrower ones is an error (they run different kernels)."""
    hd, vd = op.head_dim, op.value_dim
    if type(hd) is float and type(vd) is float:
        return max(hd, vd) > FA_MAX_HEAD_DIM
    wide = np.maximum(np.asarray(hd), np.asarray(vd)) > FA_MAX_HEAD_DIM
    if wide.all():
        return True
    if wide.any():
        raise PerfmodelError("head_dim", "one call mixes heads up to and over 256 wide under "
                             "impl='flash' (FlashAttention for the first, PyTorch's "
                             "memory-efficient kernel for the others)",
                             "predict them in separate calls, or name the kernel (impl=...)")
    return False


def resolve_impl(op: Attention, k: Knobs) -> str:
    """The concrete kernel family: ``flash`` becomes the family native to the architecture
    (PyTorch's memory-efficient kernel where that is FlashAttention-2 or -3 and a head is
    wider than their :data:`FA_MAX_HEAD_DIM`, as PyTorch's SDPA chooses), and a family built
    as another one on this architecture becomes that one (``AttentionFamily.built_as``:
    TensorRT-LLM's ``fmha-v2`` on Hopper is ``fmha-v2-sm90``)."""
    if op.impl == "flash":
        native = k.family.flash_impl
        if native in ("flash2", "flash3") and _wide_heads(op):
            return "mem-efficient"
        return native
    fam = ATTENTION_FAMILIES.get(op.impl)
    if fam is not None:
        for arch, other in fam.built_as:
            if arch == k.arch:
                return other
    return op.impl


def auto_splits(base_ctas: Any, seq_kv: Any, units: int, max_splits: int = 64,
                kv_block: Any = 256.0) -> Any:
    """Split-KV factor: 1 if the base CTAs fill 80 % of the units; else the smallest s
    whose wave efficiency x/⌈x⌉ (x = CTAs·s/U) reaches 85 % of the best over
    s ≤ min(max_splits, ⌈S_kv/kv_block⌉). A float for float inputs, else an array."""
    if type(base_ctas) is float and type(seq_kv) is float:
        return _auto_splits_one(base_ctas, seq_kv, units, max_splits, kv_block)
    base_ctas, seq_kv, block = np.broadcast_arrays(
        np.asarray(base_ctas, dtype=np.float64), np.asarray(seq_kv, dtype=np.float64),
        np.asarray(kv_block, dtype=np.float64))
    out = np.ones(base_ctas.shape)
    short = base_ctas < 0.8 * units
    if not short.any():
        return out
    # the choice depends on (CTAs, most splits the keys allow) alone: search each distinct
    # pair once (a sweep has few), every s at once
    limit = np.minimum(np.maximum(np.ceil(seq_kv[short] / block[short]), 1.0),
                       float(max_splits))
    pairs, inverse = np.unique(np.stack([base_ctas[short], limit]), axis=1,
                               return_inverse=True)
    s = np.arange(1.0, max_splits + 1.0)[:, None]
    x = pairs[0] * s / units
    eff = np.where(s <= pairs[1], x / np.ceil(x), 0.0)
    first = np.argmax(eff >= 0.85 * np.max(eff, axis=0), axis=0) + 1.0
    out[short] = first[inverse.reshape(-1)]
    return out


@functools.lru_cache(maxsize=4096)
def _auto_splits_one(base_ctas: float, seq_kv: float, units: int, max_splits: int,
                     kv_block: float) -> float:
    """:func:`auto_splits` of one shape (the same expressions, one s at a time)."""
    if base_ctas >= 0.8 * units:
        return 1.0
    limit = max(float(math.ceil(seq_kv / kv_block)), 1.0)
    effs = []
    for i in range(1, max_splits + 1):
        s = float(i)
        x = base_ctas * s / units
        effs.append(x / math.ceil(x) if s <= limit else 0.0)
    best = max(effs)
    return float(next(i for i, e in enumerate(effs, 1) if e >= 0.85 * best))


#: TensorRT-LLM's multi-block constants (decoderXQAConstants.h; keys per block at least:
#: :func:`perfmodel.engines.trtllm_history_blocks`, which its dispatch uses too): waves of
#: CTAs at most, sub-sequences its workspace holds.
TRTLLM_TARGET_WAVES = 8.0
TRTLLM_MAX_SUB_SEQ = 6000.0
#: TensorRT-LLM's masked-MHA launch (decoderMaskedMultiheadAttentionLaunch.h): CTAs of 256
#: threads (resident per SM as the ``mmha`` family's ``resident`` says), widened to 512 or
#: 1024 threads when there are fewer; a multi-block CTA takes whole key loops of 8 keys per
#: value thread group; shared memory holds 24 bytes per 4 keys of a block's logits (16-bit
#: types: estimate_min_multi_block_count), with 2 KiB kept back, of the opt-in maximum (the
#: SM's shared memory less the 1 KiB the driver reserves per CTA).
MMHA_THREADS = 256.0
MMHA_KEYS_PER_THREAD_GROUP = 8.0
MMHA_LOGIT_BYTES_PER_4_KEYS = 24.0
MMHA_SMEM_KEPT = 2048.0 + 1024.0


def trtllm_multi_block(base_ctas: Any, seq_kv: Any, batch: Any, units: int,
                       ops: Ops = VECTOR) -> Any:
    """Blocks per (sequence, KV head) that TensorRT-LLM's XQA multi-block mode launches
    (``computeMultiBlockCount``, decoderXQAImplCommon): n₀ = max(⌊S_kv/128⌋, 1) keys of
    history per block at least, n₁ = min(n₀, round(√(8·n₀))) so that the combine does not
    dominate, then scaled down to at most 8 waves, n₂ = ⌊n₁/(w/8)⌋ where
    w = CTAs·n₁/SMs > 8, and at most 6000 sub-sequences in its workspace,
    n = max(min(n₂, ⌊6000/B⌋), 1). ``base_ctas``: the CTAs of one block per (sequence, KV
    head)."""
    n0 = trtllm_history_blocks(seq_kv, ops)
    # C++ std::round rounds halves away from zero; √(8·n) is never a half for integer n
    n1 = ops.minimum(n0, ops.round(ops.sqrt(8.0 * n0)))
    waves = base_ctas * n1 / units
    n2 = ops.where(waves > TRTLLM_TARGET_WAVES,
                   ops.floor(n1 * TRTLLM_TARGET_WAVES / ops.maximum(waves, 1e-30)), n1)
    return ops.maximum(ops.minimum(n2, ops.floor(TRTLLM_MAX_SUB_SEQ / batch)), 1.0)


def trtllm_mmha_blocks(base_ctas: Any, seq_kv: Any, d: Any, units: int, smem: float,
                       ops: Ops = VECTOR) -> Any:
    """Blocks per (sequence, query head) that TensorRT-LLM's masked-MHA kernel launches in
    multi-block mode (its default; decoderMaskedMultiheadAttentionLaunch.h
    ``multi_block_grid_setup``, the attention op's ``getMaxNumSeqLenTile`` and
    ``estimate_min_multi_block_count``), for ``base_ctas`` = B·H (sequences × query heads)
    and S = ``seq_kv`` keys:

    - threads per CTA: t = 256·min(⌈r·U/(B·H)⌉, r), launched as 256 below 512, 512 below
      1024, else 1024 (U SMs, r = 4 CTAs of 256 threads resident per SM, the family's
      ``resident``: the same 32 warps per SM whatever the CTA size);
    - keys per loop of a CTA: K = ⌈t/v⌉·8, v = D'·2/16 threads per value (D' the head dim
      rounded up to a power of two, 16-byte loads of 16-bit values);
    - at most ⌈U/(B·H)⌉ blocks (one wave of the largest CTAs), at least
      m₀ = max(1, ⌈⌈S/4⌉ / ⌊(smem − 3 KiB)/24⌋⌉), as the block's logits must fit its shared
      memory;
    - blocks = max(m₀, min(⌈S/K⌉, ⌈U/(B·H)⌉)).

    Its partial results are merged by the last block of each (sequence, head) inside the
    same kernel (no combine kernel)."""
    resident = attention_family("mmha").resident
    factor = ops.minimum(ops.ceil(resident * units / base_ctas), resident)
    wide = MMHA_THREADS * factor
    threads = ops.where(wide < 512.0, 256.0, ops.where(wide < 1024.0, 512.0, 1024.0))
    d_max = ops.where(d <= 32.0, 32.0, ops.where(d <= 64.0, 64.0,
                                                 ops.where(d <= 128.0, 128.0, 256.0)))
    per_loop = ops.ceil(threads / (d_max * 2.0 / 16.0)) * MMHA_KEYS_PER_THREAD_GROUP
    most = ops.ceil(units / base_ctas)
    groups = math.floor((smem - MMHA_SMEM_KEPT) / MMHA_LOGIT_BYTES_PER_4_KEYS)
    least = ops.maximum(ops.ceil(ops.ceil(seq_kv / 4.0) / max(groups, 1)), 1.0)
    return ops.maximum(least, ops.minimum(ops.ceil(seq_kv / per_loop), most))


def _tile_smem(fam: AttentionFamily, q: Any, kv: Any, d: Any, dv: Any, s: float) -> Any:
    """Bytes of shared memory a CTA of a q×kv tile holds: the query tile and
    :attr:`~perfmodel.timing.kernels.AttentionFamily.kv_stages` K/V tiles,
    (q·D + stages·kv·(D + D_v))·s (or the family's
    :attr:`~perfmodel.timing.kernels.AttentionFamily.residency_keys` in place of
    stages·kv)."""
    keys = fam.residency_keys if fam.residency_keys else fam.kv_stages * kv
    return (q * d + keys * (d + dv)) * s


def _tile_rule(fam: AttentionFamily, arch: str, d: float, s: float, smem: float,
               paged: bool = False) -> tuple[float, float]:
    """(query rows, keys) per tile for head dim ``d``: the family's rule for the
    architecture (an architecture-agnostic rule halves its rows where shared memory cannot
    hold the query tile and its K/V tiles, :func:`_tile_smem`), else 128×128 halved
    likewise; ``paged``: a call through a paged KV cache."""
    rule = fam.tile(arch, d, s, paged)
    if rule is None:
        kv = 128.0
        return (128.0 if _tile_smem(fam, 128.0, kv, d, d, s) <= smem else 64.0), kv
    q, kv = rule
    if not fam.arch_tiles and _tile_smem(fam, q, kv, d, d, s) > smem:
        q = q / 2.0  # an architecture-agnostic rule: the kernel's smaller-SRAM variant
    return q, kv


def _tiles(fam: AttentionFamily, arch: str, d: Any, s: float, smem: float,
           paged: bool = False) -> tuple[Any, Any]:
    """:func:`_tile_rule` for a head dim or an array of them."""
    if type(d) is float:
        return _tile_rule(fam, arch, d, s, smem, paged)
    dims = np.asarray(d, dtype=np.float64)
    q = np.full(dims.shape, 128.0)
    kv = np.full(dims.shape, 128.0)
    for val in np.unique(dims):
        q_v, kv_v = _tile_rule(fam, arch, float(val), s, smem, paged)
        sel = dims == val
        q = np.where(sel, q_v, q)
        kv = np.where(sel, kv_v, kv)
    return q, kv


def _fp8_efficiency(fam: AttentionFamily, impl: str, arch: str, d: Any, consts: Constants,
                    engine: str) -> tuple[Any, str]:
    """The fp8 rate of the kernel build each head dim runs (a family's
    :attr:`~perfmodel.timing.kernels.AttentionFamily.fp8_builds`; one rate where it has
    none on ``arch``), for a head dim or an array of them, and the builds run,
    comma-separated in head-dim order ("" for one rate)."""
    if not fam.fp8_builds:
        return attn_constant(impl, "fp8_efficiency", arch, consts, engine), ""
    if type(d) is float:
        build = fam.fp8_build(arch, d)
        return attn_constant(impl, "fp8_efficiency", arch, consts, engine, build), build
    dims = np.asarray(d, dtype=np.float64)
    eff = np.empty(dims.shape)
    builds: dict[str, None] = {}
    for val in np.unique(dims):
        build = fam.fp8_build(arch, float(val))
        builds[build] = None
        eff[dims == val] = attn_constant(impl, "fp8_efficiency", arch, consts, engine, build)
    return eff, ",".join(b for b in builds if b)


#: Keys a CUDA-core decode CTA pads its last step to (FlashInfer: t·b_z, 32 for G = 1).
_CC_KEYS = 32.0
#: Most CUDA-core decode CTAs resident on one SM: 128-thread CTAs at an assumed 128
#: registers per thread fill a 64 K-register file four times (an assumption: the kernel's
#: register count is not published; the fit to AIConfigurator's L40S rows is the same
#: for caps of 4 and 8, since shared memory binds first at G = 1).
_CC_MAX_RESIDENT = 4.0


def _cuda_core_residency(d: Any, group: Any, s_kv: float, smem: float,
                         ops: Ops = VECTOR) -> Any:
    """Resident CTAs per SM of FlashInfer's CUDA-core decode kernel (decode.cuh): vectors
    of v = max(16/s, D/32) elements, b_x = D/v threads per head, b_y = G heads,
    max(128, b_x·G) threads, b_z = ⌊threads/(b_x·G)⌋ key groups, t = 4 keys per thread
    group at G = 1 (2 for an 8-bit cache), 1 otherwise; shared memory 2 stages × (K, V) ×
    t·G·b_z keys × D × s bytes; at most ``_CC_MAX_RESIDENT``."""
    vec = ops.maximum(16.0 / s_kv, d / 32.0)
    bdx = d / vec
    threads = ops.maximum(128.0, bdx * group)
    bdz = ops.maximum(ops.floor(threads / (bdx * group)), 1.0)
    keys = ops.where(group == 1.0, 4.0 if s_kv > 1.0 else 2.0, 1.0) * group * bdz
    need = 2.0 * 2.0 * keys * d * s_kv
    return ops.clip(ops.floor(smem / need), 1.0, _CC_MAX_RESIDENT)


def _pack_pays(seq_q: Any, group: Any, q_t: Any, ops: Ops = VECTOR) -> Any:
    """FlashAttention-3's rule (hopper/heuristics.h ``should_pack_gqa``): pack the G query
    heads of a KV head into the rows of one tile when the row tiles would be filled less
    than 0.9× as well without packing, fill(r) = r / (q_t·⌈r/q_t⌉). (Its variable-length
    entry point, which vLLM and SGLang call, packs whenever G > 1; on AIConfigurator's H100
    rows that scored the same or worse, so one rule is kept.)"""
    def fill(r: Any) -> Any:
        return r / (q_t * ops.ceil(r / q_t))
    return ops.where(group > 1, fill(seq_q) < 0.9 * fill(seq_q * group), False)


def _flash(ops: Ops, op: Attention, batch: Any, heads: Any, kv_heads: Any, seq_q: Any,
           seq_kv: Any, d: Any, dv: Any, copies: Any, k: Knobs, env: Env,
           consts: Constants) -> dict[str, Any]:
    """The kernel model of the module doc on floats (``SCALAR``) or arrays (``VECTOR``)."""
    impl = resolve_impl(op, k)
    fam = attention_family(impl)
    arch = k.arch
    s = bytes_per_element(op.dtype)
    s_kv = bytes_per_element(op.kv_dtype)
    smem = k.smem_per_unit
    # a call through a paged KV cache (an engine's, or the KV-cache entry point) may run
    # another kernel of the family (AttentionFamily.paged_tiles)
    q_t, kv_t = _tiles(fam, arch, d, s, smem, op.kv_write or impl == "paged")
    # elements of K and V a key brings in: both, or one latent vector (Attention.shared_kv);
    # residency counts K and V (a latent cache must not buy a CTA slot the same kernel over
    # K and V does not have)
    kv_width = kv_bytes(1.0, 1.0, 1.0, d, dv, 1.0, op.shared_kv)  # elements per key
    need = _tile_smem(fam, q_t, kv_t, d, dv, s)
    per_unit = 1.0 if fam.persistent else ops.clip(ops.floor(smem / need), 1.0, 2.0)

    group = heads / kv_heads
    never = ops.where(seq_q < 0, True, False)  # False as a bool of the shape
    cuda_cores = never
    if fam.cuda_core_decode and op.tensor_core_min_group > 0.0 and op.dtype != "fp8" \
            and op.kv_dtype != "fp8":
        cuda_cores = ops.where(seq_q == 1, group < op.tensor_core_min_group, False)
        per_unit = ops.where(cuda_cores, _cuda_core_residency(d, group, s_kv, smem, ops),
                             per_unit)
        kv_t = ops.where(cuda_cores, _CC_KEYS, kv_t)
    slots = k.units * per_unit
    # a prefill call of a family with a context kernel of its own runs that kernel, which
    # does not pack heads, even for one-token prompts
    context_kernel = op.phase == "prefill" and not fam.prefill_packs
    decode_kernel = never if context_kernel else seq_q == 1
    if context_kernel:
        packed = never
    elif fam.pack_gqa == "short":
        packed = seq_q * group <= q_t
    elif fam.pack_gqa == "efficiency":
        packed = _pack_pays(seq_q, group, q_t, ops)
    elif fam.pack_gqa == "decode":
        packed = seq_q == 1
    elif fam.pack_gqa == "always":
        packed = ops.where(seq_q < 0, False, True)
    else:
        packed = never
    fallback = group > fam.max_group  # the family's unpacked, unsplit fallback kernel
    packed = ops.where(fallback, False, packed)
    rows = ops.where(packed, seq_q * group, seq_q)
    # tensor-core tiles pad rows to the MMA granularity, or to the family's smallest query
    # tile where that is larger; the CUDA-core kernel does not pad
    padded = ops.maximum(_MMA_ROWS * ops.ceil(rows / _MMA_ROWS), fam.min_rows)
    q_eff = ops.where(cuda_cores, rows, ops.minimum(q_t, padded))
    q_tiles = ops.ceil(rows / q_eff)
    heads_u = ops.where(packed, kv_heads, heads)
    base = batch * heads_u * q_tiles
    if fam.resident:
        # the launch keeps an SM's warps: r CTAs of the base size per SM once the base CTAs
        # number r·U or more, else CTAs f = min(⌈r·U/base⌉, r) times larger, r/f per SM
        per_unit = fam.resident / ops.minimum(ops.ceil(fam.resident * k.units / base),
                                              fam.resident)
        slots = k.units * per_unit
    if op.num_splits not in ("auto", "gqa"):
        splits = 0.0 * base + float(op.num_splits)
    elif fam.split_kv in ("auto", "trtllm", "mmha") \
            and not (op.kv_dtype == "fp8" and arch in fam.fp8_unsplit):
        if fam.split_kv == "trtllm":
            splits = trtllm_multi_block(base, seq_kv, batch, k.units, ops)
        elif fam.split_kv == "mmha":
            splits = trtllm_mmha_blocks(base, seq_kv, d, k.units, smem, ops)
        else:
            splits = ops.minimum(auto_splits(base, seq_kv, int(k.units * fam.split_slots),
                                             max(64, int(fam.max_splits)),
                                             fam.split_keys(d, ops)),
                                 fam.max_splits)
        if op.num_splits == "gqa":
            splits = ops.where(packed, ops.where(group > 1, splits, 1.0), 1.0)
        splits = ops.where(fallback, 1.0, splits)
    else:
        splits = 0.0 * base + 1.0
    splits = ops.minimum(splits, ops.maximum(ops.ceil(seq_kv / 64.0), 1.0))
    tiles = base * splits

    # keys each query row visits (causal: with the whole diagonal tiles), per split
    pairs_row = computed_pairs(seq_q, seq_kv, op.causal, q_t, kv_t, ops) / seq_q
    paged_rate: Any = 1.0
    if impl == "paged":  # the paged kernel computes the whole rectangle in prefill
        pairs_row = ops.where(packed, pairs_row, seq_kv)
        paged_rate = ops.where(packed, 1.0, k.paged_prefill_efficiency)
    keys = pairs_row / splits
    k_pad = kv_t * ops.ceil(keys / kv_t)
    tile_pairs = q_eff * k_pad
    all_pairs = tiles * tile_pairs

    fp8 = op.dtype == "fp8"
    eng = env.engine
    eff, fp8_build = _fp8_efficiency(fam, impl, arch, d, consts, eng) if fp8 \
        else (attn_constant(impl, "efficiency", arch, consts, eng), "")
    eff = eff * tile_efficiency(q_t, kv_t, ops)
    if fam.sync_mma:  # an Ampere-style kernel: the synchronous MMA path's share of the peak
        eff = eff * k.family.sync_mma_fraction
    # on a device running its SM design's tensor units at a share of their rate, the losses
    # measured on full-rate parts (the rest of the SM) cost less of the device's own rate
    eff = share_limited_efficiency(k.attention_efficiency * eff * paged_rate, k.tensor_share,
                                   ops)
    t_tensor = 2.0 * all_pairs * (d + dv) / (k.rate * eff)
    # the CUDA-core kernel's dot products: all_pairs·(D + D_v) fused multiply-adds at the
    # fp32 FMA rate (the fp32 peak / 2 = vector_op_rate)
    t_tensor = ops.where(cuda_cores, all_pairs * (d + dv) / k.vector_op_rate, t_tensor)
    t_soft = all_pairs * (1.0 / k.sfu_rate + k.family.softmax_vector_ops / k.vector_op_rate)
    if op.kv_dtype == "fp8" and not fp8:
        # the bf16 kernel converts every K/V element it loads
        loaded = tiles * k_pad * kv_width * ops.where(packed, 1.0, 1.0 / group)
        t_soft = t_soft + loaded * attn_constant(impl, "dequant_ops", arch, consts) \
            / k.vector_op_rate
    ov = k.fa3_softmax_overlap if impl in OVERLAPPED_SOFTMAX else k.softmax_overlap
    compute_raw = ops.maximum(t_tensor, t_soft) + (1.0 - ov) * ops.minimum(t_tensor, t_soft)
    waves = ops.ceil(tiles / slots)
    wave_eff = tiles / (waves * slots)
    # no kernel ends before its longest CTA: under a causal mask the last query tile visits
    # every key of its split (k_last), r = k_last / k_pad times the average tile's work;
    # that tile alone on its slot takes r·compute_raw·slots/tiles
    k_last = kv_t * ops.ceil(seq_kv / splits / kv_t)
    mean_tile = compute_raw * slots / tiles
    # a kernel sized to share an SM with another CTA, launched with no more tiles than
    # SMs: each tile has an SM to itself and runs at lone_cta_share c of its rate, not 1/p
    # (p CTAs resident per SM), so its tiles take 1/(p·c) of the shared-SM tile time
    lone: Any = 1.0
    if not fam.persistent and not fam.resident:
        alone = ops.where(cuda_cores, False, (tiles <= k.units) & (per_unit > 1.0))
        # a decode tile (one query token, its G heads padded to the MMA rows) keeps its own
        # share: its CTA streams keys through one K/V stage with little matrix work each
        share = ops.where(decode_kernel, consts["attn.lone_decode_share"],
                          consts["attn.lone_cta_share"])
        lone = ops.where(alone, ops.minimum(1.0 / (per_unit * share), 1.0), 1.0)
    longest = mean_tile * lone * ops.maximum(k_last / k_pad, 1.0)
    compute = ops.maximum(compute_raw / wave_eff * lone, longest)
    if op.causal and fam.causal_order == "in_order":
        # tiles of unequal lengths started in launch order, each sequence's shortest first,
        # by whichever slot frees first: the last to start is a longest one, when the other
        # slots are on average half-way through theirs, so the call ends about
        # W/slots + longest − mean/2 (W/slots = compute_raw; a greedy list schedule ends by
        # W/slots + longest at the latest)
        unequal = (tiles > slots) & (q_tiles > 1.0)
        compute = ops.where(unequal, ops.maximum(compute, compute_raw + longest
                                                 - 0.5 * mean_tile), compute)

    heads_in_flight = ops.maximum(slots / ops.maximum(base / (batch * heads), 1.0), 1.0)
    traffic = flash_bytes(batch, heads, kv_heads, seq_q, seq_kv, d, dv, op.causal, s, s_kv,
                          q_t, heads_in_flight, k.l2_bytes, ops, op.shared_kv)
    partial = ops.where(splits > 1, 2.0 * batch * heads * seq_q * splits * (dv + 2.0) * 4.0,
                        0.0)
    # the fallback kernel of an over-large group reads each KV head once per query head
    kv = kv_bytes(batch, kv_heads, seq_kv, d, dv, s_kv, op.shared_kv)
    traffic = traffic + ops.where(fallback, (group - 1.0) * kv, 0.0) + partial
    if fam.whole_kv_tiles:
        # a decode kernel that loads whole KV tiles moves the keys past each split's end
        # up to its last tile's: per (sequence, KV head unit) splits·k_pad − S_kv keys more
        padded = ops.maximum(splits * k_pad - seq_kv, 0.0)
        traffic = traffic + ops.where(decode_kernel, kv_bytes(batch, heads_u, padded, d, dv,
                                                              s_kv, op.shared_kv), 0.0)
    q = q_bytes(batch, heads, seq_q, d, s)
    o = o_bytes(batch, heads, seq_q, dv, s)
    bytes_min = q + kv + o
    # a warm call's footprint: the harness rotates `copies` KV caches and outputs, and the
    # queries too where it says so (RunContext.input_copies), as for a GEMM's operands
    footprint = (kv + o) * copies + q * (copies if env.input_copies else 1.0)
    # a calibrated per-CTA bandwidth (the spec's attention knob) before the family's
    cta = k.calibrated_cta_bandwidth
    if cta is None:
        cta = attn_constant(impl, "cta_bandwidth", arch, consts)
    memory = stream_time(traffic, footprint, k, env, ctas=ops.minimum(tiles, slots),
                         ops=ops, cta_bandwidth=cta)
    # a split call's combine kernel (the masked-MHA kernel merges in its last block)
    launches = ops.where(splits > 1, 1.0 if fam.split_kv == "mmha" else 2.0, 1.0)
    if impl == "paged":
        # the KV-cache entry point packs the G query heads of a group into the row dimension
        # for decode: Q is transposed into that layout and O back, two extra copy kernels
        launches = launches + ops.where(packed, ops.where(group > 1, 2.0, 0.0), 0.0)
    tile_s = ops.where(decode_kernel, attn_constant(impl, "decode_tile_s", arch, consts, eng)
                       * decode_rows_scale(rows, consts),
                       attn_constant(impl, "tile_s", arch, consts, eng)) \
        * tile_time_scale(d, dv, consts)
    # a persistent kernel's first tile on each SM pays tile_s whole, later ones the part its
    # producer warps do not hide by loading the next tile early (resident kernels: their
    # CTAs resident per SM are the slots already)
    hidden: Any = 0.0
    if fam.persistent:
        hidden = ops.where(decode_kernel,
                           attn_constant(impl, "decode_tile_overlap", arch, consts),
                           attn_constant(impl, "tile_overlap", arch, consts))
    streamed = overlap(compute, memory, k.overlap_p, ops)
    later = (waves - 1.0) * (1.0 - hidden) * tile_s
    if fam.persistent:
        # later tiles' serial part is the consumer warps' work, as the matrix work is,
        # while the producer warps stream the next tile's K/V: it adds to the compute
        # side and overlaps the memory side
        exposed = overlap(compute + later, memory, k.overlap_p, ops) - streamed
    else:
        exposed = later
    overhead = launches * env.kernel_s + tile_s + exposed
    if fam.split_kv == "mmha":
        # the masked-MHA kernel's last block of a split (sequence, head) merges the others'
        # partial results after they finish: one more dependent step (read the partials,
        # write the output), a tile's serial time
        overhead = overhead + ops.where(splits > 1, tile_s, 0.0)
    latency = streamed + overhead
    flops = 2.0 * batch * heads * pairs(seq_q, seq_kv, op.causal, ops) * (d + dv)
    return {"latency_s": latency, "compute_s": compute, "memory_s": memory,
            "overhead_s": overhead, "bytes": traffic, "launches": launches, "q_tile": q_eff,
            "kv_tile": kv_t, "splits": splits, "ctas": tiles, "resident": per_unit,
            "impl": impl, "useful_flops": flops, "bytes_min": bytes_min,
            "fp8_build": fp8_build}


def time_flash(op: Attention, k: Knobs, env: Env, consts: Constants) -> dict[str, Any]:
    """Timing of a fused attention kernel of ``op``'s family (see the module doc): floats
    for a scalar op, else arrays of the op's broadcast shape."""
    if op.shape == () and np.ndim(env.copies) == 0:
        v = [float(getattr(op, name)) for name in _SHAPE]
        return _flash(SCALAR, op, v[0], v[1], v[2], v[3], v[4], v[5], v[6], float(env.copies),
                      k, env, consts)
    out = _flash(VECTOR, op, op.batch, op.heads, op.kv_heads, op.seq_q, op.seq_kv,
                 op.head_dim, op.value_dim, env.copies, k, env, consts)
    shape = op.shape

    def full(x: Any) -> Array:
        return np.asarray(np.broadcast_to(np.asarray(x, dtype=np.float64), shape))

    return {key: (v if key in ("impl", "fp8_build") else full(v)) for key, v in out.items()}
