"""Expert parallelism beside tensor-parallel attention (``tep``) and attention data
parallelism with expert-parallel experts (``dep``): graph shapes, communication, weights and
KV per GPU derived by hand from the configs, and the predictions' invariants."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.models.config import load_model
from perfmodel.models.graph import GraphOp, decode_graph, prefill_graph
from perfmodel.models.memory import estimate_memory, kv_cache_bytes, weight_bytes
from perfmodel.ops import AllReduce

QWEN = load_model("qwen3-30b-a3b")     # 128 experts, top-8, 2048 hidden, 768 wide, 48 layers
DSV3 = load_model("deepseek-v3")


def _op(graph: list[GraphOp], name: str) -> GraphOp:
    return next(g for g in graph if g.name == name)


def _touched(e: float, k: float, tokens: float) -> float:
    return float(np.clip(round(e * (1.0 - (1.0 - k / e) ** tokens)), 1.0, e))


def test_tep_puts_whole_experts_on_each_gpu() -> None:
    # 64 decode tokens on 4 GPUs: every GPU sees all 64 (attention TP), the touched experts
    # divide over the GPUs whole: n = 2·768 (gate and up, not split), ⌈touched/4⌉ each
    g = decode_graph(QWEN, 64, 1024, tp=4, parallel="tep")
    touched = _touched(128, 8, 64)
    up = _op(g, "experts_gate_up").args
    assert float(up["n"]) == 2 * 768
    assert float(up["batch"]) == math.ceil(touched / 4)
    assert float(up["m"]) == math.ceil(64 * 8 / touched)
    assert float(_op(g, "attention").args["heads"]) == 32 / 4       # attention still TP
    assert any(x.name == "mlp_allreduce" for x in g)                  # sums the experts
    assert not any(x.name == "moe_gather_scatter" for x in g)
    # under TP the same experts are all on every GPU at a quarter of the width
    tp = _op(decode_graph(QWEN, 64, 1024, tp=4), "experts_gate_up").args
    assert float(tp["n"]) == 2 * 768 / 4
    assert float(tp["batch"]) == touched


def test_dep_runs_attention_per_rank_and_gathers_tokens_for_the_experts() -> None:
    # 64 sequences on 8 GPUs: each GPU attends over its 8 with all 32 heads; the MoE
    # layers gather the 8 ranks' 64 tokens and each GPU runs ⌈touched/8⌉ whole experts
    g = decode_graph(QWEN, 64, 1024, tp=8, parallel="dep")
    att = _op(g, "attention").args
    assert float(att["batch"]) == 8
    assert float(att["heads"]) == 32
    assert float(att["kv_heads"]) == 4
    touched = _touched(128, 8, 64)
    up = _op(g, "experts_gate_up").args
    assert float(up["batch"]) == math.ceil(touched / 8)
    assert float(up["n"]) == 2 * 768
    assert float(up["m"]) == math.ceil(64 * 8 / touched)
    assert float(_op(g, "qkv_proj").args["m"]) == 8
    gs = _op(g, "moe_gather_scatter")
    assert gs.count == 48
    assert float(gs.args["numel"]) == 64 * 2048
    assert float(gs.args["gpus"]) == 8
    assert gs.args["algorithm"] == "ring"
    assert not any(x.name in ("attn_allreduce", "mlp_allreduce", "embed_allreduce") for x in g)
    # an uneven batch: the busiest rank has ⌈60/8⌉ = 8 sequences, the gather pads to 8·8
    g = decode_graph(QWEN, 60, 1024, tp=8, parallel="dep")
    assert float(_op(g, "attention").args["batch"]) == 8
    assert float(_op(g, "moe_gather_scatter").args["numel"]) == 64 * 2048


def test_dep_prefill_routes_every_ranks_tokens() -> None:
    g = prefill_graph(QWEN, 16, 512, tp=4, parallel="dep")
    assert float(_op(g, "qkv_proj").args["m"]) == 4 * 512             # this rank's prompts
    assert float(_op(g, "experts_act").args["tokens"]) == 16 * 512 * 8 / 4
    assert float(_op(g, "moe_permute").args["numel"]) == 16 * 512 * 8 / 4 * 2048


def test_weights_per_gpu_by_hand() -> None:
    dt = pm.models.graph.Dtypes()
    whole = float(weight_bytes(QWEN, 1, dt))
    experts = 48 * 128 * 3 * 2048 * 768 * 2.0      # bf16 expert matrices, no bias
    # dep: everything but the experts held whole by each of 8 GPUs
    assert float(weight_bytes(QWEN, 8, dt, "dep")) == pytest.approx(
        whole - experts * (1 - 1 / 8), rel=1e-12)
    # tep holds what tp holds: the same bytes, arranged as whole experts
    assert float(weight_bytes(QWEN, 4, dt, "tep")) == float(weight_bytes(QWEN, 4, dt))


def test_dep_kv_cache_is_the_ranks_own() -> None:
    cap = pm.load_hardware("h200-sxm").memory.capacity
    fp8 = pm.models.graph.Dtypes(weight="fp8", expert="fp8")
    m = estimate_memory(DSV3, cap, 64, 4096, 1, 8, fp8, parallel="dep")
    # each GPU caches its 8 sequences' latents (MLA: replicated under TP, so 1/8 here)
    assert float(m.kv_cache_bytes) == pytest.approx(float(kv_cache_bytes(DSV3, 8, 4096)))
    tp = estimate_memory(DSV3, cap, 64, 4096, 1, 8, fp8)
    assert float(tp.kv_cache_bytes) == pytest.approx(8 * float(m.kv_cache_bytes))
    # the instance holds whole multiples of its 8 ranks, and more sequences than TP8
    assert float(m.max_batch) % 8 == 0
    assert float(m.max_batch) > float(tp.max_batch)


@pytest.mark.parametrize("parallel", ["tep", "dep"])
def test_one_gpu_is_the_same_in_every_layout(parallel: str) -> None:
    kw: dict[str, Any] = {"phase": "generate", "batch": 8, "prompt_len": 512, "gen_len": 64}
    a = pm.predict_model(QWEN, "h100-sxm", **kw)
    b = pm.predict_model(QWEN, "h100-sxm", parallel=parallel, **kw)
    assert float(a.e2e_s) == float(b.e2e_s)


def test_dep_prediction_parts() -> None:
    r = pm.predict_model(DSV3, "h200-sxm", phase="decode", batch=256, context_len=4096,
                         tp=8, parallel="dep", engine="trtllm", kv_dtype="fp8")
    names = [o.name for o in r.ops]
    assert "moe_gather_scatter" in names
    assert "attn_allreduce" not in names
    assert any("parallel dep" in a for a in r.assumptions)
    # the same instance under TP: the latent cache of all 256 sequences on every GPU
    tp = pm.predict_model(DSV3, "h200-sxm", phase="decode", batch=256, context_len=4096,
                          tp=8, engine="trtllm", kv_dtype="fp8")
    assert float(r.memory.kv_cache_bytes) * 8 == pytest.approx(float(tp.memory.kv_cache_bytes))


def test_more_sequences_never_take_much_less_time_under_dep() -> None:
    # the grouped GEMMs' tile choice gives a sawtooth of a few percent as the rows per
    # expert change (TP has it too: 1.8 % at 112 sequences here); nothing larger
    b = np.arange(8, 1025, 8)
    for parallel in ("tp", "dep"):
        r = pm.predict_model(QWEN, "b200", phase="decode", batch=b, context_len=2048, tp=8,
                             parallel=parallel)
        lat = np.asarray(r.latency_s)
        assert np.all(np.diff(lat) >= -0.03 * lat[1:])
        assert lat[-1] > 1.5 * lat[0]


def test_layouts_refuse_what_they_cannot_lay_out() -> None:
    with pytest.raises(PerfmodelError) as err:
        decode_graph(load_model("llama-3.1-8b"), 8, 1024, tp=2, parallel="dep")
    assert err.value.field == "parallel"
    with pytest.raises(PerfmodelError) as err:          # 8 experts over 16 GPUs
        decode_graph(load_model("mixtral-8x7b"), 8, 1024, tp=16, parallel="tep")
    assert err.value.field == "tp"
    assert "8 experts" in err.value.problem
    with pytest.raises(PerfmodelError) as err:
        decode_graph(QWEN, 8, 1024, tp=2, parallel="ep")
    assert "tp, tep, dep" in err.value.fix


def test_moe_gather_scatter_costs_a_ring_all_reduce() -> None:
    # all-gather + reduce-scatter of B bytes on n GPUs: (n−1)/n·B each, 2(n−1)/n·B in all
    op = AllReduce(numel=64 * 2048, gpus=8, dtype="bf16", algorithm="ring")
    sent = float(op.cost().link_bytes)
    assert sent == pytest.approx(2 * 7 / 8 * 64 * 2048 * 2, rel=1e-12)


# ------------------------------------------------------------------------------ serving
def test_serving_one_gpu_is_the_same_in_every_layout() -> None:
    from perfmodel.serving import closed_loop, simulate

    wl = closed_loop(16, 64, 512, 32)
    base = simulate(QWEN, "h100-sxm", wl, engine="trtllm")
    for parallel in ("tep", "dep"):
        r = simulate(QWEN, "h100-sxm", wl, engine="trtllm", parallel=parallel)
        assert np.array_equal(r.finish_s, base.finish_s)


def test_serving_dep_gives_each_gpu_its_own_requests_and_pool() -> None:
    from perfmodel.serving import closed_loop, prepare, simulate

    wl = closed_loop(64, 256, 1024, 64)
    kw: dict[str, Any] = {"engine": "trtllm", "kv_dtype": "fp8"}
    r = simulate(DSV3, "h200-sxm", wl, tp=8, parallel="dep", **kw)
    # 8 ranks, each simulated with a round-robin share of the 256 requests
    assert sorted(set(r.timeline["replica"].tolist())) == [float(i) for i in range(8)]
    assert r.to_dict()["gpus"] == 8
    assert r.engine_knobs["parallel"] == "dep"
    assert np.all(np.isfinite(r.finish_s))
    # a rank's pool is one GPU's and holds its own sequences' latents; under TP every GPU
    # holds the latents of all, so the instance keeps more tokens under dep
    dep_pool = prepare(DSV3, "h200-sxm", wl, tp=8, parallel="dep", **kw)[3]
    tp_pool = prepare(DSV3, "h200-sxm", wl, tp=8, **kw)[3]
    assert dep_pool.bytes_per_token == pytest.approx(tp_pool.bytes_per_token)
    assert 8 * dep_pool.tokens > tp_pool.tokens


def test_cli_serve_and_model_take_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from perfmodel.cli.main import main

    assert main(["serve", "qwen3-30b-a3b", "--gpu", "b200", "--tp", "4", "--parallel", "dep",
                 "--concurrency", "16", "--prompt", "256", "--gen", "16", "--requests", "32",
                 "--json", "--no-progress"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["engine_knobs"]["parallel"] == "dep"
    assert d["gpus"] == 4
    assert main(["model", "qwen3-30b-a3b", "--gpu", "b200", "--tp", "4", "--parallel", "tep",
                 "--prompt", "256", "--gen", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parallel"] == "tep"
    assert main(["model", "llama-3.1-8b", "--gpu", "b200", "--tp", "2", "--parallel", "dep",
                 "--prompt", "256", "--gen", "16"]) == 2
    assert "parallel" in capsys.readouterr().err


def test_plan_sizes_a_dep_instance() -> None:
    from perfmodel.planning import Workload, plan

    wl = Workload(2.0, 1024, 128, 5.0, 0.2)
    p = plan(QWEN, ["b200"], wl, tp_options=(2, 3, 4), method="simulate", engine="trtllm",
             parallel="dep", requests=100)
    opts = {o.tp: o for o in p.gpus[0].options}
    assert not opts[3].feasible                       # 3 GPUs do not divide 128 experts
    assert "128 experts" in opts[3].reason
    assert opts[4].feasible
    assert opts[4].batch % 4 == 0                     # four ranks' sequences
    with pytest.raises(PerfmodelError) as err:
        plan(QWEN, ["b200"], wl, method="analytic", parallel="dep")
    assert err.value.field == "parallel"
    with pytest.raises(PerfmodelError) as err:        # a dense model has no experts to spread
        plan(load_model("llama-3.1-8b"), ["b200"], wl, method="simulate", parallel="dep")
    assert err.value.field == "parallel"


def test_dep_does_not_split_heads() -> None:
    # 64 GPUs cannot split Qwen3-30B-A3B's 32 query heads (tp, tep), but under dep each
    # GPU runs whole attention and holds 128 / 64 = 2 experts; 6 GPUs divide neither
    from perfmodel.serving import closed_loop, prepare

    wl = closed_loop(8, 16, 256, 16)
    with pytest.raises(PerfmodelError) as err:
        prepare(QWEN, "b200", wl, tp=64, engine="trtllm", parallel="tep")
    assert "query heads" in err.value.problem
    prepare(QWEN, "b200", wl, tp=64, engine="trtllm", parallel="dep")  # no error
    g = decode_graph(QWEN, 128, 512, tp=64, parallel="dep")
    assert float(_op(g, "attention").args["heads"]) == 32
    assert float(_op(g, "experts_gate_up").args["batch"]) == math.ceil(
        _touched(128, 8, 128) / 64)
    with pytest.raises(PerfmodelError) as err:
        prepare(QWEN, "b200", wl, tp=6, engine="trtllm", parallel="dep")
    assert "experts" in err.value.problem


def test_sweeps_take_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from perfmodel.cli.main import main
    from perfmodel.sweeps import sweep

    # a tp sweep under dep: each point its own instance (one array pass)
    res = sweep(QWEN, "b200", "tp", [2, 4, 8], batch=64, prompt_len=512, parallel="dep")
    one = pm.predict_model(QWEN, "b200", phase="decode", batch=64, context_len=512, tp=4,
                           parallel="dep")
    assert float(np.asarray(res.latency_s)[1]) == pytest.approx(float(one.latency_s))
    assert main(["sweep", "qwen3-30b-a3b", "--gpu", "b200", "--tp", "4", "--parallel", "dep",
                 "--over", "concurrency", "--values", "8,32", "--prompt", "256", "--gen", "16",
                 "--requests", "32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [p["engine_knobs"]["parallel"] for p in d["points"]] == ["dep", "dep"]
