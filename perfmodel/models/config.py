"""Transformer configs: a frozen pydantic model, bundled presets, Hugging Face config.json.

A preset is the ``config.json`` of a public checkpoint (``presets/<id>.json``, with its
source in ``_source``); a user's ``config.json`` is read the same way, offline. Unknown
Hugging Face keys are ignored; missing or contradictory required ones fail naming the key.
Parameter counts are computed from the config (:func:`param_counts`), never typed in.
"""

from __future__ import annotations

import difflib
import functools
import json
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from perfmodel._errors import PerfmodelError, PerfmodelWarning
from perfmodel._limits import MAX_LAYERS, MAX_MODEL_DIM, MAX_TOKENS, MAX_VOCAB, clip_message
from perfmodel.dtypes import DType

__all__ = [
    "TransformerConfig", "active_params", "from_hf_dict", "list_models", "load_model",
    "num_params", "param_counts", "presets_dir",
]

# Caps (perfmodel._limits) keep an absurd config (10⁹ layers) from printing 25-digit
# parameter counts; each is far beyond any published model.
def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not the number 1 here (pydantic would take it as 1 layer)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {str(value).lower()}")
    return value


_NB = BeforeValidator(_not_bool)
Pos = Annotated[int, _NB, Field(gt=0, le=MAX_MODEL_DIM)]
NonNeg = Annotated[int, _NB, Field(ge=0, le=MAX_MODEL_DIM)]
Layers = Annotated[int, _NB, Field(gt=0, le=MAX_LAYERS)]
Vocab = Annotated[int, _NB, Field(gt=0, le=MAX_VOCAB)]
Positions = Annotated[int, _NB, Field(gt=0, le=int(MAX_TOKENS))]


class TransformerConfig(BaseModel):
    """A decoder-only transformer (dense or mixture-of-experts), as the cost model sees it.

    Every layer: norm → QKV projection (+ rotary) → attention → O projection → residual add
    → norm → MLP (gate/up → activation·mul → down, or MoE experts) → residual add.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Preset id or the file it came from."""
    hidden_size: Pos
    """Model width h."""
    num_layers: Layers
    num_heads: Pos
    """Query heads H_q."""
    num_kv_heads: Pos
    """Key/value heads H_kv (GQA: H_q/H_kv query heads share one; MQA: 1)."""
    head_dim: Pos
    """Per-head width D (h/H_q unless the checkpoint says otherwise)."""
    intermediate_size: Pos
    """Dense MLP width (for MoE layers see ``expert_intermediate_size``)."""
    gated_mlp: bool = True
    """Gate and up projections with activation(gate)·up (SwiGLU/GeGLU), else up → act."""
    activation: Literal["silu", "gelu", "relu"] = "silu"
    vocab_size: Vocab
    tie_embeddings: bool = False
    """LM head shares the embedding matrix (not counted twice)."""
    norm: Literal["rms", "layer"] = "rms"
    """RMSNorm (weight) or LayerNorm (weight and bias)."""
    rotary: bool = True
    max_position_embeddings: Positions | None = None
    """The model's context window (positions it was trained for); longer contexts warn."""
    qkv_bias: bool = False
    """Biases on the Q, K and V projections (Qwen2, gpt-oss)."""
    o_bias: bool = False
    mlp_bias: bool = False
    """Biases on the MLP / expert projections (gpt-oss experts)."""
    attention_sinks: bool = False
    """One learned sink logit per head and layer (gpt-oss)."""
    sliding_window: Positions | None = None
    """Keys a sliding-window layer attends to (and keeps in its KV cache)."""
    num_sliding_layers: Annotated[int, _NB, Field(ge=0, le=MAX_LAYERS)] = 0
    """Layers using ``sliding_window``; the others attend to the whole context."""
    chunked_attention: bool = False
    """The ``num_sliding_layers`` local layers attend within fixed chunks of
    ``sliding_window`` positions (Llama 4's chunked local attention: a token at position q
    attends to positions ⌊q/C⌋·C … q) instead of to the last ``sliding_window`` positions."""
    num_experts: NonNeg = 0
    """Routed experts per MoE layer (0: dense model)."""
    experts_per_token: NonNeg = 0
    """Experts each token is routed to (top-k)."""
    expert_intermediate_size: Pos | None = None
    """Width of one expert's MLP (default ``intermediate_size``)."""
    shared_expert_intermediate_size: NonNeg = 0
    """Total width of always-on shared experts in MoE layers (0: none)."""
    num_dense_layers: Annotated[int, _NB, Field(ge=0, le=MAX_LAYERS)] = 0
    """Layers of an MoE model whose MLP is dense, ``intermediate_size`` wide (DeepSeek's
    leading ``first_k_dense_replace``; the layers between MoE ones where a family
    interleaves them: Llama 4 Maverick, DeepSeek ``moe_layer_freq``, Qwen-MoE
    ``decoder_sparse_step`` / ``mlp_only_layers``, ERNIE 4.5's MoE index range); the other
    layers are MoE layers. The costs count layers of each kind, whatever their order."""
    router_bias: bool = False
    kv_lora_rank: NonNeg = 0
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; 0: standard attention): width
    of the compressed KV latent every token caches per layer, shared by all heads. The
    query/key width ``head_dim`` is then the non-rotary part plus ``qk_rope_head_dim``, and
    ``num_kv_heads`` equals ``num_heads`` (each head's keys and values are projected up from
    the latent)."""
    q_lora_rank: NonNeg = 0
    """MLA: width of the query's low-rank projection (0: one direct query projection)."""
    qk_rope_head_dim: NonNeg = 0
    """MLA: the rotary part of each head's query/key width; its key part, one per token
    shared by the heads, is cached beside the latent."""
    v_head_dim: Pos | None = None
    """MLA: per-head value width (default ``head_dim``)."""
    weight_dtype: DType = "bf16"
    """Checkpoint dtype of the linear weights (``torch_dtype`` / quantisation)."""
    expert_weight_dtype: DType | None = None
    """Checkpoint dtype of the expert weights when it differs (gpt-oss: MXFP4 → fp4)."""
    block_scales: bool = False
    """The checkpoint's fp8 weights carry block scales (128×128: DeepSeek-V3's and the
    Qwen3 FP8 checkpoints' ``quantization_config.weight_block_size``), so an engine runs
    its block-scaled fp8 GEMMs for them rather than its per-tensor / per-channel ones."""
    mx_experts: bool = False
    """The expert weights are MXFP4 (OCP microscaling: fp4 with one e8m0 scale per 32;
    gpt-oss's ``quant_method: mxfp4``), which engines multiply by 8-bit (MXFP8) or 16-bit
    activations, not fp4 ones (:mod:`perfmodel.models.evaluate`)."""
    source: str = ""
    """Where the numbers come from (checkpoint repository)."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        heads = data.get("num_heads")
        if data.get("num_kv_heads") is None and heads is not None:
            data["num_kv_heads"] = heads
        hidden = data.get("hidden_size")
        if data.get("head_dim") is None and isinstance(hidden, int) and isinstance(heads, int) \
                and heads > 0:
            if hidden % heads != 0:
                raise ValueError(
                    f"num_heads ({heads}) does not divide hidden_size ({hidden}) and no "
                    "head_dim is given; fix num_heads or give head_dim explicitly")
            data["head_dim"] = hidden // heads
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TransformerConfig:
        problems: list[str] = []
        if self.num_heads % self.num_kv_heads != 0:
            problems.append(f"num_kv_heads ({self.num_kv_heads}) does not divide num_heads "
                            f"({self.num_heads}); GQA needs whole query-head groups")
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                problems.append(f"experts_per_token ({self.experts_per_token}) must be between "
                                f"1 and num_experts ({self.num_experts})")
        elif self.experts_per_token or self.shared_expert_intermediate_size \
                or self.num_dense_layers:
            problems.append("experts_per_token / shared experts / dense layers given but "
                            "num_experts is 0")
        if self.num_dense_layers >= self.num_layers and self.num_experts:
            problems.append(f"num_dense_layers ({self.num_dense_layers}) leaves no MoE layer "
                            f"of {self.num_layers}")
        if self.num_sliding_layers > self.num_layers:
            problems.append(f"num_sliding_layers ({self.num_sliding_layers}) exceeds "
                            f"num_layers ({self.num_layers})")
        if self.num_sliding_layers and self.sliding_window is None:
            problems.append("num_sliding_layers > 0 needs sliding_window")
        if self.chunked_attention and not self.num_sliding_layers:
            problems.append("chunked_attention needs num_sliding_layers > 0 (the chunked "
                            "layers) and sliding_window (the chunk)")
        problems += self._mla_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _mla_problems(self) -> list[str]:
        """What makes the multi-head latent attention fields inconsistent."""
        if not self.kv_lora_rank:
            if self.q_lora_rank or self.qk_rope_head_dim or self.v_head_dim is not None:
                return ["q_lora_rank / qk_rope_head_dim / v_head_dim describe multi-head "
                        "latent attention, which needs kv_lora_rank > 0"]
            return []
        problems = []
        if not 0 < self.qk_rope_head_dim < self.head_dim:
            problems.append(f"qk_rope_head_dim ({self.qk_rope_head_dim}) must be between 1 "
                            f"and head_dim - 1 ({self.head_dim - 1}): head_dim is the "
                            "non-rotary part plus the rotary part")
        if self.num_kv_heads != self.num_heads:
            problems.append(f"multi-head latent attention projects keys and values for every "
                            f"head: num_kv_heads ({self.num_kv_heads}) must equal num_heads "
                            f"({self.num_heads})")
        if self.num_sliding_layers:
            problems.append("sliding-window layers with multi-head latent attention are not "
                            "modelled")
        if self.qkv_bias:
            problems.append("Q/K/V biases with multi-head latent attention are not modelled")
        return problems

    # ------------------------------------------------------------------ derived
    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (``kv_lora_rank`` > 0)."""
        return self.kv_lora_rank > 0

    @property
    def value_dim(self) -> int:
        """Per-head value width D_v (``v_head_dim``, default ``head_dim``)."""
        return self.v_head_dim or self.head_dim

    @property
    def mla_cache_width(self) -> int:
        """MLA: elements one token caches per layer, the latent and the rotary key
        (``kv_lora_rank + qk_rope_head_dim``)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_width(self) -> int:
        """One expert's MLP width."""
        return self.expert_intermediate_size or self.intermediate_size

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is the routed experts (0 for a dense model)."""
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_full_layers(self) -> int:
        """Layers attending to the whole context."""
        return self.num_layers - self.num_sliding_layers

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim


# ---------------------------------------------------------------------- parameters
def param_counts(cfg: TransformerConfig) -> dict[str, int]:
    """Parameters by group (whole model), from the shapes alone.

    attention per layer = h·(H_q + 2·H_kv)·D + H_q·D·h (+ biases, + H_q sinks);
    dense MLP per layer = (3 if gated else 2)·h·I (+ biases); MoE per MoE layer =
    E·expert MLP + router h·E (+ shared experts), the dense MLP on the others; norms =
    (2 per layer + final) × h (× 2 for LayerNorm); embedding V·h, LM head V·h unless tied.
    Multi-head latent attention: :func:`mla_attention_params` per layer.
    """
    h, layers = cfg.hidden_size, cfg.num_layers
    if cfg.is_mla:
        attn = mla_attention_params(cfg)
    else:
        qkv_out = cfg.q_width + 2 * cfg.kv_width
        attn = h * qkv_out + cfg.q_width * h
        attn += qkv_out if cfg.qkv_bias else 0
    attn += h if cfg.o_bias else 0
    attn += cfg.num_heads if cfg.attention_sinks else 0
    mats = 3 if cfg.gated_mlp else 2

    def mlp(width: int) -> int:
        bias = ((2 if cfg.gated_mlp else 1) * width + h) if cfg.mlp_bias else 0
        return mats * h * width + bias

    per_norm = h * (2 if cfg.norm == "layer" else 1)
    out = {
        "embedding": cfg.vocab_size * h,
        "lm_head": 0 if cfg.tie_embeddings else cfg.vocab_size * h,
        "attention": layers * attn,
        "norms": (2 * layers + 1) * per_norm,
    }
    moe = cfg.num_moe_layers
    if moe:
        out["experts"] = moe * cfg.num_experts * mlp(cfg.expert_width)
        out["router"] = moe * (h * cfg.num_experts + (cfg.num_experts if cfg.router_bias
                                                       else 0))
        if cfg.shared_expert_intermediate_size:
            out["shared_experts"] = moe * mlp(cfg.shared_expert_intermediate_size)
    if layers > moe:
        out["mlp"] = (layers - moe) * mlp(cfg.intermediate_size)
    return out


def mla_projection_params(cfg: TransformerConfig) -> tuple[int, int]:
    """The linear weights of one layer's multi-head latent attention, as (the
    down-projections engines replicate on every GPU, the projections split by heads), with
    H heads, D = D_nope + D_rope, r_q / r_kv the query / KV ranks: down h·(r_q + r_kv +
    D_rope) (the query's, and the latent's with the rotary key; with no query rank the
    query's projection h·H·D is split instead); split r_q·H·D (the query's up-projection),
    r_kv·H·(D_nope + D_v) (keys' and values'), H·D_v·h (output)."""
    h, heads, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    rq, rkv, rope = cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    down = h * (rq + rkv + rope)
    split = (rq or h) * heads * d + rkv * heads * (d - rope + cfg.value_dim) \
        + heads * cfg.value_dim * h
    return down, split


def mla_attention_params(cfg: TransformerConfig) -> int:
    """Parameters of one layer's multi-head latent attention (no biases): its projections
    (:func:`mla_projection_params`) and the RMSNorms of the query rank (r_q, where there is
    one) and of the latent (r_kv)."""
    down, split = mla_projection_params(cfg)
    return down + split + cfg.q_lora_rank + cfg.kv_lora_rank


def num_params(cfg: TransformerConfig) -> int:
    """Total parameters (a tied LM head counted once)."""
    return sum(param_counts(cfg).values())


def active_params(cfg: TransformerConfig) -> int:
    """Parameters one token uses: routed experts count k/E of theirs (embedding included,
    as Mistral counts Mixtral's 12.9B; OpenAI's gpt-oss figures leave the embedding out)."""
    counts = param_counts(cfg)
    if not cfg.is_moe:
        return sum(counts.values())
    experts = counts.pop("experts")
    return sum(counts.values()) + experts * cfg.experts_per_token // cfg.num_experts


# ---------------------------------------------------------------------- Hugging Face
_GATED_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                "phi3", "gemma", "gemma2", "gemma3", "gemma3_text", "gpt_oss", "olmo",
                "olmo2", "granite", "internlm2", "yi", "deepseek", "starcoder2_gated"}
#: Model types whose transformers config class ties the LM head to the embedding by
#: default: a config.json saved by transformers leaves a value equal to its class's
#: default out, so a missing ``tie_word_embeddings`` means True for these, False for the
#: Llama-like rest (LlamaConfig, MistralConfig, Qwen2Config... default to False).
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "cohere",
                              "cohere2", "starcoder2", "minicpm", "mpt"})
#: Types that write ``layer_norm_epsilon`` for what is an RMSNorm.
_RMS_TYPES = frozenset({"exaone"})
#: quantization_config methods whose ``bits`` give integer weights (int4/int8).
_INT_QUANT_METHODS = frozenset({"awq", "gptq", "awq_marlin", "gptq_marlin"})
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16",
                 "float": "fp32"}
_ACTS = {"silu": "silu", "swish": "silu", "swiglu": "silu", "gelu": "gelu",
         "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu",
         "gelu_python": "gelu", "relu": "relu"}


def _first_group_weights(quant: dict[str, Any]) -> dict[str, Any] | None:
    """A compressed-tensors (llm-compressor) quantization_config's first config group's
    ``weights`` object; None where the file names none."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None
    first = next(iter(groups.values()))
    weights = first.get("weights") if isinstance(first, dict) else None
    return weights if isinstance(weights, dict) else None


def _compressed_tensors_dtype(quant: dict[str, Any], name: str) -> str | None:
    """The weight dtype of a compressed-tensors (llm-compressor) checkpoint: its first
    config group's ``weights`` (``num_bits``, ``type``): int 4/8 → int4/int8, float 8/4 →
    fp8/fp4; None where the file names no group."""
    weights = _first_group_weights(quant)
    if weights is None:
        return None
    kind, bits = str(weights.get("type", "int")), weights.get("num_bits")
    known: dict[tuple[str, Any], str] = {("int", 4): "int4", ("int", 8): "int8",
                                         ("float", 8): "fp8", ("float", 4): "fp4"}
    dtype = known.get((kind, bits))
    if dtype is None:
        raise PerfmodelError(f"{name}: quantization_config.config_groups",
                             f"{kind} weights of {bits!r} bits are not modelled",
                             "pass --weight-dtype for the nearest dtype")
    return dtype


#: Keys of a multimodal wrapper config that describe the whole checkpoint, carried into
#: its text_config when that lacks them.
_WRAPPER_KEYS = ("quantization_config", "torch_dtype", "dtype", "_name")
#: transformers' class defaults for keys its config.json files leave out (a saved config
#: omits a value equal to its class's default): Gemma3TextConfig's, for a ``gemma3_text``
#: config (a Gemma 3 4B/12B/27B checkpoint's text_config names none of its head counts).
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131_072, "sliding_window": 4096,
                    "sliding_window_pattern": 6},
}
#: Older Falcon checkpoints name their type after the RefinedWeb dataset.
_TYPE_ALIASES = {"refinedweb": "falcon", "refinedwebmodel": "falcon"}


def _sub(d: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """The nested object ``d[key]`` (``{}`` when absent), else an error naming ``key``."""
    value = d.get(key) or {}
    if not isinstance(value, dict):
        raise PerfmodelError(f"{name}: {key}", "expected a JSON object",
                             "check the file is a Hugging Face config.json")
    return value


def _normalise(d: dict[str, Any], name: str) -> dict[str, Any]:
    """Rewrite a family's own keys into the Llama-like names :func:`from_hf_dict` reads.

    - class defaults a saved config leaves out (``_CLASS_DEFAULTS``);
    - DBRX: ``n_heads``, ``n_layers``, ``attn_config.kv_n_heads``, ``ffn_config`` (experts,
      top-k, the expert width, the activation), ``max_seq_len``;
    - MPT: ``n_heads``, ``n_layers``, ``expansion_ratio``·``d_model`` wide GELU MLP, ALiBi
      positions (no rotary op), biases unless ``no_bias``, the LM head tied to the embedding;
    - EXAONE: ``num_layers``;
    - ERNIE 4.5 MoE: ``moe_num_experts``, ``moe_k``, shared experts, dense layers before
      ``moe_layer_start_index``;
    - DeepSeek-style MoE (DeepSeek-MoE, GLM-4.5, Kimi): ``n_shared_experts`` shared
      experts of ``moe_intermediate_size`` each, ``first_k_dense_replace`` dense layers.
    Layouts the cost model cannot describe (MoE every other layer, trailing dense layers)
    are refused naming the key.
    """
    out = dict(d)
    mtype = str(out.get("model_type", "")).lower()
    for key, value in _CLASS_DEFAULTS.get(mtype, {}).items():
        if key == "sliding_window_pattern" and isinstance(out.get("layer_types"), list):
            continue
        out.setdefault(key, value)
    if mtype in ("dbrx", "mpt"):
        attn, ffn = _sub(out, "attn_config", name), _sub(out, "ffn_config", name)
        for ours, theirs in (("num_attention_heads", "n_heads"),
                             ("num_hidden_layers", "n_layers"),
                             ("max_position_embeddings", "max_seq_len")):
            if out.get(ours) is None and out.get(theirs) is not None:
                out[ours] = out[theirs]
        if attn.get("kv_n_heads") is not None:
            out.setdefault("num_key_value_heads", attn["kv_n_heads"])
        if mtype == "dbrx":
            act = _sub(ffn, "ffn_act_fn", name).get("name", "silu")
            out.update({"num_local_experts": ffn.get("moe_num_experts"),
                        "num_experts_per_tok": ffn.get("moe_top_k"),
                        "intermediate_size": ffn.get("ffn_hidden_size"),
                        "hidden_act": act, "_gated_mlp": True})
        else:
            ratio = out.get("expansion_ratio", 4)
            hidden = out.get("d_model")
            if isinstance(ratio, (int, float)) and isinstance(hidden, int) \
                    and not isinstance(ratio, bool):
                out.setdefault("intermediate_size", round(ratio * hidden))
            out.setdefault("hidden_act", str(_sub(ffn, "ffn_act_fn", name).get("name",
                                                                                  "gelu")))
            out["_gated_mlp"] = False
            if not attn.get("alibi", False) and not attn.get("rope", False):
                raise PerfmodelError(f"{name}: attn_config", "MPT without ALiBi or RoPE uses "
                                     "learned absolute positions, which are not modelled",
                                     "use a rotary-position model")
            out["_rotary"] = bool(attn.get("rope", False))  # ALiBi: a bias, no rotary op
            out.setdefault("attention_bias", not out.get("no_bias", False))
            out.setdefault("mlp_bias", not out.get("no_bias", False))
            out.setdefault("layer_norm_eps", 1e-5)  # MPT's norm is a LayerNorm
    if mtype == "exaone" and out.get("num_hidden_layers") is None:
        out["num_hidden_layers"] = out.get("num_layers")
    if mtype.startswith("ernie4_5") and out.get("moe_num_experts"):
        layers = _whole(_req(out, name, "num_hidden_layers"), "num_hidden_layers", name)
        start = _whole(out.get("moe_layer_start_index", 0) or 0, "moe_layer_start_index", name)
        end = out.get("moe_layer_end_index", layers - 1)
        step = _whole(out.get("moe_layer_interval", 1) or 1, "moe_layer_interval", name)
        last = layers - 1 if end is None or end == -1 else _whole(end, "moe_layer_end_index",
                                                                     name)
        shared = _whole(out.get("moe_num_shared_experts", 0) or 0, "moe_num_shared_experts",
                        name)
        # ERNIE 4.5's MoE layers: every ``moe_layer_interval``-th layer from the start index
        # to the end index, dense ones elsewhere
        out.update({"num_local_experts": out["moe_num_experts"],
                    "num_experts_per_tok": out.get("moe_k"), "n_shared_experts": shared,
                    "_moe_layers": sum(1 for i in range(start, min(last, layers - 1) + 1)
                                       if (i - start) % step == 0)})
        if out.get("use_bias"):
            out.setdefault("attention_bias", True)
    if out.get("n_shared_experts") and out.get("shared_expert_intermediate_size") is None:
        out["shared_expert_intermediate_size"] = _whole(
            out["n_shared_experts"], "n_shared_experts", name) * _whole(
            _req(out, name, "moe_intermediate_size"), "moe_intermediate_size", name)
    if out.get("moe_layer_freq") is not None and _whole(out["moe_layer_freq"] or 1,
                                                        "moe_layer_freq", name) > 1:
        # DeepSeek-MoE/V2: an MoE layer at every moe_layer_freq-th index from
        # first_k_dense_replace on, dense ones elsewhere
        freq = _whole(out["moe_layer_freq"], "moe_layer_freq", name)
        first = _whole(out.get("first_k_dense_replace", 0) or 0, "first_k_dense_replace", name)
        layers = _whole(_req(out, name, "num_hidden_layers"), "num_hidden_layers", name)
        out["_moe_layers"] = sum(1 for i in range(first, layers) if i % freq == 0)
    return out


def _req(d: dict[str, Any], source: str, *keys: str) -> Any:
    for key in keys:
        if d.get(key) is not None:
            return d[key]
    raise PerfmodelError(f"{source}: {keys[0]}", "missing from config.json",
                         f"add \"{keys[0]}\" (the model's value) to the file")


def from_hf_dict(d: dict[str, Any], name: str = "config.json") -> TransformerConfig:
    """Build a config from the contents of a Hugging Face ``config.json`` (offline).

    Unknown keys are ignored. Architectures this model cannot represent honestly
    (multi-head latent attention, learned absolute positions) are refused by name.
    """
    if "text_config" in d and "hidden_size" not in d:
        if not isinstance(d["text_config"], dict):
            raise PerfmodelError(f"{name}: text_config", "expected a JSON object",
                                 "check the file is a Hugging Face config.json")
        # a multimodal wrapper: the language model is text_config; what the wrapper says
        # of the whole checkpoint (quantisation, dtype, name) holds for it too
        outer = {k: d[k] for k in _WRAPPER_KEYS if k in d}
        d = {**outer, **d["text_config"], "_source": d.get("_source", "")}
    alias = _TYPE_ALIASES.get(str(d.get("model_type", "")).lower())
    if alias is not None:
        d = {**d, "model_type": alias}
    _check_architecture(d, name)
    d = _normalise(d, name)
    mtype = str(d.get("model_type", "")).lower()
    act = str(d.get("hidden_act", d.get("hidden_activation", d.get(
        "activation_function", "gelu" if mtype == "falcon" else "silu")))).lower()
    if act not in _ACTS:
        raise PerfmodelError(f"{name}: hidden_act", f"activation {act!r} is not modelled",
                             f"use one of {', '.join(sorted(_ACTS))}")
    gated = bool(d.get("_gated_mlp", mtype in _GATED_TYPES or _ACTS[act] == "silu"))
    hidden = _req(d, name, "hidden_size", "n_embd", "d_model")
    heads = _req(d, name, "num_attention_heads", "n_head")
    inter = d.get("intermediate_size", d.get("n_inner", d.get("ffn_dim",
                                                               d.get("ffn_hidden_size"))))
    if inter is None:
        if gated:
            _req(d, name, "intermediate_size")
        inter = 4 * _whole(hidden, "hidden_size", name)
    layer_types = d.get("layer_types")
    window = d.get("sliding_window")
    dense_between = d.get("mlp_only_layers") or []
    moe = bool(d.get("num_local_experts") or d.get("num_experts") or d.get("n_routed_experts"))
    moe_layers = d.get("_moe_layers")  # set where a family interleaves (_normalise)
    if moe_layers is not None:
        moe_layers = _whole(moe_layers, "_moe_layers", name)
    sparse_step = _whole(d.get("decoder_sparse_step", 1) or 1, "decoder_sparse_step", name)
    if moe and (sparse_step > 1 or dense_between):
        # Qwen-MoE: layer i is MoE where it is not in mlp_only_layers and (i + 1) is a
        # multiple of decoder_sparse_step (transformers' Qwen2-MoE decoder layer)
        if not isinstance(dense_between, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in dense_between):
            raise PerfmodelError(f"{name}: mlp_only_layers", "expected a list of layer "
                                 "indices", "copy mlp_only_layers from the model's config.json")
        layers_ = _whole(_req(d, name, "num_hidden_layers"), "num_hidden_layers", name)
        only = set(dense_between)
        moe_layers = sum(1 for i in range(layers_) if i not in only
                         and (i + 1) % sparse_step == 0)
    llama4 = mtype.startswith("llama4")
    llama4_dense = 0
    if llama4:
        # Llama 4 Maverick: an MoE layer every ``interleave_moe_layer_step`` layers (the
        # last of each step: transformers' Llama4TextModel), the others dense MLPs of
        # ``intermediate_size_mlp``; the costs count layers of each kind, not their order
        step = _whole(d.get("interleave_moe_layer_step", 1) or 1, "interleave_moe_layer_step",
                      name)
        if step > 1 and moe:
            layers_ = _whole(_req(d, name, "num_hidden_layers"), "num_hidden_layers", name)
            llama4_dense = layers_ - layers_ // step
            moe_layers = layers_ // step
            if d.get("intermediate_size_mlp") is None:
                raise PerfmodelError(f"{name}: intermediate_size_mlp", "Llama 4 with dense "
                                     "layers between the MoE ones needs their width",
                                     "copy intermediate_size_mlp from the model's config.json")
        # chunked local attention (a token attends within its attention_chunk_size chunk)
        # on the RoPE layers (chunked_attention; the KV cache of those layers holds at most
        # a chunk); every 4th layer (NoPE) is global, as transformers' Llama 4 builds them
        chunk = d.get("attention_chunk_size")
        if chunk:
            window = chunk
            if not isinstance(layer_types, list):
                layer_types = ["sliding" if (i + 1) % 4 else "full" for i in range(
                    _whole(_req(d, name, "num_hidden_layers"), "num_hidden_layers", name))]
    if d.get("linear_attn_config"):  # Kimi Linear: KDA (delta-rule) layers between MLA ones
        raise PerfmodelError(f"{name}: linear_attn_config", "linear-attention layers (Kimi "
                             "Delta Attention) are not modelled", "use a model whose layers "
                             "are all full or sliding-window attention")
    if isinstance(layer_types, list):
        other = sorted({str(t) for t in layer_types
                        if any(w in str(t).lower() for w in _NON_ATTENTION_LAYER_WORDS)})
        if other:  # Qwen3-Next's "linear_attention" (Gated DeltaNet) layers and the like
            raise PerfmodelError(f"{name}: layer_types", f"layers of type "
                                 f"{clip_message(', '.join(other), 60)!r} are not attention "
                                 "layers the cost model describes (linear-attention and "
                                 "recurrent layers are not modelled)", "use a model whose "
                                 "layers are all full or sliding-window attention")
        # a chunked layer (Llama 4's "chunked_attention") is a local layer whose window is
        # its chunk (chunked_attention below)
        sliding = sum(1 for t in layer_types if "sliding" in str(t) or "chunked" in str(t))
    elif window and (mtype == "gemma2" or d.get("sliding_window_pattern") is not None):
        # local and global layers interleave where the config names no layer types:
        # Gemma 2 alternates, sliding first (layer i slides where i is even); a
        # ``sliding_window_pattern`` P (Gemma 3, Cohere 2) makes every P-th layer global
        layers_ = _whole(_req(d, name, "num_hidden_layers", "n_layer"), "num_hidden_layers",
                         name)
        pattern = 2 if mtype == "gemma2" else _whole(d["sliding_window_pattern"],
                                                     "sliding_window_pattern", name)
        if pattern < 1:
            raise PerfmodelError(f"{name}: sliding_window_pattern", f"{pattern} is below 1",
                                 "use the model's value (Gemma 3: 6)")
        sliding = (layers_ + 1) // 2 if mtype == "gemma2" else layers_ - layers_ // pattern
    elif mtype.startswith(("qwen2", "qwen3")):
        use = bool(d.get("use_sliding_window", False))
        layers_ = _whole(_req(d, name, "num_hidden_layers", "n_layer"), "num_hidden_layers",
                         name)
        sliding = layers_ - _whole(d.get("max_window_layers", layers_), "max_window_layers",
                                   name) if use else 0
    else:
        sliding = _whole(_req(d, name, "num_hidden_layers", "n_layer"), "num_hidden_layers",
                         name) if window else 0
    experts = _whole(d.get("num_local_experts", d.get("num_experts", d.get("n_routed_experts",
                                                                            0))) or 0,
                     "num_local_experts", name)
    if experts:
        topk = d.get("num_experts_per_tok", d.get("experts_per_token"))
        if not topk:
            raise PerfmodelError(f"{name}: num_experts_per_tok", f"{experts} experts but no "
                                 "count of experts per token (num_experts_per_tok)",
                                 "add \"num_experts_per_tok\" (the model's top-k)")
    else:
        unread = [k for k, v in d.items() if ("expert" in k.lower() or k.lower().startswith(
            "moe")) and v not in (None, 0, False, "", [], {}) and not isinstance(v, bool)]
        if unread:
            raise PerfmodelError(f"{name}: {unread[0]}", "looks like a mixture of experts, "
                                 "but its expert count is in a key perfmodel does not read "
                                 "(it reads num_local_experts, num_experts or "
                                 "n_routed_experts); modelling it as dense would be wrong",
                                 "write the expert count, top-k and expert width under "
                                 "those keys (num_experts_per_tok, moe_intermediate_size)")
    quant = d.get("quantization_config") or {}
    if not isinstance(quant, dict):
        raise PerfmodelError(f"{name}: quantization_config", "expected a JSON object",
                             "remove it or write it as Hugging Face does")
    method = str(quant.get("quant_method", "")).lower()
    wdt = _TORCH_DTYPES.get(str(d.get("torch_dtype", d.get("dtype", "bfloat16"))), "bf16")
    if method == "fp8":
        wdt = "fp8"
    elif method in _INT_QUANT_METHODS:
        # AWQ/GPTQ checkpoints: integer weights of ``bits`` (``w_bit`` in early AWQ files)
        bits = quant.get("bits", quant.get("w_bit"))
        if bits not in (4, 8):
            raise PerfmodelError(f"{name}: quantization_config.bits",
                                 f"{method} weights of {bits!r} bits are not modelled",
                                 "use a 4- or 8-bit checkpoint, or pass --weight-dtype")
        wdt = "int4" if bits == 4 else "int8"
    elif method == "compressed-tensors":
        wdt = _compressed_tensors_dtype(quant, name) or wdt
    # StarCoder 2 writes use_bias for the attention and MLP biases (ERNIE's normalised)
    attn_bias = bool(d.get("attention_bias", d.get("use_bias", False)))
    qwen = mtype.startswith("qwen2")
    glm = mtype.startswith("glm")  # attention_bias: Q, K and V only, as Qwen 2
    fields: dict[str, Any] = {
        "name": d.get("_name", name),
        "hidden_size": hidden,
        "num_layers": _req(d, name, "num_hidden_layers", "n_layer"),
        "num_heads": heads,
        # Falcon names its KV heads num_kv_heads (n_head_kv in older files)
        "num_kv_heads": next((d[k] for k in ("num_key_value_heads", "num_kv_heads",
                                             "n_head_kv") if d.get(k) is not None),
                             1 if d.get("multi_query") else None),
        "head_dim": d.get("head_dim"),
        "intermediate_size": _whole(d["intermediate_size_mlp"], "intermediate_size_mlp", name)
        if llama4_dense else inter,
        "gated_mlp": gated,
        "activation": _ACTS[act],
        "vocab_size": _req(d, name, "vocab_size"),
        "tie_embeddings": bool(d.get("tie_word_embeddings", mtype in _TIED_BY_DEFAULT)),
        "norm": "layer" if any(k in d for k in ("layer_norm_eps", "layer_norm_epsilon",
                                                  "norm_epsilon"))
        and "rms_norm_eps" not in d and mtype not in _RMS_TYPES else "rms",
        "rotary": bool(d.get("_rotary", True)),
        "max_position_embeddings": d.get("max_position_embeddings", d.get("n_positions")),
        "qkv_bias": attn_bias or qwen,
        "o_bias": attn_bias and not glm,
        "mlp_bias": bool(d.get("mlp_bias", d.get("use_bias", False))) or mtype == "gpt_oss",
        "attention_sinks": mtype == "gpt_oss",
        "sliding_window": window if sliding else None,
        "num_sliding_layers": sliding,
        "chunked_attention": bool(sliding) and (
            bool(llama4 and d.get("attention_chunk_size"))
            or (isinstance(layer_types, list)
                and any("chunked" in str(t) for t in layer_types))),
        "num_experts": experts,
        "experts_per_token": _whole(d.get("num_experts_per_tok", d.get("experts_per_token",
                                                                          0)) or 0,
                                    "num_experts_per_tok", name) if experts else 0,
        "expert_intermediate_size": _whole(d["moe_intermediate_size"],
                                           "moe_intermediate_size", name)
        if experts and d.get("moe_intermediate_size") is not None
        else inter if llama4_dense else None,
        "num_dense_layers": (_whole(d["num_hidden_layers"], "num_hidden_layers", name)
                             - moe_layers if moe_layers is not None and experts
                             else _whole(d.get("first_k_dense_replace", 0) or 0,
                                         "first_k_dense_replace", name) if experts else 0),
        # Llama 4's MoE layers add one shared expert as wide as a routed one
        "shared_expert_intermediate_size": _whole(
            d.get("shared_expert_intermediate_size", inter if llama4 else 0) or 0,
            "shared_expert_intermediate_size", name) if experts else 0,
        "router_bias": mtype == "gpt_oss",
        **_mla_fields(d, name),
        "weight_dtype": wdt,
        "expert_weight_dtype": "fp4" if experts and method == "mxfp4" else None,
        "block_scales": wdt == "fp8" and _block_scaled(quant, method),
        "mx_experts": bool(experts) and method == "mxfp4",
        "source": str(d.get("_source", "")),
    }
    if d.get("n_positions") is not None and mtype in ("gpt2", "gpt_neo", "gptj", "opt"):
        raise PerfmodelError(f"{name}: model_type", f"{mtype} uses learned absolute positions, "
                             "which are not modelled", "use a rotary-position model")
    try:
        return TransformerConfig(**fields)
    except ValidationError as exc:
        raise _as_error(exc, name) from None


def _block_scaled(quant: dict[str, Any], method: str) -> bool:
    """Whether a checkpoint's fp8 weights carry block scales: ``weight_block_size`` in an
    ``fp8`` quantization_config (DeepSeek-V3, Qwen3 FP8), or a compressed-tensors group whose
    weights use the ``block`` strategy (llm-compressor's FP8_BLOCK scheme)."""
    if method == "fp8":
        return bool(quant.get("weight_block_size"))
    if method == "compressed-tensors":
        weights = _first_group_weights(quant)
        return weights is not None and weights.get("strategy") == "block"
    return False


#: Keys of DeepSeek-V4-style attention (an output low-rank projection, per-layer KV
#: compression, sparse key selection over compressed blocks), which neither the GQA nor the
#: MLA graph describes.
_COMPRESSED_ATTENTION_KEYS = ("o_lora_rank", "compress_ratios")


def _mla_fields(d: dict[str, Any], name: str) -> dict[str, Any]:
    """The multi-head latent attention fields of a DeepSeek-V2/V3-style config.json
    (``kv_lora_rank``, ``q_lora_rank`` (null: a direct query projection),
    ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``); none for other models.
    The query/key head width is the non-rotary part plus the rotary part (transformers'
    DeepseekV3Config writes ``head_dim`` = the rotary part, which is not that), and every
    head has its keys and values (``num_key_value_heads`` = heads)."""
    compressed = [k for k in _COMPRESSED_ATTENTION_KEYS if d.get(k) is not None]
    if compressed:
        raise PerfmodelError(f"{name}: {compressed[0]}", "compressed sparse attention "
                             "(DeepSeek-V4's output low-rank, KV compression per layer, sparse "
                             "key selection) is not modelled", "use a DeepSeek-V3-style "
                             "config (multi-head latent attention, kv_lora_rank)")
    if d.get("kv_lora_rank") is None:
        return {}
    keys = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    for key in keys:
        if d.get(key) is None:
            raise PerfmodelError(f"{name}: {key}", "kv_lora_rank (multi-head latent "
                                 f"attention) needs {key}, missing from config.json",
                                 f"add \"{key}\" (the model's value) to the file")
    rank, nope, rope, v = (_whole(d[key], key, name) for key in keys)
    heads = _req(d, name, "num_attention_heads", "n_head")
    if d.get("index_topk"):  # DeepSeek-V3.2's and GLM-5's sparse attention (DSA)
        warnings.warn(PerfmodelWarning(
            f"{name}: index_topk", "DeepSeek sparse attention (each query attends to the "
            f"{d['index_topk']} keys an indexer picks) is not modelled: attention is timed "
            "dense, too slow for contexts past that many tokens, and the indexer is left out",
            "read figures past that context as an upper bound"), stacklevel=3)
    return {"kv_lora_rank": rank, "qk_rope_head_dim": rope, "v_head_dim": v,
            "q_lora_rank": _whole(d.get("q_lora_rank") or 0, "q_lora_rank", name),
            "head_dim": nope + rope, "num_kv_heads": heads}


_CAPS = {"num_layers": "MAX_LAYERS", "num_sliding_layers": "MAX_LAYERS",
         "vocab_size": "MAX_VOCAB", "max_position_embeddings": "MAX_TOKENS",
         "sliding_window": "MAX_TOKENS"}


def _whole(value: Any, key: str, name: str) -> int:
    """A config.json integer (``4096`` or ``4096.0``), else an error naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")) or value != int(value):
        raise PerfmodelError(f"{name}: {key}", f"expected a whole number, got "
                             f"{clip_message(repr(value), 60)}", "fix the value in the file")
    return int(value)


#: Hugging Face model types and architectures that are not a stack of attention + MLP
#: blocks (state-space, recurrent, hybrid) or not decoder-only; the cost model would
#: silently treat them as Llama. Matched as substrings of model_type / architectures.
_NOT_MODELLED = ("mamba", "rwkv", "jamba", "zamba", "bamba", "falcon_h1", "falconh1",
                 "nemotron_h", "nemotronh", "recurrent_gemma", "recurrentgemma", "griffin",
                 "xlstm", "retnet", "hyena", "striped", "lfm2", "plamo2", "hybrid", "ssm",
                 "t5", "bart", "pegasus", "whisper", "bert", "electra", "encoder", "vit",
                 "clip", "siglip")
#: Words of ``layer_types`` entries that name layers other than softmax attention
#: (Qwen3-Next's ``linear_attention``, recurrent, state-space or convolution layers).
_NON_ATTENTION_LAYER_WORDS = ("linear", "mamba", "recurrent", "delta", "ssm", "conv",
                              "lightning", "rwkv")
#: Keys only state-space (Mamba-style) configs carry.
_SSM_KEYS = ("state_size", "ssm_cfg", "d_state", "mamba_d_state", "ssm_state_size",
             "conv_kernel", "time_step_rank", "attn_layer_indices", "attn_layer_period")
#: Model types known to be the decoder-only block the cost model describes.
_KNOWN_TYPES = _GATED_TYPES | {"phi", "phimoe", "gpt_neox", "falcon", "stablelm", "mpt",
                               "cohere", "cohere2", "starcoder2", "exaone", "minicpm",
                               "baichuan", "dbrx", "olmoe", "mistral3", "gemma3",
                               "gemma3_text", "llama4_text", "ministral", "glm4",
                               "glm4_moe", "ernie4_5", "ernie4_5_moe", "deepseek_v2",
                               "deepseek_v3", "deepseek_v32", "kimi_k2"}


def _check_architecture(d: dict[str, Any], name: str) -> None:
    """Refuse configs of architectures the cost model cannot describe (module constants);
    warn for an unknown or missing model_type (modelled as a Llama-like decoder)."""
    mtype = str(d.get("model_type", "")).lower()
    archs = d.get("architectures")
    arch_names = [str(a) for a in archs] if isinstance(archs, list) else []
    for text, key in ((mtype, "model_type"), *((a.lower(), "architectures")
                                                for a in arch_names)):
        hit = next((w for w in _NOT_MODELLED if w in text.replace("-", "_")), None)
        if hit is not None:
            shown = clip_message(text, 60)
            raise PerfmodelError(f"{name}: {key}", f"{shown!r} is not a decoder-only "
                                 "transformer of attention and MLP blocks (state-space, "
                                 "recurrent, hybrid or encoder models are not modelled)",
                                 "use a Llama-like model (perfmodel model --list)")
    ssm = [k for k in _SSM_KEYS if k in d]
    if ssm or d.get("is_encoder_decoder") is True:
        what = f"has {ssm[0]!r}, a state-space key" if ssm else "is an encoder-decoder"
        raise PerfmodelError(f"{name}: {ssm[0] if ssm else 'is_encoder_decoder'}",
                             f"the model {what}; only decoder-only transformers are modelled",
                             "use a Llama-like model (perfmodel model --list)")
    if mtype not in _KNOWN_TYPES:
        said = f"model_type {clip_message(mtype, 40)!r} is not" if mtype else "no model_type;"
        warnings.warn(PerfmodelWarning(
            f"{name}: model_type", f"{said} one of the known Llama-like types: modelled as "
            "norm, attention, MLP blocks (check the layout matches)",
            "set model_type, e.g. llama"), stacklevel=3)


def _as_error(exc: ValidationError, name: str) -> PerfmodelError:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ())) or "config"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if err.get("type") == "less_than_equal":
        cap = _CAPS.get(loc, "MAX_MODEL_DIM")
        msg = (f"{clip_message(repr(err.get('input')), 40)} is above the cap "
               f"({msg.removeprefix('Input should be ')}, perfmodel._limits.{cap}); no "
               "published model comes near it")
    elif str(err.get("type", "")).startswith(("int_", "bool_", "literal_", "string_")):
        msg += f" (got {clip_message(repr(err.get('input')), 60)})"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return PerfmodelError(f"{name}: {loc}", msg + more, "fix the value in the config file")


# ---------------------------------------------------------------------- presets
def presets_dir() -> Path:
    """Folder of the bundled preset ``config.json`` files."""
    return Path(__file__).resolve().parent / "presets"


@functools.lru_cache(maxsize=1)
def _preset_index() -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Preset id -> (path, aliases such as the Hugging Face repository id)."""
    out: dict[str, tuple[Path, tuple[str, ...]]] = {}
    for path in sorted(presets_dir().glob("*.json")):
        with path.open(encoding="utf-8") as fh:
            d = json.load(fh)
        aliases = tuple(str(a).lower() for a in d.get("_aliases", ()))
        out[path.stem] = (path, aliases)
    return out


def list_models() -> list[str]:
    """Ids of the bundled presets, sorted."""
    return sorted(_preset_index())


@functools.lru_cache(maxsize=64)
def _load_preset(model_id: str) -> TransformerConfig:
    path = _preset_index()[model_id][0]
    with path.open(encoding="utf-8") as fh:
        d = json.load(fh)
    return from_hf_dict({**d, "_name": model_id}, name=model_id)


def _resolve(name: str) -> str | None:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    index = _preset_index()
    if key in index:
        return key
    for model_id, (_, aliases) in index.items():
        if key in aliases or key.split("/")[-1] in aliases:
            return model_id
    return None


#: Size of a config.json read: 16 MiB (a real one is a few kB).
_MAX_CONFIG_BYTES = 16 * 2**20


def _read_json(path: Path) -> Any:
    """The JSON document at ``path``; :class:`PerfmodelError` naming the file otherwise."""
    fix = "pass a Hugging Face config.json (UTF-8 JSON)"
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise PerfmodelError(str(path), f"cannot read ({exc.strerror or exc})", fix) from None
    if len(raw) > _MAX_CONFIG_BYTES:
        raise PerfmodelError(str(path), f"more than {_MAX_CONFIG_BYTES:,} bytes: not a "
                             "config.json", fix)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PerfmodelError(str(path), f"not UTF-8 text (byte {exc.start} cannot be "
                             "decoded)", fix) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PerfmodelError(str(path), f"not valid JSON ({exc.msg}, line {exc.lineno})",
                             "check the file is a config.json") from None
    except (ValueError, RecursionError) as exc:  # 5,000-digit integers, 10⁵-deep nesting
        raise PerfmodelError(str(path), f"not a usable JSON document "
                             f"({clip_message(str(exc), 80)})", fix) from None


def load_model(name_or_path: str | Path | TransformerConfig) -> TransformerConfig:
    """A bundled preset by id (``llama-2-7b``; Hugging Face repo ids work too) or a
    Hugging Face ``config.json`` on disk. A config passes through unchanged."""
    if isinstance(name_or_path, TransformerConfig):
        return name_or_path
    text = str(name_or_path)
    path = Path(text).expanduser()
    if isinstance(name_or_path, Path) or text.endswith(".json") or path.is_file() \
            or path.is_dir():
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise PerfmodelError("model", f"no such file: {path}",
                                 "pass a preset id (perfmodel model --list) or a config.json")
        d = _read_json(path)
        if not isinstance(d, dict):
            raise PerfmodelError(str(path), "expected a JSON object", "pass a config.json")
        return from_hf_dict(d, name=path.name if path.name != "config.json" else str(path))
    model_id = _resolve(text)
    if model_id is None:
        close = difflib.get_close_matches(text.lower(), list_models(), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise PerfmodelError("model", f"unknown model '{text}'",
                             f"{hint}bundled: {', '.join(list_models())}; or pass a "
                             "config.json path")
    return _load_preset(model_id)

