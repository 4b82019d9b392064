"""Charts: files are written and non-empty; the data drawn (not the pixels) is checked."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from perfmodel._errors import PerfmodelError
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import load_hardware
from perfmodel.models.predict import predict_model
from perfmodel.planning import Workload, plan
from perfmodel.plots import (
    comparison_data,
    plan_comparison_data,
    plot_gpu_comparison,
    plot_roofline,
    plot_sweep,
    roofline_data,
)
from perfmodel.sweeps import sweep


def _written(path: Path) -> None:
    assert path.is_file()
    assert path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_roofline(tmp_path: Path) -> None:
    hw = load_hardware("a100-80gb-sxm")
    pred = predict_model("llama-2-7b", hw, phase="generate", batch=8, prompt_len=2048,
                         gen_len=64)
    data = roofline_data(pred)
    chart = plot_roofline(data, tmp_path / "roof.png")
    _written(chart.path)
    assert chart.x_scale == "log"
    assert chart.y_scale == "log"
    assert chart.x_label == "arithmetic intensity (FLOP/byte)"
    assert chart.y_label == "performance (TFLOP/s)"
    x, y = chart.series["memory slope"]
    np.testing.assert_allclose(y, hw.memory.bandwidth * x / 1e12)
    x, y = chart.series["bf16/fp16 ceiling"]
    np.testing.assert_allclose(y, np.minimum(hw.memory.bandwidth * x, hw.peak("bf16")) / 1e12)
    # every op sits under the roof: achieved ≤ min(top peak, bandwidth × intensity)
    top = max(data.ceilings.values())
    for p in data.points:
        assert p.flops_per_s <= min(top, hw.memory.bandwidth * p.intensity) * (1 + 1e-9)
    # prefill GEMMs are compute-bound and decode GEMMs memory-bound at batch 8
    bound = {(p.phase, p.name): p.bottleneck for p in data.points}
    assert bound[("prefill", "gate_up_proj")] == "compute"
    assert bound[("decode", "gate_up_proj")] == "memory"
    assert pred.prefill is not None
    row = pred.prefill.op("qkv_proj")
    point = next(p for p in data.points if p.phase == "prefill" and p.name == "qkv_proj")
    assert point.intensity == pytest.approx(float(row.flops) / float(row.bytes))
    assert chart.annotations["ridge_flop_per_byte"] == pytest.approx(
        max(data.ceilings.values()) / hw.memory.bandwidth)
    # embedding has no FLOPs and no place on a roofline
    assert not any(p.name == "embedding" for p in data.points)


def test_sweep_chart(tmp_path: Path) -> None:
    res = sweep("llama-2-7b", "a100-80gb-sxm", "prompt", np.arange(256, 32769, 256))
    chart = plot_sweep(res, tmp_path / "sweep.png")
    _written(chart.path)
    assert chart.x_scale == "log"  # 256..32768 spans 128×
    assert chart.panels == 2
    assert chart.y_label == "time per prefill (TTFT) (ms)"
    assert chart.x_label == "prompt length (tokens)"
    stacked = sum(y for name, (_, y) in chart.series.items() if name != "memory")
    np.testing.assert_allclose(stacked, res.latency_s * 1e3, rtol=1e-9)
    np.testing.assert_allclose(chart.series["memory"][1], res.memory_bytes / 1e9)
    c = res.crossover("attention_over_mlp")
    assert chart.annotations["attention_over_mlp"] == c.value
    # Llama-2's window is 4,096 positions (its config.json): the sweep runs past it
    assert chart.annotations["model_window"] == 4096
    short = sweep("llama-2-7b", "a100-80gb-sxm", "batch", [1, 2, 4, 8])
    short_chart = plot_sweep(short, tmp_path / "b.png")
    assert short_chart.x_scale == "linear"
    assert "model_window" not in short_chart.annotations  # a batch sweep has no such axis


def test_gpu_comparison(tmp_path: Path) -> None:
    preds = [predict_model("llama-3.1-8b", g, phase="generate", prompt_len=1024, gen_len=64)
             for g in ("a100-80gb-sxm", "h100-sxm")]
    chart = plot_gpu_comparison(comparison_data(preds), tmp_path / "cmp.png")
    _written(chart.path)
    np.testing.assert_allclose(chart.series["TTFT (ms)"][1],
                               [float(p.ttft_s) * 1e3 for p in preds])
    assert chart.series["TPOT (ms)"][1][1] < chart.series["TPOT (ms)"][1][0]  # H100 faster
    p = plan("llama-3.1-8b", ["a100-80gb-sxm", "h100-sxm"], Workload(5, 1024, 128, 1.0, 0.05))
    chart = plot_gpu_comparison(plan_comparison_data(p), tmp_path / "plan.png")
    _written(chart.path)
    ranked = p.ranked()
    assert ranked[0].best is not None
    assert chart.series["GPUs needed"][1][0] == ranked[0].best.gpus


def test_cli_plot_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.png"
    assert main(["sweep", "llama-2-7b", "--gpu", "h100-sxm", "--over", "context", "--values",
                 "1024:65536", "--points", "20", "--log", "--plot", str(out)]) == 0
    _written(out)
    out = tmp_path / "m.png"
    assert main(["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "512", "--gen", "8",
                 "--plot", str(out)]) == 0
    _written(out)
    capsys.readouterr()
    assert main(["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "512", "--gen", "8",
                 "--plot", str(tmp_path / "missing" / "m.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    pred = predict_model("llama-2-7b", "h100-sxm", phase="prefill", prompt_len=128)
    with pytest.raises(PerfmodelError, match=r"pip install perfmodel\[plot\]"):
        plot_roofline(roofline_data(pred), tmp_path / "x.png")
