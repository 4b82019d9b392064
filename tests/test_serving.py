"""Serving simulator: hand-checkable cases, invariants, closed-form runs against single
steps, bad input.

Expected values come from independent paths: the static model predictions
(:func:`perfmodel.predict_model`, which never goes through the serving tables), step counts
by arithmetic, and queueing identities.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.serving import closed_loop, poisson, prepare, read_trace, simulate
from perfmodel.serving.requests import Workload
from perfmodel.serving.simulator import simulate_replica

MODEL, GPU = "llama-3.1-8b", "h100-sxm"
NO_HOST: dict[str, Any] = {"step_overhead_s": 0.0, "step_overhead_per_seq_s": 0.0,
                           "request_overhead_s": 0.0}


def test_one_request_alone_matches_the_static_prediction() -> None:
    # one request: TTFT = request overhead + step overhead + the prefill of P tokens;
    # TPOT = the mean decode step (+ step overhead) over contexts P+1..P+G-1
    p, g, o_step, o_req = 1024, 64, 2e-3, 30e-3
    r = simulate(MODEL, GPU, closed_loop(1, 1, p, g), engine="vllm", step_overhead_s=o_step,
                 step_overhead_per_seq_s=0.0, request_overhead_s=o_req)
    # the same kernels and the same host time per pass
    static = pm.predict_model(MODEL, GPU, phase="generate", prompt_len=p, gen_len=g,
                              decode_points=9, engine="vllm", step_overhead_s=o_step)
    assert float(r.ttft_s[0]) == pytest.approx(o_req + static.ttft_s, rel=0.01)
    assert float(r.tpot_s[0]) == pytest.approx(static.tpot_s, rel=0.01)
    assert r.steps == g  # one prefill step, then G - 1 decode steps


def test_identical_requests_within_the_budget_prefill_in_one_step() -> None:
    c, p = 4, 512
    r = simulate(MODEL, GPU, closed_loop(c, c, p, 8), engine="vllm",
                 max_num_batched_tokens=c * p, **NO_HOST)
    assert np.all(r.first_token_s == r.first_token_s[0])
    alone = simulate(MODEL, GPU, closed_loop(1, 1, p, 8), engine="vllm", **NO_HOST)
    # batched, not serialised: cheaper than four prefills back to back, and the static
    # prefill of a batch of 4 (one attention call of batch 4 there, four calls here)
    assert float(alone.ttft_s[0]) < float(r.ttft_s[0]) < 4.0 * float(alone.ttft_s[0])
    static = pm.predict_model(MODEL, GPU, phase="prefill", batch=c, prompt_len=p,
                              engine="vllm", step_overhead_s=0.0)
    assert float(r.ttft_s[0]) == pytest.approx(static.ttft_s, rel=0.03)
    assert r.steps == 1 + 7


@pytest.mark.parametrize(("budget", "expected_steps"), [(512, 8), (384, 11), (4096, 1)])
def test_chunked_prefill_counts_chunks_exactly(budget: int, expected_steps: int) -> None:
    # 4 prompts of 1,024 tokens, one output token each (no decode steps): the prefill takes
    # ceil(4·1024 / budget) steps of `budget` tokens (chunks straddle requests)
    r = simulate(MODEL, GPU, closed_loop(4, 4, 1024, 1), engine="vllm",
                 max_num_batched_tokens=budget, max_num_seqs=4, **NO_HOST)
    assert r.steps == expected_steps == math.ceil(4 * 1024 / budget)


def test_half_budget_chunks_one_prompt_in_two_steps() -> None:
    p = 1024
    _cfg, _spec, eng, pool, model = prepare(MODEL, GPU, closed_loop(1, 1, p, 1), engine="vllm",
                                          max_num_batched_tokens=p // 2, **NO_HOST)
    run = simulate_replica(model, eng, pool, closed_loop(1, 1, p, 1))
    expected = model.step_s(0, 0.0, [(p // 2, 0)], 0) + model.step_s(0, 0.0, [(p // 2, p // 2)],
                                                                     1)
    assert run.steps == 2
    assert float(run.first_token_s[0]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_kv_pool_of_n_blocks_never_holds_more(engine: str) -> None:
    # 40 blocks; a request of 100 + 100 tokens needs at most ceil(200/bs) blocks
    n = 40
    r = simulate(MODEL, GPU, closed_loop(8, 24, 100, 100), engine=engine, kv_blocks=n,
                 block_size=16, **NO_HOST)
    assert np.all(np.isfinite(r.finish_s))
    assert float(np.max(r.timeline["kv_blocks"])) <= n
    bs = r.kv_block_size
    if engine == "trtllm":  # reserve: at most floor(N / ceil(200/bs)) requests at once
        assert int(np.max(r.timeline["running"])) <= n // math.ceil(200 / bs)
        assert int(np.sum(r.preemptions)) == 0
    else:  # lazy: the pool runs out while decoding and requests are recomputed
        assert int(np.sum(r.preemptions)) > 0


def test_littles_law_in_steady_state() -> None:
    # open loop: time-average number in the system = arrival rate × mean time in system
    rate = 6.0
    r = simulate(MODEL, GPU, poisson(rate, 3000, 512, 128, spread=0.5, seed=3),
                 engine="vllm")
    send, fin = r.send_s, r.finish_s
    t0, t1 = np.percentile(send, 10), np.percentile(send, 90)
    inside = np.clip(np.minimum(fin, t1) - np.maximum(send, t0), 0.0, None)
    in_system = float(np.sum(inside)) / (t1 - t0)
    arrivals = np.sum((send >= t0) & (send < t1)) / (t1 - t0)
    w = float(np.mean(r.e2e_s[(send >= t0) & (send < t1)]))
    assert in_system == pytest.approx(arrivals * w, rel=0.05)


def test_more_concurrency_never_lowers_mean_ttft() -> None:
    means = [float(np.mean(simulate(MODEL, GPU, closed_loop(c, 4 * c, 1024, 128),
                                    engine="vllm").ttft_s)) for c in (1, 2, 4, 8, 16, 32, 64)]
    assert all(b >= a * (1 - 1e-9) for a, b in itertools.pairwise(means)), means


def test_a_faster_gpu_never_raises_mean_ttft() -> None:
    base = pm.load_hardware(GPU)
    peaks = {k: v.model_copy(update={"peak": v.peak * 1.5}) for k, v in base.peaks.items()}
    fast = base.model_copy(update={
        "id": "h100-faster", "peaks": peaks,
        "memory": base.memory.model_copy(update={"bandwidth": base.memory.bandwidth * 1.5})})
    wl = closed_loop(16, 64, 1024, 128)
    slow_t = float(np.mean(simulate(MODEL, base, wl, engine="vllm", kv_blocks=20000).ttft_s))
    fast_t = float(np.mean(simulate(MODEL, fast, wl, engine="vllm", kv_blocks=20000).ttft_s))
    assert fast_t < slow_t


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("kind", ["closed", "poisson"])
def test_closed_form_decode_runs_match_single_steps(engine: str, kind: str) -> None:
    wl = closed_loop(12, 60, 700, 300, spread=0.6, seed=1) if kind == "closed" else \
        poisson(3.0, 60, 700, 300, spread=0.6, seed=1)
    _cfg, _spec, eng, pool, model = prepare(MODEL, GPU, wl, engine=engine,
                                          request_overhead_s=0.02, step_overhead_s=1e-3)
    fast = simulate_replica(model, eng, pool, wl)
    slow = simulate_replica(model, eng, pool, wl, bulk=False)
    assert fast.steps == slow.steps
    for name in ("first_token_s", "finish_s", "start_s"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=2e-4)


def test_replicas_split_the_load() -> None:
    wl = closed_loop(32, 128, 512, 64)
    one = simulate(MODEL, GPU, wl, engine="vllm")
    two = simulate(MODEL, GPU, wl, engine="vllm", replicas=2)
    assert two.throughput_tok_s > one.throughput_tok_s
    assert two.per_gpu_tok_s < 2 * one.per_gpu_tok_s
    assert two.to_dict()["gpus"] == 2


def test_json_fields_and_goodput() -> None:
    r = simulate(MODEL, GPU, closed_loop(8, 40, 256, 32), engine="sglang")
    d = r.to_dict(ttft_slo_s=10.0, tpot_slo_s=1.0)
    for key in ("ttft_s", "tpot_s", "e2e_s", "itl_s", "queue_s"):
        assert set(d[key]) == {"mean", "p50", "p90", "p99"}
    for key in ("throughput_tok_s", "requests_per_s", "per_gpu_tok_s"):
        assert d[key] > 0
    assert d["goodput"]["requests_per_s"] == pytest.approx(d["requests_per_s"])
    assert r.goodput(ttft_slo_s=1e-9) == 0.0


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_rates(rate: float) -> None:
    with pytest.raises(PerfmodelError) as info:
        poisson(rate, 10, 128, 16)
    assert info.value.field == "rate"


def test_zero_output_and_bad_spread() -> None:
    with pytest.raises(PerfmodelError) as info:
        closed_loop(4, 10, 128, 0)
    assert info.value.field == "gen"
    with pytest.raises(PerfmodelError) as info:
        closed_loop(4, 10, 128, 16, spread=0.0)
    assert info.value.field == "length_spread"


@pytest.mark.parametrize(("body", "problem"), [
    ("arrival_s,prompt_tokens,output_tokens\n0.5,10,5\n0.2,10,5\n", "sorted"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,10,5\n", "≥ 0"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,0\n", "output_tokens"),
    ("arrival_s,prompt_tokens\n0,10\n", "output_tokens"),
])
def test_bad_traces(tmp_path: Path, body: str, problem: str) -> None:
    f = tmp_path / "trace.csv"
    f.write_text(body)
    with pytest.raises(PerfmodelError) as info:
        read_trace(f)
    assert problem in str(info.value)


def test_a_trace_is_served(tmp_path: Path) -> None:
    f = tmp_path / "trace.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 10}\n'
                 '{"arrival_s": 0.5, "prompt_tokens": 200, "output_tokens": 20}\n')
    wl = read_trace(f)
    r = simulate(MODEL, GPU, wl, engine="vllm", **NO_HOST)
    assert r.send_s.tolist() == [0.0, 0.5]
    assert np.all(r.first_token_s > r.send_s)


def test_a_model_that_does_not_fit_one_request() -> None:
    with pytest.raises(PerfmodelError) as info:
        simulate("llama-3.1-70b", "l4", closed_loop(1, 1, 1024, 16))
    assert info.value.field == "kv_cache"
    with pytest.raises(PerfmodelError) as info:   # fits the GPU, not a 100k-token request
        simulate(MODEL, "l4", closed_loop(1, 1, 100_000, 16))
    assert "KV blocks" in str(info.value)


def test_no_chunking_needs_the_prompt_within_the_budget() -> None:
    with pytest.raises(PerfmodelError) as info:
        simulate(MODEL, GPU, closed_loop(1, 1, 10_000, 4), engine="trtllm")
    assert info.value.field == "max_num_batched_tokens"


def test_unknown_engine() -> None:
    with pytest.raises(PerfmodelError) as info:
        simulate(MODEL, GPU, closed_loop(1, 1, 10, 4), engine="tgi")
    assert info.value.field == "engine"


def test_workload_split_round_robin() -> None:
    wl = Workload("poisson", np.arange(1, 8), np.ones(7, dtype=np.int64),
                  np.arange(7, dtype=float), 0, 7.0)
    a, b = wl.split(2)
    assert a.prompt.tolist() == [1, 3, 5, 7]
    assert b.prompt.tolist() == [2, 4, 6]


# ----------------------------------------------------------------------------- CLI
def test_cli_serve_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    code = main(["serve", MODEL, "--gpu", GPU, "--concurrency", "4", "--prompt", "256",
                 "--gen", "16", "--requests", "12", "--json", "--no-progress"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert {"ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "requests_per_s",
            "per_gpu_tok_s"} <= set(d)


@pytest.mark.parametrize("argv", [
    ["--rate", "0", "--prompt", "10", "--gen", "4"],
    ["--rate", "-3", "--prompt", "10", "--gen", "4"],
    ["--concurrency", "2", "--prompt", "10", "--gen", "0"],
    ["--concurrency", "2", "--prompt", "10"],
    ["--concurrency", "2", "--rate", "1", "--prompt", "10", "--gen", "4"],
])
def test_cli_serve_bad_input_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", MODEL, "--gpu", GPU, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:")
    assert "Traceback" not in err


def test_engine_kernels_reach_the_step_times() -> None:
    # the engine's kernel profile (perfmodel.engines via evaluate_graphs) sets the decode
    # step; kernels="none" is the engine-neutral graph, as `perfmodel model` without --engine
    wl = closed_loop(1, 1, 512, 33)
    for kernels in ("none", "trtllm"):
        r = simulate(MODEL, GPU, wl, engine="trtllm", kernels=kernels, **NO_HOST)
        static = pm.predict_model(MODEL, GPU, phase="generate", prompt_len=512, gen_len=33,
                                  decode_points=9, engine=kernels, step_overhead_s=0.0)
        assert float(r.tpot_s[0]) == pytest.approx(static.tpot_s, rel=0.01)


def test_closed_loop_clients_are_not_multiplied_by_replicas() -> None:
    # one client sends one request at a time whatever the replica count: four replicas
    # serve it as one does (three idle); before, each replica got a client of its own
    one = simulate("llama-3.1-8b", "h100-sxm", closed_loop(1, 24, 512, 64))
    four = simulate("llama-3.1-8b", "h100-sxm", closed_loop(1, 24, 512, 64), replicas=4)
    assert four.duration_s == pytest.approx(one.duration_s, rel=1e-9)
    assert float(np.mean(four.ttft_s)) == pytest.approx(float(np.mean(one.ttft_s)), rel=1e-9)
    # three clients on two replicas: clients 0 and 2 on the first, 1 on the second, and
    # request i from client i mod 3, so the first replica serves two thirds of them
    three = closed_loop(3, 30, 512, 64)
    assert [s.size for s in three.shares(2)] == [20, 10]
    assert [w.concurrency for w in three.split(2)] == [2, 1]
    res = simulate("llama-3.1-8b", "h100-sxm", three, replicas=2)
    assert res.finish_s.size == 30
    assert np.all(np.isfinite(res.finish_s))
