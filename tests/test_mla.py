"""Multi-head latent attention (DeepSeek-V2/V3 MLA): the latent cache, the absorbed decode,
the decompressed prefill, parameter and cache sizes derived by hand from the config."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.engines import ENGINES
from perfmodel.models.config import (
    TransformerConfig,
    active_params,
    from_hf_dict,
    load_model,
    num_params,
)
from perfmodel.models.graph import Dtypes, decode_graph, prefill_graph
from perfmodel.models.memory import kv_bytes_per_token, kv_cache_bytes, weight_bytes
from perfmodel.ops import Elementwise

# DeepSeek-V3's figures (deepseek-ai/DeepSeek-V3 config.json), written out for the hand
# derivations below
H, LAYERS, HEADS, VOCAB = 7168, 61, 128, 129_280
RQ, RKV, NOPE, ROPE, DV = 1536, 512, 128, 64, 128
DENSE, EXPERT_W, EXPERTS, TOPK, SHARED, FIRST_DENSE = 18_432, 2048, 256, 8, 1, 3


def _tiny(**over: object) -> TransformerConfig:
    """A small dense MLA model (DeepSeek-V2-Lite-like widths, 2 layers)."""
    fields: dict[str, object] = {
        "name": "tiny-mla", "hidden_size": 1024, "num_layers": 2, "num_heads": 8,
        "num_kv_heads": 8, "head_dim": 96, "intermediate_size": 2816, "vocab_size": 1000,
        "kv_lora_rank": 256, "qk_rope_head_dim": 32, "v_head_dim": 64, "q_lora_rank": 0}
    fields.update(over)
    return TransformerConfig(**fields)


def test_deepseek_v3_parameters_by_hand() -> None:
    """671 B parameters, 37 B active per token (DeepSeek-V3 technical report,
    arXiv 2412.19437: '671B total parameters with 37B activated for each token')."""
    cfg = load_model("deepseek-v3")
    attention = (H * RQ + RQ + RQ * HEADS * (NOPE + ROPE)       # query: down, norm, up
                 + H * (RKV + ROPE) + RKV                        # latent + rotary key, norm
                 + RKV * HEADS * (NOPE + DV)                     # keys' and values' up
                 + HEADS * DV * H)                               # output

    def mlp(width: int) -> int:
        return 3 * H * width  # gate, up, down

    moe_layers = LAYERS - FIRST_DENSE
    total = (LAYERS * attention + FIRST_DENSE * mlp(DENSE)
             + moe_layers * (EXPERTS * mlp(EXPERT_W) + SHARED * mlp(EXPERT_W) + H * EXPERTS)
             + (2 * LAYERS + 1) * H + 2 * VOCAB * H)
    assert num_params(cfg) == total
    routed = moe_layers * EXPERTS * mlp(EXPERT_W)
    assert active_params(cfg) == total - routed + routed * TOPK // EXPERTS
    assert 670e9 < total < 672e9
    assert 37e9 < active_params(cfg) < 38e9


def test_latent_cache_per_token_and_under_tp() -> None:
    """61 layers × (512 + 64) elements: 70,272 bytes per token in bf16, half in fp8; the
    latent is not split by heads, so every GPU of a TP group holds all of it."""
    cfg = load_model("deepseek-v3")
    assert float(kv_bytes_per_token(cfg)) == LAYERS * (RKV + ROPE) * 2 == 70_272
    assert float(kv_bytes_per_token(cfg, kv_dtype="fp8")) == LAYERS * (RKV + ROPE)
    assert float(kv_bytes_per_token(cfg, tp=8)) == 70_272
    assert float(kv_cache_bytes(cfg, 3, 1000, tp=8)) == 3 * 1000 * 70_272


def test_mla_weights_per_gpu_by_hand() -> None:
    """Down-projections replicated on every GPU, the rest split by heads (bf16)."""
    cfg = _tiny()
    h, heads, d, dv, rkv, rope, inter = 1024, 8, 96, 64, 256, 32, 2816
    down = h * (rkv + rope)                                        # no query rank
    split = h * heads * d + rkv * heads * (d - rope + dv) + heads * dv * h
    norms_attn = rkv                                               # kv_a RMSNorm weight

    def per_layer(t: int) -> float:  # attention, its norm, two norms, the MLP
        return down + split / t + norms_attn + 2 * h + 3 * h * inter / t

    for t in (1, 2):
        expected = 2 * (2 * per_layer(t) + h + 2 * 1000 * h / t)
        assert float(weight_bytes(cfg, tp=t)) == pytest.approx(expected, rel=1e-12)


def test_mla_graphs() -> None:
    cfg = load_model("deepseek-v3")
    dec = {g.name: g for g in decode_graph(cfg, 16, 4096, tp=8)}
    assert "qkv_proj" not in dec
    assert "kv_b_proj" not in dec
    a = dec["mla_attention"].op
    assert isinstance(a, pm.Attention)
    assert (float(a.heads), float(a.kv_heads), float(a.head_dim), float(a.value_dim)) \
        == (HEADS / 8, 1.0, RKV + ROPE, RKV)
    assert a.shared_kv
    assert a.impl == "mla"
    assert float(a.seq_kv) == 4096
    absorb, up = dec["q_absorb"].op, dec["v_up"].op
    assert isinstance(absorb, pm.Gemm)
    assert isinstance(up, pm.Gemm)
    assert (float(absorb.m), float(absorb.n), float(absorb.k), float(absorb.batch)) \
        == (16, RKV, NOPE, HEADS / 8)
    assert (float(up.m), float(up.n), float(up.k), float(up.batch)) == (16, DV, RKV, 16)
    down = dec["qkv_a_proj"].op
    assert isinstance(down, pm.Gemm)
    assert float(down.n) == RQ + RKV + ROPE  # replicated
    o = dec["o_proj"].op
    assert isinstance(o, pm.Gemm)
    assert float(o.k) == HEADS / 8 * DV
    pre = {g.name: g for g in prefill_graph(cfg, 2, 1000, cached_prefix=500, tp=8)}
    kvb = pre["kv_b_proj"].op
    assert isinstance(kvb, pm.Gemm)
    # every context token's keys and values, prefix included, decompressed
    assert (float(kvb.m), float(kvb.n), float(kvb.k)) == (2 * 1500, HEADS / 8 * (NOPE + DV),
                                                          RKV)
    att = pre["mla_attention"].op
    assert isinstance(att, pm.Attention)
    assert not att.shared_kv
    assert (float(att.kv_heads), float(att.head_dim), float(att.value_dim),
            float(att.seq_q), float(att.seq_kv)) == (HEADS / 8, NOPE + ROPE, DV, 1000, 1500)
    write = pre["mla_cache_write"].op
    assert isinstance(write, Elementwise)
    assert float(write.numel) == 2 * 1000 * (RKV + ROPE)  # the new tokens' latents


def test_mla_decode_grows_with_context_and_batch() -> None:
    cfg = load_model("deepseek-v3")
    hw = pm.load_hardware("h200-sxm")
    last = 0.0
    for ctx in (256, 1024, 4096, 16384):
        tpot = pm.predict_model(cfg, hw, phase="decode", batch=32, context_len=ctx, tp=8)
        assert float(tpot.latency_s) > last
        last = float(tpot.latency_s)
    one = pm.predict_model(cfg, hw, phase="decode", batch=1, context_len=4096, tp=8)
    many = pm.predict_model(cfg, hw, phase="decode", batch=64, context_len=4096, tp=8)
    assert float(many.latency_s) > float(one.latency_s)


@pytest.mark.parametrize(("gpu", "family"), [("h100-sxm", "mla"), ("b200", "mla"),
                                         ("a100-80gb-sxm", "flashinfer"),
                                         ("l40s", "flashinfer")])
@pytest.mark.parametrize("engine", ENGINES)
def test_mla_under_every_engine(gpu: str, family: str, engine: str) -> None:
    """Every engine's DeepSeek-V3 decode runs the MLA decode family (FlashInfer's MLA
    kernels before Hopper), with the latent written by the graph's own op."""
    cfg = load_model("deepseek-v3")
    hw = pm.load_hardware(gpu)
    p = pm.predict_model(cfg, hw, phase="decode", batch=8, context_len=2048, tp=8,
                         engine=engine, weight_dtype="bf16", expert_dtype="bf16")
    assert p.decode is not None
    row = p.decode.op("mla_attention")
    assert np.isfinite(float(row.latency_s))
    assert float(row.latency_s) > 0
    assert float(p.decode.op("mla_cache_write").latency_s) > 0
    op = {g.name: g for g in decode_graph(cfg, 8, 2048, tp=8)}["mla_attention"].op
    ctx = pm.RunContext(engine=engine, launch="graph")
    assert pm.predict(op, hw, context=ctx).details["impl"] == family


def test_mla_config_errors() -> None:
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        _tiny(qk_rope_head_dim=96)
    with pytest.raises(ValueError, match="num_kv_heads"):
        _tiny(num_kv_heads=4)
    with pytest.raises(ValueError, match="kv_lora_rank"):
        TransformerConfig(name="x", hidden_size=64, num_layers=1, num_heads=4,
                          num_kv_heads=4, head_dim=16, intermediate_size=128, vocab_size=10,
                          q_lora_rank=16)


def test_deepseek_config_json_reads_as_its_preset(tmp_path: object) -> None:
    """A DeepSeek-V3-style config.json: the query/key width is nope + rope (192), not the
    ``head_dim`` (the rotary part) that transformers writes into saved DeepseekV3 configs."""
    from pathlib import Path

    with open(Path(pm.__file__).parent / "models/presets/deepseek-v3.json") as fh:
        raw = json.load(fh)
    raw["head_dim"] = ROPE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = from_hf_dict(raw, "config.json")
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.value_dim) == (NOPE + ROPE, HEADS, DV)
    assert cfg.is_mla
    assert cfg.mla_cache_width == RKV + ROPE
    with pytest.raises(PerfmodelError, match="v_head_dim"):
        from_hf_dict({k: v for k, v in raw.items() if k != "v_head_dim"}, "config.json")


@pytest.mark.parametrize("prompt", [1024, 8192])
def test_serving_one_request_matches_the_static_mla_prediction(prompt: int) -> None:
    """The serving tables time MLA's decompression (``kv_b_proj``, over the chunk's whole
    context) with the prefill attention and the absorbed up-projections with the decode
    attention, as the static graphs have them: one request alone has the static TTFT (to
    the tables' interpolation; the decompression timed per step token instead was 0.16 %
    off at 8,192 tokens) and TPOT."""
    from perfmodel.serving import closed_loop, simulate

    g, o_step, o_req = 32, 2e-3, 30e-3
    r = simulate("deepseek-v3", "h200-sxm", closed_loop(1, 1, prompt, g), engine="vllm",
                 tp=8, step_overhead_s=o_step, step_overhead_per_seq_s=0.0,
                 request_overhead_s=o_req)
    static = pm.predict_model("deepseek-v3", "h200-sxm", phase="generate", prompt_len=prompt,
                              gen_len=g, decode_points=9, engine="vllm",
                              step_overhead_s=o_step, tp=8)
    assert float(r.ttft_s[0]) == pytest.approx(o_req + static.ttft_s, rel=2e-4)
    assert float(r.tpot_s[0]) == pytest.approx(static.tpot_s, rel=0.01)


def test_fp8_latent_cache_without_an_fp8_peak_scales_the_latent_bytes() -> None:
    """On an A100 (no fp8 peak) the fp8 latent cache is timed as bf16 with its traffic
    scaled: Q and O 16·576 + 16·512 elements, the cache 4096·576 (one vector per token)
    at half the bytes."""
    from perfmodel.models.evaluate import _substitute

    cfg = load_model("deepseek-v3")
    g = {x.name: x for x in decode_graph(cfg, 1, 4096, tp=8,
                                         dtypes=Dtypes(kv="fp8"))}["mla_attention"]
    args, ratio, note = _substitute(g, pm.load_hardware("a100-80gb-sxm"))
    assert args["kv_dtype"] == "bf16"
    assert note is not None
    qo, cache = 16 * 576 + 16 * 512, 4096 * 576
    assert float(ratio) == pytest.approx((qo + 0.5 * cache) / (qo + cache), rel=1e-12)


@pytest.mark.parametrize(("engine", "batch", "impl"), [
    ("vllm", 8, "flashinfer"), ("vllm", 64, "deepgemm"), ("sglang", 8, "deepgemm"),
    ("trtllm", 8, "cutlass")])
def test_block_scaled_checkpoint_runs_the_engines_block_fp8_gemms(engine: str, batch: int,
                                                                  impl: str) -> None:
    """DeepSeek-V3's fp8 weights carry 128×128 block scales: each engine's decode step
    runs its block-scaled fp8 GEMM (vLLM on Hopper FlashInfer's below 32 rows and DeepGEMM
    from 32, SGLang DeepGEMM, TensorRT-LLM CUTLASS) with the activations quantized in the
    call, exactly the op predicted alone; the same config without block scales takes the
    engine's per-tensor / per-channel one."""
    cfg = load_model("deepseek-v3")
    kw: dict[str, object] = {"phase": "decode", "batch": batch, "context_len": 2048, "tp": 8,
                             "engine": engine, "step_overhead_s": 0.0}
    p = pm.predict_model(cfg, "h100-sxm", **kw)  # type: ignore[arg-type]
    assert any(f"run {impl} with block scales" in a for a in p.assumptions)
    assert p.decode is not None
    row = p.decode.op("q_b_proj")
    alone = pm.Gemm(m=batch, n=HEADS / 8 * (NOPE + ROPE), k=RQ, dtype="fp8", out_dtype="bf16",
                    shared_b=True, quant="block", impl=impl, quantize_input=True)
    ctx = pm.RunContext(launch="graph", engine=engine)
    assert float(row.latency_s) / float(row.count) \
        == pytest.approx(pm.predict(alone, "h100-sxm", context=ctx).latency_s, rel=1e-9)
    plain = pm.predict_model(cfg.model_copy(update={"block_scales": False}), "h100-sxm",
                             **kw)  # type: ignore[arg-type]
    assert not any("block scales" in a for a in plain.assumptions)
    scheme = "per-channel" if engine == "sglang" else "per-tensor"
    assert any(f"with {scheme} scales" in a for a in plain.assumptions)


def test_sparse_mla_is_read_with_a_warning_naming_the_indexer() -> None:
    """DeepSeek-V3.2-style configs (MLA with a sparse-attention indexer, ``index_topk``):
    read as dense MLA, with a warning that names what is left out."""
    from pathlib import Path

    with open(Path(pm.__file__).parent / "models/presets/deepseek-v3.json") as fh:
        raw = json.load(fh)
    with pytest.warns(pm.PerfmodelWarning, match=r"index_topk.*2048 keys"):
        cfg = from_hf_dict({**raw, "model_type": "deepseek_v3", "index_topk": 2048,
                            "index_n_heads": 64, "index_head_dim": 128}, "config.json")
    assert cfg.is_mla


def test_vllm_block_fp8_kernel_follows_the_rows_across_a_sweep() -> None:
    """A batch sweep of vLLM's decode on an H100 crosses its 32-row bound: each point's
    linear layers run the kernel of its own rows (FlashInfer's below, DeepGEMM from 32), as
    the same points predicted one at a time do; on a B200 DeepGEMM throughout."""
    cfg = load_model("deepseek-v3")
    batches = [4, 16, 31, 32, 128]
    for gpu in ("h100-sxm", "b200"):
        sweep = pm.predict_model(cfg, gpu, phase="decode", batch=np.asarray(batches),
                                 context_len=2048, tp=8, engine="vllm")
        for i, b in enumerate(batches):
            one = pm.predict_model(cfg, gpu, phase="decode", batch=b, context_len=2048, tp=8,
                                   engine="vllm")
            assert float(np.asarray(sweep.latency_s)[i]) \
                == pytest.approx(float(one.latency_s), rel=1e-9)
        flashinfer = any("flashinfer" in a for a in sweep.assumptions)
        assert flashinfer is (gpu == "h100-sxm")
