"""The bounds behind the bad-input corpus, each checked where it is enforced: YAML alias
expansion and depth, sweep ranges, residual tables and fit rows thinned by their stated
rules, the dense ceiling's chunking, capacities printed as vendors print them, the CLI's
last line of defence, and predictions from several threads at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_SWEEP_POINTS, check_count, check_whole, clip_message
from perfmodel._units import format_capacity
from perfmodel.calibrate import public
from perfmodel.calibrate.data import Row, dataset_from_rows, thin_rows
from perfmodel.calibrate.fit import gp_table, shape_table, thin_points
from perfmodel.cli import main as cli_main
from perfmodel.hardware._yaml import MAX_DEPTH, YamlLimitError, load_bounded
from perfmodel.sweeps import parse_values


# ---------------------------------------------------------------------------------- YAML
def test_bounded_yaml_refuses_nested_aliases_fast() -> None:
    # 12 levels of 10 aliases: 10^12 values once expanded; refused from ~60 nodes
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    start = time.perf_counter()
    with pytest.raises(YamlLimitError, match="aliases"):
        load_bounded("\n".join(lines), yaml.SafeLoader)
    assert time.perf_counter() - start < 1.0


def test_bounded_yaml_keeps_ordinary_aliases_and_merges() -> None:
    text = "base: &b {x: 1, y: [1, 2]}\nchild:\n  <<: *b\n  y: [3]\nother: *b\n"
    assert load_bounded(text, yaml.SafeLoader) == {
        "base": {"x": 1, "y": [1, 2]}, "child": {"x": 1, "y": [3]},
        "other": {"x": 1, "y": [1, 2]}}


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [1, *a]}\n"])
def test_bounded_yaml_refuses_an_alias_inside_itself(text: str) -> None:
    with pytest.raises(YamlLimitError, match="inside"):
        load_bounded(text, yaml.SafeLoader)


def test_bounded_yaml_depth() -> None:
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # the mapping is a level too
    assert load_bounded(ok, yaml.SafeLoader) is not None
    with pytest.raises(YamlLimitError, match="levels deep"):
        load_bounded("a: " + "[" * 100_000 + "]" * 100_000, yaml.SafeLoader)


# ---------------------------------------------------------------------------------- sweeps
def test_sweep_range_never_passes_its_stop() -> None:
    # 128 + 7 × 512 = 3712; the next step, 4224, is past 4096
    assert parse_values("128:4096:512").tolist() == [128 + 512 * i for i in range(8)]
    assert parse_values("128:4096:128")[-1] == 4096  # a step lands on the stop: included
    assert len(parse_values("128:32768:128")) == 256
    assert parse_values("1:10:3").tolist() == [1, 4, 7, 10]


def test_sweep_point_cap() -> None:
    assert len(parse_values(f"1:{MAX_SWEEP_POINTS}:1")) == MAX_SWEEP_POINTS
    with pytest.raises(pm.PerfmodelError, match="MAX_SWEEP_POINTS"):
        parse_values(f"1:{MAX_SWEEP_POINTS + 1}:1")
    with pytest.raises(pm.PerfmodelError, match="MAX_SWEEP_POINTS"):
        parse_values("1:100", points=MAX_SWEEP_POINTS + 1)


# ---------------------------------------------------------------------------------- fitting
def test_thin_points_merges_repeated_shapes_then_keeps_evenly_spaced_ones() -> None:
    rng = np.random.default_rng(0)
    shapes = rng.integers(0, 10**6, size=(2000, 3)).astype(float)
    x = np.repeat(shapes, 2, axis=0)  # every shape measured twice
    e = np.tile([0.1, 0.3], 2000)      # its two errors average to 0.2
    xs, es = thin_points(x, e, cap=500)
    assert xs.shape == (500, 3)
    np.testing.assert_allclose(es, 0.2)
    ordered = np.unique(shapes, axis=0)
    np.testing.assert_array_equal(xs[0], ordered[0])     # first and last of the sorted
    np.testing.assert_array_equal(xs[-1], ordered[-1])   # shapes are kept
    xs2, _ = thin_points(x[:100], e[:100], cap=500)
    assert xs2.shape == (100, 3)  # at or under the cap: unchanged


def test_kernel_tables_stay_bounded_on_many_points() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 14, size=(5000, 3))
    e = rng.normal(0, 0.1, size=5000)
    start = time.perf_counter()
    for table in (shape_table(x, e), gp_table(x, e)):
        assert len(table) - 1 <= 600  # a header row, then at most MAX_TABLE_POINTS
    assert time.perf_counter() - start < 60


def _gemm_rows(n: int) -> list[Row]:
    """``n`` GEMM rows of distinct shapes with times spread over 1-2x of 10 µs."""
    rng = np.random.default_rng(2)
    return [Row(line=i + 2, op="gemm", dtype="bf16", measured_s=float(rng.uniform(1e-5, 2e-5)),
                static=("gemm", "bf16", False, ""), sizes=(float(i + 1), 64.0, 64.0, 1.0))
            for i in range(n)]


def test_thin_rows_keeps_a_stated_share() -> None:
    rows = _gemm_rows(1000)
    kept, note = thin_rows(rows, cap=100)
    assert len(kept) == 100
    assert "100 of 1,000 rows" in note
    assert kept[0] is rows[0]    # sorted by shape: the smallest m and
    assert kept[-1] is rows[-1]  # the largest are kept
    assert thin_rows(rows[:50], cap=100) == (rows[:50], "")


def test_dense_ceiling_predicts_a_subset_when_shapes_are_many(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = dataset_from_rows(_gemm_rows(300))
    full = public.dense_ceiling(data, data.measured_s * 1.1)
    monkeypatch.setattr(public, "_CEILING_QUERIES", 50)
    monkeypatch.setattr(public, "_CEILING_CELLS", 1000)  # chunks of a few queries
    part = public.dense_ceiling(data, data.measured_s * 1.1)
    assert all(np.isfinite(full))
    assert all(np.isfinite(part))
    assert part[0] == pytest.approx(full[0], rel=0.5)  # a sample of the same distribution


# ---------------------------------------------------------------------------------- text
def test_format_capacity_as_vendors_print_it() -> None:
    # 80 GiB = 85,899,345,920 B; 141 GiB = 151,397,597,184 B
    assert format_capacity(80 * 2**30, "HBM3") == "80 GB HBM3 (85.9 × 10⁹ B)"
    assert format_capacity(141 * 2**30) == "141 GB (151.4 × 10⁹ B)"
    assert format_capacity(150e9) == "139.7 GiB (150.0 × 10⁹ B)"  # not whole GiB
    assert format_capacity(512 * 2**20) == "512 MB (536.9 × 10⁶ B)"


def test_clip_message_and_check_count() -> None:
    assert clip_message("a\nb   c") == "a b c"
    assert clip_message("x" * 1000, 10) == "x" * 10 + "… (990 more characters)"
    assert check_count("12", "n", 100) == 12.0
    for bad, text in ((0, "≥ 1"), (1.5, "whole"), (float("nan"), "finite"), (101, "cap"),
                      ("x", "number")):
        with pytest.raises(pm.PerfmodelError, match=text):
            check_count(bad, "n", 100)


# ---------------------------------------------------------------------------------- CLI
def test_cli_internal_error_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def boom(args: object) -> int:
        raise RuntimeError("a bug\nspanning lines")
    monkeypatch.setattr("perfmodel.cli.specs.run_list", boom)
    monkeypatch.delenv("PERFMODEL_TRACEBACK", raising=False)
    assert cli_main.main(["specs", "list"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "internal error" in err
    assert "RuntimeError: a bug spanning lines" in err
    monkeypatch.setenv("PERFMODEL_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli_main.main(["specs", "list"])


def test_cli_os_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(args: object) -> int:
        raise PermissionError(13, "Permission denied", str(tmp_path / "x.csv"))
    monkeypatch.setattr("perfmodel.cli.specs.run_list", denied)
    assert cli_main.main(["specs", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "x.csv: Permission denied" in err


# ---------------------------------------------------------------------------------- threads
def test_predictions_from_many_threads_match_one_thread() -> None:
    hw = pm.load_hardware("h100-sxm")
    ops = [pm.Gemm(m=2**i, n=4096, k=4096, dtype="bf16") for i in range(12)] + [
        pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=2**i, head_dim=128, causal=True)
        for i in range(12)]
    expected = [float(pm.predict(op, hw).latency_s) for op in ops]
    results: dict[int, list[float]] = {}

    def work(t: int) -> None:
        spec = pm.load_hardware("h100-sxm")  # the bundled cache, shared by all threads
        results[t] = [float(pm.predict(op, spec).latency_s) for op in ops]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(r == expected for r in results.values())


# ------------------------------------------------------------------------ whole counts
@pytest.mark.parametrize("good", [1, 7, np.int64(3), np.int32(1)])
def test_check_whole_takes_integers_of_any_integer_type(good: object) -> None:
    assert check_whole(good, "pp", "e.g. --pp 2") == good
    assert type(check_whole(good, "pp", "e.g. --pp 2")) is int


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, 1.5, "3", None, np.float64(2.0)])
def test_check_whole_refuses_the_rest_naming_the_field(bad: object) -> None:
    with pytest.raises(PerfmodelError, match=r"replicas.*whole number ≥ 1"):
        check_whole(bad, "replicas", "e.g. --replicas 2")
