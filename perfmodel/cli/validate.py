"""``perfmodel validate``: compare predictions with measured kernel times.

Reads measurement CSVs (the schema of :mod:`perfmodel.measurements`), predicts every row
with :func:`perfmodel.validation.validate` and prints, per (spec, source, op, dtype) group,
the absolute percentage error of our model and of the bare roofline, the timing floor used
and the kernel-path rule. Rows that could not be used are summarised by reason, never
dropped silently.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.data import bundled_measurements
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import Measurement, MeasurementSet, read_measurements
from perfmodel.validation import ErrorStats, GroupResult, error_stats, validate

__all__ = ["Combined", "register", "run_validation"]

#: Marker in ``notes`` of rows the data README flags as implausible (faster than peak).
SUSPECT = "SUSPECT"
_SUSPECT_REASON = ("notes say SUSPECT: implied FLOP/s above the device's dense peak (see the "
                   "data README); --include-suspect keeps such rows")

_EPILOG = """examples:
  perfmodel validate --bundled                       the cited subset shipped with perfmodel
  perfmodel validate data/measurements/*.csv         every group, ours vs the bare roofline
  perfmodel validate my_runs.csv --gpu h100-sxm      rows without a spec column
  perfmodel validate --bundled --json                {"overall", "groups", "skipped"}
  perfmodel validate --bundled --markdown            the table as Markdown (for a README)

APE = |predicted - measured| / measured. Each group is keyed by (spec, source, op, dtype);
"bare roofline" is max(FLOPs / peak, minimum bytes / bandwidth) with datasheet numbers.
The timing floor of a row's `timing` code (e.g. the host gap of an eager call) is added to
the kernel prediction. Exit status 0 when at least one row was predicted, 2 otherwise.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel validate`` to the top-level parser."""
    p = subparsers.add_parser(
        "validate", help="compare predictions with measured times (CSV)",
        description="Predict every measured row and report the error per group, with the "
                    "bare roofline as the baseline.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("csv", metavar="CSV", nargs="*", help="measurement CSV files")
    p.add_argument("--bundled", action="store_true",
                   help="also validate the measurement subset bundled with perfmodel")
    p.add_argument("--gpu", metavar="ID|FILE.yaml", default=None,
                   help="device for every row (replaces the spec column)")
    p.add_argument("--include-suspect", action="store_true",
                   help="keep rows whose notes say SUSPECT (skipped by default)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    out.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--verbose", action="store_true", help="list every skipped row")
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------- running
@dataclass(frozen=True)
class Combined:
    """Validation over several files: the groups, the overall figures and the skipped rows
    (each with the file it came from)."""

    overall: ErrorStats
    overall_baseline: ErrorStats
    groups: tuple[GroupResult, ...]
    skipped: tuple[tuple[str, int, str], ...]

    @property
    def mean_group_median(self) -> float:
        medians = [g.ours.median_ape for g in self.groups if g.ours.n]
        return float(np.mean(medians)) if medians else float("nan")

    @property
    def mean_group_median_baseline(self) -> float:
        medians = [g.baseline.median_ape for g in self.groups if g.baseline.n]
        return float(np.mean(medians)) if medians else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": {**self.overall.to_dict(),
                        "mean_group_median_ape": self.mean_group_median,
                        "baseline": {**self.overall_baseline.to_dict(),
                                     "mean_group_median_ape": self.mean_group_median_baseline}},
            "groups": [g.to_dict() for g in self.groups],
            "skipped": [{"file": f, "row": r, "reason": why} for f, r, why in self.skipped],
        }


def _drop_suspect(ms: MeasurementSet) -> tuple[MeasurementSet, list[tuple[int, str]]]:
    kept = tuple(r for r in ms.rows if SUSPECT not in r.notes)
    dropped = [(r.row, _SUSPECT_REASON) for r in ms.rows if SUSPECT in r.notes]
    return replace(ms, rows=kept), dropped


def run_validation(paths: Sequence[str | Path], hw: HardwareSpec | None = None,
                   include_suspect: bool = False) -> Combined:
    """Validate each file and merge the results (groups with one key across files are
    pooled; their statistics are recomputed over all their rows)."""
    rows: list[Measurement] = []
    pred: list[np.ndarray[Any, Any]] = []
    base: list[np.ndarray[Any, Any]] = []
    keys: list[tuple[str, str, str, str]] = []
    infos: dict[tuple[str, str, str, str], list[GroupResult]] = defaultdict(list)
    skipped: list[tuple[str, int, str]] = []
    for path in paths:
        name = str(path)
        ms = read_measurements(path)
        dropped: list[tuple[int, str]] = []
        if not include_suspect:
            ms, dropped = _drop_suspect(ms)
        skipped.extend((name, r, why) for r, why in dropped)
        if not ms.rows:
            skipped.extend((name, r, why) for r, why in ms.skipped)
            continue
        report = validate(ms, hw, include_suspect=include_suspect)
        skipped.extend((name, r, why) for r, why in report.skipped)
        rows.extend(report.rows)
        pred.append(np.asarray(report.predicted_s, dtype=np.float64))
        base.append(np.asarray(report.baseline_s, dtype=np.float64))
        keys.extend((hw.id if hw else r.spec, r.source, r.op, r.dtype) for r in report.rows)
        for g in report.groups:
            infos[(g.spec, g.source, g.op, g.dtype)].append(g)
    predicted = np.concatenate(pred) if pred else np.zeros(0)
    baseline = np.concatenate(base) if base else np.zeros(0)
    measured = np.asarray([r.measured_s for r in rows], dtype=np.float64)
    index: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        index[key].append(i)
    groups: list[GroupResult] = []
    for key in sorted(infos):
        parts = infos[key]
        if len(parts) == 1:
            groups.append(parts[0])
            continue
        idx = np.asarray(index[key])
        paths_union = tuple(sorted({p for g in parts for p in g.paths}))
        groups.append(replace(parts[0], ours=error_stats(predicted[idx], measured[idx]),
                              baseline=error_stats(baseline[idx], measured[idx]),
                              paths=paths_union))
    return Combined(overall=error_stats(predicted, measured),
                    overall_baseline=error_stats(baseline, measured),
                    groups=tuple(groups), skipped=tuple(skipped))


def run(args: argparse.Namespace) -> int:
    """``perfmodel validate CSV ... [--bundled]``."""
    paths: list[str | Path] = list(args.csv)
    if args.bundled:
        paths.extend(bundled_measurements())
    if not paths:
        raise PerfmodelError("CSV", "no measurement file given",
                             "pass CSV files, or --bundled for the subset shipped with perfmodel")
    hw = load_hardware(args.gpu) if args.gpu else None
    result = run_validation(paths, hw, include_suspect=args.include_suspect)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False, default=_json_default))
    elif args.markdown:
        print("\n".join(markdown_lines(result)))
    else:
        print("\n".join(text_lines(result, verbose=args.verbose)))
    if result.overall.n == 0:
        first = result.skipped[0][2] if result.skipped else "no rows"
        raise PerfmodelError("CSV", f"no row could be predicted (first reason: {first})",
                             "check the spec column or pass --gpu")
    return 0


def _json_default(value: object) -> object:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")


# ------------------------------------------------------------------------------ text out
_HEADER = ["SPEC", "SOURCE", "OP", "DTYPE", "N", "OURS MED", "P90", "MAPE", "ROOF MED", "P90",
           "MAPE", "FLOOR µs", "KERNEL PATH"]
_RIGHT = (4, 5, 6, 7, 8, 9, 10, 11)


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x * 100:.1f}%"


def _stats_cells(s: ErrorStats) -> list[str]:
    return [_pct(s.median_ape), _pct(s.p90_ape), _pct(s.mape)]


def _path_text(g: GroupResult) -> str:
    return "; ".join(g.paths)


def _rows(result: Combined) -> list[list[str]]:
    rows = [[g.spec, g.source, g.op, g.dtype, str(g.ours.n), *_stats_cells(g.ours),
             *_stats_cells(g.baseline), f"{g.floor_s * 1e6:g}", _path_text(g)]
            for g in result.groups]
    rows.append(["overall", "", "", "", str(result.overall.n), *_stats_cells(result.overall),
                 *_stats_cells(result.overall_baseline), "", ""])
    rows.append(["mean of group medians", "", "", "", str(len(result.groups)),
                 _pct(result.mean_group_median), "", "",
                 _pct(result.mean_group_median_baseline), "", "", "", ""])
    return rows


def _skip_summary(result: Combined) -> list[tuple[str, int]]:
    counts = Counter(why for _, _, why in result.skipped)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _floor_legend(result: Combined) -> list[str]:
    seen: dict[str, tuple[float, str]] = {}
    for g in result.groups:
        seen.setdefault(g.timing or "(none)", (g.floor_s, g.floor_rule))
    return [f"  {code}: {floor * 1e6:g} µs, {rule}" for code, (floor, rule) in sorted(seen.items())]


def text_lines(result: Combined, verbose: bool = False) -> list[str]:
    """The validation table, the floors used and the skipped-row summary, as text."""
    rows = _rows(result)
    widths = [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in _RIGHT else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = ["APE per group: ours (median, p90, mean) vs the bare roofline (ROOF); "
           "fractions of the measured time", "", line(_HEADER)]
    out.extend(line(r) for r in rows[:-2])
    out.append(line(["-" * w for w in widths]))
    out.extend(line(r) for r in rows[-2:])
    legend = _floor_legend(result)
    if legend:
        out += ["", "timing floors added to the kernel prediction:", *legend]
    out += ["", f"skipped rows: {len(result.skipped)}"]
    for why, count in _skip_summary(result):
        out.append(f"  {count:>6}  {why}")
    if verbose:
        out.extend(f"  {f}:{r}: {why}" for f, r, why in result.skipped)
    elif result.skipped:
        out.append("  (--verbose lists each row)")
    return out


def markdown_lines(result: Combined) -> list[str]:
    """The validation table as Markdown, plus the skipped-row summary."""
    def md(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    header = ["spec", "source", "op", "dtype", "n", "ours median", "ours p90", "ours MAPE",
              "roofline median", "roofline p90", "roofline MAPE", "floor µs", "kernel path"]
    align = ["---" if i not in _RIGHT else "---:" for i in range(len(header))]
    rows = _rows(result)
    rows[-2][0] = "**overall**"
    rows[-1][0] = "**mean of group medians**"
    out = [md(header), "|" + "|".join(align) + "|", *(md(r) for r in rows)]
    summary = _skip_summary(result)
    if summary:
        out += ["", f"Skipped rows: {len(result.skipped)}", ""]
        out.extend(f"- {count} × {why}" for why, count in summary)
    return out
