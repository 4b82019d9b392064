"""``perfmodel.engine_call``: one op as an inference engine calls it, and the CLI's
``predict --engine`` built from it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cli.main import main

DECODE: dict[str, Any] = {"batch": 8, "heads": 32, "seq_q": 1, "seq_kv": 4096, "head_dim": 128,
          "causal": True}
PREFILL: dict[str, Any] = {"batch": 2, "heads": 32, "kv_heads": 8, "seq_q": 2048, "head_dim": 128,
           "causal": True}


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize(("engine", "gpu", "kv_heads", "impl"), [
    # TensorRT-LLM before Blackwell: XQA for grouped heads, masked MHA for one query head
    # per KV head; trtllm-gen on Blackwell
    ("trtllm", "h100-sxm", 8, "xqa"),
    ("trtllm", "a100-80gb-sxm", 32, "mmha"),
    ("trtllm", "b200", 8, "trtllm-gen"),
    ("vllm", "h100-sxm", 8, "flash3"),
    ("vllm", "l40s", 8, "flash2"),
    ("sglang", "l40s", 8, "flashinfer"),
])
def test_decode_attention_takes_the_engines_kernel_and_call(
        engine: str, gpu: str, kv_heads: int, impl: str) -> None:
    neutral = pm.Attention(**{**DECODE, "kv_heads": kv_heads})
    op = pm.engine_call(neutral, engine, gpu)
    # the new token's K/V are written into the paged cache by a kernel of their own
    assert (op.impl, op.kv_write, op.rope) == (impl, True, False)
    # shapes and dtypes are the neutral op's; only how it is called changed
    for name in ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "value_dim"):
        assert np.array_equal(getattr(op, name), getattr(neutral, name)), name
    assert (op.dtype, op.kv_dtype, op.causal) == ("bf16", "bf16", True)
    stages = dict(pm.predict(op, gpu, context=pm.RunContext(engine=engine, launch="graph"))
                  .stages)
    assert {"kv_write", "attention"} <= set(stages)


def test_prefill_and_decode_are_told_apart_by_the_query_length() -> None:
    # TensorRT-LLM on an H100: fmha_v2 (its SM90 kernels) for a prompt, its QKV
    # pre-processing kernel applying RoPE; XQA for a token
    context = pm.engine_call(pm.Attention(**PREFILL), "trtllm", "h100-sxm")
    assert (context.impl, context.kv_write, context.rope) == ("fmha-v2", True, True)
    assert pm.engine_call(pm.Attention(**{**PREFILL, "seq_q": 1, "seq_kv": 2048}), "trtllm",
                          "h100-sxm").impl == "xqa"
    # a one-token prompt said to be a prefill stays one
    one = pm.Attention(**{**PREFILL, "seq_q": 1, "seq_kv": 1, "phase": "prefill"})
    assert pm.engine_call(one, "trtllm", "h100-sxm").impl == "fmha-v2"


def test_fp8_kv_cache_computes_in_fp8_where_the_engines_kernel_does() -> None:
    # TensorRT-LLM's Hopper context FMHA over an fp8 cache runs in fp8 (the query is
    # quantized); vLLM's FlashAttention-3 over an fp8 cache computes in bf16
    fp8 = pm.Attention(**PREFILL, kv_dtype="fp8")
    assert pm.engine_call(fp8, "trtllm", "h100-sxm").dtype == "fp8"
    assert pm.engine_call(fp8, "vllm", "h100-sxm").dtype == "bf16"


def test_gemms_take_the_engines_scheme_kernel_and_quantize_step() -> None:
    fp8 = pm.Gemm(m=64, n=4096, k=4096, dtype="fp8")
    trt, sgl = (pm.engine_call(fp8, e, "h100-sxm") for e in ("trtllm", "sglang"))
    assert (trt.quant, trt.impl, trt.quantize_input, trt.out_dtype) == \
        ("per-tensor", "cublas", True, "bf16")
    # SGLang's fp8 linear layers have per-channel weight scales (sgl-kernel fp8_scaled_mm)
    assert (sgl.quant, sgl.impl, sgl.quantize_input, sgl.out_dtype) == \
        ("per-channel", "cutlass", True, "bf16")
    block = pm.engine_call(pm.Gemm(m=64, n=4096, k=4096, dtype="fp8", quant="block"),
                           "vllm", "h100-sxm")
    assert (block.quant, block.impl) == ("block", "deepgemm")
    # a 16-bit GEMM stays unquantized, on the engine's kernel for it
    bf16 = pm.engine_call(pm.Gemm(m=64, n=4096, k=4096), "vllm", "h100-sxm")
    assert (bf16.quant, bf16.quantize_input, bf16.out_dtype) == ("none", False, "bf16")


def test_no_engine_changes_nothing_and_other_ops_or_gpus_are_errors() -> None:
    op = pm.Attention(**PREFILL)
    assert pm.engine_call(op, "none", "h100-sxm") is op
    with pytest.raises(pm.PerfmodelError, match="from Ampere"):
        pm.engine_call(op, "trtllm", "v100-sxm2-32gb")
    with pytest.raises(pm.PerfmodelError, match="no engine call"):
        pm.engine_call(pm.Norm(tokens=8, hidden=4096), "vllm", "h100-sxm")  # type: ignore[call-overload]
    with pytest.raises(pm.PerfmodelError, match="unknown engine"):
        pm.engine_call(op, "tgi", "h100-sxm")


def test_cli_fp8_gemm_under_sglang_is_per_channel(capsys: pytest.CaptureFixture[str]) -> None:
    """`predict gemm --dtype fp8 --engine sglang` is SGLang's per-channel call (it had been
    per-tensor, a scheme SGLang does not run, with another call cost)."""
    base = ["predict", "gemm", "--gpu", "l40s", "--m", "64", "--n", "4096", "--k", "4096",
            "--dtype", "fp8", "--engine", "sglang", "--launch", "graph", "--json"]
    default = _cli(base, capsys)
    channel = _cli([*base, "--quant", "per-channel"], capsys)
    tensor = _cli([*base, "--quant", "per-tensor"], capsys)
    assert default["details"]["quant"] == "per-channel"  # type: ignore[index]
    assert default["latency_s"] == channel["latency_s"] != tensor["latency_s"]


def test_cli_engine_prediction_is_the_api_one(capsys: pytest.CaptureFixture[str]) -> None:
    out = _cli(["predict", "attention", "--gpu", "b200", "--batch", "8", "--heads", "32",
                "--kv-heads", "8", "--seq-q", "1", "--seq-kv", "4096", "--head-dim", "128",
                "--causal", "--dtype", "bf16", "--engine", "trtllm", "--launch", "graph", "--json"],
               capsys)
    op = pm.engine_call(pm.Attention(**{**DECODE, "kv_heads": 8}), "trtllm", "b200")
    p = pm.predict(op, "b200", context=pm.RunContext(engine="trtllm", launch="graph"))
    assert out["latency_s"] == pytest.approx(float(p.latency_s), rel=1e-12)


def test_cli_sinks_flag_takes_the_engines_backend_for_sinks(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "attention", "--gpu", "l40s", "--batch", "8", "--heads", "64",
            "--kv-heads", "8", "--seq-q", "1", "--seq-kv", "4096", "--head-dim", "64",
            "--causal", "--dtype", "bf16", "--engine", "sglang", "--launch", "graph", "--json"]
    plain, sinks = _cli(base, capsys), _cli([*base, "--sinks"], capsys)
    assert plain["details"]["impl"] == "flashinfer"  # type: ignore[index]
    assert sinks["details"]["impl"] == "triton"  # type: ignore[index]
