"""Op graphs: a transformer config and a phase become the ordered ops of one forward pass.

Every layer is the same, so the graph lists each per-layer op once with ``count`` = the
layers it occurs in (× per-layer repeats); the time of the pass is Σ count·latency. Shapes
are numpy arrays (batch, lengths, TP degree may all be arrays and broadcast), so one op
object stands for a whole sweep. Everything here is per GPU under tensor parallelism.

Conventions (an inference server such as vLLM, stated so they can be argued with):

- QKV and gate/up projections are fused GEMMs; a linear layer is
  ``Gemm(m=tokens, n=out_features, k=in_features, shared_b=True)``.
- Prefill computes logits for the last position of each sequence only (m = batch).
- Tensor parallelism t shards query heads, KV heads (replicated when t > H_kv), the MLP
  and expert widths, and the vocabulary; an all-reduce of tokens·h follows the O projection,
  the MLP and the (vocab-parallel) embedding. The logits all-gather is not modelled.
- MoE: a router GEMM and top-k softmax, a token permute, grouped expert GEMMs with the
  tokens spread evenly over the experts they touch (perfect balance), a weighted combine.
  Experts touched by T tokens choosing k of E: E·(1 − (1 − k/E)^T) (independent uniform
  routing), rounded; all their weights are read.
- Sliding-window layers (window W): a query at position p sees min(p + 1, W) keys. Prefill
  is split into the first queries (a causal triangle) and the rest (a W-wide band, computed
  as non-causal attention over W keys; its K/V traffic counts W keys, not the band's
  S + W). Decode reads min(context, W) keys.
- Multi-head latent attention (DeepSeek-V2/V3 MLA, ``kv_lora_rank`` > 0), as vLLM and
  SGLang run it: the query's and the latent's down-projections are one GEMM, replicated
  on every GPU (``qkv_a_proj``; with no query rank the query has its own projection),
  RMSNorms of the query rank and of the latent, the query's up-projection split by heads,
  RoPE on the rotary parts (one key per token), and the latent plus rotary key written to
  the cache. Prefill decompresses every context token's keys and values
  (``kv_b_proj``: prefix tokens too) and runs ordinary causal attention of H heads, D wide
  (D_v values); decode absorbs the up-projections (a per-head batched GEMM into the latent
  space before attention, ``q_absorb``, and out of it after, ``v_up``) and attends over the
  latent cache as one KV head D = r_kv + D_rope wide whose first r_kv elements are the
  values (``Attention.shared_kv``), in the engines' MLA kernel family (``mla``).
- Expert and attention data parallelism (``parallel``, over the tp GPUs of one instance;
  ``tp`` keeps meaning that group's size): ``tep`` keeps attention and dense layers
  tensor-parallel and spreads the experts whole over the GPUs (E/n each, full width; the
  all-reduce after the MoE sums their outputs, as under TP); ``dep`` (TensorRT-LLM's
  ``enable_attention_dp`` with EP, SGLang's DP attention, vLLM's data-parallel attention
  with expert parallelism) runs attention, the dense layers, embedding and LM head as
  n replicas, each on ⌈batch/n⌉ of the sequences (the busiest rank's share) with whole
  weights, and the experts EP: every MoE layer gathers the n ranks' tokens, each GPU runs
  its E/n experts on the tokens routed to them, and the outputs are scattered back
  summed: an all-gather and a reduce-scatter of n·tokens·h activations, together the
  traffic of one ring all-reduce of that buffer (``moe_gather_scatter``, counted as
  such: 2·(n−1)/n of it per GPU). Routing is balanced over the experts the gathered
  tokens touch (the expected count, as above), spread evenly over the GPUs.
- Residual adds and norms are separate kernels (servers often fuse them: a slight
  overestimate of small-op time). With ``fuse_allreduce`` (TensorRT-LLM's all-reduce +
  residual add + RMSNorm kernel) each all-reduce of a TP layer also adds the residual and
  normalises, so the layers' residual adds, post-attention norms and all but the first
  input norm disappear where tp > 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.dtypes import DType, bytes_per_element
from perfmodel.models.config import TransformerConfig
from perfmodel.ops import (
    Activation,
    AllReduce,
    Attention,
    Elementwise,
    Embedding,
    Gemm,
    Norm,
    Op,
    Rotary,
    Softmax,
)
from perfmodel.ops.cost import Array

__all__ = ["PARALLEL_LAYOUTS", "Dtypes", "GraphOp", "attention_ranks", "check_instance",
           "check_parallel", "decode_graph", "experts_touched", "prefill_graph", "tp_heads"]

Phase = Literal["prefill", "decode"]
#: How an MoE model spreads over the ``tp`` GPUs of one instance (module docstring): all
#: tensor-parallel, experts expert-parallel beside tensor-parallel attention, or
#: attention data-parallel with expert-parallel experts.
PARALLEL_LAYOUTS: tuple[str, ...] = ("tp", "tep", "dep")


@dataclass(frozen=True)
class Dtypes:
    """Storage dtypes chosen independently: linear weights, expert weights, activations
    (and the matmul inputs when the weights are not narrower), KV cache."""

    weight: DType = "bf16"
    activation: DType = "bf16"
    kv: DType = "bf16"
    expert: DType = "bf16"


@dataclass(frozen=True)
class GraphOp:
    """One op of the graph: ``count`` occurrences per forward pass (per GPU).

    The op is kept as its class and constructor arguments (``op`` builds it on first use),
    so that evaluation can concatenate the shape fields of many ops into one call.
    ``count`` is a number, or an array over the sweep points (0 where the op does not
    occur, e.g. the band part of a sliding-window prefill shorter than the window).
    ``layer`` is True for ops repeated in every (or every sliding/full) layer.
    """

    name: str
    kind: type[Op]
    args: dict[str, Any]
    count: float | Array
    layer: bool = True

    @functools.cached_property
    def op(self) -> Op:
        """The op object (validated by its constructor)."""
        return self.kind(**self.args)


def _g(_name: str, _cls: type[Op], _count: float | Array, _layer: bool = True,
       **args: Any) -> GraphOp:
    return GraphOp(_name, _cls, args, _count, _layer)


def tp_heads(cfg: TransformerConfig, tp: Array) -> tuple[Array, Array]:
    """Query and KV heads per GPU under TP degree ``tp`` (KV heads replicated when
    tp > H_kv). Raises if ``tp`` does not divide the query heads, or KV heads and tp
    divide neither way."""
    t = np.asarray(tp, dtype=np.float64)
    if t.ndim == 0 and float(t) == 1.0:  # the common case, fast
        return np.asarray(float(cfg.num_heads)), np.asarray(float(cfg.num_kv_heads))
    if np.any(t < 1) or np.any(t != np.round(t)):
        raise PerfmodelError("tp", "must be a whole number ≥ 1", "e.g. --tp 2")
    if np.any(cfg.num_heads % t != 0):
        bad = int(t[cfg.num_heads % t != 0].flat[0]) if t.ndim else int(t)
        fits = ", ".join(str(d) for d in range(1, min(cfg.num_heads, 64) + 1)
                         if cfg.num_heads % d == 0)
        raise PerfmodelError("tp", f"tp={bad} does not divide the {cfg.num_heads} query heads "
                             f"of {cfg.name}", f"pick a tp dividing the head count ({fits})")
    kv = cfg.num_kv_heads
    ok = (kv % t == 0) | (t % kv == 0)
    if not np.all(ok):
        bad = int(np.broadcast_to(t, ok.shape)[~ok].flat[0]) if np.ndim(ok) else int(t)
        raise PerfmodelError("tp", f"tp={bad} and the {kv} KV heads of {cfg.name} divide "
                             "neither way", "pick a tp that divides, or is a multiple of, "
                             "the KV head count")
    return cfg.num_heads / t, np.maximum(kv / t, 1.0)


def experts_touched(cfg: TransformerConfig, tokens: Array) -> Array:
    """Expected distinct experts T tokens route to, E·(1 − (1 − k/E)^T), rounded (≥ 1)."""
    e, k = float(cfg.num_experts), float(cfg.experts_per_token)
    expected = e * (1.0 - (1.0 - k / e) ** np.asarray(tokens, dtype=np.float64))
    return np.asarray(np.clip(np.round(expected), 1.0, e), dtype=np.float64)


def _act_kind(cfg: TransformerConfig) -> str:
    if not cfg.gated_mlp:
        return cfg.activation
    return "gelu_mul" if cfg.activation == "gelu" else "silu_mul"


def _mlp(cfg: TransformerConfig, prefix: str, tokens: Array, width: Array, dt: Dtypes,
         count: float) -> list[GraphOp]:
    """Dense MLP of ``width`` (already divided by TP) on ``tokens`` rows."""
    h, a, w = cfg.hidden_size, dt.activation, dt.weight
    up_n = (2.0 if cfg.gated_mlp else 1.0) * width
    up_name = "gate_up_proj" if cfg.gated_mlp else "up_proj"
    act_name = "act_mul" if cfg.gated_mlp else "act"
    return [
        _g(prefix + up_name, Gemm, count, m=tokens, n=up_n, k=h, dtype=w, out_dtype=a,
           shared_b=True, bias=cfg.mlp_bias),
        _g(prefix + act_name, Activation, count, tokens=tokens, width=width,
           kind=_act_kind(cfg), dtype=a),
        _g(prefix + "down_proj", Gemm, count, m=tokens, n=h, k=width, dtype=w, out_dtype=a,
           shared_b=True, bias=cfg.mlp_bias),
    ]


@dataclass(frozen=True)
class _Experts:
    """Where the experts of an MoE layer run: ``group`` GPUs (the instance), of which
    ``ep`` hold whole experts (1: every GPU holds every expert, 1/group of its width), fed
    by ``ranks`` attention data-parallel ranks (1: every GPU sees every token)."""

    group: Array
    ep: Array
    ranks: Array


def _moe(cfg: TransformerConfig, tokens: Array, t: Array, dt: Dtypes,
         experts: _Experts | None = None) -> list[GraphOp]:
    """The MLP of the MoE layers (all but the leading ``num_dense_layers``) on ``tokens``
    rows per GPU (``experts``: the layout, module docstring; default all TP over ``t``)."""
    h, a, layers = cfg.hidden_size, dt.activation, float(cfg.num_moe_layers)
    e, k = float(cfg.num_experts), float(cfg.experts_per_token)
    x = experts or _Experts(t, np.asarray(1.0), np.asarray(1.0))
    routed = tokens * x.ranks              # the tokens every GPU's experts serve
    width = np.ceil(cfg.expert_width / (x.group / x.ep))
    touched = experts_touched(cfg, routed)
    local = np.ceil(touched / x.ep)        # the experts of this GPU that tokens reach
    per_expert = np.ceil(routed * k / touched)
    pairs = routed * k / x.ep              # (token, expert) pairs this GPU computes
    up_n = (2.0 if cfg.gated_mlp else 1.0) * width
    ops = [
        _g("router", Gemm, layers, m=tokens, n=e, k=h, dtype=a, shared_b=True,
           bias=cfg.router_bias),
        _g("router_topk", Softmax, layers, rows=tokens, cols=e, dtype=a),
        _g("moe_permute", Elementwise, layers, numel=pairs * h, reads=1.0, writes=1.0,
           flops_per_element=0.0, dtype=a, kind="moe_permute"),
        _g("experts_gate_up" if cfg.gated_mlp else "experts_up", Gemm, layers, m=per_expert,
           n=up_n, k=h, batch=local, dtype=dt.expert, out_dtype=a, bias=cfg.mlp_bias),
        _g("experts_act", Activation, layers, tokens=pairs, width=width,
           kind=_act_kind(cfg), dtype=a),
        _g("experts_down", Gemm, layers, m=per_expert, n=h, k=width, batch=local,
           dtype=dt.expert, out_dtype=a, bias=cfg.mlp_bias),
        _combine(h, a, layers, k, routed, pairs, experts is None),
    ]
    if cfg.shared_expert_intermediate_size:
        ops += _mlp(cfg, "shared_", tokens, np.ceil(cfg.shared_expert_intermediate_size / t),
                    dt, layers)
    if experts is not None and bool(np.any(x.ranks > 1)):
        ops.append(_g("moe_gather_scatter", AllReduce, layers, numel=routed * h,
                      gpus=x.ranks, dtype=a, algorithm="ring"))
    return ops


def _combine(h: int, a: DType, layers: float, k: float, routed: Array, pairs: Array,
             whole: bool) -> GraphOp:
    """The weighted sum of each token's expert outputs: reads its k outputs, writes one
    (``whole``: every expert on this GPU, reads k per element written). Experts spread
    over GPUs: this GPU reads its ``pairs`` outputs and writes a partial sum for every
    ``routed`` token, (pairs + routed)·h elements moved, as one stream."""
    if whole:
        return _g("moe_combine", Elementwise, layers, numel=routed * h, reads=k, writes=1.0,
                  flops_per_element=2.0 * k, dtype=a, kind="moe_combine")
    return _g("moe_combine", Elementwise, layers, numel=(pairs + routed) * h, reads=1.0,
              writes=0.0, flops_per_element=2.0 * k / (k + 1.0), dtype=a, kind="moe_combine")


def _layer_ops(cfg: TransformerConfig, tokens: Array, t: Array, dt: Dtypes,
               attention: list[GraphOp], tp_active: bool,
               fuse_allreduce: bool = False, experts: _Experts | None = None) -> list[GraphOp]:
    """The ops of every layer in order, with ``attention`` given by the phase."""
    h, a, w, layers = cfg.hidden_size, dt.activation, dt.weight, float(cfg.num_layers)
    heads, kv = tp_heads(cfg, t)
    d = cfg.head_dim
    fuse = fuse_allreduce and tp_active
    # fused all-reduce + residual + norm: the separate kernels remain only where tp = 1
    unfused: float | Array = np.where(t > 1, 0.0, layers) if fuse else layers
    first_norm: float | Array = np.where(t > 1, 1.0, layers) if fuse else layers
    ops = [_g("input_norm", Norm, first_norm, tokens=tokens, hidden=h, kind=cfg.norm,
              dtype=a)]
    if cfg.is_mla:
        ops += _mla_projections(cfg, tokens, heads, dt)
    else:
        ops.append(_g("qkv_proj", Gemm, layers, m=tokens, n=(heads + 2.0 * kv) * d, k=h,
                      dtype=w, out_dtype=a, shared_b=True, bias=cfg.qkv_bias))
        if cfg.rotary:
            ops.append(_g("rotary", Rotary, layers, tokens=tokens, heads=heads, kv_heads=kv,
                          head_dim=d, dtype=a))
    ops += attention
    ops.append(_g("o_proj", Gemm, layers, m=tokens, n=h, k=heads * cfg.value_dim, dtype=w,
                  out_dtype=a, shared_b=True, bias=cfg.o_bias))
    if tp_active:
        ops.append(_g("attn_allreduce", AllReduce, layers, numel=tokens * h, gpus=t, dtype=a,
                      fused_residual_norm=fuse))
    ops.append(_g("residual_add", Elementwise, 2.0 * unfused, numel=tokens * h, reads=2.0,
                  writes=1.0, flops_per_element=1.0, dtype=a, kind="residual_add"))
    ops.append(_g("post_attn_norm", Norm, unfused, tokens=tokens, hidden=h, kind=cfg.norm,
                  dtype=a))
    if cfg.is_moe:
        ops += _moe(cfg, tokens, t, dt, experts)
    if cfg.num_moe_layers < cfg.num_layers:
        ops += _mlp(cfg, "", tokens, np.ceil(cfg.intermediate_size / t), dt,
                    float(cfg.num_layers - cfg.num_moe_layers))
    if tp_active:
        ops.append(_g("mlp_allreduce", AllReduce, layers, numel=tokens * h, gpus=t, dtype=a,
                      fused_residual_norm=fuse))
    return ops


def _mla_projections(cfg: TransformerConfig, tokens: Array, heads: Array,
                     dt: Dtypes) -> list[GraphOp]:
    """Multi-head latent attention's projections before attention (module doc): the
    replicated down-projections of the query (rank r_q) and of the latent and rotary key
    (r_kv + D_rope) as one GEMM, their RMSNorms, the query's up-projection to H heads of D
    (split by TP), RoPE on the queries' and the one key's rotary parts."""
    h, a, w, layers = cfg.hidden_size, dt.activation, dt.weight, float(cfg.num_layers)
    rq, rkv, rope = cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    ops = [_g("qkv_a_proj" if rq else "kv_a_proj", Gemm, layers, m=tokens,
              n=float(rq + rkv + rope), k=h, dtype=w, out_dtype=a, shared_b=True)]
    if rq:
        ops.append(_g("q_a_norm", Norm, layers, tokens=tokens, hidden=rq, kind=cfg.norm,
                      dtype=a))
    ops += [
        _g("kv_a_norm", Norm, layers, tokens=tokens, hidden=rkv, kind=cfg.norm, dtype=a),
        _g("q_b_proj" if rq else "q_proj", Gemm, layers, m=tokens, n=heads * cfg.head_dim,
           k=rq or h, dtype=w, out_dtype=a, shared_b=True),
    ]
    if cfg.rotary:
        ops.append(_g("rotary", Rotary, layers, tokens=tokens, heads=heads, kv_heads=1.0,
                      head_dim=rope, dtype=a))
    return ops


def _mla_cache_write(cfg: TransformerConfig, tokens: Array, dt: Dtypes) -> GraphOp:
    """The latent and rotary key of ``tokens`` new tokens written into the cache (read in
    the activation dtype, written in the cache's)."""
    s_a, s_kv = bytes_per_element(dt.activation), bytes_per_element(dt.kv)
    return _g("mla_cache_write", Elementwise, float(cfg.num_layers),
              numel=tokens * float(cfg.mla_cache_width), reads=1.0, writes=s_kv / s_a,
              flops_per_element=0.0, dtype=dt.activation, kind="kv_cache_write")


def _mla_prefill(cfg: TransformerConfig, b: Array, p: Array, c: Array, heads: Array,
                 dt: Dtypes, impl: str) -> list[GraphOp]:
    """MLA attention of a prefill (module doc): the new tokens' latents cached, every
    context token's keys and values decompressed, causal attention of H heads."""
    layers, a = float(cfg.num_layers), dt.activation
    d, dv, rope = float(cfg.head_dim), float(cfg.value_dim), cfg.qk_rope_head_dim
    return [
        _mla_cache_write(cfg, b * p, dt),
        _g("kv_b_proj", Gemm, layers, m=b * (c + p), n=heads * (d - rope + dv),
           k=float(cfg.kv_lora_rank), dtype=dt.weight, out_dtype=a, shared_b=True),
        _attn("mla_attention", layers, batch=b, heads=heads, kv_heads=heads, seq_q=p,
              seq_kv=c + p, head_dim=d, value_dim=dv, causal=True, dtype=a, kv_dtype=a,
              impl=_mla_impl(impl, "flash"), phase="prefill"),
    ]


def _mla_decode(cfg: TransformerConfig, b: Array, ctx: Array, heads: Array, dt: Dtypes,
                impl: str) -> list[GraphOp]:
    """MLA attention of a decode step (module doc): the token's latent cached, the query's
    non-rotary part absorbed into the latent space (a batched GEMM per head), attention
    over the latent cache (one KV head, K and V shared), the output up-projected per head."""
    layers, a = float(cfg.num_layers), dt.activation
    rkv, rope = float(cfg.kv_lora_rank), float(cfg.qk_rope_head_dim)
    nope, dv = float(cfg.head_dim) - rope, float(cfg.value_dim)
    return [
        _mla_cache_write(cfg, b, dt),
        _g("q_absorb", Gemm, layers, m=b, n=rkv, k=nope, batch=heads, dtype=a, out_dtype=a),
        _attn("mla_attention", layers, batch=b, heads=heads, kv_heads=1.0, seq_q=1.0,
              seq_kv=ctx, head_dim=rkv + rope, value_dim=rkv, causal=True, dtype=a,
              kv_dtype=dt.kv, impl=_mla_impl(impl, "mla"), phase="decode",
              shared_kv=True),
        _g("v_up", Gemm, layers, m=b, n=dv, k=rkv, batch=heads, dtype=a, out_dtype=a),
    ]


def _mla_impl(impl: str, native: str) -> str:
    """The kernel family an MLA attention op runs: ``native`` where the caller left the
    choice to the architecture (``flash``), else the caller's."""
    return native if impl == "flash" else impl


def _wrap(cfg: TransformerConfig, tokens: Array, batch: Array, t: Array, dt: Dtypes,
          attention: list[GraphOp], fuse_allreduce: bool = False,
          experts: _Experts | None = None) -> list[GraphOp]:
    h, a = cfg.hidden_size, dt.activation
    tp_active = bool(np.any(t > 1))
    vocab_t = np.ceil(cfg.vocab_size / t)
    ops = [_g("embedding", Embedding, 1.0, False, tokens=tokens, hidden=h, vocab=vocab_t,
              dtype=a)]
    if tp_active:
        ops.append(_g("embed_allreduce", AllReduce, 1.0, False, numel=tokens * h, gpus=t,
                      dtype=a))
    ops += _layer_ops(cfg, tokens, t, dt, attention, tp_active, fuse_allreduce, experts)
    ops.append(_g("final_norm", Norm, 1.0, False, tokens=tokens, hidden=h, kind=cfg.norm,
                  dtype=a))
    ops.append(_g("lm_head", Gemm, 1.0, False, m=batch, n=vocab_t, k=h, dtype=a,
                  out_dtype=a, shared_b=True, bias=False))
    return ops


def _arr(x: Any, name: str, minimum: float = 1.0) -> Array:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:  # one number: checked as a float
        v = float(arr)
        if math.isfinite(v) and v >= minimum and v == round(v):
            return arr
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < minimum) \
            or np.any(arr != np.round(arr)):
        raise PerfmodelError(name, f"must be whole numbers ≥ {minimum:g}, got {x!r}",
                             "pass positive integers")
    return arr


def check_parallel(cfg: TransformerConfig, parallel: str, tp: Array) -> None:
    """Refuse a layout (:data:`PARALLEL_LAYOUTS`) the model or the GPU count cannot take:
    ``tep``/``dep`` need MoE layers and a GPU count that divides the experts."""
    if parallel not in PARALLEL_LAYOUTS:
        raise PerfmodelError("parallel", f"unknown layout {parallel!r}",
                             f"use one of {', '.join(PARALLEL_LAYOUTS)}")
    if parallel == "tp":
        return
    if not cfg.is_moe:
        raise PerfmodelError("parallel", f"{parallel!r} spreads experts over the GPUs, and "
                             f"{cfg.name} has none", "use parallel='tp' (replicas for data "
                             "parallelism of a dense model)")
    t = np.asarray(tp, dtype=np.float64)
    bad = cfg.num_experts % t != 0
    if np.any(bad):
        n = int(np.broadcast_to(t, bad.shape)[bad].flat[0]) if bad.ndim else int(t)
        raise PerfmodelError("tp", f"{n} GPUs do not divide the {cfg.num_experts} experts of "
                             f"{cfg.name} ({parallel})", "pick a GPU count dividing the "
                             "expert count")


def attention_ranks(parallel: str, tp: int) -> int:
    """Attention data-parallel ranks among ``tp`` GPUs laid out as ``parallel``: each GPU
    under ``dep``, one (every GPU sees every token) otherwise."""
    return tp if parallel == "dep" else 1


def check_instance(cfg: TransformerConfig, parallel: str, tp: Array) -> None:
    """Refuse ``tp`` GPUs laid out as ``parallel`` before any work: the layout's own
    checks (:func:`check_parallel`) and, where attention is split over the GPUs (``tp``,
    ``tep``), the heads' (:func:`tp_heads`); under ``dep`` attention is not split."""
    check_parallel(cfg, parallel, tp)
    if parallel != "dep":
        tp_heads(cfg, tp)


def _layout(cfg: TransformerConfig, parallel: str, b: Array,
            t: Array) -> tuple[Array, Array, _Experts | None]:
    """(sequences per attention rank, attention TP degree, expert layout) of ``parallel``
    for ``b`` sequences on ``t`` GPUs."""
    check_parallel(cfg, parallel, t)
    if parallel == "tp" or bool(np.all(t == 1.0)):  # one GPU: every layout is the same
        return b, t, None
    if parallel == "tep":
        return b, t, _Experts(t, t, np.asarray(1.0))
    one = np.ones_like(t)
    return np.ceil(b / t), one, _Experts(t, t, t)


def _attn(name: str, count: float | Array, **args: Any) -> GraphOp:
    return _g(name, Attention, count, **args)


def prefill_graph(cfg: TransformerConfig, batch: Any, prompt_len: Any, cached_prefix: Any = 0,
                  tp: Any = 1, dtypes: Dtypes | None = None,
                  attention_impl: str = "flash", fuse_allreduce: bool = False,
                  parallel: str = "tp") -> list[GraphOp]:
    """Ops of a prefill of ``prompt_len`` new tokens per sequence after ``cached_prefix``
    tokens already in the KV cache (prefix caching), ``batch`` sequences over ``tp`` GPUs
    laid out as ``parallel`` (``fuse_allreduce``, ``parallel``: see the module
    docstring)."""
    dt = dtypes or Dtypes()
    b, p = _arr(batch, "batch"), _arr(prompt_len, "prompt_len")
    c, t = _arr(cached_prefix, "cached_prefix", 0.0), _arr(tp, "tp")
    b, t, experts = _layout(cfg, parallel, b, t)
    heads, kv = tp_heads(cfg, t)
    if cfg.is_mla:
        return _wrap(cfg, b * p, b, t, dt, _mla_prefill(cfg, b, p, c, heads, dt,
                                                        attention_impl), fuse_allreduce,
                     experts)
    common = {"batch": b, "heads": heads, "kv_heads": kv, "head_dim": float(cfg.head_dim),
              "dtype": dt.activation, "kv_dtype": dt.kv, "impl": attention_impl,
              "phase": "prefill"}
    attn: list[GraphOp] = []
    if cfg.num_full_layers:
        attn.append(_attn("attention", float(cfg.num_full_layers), seq_q=p, seq_kv=c + p,
                          causal=True, **common))
    if cfg.num_sliding_layers and cfg.chunked_attention:
        attn += _chunked_prefill(float(cfg.sliding_window or 1), float(cfg.num_sliding_layers),
                                 b, c, p, common)
    elif cfg.num_sliding_layers:
        w = float(cfg.sliding_window or 1)
        n = float(cfg.num_sliding_layers)
        tri = np.clip(w - c, 0.0, p)  # queries at positions < W: a causal triangle
        band = p - tri                # queries at positions ≥ W: W keys each
        attn.append(_attn("attention_sliding", np.where(tri > 0, n, 0.0),
                          seq_q=np.maximum(tri, 1.0), seq_kv=c + np.maximum(tri, 1.0),
                          causal=True, **common))
        attn.append(_attn("attention_sliding", np.where(band > 0, n, 0.0),
                          seq_q=np.maximum(band, 1.0), seq_kv=w + 0.0 * band, causal=False,
                          **common))
    return _wrap(cfg, b * p, b, t, dt, attn, fuse_allreduce, experts)


def _chunked_prefill(chunk: float, layers: float, b: Any, cached: Any, p: Any,
                     common: dict[str, Any]) -> list[GraphOp]:
    """Attention of ``layers`` chunked layers (chunk C) for ``p`` new tokens per sequence
    after ``cached`` ones: the queries that finish the chunk the prompt starts in (n₁ =
    min(C − c mod C, p), causal over the c mod C keys before them and themselves), the
    k = ⌊(p − n₁)/C⌋ whole chunks after them (causal C × C each, as k·b sequences) and the
    r = p − n₁ − k·C queries of the last, causal among themselves. A part with no queries
    counts 0 layers. Each part is timed as its own call, fixed cost included (as the two
    parts of a sliding-window prefill are), where engines run one kernel over the chunks
    (vLLM's virtual batches of a chunk each): up to two kernel fixed costs per layer too
    many, small beside a prefill that spans chunks."""
    off = np.mod(cached, chunk)
    first = np.minimum(chunk - off, p)
    rest = p - first
    whole = np.floor(rest / chunk)
    last = rest - whole * chunk
    out = [_attn("attention_chunked", np.where(first > 0, layers, 0.0),
                 seq_q=np.maximum(first, 1.0), seq_kv=off + np.maximum(first, 1.0),
                 causal=True, **common)]
    many = {**common, "batch": b * np.maximum(whole, 1.0)}
    out.append(_attn("attention_chunked", np.where(whole > 0, layers, 0.0),
                     seq_q=chunk + 0.0 * whole, seq_kv=chunk + 0.0 * whole, causal=True,
                     **many))
    out.append(_attn("attention_chunked", np.where(last > 0, layers, 0.0),
                     seq_q=np.maximum(last, 1.0), seq_kv=np.maximum(last, 1.0), causal=True,
                     **common))
    return out


def decode_graph(cfg: TransformerConfig, batch: Any, context_len: Any, tp: Any = 1,
                 dtypes: Dtypes | None = None, attention_impl: str = "flash",
                 fuse_allreduce: bool = False, parallel: str = "tp") -> list[GraphOp]:
    """Ops of one decode step: ``batch`` sequences each adding one token to a KV cache
    that then holds ``context_len`` tokens (the new one included), over ``tp`` GPUs laid
    out as ``parallel`` (``fuse_allreduce``, ``parallel``: see the module docstring)."""
    dt = dtypes or Dtypes()
    b, ctx, t = _arr(batch, "batch"), _arr(context_len, "context_len"), _arr(tp, "tp")
    b, t, experts = _layout(cfg, parallel, b, t)
    heads, kv = tp_heads(cfg, t)
    if cfg.is_mla:
        return _wrap(cfg, b, b, t, dt, _mla_decode(cfg, b, ctx, heads, dt, attention_impl),
                     fuse_allreduce, experts)
    common = {"batch": b, "heads": heads, "kv_heads": kv, "head_dim": float(cfg.head_dim),
              "dtype": dt.activation, "kv_dtype": dt.kv, "impl": attention_impl,
              "seq_q": 1.0, "causal": True, "phase": "decode"}
    attn: list[GraphOp] = []
    if cfg.num_full_layers:
        attn.append(_attn("attention", float(cfg.num_full_layers), seq_kv=ctx, **common))
    if cfg.num_sliding_layers:
        w = float(cfg.sliding_window or 1)
        # a chunked layer's new token at position ctx − 1 sees its chunk so far
        keys = np.mod(ctx - 1.0, w) + 1.0 if cfg.chunked_attention else np.minimum(ctx, w)
        attn.append(_attn("attention_chunked" if cfg.chunked_attention
                          else "attention_sliding", float(cfg.num_sliding_layers),
                          seq_kv=keys, **common))
    return _wrap(cfg, b, b, t, dt, attn, fuse_allreduce, experts)
