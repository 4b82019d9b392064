"""Op graphs and memory: hand-derived FLOPs, bytes, KV cache, tensor parallelism, MoE."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.models.config import load_model, param_counts
from perfmodel.models.graph import (
    Dtypes,
    GraphOp,
    decode_graph,
    experts_touched,
    prefill_graph,
    tp_heads,
)
from perfmodel.models.memory import (
    activation_bytes,
    estimate_memory,
    kv_bytes_per_token,
    kv_cache_bytes,
    weight_bytes,
)
from perfmodel.ops import Attention, Gemm

LLAMA7 = load_model("llama-2-7b")


def _total(graph: list[GraphOp], what: str, kinds: tuple[type, ...] = (Gemm, Attention)) -> float:
    return float(sum(g.count * getattr(g.op, what)() for g in graph if isinstance(g.op, kinds)))


def test_llama_2_7b_prefill_flops_by_hand() -> None:
    # 2048 tokens, batch 1. Linear layers: 2·tokens·(non-embedding linear params):
    # per layer 4·4096² + 3·4096·11008 = 202,375,168; × 32 layers × 2 × 2048
    # = 26,525,718,020,096. LM head on the last position only: 2·32000·4096 = 262,144,000.
    # Attention (causal): 2·H·pairs·(D + D_v) per layer, pairs = 2048·2049/2 = 2,098,176:
    # 2·32·2,098,176·256·32 layers = 1,100,048,498,688.
    graph = prefill_graph(LLAMA7, batch=1, prompt_len=2048)
    gemm = _total(graph, "flops", (Gemm,))
    attn = _total(graph, "flops", (Attention,))
    assert gemm == 26_525_718_020_096 + 262_144_000
    assert attn == 1_100_048_498_688
    # "2·params·tokens plus attention", with params = those a prompt token multiplies
    counts = param_counts(LLAMA7)
    linear = counts["attention"] + counts["mlp"]
    assert gemm + attn == 2 * linear * 2048 + 2 * counts["lm_head"] + attn


def test_graph_order_and_counts() -> None:
    names = [g.name for g in prefill_graph(LLAMA7, 1, 128)]
    assert names == ["embedding", "input_norm", "qkv_proj", "rotary", "attention", "o_proj",
                     "residual_add", "post_attn_norm", "gate_up_proj", "act_mul", "down_proj",
                     "final_norm", "lm_head"]
    counts = {g.name: g.count for g in decode_graph(LLAMA7, 1, 128)}
    assert counts["qkv_proj"] == 32
    assert counts["residual_add"] == 64
    assert counts["lm_head"] == 1


def test_decode_bytes_per_token_are_weights_plus_kv() -> None:
    # one decode step at batch 1 reads every linear weight once and the whole KV cache:
    # 2 B × (6,738,415,616 − 131,072,000 embedding rows not read) + 524,288 B/token × 4096
    graph = decode_graph(LLAMA7, batch=1, context_len=4096)
    weights = 2.0 * (6_738_415_616 - 131_072_000)
    kv = 2 * 32 * 32 * 128 * 2 * 4096
    moved = _total(graph, "bytes_min")
    assert moved == pytest.approx(weights + kv, rel=1e-3)
    assert moved >= weights + kv


def test_kv_cache_bytes_per_token() -> None:
    # 2·layers·kv_heads·head_dim·s
    assert float(kv_bytes_per_token(LLAMA7, 1, "bf16")) == 2 * 32 * 32 * 128 * 2
    l70 = load_model("llama-3.1-70b")
    assert float(kv_bytes_per_token(l70, 1, "bf16")) == 2 * 80 * 8 * 128 * 2  # 327,680
    assert float(kv_bytes_per_token(l70, 1, "fp8")) == 2 * 80 * 8 * 128 * 1
    assert float(kv_bytes_per_token(l70, 4, "bf16")) == 2 * 80 * 2 * 128 * 2
    # TP 16 > 8 KV heads: each GPU keeps one (replicated)
    assert float(kv_bytes_per_token(l70, 16, "bf16")) == 2 * 80 * 1 * 128 * 2
    assert float(kv_cache_bytes(l70, 3, 1000, 1, "bf16")) == 3 * 1000 * 327_680


def test_sliding_window_caps_the_kv_cache() -> None:
    oss = load_model("gpt-oss-120b")  # 18 full + 18 sliding (128) layers, 8 KV heads × 64
    per = 2 * 8 * 64 * 2
    assert float(kv_cache_bytes(oss, 1, 10_000, 1, "bf16")) == per * (18 * 10_000 + 18 * 128)
    assert float(kv_cache_bytes(oss, 1, 100, 1, "bf16")) == per * 36 * 100


def test_tp_halves_weights_and_adds_two_allreduces_per_layer() -> None:
    dt = Dtypes()
    one, two = float(weight_bytes(LLAMA7, 1, dt)), float(weight_bytes(LLAMA7, 2, dt))
    norms = 2 * param_counts(LLAMA7)["norms"]  # replicated, not halved
    assert two == pytest.approx((one - norms) / 2 + norms, rel=1e-12)
    for graph in (prefill_graph(LLAMA7, 1, 512, tp=2), decode_graph(LLAMA7, 4, 512, tp=2)):
        per_layer = [g for g in graph if g.layer and g.name.endswith("allreduce")]
        assert sum(g.count for g in per_layer) == 2 * LLAMA7.num_layers
        assert {g.name for g in per_layer} == {"attn_allreduce", "mlp_allreduce"}
    assert not any(g.name.endswith("allreduce") for g in prefill_graph(LLAMA7, 1, 512))


def test_tp_shards_heads_and_checks_divisibility() -> None:
    l70 = load_model("llama-3.1-70b")
    heads, kv = tp_heads(l70, np.asarray([1.0, 2.0, 8.0, 16.0]))
    assert heads.tolist() == [64, 32, 8, 4]
    assert kv.tolist() == [8, 4, 1, 1]
    with pytest.raises(PerfmodelError, match="does not divide"):
        tp_heads(l70, np.asarray(3.0))
    qkv = next(g for g in decode_graph(l70, 1, 100, tp=8) if g.name == "qkv_proj").op
    assert isinstance(qkv, Gemm)
    assert float(qkv.n) == (8 + 2 * 1) * 128


def test_experts_touched() -> None:
    mix = load_model("mixtral-8x7b")
    # one token picks exactly k = 2 experts; many tokens touch all 8
    assert experts_touched(mix, np.asarray(1.0)).item() == 2.0
    assert experts_touched(mix, np.asarray(4096.0)).item() == 8.0
    # E·(1 − (1 − k/E)^T) = 8·(1 − 0.75³) = 4.625 for T = 3, rounded
    assert experts_touched(mix, np.asarray(3.0)).item() == 5.0


def test_moe_decode_reads_only_the_touched_experts() -> None:
    mix = load_model("mixtral-8x7b")
    graph = decode_graph(mix, batch=1, context_len=1)
    expert_bytes = sum(g.count * float(g.op.bytes_min()) for g in graph
                       if g.name.startswith("experts_") and isinstance(g.op, Gemm))
    # 2 experts × 3·4096·14336 bf16 weights × 32 layers (+ a few activation bytes)
    assert expert_bytes == pytest.approx(2 * 3 * 4096 * 14336 * 2 * 32, rel=1e-3)
    flops = sum(g.count * float(g.op.flops()) for g in prefill_graph(mix, 1, 4096)
                if g.name.startswith("experts_") and isinstance(g.op, Gemm))
    assert flops == pytest.approx(2 * 4096 * 2 * 3 * 4096 * 14336 * 32, rel=1e-9)


def test_sliding_prefill_pairs_are_exact() -> None:
    # Mistral: window 4096. A 6000-token prompt: queries < 4096 form a triangle
    # (4096·4097/2 pairs), the other 1904 see 4096 keys each.
    mistral = load_model("mistral-7b")
    graph = prefill_graph(mistral, 1, 6000)
    pairs = sum(float(g.count) * float(g.op.pairs()) for g in graph
                if g.name == "attention_sliding" and isinstance(g.op, Attention))
    assert pairs == 32 * (4096 * 4097 / 2 + 1904 * 4096)
    short = prefill_graph(mistral, 1, 1000)  # shorter than the window: plain causal
    pairs = sum(float(g.count) * float(g.op.pairs()) for g in short
                if g.name == "attention_sliding" and isinstance(g.op, Attention))
    assert pairs == 32 * 1000 * 1001 / 2


def test_memory_fit_and_limits_are_consistent() -> None:
    cap = 80 * 2**30
    mem = estimate_memory(LLAMA7, cap, 1, 4096, 4096)
    assert mem.fits
    b = float(mem.max_batch)
    assert bool(estimate_memory(LLAMA7, cap, b, 4096, 4096).fits)
    assert not bool(estimate_memory(LLAMA7, cap, b + 1, 4096, 4096).fits)
    c = float(mem.max_context)
    assert bool(estimate_memory(LLAMA7, cap, 1, c, 4096).fits)
    assert not bool(estimate_memory(LLAMA7, cap, 1, c + 1, 4096).fits)


def test_a_model_that_does_not_fit_says_so_with_numbers() -> None:
    l70 = load_model("llama-3.1-70b")
    mem = estimate_memory(l70, 80 * 2**30, 1, 2048, 2048)
    assert not mem.fits
    assert float(mem.max_batch) == 0
    text = mem.explain()
    assert "does NOT fit" in text
    assert "weights 141.1" in text
    assert "of 85.9 GB" in text


def test_activation_peak_formula() -> None:
    # 2·T·h + max(attention (2H + 2H_kv)·D, MLP 3·I) per token at 2 B, + 4·V fp32 logits:
    # llama-2-7b, 1000 tokens: (8192 + 3·11008)·2·1000 + 4·32000
    assert float(activation_bytes(LLAMA7, 1, 1000)) == (8192 + 33024) * 2 * 1000 + 128_000


def test_int4_weights_carry_one_fp16_scale_per_128() -> None:
    # Llama-2-7B's linear layers, by hand: 32 layers of q, k, v, o (4 × 4096²) and a gated
    # MLP (3 × 4096 × 11008); embeddings and norms stay in the activation dtype. An int4
    # checkpoint (GPTQ/AWQ, group 128) stores 4 bits plus 16/128 bits of scale a weight
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    bf16 = float(weight_bytes(LLAMA7, 1, Dtypes()))
    int4 = float(weight_bytes(LLAMA7, 1, Dtypes(weight="int4", expert="int4")))
    assert bf16 - int4 == pytest.approx(linear * (2.0 - 4.125 / 8.0), rel=1e-12)


def test_fp4_experts_carry_one_e8m0_scale_per_32() -> None:
    # gpt-oss-120b's experts are MXFP4 (4 bits + one 8-bit scale per 32 = 4.25 bits); by
    # hand, 36 layers x 128 experts of gate/up (2880 x 2·2880) and down (2880 x 2880)
    oss = load_model("gpt-oss-120b")
    bf16 = float(weight_bytes(oss, 1, Dtypes(expert="bf16")))
    fp4 = float(weight_bytes(oss, 1, Dtypes(expert="fp4")))
    matrices = 36 * 128 * 3 * 2880 * 2880
    assert bf16 - fp4 == pytest.approx(matrices * (2.0 - 4.25 / 8.0), rel=1e-12)


def test_tp_not_dividing_the_heads_names_the_divisors() -> None:
    from perfmodel._errors import PerfmodelError
    from perfmodel.models.config import load_model
    from perfmodel.models.graph import decode_graph

    with pytest.raises(PerfmodelError) as err:  # Qwen2.5-7B: 28 query heads
        decode_graph(load_model("qwen2.5-7b"), 1, 1024, tp=8)
    assert "(1, 2, 4, 7, 14, 28)" in err.value.fix
