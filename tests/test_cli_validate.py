"""``perfmodel validate``, in-process, and the bundled measurement subset."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from perfmodel.cli.main import main
from perfmodel.data import bundled_measurements, measurements_dir
from perfmodel.measurements import BASE_COLUMNS

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data" / "measurements"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _bundled_rows() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in bundled_measurements():
        with path.open(newline="", encoding="utf-8") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


# ------------------------------------------------------------------------- bundled data
def test_bundled_files_exist_with_the_schema_and_a_readme() -> None:
    paths = bundled_measurements()
    assert {p.name for p in paths} == {
        "aic_engine_kernels.csv", "llmcompass_gemm.csv", "neusight_fp32_gemm.csv",
        "vidur_attention_a100.csv", "vidur_gemm.csv", "xla_matmul_perf_table.csv"}
    for path in paths:
        with path.open(newline="", encoding="utf-8") as fh:
            assert next(csv.reader(fh)) == list(BASE_COLUMNS)
    readme = (measurements_dir() / "README.md").read_text(encoding="utf-8")
    for path in paths:
        assert f"`{path.name}`" in readme
    assert "Excluded" in readme
    assert "benchmark_flash_attention" in readme
    assert (measurements_dir() / "LICENSES.md").is_file()
    assert sum(p.stat().st_size for p in paths) < 1_000_000


def test_bundled_groups_are_small() -> None:
    from perfmodel.data._subset import AIC_PER_GROUP

    counts: dict[tuple[str, ...], int] = {}
    aic: dict[tuple[str, ...], int] = {}
    for row in _bundled_rows():
        if row["source"].startswith("aic_"):  # a kernel group: what the engine ran
            key = (row["spec"], row["source"], row["op"], row["phase"], row["dtype"],
                   row["n"] if row["op"] == "allreduce" else "",
                   *sorted(f for f in row["notes"].split(";")
                           if f.split("=")[0] in ("attn", "kv", "q", "ks")))
            aic[key] = aic.get(key, 0) + 1
            continue
        key = (row["spec"], row["source"], row["op"], row["dtype"])
        counts[key] = counts.get(key, 0) + 1
    assert max(counts.values()) <= 100
    assert max(aic.values()) <= AIC_PER_GROUP
    assert len(aic) > 100  # every kernel group of the four GPUs is there
    assert "a30" not in {k[0] for k in counts}  # the unlicensed A30 source is not shipped


@pytest.mark.skipif(not SHARED.is_dir(), reason="the full measurement set is not beside the repo")
def test_bundled_subset_is_reproducible(tmp_path: Path) -> None:
    from perfmodel.data._subset import AIC_FILE, SOURCE_FILES, subset_aic, subset_file

    for name in SOURCE_FILES:
        subset_file(SHARED / name, tmp_path / name)
        assert (tmp_path / name).read_bytes() == (measurements_dir() / name).read_bytes()
    subset_aic(SHARED / "aic", tmp_path / AIC_FILE)
    assert (tmp_path / AIC_FILE).read_bytes() == (measurements_dir() / AIC_FILE).read_bytes()


# ----------------------------------------------------------------------------- validate
def test_validate_bundled_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["validate", "--bundled", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"overall", "groups", "skipped"}
    for stats in (data["overall"], *data["groups"]):
        for key in ("n", "median_ape", "p90_ape", "mape"):
            assert key in stats
        assert 0 <= stats["median_ape"] <= stats["p90_ape"]
        assert stats["baseline"]["n"] == stats["n"]
    n_rows = len(_bundled_rows())
    assert data["overall"]["n"] + len(data["skipped"]) == n_rows
    assert sum(g["n"] for g in data["groups"]) == data["overall"]["n"]
    group = data["groups"][0]
    for key in ("spec", "source", "op", "dtype", "floor_us", "kernel_paths"):
        assert key in group
    # rows flagged SUSPECT in the data are skipped by default, with that reason
    suspect = [r for r in _bundled_rows() if "SUSPECT" in r["notes"]]
    assert suspect
    assert sum("SUSPECT" in s["reason"] for s in data["skipped"]) == len(suspect)
    for s in data["skipped"]:
        assert {"file", "row", "reason"} <= set(s)


def test_include_suspect_keeps_them(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["validate", "--bundled", "--json"], capsys)
    _, out2, _ = run(["validate", "--bundled", "--json", "--include-suspect"], capsys)
    plain, kept = json.loads(out), json.loads(out2)
    assert not any("SUSPECT" in s["reason"] for s in kept["skipped"])
    n_suspect = sum("SUSPECT" in s["reason"] for s in plain["skipped"])
    assert n_suspect > 0
    assert kept["overall"]["n"] + len(kept["skipped"]) == \
        plain["overall"]["n"] + len(plain["skipped"])


def test_validate_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["validate", "--bundled"], capsys)
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("SPEC"))
    for col in ("SOURCE", "OP", "DTYPE", "N", "OURS MED", "P90", "MAPE", "ROOF MED",
                "FLOOR µs", "KERNEL PATH"):
        assert col in header
    assert any(line.startswith("overall") for line in lines)
    assert any(line.startswith("mean of group medians") for line in lines)
    assert any(line.startswith("h100-sxm") and "vidur" in line for line in lines)
    assert "skipped rows:" in out
    assert "timing floors" in out


def test_validate_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["validate", "--bundled", "--markdown"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("| spec | source | op | dtype | variant | fit | n |")
    assert set(lines[1]) <= set("|-:")
    assert any(line.startswith("| **overall** |") for line in lines)


def test_validate_csv_with_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a 4096^3 bf16 GEMM measured at 200 us, and a row that cannot be read
    path = tmp_path / "mine.csv"
    path.write_text("op,dtype,measured_us,m,n,k\n"
                    "gemm,bf16,200,4096,4096,4096\n"
                    "gemm,bf16,-3,4096,4096,4096\n", encoding="utf-8")
    code, out, err = run(["validate", str(path), "--gpu", "h100-sxm", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["overall"]["n"] == 1
    assert len(data["groups"]) == 1
    assert data["groups"][0]["spec"] == "h100-sxm"
    assert len(data["skipped"]) == 1
    assert data["skipped"][0]["row"] == 3
    assert "measured_us" in data["skipped"][0]["reason"]


def test_rows_without_spec_and_no_gpu_exit_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nospec.csv"
    path.write_text("op,dtype,measured_us,m,n,k\ngemm,bf16,10,128,128,128\n", encoding="utf-8")
    code, _, err = run(["validate", str(path)], capsys)
    assert code == 2
    assert "no row could be predicted" in err


@pytest.mark.parametrize(
    "content",
    ["", "a,b\n1,2\n", "op,dtype,measured_us\nconv,bf16,1\n"],
)
def test_bad_csv_exits_2(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    code, out, err = run(["validate", str(path)], capsys)
    assert code == 2
    assert out == ""
    assert str(path) in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_and_no_file_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", "/no/such/file.csv"], capsys)
    assert code == 2
    assert "file not found" in err
    code, _, err = run(["validate"], capsys)
    assert code == 2
    assert "--bundled" in err


# ------------------------------------------------------------------- leave one GPU out
def test_leave_gpu_out_cache_is_written_once_and_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With --cache, each refit without a GPU is stored as cache/without-<gpu>.json (the
    transfer script's file) and a second run reads it instead of refitting. The refit is a
    stub here (the real one takes minutes): it records the rows it was given."""
    import perfmodel.calibrate.constants as fitting
    from perfmodel.timing.constants import Constants

    seen: list[set[str]] = []

    def fake_fit(prep: object, source: str = "", progress: object = None) -> Constants:
        seen.append(set(prep.spec_ids))  # type: ignore[attr-defined]
        return Constants({"l2_capacity_fraction": 0.5}, {"l2_capacity_fraction": source})

    monkeypatch.setattr(fitting, "fit_public", fake_fit)
    src = next(p for p in bundled_measurements() if p.name == "llmcompass_gemm.csv")
    with src.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    specs = sorted({r["spec"] for r in rows})
    assert len(specs) >= 2
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cache = tmp_path / "cache"
    argv = ["validate", str(data), "--leave-gpu-out", "--cache", str(cache), "--json"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    # one refit per GPU, each on every other GPU's rows only
    assert seen == [set(specs) - {s} for s in specs]
    assert sorted(p.name for p in cache.iterdir()) == [f"without-{s}.json" for s in specs]
    first = json.loads(out)["leave_gpu_out"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert len(seen) == len(specs)  # read back, not refitted
    assert json.loads(out)["leave_gpu_out"] == first
    code, _, err = run([*argv, "--include-suspect"], capsys)
    assert code != 0
    assert "--cache" in err
    assert "SUSPECT" in err


def test_every_bundled_timing_code_is_known() -> None:
    from perfmodel.validation import TIMING_FLOORS

    codes = {row["timing"] for row in _bundled_rows()}
    assert "nccl_tests_out_of_place_avg" in codes  # the all-reduce rows are shipped
    assert codes <= set(TIMING_FLOORS), codes - set(TIMING_FLOORS)
