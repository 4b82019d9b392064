"""What-if sweeps: one vectorised pass, crossovers, output formats, the CLI."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.models.config import load_model
from perfmodel.models.memory import estimate_memory
from perfmodel.models.predict import predict_model
from perfmodel.sweeps import GROUPS, op_group, parse_values, sweep


def test_parse_values() -> None:
    assert parse_values("1,2,4,8").tolist() == [1, 2, 4, 8]
    assert parse_values("128:512:128").tolist() == [128, 256, 384, 512]
    assert parse_values("1:1000", points=4, log=True).tolist() == [1, 10, 100, 1000]
    assert parse_values("10:20", points=3).tolist() == [10, 15, 20]
    for bad in ("a,b", "1:2:0", "0,0", "1:2:3:4"):
        with pytest.raises(PerfmodelError, match="values"):
            parse_values(bad)


def test_sweep_equals_the_scalar_loop() -> None:
    values = np.array([256, 2048, 8192])
    res = sweep("llama-3.1-8b", "h100-sxm", "prompt", values, batch=2)
    for i, p in enumerate(values):
        one = predict_model("llama-3.1-8b", "h100-sxm", phase="prefill", batch=2,
                            prompt_len=int(p))
        assert res.latency_s[i] == pytest.approx(float(one.ttft_s), rel=1e-12)
    total = sum(res.groups[g] for g in GROUPS)
    np.testing.assert_allclose(total, res.latency_s, rtol=1e-12)


def test_attention_overtakes_mlp_between_the_bracketing_points() -> None:
    x = np.arange(1024, 65537, 1024)
    res = sweep("llama-2-7b", "a100-80gb-sxm", "prompt", x)
    c = res.crossover("attention_over_mlp")
    assert c.status == "crosses"
    assert c.value is not None
    assert c.bracket is not None
    lo, hi = c.bracket
    assert lo <= c.value <= hi
    i = int(np.searchsorted(x, hi))
    assert res.groups["attention"][i] >= res.groups["mlp"][i]
    assert res.groups["attention"][i - 1] < res.groups["mlp"][i - 1]
    # the physics: causal attention grows ~S² while the MLP grows ~S, so at some length
    # attention must win; it cannot win at the shortest prompts
    assert res.groups["attention"][0] < 0.2 * res.groups["mlp"][0]


def test_decode_turns_compute_bound_with_batch() -> None:
    res = sweep("llama-3.1-8b", "h100-sxm", "batch", parse_values("1:4096", 48, True),
                context_len=128)
    c = res.crossover("linear_compute_bound")
    assert c.status == "crosses"
    assert c.value is not None
    # at batch 1 a decode step is memory-bound. A decode GEMM with bf16 weights does
    # 2·b·k·n FLOPs on 2·k·n weight bytes: b FLOP/byte, against a ridge of
    # 989 TFLOP/s / 3.35 TB/s ≈ 295 FLOP/byte, so it turns compute-bound near b ≈ 300
    # (achievable fractions move it a little): the crossing sits in 30..3000
    assert 30 <= c.value <= 3000
    assert res.compute_s[0] < res.memory_s[0]


def test_context_where_the_kv_cache_stops_fitting() -> None:
    res = sweep("llama-3.1-8b", "h100-sxm", "context", parse_values("1024:262144:1024"),
                batch=8)
    c = res.crossover("stops_fitting")
    assert c.value is not None
    cfg, cap = load_model("llama-3.1-8b"), res.prediction.memory.capacity_bytes
    # decode: the activations are those of one token per sequence
    assert estimate_memory(cfg, cap, 8, c.value, 1.0).fits
    assert not estimate_memory(cfg, cap, 8, c.value + 1, 1.0).fits
    assert res.fits[0]
    assert not res.fits[-1]


def test_tp_sweep_is_vectorised() -> None:
    res = sweep("llama-3.1-70b", "h100-sxm", "tp", [2, 4, 8], context_len=2048, batch=16)
    assert np.all(np.diff(res.latency_s) < 0)
    assert np.all(np.diff(res.memory_bytes) < 0)
    assert np.all(res.groups["allreduce"] > 0)


def test_outputs() -> None:
    res = sweep("phi-3-mini", "a100-80gb-sxm", "prompt", [128, 4096])
    rows = list(csv.DictReader(io.StringIO(res.to_csv())))
    assert len(rows) == 2
    assert float(rows[1]["latency_s"]) == pytest.approx(res.latency_s[1], rel=1e-5)
    d = json.loads(json.dumps(res.to_dict()))
    assert d["columns"]["prompt"] == [128, 4096]
    assert {c["name"] for c in d["crossovers"]} >= {"attention_over_mlp", "stops_fitting"}


def test_op_groups() -> None:
    assert op_group("attention_sliding") == "attention"
    assert op_group("experts_down") == "mlp"
    assert op_group("o_proj") == "qkv_o_proj"
    assert op_group("mlp_allreduce") == "allreduce"
    assert op_group("rotary") == "small_ops"


def test_every_op_of_an_mla_model_has_its_group() -> None:
    """DeepSeek-V3's graphs: the MLA attention kernel with the attention, its down- and
    up-projections with the projections, the latent's cache write and norms small ops."""
    from perfmodel.models.graph import decode_graph, prefill_graph

    cfg = load_model("deepseek-v3")
    names = {g.name for g in [*prefill_graph(cfg, 1, 512), *decode_graph(cfg, 1, 512)]}
    groups = {n: op_group(n) for n in names}
    assert groups["mla_attention"] == "attention"
    for n in ("qkv_a_proj", "q_b_proj", "kv_b_proj", "q_absorb", "v_up", "o_proj"):
        assert groups[n] == "qkv_o_proj", n
    for n in ("mla_cache_write", "q_a_norm", "kv_a_norm", "rotary"):
        assert groups[n] == "small_ops", n


def test_bad_combinations() -> None:
    with pytest.raises(PerfmodelError, match="phase"):
        sweep("llama-2-7b", "h100-sxm", "prompt", [1, 2], phase="decode")
    with pytest.raises(PerfmodelError, match="over"):
        sweep("llama-2-7b", "h100-sxm", "layers", [1, 2])  # type: ignore[arg-type]


def test_cli_table_csv_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "llama-2-7b", "--gpu", "a100-80gb-sxm", "--over", "prompt",
                 "--values", "128:32768:128"]) == 0
    out = capsys.readouterr().out
    assert "attention_over_mlp" in out
    assert "showing 24 of 256 points" in out
    assert main(["sweep", "llama-2-7b", "--gpu", "h100-sxm", "--over", "batch", "--values",
                 "1,2,4", "--context", "4096", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("batch,latency_s")
    assert len(lines) == 4
    assert main(["sweep", "llama-2-7b", "--gpu", "h100-sxm", "--over", "context", "--values",
                 "1000:2000:500", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "decode"
    assert main(["sweep", "llama-2-7b", "--gpu", "h100-sxm", "--over", "tp", "--values",
                 "3"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_json_fixed_lists_only_inputs_constant_along_the_sweep() -> None:
    # a prompt sweep moves the context with the prompt: it is not a fixed input
    d = sweep("llama-3.1-8b", "h100-sxm", "prompt", [128, 512]).to_dict()
    assert "context_len" not in d["fixed"]
    assert d["fixed"]["batch"] == 1.0
    assert sweep("llama-3.1-8b", "h100-sxm", "batch", [1, 8]).to_dict()["fixed"][
        "context_len"] == 2048.0


def test_sweep_values_are_read_ascending_and_checked() -> None:
    # unsorted values gave wrong crossovers ('stops_fitting: from_start' though batches up
    # to 32 fit); words, None and 200,000 points were not refused by name
    from perfmodel._errors import PerfmodelError

    batches = [128, 64, 32, 16, 8, 4, 2, 1]
    down = sweep("llama-2-7b", "h100-sxm", "batch", batches, context_len=2048).to_dict()
    up = sweep("llama-2-7b", "h100-sxm", "batch", sorted(batches), context_len=2048).to_dict()
    assert down["columns"]["batch"] == sorted(batches)
    assert down["crossovers"] == up["crossovers"]
    for bad in (["a"], None, np.arange(1.0, 200_002.0)):
        with pytest.raises(PerfmodelError) as err:
            sweep("llama-2-7b", "h100-sxm", "batch", bad)
        assert err.value.field == "values"
