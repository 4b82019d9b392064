"""CUDA-graph padding in the serving simulator (``EngineConfig.graph_batch_sizes``): a
decode-only step of d sequences runs the captured graph of the next size up, p (none above
the engine's largest decode batch, TensorRT-LLM's cap), and pays the non-attention work of
p tokens; steps with a prefill chunk and steps above every size are not padded. The
expected times are built here from the step tables' own parts
(dense and LM head at d and at p) and the run's step count, not from the simulator's
accounting."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.serving import closed_loop, prepare, run_prepared
from perfmodel.serving.engines import EngineConfig, engine_config
from perfmodel.serving.metrics import ServeResult
from perfmodel.serving.steptime import StepModel

MODEL = "llama-3.1-8b"
GPU = "h100-sxm"
SIZES = (1, 2, 4, 8)


def test_a_batch_runs_as_the_next_captured_size() -> None:
    eng = engine_config("trtllm", 80e9).with_(graph_batch_sizes=SIZES)
    assert [eng.padded(d) for d in (1, 2, 3, 5, 8, 9, 100)] == [1, 2, 4, 8, 8, 9, 100]
    # no graph above the engine's largest decode batch, min(max_num_seqs, token budget):
    # a size beyond it is captured at that batch instead (TensorRT-LLM drops the larger
    # sizes and, padding, adds the cap)
    capped = engine_config("trtllm", 80e9).with_(
        graph_batch_sizes=(1, 2, 4, 512, 1024, 2048), max_num_seqs=1792,
        max_num_batched_tokens=8192)
    assert [capped.padded(d) for d in (3, 500, 1000, 1466, 1792)] == \
        [4, 512, 1024, 1792, 1792]
    budget = engine_config("trtllm", 80e9).with_(
        graph_batch_sizes=(1, 2, 4, 2048), max_num_seqs=4096, max_num_batched_tokens=1500)
    assert budget.padded(1000) == 1500
    # no sizes: every batch runs as itself (the default of every engine)
    plain = engine_config("trtllm", 80e9)
    assert plain.graph_batch_sizes == ()
    assert [plain.padded(d) for d in (1, 3, 9)] == [1, 3, 9]


def test_sizes_are_sorted_and_deduplicated_from_a_list_or_a_string() -> None:
    eng = engine_config("trtllm", 80e9)
    assert eng.with_(graph_batch_sizes="8, 1,4,4").graph_batch_sizes == (1, 4, 8)
    assert eng.with_(graph_batch_sizes=[16, 2]).graph_batch_sizes == (2, 16)


@pytest.mark.parametrize("bad", ["1,x", "0", [2.5], [True], 5, "1,-4", [None]])
def test_bad_sizes_name_the_field(bad: object) -> None:
    with pytest.raises(PerfmodelError, match="graph_batch_sizes"):
        engine_config("trtllm", 80e9).with_(graph_batch_sizes=bad)


def _runs(requests: int) -> tuple[ServeResult, ServeResult, StepModel, EngineConfig]:
    """The same static batch (every request sent at t = 0, all admitted in the first step,
    one prefill step, then decode-only steps of ``requests`` sequences) without and with
    padding to SIZES."""
    wl = closed_loop(requests, requests, 64, 9)
    cfg, spec, eng, pool, model = prepare(MODEL, GPU, wl, engine="trtllm")
    plain = run_prepared(cfg, spec, eng, pool, model, wl, tp=1)
    padded_eng = eng.with_(graph_batch_sizes=SIZES)
    padded = run_prepared(cfg, spec, padded_eng, pool, model, wl, tp=1)
    return plain, padded, model, padded_eng


def test_decode_steps_pay_the_padded_batchs_dense_and_lm_work() -> None:
    plain, padded, model, eng = _runs(5)
    assert eng.padded(5) == 8
    # every request: one prefill step (its first token), then 8 decode-only steps of 5
    assert plain.steps == padded.steps == 9
    extra = (model.dense_s(8) - model.dense_s(5)
             + model.lm_s(8) - model.lm_s(5))
    assert extra > 0
    # the prefill step has a chunk: no graph, no padding, the same first token
    assert np.array_equal(plain.first_token_s, padded.first_token_s)
    gained = padded.finish_s - plain.finish_s
    assert gained == pytest.approx(np.full(5, 8 * extra), rel=1e-9)


def test_no_padding_above_the_largest_size_or_at_a_captured_one() -> None:
    for requests in (9, 4):  # above 8; exactly a captured size
        plain, padded, _, _ = _runs(requests)
        assert np.array_equal(plain.finish_s, padded.finish_s)


def test_cli_pads_and_reports_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["serve", MODEL, "--gpu", GPU, "--engine", "trtllm", "--concurrency", "5",
            "--prompt", "64", "--gen", "9", "--requests", "5", "--no-progress"]
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--json", "--graph-batch-sizes", "1,2,4,8"]) == 0
    padded = json.loads(capsys.readouterr().out)
    assert plain["engine_knobs"]["graph_batch_sizes"] == []
    assert padded["engine_knobs"]["graph_batch_sizes"] == [1, 2, 4, 8]
    assert any("padded up to the next captured CUDA-graph batch" in a
               for a in padded["assumptions"])
    assert main([*args, "--graph-batch-sizes", "1,x"]) == 2
    assert "graph_batch_sizes" in capsys.readouterr().err
