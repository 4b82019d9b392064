"""Pipeline parallelism in the serving simulator (``simulate(pp=...)``): the weights of the
largest stage, a micro-batch's share of the KV pool, the pipeline cycle of the step tables,
and the run's GPU count. Expected figures are derived here from the model's shapes and the
spec's link, not from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _scripts import load_script

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.models.graph import Dtypes
from perfmodel.models.memory import weight_bytes
from perfmodel.serving import closed_loop, prepare, simulate
from perfmodel.serving.engines import engine_config
from perfmodel.serving.kvcache import kv_pool
from perfmodel.serving.steptime import build_step_model
from perfmodel.timing.comm import DEFAULT_PARAMS

MODEL = "llama-3.1-8b"  # 32 layers, h 4096, 32/8 heads of 128, MLP 14336, vocab 128256
GPU = "rtx-pro-6000-server"  # PCIe Gen5 x16 behind switches: 64 GB/s, 5 µs


def _llama8b_bytes() -> tuple[float, float, float]:
    """(one layer, the final norm, the embedding or the LM head) in bf16 bytes."""
    h, q, kv, inter, vocab = 4096, 4096, 1024, 14336, 128256
    layer = (2 * h * q + 2 * h * kv) + 3 * h * inter + 2 * h  # attention, MLP, two norms
    return 2.0 * layer, 2.0 * h, 2.0 * vocab * h


@pytest.mark.parametrize(("pp", "layers"), [(2, 16), (3, 11), (32, 1)])
def test_the_largest_stage_holds_its_layers_and_one_vocabulary_matrix(pp: int,
                                                                       layers: int) -> None:
    layer, norm, matrix = _llama8b_bytes()
    cfg = pm.load_model(MODEL)
    assert float(weight_bytes(cfg, 1, Dtypes(), "tp", 1)) == pytest.approx(
        32 * layer + norm + 2 * matrix)
    assert float(weight_bytes(cfg, 1, Dtypes(), "tp", pp)) == pytest.approx(
        layers * layer + norm + matrix)


def test_a_micro_batch_pool_is_one_gpu_pool_over_its_share_of_a_token() -> None:
    """3 stages of 32 layers: 11 on the largest, so a micro-batch's token takes
    3 · 11/32 of its all-layer KV bytes (2 · 8 · 128 · 32 layers · 2 B) of a GPU's pool."""
    cfg, spec = pm.load_model(MODEL), pm.load_hardware(GPU)
    eng = engine_config("trtllm", spec.memory.capacity, spec.name)
    pool = kv_pool(cfg, spec, 1, Dtypes(), eng, pp=3)
    per_token = 2 * 8 * 128 * 32 * 2.0
    assert pool.bytes_per_token == pytest.approx(per_token * 3 * 11 / 32)
    assert pool.blocks == math.floor(pool.pool_bytes / (pool.block_size
                                                        * pool.bytes_per_token))
    one = kv_pool(cfg, spec, 1, Dtypes(), eng)
    assert one.bytes_per_token == pytest.approx(per_token)
    # lighter stages leave each GPU more room than the whole model does
    assert pool.pool_bytes > one.pool_bytes


def test_the_cycle_pays_the_lm_head_and_a_hop_per_stage() -> None:
    cfg, spec = pm.load_model(MODEL), pm.load_hardware(GPU)
    eng = engine_config("trtllm", spec.memory.capacity, spec.name)
    one, two = (build_step_model(cfg, spec, 1, Dtypes(), eng, max_tokens=512, max_batch=64,
                                 max_context=2048, max_prompt=1024, pp=pp) for pp in (1, 2))
    assert two.tokens == one.tokens
    for t in (1.0, 64.0, 512.0):
        # latency + bf16 hidden states over Gen5 x16 at the fitted PCIe efficiency
        hop = 5e-6 + t * 4096 * 2 / (64e9 * DEFAULT_PARAMS.pcie_efficiency)
        assert two.dense_s(t) - one.dense_s(t) == pytest.approx(2 * hop, rel=1e-9)
        assert two.lm_s(t) == pytest.approx(2 * one.lm_s(t), rel=1e-12)
    assert two.decode_attn_s(32, 1000.0) == one.decode_attn_s(32, 1000.0)
    assert any("pipeline parallel: 2 stages of at most 16 layers" in n for n in two.notes)


def test_micro_batches_run_as_replicas_on_pp_times_the_gpus() -> None:
    wl = closed_loop(16, 64, 256, 32)
    r1 = simulate(MODEL, GPU, wl, engine="trtllm")
    r2 = simulate(MODEL, GPU, wl, engine="trtllm", pp=2)
    assert (r1.pp, r1.gpus, r2.pp, r2.gpus) == (1, 1, 2, 2)
    assert r2.per_gpu_tok_s == pytest.approx(r2.throughput_tok_s / 2)
    assert sorted(set(r2.timeline["replica"].tolist())) == [0.0, 1.0]
    assert r2.to_dict()["gpus"] == 2
    assert r2.engine_knobs["pp"] == 2
    # pp = 1 is the default layout, step for step
    r0 = simulate(MODEL, GPU, wl, engine="trtllm", pp=1)
    assert np.array_equal(r0.finish_s, r1.finish_s)


@pytest.mark.parametrize("pp", [0, 33, 1.5, True])
def test_bad_stage_counts_name_the_field(pp: object) -> None:
    with pytest.raises(PerfmodelError, match="pp"):
        prepare(MODEL, GPU, closed_loop(4, 8, 128, 16), pp=pp)  # type: ignore[arg-type]


def test_cli_serve_reports_the_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", MODEL, "--gpu", GPU, "--pp", "2", "--concurrency", "4",
                 "--prompt", "128", "--gen", "16", "--requests", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "on 2 × rtx-pro-6000-server (TP1 × PP2, 1 replica)" in out
    assert "pipeline parallel: 2 stages" in out


def test_trtllm_bench_heuristic_divides_its_batch_by_the_stages() -> None:
    """trtllm-bench sizes max_batch_size over all tp·pp GPUs' memory, then divides it by
    pp (one micro-batch's); rounding aside, PP2's batch is the TP2 group's over 2."""
    s = load_script("serving_accuracy")
    tp2 = s.trtllm_bench_settings("llama-3.1-70b", "rtx-pro-6000-server", 2, "fp4", "fp8",
                                  1024, 1024)[0]
    pp2 = s.trtllm_bench_settings("llama-3.1-70b", "rtx-pro-6000-server", 1, "fp4", "fp8",
                                  1024, 1024, pp=2)[0]
    # the same memory and engine; KV per token differs (8 KV heads over tp 2 vs 1: the
    # heuristic counts max(tp, 8) heads either way), so only the division remains
    assert pp2 < tp2
    assert pp2 == pytest.approx(tp2 / 2, rel=0.15)


def test_sweeps_take_the_stages(capsys: pytest.CaptureFixture[str]) -> None:
    from perfmodel.serving.sweep import serve_sweep
    from perfmodel.sweeps import sweep
    res = serve_sweep(MODEL, GPU, "concurrency", [4], prompt=128, gen=16, requests=16,
                      engine="trtllm", pp=2)
    assert res.results[0].gpus == 2
    model = sweep(MODEL, GPU, "batch", [8.0], phase="decode", context_len=1024, pp=2)
    one = pm.predict_model(MODEL, GPU, phase="decode", batch=8, context_len=1024, pp=2)
    assert float(model.latency_s[0]) == pytest.approx(float(one.latency_s), rel=1e-12)
    assert main(["sweep", MODEL, "--gpu", GPU, "--over", "concurrency", "--values", "4",
                 "--prompt", "128", "--gen", "16", "--requests", "16", "--pp", "2"]) == 0
    assert "on 2 × rtx-pro-6000-server" in capsys.readouterr().out
