"""``perfmodel model``: the text report, --json, comparisons and errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.models.config import presets_dir


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_done_when_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "model", "llama-2-7b", "--gpu", "a100-80gb-sxm",
                          "--prompt", "2048", "--gen", "256")
    assert code == 0, err
    for text in ("TTFT", "TPOT", "end-to-end", "throughput", "weights", "KV cache",
                 "activations", "reserve", "fits", "qkv_proj", "gate_up_proj", "lm_head",
                 "assumptions:", "after the first"):
        assert text in out
    assert "13.48 GB" in out  # 6,738,415,616 params × 2 bytes


def test_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "4",
                        "--prompt", "1024", "--gen", "64", "--kv-dtype", "fp8", "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "memory", "ops", "params"):
        assert key in d
    assert d["params"] == 8_030_261_248
    assert d["dtypes"]["kv_cache"] == "fp8"
    assert set(d["memory"]) >= {"weights_bytes", "kv_cache_bytes", "activation_bytes", "fits"}
    names = [op["name"] for op in d["ops"]]
    assert len(names) == len(set(names))
    assert "attention" in names
    for op in d["ops"]:
        assert {"latency_s", "share", "bottleneck", "prefill", "decode"} <= set(op)
    assert sum(op["share"] for op in d["ops"]) == pytest.approx(1.0)


def test_does_not_fit_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "model", "llama-3.1-70b", "--gpu", "a100-80gb-sxm",
                        "--prompt", "1024", "--gen", "16")
    assert code == 0
    assert "does NOT fit; try --tp 2" in out


def test_compare_and_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text((presets_dir() / "mistral-7b.json").read_text())
    code, out, err = _run(capsys, "model", str(cfg), "--gpu", "a100-80gb-sxm,h100-sxm",
                          "--prompt", "512", "--gen", "32", "--json")
    assert code == 0, err
    rows = json.loads(out)["compare"]
    assert [r["hardware"] for r in rows] == ["a100-80gb-sxm", "h100-sxm"]


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "model", "--list")
    assert code == 0
    assert "mixtral-8x7b" in out
    assert "gpt-oss-120b" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "10"], "missing --gen"),
    (["model", "nope", "--gpu", "h100-sxm", "--prompt", "10", "--gen", "2"], "unknown model"),
    (["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "0", "--gen", "2"], "≥ 1"),
    (["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "8", "--gen", "2", "--tp", "3"],
     "does not divide"),
    (["model", "llama-2-7b", "--gpu", "h100-sxm", "--prompt", "8", "--gen", "2",
      "--kv-dtype", "fp7"], "unknown dtype"),
])
def test_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_bad_config_file_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = json.loads((presets_dir() / "llama-2-7b.json").read_text())
    data["num_key_value_heads"] = 5
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    code, _, err = _run(capsys, "model", str(path), "--gpu", "h100-sxm", "--prompt", "8",
                        "--gen", "2")
    assert code == 2
    assert "num_kv_heads (5) does not divide num_heads (32)" in err


def test_engine_host_time_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--step-overhead-ms sets the host time of every pass under --engine: with 4 ms
    instead of 0 ms the TTFT grows by 4 ms and the end-to-end by 4 ms per pass (1 + 15)."""
    base = ("model", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt", "512", "--gen", "16",
            "--engine", "vllm", "--json")
    code0, out0, err0 = _run(capsys, *base, "--step-overhead-ms", "0")
    code4, out4, err4 = _run(capsys, *base, "--step-overhead-ms", "4")
    assert code0 == 0, err0
    assert code4 == 0, err4
    d0, d4 = json.loads(out0), json.loads(out4)
    assert d4["ttft_s"] - d0["ttft_s"] == pytest.approx(4e-3, rel=1e-9)
    assert d4["e2e_s"] - d0["e2e_s"] == pytest.approx(16 * 4e-3, rel=1e-9)
    for bad in ("-1", "nan", "1e9", "fast"):
        code, _, err = _run(capsys, *base, "--step-overhead-ms", bad)
        assert code == 2
        assert "--step-overhead-ms" in err


def test_a_spec_file_as_the_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # a user spec's id is not a bundled one: the report (and its roofline chart) must use
    # the spec as given, not look its id up in the catalogue
    spec = tmp_path / "mine.yaml"
    spec.write_text("extends: h100-sxm\nid: my-h100\nname: My H100\n")
    chart = tmp_path / "roofline.png"
    assert main(["model", "llama-2-7b", "--gpu", str(spec), "--prompt", "128", "--gen", "8",
                 "--plot", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "on My H100 [my-h100]" in out
    assert "TTFT" in out
    assert chart.is_file()
