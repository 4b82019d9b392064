"""Scaled dot-product attention: prefill, chunked prefill and decode; causal; GQA/MQA.

Notation: B batch, H_q query heads, H_kv key/value heads, S_q queries, S_kv keys,
D head dim, D_v value dim, s / s_kv bytes per element of Q,O / K,V.

Multi-head latent attention (DeepSeek-V2/V3's MLA) decodes over a compressed cache: one
latent vector of D elements per token, shared by every query head, whose first D_v elements
are also the values. Written as attention that is MQA (H_kv = 1) with ``shared_kv``: K and
V are that one vector, read once (D elements per token, not D + D_v).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._xp import VECTOR, Ops
from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields
from perfmodel.ops.elementwise import Elementwise, Softmax
from perfmodel.ops.gemm import Gemm

__all__ = ["IMPLS", "UNFUSED_IMPLS", "Attention", "causal_pairs", "computed_pairs",
           "flash_bytes", "kv_bytes", "o_bytes", "pairs", "q_bytes"]

Impl = Literal["flash", "flash2", "flash3", "flash4", "paged", "naive", "math", "fmha-v2",
               "xqa", "mmha", "trtllm-gen", "flashinfer", "flashinfer-sm100", "triton",
               "mem-efficient", "mla"]
#: Kernel families. ``flash`` is the fused kernel native to the architecture (PyTorch's
#: memory-efficient kernel before Ampere, FA2-class on Ampere and Ada, FA3/cuDNN-class on
#: Hopper, FA4's kernel on Blackwell);
#: ``flash2``/``flash3``/``flash4`` are FlashAttention 2, 3 and 4 (CuTe; FA3 has no
#: Blackwell build, so there ``flash3`` and ``cudnn`` are FA4's kernel too); ``paged`` is
#: FlashAttention-2's paged-KV kernel
#: (``flash_attn_with_kvcache``); ``fmha-v2`` and ``xqa`` are TensorRT-LLM's context and
#: decode kernels before Blackwell (on Hopper ``fmha-v2`` is its warp-specialised SM90
#: kernels, a family of their own in the timing model; ``mmha`` its masked multi-head
#: decode kernel, which it
#: runs when each KV head has one query head), ``trtllm-gen`` its Blackwell kernels (also reached
#: through FlashInfer); ``flashinfer`` is FlashInfer's own (FA2-template) kernels and
#: ``flashinfer-sm100`` its Blackwell backends (a different kernel, its own constants),
#: ``triton`` the Triton kernels of vLLM/SGLang; ``mem-efficient`` PyTorch's
#: memory-efficient SDPA backend (the CUTLASS kernel from xformers); ``naive`` is the
#: unfused path (QKᵀ, mask, softmax, PV as separate kernels in the input dtype); ``math``
#: is PyTorch's SDPA MATH backend, the same path computed in fp32 for 16-bit inputs
#: (PyTorch ≥ 2.5 casts Q, K, V up and O back: pytorch/pytorch#128922, documented in
#: #163508).
#: Each family's traits: :mod:`perfmodel.timing.kernels`.
IMPLS: tuple[str, ...] = ("flash", "flash2", "flash3", "flash4", "paged", "naive", "math",
                          "fmha-v2", "xqa", "mmha", "trtllm-gen", "flashinfer",
                          "flashinfer-sm100", "triton", "mem-efficient", "mla")
#: Kernel paths that run attention as several unfused kernels (:meth:`Attention.naive_stages`).
UNFUSED_IMPLS: tuple[str, ...] = ("naive", "math")
_IMPL_SET = frozenset(IMPLS)
_IMPL_ALIASES = {"fa2": "flash2", "fa3": "flash3", "fa4": "flash4",
                 "unfused": "naive", "eager": "naive", "paged-kv": "paged", "kvcache": "paged",
                 "cudnn": "flash3", "trtllm-fmha": "fmha-v2", "fmha_v2": "fmha-v2",
                 "trtllm_gen": "trtllm-gen", "trtllm-mha": "trtllm-gen",
                 "masked-mha": "mmha", "efficient": "mem-efficient",
                 "mem_efficient": "mem-efficient", "memeff": "mem-efficient"}


def causal_pairs(seq_q: Any, seq_kv: Any, ops: Ops = VECTOR) -> Any:
    """Scored (query, key) pairs per head under a bottom-right-aligned causal mask.

    Query i (0-based, of S_q) sees keys j ≤ i + (S_kv − S_q). For S_kv ≥ S_q this is
    S_q·(S_kv − S_q) + S_q·(S_q + 1)/2; for S_kv < S_q the first S_q − S_kv queries see
    nothing and the rest form a triangle: S_kv·(S_kv + 1)/2.
    """
    off = seq_kv - seq_q
    full = seq_q * off + seq_q * (seq_q + 1.0) / 2.0
    out = ops.where(off >= 0, full, seq_kv * (seq_kv + 1.0) / 2.0)
    return np.asarray(out, dtype=np.float64) if ops is VECTOR else out


def pairs(seq_q: Any, seq_kv: Any, causal: bool, ops: Ops = VECTOR) -> Any:
    """Scored pairs per (batch, query head): S_q·S_kv, or :func:`causal_pairs`."""
    if causal:
        return causal_pairs(seq_q, seq_kv, ops)
    return seq_q * seq_kv


def computed_pairs(seq_q: Any, seq_kv: Any, causal: bool, q_tile: Any, k_tile: Any,
                   ops: Ops = VECTOR) -> Any:
    """Pairs a tiled fused kernel actually computes per head: with a causal mask the
    diagonal blocks are computed whole, adding about ⌈S_q/q_tile⌉·q_tile·k_tile/2
    (bounded by the full rectangle)."""
    if not causal:
        return seq_q * seq_kv
    q_tiles = ops.ceil(seq_q / q_tile)
    waste = q_tiles * ops.minimum(q_tile, seq_q) * ops.minimum(k_tile, seq_kv) / 2.0
    return ops.minimum(causal_pairs(seq_q, seq_kv, ops) + waste, seq_q * seq_kv)


def q_bytes(batch: Any, heads: Any, seq_q: Any, head_dim: Any, s: float) -> Any:
    """Q read once: B·H_q·S_q·D·s bytes."""
    return batch * heads * seq_q * head_dim * s


def o_bytes(batch: Any, heads: Any, seq_q: Any, value_dim: Any, s: float) -> Any:
    """O written once: B·H_q·S_q·D_v·s bytes."""
    return batch * heads * seq_q * value_dim * s


def kv_bytes(batch: Any, kv_heads: Any, seq_kv: Any, head_dim: Any, value_dim: Any,
             s_kv: float, shared: bool = False) -> Any:
    """K and V read once: B·H_kv·S_kv·(D + D_v)·s_kv bytes (the KV cache in decode; per
    token and layer of a cache, B = S_kv = 1); with ``shared`` (an MLA latent cache, V the
    first D_v elements of K) B·H_kv·S_kv·D·s_kv."""
    width = head_dim if shared else head_dim + value_dim
    return batch * kv_heads * seq_kv * width * s_kv


def flash_bytes(batch: Any, heads: Any, kv_heads: Any, seq_q: Any, seq_kv: Any,
                head_dim: Any, value_dim: Any, causal: bool, s: float, s_kv: float,
                q_tile: Any, heads_in_flight: Any, cache_bytes: float,
                ops: Ops = VECTOR, shared_kv: bool = False) -> Any:
    """Device-memory traffic of a fused (flash) kernel, bytes.

    Q read once and O written once. Each query tile streams the K/V rows it may see;
    tiles of the same KV head running together share them through L2. If the K/V of the
    ``heads_in_flight`` heads resident at once fit in ``cache_bytes``, K/V come from HBM
    once; otherwise the missing fraction is re-read by each of the ⌈S_q/q_tile⌉ query
    tiles (causal: on average half of the visible keys). The S_q×S_kv score matrix never
    reaches HBM. K/V as :func:`kv_bytes` (``shared_kv``: one latent vector per token).
    """
    kv = kv_bytes(batch, kv_heads, seq_kv, head_dim, value_dim, s_kv, shared_kv)
    q_tiles = ops.ceil(seq_q / q_tile)
    per_head = kv / (batch * kv_heads)
    working = per_head * ops.maximum(heads_in_flight, 1.0)
    miss = ops.clip((working - cache_bytes) / working, 0.0, 1.0)
    visible = pairs(seq_q, seq_kv, causal, ops) / (seq_q * seq_kv)
    rereads = 1.0 + miss * (q_tiles - 1.0) * visible
    return (q_bytes(batch, heads, seq_q, head_dim, s)
            + o_bytes(batch, heads, seq_q, value_dim, s) + kv * rereads)


@dataclass(frozen=True, init=False)
class Attention:
    """softmax(Q·Kᵀ/√D + mask)·V for every (batch, query head).

    FLOPs = 2·B·H_q·pairs·(D + D_v) (QKᵀ and PV), plus B·H_q·pairs exponentials. pairs is
    S_q·S_kv, or :func:`causal_pairs` when ``causal``. The unfused ``naive`` path computes
    the full S_q×S_kv rectangle whatever the mask.

    An engine's attention call does more than the fused kernel: with ``kv_write`` it first
    writes the S_q new keys and values into the paged KV cache (one kernel), with ``rope``
    that kernel also rotates Q and K (TensorRT-LLM's QKV pre-processing):
    :meth:`prologue_stage`.

    ``shared_kv``: K and V are one cached vector of D elements per token and KV head, the
    values its first D_v (multi-head latent attention's compressed cache, decoded with the
    up-projections absorbed into Q and O): K/V bytes count D per token, FLOPs stay
    2·pairs·(D + D_v) (QKᵀ over D, PV over D_v).
    """

    batch: Array
    heads: Array
    kv_heads: Array
    seq_q: Array
    seq_kv: Array
    head_dim: Array
    value_dim: Array
    causal: bool
    dtype: DType
    kv_dtype: DType
    impl: str
    num_splits: int | Literal["auto", "gqa"]
    """Split-KV: ``auto`` (the kernel's heuristic), ``gqa`` (split only when the query heads
    of a KV group are packed for decode, as FlashAttention-2's varlen entry point does) or a
    fixed count."""
    kv_write: bool
    rope: bool
    phase: Literal["auto", "prefill", "decode"]
    """The kind of engine call (its bookkeeping differs): ``prefill`` (context) or
    ``decode`` (generation); ``auto``: decode where seq_q = 1, else prefill."""
    tensor_core_min_group: float
    """For a family with a CUDA-core decode kernel (FlashInfer's): the fewest query heads
    per KV head for which a one-token query over a 16-bit cache runs the tensor-core kernel;
    smaller groups run the CUDA-core one. 0 (default): always the tensor-core kernel.
    SGLang calls FlashInfer with 4 (``should_use_tensor_core``: fp8 cache, or G ≥ 4)."""
    shared_kv: bool
    """K and V are one cached vector per token (an MLA latent cache; V its first D_v
    elements): the cache holds D elements per token and KV head, not D + D_v."""

    def __init__(self, batch: Any = 1, heads: Any = 32, kv_heads: Any = None, seq_q: Any = 2048,
                 seq_kv: Any = None, head_dim: Any = 128, value_dim: Any = None,
                 causal: bool = False, dtype: str = "bf16", kv_dtype: str | None = None,
                 impl: str = "flash", num_splits: int | str = "auto", kv_write: bool = False,
                 rope: bool = False, phase: str = "auto",
                 tensor_core_min_group: float = 0.0, shared_kv: bool = False) -> None:
        b_, h_ = as_size(batch, "batch"), as_size(heads, "heads")
        hkv = as_size(heads if kv_heads is None else kv_heads, "kv_heads")
        sq = as_size(seq_q, "seq_q")
        skv = as_size(seq_q if seq_kv is None else seq_kv, "seq_kv")
        d = as_size(head_dim, "head_dim")
        dv = as_size(head_dim if value_dim is None else value_dim, "value_dim")
        one = not (b_.ndim or h_.ndim or hkv.ndim or sq.ndim or skv.ndim or d.ndim or dv.ndim)
        if (float(h_) % float(hkv) != 0.0) if one else bool(np.any(np.mod(h_, hkv) != 0)):
            raise PerfmodelError("kv_heads", "heads must be a multiple of kv_heads (GQA groups)",
                                 "pick kv_heads dividing heads, e.g. heads=32, kv_heads=8")
        dt = normalize_dtype(dtype, "dtype")
        kv_dt = normalize_dtype(kv_dtype, "kv_dtype") if kv_dtype else dt
        key = impl if type(impl) is str and impl in _IMPL_SET else str(impl).strip().lower()
        key = _IMPL_ALIASES.get(key, key)
        if key not in IMPLS:
            raise PerfmodelError("impl", f"unknown attention kernel path {impl!r}",
                                 f"use one of {', '.join(IMPLS)}")
        if num_splits not in ("auto", "gqa"):
            if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)) \
                    or int(num_splits) < 1:
                raise PerfmodelError("num_splits", f"must be 'auto', 'gqa' or an integer ≥ 1, "
                                     f"got {num_splits!r}", "e.g. num_splits=1 (no split-KV)")
            num_splits = int(num_splits)
        if phase not in ("auto", "prefill", "decode"):
            raise PerfmodelError("phase", f"unknown phase {phase!r}",
                                 "use 'auto', 'prefill' or 'decode'")
        tc_group = float(tensor_core_min_group) if isinstance(
            tensor_core_min_group, (int, float, np.integer, np.floating)) \
            and not isinstance(tensor_core_min_group, bool) else math.nan
        if not (0.0 <= tc_group < math.inf):
            raise PerfmodelError("tensor_core_min_group",
                                 f"must be a finite number ≥ 0, got {tensor_core_min_group!r}",
                                 "e.g. 0 (always the tensor-core decode kernel) or 4 (SGLang)")
        if not one:  # one shape broadcasts trivially
            broadcast_fields(batch=b_, heads=h_, kv_heads=hkv, seq_q=sq, seq_kv=skv,
                             head_dim=d, value_dim=dv)
        # a frozen dataclass filled in one update rather than a setattr per field
        self.__dict__.update(batch=b_, heads=h_, kv_heads=hkv, seq_q=sq, seq_kv=skv,
                             head_dim=d, value_dim=dv, causal=bool(causal), dtype=dt,
                             kv_dtype=kv_dt, impl=key, num_splits=num_splits,
                             kv_write=bool(kv_write), rope=bool(rope), phase=phase,
                             tensor_core_min_group=tc_group, shared_kv=bool(shared_kv))

    @property
    def name(self) -> str:
        return "attention"

    @property
    def shape(self) -> tuple[int, ...]:
        if not (self.batch.ndim or self.heads.ndim or self.kv_heads.ndim or self.seq_q.ndim
                or self.seq_kv.ndim or self.head_dim.ndim or self.value_dim.ndim):
            return ()
        return broadcast_fields(batch=self.batch, heads=self.heads, kv_heads=self.kv_heads,
                                seq_q=self.seq_q, seq_kv=self.seq_kv, head_dim=self.head_dim,
                                value_dim=self.value_dim)

    # ------------------------------------------------------------------ counts
    def pairs(self) -> Array:
        """Scored pairs per (batch, query head) (:func:`pairs`)."""
        return np.asarray(pairs(self.seq_q, self.seq_kv, self.causal), dtype=np.float64)

    def flops(self) -> Array:
        """2·B·H_q·pairs·(D + D_v), FLOPs (the useful work; exact causal pairs)."""
        return 2.0 * self.batch * self.heads * self.pairs() * (self.head_dim + self.value_dim)

    def exps(self) -> Array:
        """B·H_q·pairs exponentials (softmax), on the special-function unit."""
        return self.batch * self.heads * self.pairs()

    def q_bytes(self) -> Array:
        """Q read once, bytes (:func:`q_bytes`)."""
        return np.asarray(q_bytes(self.batch, self.heads, self.seq_q, self.head_dim,
                                  bytes_per_element(self.dtype)), dtype=np.float64)

    def o_bytes(self) -> Array:
        """O written once, bytes (:func:`o_bytes`)."""
        return np.asarray(o_bytes(self.batch, self.heads, self.seq_q, self.value_dim,
                                  bytes_per_element(self.dtype)), dtype=np.float64)

    def kv_bytes(self) -> Array:
        """K and V read once: B·H_kv·S_kv·(D + D_v)·s_kv bytes, D per token with
        ``shared_kv`` (:func:`kv_bytes`)."""
        return np.asarray(kv_bytes(self.batch, self.kv_heads, self.seq_kv, self.head_dim,
                                   self.value_dim, bytes_per_element(self.kv_dtype),
                                   self.shared_kv), dtype=np.float64)

    def bytes_min(self) -> Array:
        """Q and K/V read once, O written once, bytes (every key is visible to the last
        query under a bottom-right mask, so causal does not lower the minimum)."""
        return self.q_bytes() + self.kv_bytes() + self.o_bytes()

    def computed_pairs(self, q_tile: float | Array, k_tile: float | Array) -> Array:
        """Pairs a tiled fused kernel computes per head (:func:`computed_pairs`)."""
        return np.asarray(computed_pairs(self.seq_q, self.seq_kv, self.causal, q_tile,
                                         k_tile), dtype=np.float64)

    def flash_bytes(self, q_tile: float | Array, heads_in_flight: float | Array,
                    cache_bytes: float) -> Array:
        """Device-memory traffic of a fused (flash) kernel, bytes (:func:`flash_bytes`)."""
        return np.asarray(flash_bytes(
            self.batch, self.heads, self.kv_heads, self.seq_q, self.seq_kv, self.head_dim,
            self.value_dim, self.causal, bytes_per_element(self.dtype),
            bytes_per_element(self.kv_dtype), q_tile, heads_in_flight, cache_bytes,
            shared_kv=self.shared_kv), dtype=np.float64)

    def cost(self) -> Cost:
        """Hardware-free cost of the fused path with minimum traffic (see ``naive_stages``
        for the unfused path)."""
        if self.impl == "naive":
            total = Cost()
            for _, op in self.naive_stages():
                total = total + op.cost()
            total = Cost(tensor_flops=total.tensor_flops, vector_flops=total.vector_flops,
                         sfu_ops=total.sfu_ops, bytes_min=self.bytes_min(),
                         bytes_hbm=total.bytes_hbm, launches=total.launches,
                         work_units=total.work_units)
            return total
        bmin = self.bytes_min()
        pairs = self.batch * self.heads * self.pairs()
        return Cost(
            tensor_flops=self.flops(), vector_flops=4.0 * pairs, sfu_ops=self.exps(),
            bytes_min=bmin, bytes_hbm=bmin, launches=np.ones(()),
            work_units=self.batch * self.heads * np.ceil(self.seq_q / 128.0),
        )

    def prologue_stage(self) -> Elementwise | None:
        """The pre-processing kernel of an engine call, or None: reads the new K and V
        (and Q with ``rope``) in ``dtype``-width activations, writes K and V into the cache
        in ``kv_dtype`` (and Q back with ``rope``); RoPE costs ~6 vector operations per
        rotated element. Elements: B·S_q·(H_kv·(D + D_v) [+ H_q·D]), H_kv·D for a
        ``shared_kv`` cache. The activations arrive in bf16 (2 bytes) whatever the compute
        dtype."""
        if not (self.kv_write or self.rope):
            return None
        # the new keys' K/V elements: kv_bytes's formula at one byte per element
        kv = kv_bytes(self.batch, self.kv_heads, self.seq_q, self.head_dim, self.value_dim,
                      1.0, self.shared_kv)
        q = self.batch * self.seq_q * self.heads * self.head_dim if self.rope else 0.0
        numel = np.asarray(kv + q, dtype=np.float64)
        s_kv = bytes_per_element(self.kv_dtype)
        frac_q = q / numel
        writes = frac_q + (1.0 - frac_q) * s_kv / 2.0
        rot = 6.0 if self.rope else 0.0
        return Elementwise(numel, reads=1, writes=writes, flops_per_element=rot,
                           dtype="bf16", kind="attn_prologue")

    def naive_stages(self) -> list[tuple[str, Gemm | Elementwise | Softmax]]:
        """The unfused path as its kernels: S = Q·Kᵀ (written to HBM), scale and mask
        (read and write S), softmax (read S, write P), O = P·V (read P). Every stage works on
        the full B·H_q·S_q·S_kv score matrix whatever the mask.

        ``math`` (PyTorch's MATH backend) pre-scales Q and K by √scale (a read and a write
        of each) and adds a mask only when causal; with 16-bit inputs it computes in fp32:
        Q, K, V cast up first (read at the input width, written at 4 bytes; K and V as H_q
        heads, since the backend repeats a GQA group's K/V), the scaling, both GEMMs, the
        softmax and the mask in fp32, O cast back last (read 4 bytes, write the input
        width)."""
        bh = self.batch * self.heads
        scores = bh * self.seq_q * self.seq_kv
        up = self.impl == "math" and self.dtype not in ("fp32", "fp64")
        cdt: DType = "fp32" if up else self.dtype
        qk = Gemm(m=self.seq_q, n=self.seq_kv, k=self.head_dim, batch=bh, dtype=cdt)
        mask = Elementwise(scores, reads=1, writes=1, flops_per_element=2 if self.causal else 1,
                           dtype=cdt, kind="scale_mask")
        soft = Softmax(rows=bh * self.seq_q, cols=self.seq_kv, dtype=cdt)
        pv = Gemm(m=self.seq_q, n=self.value_dim, k=self.seq_kv, batch=bh, dtype=cdt)
        if self.impl != "math":
            return [("qk", qk), ("scale_mask", mask), ("softmax", soft), ("pv", pv)]
        stages: list[tuple[str, Gemm | Elementwise | Softmax]] = []
        q = bh * self.seq_q * self.head_dim
        if up:
            kv = bh * self.seq_kv * (self.head_dim + self.value_dim)
            wide = 4.0 / bytes_per_element(self.dtype)  # fp32 bytes per input-width byte
            stages.append(("upcast", Elementwise(q + kv, reads=1, writes=wide,
                                                 flops_per_element=0, dtype=self.dtype,
                                                 kind="upcast")))
        stages += [("prescale", Elementwise(q + bh * self.seq_kv * self.head_dim, reads=1,
                                            writes=1, flops_per_element=1, dtype=cdt,
                                            kind="prescale")),
                   ("qk", qk)]
        if self.causal:
            stages.append(("mask", mask))
        stages += [("softmax", soft), ("pv", pv)]
        if up:
            o = bh * self.seq_q * self.value_dim
            stages.append(("downcast", Elementwise(o, reads=4.0 / bytes_per_element(
                self.dtype), writes=1, flops_per_element=0, dtype=self.dtype,
                kind="downcast")))
        return stages
