"""CPU harness smoke test: a real (small-budget) run with torch on this machine writes
schema rows and a sidecar, resumes, and its CSV fits and reports through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.calibrate.data import read_rows
from perfmodel.cli.main import main
from perfmodel.measurements import COLUMNS

torch = pytest.importorskip("torch")


def test_import_does_not_load_torch() -> None:
    code = ("import sys, perfmodel.calibrate, perfmodel.calibrate.run, perfmodel.calibrate.fit, "
            "perfmodel.calibrate.report, perfmodel.calibrate.kernels, perfmodel.cli.calibrate; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real CPU run (about 12 s) shared by the tests below."""
    d = tmp_path_factory.mktemp("cpu")
    code = main(["calibrate", "run", "--device", "cpu", "--budget", "12s", "--threads", "1",
                 "--out", str(d / "m.csv"), "--quiet"])
    assert code == 0
    return d


def test_run_writes_schema_rows_and_sidecar(run_dir: Path) -> None:
    csv = run_dir / "m.csv"
    header = csv.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert tuple(header) == COLUMNS
    rows, skipped = read_rows(csv)
    assert not skipped
    assert len(rows) >= 30
    assert {r.op for r in rows} >= {"gemm", "attention", "copy"}
    assert {r.spec for r in rows} == {"cpu-local"}
    assert all(r.measured_s > 0 and r.case for r in rows)
    env = json.loads((run_dir / "m.csv.env.json").read_text(encoding="utf-8"))
    assert env["torch"] == torch.__version__
    assert env["threads"] == "1"
    assert env["device_kind"] == "cpu"
    assert env["device"]
    spec = pm.load_hardware(env["spec_path"])
    assert spec.arch == "cpu"
    assert spec.compute.units == 1
    assert spec.peaks["fp32"].peak > 1e9  # a real matmul rate
    assert spec.memory.bandwidth > 1e9


def test_resume_skips_measured_cases(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = run_dir / "m.csv"
    before = {r.case for r in read_rows(csv)[0]}
    code = main(["calibrate", "run", "--device", "cpu", "--budget", "4s", "--threads", "1",
                 "--out", str(csv), "--quiet", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["already_done"] == len(before)
    after = {r.case for r in read_rows(csv)[0]}
    assert before <= after
    # a different thread count cannot be mixed into the same file
    code = main(["calibrate", "run", "--device", "cpu", "--budget", "2s", "--threads", "2",
                 "--out", str(csv), "--quiet"])
    assert code == 2
    assert "threads" in capsys.readouterr().err


def test_fit_and_report_on_the_run(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = run_dir / "m.csv"
    cal = run_dir / "cal.yaml"
    code = main(["calibrate", "fit", str(csv), "--out", str(cal), "--folds", "3", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    fitted = json.loads(captured.out)
    # each family is calibrated: by fitted parameters, or (when cross-validation keeps the
    # spec's parameters) by residual tables
    tables = [k.split("#")[0].split("/") for k in fitted["residual_tables"]]
    covered = set(fitted["params"]) | {f"{t[0]}/{t[-1]}" for t in tables}
    assert {"gemm/fp32", "stream/fp32"} <= covered
    assert fitted["error_after"]["all.median_ape"] < fitted["error_before"]["all.median_ape"]
    hw = pm.load_hardware(cal)
    assert hw.calibration is not None
    assert hw.calibration.environment["device_kind"] == "cpu"
    code = main(["calibrate", "report", str(csv), "--gpu", str(cal), "--folds", "3",
                 "--plot", str(run_dir / "scatter.png")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "gemm/fp32" in captured.out
    assert "before med" in captured.out
    assert (run_dir / "scatter.png").stat().st_size > 1000


def test_run_says_how_many_cases_were_planned_and_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the run chose N cases within the budget's estimate and, with time left, measured more
    # of the rest; its summary said "measured M" after announcing N, with no word of why
    code = main(["calibrate", "run", "--device", "cpu", "--budget", "3s", "--threads", "1",
                 "--out", str(tmp_path / "m.csv"), "--json"])
    assert code == 0
    out = capsys.readouterr().out
    d = json.loads(out[out.index("{"):])
    assert d["planned"] > 0
    assert d["measured"] >= 1
    assert d["left_out_by_budget"] >= 0
