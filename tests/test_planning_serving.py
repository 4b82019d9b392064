"""Planning and sweeps on the serving simulator; static predictions that do not fit memory."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfmodel.cli.main import main
from perfmodel.planning import PlanOption, Workload, plan
from perfmodel.serving import closed_loop, poisson, simulate, stats
from perfmodel.serving.sweep import serve_sweep

WL = Workload(requests_per_s=20, prompt_len=1024, output_len=128, ttft_target_s=0.5,
              tpot_target_s=0.03)


@pytest.fixture(scope="module")
def plan8() -> object:
    return plan("llama-3.1-8b", ["h100-sxm"], WL, tp_options=(1, 2), method="simulate",
                requests=200)


def _best(model: str, wl: Workload, tp: int, requests: int) -> PlanOption:
    """The simulated plan's best option on one H100 at TP ``tp`` (asserted to exist)."""
    o = plan(model, ["h100-sxm"], wl, tp_options=(tp,), method="simulate",
             requests=requests).gpus[0].best
    assert o is not None
    return o


def _assert_steady_meets(wl: Workload, ttft: float, tpot: float, done: float) -> None:
    """A long replay (:func:`_long_replay`) meets ``wl``'s targets and keeps up. The planner
    interpolates step times on grids sized for its longest request, the replay on grids of
    its own, and draws other arrivals: a few percent at the boundary."""
    assert ttft <= 1.05 * wl.ttft_target_s
    assert tpot <= 1.05 * wl.tpot_target_s
    assert done >= 0.97


def _long_replay(model: str, rate: float, prompt: int, output: int, tp: int,
                 requests: int) -> tuple[float, float, float]:
    """p90 TTFT and TPOT of the requests sent in the middle of a long Poisson run at
    ``rate`` (30-90 % of them: past the start-up, before the drain), and the share of the
    requests sent in that window that also completed within it (1 in steady state)."""
    from perfmodel.serving.requests import Workload as Requests
    gaps = np.random.default_rng(1).exponential(1.0, size=requests)
    send = np.cumsum(gaps) / rate
    wl = Requests("poisson", np.full(requests, prompt), np.full(requests, output), send, 0,
                  rate)
    r = simulate(model, "h100-sxm", wl, tp=tp)
    keep = np.argsort(r.send_s)[int(0.3 * requests):int(0.9 * requests)]
    t1, t2 = r.send_s[keep].min(), r.send_s[keep].max()
    done = np.count_nonzero((r.finish_s >= t1) & (r.finish_s <= t2)) / keep.size
    return stats(r.ttft_s[keep]).p90, stats(r.tpot_s[keep]).p90, done


def test_simulated_plan_meets_the_targets_at_its_rate(plan8: object) -> None:
    g = plan8.gpus[0]  # type: ignore[attr-defined]
    o = g.best
    assert o is not None
    assert o.feasible
    assert o.replicas == math.ceil(WL.requests_per_s / o.requests_per_s_per_replica - 1e-9)
    assert o.gpus == o.replicas * o.tp
    # replay the planned per-replica rate on a long run (other arrival draws, 8,000
    # requests: about 40 times those in flight): in steady state p90 TTFT and TPOT meet
    # the targets and completions keep up with arrivals; at 1.25 times the rate a target
    # fails or the queue falls behind (the search stopped for a reason)
    rate = o.requests_per_s_per_replica
    _assert_steady_meets(WL, *_long_replay("llama-3.1-8b", rate, 1024, 128, o.tp, 8000))
    ttft, tpot, done = _long_replay("llama-3.1-8b", 1.25 * rate, 1024, 128, o.tp, 8000)
    assert ttft > WL.ttft_target_s or tpot > WL.tpot_target_s or done < 0.97


def test_planned_rate_holds_on_long_runs_not_only_on_the_start_up() -> None:
    # a run of 400 requests at 30/s on one H100 (llama-3.1-8b, 1024 + 256 tokens) is all
    # start-up: about 380 requests are in flight at once in steady state. The planner took
    # 30.3 requests/s from it; a long run at that rate falls behind (p90 TTFT 31 s)
    wl = Workload(requests_per_s=30, prompt_len=1024, output_len=256, ttft_target_s=2.0,
                  tpot_target_s=0.05)
    o = _best("llama-3.1-8b", wl, 1, 400)
    _assert_steady_meets(wl, *_long_replay("llama-3.1-8b", o.requests_per_s_per_replica, 1024,
                                           256, 1, 12000))


def test_tighter_tpot_never_raises_the_rate() -> None:
    loose = _best("llama-3.1-8b", WL, 1, 150)
    tight = _best("llama-3.1-8b", Workload(20, 1024, 128, 0.5, 0.015), 1, 150)
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


def test_loose_targets_give_the_replica_throughput_not_a_burst_rate() -> None:
    # targets so loose that latency never limits: the rate is what the replica sustains,
    # just below its throughput when saturated (a closed loop of more clients than it
    # runs at once); before, a burst of the run's 100 requests set it (n / duration)
    loose = Workload(requests_per_s=1, prompt_len=512, output_len=64, ttft_target_s=1000.0,
                     tpot_target_s=10.0)
    o = _best("llama-2-7b", loose, 8, 100)
    assert o.feasible
    assert o.limited_by.startswith("throughput")
    assert (o.replicas, o.gpus) == (1, 8)
    saturated = simulate("llama-2-7b", "h100-sxm", closed_loop(4096, 20000, 512, 64), tp=8)
    throughput = 20000 / saturated.duration_s
    # the planner reports what its run completes (its keep-up test passes a rate whose
    # completions fall short of the sends by up to 3 %); that run's steady state and the
    # closed loop's average, start-up and drain included, differ by about as much (stop 48:
    # 208.9 against 205.8 requests/s, the closed loop's own steady state 206.4)
    assert 0.85 * throughput <= o.requests_per_s_per_replica <= 1.03 * throughput
    assert 0.0 < o.tokens_per_s_per_gpu < math.inf


@pytest.mark.parametrize("method", ["analytic", "simulate"])
def test_a_tp_degree_that_cannot_split_the_model_is_an_option_with_its_reason(
        method: str) -> None:
    # tp_options=(3,) for 32 query heads gave no option at all and no reason
    p = plan("llama-3.1-8b", ["h100-sxm"], Workload(1, 512, 64, 2.0, 0.05), tp_options=(3,),
             method=method, requests=100)
    (o,) = p.gpus[0].options
    assert (o.tp, o.feasible) == (3, False)
    assert "does not divide the 32 query heads" in o.reason


def test_plan_names_a_workload_of_the_wrong_kind() -> None:
    # the serving simulator's request Workload raised AttributeError: 'prompt_len'
    from perfmodel._errors import PerfmodelError

    with pytest.raises(PerfmodelError) as err:
        plan("llama-3.1-8b", ["h100-sxm"], poisson(2.0, 10, 512, 64))  # type: ignore[arg-type]
    assert err.value.field == "workload"
