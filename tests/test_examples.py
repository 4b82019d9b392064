"""Every example runs (quickly) as a user would run it, so none can rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(name: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_tested() -> None:
    tested = {"capacity_planning_70b.py", "engine_kernels.py", "sequence_length_whatif.py",
              "use_from_another_tool.py", "deepseek_v3_capacity.py", "pcie_pipeline.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_capacity_planning_70b() -> None:
    out = _run("capacity_planning_70b.py")
    assert "Llama-3.1-70B, bf16 weights:" in out
    assert "per million output tokens" in out
    assert "assumptions:" in out


def test_sequence_length_whatif(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = _run("sequence_length_whatif.py", "--plot", str(tmp_path / "seq.png"))
    assert "attention kernels take longer than the MLP: from" in out
    assert "exceed GPU memory: from" in out
    assert (tmp_path / "seq.png").stat().st_size > 10_000


def test_use_from_another_tool() -> None:
    out = _run("use_from_another_tool.py")
    data = json.loads(out[out.index("{"):])
    assert [c["gpu"] for c in data["choices"]] == ["a100-80gb-sxm", "h100-sxm"]
    for choice in data["choices"]:
        assert choice["step_ms"] <= data["budget_s"] * 1e3


def test_engine_kernels() -> None:
    out = _run("engine_kernels.py")
    # each engine's decode kernel on H100 / B200 / L40S, and its fp8 GEMM path
    for word in ("xqa", "flash3", "trtllm-gen", "flashinfer", "per-channel", "cublas"):
        assert word in out, word
    assert "kv_write" in out  # the parts of a call
    assert "attention" in out.split("fp8 linear")[0]
    assert "bundled AIConfigurator rows: median" in out


def test_deepseek_v3_capacity() -> None:
    out = _run("deepseek_v3_capacity.py", "--context", "4096", "--engine", "vllm")
    assert "671.0 B parameters" in out
    for gpu in ("h100-sxm", "h200-sxm", "b200"):
        assert gpu in out, gpu
    assert "cache 70.3 kB/token" in out
    assert "6.0 MB per token" in out  # K and V of 128 heads × 192 × 61 layers, bf16
    # DEP 8 holds more sequences than TP 8 (each GPU caches its own) on the nodes where
    # the fp8 weights fit (not 8 H100s: 85 GB per GPU under TP, 101 GB under DEP)
    tp_lines = out.split("DEP 8")[0]
    dep_lines = out.split("DEP 8")[1]
    for gpu in ("h200-sxm", "b200"):
        tp_batch = int(tp_lines.split(gpu)[1].split("largest batch")[1].split(";")[0])
        dep_batch = int(dep_lines.split(gpu)[1].split("largest batch")[1].split(";")[0])
        assert dep_batch > tp_batch, gpu


def test_pcie_pipeline() -> None:
    out = _run("pcie_pipeline.py", "--requests", "200")
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:]}
    assert set(lines) == {"one", "TP2", "PP2"}
    assert "2 GPUs" in lines["TP2"]
    assert "2 GPUs" in lines["PP2"]

    def seqs(line: str) -> int:
        return int(line.split("KV for")[1].split()[0])

    # a PP2 stage holds half the layers, so each of its two micro-batches gets more KV
    # room than the one card; TP2 splits every layer, and the two cards' room is one pool
    assert seqs(lines["PP2"]) > seqs(lines["one"])
    assert seqs(lines["TP2"]) > 2 * seqs(lines["one"])
