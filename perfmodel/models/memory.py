"""Device memory per GPU: weights, KV cache, activations, a stated reserve, what fits.

- Weights: linear weights at the weight dtype (experts at the expert dtype); embedding,
  LM head, norms, router, biases and sinks at the activation dtype. Tensor parallelism t
  divides attention (KV heads: max(H_kv/t, 1) of them per GPU; multi-head latent attention's
  down-projections are replicated, its up- and output projections divided), MLP, experts
  and vocabulary; norms, router and sinks are replicated. Quantisation scales are not
  counted.
- KV cache: 2·kv_heads_per_gpu·D·s_kv bytes per token per layer (multi-head latent
  attention: (r_kv + D_rope)·s_kv, the latent and the rotary key, on every GPU);
  full-attention layers keep every token of the context, sliding-window layers at most W.
- Activations (peak during a forward of T tokens, no autograd): the residual stream and the
  normed copy, 2·T·h, plus the larger of the attention block (QKV out + attention out) and
  the MLP block (gate/up out + activation out; MoE: permuted tokens k·T·h plus the expert
  intermediates), at the activation dtype; plus fp32 logits for the last position,
  4·batch·V/t. Whole-prompt prefill (no chunking), so T = batch·prompt.
- Expert and attention data parallelism (``parallel``, :mod:`perfmodel.models.graph`):
  the experts divide over the tp GPUs as under TP (E/t whole experts each under ``tep`` and
  ``dep``: the same bytes); under ``dep`` everything else is held whole by every GPU
  (attention, dense layers, shared experts, embedding and LM head), each GPU caches the
  KV of its own ⌈batch/t⌉ sequences, and its activations are those of its sequences plus
  the gathered tokens of the others, (t − 1)·T·h; ``max_batch`` then counts the sequences
  of the whole instance (t × a GPU's).
- Pipeline parallelism (``pp`` stages, :mod:`perfmodel.models.pipeline`): each GPU holds
  the layers of its stage, ⌈L/pp⌉ of L at most (counted as that share of every layer
  kind), and one of the embedding and the LM head (the first stage the one, the last the
  other; a tied matrix is held by both), so the largest stage holds ⌈L/pp⌉/L of the
  layers' bytes and one vocabulary matrix, and ⌈L/pp⌉/L of each sequence's KV cache; its
  activations are taken as a whole model's (per-layer peaks, and the logits, which the
  last stage holds).
- Reserve: ``reserve_fraction`` of capacity plus ``reserve_bytes`` (CUDA context, cuBLAS
  workspace, allocator fragmentation); 10 % + 1 GiB unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.dtypes import bytes_per_element, weight_bytes_per_element
from perfmodel.models.config import TransformerConfig, mla_projection_params
from perfmodel.models.graph import Dtypes, check_parallel, tp_heads
from perfmodel.models.pipeline import stage_layer_share
from perfmodel.ops.attention import kv_bytes
from perfmodel.ops.cost import Array
from perfmodel.timing.prediction import Value, as_value

__all__ = ["DEFAULT_RESERVE_BYTES", "DEFAULT_RESERVE_FRACTION", "MemoryEstimate",
           "activation_bytes", "estimate_memory", "gathered_bytes", "kv_cache_bytes",
           "weight_bytes"]

DEFAULT_RESERVE_FRACTION = 0.10
DEFAULT_RESERVE_BYTES = float(2**30)


def weight_bytes(cfg: TransformerConfig, tp: Any = 1, dtypes: Dtypes | None = None,
                 parallel: str = "tp", pp: int = 1) -> Array:
    """Weight bytes held by each GPU of ``tp`` laid out as ``parallel``; with ``pp``
    pipeline stages, by each GPU of the largest stage (module docstring)."""
    dt = dtypes or Dtypes()
    group = np.asarray(tp, dtype=np.float64)
    check_parallel(cfg, parallel, group)
    t = np.ones_like(group) if parallel == "dep" else group  # what divides the rest
    _, kv_t = tp_heads(cfg, t)
    h, layers = cfg.hidden_size, cfg.num_layers
    s_w, s_a = weight_bytes_per_element(dt.weight), bytes_per_element(dt.activation)
    s_e = weight_bytes_per_element(dt.expert)
    kv_share = kv_t / cfg.num_kv_heads  # fraction of the K/V projections each GPU holds
    attn_bias = ((cfg.q_width / t + 2.0 * cfg.kv_width * kv_share) if cfg.qkv_bias else 0.0) \
        + (h if cfg.o_bias else 0.0) + (cfg.num_heads / t if cfg.attention_sinks else 0.0)
    if cfg.is_mla:
        per_layer = _mla_weights(cfg, t) * s_w + (attn_bias + cfg.q_lora_rank
                                                  + cfg.kv_lora_rank) * s_a
    else:
        q_o = 2.0 * h * cfg.q_width / t
        k_v = 2.0 * h * cfg.kv_width * kv_share
        per_layer = (q_o + k_v) * s_w + attn_bias * s_a
    mats = 3.0 if cfg.gated_mlp else 2.0

    def mlp(width: float, s: float, div: Array = t) -> Array:
        bias = ((mats - 1.0) * width / div + h) if cfg.mlp_bias else 0.0
        return np.asarray(mats * h * width / div * s + bias * s_a)

    moe = cfg.num_moe_layers
    # MoE layers: experts (over the whole group), router (+ shared experts); the other
    # layers: the dense MLP
    moe_mlp = cfg.num_experts * mlp(cfg.expert_width, s_e, group) \
        + (h + float(cfg.router_bias)) * cfg.num_experts * s_a if moe else 0.0
    if moe and cfg.shared_expert_intermediate_size:
        moe_mlp = moe_mlp + mlp(cfg.shared_expert_intermediate_size, s_w)
    dense_mlp = mlp(cfg.intermediate_size, s_w) if layers > moe else 0.0
    norm = h * (2.0 if cfg.norm == "layer" else 1.0) * s_a
    per_layer = per_layer + 2.0 * norm
    matrix = cfg.vocab_size * h / t * s_a  # the embedding or the LM head, per GPU
    stack = layers * per_layer + moe * moe_mlp + (layers - moe) * dense_mlp
    if pp == 1:
        return np.asarray(stack + norm + matrix * (1.0 if cfg.tie_embeddings else 2.0),
                          dtype=np.float64)
    return np.asarray(stack * stage_layer_share(cfg, pp) + norm + matrix,
                      dtype=np.float64)


def _mla_weights(cfg: TransformerConfig, t: Array) -> Array:
    """Linear weights of one multi-head latent attention layer per GPU (elements): the
    down-projections replicated on every GPU (the engines' replicated ``q_a_proj`` /
    ``kv_a_proj_with_mqa``), the rest split over the t GPUs by heads
    (:func:`perfmodel.models.config.mla_projection_params`)."""
    down, split = mla_projection_params(cfg)
    return np.asarray(down + split / t, dtype=np.float64)


def gathered_bytes(cfg: TransformerConfig, tokens: Any, ranks: Any,
                   dtypes: Dtypes | None = None) -> Array:
    """Activations the other attention ranks gather to one GPU under ``dep`` for its
    ``tokens`` (their tokens of an MoE layer, as many as this GPU's each), bytes:
    (ranks − 1)·tokens·h at the activation dtype; 0 for one rank."""
    dt = dtypes or Dtypes()
    return np.asarray((np.asarray(ranks, dtype=np.float64) - 1.0)
                      * np.asarray(tokens, dtype=np.float64) * cfg.hidden_size
                      * bytes_per_element(dt.activation), dtype=np.float64)


def kv_bytes_per_token(cfg: TransformerConfig, tp: Any = 1, kv_dtype: str = "bf16") -> Array:
    """KV cache bytes per token of context in full-attention layers, per GPU:
    layers·kv_heads·(D + D_v)·s_kv with D_v = D (kv_heads per GPU under TP; the K/V bytes
    of :func:`perfmodel.ops.attention.kv_bytes`); multi-head latent attention caches
    layers·(r_kv + D_rope)·s_kv on every GPU (the latent is not split by heads)."""
    return cfg.num_full_layers * _kv_per_layer_token(cfg, tp, kv_dtype)


def _kv_per_layer_token(cfg: TransformerConfig, tp: Any, kv_dtype: str) -> Array:
    s_kv = bytes_per_element(kv_dtype)
    if cfg.is_mla:  # one latent "head", the same on every GPU of the TP group
        width = float(cfg.mla_cache_width)
        t = np.asarray(tp, dtype=np.float64)
        return np.asarray(kv_bytes(1.0, 1.0 + 0.0 * t, 1.0, width, width, s_kv, True),
                          dtype=np.float64)
    _, kv_t = tp_heads(cfg, np.asarray(tp, dtype=np.float64))
    d = float(cfg.head_dim)
    return np.asarray(kv_bytes(1.0, kv_t, 1.0, d, d, s_kv), dtype=np.float64)


def kv_cache_bytes(cfg: TransformerConfig, batch: Any, context_len: Any, tp: Any = 1,
                   kv_dtype: str = "bf16") -> Array:
    """KV cache of ``batch`` sequences of ``context_len`` tokens, bytes per GPU."""
    per_layer_token = _kv_per_layer_token(cfg, tp, kv_dtype)
    ctx = np.asarray(context_len, dtype=np.float64)
    window = float(cfg.sliding_window or 0)
    tokens = cfg.num_full_layers * ctx + cfg.num_sliding_layers * np.minimum(ctx, window)
    return np.asarray(np.asarray(batch, dtype=np.float64) * tokens * per_layer_token)


def activation_bytes(cfg: TransformerConfig, batch: Any, tokens_per_seq: Any, tp: Any = 1,
                     dtypes: Dtypes | None = None) -> Array:
    """Peak activation bytes of a forward of ``batch`` × ``tokens_per_seq`` tokens, per GPU
    (formula in the module docstring)."""
    dt = dtypes or Dtypes()
    t = np.asarray(tp, dtype=np.float64)
    heads, kv = tp_heads(cfg, t)
    b = np.asarray(batch, dtype=np.float64)
    tokens = b * np.asarray(tokens_per_seq, dtype=np.float64)
    h, d = cfg.hidden_size, cfg.head_dim
    attn = (2.0 * heads + 2.0 * kv) * d
    up = 2.0 if cfg.gated_mlp else 1.0
    mlp = (up + 1.0) * np.ceil(cfg.intermediate_size / t) if cfg.num_moe_layers \
        < cfg.num_layers else 0.0
    if cfg.is_moe:
        k = cfg.experts_per_token
        mlp = np.maximum(mlp, k * h + k * (up + 1.0) * np.ceil(cfg.expert_width / t))
    per_token = (2.0 * h + np.maximum(attn, mlp)) * bytes_per_element(dt.activation)
    logits = 4.0 * b * np.ceil(cfg.vocab_size / t)
    return np.asarray(tokens * per_token + logits, dtype=np.float64)


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory per GPU, bytes (floats for scalar inputs, arrays for array inputs).

    ``fits``: weights + KV cache + activations + reserve ≤ capacity. ``max_batch``: the most
    sequences of this context (and prompt) that fit; ``max_context``: the longest context
    (KV cache) that fits at this batch with the activations of this prompt. Both 0 when the
    weights alone do not fit. ``kv_bytes_per_token``: the KV cache one token of context
    takes in every layer (sliding-window layers stop growing past their window).
    """

    capacity_bytes: float
    reserve_bytes: float
    weights_bytes: Value
    kv_cache_bytes: Value
    activation_bytes: Value
    total_bytes: Value
    fits: bool | np.ndarray[Any, np.dtype[np.bool_]]
    max_batch: Value
    max_context: Value
    kv_bytes_per_token: Value

    def explain(self) -> str:
        """One line with the numbers (first point for array inputs)."""
        def first(x: Value) -> float:
            return float(np.asarray(x).flat[0])
        gb = 1e9
        need = first(self.total_bytes)
        verdict = "fits" if need <= self.capacity_bytes else "does NOT fit"
        return (f"{verdict}: {need / gb:.1f} GB needed (weights "
                f"{first(self.weights_bytes) / gb:.1f} + KV cache "
                f"{first(self.kv_cache_bytes) / gb:.1f} + activations "
                f"{first(self.activation_bytes) / gb:.1f} + reserve {self.reserve_bytes / gb:.1f})"
                f" of {self.capacity_bytes / gb:.1f} GB per GPU")

    def to_dict(self) -> dict[str, Any]:
        def conv(x: Any) -> Any:
            arr = np.asarray(x)
            return arr.tolist() if arr.ndim else arr.item()
        return {name: conv(getattr(self, name)) for name in (
            "weights_bytes", "kv_cache_bytes", "activation_bytes", "reserve_bytes",
            "total_bytes", "capacity_bytes", "fits", "max_batch", "max_context",
            "kv_bytes_per_token")}


def estimate_memory(cfg: TransformerConfig, capacity_bytes: float, batch: Any, context_len: Any,
                    prompt_len: Any, tp: Any = 1, dtypes: Dtypes | None = None,
                    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
                    reserve_bytes: float = DEFAULT_RESERVE_BYTES,
                    parallel: str = "tp", pp: int = 1) -> MemoryEstimate:
    """Memory of ``batch`` sequences holding ``context_len`` tokens of KV cache, the
    activation peak being that of a ``prompt_len`` prefill (per GPU of ``tp`` laid out as
    ``parallel``, of the largest of ``pp`` pipeline stages: module docstring)."""
    dt = dtypes or Dtypes()
    from perfmodel._errors import PerfmodelError

    for name, value, upper in (("reserve_fraction", reserve_fraction, 1.0),
                               ("reserve_bytes", reserve_bytes, capacity_bytes)):
        number = isinstance(value, (int, float, np.integer, np.floating))
        if isinstance(value, bool) or not number or not 0.0 <= value < upper:  # NaN too
            raise PerfmodelError(name, f"must be a number in [0, {upper:g}), got "
                                 f"{value!r}", "e.g. reserve_fraction=0.1, "
                                 "reserve_bytes=2**30")
    reserve = reserve_fraction * capacity_bytes + reserve_bytes
    group = np.asarray(tp, dtype=np.float64)
    w = weight_bytes(cfg, group, dt, parallel, pp)
    layer_share = stage_layer_share(cfg, pp)  # of each sequence's KV cache
    # under dep a GPU holds its own sequences with attention unsplit, beside the tokens
    # the other GPUs gather to it for the experts
    dep = parallel == "dep"
    tp = np.ones_like(group) if dep else group
    share = group if dep else np.ones_like(group)
    b = np.ceil(np.asarray(batch, dtype=np.float64) / share)
    ctx = np.asarray(context_len, dtype=np.float64)
    gathered = gathered_bytes(cfg, prompt_len, share, dt)  # per sequence of this GPU
    kv = kv_cache_bytes(cfg, b, ctx, tp, dt.kv) * layer_share
    act = activation_bytes(cfg, b, prompt_len, tp, dt) + b * gathered
    total = w + kv + act + reserve
    avail = capacity_bytes - reserve - w
    # per sequence: KV cache + activations (both linear in batch)
    per_seq = kv_cache_bytes(cfg, 1.0, ctx, tp, dt.kv) * layer_share + activation_bytes(
        cfg, 1.0, prompt_len, tp, dt) + gathered
    max_batch = share * np.where(avail > 0, np.floor(np.maximum(avail, 0.0) / per_seq), 0.0)
    # longest context at this batch: full layers grow a·c, sliding ones b·min(c, W)
    room = np.maximum(avail - act, 0.0) / b
    unit = kv_cache_bytes(cfg, 1.0, 1.0, tp, dt.kv) / max(cfg.num_layers, 1) \
        * layer_share  # per layer-token
    a_full, a_slide = cfg.num_full_layers * unit, cfg.num_sliding_layers * unit
    win = float(cfg.sliding_window or 0)
    c1 = room / np.maximum(a_full + a_slide, 1e-30)
    c2 = np.where(a_full > 0, (room - a_slide * win) / np.maximum(a_full, 1e-30), np.inf)
    max_ctx = np.where(c1 <= win, c1, c2) if cfg.num_sliding_layers else c1
    max_ctx = np.where(avail - act > 0, np.floor(max_ctx), 0.0)
    fits = np.asarray(total <= capacity_bytes)
    return MemoryEstimate(
        capacity_bytes=float(capacity_bytes), reserve_bytes=float(reserve),
        weights_bytes=as_value(w), kv_cache_bytes=as_value(kv), activation_bytes=as_value(act),
        total_bytes=as_value(total), fits=bool(fits) if fits.ndim == 0 else fits,
        max_batch=as_value(max_batch), max_context=as_value(max_ctx),
        kv_bytes_per_token=as_value(kv_cache_bytes(cfg, 1.0, 1.0, tp, dt.kv) * layer_share),
    )
