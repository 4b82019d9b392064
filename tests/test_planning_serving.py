"""Planning and sweeps on the serving simulator; static predictions that do not fit memory."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfmodel.cli.main import main
from perfmodel.planning import Workload, plan
from perfmodel.serving import closed_loop, poisson, simulate, stats
from perfmodel.serving.sweep import serve_sweep

WL = Workload(requests_per_s=20, prompt_len=1024, output_len=128, ttft_target_s=0.5,
              tpot_target_s=0.03)


@pytest.fixture(scope="module")
def plan8() -> object:
    return plan("llama-3.1-8b", ["h100-sxm"], WL, tp_options=(1, 2), method="simulate",
                requests=200)


def test_simulated_plan_meets_the_targets_at_its_rate(plan8: object) -> None:
    g = plan8.gpus[0]  # type: ignore[attr-defined]
    o = g.best
    assert o is not None
    assert o.feasible
    assert o.replicas == math.ceil(WL.requests_per_s / o.requests_per_s_per_replica - 1e-9)
    assert o.gpus == o.replicas * o.tp
    # replay the planned per-replica rate: p90 TTFT and TPOT within the targets; at twice
    # the rate at least one target fails (the search stopped for a reason)
    rng = np.random.default_rng(0)
    gaps = rng.exponential(1.0, size=200)
    gaps[0] = 0.0
    for rate, meets in ((o.requests_per_s_per_replica, True),
                        (2.0 * o.requests_per_s_per_replica, False)):
        from perfmodel.serving.requests import Workload as Requests
        wl = Requests("poisson", np.full(200, 1024), np.full(200, 128), np.cumsum(gaps) / rate,
                      0, rate)
        r = simulate("llama-3.1-8b", "h100-sxm", wl, tp=o.tp)
        # the planner interpolates step times on grids sized for its longest request, this
        # replay on grids of its own: at the boundary they may differ by a fraction of 1 %
        slack = 1.01 if meets else 1.0
        ok = stats(r.ttft_s).p90 <= slack * WL.ttft_target_s \
            and stats(r.tpot_s).p90 <= slack * WL.tpot_target_s
        assert ok == meets


def test_tighter_tpot_never_raises_the_rate() -> None:
    loose = plan("llama-3.1-8b", ["h100-sxm"], WL, tp_options=(1,), method="simulate",
                 requests=150).gpus[0].best
    tight = plan("llama-3.1-8b", ["h100-sxm"], Workload(20, 1024, 128, 0.5, 0.015),
                 tp_options=(1,), method="simulate", requests=150).gpus[0].best
    assert loose is not None
    assert tight is not None
    assert tight.requests_per_s_per_replica <= loose.requests_per_s_per_replica


def test_simulated_plan_says_why_an_option_fails() -> None:
    p = plan("llama-3.1-70b", ["h100-sxm"], Workload(1, 1024, 64, 2.0, 0.05), tp_options=(1,),
             method="simulate", requests=100)
    o = p.gpus[0].options[0]
    assert not o.feasible
    assert o.reason.startswith("does not fit")
    p = plan("llama-3.1-8b", ["h100-sxm"], Workload(1, 1024, 64, 0.001, 0.05),
             tp_options=(1,), method="simulate", requests=100)
    assert "exceeds the 1 ms target" in p.gpus[0].options[0].reason


def test_cli_plan_simulates_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "llama-3.1-8b", "--gpus", "h100-sxm", "--rps", "5", "--prompt",
                 "512", "--output", "64", "--ttft-ms", "500", "--tpot-ms", "30", "--tp", "1",
                 "--requests", "100", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert "serving simulator" in d["assumptions"][0]
    assert d["gpus"][0]["best"]["replicas"] >= 1


def test_concurrency_sweep_raises_throughput_and_ttft() -> None:
    res = serve_sweep("llama-3.1-8b", "h100-sxm", "concurrency", [1, 4, 16], prompt=512,
                      gen=64)
    rows = res.rows()
    thr = [r["throughput_tok_s"] for r in rows]
    ttft = [r["ttft_mean_s"] for r in rows]
    assert thr == sorted(thr)
    assert ttft == sorted(ttft)
    single = simulate("llama-3.1-8b", "h100-sxm", closed_loop(1, 100, 512, 64))
    assert rows[0]["ttft_mean_s"] == pytest.approx(float(np.mean(single.ttft_s)))


def test_rate_sweep_matches_single_runs() -> None:
    res = serve_sweep("llama-3.1-8b", "h100-sxm", "rate", [2.0, 8.0], prompt=256, gen=32,
                      requests=200)
    one = simulate("llama-3.1-8b", "h100-sxm", poisson(8.0, 200, 256, 32))
    assert res.rows()[1]["tpot_mean_s"] == pytest.approx(float(np.nanmean(one.tpot_s)))


def test_cli_sweep_over_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "llama-3.1-8b", "--gpu", "h100-sxm", "--over", "concurrency",
                 "--values", "1,4", "--prompt", "256", "--gen", "16", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("concurrency,ttft_mean_s")
    assert len(lines) == 3


def test_static_batch_that_does_not_fit_is_capped_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "2", "--batch", "256",
            "--prompt", "8192", "--gen", "64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "a batch of 256 does not fit" in out
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch_capped_from"] == 256
    assert 1 <= d["batch"] < 256
    assert d["memory"]["fits"] is True


def test_targets_a_burst_meets_give_a_throughput_bound_not_a_crash() -> None:
    # targets so loose that 100 requests sent at once meet them: no rate fails, so the
    # rate is the one the replica completes the burst at, n / (last finish - first send);
    # before, the search doubled to ~10^13 requests/s and divided by zero replicas
    loose = Workload(requests_per_s=1, prompt_len=512, output_len=64, ttft_target_s=1000.0,
                     tpot_target_s=10.0)
    o = plan("llama-2-7b", ["h100-sxm"], loose, tp_options=(8,), method="simulate",
             requests=100).gpus[0].best
    assert o is not None
    assert o.feasible
    assert o.limited_by.startswith("throughput")
    assert (o.replicas, o.gpus) == (1, 8)
    from perfmodel.serving.requests import Workload as Requests
    burst = Requests("poisson", np.full(100, 512), np.full(100, 64), np.zeros(100), 0,
                     math.inf)
    r = simulate("llama-2-7b", "h100-sxm", burst, tp=8)
    # the planner's step-time grids are sized for its own requests, the replay's for its:
    # a few percent apart on a burst (where the batch sweeps every size)
    assert o.requests_per_s_per_replica == pytest.approx(100 / r.duration_s, rel=0.1)
    assert 0.0 < o.tokens_per_s_per_gpu < math.inf
