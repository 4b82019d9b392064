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
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.data import bundled_measurements
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import MeasurementSet, read_measurements
from perfmodel.timing.constants import Constants
from perfmodel.validation import (
    ErrorStats,
    GroupResult,
    Prepared,
    concat,
    error_stats,
    group_results,
    in_sample,
    prepare,
    validate,
)

__all__ = ["Combined", "GpuOutOfSample", "leave_out_lines", "prepare_files", "register",
           "run_leave_gpu_out", "run_validation", "variant"]

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
  perfmodel validate aic/*.csv --leave-gpu-out       per GPU, refitted without its rows

APE = |predicted - measured| / measured. Each group is keyed by (spec, source, op, dtype,
variant: phase, KV dtype, quantization scheme, kernel); FIT says whether constants its
predictions use were fitted on its source's rows (in) or not (out);
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
                   help="keep rows whose notes say SUSPECT and rows measured faster than the "
                        "datasheet bandwidth or dense peak allows (skipped by default)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    out.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--verbose", action="store_true",
                   help="list every skipped row (with --leave-gpu-out: every group)")
    p.add_argument("--leave-gpu-out", metavar="ID,...", nargs="?", const="", default=None,
                   help="refit the model constants without each GPU's rows in turn (or "
                        "the listed GPUs) and report that GPU's error with the refit: "
                        "the figure for a GPU nobody measured (takes minutes per GPU)")
    p.add_argument("--cache", metavar="DIR", type=Path, default=None,
                   help="with --leave-gpu-out: keep each refit in DIR/without-<gpu>.json and "
                        "reuse it when the rows are the same (the folder "
                        "scripts/calibration_transfer.py uses: build/transfer_cache)")
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
    in_sample: tuple[bool, ...] = ()
    """Per group: a constant its predictions use was fitted on its source's rows."""

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
            "groups": [{**g.to_dict(), "in_sample": bool(ins)}
                       for g, ins in zip(self.groups, self._flags(), strict=True)],
            "skipped": [{"file": f, "row": r, "reason": why} for f, r, why in self.skipped],
        }

    def _flags(self) -> tuple[bool, ...]:
        return self.in_sample or (False,) * len(self.groups)


def _drop_suspect(ms: MeasurementSet) -> tuple[MeasurementSet, list[tuple[int, str]]]:
    kept = tuple(r for r in ms.rows if SUSPECT not in r.notes)
    dropped = [(r.row, _SUSPECT_REASON) for r in ms.rows if SUSPECT in r.notes]
    return replace(ms, rows=kept), dropped


def prepare_files(paths: Sequence[str | Path], hw: HardwareSpec | None = None,
                  include_suspect: bool = False
                  ) -> tuple[Prepared, list[tuple[str, int, str]]]:
    """Read and prepare every file as one set; the skipped rows with their file."""
    parts: list[Prepared] = []
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
        prep = prepare(ms, hw, include_suspect=include_suspect)
        skipped.extend((name, r, why) for r, why in prep.skipped)
        parts.append(replace(prep, skipped=()))
    return concat(parts), skipped


def run_validation(paths: Sequence[str | Path], hw: HardwareSpec | None = None,
                   include_suspect: bool = False,
                   constants: Constants | None = None) -> Combined:
    """Validate the files together: one group per (spec, source, op, phase, dtype, kv
    dtype, scheme, kernel) over all files, each marked in-sample when a constant its
    predictions use was fitted on its source."""
    prep, skipped = prepare_files(paths, hw, include_suspect)
    report = validate(prep, constants=constants)
    return Combined(overall=report.overall, overall_baseline=report.overall_baseline,
                    groups=report.groups, skipped=tuple(skipped),
                    in_sample=tuple(in_sample(g, constants) for g in report.groups))


@dataclass(frozen=True)
class GpuOutOfSample:
    """Leave-one-GPU-out result for one device: errors with the bundled constants (fitted
    on every GPU, its own included) and with constants refitted without its rows."""

    spec: str
    bundled: ErrorStats
    left_out: ErrorStats
    groups: tuple[tuple[GroupResult, GroupResult], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "in_sample": self.bundled.to_dict(),
                "out_of_sample": self.left_out.to_dict(),
                "groups": [{**o.to_dict(), "in_sample_median_ape": i.ours.median_ape,
                            "in_sample_p90_ape": i.ours.p90_ape} for i, o in self.groups]}


def run_leave_gpu_out(paths: Sequence[str | Path], devices: Sequence[str] | None = None,
                      include_suspect: bool = False,
                      progress: Callable[[str], None] | None = None,
                      cache: Path | None = None) -> list[GpuOutOfSample]:
    """For each device of the rows (or ``devices``): refit the model constants from their
    priors on every other device's rows (:func:`perfmodel.calibrate.constants.fit_public`)
    and predict its rows with the result, beside the bundled constants' predictions.
    With ``cache`` (a folder), each refit is read from / written to
    ``cache/without-<device>.json``, the files ``scripts/calibration_transfer.py`` reads
    and writes for the same refits (:func:`perfmodel.calibrate.transfer_eval.
    leave_out_constants`)."""
    from perfmodel.calibrate.constants import leave_one_out
    from perfmodel.calibrate.transfer_eval import leave_out_constants

    prep, _ = prepare_files(paths, None, include_suspect)
    bundled = validate(prep)
    out = []
    specs = np.asarray(prep.spec_ids)
    chosen = list(devices) if devices else sorted(set(prep.spec_ids))
    unknown = sorted(set(chosen) - set(prep.spec_ids))
    if unknown:
        raise PerfmodelError("--leave-gpu-out", f"no rows of {', '.join(unknown)} in the files",
                             f"pick among {', '.join(sorted(set(prep.spec_ids)))}")
    if cache is None:
        refits = {dev: pred for dev, (_, pred) in leave_one_out(prep, chosen, progress).items()}
    else:
        if include_suspect:
            raise PerfmodelError("--cache", "cached refits skip SUSPECT rows, as the "
                                 "transfer script's do", "drop --include-suspect or --cache")
        # every row, as the transfer script passes them (the refit skips SUSPECT ones)
        records = [m for path in paths for m in read_measurements(path).rows]
        refits = {}
        for dev in chosen:
            if progress:
                progress(f"leaving out {dev}")
            fitted = leave_out_constants(records, dev, cache / f"without-{dev}.json",
                                         progress)
            refits[dev] = prep.subset(specs == dev).predict(fitted)
    for dev, pred in refits.items():
        held = specs == dev
        sub = prep.subset(held)
        rep = validate(sub, constants=None)  # bundled constants, this device's rows
        measured = sub.measured_s
        paths_of: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for g in rep.groups:
            paths_of[g.key] = set(g.paths)
        logo = group_results(sub.rows, sub.spec_ids, pred, rep.baseline_s, paths_of)
        pairs = tuple(zip(rep.groups, logo, strict=True))
        out.append(GpuOutOfSample(dev, error_stats(bundled.predicted_s[held], measured),
                                  error_stats(pred, measured), pairs))
    return out


def run(args: argparse.Namespace) -> int:
    """``perfmodel validate CSV ... [--bundled]``."""
    paths: list[str | Path] = list(args.csv)
    if args.bundled:
        paths.extend(bundled_measurements())
    if not paths:
        raise PerfmodelError("CSV", "no measurement file given",
                             "pass CSV files, or --bundled for the subset shipped with perfmodel")
    hw = load_hardware(args.gpu) if args.gpu else None
    if args.leave_gpu_out is not None:
        if hw is not None:
            raise PerfmodelError("--leave-gpu-out", "cannot be combined with --gpu",
                                 "drop --gpu: each row is predicted on its own spec")
        results = run_leave_gpu_out(
            paths, [d for d in args.leave_gpu_out.split(",") if d.strip()],
            args.include_suspect,
            progress=None if args.json else lambda msg: print(msg, file=sys.stderr),
            cache=args.cache)
        if args.json:
            print(json.dumps({"leave_gpu_out": [r.to_dict() for r in results]}, indent=2,
                             allow_nan=False, default=_json_default))
        else:
            print("\n".join(leave_out_lines(results, markdown=args.markdown,
                                            verbose=args.verbose)))
        return 0
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
_HEADER = ["SPEC", "SOURCE", "OP", "DTYPE", "VARIANT", "FIT", "N", "OURS MED", "P90", "MAPE",
           "ROOF MED", "P90", "MAPE", "FLOOR µs", "KERNEL PATH"]
_RIGHT = (6, 7, 8, 9, 10, 11, 12, 13)


def variant(g: GroupResult) -> str:
    """What besides (spec, source, op, dtype) keys the group: phase, KV dtype, scheme,
    kernel."""
    parts = []
    if g.op == "attention" and g.phase:
        parts.append(g.phase)
    if g.kv_dtype and g.kv_dtype != g.dtype:
        parts.append(f"kv={g.kv_dtype}")
    if g.quant and g.quant != "none":
        parts.append(g.quant)
    if g.kernel:
        parts.append(g.kernel)
    return " ".join(parts)


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x * 100:.1f}%"


def _stats_cells(s: ErrorStats) -> list[str]:
    return [_pct(s.median_ape), _pct(s.p90_ape), _pct(s.mape)]


def _path_text(g: GroupResult) -> str:
    return "; ".join(g.paths)


def _rows(result: Combined) -> list[list[str]]:
    rows = [[g.spec, g.source, g.op, g.dtype, variant(g), "in" if ins else "out",
             str(g.ours.n), *_stats_cells(g.ours), *_stats_cells(g.baseline),
             f"{g.floor_s * 1e6:g}", _path_text(g)]
            for g, ins in zip(result.groups, result._flags(), strict=True)]
    rows.append(["overall", "", "", "", "", "", str(result.overall.n),
                 *_stats_cells(result.overall), *_stats_cells(result.overall_baseline), "",
                 ""])
    rows.append(["mean of group medians", "", "", "", "", "", str(len(result.groups)),
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

    header = ["spec", "source", "op", "dtype", "variant", "fit", "n", "ours median",
              "ours p90", "ours MAPE", "roofline median", "roofline p90", "roofline MAPE",
              "floor µs", "kernel path"]
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


def leave_out_lines(results: Sequence[GpuOutOfSample], markdown: bool = False,
                    verbose: bool = False) -> list[str]:
    """Per GPU: error with the bundled constants (in-sample) and refitted without it."""
    head = ["GPU", "N", "IN-SAMPLE MED", "P90", "LEFT OUT MED", "P90"]
    rows = [[r.spec, str(r.left_out.n), _pct(r.bundled.median_ape), _pct(r.bundled.p90_ape),
             _pct(r.left_out.median_ape), _pct(r.left_out.p90_ape)] for r in results]
    if verbose:
        head = [*head, "GROUP"]
        rows = [[*row, ""] for row in rows]
        for r in results:
            for i, o in r.groups:
                rows.append(["", str(o.ours.n), _pct(i.ours.median_ape), _pct(i.ours.p90_ape),
                             _pct(o.ours.median_ape), _pct(o.ours.p90_ape), o.label])
    if markdown:
        def md(cells: list[str]) -> str:
            return "| " + " | ".join(cells) + " |"
        align = ["---"] + ["---:"] * 5 + (["---"] if verbose else [])
        return [md([h.lower() for h in head]), "|" + "|".join(align) + "|",
                *(md(r) for r in rows)]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["Leave one GPU out: the model constants refitted without the GPU's rows "
            "(APE, fractions of the measured time)", "",
            *("  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
              for r in [head, *rows])]
