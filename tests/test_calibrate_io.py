"""Calibration input and output: bad CSVs give an error naming the problem, a CSV of another
device is refused, the spec file is never modified, and the calibrated profile loads with
load_hardware and changes predictions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.data import check_device, read_rows
from perfmodel.calibrate.fit import apply_params
from perfmodel.calibrate.run import done_cases
from perfmodel.calibrate.suite import design_suite
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import bundled_path
from perfmodel.measurements import BASE_COLUMNS, write_measurements

TRUE = {"gemm/bf16": {"compute_fraction": 0.6, "memory_fraction": 0.7, "overhead_s": 6e-6},
        "stream/bf16": {"memory_fraction": 0.8, "overhead_s": 3e-6}}


def _good_csv(path: Path, spec: str = "h100-sxm", n_fill: int = 10) -> Path:
    """A small measurement CSV made by the model with known parameters (no noise)."""
    hw = apply_params(pm.load_hardware("h100-sxm"), TRUE)
    cases = [c for c in design_suite("cuda", 132, fill=n_fill) if c.op != "attention"]
    from perfmodel.calibrate.data import dataset_from_rows

    t = dataset_from_rows([c.as_row() for c in cases]).predict(hw)
    rows = []
    for c, s in zip(cases, t, strict=False):
        row = c.csv_row()
        row.update({"spec": spec, "source": "test", "measured_us": f"{s * 1e6:.6g}",
                    "notes": f"case={c.id}"})
        rows.append(row)
    write_measurements(path, rows, append=False)
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- bad input
HEADER = ",".join(BASE_COLUMNS)
GEMM = "h100-sxm,test,H100,gemm,torch.matmul,bf16,1,512,512,512,,,,,,,,,{t},,,"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty"),
        ("a,b,c\n1,2,3\n", "wrong schema: missing column(s) op, dtype, measured_us"),
        (HEADER + "\n" + GEMM.format(t="0") + "\n", "must be a positive time"),
        (HEADER + "\n" + GEMM.format(t="-3.5") + "\n", "must be a positive time"),
        (HEADER + "\n" + GEMM.format(t="fast") + "\n", "is not a number"),
        (HEADER + "\n" + GEMM.format(t="12.5") + "\n" + "h100-sxm,test,H100,gemm,torch\n",
         "fewer fields than the header (truncated line)"),
        (HEADER + "\n" + GEMM.format(t="12.5") + ",extra,fields\n",
         "more fields than the header (corrupt line)"),
        (HEADER + "\nh100-sxm,test,H100,conv2d,x,bf16,1,1,1,1,,,,,,,,,3,,,\n",
         "unknown op 'conv2d'"),
    ],
)
def test_bad_csv_is_a_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "m.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PerfmodelError) as info:
        read_rows(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    with pytest.raises(PerfmodelError, match="corrupt or binary"):
        read_rows(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PerfmodelError, match="file not found"):
        read_rows(tmp_path / "nope.csv")


def test_fit_cli_reports_bad_csv_on_stderr(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "\n" + GEMM.format(t="0") + "\n", encoding="utf-8")
    code, out, err = _run(["calibrate", "fit", str(path), "--gpu", "h100-sxm",
                           "--out", str(tmp_path / "c.yaml")], capsys)
    assert code == 2
    assert "line 2" in err
    assert "positive time" in err
    assert out == ""
    assert not (tmp_path / "c.yaml").exists()


def test_other_gpu_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _good_csv(tmp_path / "a100.csv", spec="a100-80gb-sxm", n_fill=0)
    rows, _ = read_rows(path)
    with pytest.raises(PerfmodelError, match="measured on another device: a100-80gb-sxm"):
        check_device(rows, pm.load_hardware("h100-sxm"))
    code, _, err = _run(["calibrate", "fit", str(path), "--gpu", "h100-sxm",
                         "--out", str(tmp_path / "c.yaml")], capsys)
    assert code == 2
    assert "another device" in err
    assert "--allow-other-gpu" in err
    assert not (tmp_path / "c.yaml").exists()


# ----------------------------------------------------------------------------- output
def test_fit_writes_a_profile_and_never_touches_the_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "h100-sxm.yaml"
    shutil.copyfile(bundled_path("h100-sxm"), spec)
    before = spec.read_bytes()
    bundled_before = bundled_path("h100-sxm").read_bytes()
    csv = _good_csv(tmp_path / "m.csv")
    out = tmp_path / "cal.yaml"
    code, stdout, err = _run(["calibrate", "fit", str(csv), "--gpu", str(spec), "--out",
                              str(out), "--residual", "off", "--prior", "0.01", "--folds", "3",
                              "--json"], capsys)
    assert code == 0, err
    assert spec.read_bytes() == before
    assert bundled_path("h100-sxm").read_bytes() == bundled_before
    payload = json.loads(stdout)
    assert payload["params"]["gemm/bf16"]["compute_fraction"] == pytest.approx(0.6, rel=0.03)

    hw = pm.load_hardware(out)
    cal = hw.calibration
    assert cal is not None
    assert cal.device == "h100-sxm"
    assert cal.points == payload["points"] > 20
    assert cal.date
    assert cal.environment["base_spec"] == str(spec)
    assert len(cal.environment["base_spec_sha256"]) == 64
    assert cal.environment["measurements"] == str(csv)
    assert cal.error_after["all.median_ape"] < cal.error_before["all.median_ape"]
    assert "heldout.all.median_ape" in cal.error_after
    # calibrated predictions differ from the spec's and match the known parameters
    op = pm.Gemm(m=8192, n=8192, k=8192, dtype="bf16")
    truth = pm.predict(op, apply_params(pm.load_hardware("h100-sxm"), TRUE)).latency_s
    assert pm.predict(op, hw).latency_s == pytest.approx(truth, rel=0.03)
    assert pm.predict(op, "h100-sxm").latency_s != pytest.approx(truth, rel=0.03)


def test_fit_refuses_to_overwrite_the_spec(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "h100-sxm.yaml"
    shutil.copyfile(bundled_path("h100-sxm"), spec)
    before = spec.read_bytes()
    csv = _good_csv(tmp_path / "m.csv", n_fill=0)
    code, _, err = _run(["calibrate", "fit", str(csv), "--gpu", str(spec), "--out", str(spec),
                         "--residual", "off", "--prior", "0.1", "--folds", "0"], capsys)
    assert code == 2
    assert "is the input file" in err
    assert spec.read_bytes() == before
    other = bundled_path("a100-80gb-sxm")
    other_before = other.read_bytes()
    code, _, err = _run(["calibrate", "fit", str(csv), "--gpu", "h100-sxm", "--out",
                         str(other), "--residual", "off", "--prior", "0.1", "--folds", "0"],
                        capsys)
    assert code == 2
    assert "bundled specs folder" in err
    assert other.read_bytes() == other_before


def test_calibrated_profile_validates_with_residuals(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    csv = _good_csv(tmp_path / "m.csv")
    out = tmp_path / "cal.yaml"
    code, _, err = _run(["calibrate", "fit", str(csv), "--gpu", "h100-sxm", "--out", str(out),
                         "--residual", "on", "--prior", "0.1", "--folds", "0"], capsys)
    assert code == 0, err
    hw = pm.load_hardware(out)
    assert hw.calibration is not None
    assert hw.calibration.residuals
    code, _out_text, err = _run(["specs", "validate", str(out)], capsys)
    assert code == 0, err
    # the profile can be validated against the same CSV with `perfmodel calibrate report`
    code, text, err = _run(["calibrate", "report", str(csv), "--gpu", str(out), "--folds", "3",
                            "--json"], capsys)
    assert code == 0, err
    report = json.loads(text)
    overall = next(g for g in report["groups"] if g["family"] == "all")
    assert overall["after_heldout"]["median_ape"] < overall["before"]["median_ape"]


def test_resume_drops_a_cut_last_line(tmp_path: Path) -> None:
    csv = _good_csv(tmp_path / "m.csv", n_fill=0)
    text = csv.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    csv.write_text("".join(lines[:-1]) + lines[-1][:25], encoding="utf-8")  # cut mid-line
    done = done_cases(csv)
    assert len(done) == len(lines) - 2
    assert csv.read_text(encoding="utf-8").endswith("\n")
    rows, _ = read_rows(csv)
    assert len(rows) == len(lines) - 2


def test_repeated_cases_keep_the_fastest(tmp_path: Path) -> None:
    csv = _good_csv(tmp_path / "m.csv", n_fill=0)
    rows, _ = read_rows(csv)
    first = rows[0]
    line = csv.read_text(encoding="utf-8").splitlines()[1]
    slower = line.replace(f",{first.measured_s * 1e6:.6g},", f",{first.measured_s * 2e6:.6g},")
    faster = line.replace(f",{first.measured_s * 1e6:.6g},", f",{first.measured_s * 5e5:.6g},")
    with csv.open("a", encoding="utf-8") as fh:
        fh.write(slower + "\n" + faster + "\n")
    again, _ = read_rows(csv)
    assert len(again) == len(rows)
    assert again[0].measured_s == pytest.approx(first.measured_s / 2, rel=1e-4)
    assert np.isfinite([r.measured_s for r in again]).all()


def test_xla_default_f32_is_fitted_as_fp32_where_there_is_no_tf32(tmp_path: Path) -> None:
    """MI355X (CDNA4) has no TF32: XLA's default f32 runs full fp32 there, as in validate;
    the same label on B200 (which has TF32), or without the XLA note, keeps its dtype."""
    from perfmodel.calibrate.data import as_run_on

    line = "{spec},xla_ptable,X,gemm,XLA dot,tf32,1,256,256,256,,,,,,,,,6.6,,,{notes}"
    text = "\n".join([HEADER,
                      line.format(spec="mi355x", notes="source dtype=f32_xla_default"),
                      line.format(spec="mi355x", notes=""),
                      line.format(spec="b200", notes="source dtype=f32_xla_default")]) + "\n"
    path = tmp_path / "x.csv"
    path.write_text(text)
    rows, _ = read_rows(path)
    mi355x, rules = as_run_on(rows[:2], pm.load_hardware("mi355x"))
    assert [r.dtype for r in mi355x] == ["fp32", "tf32"]
    assert mi355x[0].static[1] == "fp32"
    assert rules == ["XLA default f32 on a device without TF32 -> fp32"]
    b200, rules = as_run_on(rows[2:], pm.load_hardware("b200"))
    assert [r.dtype for r in b200] == ["tf32"]
    assert rules == []


def test_skipped_lines_are_named_by_their_physical_line(tmp_path: Path) -> None:
    # blank lines (which the CSV reader skips) used to shift every later line number
    from perfmodel.measurements import read_measurements

    f = tmp_path / "m.csv"
    f.write_text("spec,op,dtype,m,n,k,measured_us\n"
                 "h100-sxm,gemm,bf16,64,64,64,5\n\n\n"
                 "h100-sxm,gemm,bf16,64,64,64,oops\n")
    got = read_measurements(f)
    assert [line for line, _ in got.skipped] == [5]


def test_append_starts_a_new_line_and_follows_the_files_header(tmp_path: Path) -> None:
    from perfmodel.measurements import read_measurements

    f = tmp_path / "m.csv"
    # a hand-written file: its own column order, no final newline
    f.write_text("measured_us,op,dtype,spec,m,n,k\n5,gemm,bf16,h100-sxm,64,64,64")
    write_measurements(f, [{"spec": "h100-sxm", "op": "gemm", "dtype": "bf16", "m": 128,
                            "n": 64, "k": 64, "measured_us": 7}])
    got = read_measurements(f, strict=True)
    assert [(r.m, round(r.measured_s * 1e6, 9)) for r in got.rows] == [(64, 5.0), (128, 7.0)]
    other = tmp_path / "notes.csv"
    other.write_text("name,value\na,1\n")
    with pytest.raises(PerfmodelError, match="not a measurement CSV"):
        write_measurements(other, [{"op": "gemm", "measured_us": 1}])


def test_fit_finds_the_run_spec_next_to_a_moved_csv(tmp_path: Path) -> None:
    # the run recorded an absolute spec path; the folder was moved since. The fit used to
    # fall back silently to the CSV's spec column (the bundled placeholder) instead of the
    # spec the run measured, which lies next to the CSV
    import json

    from perfmodel.cli.calibrate import _resolve_spec

    run = tmp_path / "moved"
    run.mkdir()
    (run / "m.csv").write_text("spec,op,dtype,m,n,k,measured_us\n"
                               "cpu-local,gemm,fp32,64,64,64,50\n")
    (run / "m.my-cpu.yaml").write_text("extends: cpu-local\nid: my-cpu\nname: measured\n")
    (run / "m.csv.env.json").write_text(json.dumps(
        {"spec_path": "/home/someone/runs/m.my-cpu.yaml"}))
    hw, path = _resolve_spec(run / "m.csv", None, [])
    assert hw.id == "my-cpu"
    assert path == run / "m.my-cpu.yaml"
    (run / "m.my-cpu.yaml").unlink()
    with pytest.raises(PerfmodelError, match="is gone"):
        _resolve_spec(run / "m.csv", None, [])


def test_fit_warns_of_parameters_at_a_bound_or_faster_than_the_spec() -> None:
    from types import SimpleNamespace

    from perfmodel.calibrate.fit import _BOUNDS
    from perfmodel.cli.calibrate import _param_cautions

    hi = _BOUNDS["memory_fraction"][1]
    keys = [SimpleNamespace(key="stream/fp32", n=40, params={"memory_fraction": hi}),
            SimpleNamespace(key="gemm/fp32", n=90, params={"compute_fraction": 1.08}),
            SimpleNamespace(key="attention/fp32", n=0, params={"compute_fraction": 0.7}),
            SimpleNamespace(key="gemm/bf16", n=50, params={"compute_fraction": 0.8})]
    got = _param_cautions(keys)
    assert len(got) == 3
    assert "stream/fp32: memory_fraction" in got[0]
    assert "bound" in got[0]
    assert "above 1" in got[1]
    assert "no rows" in got[2]


def test_fit_refuses_to_overwrite_the_spec_the_run_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `calibrate run` writes the measured spec beside its CSV; a fit given another --gpu
    # and that file as --out overwrote it
    import json

    run = tmp_path / "run"
    run.mkdir()
    (run / "m.csv").write_text("spec,op,dtype,m,n,k,measured_us\n" + "".join(
        f"cpu-local,gemm,fp32,{s},{s},{s},{s ** 3 / 2e4:.3f}\n" for s in (64, 128, 256, 512)))
    measured = run / "m.cpu-local.yaml"
    measured.write_text("extends: cpu-local\nid: my-cpu\nname: measured\n")
    (run / "m.csv.env.json").write_text(json.dumps({"spec_path": str(measured)}))
    before = measured.read_text()
    code = main(["calibrate", "fit", str(run / "m.csv"), "--gpu", "cpu-local", "--out",
                 str(measured)])
    assert code != 0
    assert "is the input file" in capsys.readouterr().err
    assert measured.read_text() == before


@pytest.mark.parametrize(("gpu", "path", "dtype"), [
    ("t4", "mem-efficient", "fp16"), ("v100-sxm2-32gb", "mem-efficient", "fp16"),
    ("a100-80gb-sxm", "flash2", "bf16")])
def test_the_cuda_suite_times_the_fused_kernel_the_gpu_has(gpu: str, path: str,
                                                            dtype: str) -> None:
    """Before Ampere PyTorch has no FlashAttention-2 backend (it needs SM80) and no bf16
    tensor cores: the CUDA suite times its memory-efficient SDPA backend in fp16 there, and
    its rows are predicted as that kernel (it asked for the FLASH_ATTENTION backend in
    bf16, which cannot run on a T4 or V100, and labelled the rows flash2, refused there)."""
    from perfmodel.calibrate.data import dataset_from_rows

    hw = pm.load_hardware(gpu)
    cases = design_suite("cuda", hw.compute.units, fill=20, arch=hw.arch)
    fused = [c for c in cases if c.op == "attention" and not c.impl.startswith("math")]
    assert fused
    assert all(c.impl.startswith(path) for c in fused)
    assert {c.dtype for c in cases} == {dtype}
    rows = [c.as_row(measured_s=1e-3) for c in fused[:12]]
    assert {r.static[3] for r in rows} == {path}  # the kernel path the rows are predicted on
    predicted = dataset_from_rows(rows).predict(hw)
    assert np.all(np.isfinite(predicted))
    assert np.all(predicted > 0)


def test_run_refuses_a_dtype_the_spec_has_no_peak_for(tmp_path: Path) -> None:
    """``calibrate run --dtype bf16`` on a GPU whose spec has no bf16 peak stops before
    measuring: its rows could not be predicted."""
    from perfmodel.calibrate.run import run_suite

    pytest.importorskip("torch")
    with pytest.raises(PerfmodelError, match="no bf16 peak"):
        run_suite("cpu", tmp_path / "m.csv", 5.0, gpu="v100-sxm2-32gb", dtypes=["bf16"],
                  quiet=True)
