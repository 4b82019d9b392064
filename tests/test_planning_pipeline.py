"""Capacity plans with pipeline stages (``plan(..., pp=N)``, ``perfmodel plan --pp``): a
replica of tp × pp GPUs sized on the serving simulator; the analytic method refuses it."""

from __future__ import annotations

import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.planning import Workload, plan

MODEL = "llama-3.1-8b"
GPU = "rtx-pro-6000-server"
WL = Workload(requests_per_s=10, prompt_len=512, output_len=64, ttft_target_s=2.0,
              tpot_target_s=0.1)


def test_a_replica_is_tp_times_pp_gpus() -> None:
    p = plan(MODEL, [GPU], WL, tp_options=(1,), method="simulate", requests=200, pp=2)
    o = p.gpus[0].best
    assert o is not None
    assert (o.tp, o.pp) == (1, 2)
    assert o.gpus == o.replicas * 2
    # capacity per GPU: the replica's request rate × output tokens over its two GPUs
    assert o.capacity_tokens_per_s_per_gpu == pytest.approx(
        o.requests_per_s_per_replica * WL.output_len / 2)
    assert o.tokens_per_s_per_gpu == pytest.approx(WL.requests_per_s * WL.output_len / o.gpus)


def test_the_analytic_plan_refuses_stages() -> None:
    with pytest.raises(PerfmodelError, match="pp"):
        plan(MODEL, [GPU], WL, method="analytic", pp=2)


def test_cli_plan_reports_the_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", MODEL, "--gpus", GPU, "--rps", "10", "--prompt", "512", "--output",
                 "64", "--ttft-ms", "2000", "--tpot-ms", "100", "--tp", "1", "--pp", "2",
                 "--requests", "200"]) == 0
    out = capsys.readouterr().out
    assert "TP 1 × PP 2: " in out
