"""Capacity planning: targets met, memory respected, arithmetic of cost, monotone answers."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import load_hardware
from perfmodel.models.config import load_model
from perfmodel.models.graph import Dtypes
from perfmodel.models.memory import activation_bytes, kv_cache_bytes, weight_bytes
from perfmodel.models.predict import predict_model
from perfmodel.planning import Plan, Workload, plan

WL = Workload(requests_per_s=10, prompt_len=2048, output_len=256, ttft_target_s=2.0,
              tpot_target_s=0.05)
GPUS = ("a100-80gb-sxm", "h100-sxm")


@pytest.fixture(scope="module")
def plan70() -> Plan:
    return plan("llama-3.1-70b", GPUS, WL)


def test_70b_needs_tensor_parallelism(plan70: Plan) -> None:
    for g in plan70.gpus:
        tp1 = next(o for o in g.options if o.tp == 1)
        assert not tp1.feasible
        assert "does not fit" in tp1.reason
        assert "141.1 GB" in tp1.reason  # 70.55e9 params × 2 bytes
        assert g.best is not None
        assert g.best.tp >= 2


def test_best_options_meet_targets_and_memory(plan70: Plan) -> None:
    cfg = load_model("llama-3.1-70b")
    for g in plan70.gpus:
        hw = load_hardware(g.gpu)
        for o in g.options:
            if not o.feasible:
                continue
            assert o.ttft_s <= WL.ttft_target_s
            assert o.tpot_s <= WL.tpot_target_s
            assert o.gpus == o.tp * o.replicas
            assert o.replicas * o.requests_per_s_per_replica >= WL.requests_per_s
            assert (o.replicas - 1) * o.requests_per_s_per_replica < WL.requests_per_s
            # memory on each GPU: weights + one prefill + batch KV caches + reserve
            dt = Dtypes()
            need = (float(weight_bytes(cfg, o.tp, dt))
                    + float(activation_bytes(cfg, 1, WL.prompt_len, o.tp, dt))
                    + o.batch * float(kv_cache_bytes(cfg, 1, WL.prompt_len + WL.output_len,
                                                     o.tp))
                    + 0.1 * hw.memory.capacity + 2**30)
            assert need <= hw.memory.capacity
        assert g.best is not None
        assert g.best.gpus == min(o.gpus for o in g.options if o.feasible)


def test_serving_arithmetic(plan70: Plan) -> None:
    g = next(x for x in plan70.gpus if x.gpu == "h100-sxm")
    o = g.best
    assert o is not None
    step = float(predict_model("llama-3.1-70b", "h100-sxm", phase="decode", batch=o.batch,
                               tp=o.tp, context_len=2048 + 256 // 2).tpot_s)  # mean context P + G/2
    prefill = float(predict_model("llama-3.1-70b", "h100-sxm", phase="prefill", batch=1,
                                  tp=o.tp, prompt_len=2048).ttft_s)
    assert o.step_s == pytest.approx(step)
    assert o.prefill_s == pytest.approx(prefill)
    # r = b / ((G−1)·s + b·p); TPOT seen = s + b·p/(G−1); TTFT = p + s
    assert o.requests_per_s_per_replica == pytest.approx(o.batch / (255 * step
                                                                   + o.batch * prefill))
    assert o.tpot_s == pytest.approx(step + o.batch * prefill / 255)
    assert o.ttft_s == pytest.approx(prefill + step)
    price = g.usd_per_gpu_hour
    assert price is not None
    assert o.usd_per_hour == pytest.approx(o.gpus * price)
    assert o.usd_per_million_output_tokens == pytest.approx(
        o.gpus * price / (10 * 256 * 3600) * 1e6)
    assert o.tokens_per_s_per_gpu == pytest.approx(10 * 256 / o.gpus)


def test_tighter_targets_or_more_traffic_never_need_fewer_gpus() -> None:
    base = plan("llama-3.1-8b", ["h100-sxm"], WL).gpus[0].best
    tight = plan("llama-3.1-8b", ["h100-sxm"], Workload(10, 2048, 256, 2.0, 0.02)).gpus[0].best
    busy = plan("llama-3.1-8b", ["h100-sxm"], Workload(40, 2048, 256, 2.0, 0.05)).gpus[0].best
    assert base is not None
    assert tight is not None
    assert busy is not None
    assert tight.gpus >= base.gpus
    assert busy.gpus >= base.gpus
    assert tight.batch <= base.batch


def test_impossible_target_says_why() -> None:
    p = plan("llama-3.1-8b", ["a100-80gb-sxm"], Workload(1, 2048, 64, 0.001, 0.05),
             tp_options=(1,))
    o = p.gpus[0].options[0]
    assert not o.feasible
    assert "TTFT" in o.reason
    assert "exceeds the 1 ms target" in o.reason
    assert p.gpus[0].best is None


@pytest.mark.parametrize("method", ["analytic", "simulate"])
def test_a_gpu_the_engine_does_not_run_on_is_reported_not_fatal(
        method: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan over several GPUs with an engine that does not run on one of them (vLLM
    below Turing, TensorRT-LLM below Ampere) plans the others and says why that one has no
    option (the whole plan used to fail on it)."""
    wl = Workload(1, 512, 64, 2.0, 0.1)
    for engine, gpu in (("vllm", "v100-sxm2-32gb"), ("trtllm", "t4")):
        p = plan("llama-3.1-8b", [gpu, "a100-80gb-sxm"], wl, tp_options=(1, 2),
                 engine=engine, method=method, requests=40)
        by = {g.gpu: g for g in p.gpus}
        assert by["a100-80gb-sxm"].best is not None
        assert not by["a100-80gb-sxm"].engine_refused
        refused = by[gpu]
        assert refused.best is None
        assert "runs on NVIDIA GPUs from" in refused.engine_refused
        assert [o.tp for o in refused.options] == [1, 2]
        assert all(not o.feasible and o.reason == refused.engine_refused
                   for o in refused.options)
        d = json.loads(json.dumps(p.to_dict()))
        assert {g["gpu"]: g["engine_refused"] for g in d["gpus"]}[gpu] == refused.engine_refused
    assert main(["plan", "llama-3.1-8b", "--gpus", "v100-sxm2-32gb,a100-80gb-sxm", "--engine",
                 "vllm", "--rps", "1", "--prompt", "512", "--output", "64", "--ttft-ms", "2000",
                 "--tpot-ms", "100", "--tp", "1", "--method", method, "--requests", "40"]) == 0
    out = capsys.readouterr().out
    assert "engine does not run here" in out


def test_price_override_and_json() -> None:
    p = plan("llama-3.1-8b", ["h100-sxm"], WL, prices={"h100-sxm": 1.0})
    g = p.gpus[0]
    assert g.usd_per_gpu_hour == 1.0
    assert g.price_source == "override"
    d = json.loads(json.dumps(p.to_dict()))
    assert d["gpus"][0]["best"]["usd_per_hour"] == pytest.approx(g.best.gpus if g.best else 0)
    assert d["assumptions"]


def test_workload_validation() -> None:
    with pytest.raises(PerfmodelError, match="requests_per_s"):
        Workload(0, 10, 10, 1.0, 1.0)
    with pytest.raises(PerfmodelError, match="tpot_target_s"):
        Workload(1, 10, 10, 1.0, math.nan)


def test_cli_answers_the_70b_example(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "llama-3.1-70b", "--gpus", "a100-80gb-sxm,h100-sxm", "--rps", "10",
                 "--prompt", "2048", "--output", "256", "--ttft-ms", "2000", "--tpot-ms", "50",
                 "--price", "a100-80gb-sxm=1.5"])
    out = capsys.readouterr().out
    assert code == 0
    for text in ("replicas", "$/M out tok", "TP 1: does not fit", "assumptions:",
                 "$1.50/GPU-hour, override"):
        assert text in out
    code = main(["plan", "llama-3.1-70b", "--gpus", "h100-sxm", "--rps", "10", "--prompt",
                 "2048", "--output", "256", "--ttft-ms", "2000", "--tpot-ms", "50", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpus"][0]["best"]["gpus"] >= 2
    assert main(["plan", "llama-3.1-70b", "--gpus", "h100-sxm", "--rps", "10", "--prompt",
                 "2048", "--output", "256", "--ttft-ms", "2000", "--tpot-ms", "50",
                 "--price", "h100-sxm=free"]) == 2
    assert "--price" in capsys.readouterr().err
