"""Calibration on public-style measurement groups: fit-row choice, held-out split, the
dense ceiling, and the ``perfmodel calibrate public`` command, on synthetic groups whose
truth is known (made by the model with changed parameters, or with planted errors)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.calibrate.data import Row, dataset_from_rows
from perfmodel.calibrate.fit import apply_params
from perfmodel.calibrate.public import dense_ceiling, evaluate_group, pick_fit_shapes
from perfmodel.cli.main import main
from perfmodel.measurements import write_measurements

SPEC = "h100-sxm"
STATIC = ("gemm", "bf16", False, "test_kernel_time")
SIZES = (256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0)


def _rows(times: np.ndarray | None = None) -> list[Row]:
    shapes = list(itertools.product(SIZES, SIZES, SIZES))
    t = np.ones(len(shapes)) if times is None else times
    return [Row(line=i + 2, op="gemm", dtype="bf16", measured_s=float(t[i]), static=STATIC,
                sizes=(m, n, k, 1.0), spec=SPEC, source="synthetic", timing=STATIC[-1])
            for i, (m, n, k) in enumerate(shapes)]


def _truth(hw: pm.HardwareSpec) -> np.ndarray:
    data = dataset_from_rows(_rows(), weight=np.ones(len(SIZES) ** 3))
    return np.asarray(data.predict(hw))


def _log2_shape(rows: list[Row]) -> np.ndarray:
    coords: np.ndarray = np.log2(np.asarray([r.sizes[:3] for r in rows]))
    return coords


def test_pick_fit_shapes_spans_the_times_one_row_per_shape() -> None:
    hw = pm.load_hardware(SPEC)
    rows = _rows(_truth(hw))
    rows = rows + rows[:20]  # repeated shapes must not be picked twice
    data = dataset_from_rows(rows, weight=np.ones(len(rows)))
    picks = pick_fit_shapes(data, 30)
    assert len(picks) == 30
    assert len({rows[i].shape_key for i in picks}) == 30
    t = data.measured_s
    assert t[picks].min() == t.min()
    assert t[picks].max() == t.max()


def test_dense_ceiling_sees_smooth_errors_and_not_noise() -> None:
    hw = pm.load_hardware(SPEC)
    base = _truth(hw)
    x = _log2_shape(_rows())
    smooth = base * np.exp(0.05 * (x[:, 0] - 10.0))  # a slow drift with m
    data = dataset_from_rows(_rows(smooth), weight=np.ones(len(smooth)))
    med, p90 = dense_ceiling(data, base)
    assert med < 0.03
    assert p90 < 0.06
    rng = np.random.default_rng(3)
    noisy = base * np.exp(rng.choice([-0.4, 0.4], size=len(base)))  # ±40 % at random
    data = dataset_from_rows(_rows(noisy), weight=np.ones(len(noisy)))
    med, p90 = dense_ceiling(data, base)
    assert med > 0.25


def test_evaluate_group_recovers_changed_parameters_on_held_out_shapes() -> None:
    hw = pm.load_hardware(SPEC)
    true = apply_params(hw, {"gemm/bf16": {"compute_fraction": 0.55, "overhead_s": 9e-6}})
    rng = np.random.default_rng(0)
    t = _truth(true) * np.exp(rng.normal(0.0, 0.01, len(SIZES) ** 3))
    ev = evaluate_group(_rows(t), max_fit_rows=30, residual="off", params="basic")
    assert ev.n_fit == 30
    assert ev.n_test == len(t) - 30
    assert ev.before_median > 0.15  # the spec's defaults are far off this device
    assert ev.after_median < 0.03
    assert ev.after_p90 < 0.06
    assert ev.meets()


def test_public_command_prints_groups_and_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hw = pm.load_hardware(SPEC)
    true = apply_params(hw, {"gemm/bf16": {"compute_fraction": 0.6}})
    t = _truth(true)
    out = []
    for r, s in zip(_rows(), t, strict=True):
        m, n, k, _ = (int(v) for v in r.sizes)
        out.append({"spec": SPEC, "source": "synthetic", "gpu": "H100", "op": "gemm",
                    "impl": "test", "dtype": "bf16", "batch": "1", "m": str(m), "n": str(n),
                    "k": str(k), "measured_us": f"{s * 1e6:.6g}", "timing": STATIC[-1]})
    out.append({**out[0], "measured_us": "0.001", "notes": "SUSPECT: above the dense peak"})
    write_measurements(tmp_path / "g.csv", out, append=False)
    code = main(["calibrate", "public", str(tmp_path), "--max-fit-rows", "20",
                 "--residual", "off"])
    text = capsys.readouterr().out
    assert code == 0
    assert "h100-sxm/synthetic/gemm/bf16" in text
    assert "ceiling med" in text
    assert "1 of 1 groups after calibration" in text
    assert "1 row(s) whose notes say SUSPECT" in text


def test_public_json_is_strict_json_without_a_ceiling(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A group too small for a dense ceiling reports it as null, not NaN."""
    rows = _rows(_truth(pm.load_hardware(SPEC)))[:5]
    ev = evaluate_group(rows, max_fit_rows=3, residual="off", params="basic")
    assert ev.to_dict()["ceiling_median"] is None
    assert json.loads(json.dumps(ev.to_dict(), allow_nan=False))["n_fit"] == 3



# ----------------------------------------------------------------------------- fit budget
def _engine_csv(path: Path, times: np.ndarray | None = None, n: int = 120) -> list[dict[str, str]]:
    """A group as an engine ran it: TRT-LLM fp8 per-tensor GEMMs on H100, replayed from a
    CUDA graph (the timing and labels of AIConfigurator's database)."""
    rng = np.random.default_rng(5)
    shapes = sorted({(int(2 ** rng.uniform(0, 13)), int(2 ** rng.integers(8, 15)),
                      int(2 ** rng.integers(8, 15))) for _ in range(n)})
    t = np.full(len(shapes), 1e-5) if times is None else times
    rows = [{"spec": SPEC, "source": "aic_trtllm_test", "gpu": "h100_sxm", "op": "gemm",
             "impl": "TRT-LLM GEMM", "dtype": "fp8", "batch": "1", "m": str(m), "n": str(nn),
             "k": str(k), "measured_us": f"{s * 1e6:.6g}", "timing": "aic_cuda_graph_replay_mean",
             "notes": "q=fp8;ks=torch_flow"}
            for (m, nn, k), s in zip(shapes, t, strict=False)]
    write_measurements(path, rows, append=False)
    return rows


def test_calibration_rows_map_to_ops_as_validate_maps_them(tmp_path: Path) -> None:
    """One row -> op mapping: the engine's kernel, the graph floor and L2 state of the
    timing method, exactly as ``perfmodel validate`` predicts the same rows."""
    from perfmodel.calibrate.data import read_rows
    from perfmodel.validation import validate

    _engine_csv(tmp_path / "e.csv")
    rows, _ = read_rows(tmp_path / "e.csv")
    ours = dataset_from_rows(rows).predict(pm.load_hardware(SPEC))
    # the placeholder times (10 µs each) are too fast for the largest shapes: keep them
    report = validate(tmp_path / "e.csv", include_suspect=True)
    by_line = dict(zip((r.row for r in report.rows), report.predicted_s, strict=True))
    assert np.array_equal(ours, np.asarray([by_line[r.line] for r in rows]))
    assert {r.group_key[-2:] for r in rows} == {("per-tensor", "torch_flow")}


def test_design_picks_span_the_shapes_and_ignore_the_times() -> None:
    from perfmodel.calibrate.public import design_fit_shapes

    hw = pm.load_hardware(SPEC)
    rows = _rows(_truth(hw))
    data = dataset_from_rows(rows, weight=np.ones(len(rows)))
    picks = design_fit_shapes(data, 40)
    assert len(picks) == 40
    assert len({rows[i].shape_key for i in picks}) == 40
    corners = {r.sizes[:3] for r in rows if all(v in (SIZES[0], SIZES[-1]) for v in r.sizes[:3])}
    assert corners <= {rows[i].sizes[:3] for i in picks}  # the maximin design takes corners
    shuffled = dataset_from_rows(_rows(np.random.default_rng(1).permutation(_truth(hw))),
                                 weight=np.ones(len(rows)))
    assert design_fit_shapes(shuffled, 40) == picks  # measured times play no part
    assert sorted(design_fit_shapes(data, 10_000)) == list(range(len(rows)))


def test_budget_target_rule() -> None:
    from perfmodel.calibrate.public import GroupEval, meets_budget_target

    def ev(after: tuple[float, float], ceiling: tuple[float, float]) -> GroupEval:
        return GroupEval(spec=SPEC, source="s", op="gemm", dtype="bf16", n=10, n_fit=5,
                         n_test=5, before_median=0.2, before_p90=0.5, after_median=after[0],
                         after_p90=after[1], ceiling_median=ceiling[0], ceiling_p90=ceiling[1])

    assert meets_budget_target(ev((0.039, 0.119), (0.01, 0.05)))
    assert not meets_budget_target(ev((0.041, 0.10), (0.03, 0.05)))  # ceiling under 4 %
    assert meets_budget_target(ev((0.062, 0.10), (0.05, 0.05)))      # 1.25 × 5 % = 6.25 %
    assert not meets_budget_target(ev((0.063, 0.10), (0.05, 0.05)))
    assert meets_budget_target(ev((0.03, 0.24), (0.02, 0.20)))       # 1.25 × 20 % = 25 %
    assert not meets_budget_target(ev((0.03, 0.26), (0.02, 0.20)))
    assert not meets_budget_target(ev((float("nan"), 0.1), (0.02, 0.1)))


def test_parts_fit_on_a_designed_budget_recovers_an_engine_group(tmp_path: Path) -> None:
    """Rows made by the model with the TRT-LLM fp8 GEMM family 30 % slower than the bundled
    constants and a larger bookkeeping kernel: fitted on half the shapes (design), the
    held-out half is predicted within a few percent."""
    from perfmodel.calibrate.data import read_rows
    from perfmodel.calibrate.public import evaluate_group, meets_budget_target
    from perfmodel.timing.constants import bundled_constants

    _engine_csv(tmp_path / "e.csv")
    rows, _ = read_rows(tmp_path / "e.csv")
    base = bundled_constants()
    name = "gemm.cublas.per-tensor.efficiency"
    call = "call.trtllm.gemm-per-tensor.cublas_s.hopper"
    truth = apply_params(pm.load_hardware(SPEC), {},
                         constants={name: base[name] * 0.7, call: base[call] + 4e-6})
    t = dataset_from_rows(rows).predict(truth)
    _engine_csv(tmp_path / "e.csv", t)
    rows, _ = read_rows(tmp_path / "e.csv")
    ev = evaluate_group(rows, 300, residual="off", pick="design", method="parts")
    assert ev.label == f"{SPEC}/aic_trtllm_test/gemm/fp8/q=per-tensor/torch_flow"
    assert ev.n_fit == len(rows) // 2
    assert ev.before_median > 0.1
    assert ev.after_median < 0.01
    assert ev.after_p90 < 0.03
    assert meets_budget_target(ev)


def test_public_budget_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hw = pm.load_hardware(SPEC)
    from perfmodel.calibrate.data import read_rows

    _engine_csv(tmp_path / "e.csv")
    rows, _ = read_rows(tmp_path / "e.csv")
    _engine_csv(tmp_path / "e.csv", dataset_from_rows(rows).predict(hw) * 1.05)
    code = main(["calibrate", "public", str(tmp_path), "--max-fit-rows", "300", "--pick",
                 "design", "--fit", "parts", "--residual", "off"])
    text = capsys.readouterr().out
    assert code == 0
    assert "target met" in text
    assert "1 of 1 groups" in text
    code = main(["calibrate", "public", str(tmp_path), "--max-fit-rows", "300", "--pick",
                 "design", "--fit", "parts", "--residual", "off", "--markdown"])
    text = capsys.readouterr().out
    assert code == 0
    assert text.startswith("| group | test | n | fit | held out |")
    assert "/q=per-tensor/torch_flow | shapes |" in text
    assert "Target met (held-out median ≤ 4% and p90 ≤ 12%" in text
    assert ": 1 of 1 groups" in text
    code = main(["calibrate", "public", str(tmp_path), "--pick", "best"])
    assert code == 2
    assert "--pick" in capsys.readouterr().err


def test_public_evaluation_leaves_out_rows_faster_than_the_datasheet(tmp_path: Path) -> None:
    """Rows no device could have run so fast (validate skips them) are not fitted either:
    the engine group's 10 µs placeholder is too fast for its largest shapes: more fp8 bytes
    beyond the 50 MiB L2 than 3.35 TB/s moves, or more FLOPs than 1978.9 TFLOP/s runs."""
    from perfmodel.calibrate.data import read_rows
    from perfmodel.calibrate.public import evaluate_public
    from perfmodel.validation import implausible

    _engine_csv(tmp_path / "e.csv")
    rows, _ = read_rows(tmp_path / "e.csv")
    too_fast = implausible([r.measurement() for r in rows])
    assert 0 < len(too_fast) < len(rows)
    for i, r in enumerate(rows):  # by hand: fp8 operands, bf16 output, 2mnk FLOPs
        m, n, k = r.sizes[:3]
        over = (m * k + k * n + 2 * m * n - 50 * 2**20 > 3.35e12 * 1.02 * 1e-5
                or 2 * m * n * k > 1978.9e12 * 1.02 * 1e-5)
        assert (i in too_fast) == over
    evals, skipped = evaluate_public([tmp_path / "e.csv"], min_rows=10, max_fit_rows=20,
                                     extrapolation=False, residual=False, params="basic")
    assert any(f"{len(too_fast)} row(s) measured faster than the datasheet" in why
               for _, why in skipped)
    assert sum(e.n for e in evals) == len(rows) - len(too_fast)


def test_groups_below_min_rows_are_listed_not_dropped(tmp_path: Path) -> None:
    # a group with fewer rows than --min-rows was left out of the tables without a word
    from perfmodel.calibrate.public import evaluate_public

    _engine_csv(tmp_path / "e.csv")
    evals, skipped = evaluate_public([tmp_path / "e.csv"], min_rows=10**6, max_fit_rows=20,
                                     extrapolation=False, residual=False, params="basic")
    assert evals == []
    assert any("fewer than --min-rows 1000000" in why for _, why in skipped)
