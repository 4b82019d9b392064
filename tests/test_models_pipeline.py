"""Pipeline parallelism in whole-model predictions (``predict_model(pp=...)``, ``perfmodel
model --pp``): memory of the largest stage, and one batch passing the stages in turn with
its hidden states sent between them. Expected figures derived here from the model's shapes
and the spec's link."""

from __future__ import annotations

import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.timing.comm import DEFAULT_PARAMS

MODEL = "llama-3.1-8b"  # 32 layers, h 4096, 8 KV heads of 128
GPU = "rtx-pro-6000-server"  # PCIe Gen5 x16 behind switches: 64 GB/s, 5 µs
BW = 64e9 * DEFAULT_PARAMS.pcie_efficiency  # the fitted PCIe efficiency applies


def _send(tokens: float) -> float:
    """One send of ``tokens`` bf16 hidden states between stages, s."""
    return 5e-6 + tokens * 4096 * 2 / BW


def _gen(pp: int, **kw: object) -> pm.ModelPrediction:
    args: dict[str, object] = {"phase": "generate", "batch": 8, "prompt_len": 512,
                               "gen_len": 64} | kw
    return pm.predict_model(MODEL, GPU, pp=pp, **args)  # type: ignore[arg-type]


def test_one_stage_is_the_default() -> None:
    a, b = _gen(1), pm.predict_model(MODEL, GPU, phase="generate", batch=8, prompt_len=512,
                                     gen_len=64)
    assert (a.ttft_s, a.tpot_s, a.memory.total_bytes) == (b.ttft_s, b.tpot_s,
                                                          b.memory.total_bytes)
    assert a.pp == 1
    assert all(r.name != "stage_send" for r in a.decode.ops)  # type: ignore[union-attr]


@pytest.mark.parametrize("pp", [2, 4])
def test_each_pass_adds_its_sends_between_stages(pp: int) -> None:
    one, many = _gen(1), _gen(pp)
    assert many.pp == pp
    # prefill: 8 × 512 tokens cross pp − 1 boundaries; a decode step 8 tokens
    assert float(many.ttft_s) - float(one.ttft_s) == pytest.approx(
        (pp - 1) * _send(8 * 512), rel=1e-9)
    assert float(many.tpot_s) - float(one.tpot_s) == pytest.approx((pp - 1) * _send(8),
                                                                   rel=1e-9)
    row = many.decode.op("stage_send")  # type: ignore[union-attr]
    assert row.count == pp - 1
    assert float(row.bytes) == pytest.approx((pp - 1) * 8 * 4096 * 2)


def test_memory_is_the_largest_stage() -> None:
    """3 stages of 32 layers: the largest holds 11, so 11 layers of each sequence's KV
    (2 · 8 · 128 · 2 B per layer and token) and fewer weights; more sequences fit (not 3×
    more: each one's prefill activations are a whole layer's, on every stage)."""
    one, three = _gen(1), _gen(3)
    assert float(three.memory.kv_bytes_per_token) == pytest.approx(2 * 8 * 128 * 2 * 11)
    assert float(one.memory.kv_bytes_per_token) == pytest.approx(2 * 8 * 128 * 2 * 32)
    assert float(three.memory.kv_cache_bytes) == pytest.approx(
        8 * (512 + 64 - 1) * 2 * 8 * 128 * 2 * 11)
    assert float(three.memory.weights_bytes) < float(one.memory.weights_bytes) / 2
    assert float(three.memory.max_batch) > float(one.memory.max_batch)


def test_dep_sends_each_rank_its_own_tokens() -> None:
    """Under data-parallel attention over 4 GPUs a stage's GPU holds ⌈8/4⌉ = 2 sequences
    and sends their hidden states only."""
    kw = {"phase": "decode", "batch": 8, "context_len": 1024, "tp": 4, "parallel": "dep"}
    one = pm.predict_model("qwen3-30b-a3b", GPU, **kw)  # type: ignore[arg-type]
    two = pm.predict_model("qwen3-30b-a3b", GPU, pp=2, **kw)  # type: ignore[arg-type]
    sent = 5e-6 + 2 * 2048 * 2 / BW  # h = 2048
    assert float(two.latency_s) - float(one.latency_s) == pytest.approx(sent, rel=1e-9)
    # a prefill of 6 sequences of 100 tokens: a rank holds ⌈6/4⌉ = 2 of them, 200 tokens
    kw = {"phase": "prefill", "batch": 6, "prompt_len": 100, "tp": 4, "parallel": "dep"}
    one = pm.predict_model("qwen3-30b-a3b", GPU, **kw)  # type: ignore[arg-type]
    two = pm.predict_model("qwen3-30b-a3b", GPU, pp=2, **kw)  # type: ignore[arg-type]
    sent = 5e-6 + 200 * 2048 * 2 / BW
    assert float(two.ttft_s) - float(one.ttft_s) == pytest.approx(sent, rel=1e-9)


@pytest.mark.parametrize("pp", [0, 33, 2.0, True])
def test_bad_stage_counts_name_the_field(pp: object) -> None:
    with pytest.raises(PerfmodelError, match="pp"):
        _gen(pp)  # type: ignore[arg-type]


def test_cli_model_reports_the_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", MODEL, "--gpu", GPU, "--pp", "2", "--batch", "4", "--prompt",
                 "256", "--gen", "16"]) == 0
    out = capsys.readouterr().out
    assert "TP 1 × PP 2" in out
    assert "stage_send" in out
    assert "pipeline parallel: 2 stages of at most 16 layers" in out
    # this GPU's 16 layers of the bf16 KV cache: 2 · 8 · 128 · 2 B · 16
    assert "× 65.54 kB/token" in out
