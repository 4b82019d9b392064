"""Model configs: presets, parameter counts against published figures, config.json errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel._errors import PerfmodelError, PerfmodelWarning
from perfmodel.models.config import (
    TransformerConfig,
    active_params,
    from_hf_dict,
    list_models,
    load_model,
    num_params,
    param_counts,
    presets_dir,
)

# Published parameter counts. Dense and Mixtral: the exact count the Hugging Face Hub reports
# for the checkpoint's safetensors (e.g. Llama-2-7b-hf: 6,738,415,616; the index's total_size
# 13,476,839,424 bytes is 2 × that plus 8,192 bytes of rotary inv_freq buffers). The papers
# and model cards round them: Llama 2 "7B/13B/70B" (arXiv 2307.09288), Llama 3.1
# "8B/70B/405B" (arXiv 2407.21783), Mistral "7.3B", Mixtral "46.7B total, 12.9B active"
# (mistral.ai/news/mixtral-of-experts), Qwen2.5 "7.61B" and "72.7B" (model cards), Phi-3-mini
# "3.8B" (arXiv 2404.14219).
PUBLISHED_EXACT = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "phi-3-mini": 3_821_079_552,
}
# gpt-oss model card (arXiv 2508.10925, table 1), to two decimals of a billion: total
# 116.83B / 20.91B; active per token 5.13B / 3.61B, counted without the embedding table.
PUBLISHED_GPT_OSS = {"gpt-oss-120b": (116.83e9, 5.13e9), "gpt-oss-20b": (20.91e9, 3.61e9)}
# DeepSeek-V3's README (deepseek-ai/DeepSeek-V3): "671B of the Main Model weights" (beside
# 14B of the multi-token-prediction module, not modelled), "37B activated for each token".
# Qwen3-30B-A3B's and Qwen3-235B-A22B's model cards: "Number of Parameters: 30.5B in total
# and 3.3B activated", "235B in total and 22B activated".
PUBLISHED_ROUNDED = {"deepseek-v3": (671e9, 37e9), "qwen3-30b-a3b": (30.5e9, 3.3e9),
                     "qwen3-235b-a22b": (235e9, 22e9)}
# Llama 4 Maverick's model card: "17B active parameters, 400B total" (the text model; its
# vision encoder is not counted): within 1 % of the rounded total.
PUBLISHED_PERCENT = {"llama-4-maverick": (400e9, 17e9)}


def test_every_preset_has_a_published_count() -> None:
    assert set(list_models()) == set(PUBLISHED_EXACT) | set(PUBLISHED_GPT_OSS) \
        | set(PUBLISHED_ROUNDED) | set(PUBLISHED_PERCENT)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_PERCENT))
def test_counts_within_a_percent_of_the_model_card(model_id: str) -> None:
    cfg = load_model(model_id)
    total, active = PUBLISHED_PERCENT[model_id]
    assert num_params(cfg) == pytest.approx(total, rel=0.01)
    assert active_params(cfg) == pytest.approx(active, rel=0.02)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_ROUNDED))
def test_rounded_counts_match_the_model_card(model_id: str) -> None:
    cfg = load_model(model_id)
    total, active = PUBLISHED_ROUNDED[model_id]
    assert abs(num_params(cfg) - total) < 0.5e9
    assert abs(active_params(cfg) - active) < 1e9  # 37.55 B with the embedding tables


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_EXACT))
def test_parameter_count_exact(model_id: str) -> None:
    assert num_params(load_model(model_id)) == PUBLISHED_EXACT[model_id]


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_GPT_OSS))
def test_gpt_oss_counts_match_the_model_card(model_id: str) -> None:
    cfg = load_model(model_id)
    total, active = PUBLISHED_GPT_OSS[model_id]
    assert abs(num_params(cfg) - total) <= 0.005e9
    assert abs(active_params(cfg) - param_counts(cfg)["embedding"] - active) <= 0.005e9


def test_llama_2_7b_by_hand() -> None:
    # per layer: attention 4·4096² = 67,108,864; MLP 3·4096·11008 = 135,266,304; two norms
    # 8,192 -> 202,383,360 × 32 = 6,476,267,520; embedding and LM head 2·32000·4096 =
    # 262,144,000; final norm 4,096.
    counts = param_counts(load_model("llama-2-7b"))
    assert counts["attention"] == 32 * 67_108_864
    assert counts["mlp"] == 32 * 135_266_304
    assert counts["embedding"] == counts["lm_head"] == 131_072_000
    assert counts["norms"] == 65 * 4096


def test_mixtral_active_parameters() -> None:
    # Mistral's announcement: 12.9B active (2 of 8 experts, embedding included)
    assert active_params(load_model("mixtral-8x7b")) == pytest.approx(12.9e9, abs=0.05e9)


def test_presets_cite_their_source() -> None:
    for path in sorted(presets_dir().glob("*.json")):
        data = json.loads(path.read_text())
        assert data.get("_source"), f"{path.name} has no _source"
        assert load_model(path.stem).source == data["_source"]


def test_aliases_and_paths_resolve(tmp_path: Path) -> None:
    assert load_model("meta-llama/Llama-2-7b-hf").name == "llama-2-7b"
    assert load_model("Llama-2-7B").name == "llama-2-7b"
    cfg = load_model("llama-3.1-8b")
    assert load_model(cfg) is cfg
    path = tmp_path / "config.json"
    path.write_text((presets_dir() / "llama-3.1-8b.json").read_text())
    assert num_params(load_model(path)) == PUBLISHED_EXACT["llama-3.1-8b"]
    assert num_params(load_model(tmp_path)) == PUBLISHED_EXACT["llama-3.1-8b"]  # the folder


def _write(tmp_path: Path, **overrides: object) -> Path:
    data = json.loads((presets_dir() / "llama-2-7b.json").read_text())
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    data["some_future_key"] = {"ignored": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_unknown_hf_keys_are_ignored(tmp_path: Path) -> None:
    assert num_params(load_model(_write(tmp_path))) == PUBLISHED_EXACT["llama-2-7b"]


def test_missing_field_names_it(tmp_path: Path) -> None:
    with pytest.raises(PerfmodelError, match=r"vocab_size.*missing"):
        load_model(_write(tmp_path, vocab_size=None))


def test_heads_not_dividing_hidden(tmp_path: Path) -> None:
    with pytest.raises(PerfmodelError, match=r"num_heads \(30\) does not divide hidden_size"):
        load_model(_write(tmp_path, num_attention_heads=30, num_key_value_heads=30))


def test_kv_heads_not_dividing_heads(tmp_path: Path) -> None:
    with pytest.raises(PerfmodelError, match=r"num_kv_heads \(6\) does not divide num_heads"):
        load_model(_write(tmp_path, num_key_value_heads=6))


def test_explicit_head_dim_allows_other_widths() -> None:
    # gpt-oss: 64 heads × 64 = 4096 ≠ hidden 2880, legal because head_dim is given
    cfg = load_model("gpt-oss-20b")
    assert cfg.q_width == 4096
    assert cfg.hidden_size == 2880


def test_bad_values_and_files(tmp_path: Path) -> None:
    with pytest.raises(PerfmodelError, match="hidden_size"):
        load_model(_write(tmp_path, hidden_size=-1))
    with pytest.raises(PerfmodelError, match="unknown model"):
        load_model("llama-9-1b")
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(PerfmodelError, match="not valid JSON"):
        load_model(bad)
    with pytest.raises(PerfmodelError, match="no such file"):
        load_model(tmp_path / "absent.json")
    mla = _write(tmp_path, kv_lora_rank=512)  # MLA without its head widths
    with pytest.raises(PerfmodelError, match=r"latent attention.*qk_nope_head_dim"):
        load_model(mla)


def test_config_is_frozen_and_strict() -> None:
    cfg = load_model("llama-2-7b")
    with pytest.raises(ValueError, match="frozen"):
        cfg.hidden_size = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="extra"):
        TransformerConfig(name="x", hidden_size=64, num_layers=1, num_heads=4,
                          intermediate_size=128, vocab_size=10, unknown=1)  # type: ignore[call-arg]


def test_layer_kinds_from_hf_fields() -> None:
    assert load_model("gpt-oss-120b").num_sliding_layers == 18
    assert load_model("mistral-7b").num_sliding_layers == 32  # sliding_window 4096, all layers
    assert load_model("qwen2.5-7b").num_sliding_layers == 0   # use_sliding_window: false
    assert load_model("mixtral-8x7b").num_sliding_layers == 0  # sliding_window: null
    oss = load_model("gpt-oss-120b")
    assert oss.expert_weight_dtype == "fp4"
    assert oss.attention_sinks
    assert oss.qkv_bias
    assert load_model("qwen2.5-72b").qkv_bias
    assert not load_model("qwen2.5-72b").o_bias


def test_interleaved_local_and_global_layers() -> None:
    # Gemma 2 (no layer_types in its config): layer i attends through the 4096-token window
    # where i is even, to the whole context where it is odd (transformers' Gemma2 layers),
    # so 21 of 42 slide; Gemma 3's sliding_window_pattern 6 makes layers 5, 11, ... global:
    # 34 layers keep 34 - 5 = 29 sliding; without either, every layer slides (Mistral)
    base = {"hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
            "hidden_act": "gelu_pytorch_tanh", "sliding_window": 4096}
    gemma2 = from_hf_dict({**base, "model_type": "gemma2", "num_hidden_layers": 42})
    assert (gemma2.num_sliding_layers, gemma2.sliding_window) == (21, 4096)
    # no tie_word_embeddings in the file: Gemma2Config ties by default, LlamaConfig not
    assert gemma2.tie_embeddings
    assert not from_hf_dict({**base, "model_type": "llama", "num_hidden_layers": 2,
                             "hidden_act": "silu"}).tie_embeddings
    gemma3 = from_hf_dict({**base, "model_type": "gemma3_text", "num_hidden_layers": 34,
                           "sliding_window_pattern": 6, "sliding_window": 1024})
    assert (gemma3.num_sliding_layers, gemma3.sliding_window) == (29, 1024)
    plain = from_hf_dict({**base, "model_type": "mistral", "num_hidden_layers": 42})
    assert plain.num_sliding_layers == 42


def test_llama4_shared_expert_and_chunked_layers() -> None:
    # Llama 4 Scout's text model, by hand: 48 layers of attention (q, o: 5120 x 40·128;
    # k, v: 5120 x 8·128), 16 routed experts plus one shared one, each a gated MLP of 8192,
    # a 16-way router, two norms; untied embeddings of 202,048 x 5120 and a final norm
    scout = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
             "intermediate_size_mlp": 16384, "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48,
             "num_local_experts": 16, "num_experts_per_tok": 1,
             "interleave_moe_layer_step": 1, "vocab_size": 202048,
             "attention_chunk_size": 8192, "tie_word_embeddings": False}
    cfg = from_hf_dict({"model_type": "llama4", "text_config": scout})
    attn = 2 * 5120 * 40 * 128 + 2 * 5120 * 8 * 128
    experts = 17 * 3 * 5120 * 8192
    expected = 48 * (attn + experts + 5120 * 16 + 2 * 5120) + 2 * 202048 * 5120 + 5120
    assert num_params(cfg) == expected
    # chunked attention on the RoPE layers (3 of every 4), as a window of the chunk
    assert (cfg.num_sliding_layers, cfg.sliding_window) == (36, 8192)
    # the same when the config lists the layer types itself, as transformers writes them
    listed = {**scout, "layer_types": ["chunked_attention"] * 3 * 12 + ["full_attention"] * 12}
    again = from_hf_dict({"model_type": "llama4", "text_config": listed})
    assert (again.num_sliding_layers, again.sliding_window) == (36, 8192)
    # Maverick: an MoE layer (128 routed experts + the shared one, 8192 wide) every second
    # layer, dense gated MLPs of intermediate_size_mlp = 16384 between; by hand
    mav = from_hf_dict({**scout, "interleave_moe_layer_step": 2, "num_local_experts": 128})
    assert (mav.num_dense_layers, mav.num_moe_layers) == (24, 24)
    assert (mav.intermediate_size, mav.expert_width) == (16384, 8192)
    moe = 24 * (129 * 3 * 5120 * 8192 + 5120 * 128)
    dense = 24 * 3 * 5120 * 16384
    expected = 48 * (attn + 2 * 5120) + moe + dense + 2 * 202048 * 5120 + 5120
    assert num_params(mav) == expected
    # Meta's model card: "17B active parameters, 400B total"
    assert abs(num_params(mav) - 400e9) < 2e9
    # the dense layers' width is needed to count them
    with pytest.raises(PerfmodelError) as err:
        from_hf_dict({**{k: v for k, v in scout.items() if k != "intermediate_size_mlp"},
                      "interleave_moe_layer_step": 2, "num_local_experts": 128})
    assert err.value.field.endswith("intermediate_size_mlp")


def test_gemma3_is_a_gated_gelu_mlp() -> None:
    # Gemma 3 4B's text model (its config names the activation ``hidden_activation``): a
    # gated GELU MLP; by hand, 34 layers of q, o (2560 x 8·256), k, v (2560 x 4·256),
    # gate/up/down (3 x 2560 x 10240), four norms and q/k norms (2·256) a layer, tied
    # embeddings of 262,208 x 2560 and a final norm
    g3 = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
          "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
          "num_hidden_layers": 34, "vocab_size": 262208, "sliding_window": 1024,
          "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh",
          "tie_word_embeddings": True}
    cfg = from_hf_dict({"model_type": "gemma3", "text_config": g3})
    assert (cfg.gated_mlp, cfg.activation) == (True, "gelu")
    attn = 2 * 2560 * 8 * 256 + 2 * 2560 * 4 * 256
    mlp = 3 * 2560 * 10240
    # (the model counts two norms a layer; Gemma's 0.2 M of extra norm weights are noise)
    true = 34 * (attn + mlp + 4 * 2560 + 2 * 256) + 262208 * 2560 + 2560
    assert num_params(cfg) == pytest.approx(true, rel=1e-4)
    # a non-gated reading would drop a third of the MLP: 0.9 B
    assert num_params(cfg) > true - 34 * 2560 * 10240 / 2


def test_falcon_kv_heads_tied_head_and_gelu_defaults() -> None:
    # Falcon-40B's config.json: its KV heads as num_kv_heads, no hidden_act (FalconConfig's
    # default GELU, an ungated 4 x hidden MLP) and no tie_word_embeddings (FalconConfig
    # ties by default). By hand: 60 layers of fused QKV (8192 x (128 + 2·8)·64), the
    # output (8192²) and the MLP (2 x 8192 x 32768), one 65,024 x 8192 embedding
    f40 = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": 8192,
           "num_attention_heads": 128, "num_kv_heads": 8, "num_hidden_layers": 60,
           "vocab_size": 65024, "new_decoder_architecture": True, "multi_query": True,
           "parallel_attn": True, "bias": False, "alibi": False}
    cfg = from_hf_dict(f40)
    assert (cfg.num_kv_heads, cfg.tie_embeddings, cfg.gated_mlp) == (8, True, False)
    layer = 8192 * (128 + 2 * 8) * 64 + 8192 * 8192 + 2 * 8192 * 32768
    assert num_params(cfg) == pytest.approx(60 * layer + 65024 * 8192, rel=1e-4)
    # Falcon-7B: multi-query, no KV-head count given
    f7 = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
          "num_hidden_layers": 32, "vocab_size": 65024, "multi_query": True}
    assert from_hf_dict(f7).num_kv_heads == 1


@pytest.mark.parametrize(("extra", "moe_layers"), [
    ({"decoder_sparse_step": 2}, 24),                      # layers 1, 3, 5, ... (i + 1 even)
    ({"mlp_only_layers": [0, 1]}, 46),
    ({"decoder_sparse_step": 2, "mlp_only_layers": [1, 2]}, 23),  # 1 dropped, 2 was dense
])
def test_moe_on_some_layers_only(extra: dict[str, object], moe_layers: int) -> None:
    # Qwen-MoE configs can leave some layers dense (transformers' Qwen2-MoE: layer i is MoE
    # where i is not in mlp_only_layers and i + 1 is a multiple of decoder_sparse_step);
    # the dense ones are MLPs of intermediate_size, and the parameters count both kinds
    qwen = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
            "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128,
            "num_experts_per_tok": 8, "vocab_size": 151936, "decoder_sparse_step": 1,
            "mlp_only_layers": []}
    every = from_hf_dict(qwen)
    assert every.num_moe_layers == 48
    cfg = from_hf_dict({**qwen, **extra})
    assert cfg.num_moe_layers == moe_layers
    moe = 128 * 3 * 2048 * 768 + 2048 * 128
    dense = 3 * 2048 * 6144
    assert num_params(cfg) - num_params(every) == (48 - moe_layers) * (dense - moe)
    with pytest.raises(PerfmodelError) as err:
        from_hf_dict({**qwen, "mlp_only_layers": "0,1"})
    assert err.value.field.endswith("mlp_only_layers")


@pytest.mark.parametrize(("quant", "dtype"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8"),
    ({"quant_method": "awq", "w_bit": 4}, "int4"),
    ({"quant_method": "fp8"}, "fp8"),
    # llm-compressor's format: W4A16 and FP8 checkpoints
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 128},
        "input_activations": None}}}, "int4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float"},
        "input_activations": {"num_bits": 8, "type": "float"}}}}, "fp8"),
])
def test_quantized_checkpoints_give_their_weight_dtype(quant: dict[str, object],
                                                       dtype: str) -> None:
    base = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2,
            "vocab_size": 128256, "torch_dtype": "float16"}
    assert from_hf_dict(base).weight_dtype == "fp16"
    assert from_hf_dict({**base, "quantization_config": quant}).weight_dtype == dtype
    with pytest.raises(PerfmodelError):  # 3-bit GPTQ: not a dtype the model has
        from_hf_dict({**base, "quantization_config": {"quant_method": "gptq", "bits": 3}})


@pytest.mark.parametrize(("quant", "block"), [
    ({"quant_method": "fp8"}, False),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, True),  # DeepSeek-V3, Qwen3
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                    "block_structure": [128, 128]}}}}, True),  # llm-compressor FP8_BLOCK
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, False),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, False),
])
def test_block_scaled_fp8_checkpoints(quant: dict[str, object], block: bool) -> None:
    base = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2,
            "vocab_size": 128256, "torch_dtype": "bfloat16"}
    assert from_hf_dict({**base, "quantization_config": quant}).block_scales is block
    assert load_model("deepseek-v3").block_scales


# DeepSeek-MoE 16B's config.json (deepseek-ai/deepseek-moe-16b-base): 64 routed experts of
# 1408, top-6, two shared experts, the first layer dense (10,944 wide)
DEEPSEEK_MOE = {"model_type": "deepseek", "architectures": ["DeepseekForCausalLM"],
                "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 28,
                "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                "first_k_dense_replace": 1, "moe_layer_freq": 1, "vocab_size": 102400,
                "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-6}


def test_deepseek_moe_shared_experts_and_leading_dense_layer() -> None:
    cfg = from_hf_dict(DEEPSEEK_MOE)
    h = 2048
    attn, norms = 4 * h * h, 2 * h
    dense = 3 * h * 10944
    experts = 64 * 3 * h * 1408
    moe = experts + h * 64 + 3 * h * 2 * 1408  # routed + router + two shared experts
    total = 28 * (attn + norms) + dense + 27 * moe + 2 * 102400 * h + h
    assert num_params(cfg) == total
    assert active_params(cfg) == total - 27 * experts + 27 * experts * 6 // 64
    # the model card: 16.4B total, 2.8B activated
    assert num_params(cfg) == pytest.approx(16.4e9, rel=0.01)
    assert active_params(cfg) == pytest.approx(2.8e9, rel=0.02)
    # MoE at every second index from first_k_dense_replace on (DeepSeek's moe_layer_freq 2:
    # layers 2, 4, ..., 26, 13 of them), dense MLPs of intermediate_size elsewhere
    half = from_hf_dict({**DEEPSEEK_MOE, "moe_layer_freq": 2})
    assert (half.num_moe_layers, half.num_dense_layers) == (13, 15)
    assert num_params(half) == total - 14 * (moe - dense)


def test_leading_dense_layers_reach_the_graph_and_the_weight_memory() -> None:
    from perfmodel.models.graph import decode_graph
    from perfmodel.models.memory import weight_bytes

    cfg = from_hf_dict(DEEPSEEK_MOE)
    counts = {g.name: float(g.count) for g in decode_graph(cfg, 1, 1024)}
    assert counts["gate_up_proj"] == counts["down_proj"] == 1.0  # the dense first layer
    assert counts["experts_gate_up"] == counts["router"] == 27.0
    assert counts["shared_gate_up_proj"] == 27.0
    # bf16 everywhere: two bytes a parameter
    assert float(weight_bytes(cfg)) == 2.0 * num_params(cfg)


def test_dbrx_nested_configs() -> None:
    # databricks/dbrx-instruct's config.json: heads, layers, KV heads and the experts live
    # under DBRX's own names. By hand: 40 layers of q, o (6144²), k, v (6144 x 8·128),
    # 16 gated experts of 10,752 and a 16-way router; untied 100,352-token embeddings
    dbrx = {"model_type": "dbrx", "architectures": ["DbrxForCausalLM"], "d_model": 6144,
            "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
            "tie_word_embeddings": False,
            "attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
            "ffn_config": {"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 10752,
                           "moe_num_experts": 16, "moe_top_k": 4}}
    cfg = from_hf_dict(dbrx)
    h = 6144
    layer = 2 * h * h + 2 * h * 8 * 128 + 16 * 3 * h * 10752 + h * 16 + 2 * h
    assert num_params(cfg) == 40 * layer + 2 * 100352 * h + h
    assert (cfg.experts_per_token, cfg.max_position_embeddings) == (4, 32768)
    # the model card: 132B total, 36B active
    assert num_params(cfg) == pytest.approx(132e9, rel=0.01)
    assert active_params(cfg) == pytest.approx(36e9, rel=0.02)


def test_mpt_alibi_ungated_mlp_and_tied_head() -> None:
    # mosaicml/mpt-7b's config.json: 32 layers, a 4 x 4096 GELU MLP, no biases, ALiBi
    # positions (no rotary op), LayerNorm, no LM head of its own. By hand: 32 x (4 x 4096²
    # + 2 x 4096 x 16384 + two LayerNorms of 2 x 4096) + 50,432 x 4096 + a final LayerNorm
    mpt = {"model_type": "mpt", "architectures": ["MPTForCausalLM"], "d_model": 4096,
           "n_heads": 32, "n_layers": 32, "expansion_ratio": 4, "max_seq_len": 2048,
           "vocab_size": 50432, "no_bias": True, "learned_pos_emb": True,
           "attn_config": {"alibi": True, "attn_type": "multihead_attention"}}
    cfg = from_hf_dict(mpt)
    h = 4096
    assert num_params(cfg) == 32 * (4 * h * h + 2 * h * 4 * h + 4 * h) + 50432 * h + 2 * h
    assert (cfg.gated_mlp, cfg.activation, cfg.rotary, cfg.norm) == (False, "gelu", False,
                                                                     "layer")
    # the model card: 6.7B
    assert num_params(cfg) == pytest.approx(6.7e9, rel=0.01)
    from perfmodel.models.graph import decode_graph
    assert "rotary" not in {g.name for g in decode_graph(cfg, 1, 1024)}
    # neither ALiBi nor RoPE: learned absolute positions, refused
    with pytest.raises(PerfmodelError):
        from_hf_dict({**mpt, "attn_config": {"alibi": False}})


def test_exaone_layer_count_and_rms_norm() -> None:
    # LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct names its layer count num_layers and its RMSNorm
    # epsilon layer_norm_epsilon
    exaone = {"model_type": "exaone", "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "num_layers": 32,
              "vocab_size": 102400, "activation_function": "silu",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False}
    cfg = from_hf_dict(exaone)
    assert (cfg.num_layers, cfg.norm, cfg.gated_mlp) == (32, "rms", True)
    assert num_params(cfg) == pytest.approx(7.8e9, rel=0.01)  # the model card's 7.8B


def test_gemma3_wrapper_takes_the_class_defaults_and_the_checkpoint_keys() -> None:
    # google/gemma-3-4b-it's config.json: the text_config leaves out what equals
    # Gemma3TextConfig's defaults (8 heads, 4 KV heads, head_dim 256, 262,208 tokens, a
    # global layer every 6th); the quantisation is the wrapper's
    text = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
            "num_hidden_layers": 34, "sliding_window": 1024,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}
    cfg = from_hf_dict({"model_type": "gemma3", "architectures": [
        "Gemma3ForConditionalGeneration"], "text_config": text, "torch_dtype": "bfloat16"})
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (8, 4, 256,
                                                                              262208)
    assert (cfg.num_sliding_layers, cfg.sliding_window) == (34 - 34 // 6, 1024)
    attn = 2 * 2560 * 8 * 256 + 2 * 2560 * 4 * 256
    assert num_params(cfg) == 34 * (attn + 3 * 2560 * 10240 + 2 * 2560) + 262208 * 2560 + 2560
    quantized = from_hf_dict({"model_type": "gemma3", "text_config": text,
                              "quantization_config": {"quant_method": "fp8"}})
    assert quantized.weight_dtype == "fp8"


def test_tied_by_default_types() -> None:
    # MiniCPM's config class ties the LM head by default; openbmb/MiniCPM-2B-sft-bf16 says
    # nothing about it
    minicpm = {"model_type": "minicpm", "hidden_size": 2304, "intermediate_size": 5760,
               "num_attention_heads": 36, "num_key_value_heads": 36, "num_hidden_layers": 40,
               "vocab_size": 122753}
    cfg = from_hf_dict(minicpm)
    assert cfg.tie_embeddings
    assert num_params(cfg) == pytest.approx(2.72e9, rel=0.01)  # the model card's 2.7B


def test_ernie_moe_keys() -> None:
    # baidu/ERNIE-4.5-21B-A3B-PT's config.json: 64 experts of 1536, top-6, two shared
    # experts, the first layer dense (12,288 wide)
    ernie = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288,
             "moe_intermediate_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 20,
             "num_key_value_heads": 4, "head_dim": 128, "moe_num_experts": 64,
             "moe_num_shared_experts": 2, "moe_k": 6, "moe_layer_start_index": 1,
             "moe_layer_end_index": 27, "moe_layer_interval": 1, "vocab_size": 103424,
             "tie_word_embeddings": True, "use_bias": False}
    cfg = from_hf_dict(ernie)
    h = 2560
    attn = 2 * h * 20 * 128 + 2 * h * 4 * 128
    moe = 64 * 3 * h * 1536 + h * 64 + 3 * h * 2 * 1536
    assert num_params(cfg) == 28 * (attn + 2 * h) + 3 * h * 12288 + 27 * moe + 103424 * h + h
    assert num_params(cfg) == pytest.approx(21.8e9, rel=0.01)  # the Hub's 21.8B
    # dense layers after the MoE block (indices 1..20 MoE, 21..27 dense), and an interval
    # (1, 3, ..., 27 MoE)
    short = from_hf_dict({**ernie, "moe_layer_end_index": 20})
    assert (short.num_moe_layers, short.num_dense_layers) == (20, 8)
    assert num_params(short) == num_params(cfg) - 7 * (moe - 3 * h * 12288)
    assert from_hf_dict({**ernie, "moe_layer_interval": 2}).num_moe_layers == 14


@pytest.mark.parametrize("moe_keys", [
    {"moe_num_experts": 64, "moe_k": 6},  # an unknown family's own expert keys
    {"num_experts": 64, "moe_topk": [8, 8]},  # an expert count without a readable top-k
])
def test_unread_expert_keys_are_refused_not_read_as_dense(moe_keys: dict[str, object]) -> None:
    base = {"model_type": "somemoe", "hidden_size": 2048, "intermediate_size": 8192,
            "num_attention_heads": 16, "num_hidden_layers": 4, "vocab_size": 32000}
    with pytest.warns(PerfmodelWarning, match="model_type"):
        assert not from_hf_dict(base).is_moe
    with pytest.warns(PerfmodelWarning, match="model_type"), \
            pytest.raises(PerfmodelError) as err:
        from_hf_dict({**base, **moe_keys})
    assert "expert" in err.value.problem
    # the error names a key of the file, or the one to add
    assert err.value.field.split(": ")[-1] in {"moe_num_experts", "num_experts_per_tok"}


def test_refinedweb_starcoder2_and_glm4_details() -> None:
    # tiiuae/falcon-7b's first config.json: model_type RefinedWebModel (a Falcon)
    rw = {"model_type": "RefinedWebModel", "hidden_size": 4544, "n_head": 71, "n_layer": 32,
          "vocab_size": 65024, "multi_query": True, "layer_norm_epsilon": 1e-5}
    cfg = from_hf_dict(rw)
    assert (cfg.gated_mlp, cfg.activation, cfg.intermediate_size) == (False, "gelu", 4 * 4544)
    # bigcode/starcoder2-7b: LayerNorm epsilon as norm_epsilon, biases as use_bias
    sc2 = {"model_type": "starcoder2", "hidden_size": 4608, "intermediate_size": 18432,
           "num_attention_heads": 36, "num_key_value_heads": 4, "num_hidden_layers": 32,
           "vocab_size": 49152, "hidden_act": "gelu_pytorch_tanh", "norm_epsilon": 1e-5,
           "use_bias": True}
    cfg = from_hf_dict(sc2)
    assert (cfg.norm, cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) == ("layer", True, True, True)
    # GLM-4-0414: attention_bias is on Q, K and V only
    glm = {"model_type": "glm4", "hidden_size": 4096, "intermediate_size": 13696,
           "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
           "num_hidden_layers": 40, "vocab_size": 151552, "attention_bias": True}
    cfg = from_hf_dict(glm)
    assert (cfg.qkv_bias, cfg.o_bias) == (True, False)
