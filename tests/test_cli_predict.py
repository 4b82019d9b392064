"""``perfmodel predict``, run in-process through ``main``."""

from __future__ import annotations

import json
import re

import pytest

from perfmodel.cli.main import main

GEMM = ["predict", "gemm", "--gpu", "h100-sxm", "--m", "4096", "--n", "4096", "--k", "4096",
        "--dtype", "bf16"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _value(out: str, label: str) -> str:
    match = re.search(rf"^\s*{re.escape(label)}\s+(.+)$", out, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{out}"
    return match.group(1)


def test_explain_block(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(GEMM, capsys)
    assert code == 0
    assert err == ""
    assert "h100-sxm" in out
    assert "m=4096 n=4096 k=4096" in out
    assert _value(out, "Duration").endswith("µs")
    compute = float(_value(out, "Compute (SM) Throughput").rstrip(" %"))
    memory = float(_value(out, "Memory Throughput").rstrip(" %"))
    assert 0 < memory < compute <= 100
    assert "ridge point" in _value(out, "Arithmetic Intensity")
    # 2 * 4096^3 = 137.4 GFLOP; minimum bytes 3 * 4096^2 * 2 = 100,663,296
    assert _value(out, "FLOPs").startswith("137.4 GFLOP")
    assert "100,663,296 B" in _value(out, "Bytes (minimum)")
    for part in ("compute", "memory", "overhead"):
        assert _value(out, part).split()[1] == "µs"
    assert _value(out, "Bottleneck").startswith("compute-bound, ")
    assert "tile" in _value(out, "Model")
    assert "Advice: near the roofline" in out


def test_explain_matches_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, text, _ = run(GEMM, capsys)
    code, out, _ = run([*GEMM, "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    for key in ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes",
                "bytes_min", "arithmetic_intensity", "ridge_point", "compute_util",
                "memory_util", "bottleneck", "bottleneck_ratio", "details", "stages"):
        assert key in data
    assert data["flops"] == 2 * 4096**3
    assert data["bottleneck"] == "compute"
    us = float(_value(text, "Duration").split()[0].replace(",", ""))
    assert us == pytest.approx(data["latency_s"] * 1e6, abs=0.006)
    assert float(_value(text, "Compute (SM) Throughput").rstrip(" %")) == pytest.approx(
        data["compute_util"] * 100, abs=0.051)


def test_latency_bound_advice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["predict", "gemm", "--gpu", "a100-80gb-sxm", "--m", "128", "--n", "128",
                        "--k", "128", "--dtype", "fp16"], capsys)
    assert code == 0
    assert _value(out, "Bottleneck").startswith("latency-bound")
    assert "Advice: launch-bound" in out


def test_naive_attention_shows_stages(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["predict", "attention", "--gpu", "a100-80gb-sxm", "--batch", "1",
                        "--heads", "32", "--seq-q", "32768", "--head-dim", "128", "--causal",
                        "--dtype", "fp16", "--impl", "naive"], capsys)
    assert code == 0
    assert "Stages (4 kernels)" in out
    for stage in ("qk", "scale_mask", "softmax", "pv"):
        assert re.search(rf"^\s+{stage}\s+[\d.,]+ µs", out, re.MULTILINE)
    assert _value(out, "Bottleneck").startswith("memory-bound")
    assert "fused (flash) kernel" in out


def test_attention_json_decode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["predict", "attention", "--gpu", "h100-sxm", "--batch", "8", "--heads",
                        "32", "--kv-heads", "8", "--seq-q", "1", "--seq-kv", "8192",
                        "--head-dim", "128", "--dtype", "bf16", "--num-splits", "1", "--json"],
                       capsys)
    assert code == 0
    data = json.loads(out)
    # KV cache 8*8*8192*256*2 = 268,435,456 B plus Q and O 8*32*128*2 = 65,536 each
    assert data["bytes_min"] == 268_435_456 + 2 * 65_536
    assert data["details"]["splits"] == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["norm", "--tokens", "8192", "--hidden", "4096"],
        ["norm", "--tokens", "8192", "--hidden", "4096", "--kind", "layer"],
        ["activation", "--tokens", "512", "--width", "11008", "--kind", "gelu"],
        ["rotary", "--tokens", "8192", "--heads", "32", "--kv-heads", "8", "--head-dim", "128"],
        ["softmax", "--rows", "65536", "--cols", "4096"],
        ["embedding", "--tokens", "8192", "--hidden", "4096", "--vocab", "128256"],
        ["elementwise", "--numel", "33554432", "--reads", "2"],
        ["allreduce", "--numel", "33554432", "--gpus", "8"],
    ],
)
def test_small_ops(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["predict", *argv, "--gpu", "h100-sxm"], capsys)
    assert code == 0, err
    assert "Duration" in out
    assert "Advice:" in out
    code, out, _ = run(["predict", *argv, "--gpu", "h100-sxm", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["latency_s"] > 0


def test_compare_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["predict", "gemm", "--compare", "a100-80gb-sxm,h100-sxm", "--m", "8192",
                        "--n", "8192", "--k", "8192", "--dtype", "bf16"], capsys)
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GPU"))
    assert lines[header].split()[:2] == ["GPU", "DURATION"]
    assert "COMPUTE %" in lines[header]
    assert "MEMORY %" in lines[header]
    assert lines[header + 1].startswith("a100-80gb-sxm")
    assert lines[header + 2].startswith("h100-sxm")
    assert "compute" in lines[header + 2]


def test_compare_json_with_gpu_first(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["predict", "gemm", "--gpu", "h100-sxm", "--compare",
                        "a100-80gb-sxm,h100-sxm", "--m", "4096", "--n", "4096", "--k", "4096",
                        "--dtype", "fp8", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)["compare"]
    assert [r["hardware"] for r in rows] == ["h100-sxm", "a100-80gb-sxm"]
    assert rows[0]["latency_s"] > 0
    assert "fp8" in rows[1]["error"]  # A100 has no fp8: a row that says so, not a crash


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--m", "-5"], "--m"),
        (["--m", "0"], "--m"),
        (["--m", "2.5"], "--m"),
        (["--m", "abc"], "--m"),
        (["--k", "nan"], "--k"),
        (["--dtype", "fp7"], "--dtype"),
    ],
)
def test_bad_gemm_input_exits_2_naming_the_argument(argv: list[str], named: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--m": "64", "--n": "64", "--k": "64", "--dtype": "bf16"}
    base.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    flat = [x for kv in base.items() for x in kv]
    code, out, err = run(["predict", "gemm", "--gpu", "h100-sxm", *flat], capsys)
    assert code == 2
    assert out == ""
    assert named in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["predict", "gemm", "--gpu", "a100-80gb-sxm", "--m", "64", "--n", "64", "--k", "64",
          "--dtype", "fp8"], "--dtype"),
        (["predict", "attention", "--gpu", "h100-sxm", "--batch", "1", "--heads", "32",
          "--kv-heads", "5", "--seq-q", "64", "--head-dim", "64", "--dtype", "bf16"],
         "--kv-heads"),
        (["predict", "attention", "--gpu", "h100-sxm", "--batch", "1", "--heads", "32",
          "--seq-q", "64", "--head-dim", "64", "--dtype", "bf16", "--num-splits", "x"],
         "--num-splits"),
        (["predict", "gemm", "--m", "64", "--n", "64", "--k", "64", "--dtype", "bf16"], "--gpu"),
        (["predict", "gemm", "--gpu", "no-such-gpu", "--m", "64", "--n", "64", "--k", "64",
          "--dtype", "bf16"], "--gpu"),
        (["predict", "allreduce", "--gpu", "h100-sxm", "--numel", "10", "--gpus", "1"],
         "--gpus"),
    ],
)
def test_bad_input_exits_2(argv: list[str], named: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert named in err
    assert len(err.strip().splitlines()) == 1


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["predict", "--help"], ["predict", "gemm", "--help"],
                 ["predict", "attention", "--help"]):
        code, out, _ = run(argv, capsys)
        assert code == 0
        assert "examples:" in out
        assert "perfmodel predict" in out


def test_engine_attention_computes_in_fp8_over_an_fp8_kv_cache_as_the_model_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    # TensorRT-LLM's prefill kernel over an fp8 KV cache computes in fp8; the CLI kept the
    # bf16 Q dtype and predicted the call 3 % slower than over a bf16 cache
    import perfmodel as pm

    base = ["predict", "attention", "--gpu", "h100-sxm", "--batch", "4", "--heads", "32",
            "--kv-heads", "8", "--seq-q", "8192", "--head-dim", "128", "--causal",
            "--dtype", "bf16", "--engine", "trtllm", "--json"]
    code, out, _ = run([*base, "--kv-dtype", "fp8"], capsys)
    assert code == 0
    fp8 = json.loads(out)
    code, out, _ = run([*base, "--kv-dtype", "bf16"], capsys)
    bf16 = json.loads(out)
    assert fp8["latency_s"] < bf16["latency_s"]
    # the model path's attention for the same call
    r = pm.predict_model("llama-3.1-8b", "h100-sxm", phase="prefill", batch=4,
                         prompt_len=8192, kv_dtype="fp8", engine="trtllm")
    assert any("in fp8 over the fp8 KV cache" in a for a in r.assumptions)


def test_explain_names_the_fp8_kernel_build(capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's fp8 context attention on an SM89 GPU says which compiled build
    (head sizes 72-128 here) its rate is that of, in the Model line and the JSON."""
    argv = ["predict", "attention", "--gpu", "l40s", "--engine", "trtllm", "--batch", "2",
            "--heads", "32", "--kv-heads", "8", "--seq-q", "2048", "--head-dim", "128",
            "--causal", "--dtype", "fp8"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "fp8 build e4m3-d72-128" in _value(out, "Model")
    code, out, _ = run([*argv, "--json"], capsys)
    assert json.loads(out)["details"]["fp8_build"] == "e4m3-d72-128"
