"""``perfmodel specs list|show|validate``, run in-process through ``main``; one subprocess
test runs the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.cli.main import main

# H100 SXM datasheet figures, in SI: 989.4 TFLOP/s dense bf16, 3.35 TB/s, 80 GiB.
H100_BF16 = 989.4e12
H100_BW = 3.35e12
H100_CAPACITY = 80 * 2**30  # 85_899_345_920 bytes


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["specs", "list", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"specs"}
    rows = {row["id"]: row for row in data["specs"]}
    h100 = rows["h100-sxm"]
    assert h100["memory_bandwidth_bytes_per_s"] == H100_BW
    assert h100["memory_capacity_bytes"] == H100_CAPACITY
    assert h100["bf16_dense_flops_per_s"] == H100_BF16
    assert h100["fp8_dense_flops_per_s"] == 1978.9e12  # the datasheet rounds, so not 2 x 989.4
    assert h100["bf16_ridge_flop_per_byte"] == pytest.approx(295.343, rel=1e-5)  # 989.4 / 3.35
    assert list(rows) == sorted(rows)


def test_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["specs", "list"], capsys)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "MEMORY", "BANDWIDTH"]
    h100 = next(r for r in rows if r.startswith("h100-sxm "))
    # vendor "80 GB" is 80 GiB = 85,899,345,920 bytes, printed with its decimal size
    for cell in ("80 GB (85.9 × 10⁹ B)", "3.35 TB/s", "989.4", "1978.9", "295"):
        assert cell in h100


def test_show_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["specs", "show", "h100-sxm"], capsys)
    assert code == 0
    assert err == ""
    for text in ("989.4 TFLOP/s", "3.35 TB/s", "80 GB HBM3 (85.9 × 10⁹ B)", "50 MiB",
                 "1.83 GHz", "700 W",
                 "1978.9 TOP/s", "88 %", "3 µs", "sources", "NVIDIA H100 datasheet"):
        assert text in out
    bf16 = next(line for line in out.splitlines() if line.strip().startswith("bf16 "))
    assert bf16.split()[-2] == "295.3"  # datasheet ridge point, 989.4e12 / 3.35e12 FLOP/byte
    # achievable: 989.4e12 x 0.80 (efficiency.compute default) / (3.35e12 x 0.88 memory)
    assert bf16.split()[-1] == "268.5"
    assert "datasheet = dense peak / memory bandwidth" in " ".join(out.split())


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["specs", "show", "h100-sxm", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["spec"]["memory"]["bandwidth"] == H100_BW
    assert data["spec"]["peaks"]["bf16"]["peak"] == H100_BF16
    ridge = data["derived"]["ridge_point_flop_per_byte"]
    assert ridge["bf16"] == pytest.approx(H100_BF16 / H100_BW)
    assert ridge["fp8"] == pytest.approx(1978.9e12 / H100_BW)  # 590.72 FLOP/byte
    assert data["file"].endswith("h100-sxm.yaml")


def test_show_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: h100-sxm\nid: mine\nname: Mine\nmemory: {bandwidth: 2 TB/s}\n")
    code, out, _ = run(["specs", "show", str(mine)], capsys)
    assert code == 0
    assert out.startswith("mine: Mine")
    assert "2 TB/s" in out
    assert str(mine) in out


def test_show_skips_empty_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text("extends: h100-sxm\nid: bare\ninterconnect: null\npricing: null\n")
    code, out, _ = run(["specs", "show", str(bare)], capsys)
    assert code == 0
    assert "interconnect" not in out.replace("interconnect:", "")  # a source line may say it
    assert "NVLink" not in out.split("sources")[0]
    assert "usd_per_hour" not in out


def test_show_alias_notes_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["specs", "show", "H100", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["spec"]["id"] == "h100-sxm"  # stdout stays pure JSON


@pytest.mark.parametrize("name", ["nonexistent-gpu", "h100-sxn", "missing.yaml"])
def test_unknown_gpu_exits_2_without_traceback(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["specs", "show", name], capsys)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.startswith("error: ")
    assert name in err


def test_unknown_gpu_message_is_one_line_with_a_fix(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run(["specs", "show", "h100-sxn"], capsys)
    assert err.count("\n") == 1
    assert "did you mean h100-sxm" in err
    assert "(fix: " in err


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["specs", "--help"], ["specs", "list", "--help"], ["specs", "show", "--help"],
     ["specs", "validate", "--help"]],
)
def test_help_exits_0_with_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "usage: perfmodel" in out
    assert "examples:" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.startswith("perfmodel ")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["specs", "validate"], capsys)
    assert code == 2
    assert "FILE.yaml" in err
    assert "--help" in err
    code, _, err = run(["specs", "frobnicate"], capsys)
    assert code == 2
    assert "frobnicate" in err
    code, _, err = run(["specs"], capsys)  # no subcommand: help on stderr
    assert code == 2
    assert "validate" in err


def test_validate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: h100-sxm\nmemory: {bandwith: 1 TB/s}\n")
    code, out, _ = run(["specs", "validate", "--json", str(bad)], capsys)
    assert code == 2
    (result,) = json.loads(out)["results"]
    assert result["ok"] is False
    assert any("did you mean 'bandwidth'" in line for line in result["errors"])


def test_installed_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("perfmodel")
    exe = str(script) if script.exists() else shutil.which("perfmodel")
    assert exe, "the perfmodel console script is not installed"
    ok = subprocess.run([exe, "specs", "show", "h100-sxm"], capture_output=True, text=True,
                        timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "3.35 TB/s" in ok.stdout
    bad = subprocess.run([exe, "specs", "show", "no-such-gpu"], capture_output=True, text=True,
                         timeout=120, check=False, cwd=tmp_path)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "unknown hardware 'no-such-gpu'" in bad.stderr


def test_specs_show_prints_each_figure_with_its_provenance(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["specs", "show", "h100-pcie"]) == 0
    out = capsys.readouterr().out
    fp32 = next(ln for ln in out.splitlines() if ln.strip().startswith("compute.fp32 "))
    assert fp32.split()[1:] == ["76", "%", "family:", "h100-sxm"]
    assert "model constants for hopper" in out
    assert next(ln for ln in out.splitlines() if "graph_kernel_s.hopper" in ln)


def test_specs_show_json_has_provenance_and_model_constants(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["specs", "show", "b200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["figure"]: r for r in data["provenance"]}
    assert rows["kernel_overhead"]["provenance"].startswith("fitted: xla_matmul_perf_table.csv")
    assert rows["kernel_overhead"]["value"] == pm.load_hardware("b200").efficiency.kernel_overhead
    assert data["spec"]["efficiency"]["provenance"]["compute.fp32"] == "family: h100-sxm"
    consts = data["model_constants"]
    assert consts["arch"] == "blackwell"
    assert consts["per_arch_count"] > 0
    names = [c["name"] for c in consts["headline"]]
    assert names[:4] == ["graph_kernel_s.blackwell", "l2_capacity_fraction",
                         "l2_bandwidth_fraction", "gemm_cta_bandwidth.blackwell"]
    assert "attn.flash2.efficiency.blackwell" in names
    assert "gemm.deepgemm.block.cta_inflight.blackwell" in names
    assert all(c["provenance"] for c in consts["headline"])
    # only the attention families that run on the architecture as themselves
    assert "attn.flash4.efficiency.blackwell" in names
    assert "attn.trtllm-gen.efficiency.blackwell" in names
    assert "attn.flash3.efficiency.blackwell" not in names  # built as FA4 there
    assert "attn.flash4-sm90.efficiency.blackwell" not in names


@pytest.mark.parametrize(("arch", "runs", "not_here"), [
    ("hopper", {"flash3", "flash4-sm90", "fmha-v2-sm90", "xqa", "persistent"},
     {"flash4", "fmha-v2", "flash3-sm8x", "trtllm-gen", "flashinfer-sm100"}),
    ("ampere", {"flash2", "flash3-sm8x", "fmha-v2", "xqa", "resident"},
     {"flash3", "flash4", "flash4-sm90", "fmha-v2-sm90", "trtllm-gen"}),
    ("blackwell", {"flash4", "trtllm-gen", "flashinfer-sm100", "fmha-v2"},
     {"flash3", "flash4-sm90", "fmha-v2-sm90", "flash3-sm8x"}),
])
def test_attention_runs_on(arch: str, runs: set[str], not_here: set[str]) -> None:
    from perfmodel.timing import attention_runs_on

    assert all(attention_runs_on(f, arch) for f in runs)
    assert not any(attention_runs_on(f, arch) for f in not_here)


def test_specs_show_says_which_engines_run_and_with_what(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``specs show`` lists, per engine, the kernels its profile runs on the GPU or why it
    does not run there (text and ``--json``), from the same functions predictions use."""
    from perfmodel.engines import attention_kernel, engine_refusal

    assert main(["specs", "show", "t4"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("\nengines"):].split("\n\n")[0].splitlines()
    trt = next(ln for ln in block if ln.strip().startswith("trtllm"))
    assert "does not run here" in trt
    assert "from Ampere on" in trt
    vllm = next(ln for ln in block if ln.strip().startswith("vllm"))
    assert "prefill triton, decode triton" in vllm
    assert main(["specs", "show", "l40s", "--json"]) == 0
    engines = json.loads(capsys.readouterr().out)["engines"]
    assert set(engines) == {"trtllm", "vllm", "sglang"}
    assert all(e["runs"] for e in engines.values())
    assert engines["vllm"]["attention"]["decode (fp8 KV)"] == \
        attention_kernel("vllm", "ada", "decode", kv_dtype="fp8", group=4.0).impl == "flashinfer"
    assert engines["vllm"]["gemm"]["block"] == "triton"
    assert "nvfp4" not in engines["vllm"]["gemm"]  # no fp4 peak on Ada
    assert "gemm_few_rows" not in engines["vllm"]
    # vLLM's block fp8 on Hopper picks FlashInfer's kernel below 32 rows, DeepGEMM from 32
    assert main(["specs", "show", "h100-sxm", "--json"]) == 0
    hopper = json.loads(capsys.readouterr().out)["engines"]
    assert hopper["vllm"]["gemm"]["block"] == "deepgemm"
    assert hopper["vllm"]["gemm_few_rows"] == {"block": "flashinfer"}
    assert "gemm_few_rows" not in hopper["sglang"]
    # TensorRT-LLM's decode: masked MHA where XQA's blocks x 4 do not reach the 132 SMs
    assert hopper["trtllm"]["attention"]["decode"] == "xqa"
    assert hopper["trtllm"]["decode_few_blocks"] == "mmha"
    assert "decode_few_blocks" not in hopper["vllm"]
    assert main(["specs", "show", "h100-sxm"]) == 0
    text = capsys.readouterr().out
    assert "block flashinfer < 32 rows, deepgemm" in text
    assert "decode xqa (mmha where XQA blocks x 4 < 132 SMs)" in text
    assert main(["specs", "show", "mi210"]) == 0
    amd_text = capsys.readouterr().out
    assert "vllm    attention: prefill flash (native: flash2)" in amd_text
    assert main(["specs", "show", "mi210", "--json"]) == 0
    amd = json.loads(capsys.readouterr().out)["engines"]
    assert not amd["sglang"]["runs"]
    refusal = engine_refusal("sglang", "cdna2")
    assert refusal is not None
    assert amd["sglang"]["why"] == refusal.problem
    assert amd["vllm"]["runs"]
