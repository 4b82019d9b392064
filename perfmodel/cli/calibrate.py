"""``perfmodel calibrate``: measure real kernels, fit the timing model to them, report the
error on shapes the fit never saw.

    perfmodel calibrate run --device cpu --budget 90s --out m.csv
    perfmodel calibrate fit m.csv --out calibrated.yaml          # --gpu ID|FILE.yaml
    perfmodel calibrate report m.csv --gpu calibrated.yaml --plot scatter.png
    perfmodel calibrate cpu-spec --out cpu-local.yaml
    perfmodel calibrate public DIR_OR_CSV ... --max-fit-rows 30
    perfmodel calibrate transfer h100.cal.yaml --to b200 --out b200.cal.yaml

torch is needed by ``run`` and ``cpu-spec`` only (imported when they start).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.cli._paths import check_output, check_plot_target, plot_path

__all__ = ["parse_budget", "register"]

_EPILOG = """examples:
  perfmodel calibrate run --device cpu --budget 90s --out m.csv
  perfmodel calibrate fit m.csv --out calibrated.yaml
  perfmodel calibrate report m.csv --gpu calibrated.yaml --plot scatter.png
  perfmodel calibrate run --device cuda --budget 5m --out h200.csv
  perfmodel calibrate fit h200.csv --gpu h200-sxm --out h200-calibrated.yaml
  perfmodel calibrate public shared/data/measurements --max-fit-rows 30
  perfmodel calibrate transfer h100-calibrated.yaml --to b200 --out b200-transferred.yaml

The whole loop on a machine without a GPU (about 2 minutes):
  perfmodel calibrate run --device cpu --budget 90s --out m.csv && \\
  perfmodel calibrate fit m.csv --out cal.yaml && perfmodel calibrate report m.csv --gpu cal.yaml
"""


def parse_budget(text: str) -> float:
    """'5m', '90s', '1h', '2.5m' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|sec|m|min|h)?\s*", str(text).lower())
    if not m:
        raise PerfmodelError("--budget", f"cannot read {text!r} as a duration",
                             "write e.g. 90s, 5m or 1h")
    value = float(m.group(1)) * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600,
                                 None: 1}[m.group(2)]
    if value <= 0:
        raise PerfmodelError("--budget", f"must be positive, got {text!r}", "e.g. --budget 5m")
    return value


def _residual(text: str) -> str | None:
    """--residual: auto (None: chosen by cross-validation), off, scale, size (or on), shape,
    gp."""
    from perfmodel.calibrate.fit import residual_mode

    key = text.strip().lower()
    if key in ("auto", ""):
        return None
    try:
        return residual_mode(key)
    except PerfmodelError:
        raise PerfmodelError("--residual", f"unknown value {text!r}",
                             "use auto, off, scale, size (or on), shape or gp") from None


def _prior(text: str) -> float | None:
    if text.strip().lower() == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise PerfmodelError("--prior", f"{text!r} is not a number", "use auto or e.g. 0.1") \
            from None
    if math.isnan(value) or value < 0:  # inf: keep the spec's parameters
        raise PerfmodelError("--prior", f"must be ≥ 0, got {text!r}", "use auto or e.g. 0.1")
    return value


def _int_in(text: str, low: int, high: int, what: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text[:60]!r}") from None
    if not math.isfinite(value) or value != int(value) or not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high:,}, got "
                                         f"{text[:60]!r}")
    return int(value)


def _folds(text: str) -> int:
    return _int_in(text, 2, 100, "a number of folds")


def _fit_folds(text: str) -> int:
    return 0 if text.strip() == "0" else _folds(text)


def _threads(text: str) -> int:
    return _int_in(text, 1, 4096, "a number of threads")


def _rows(text: str) -> int:
    return _int_in(text, 1, 10**9, "a number of rows")


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; name the file to write")
    return text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel calibrate {run,fit,report,cpu-spec,public}``."""
    cal = subparsers.add_parser(
        "calibrate", help="measure kernels with torch, fit the model, report the error",
        description="Measure real kernels, fit a few physical parameters per op family and "
                    "dtype, and report the error on held-out shapes.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cal.set_defaults(func=lambda _a: _help(cal))
    sub = cal.add_subparsers(dest="calibrate_command", metavar="SUBCOMMAND")

    p = sub.add_parser("run", help="time the designed suite on a device",
                       description="Time the microbenchmark suite (GEMM, attention, copies, "
                       "norms, elementwise) and append rows to a CSV; resumes by default.")
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--budget", default="5m", help="wall-time budget, e.g. 90s, 5m (default 5m)")
    p.add_argument("--out", required=True, type=_nonempty, help="measurement CSV to append to")
    p.add_argument("--gpu", help="spec id or YAML of the device (default: from the device "
                   "name; on cpu, measured on the spot)")
    p.add_argument("--threads", type=_threads, help="CPU threads for torch (fixed for the run)")
    p.add_argument("--dtype", action="append", dest="dtypes",
                   help="dtype(s) to measure (default bf16 on cuda, fp32 on cpu)")
    p.add_argument("--no-resume", action="store_true",
                   help="refuse an existing --out instead of continuing it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run_cmd)

    p = sub.add_parser("fit", help="fit parameters to a measurement CSV",
                       description="Fit the timing model's parameters per op family and dtype "
                       "(robust least squares on log latency) and write a calibrated profile: "
                       "the spec plus a calibration block. The spec file is never modified.")
    p.add_argument("csv", help="measurement CSV (shared schema)")
    p.add_argument("--gpu", help="spec id or YAML (default: the spec recorded by "
                   "'calibrate run', or the CSV's spec column)")
    p.add_argument("--out", required=True, type=_nonempty,
                   help="calibrated profile to write (YAML; never the CSV or the spec read)")
    p.add_argument("--residual", default="auto", help="residual correction: auto (chosen by "
                   "cross-validation), off, scale (one constant per key), size (1-D over "
                   "log size), shape (kernel regression over log shape) or gp (kernel ridge "
                   "over log shape)")
    p.add_argument("--prior", default="auto", help="weight pulling parameters toward the "
                   "spec's defaults: auto (cross-validated) or a number (inf: keep the defaults)")
    p.add_argument("--folds", type=_fit_folds, default=5, help="folds of the held-out error "
                   "recorded in the profile (0: skip; else 2 to 100)")
    p.add_argument("--allow-other-gpu", action="store_true",
                   help="fit even if the CSV's spec column names another device")
    p.add_argument("--fit", dest="method", choices=("auto", "parts"), default="auto",
                   help="auto (parameters per op family and dtype, prior and residual chosen "
                   "by cross-validation; the default) or parts (device figures on the plain "
                   "GEMM and streaming rows, then the model constants of the kernel families "
                   "the rows run, then a residual: what 'calibrate transfer' carries best)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=fit_cmd)

    p = sub.add_parser("report", help="before vs after, on held-out shapes",
                       description="Error before and after calibration by op family and "
                       "bottleneck regime; 'after' is leave-shape-out k-fold cross-validated.")
    p.add_argument("csv", help="measurement CSV")
    p.add_argument("--gpu", help="spec id, YAML, or the calibrated profile (its recorded fit "
                   "options are reused)")
    p.add_argument("--folds", type=_folds, default=5, help="cross-validation folds, 2 to 100 "
                   "(default 5)")
    p.add_argument("--residual", default=None, help="auto, off, scale, size, shape or gp "
                   "(default: as fitted)")
    p.add_argument("--prior", default=None, help="auto or a number (default: as fitted)")
    p.add_argument("--plot", type=plot_path,
                   help="write a predicted-vs-measured scatter plot (.png, .svg or .pdf)")
    p.add_argument("--allow-other-gpu", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=report_cmd)

    p = sub.add_parser("cpu-spec", help="measure this CPU and write a spec",
                       description="Peak fp32 rate from a large matmul, bandwidth from a large "
                       "copy, fixed cost from a tiny op: a spec of this machine.")
    p.add_argument("--out", required=True, type=_nonempty, help="YAML to write")
    p.add_argument("--threads", type=_threads)
    p.add_argument("--quick", action="store_true", help="smaller problems (about 1 s)")
    p.add_argument("--id", default="cpu-local", help="spec id (default cpu-local)")
    p.set_defaults(func=cpu_spec_cmd)

    p = sub.add_parser("public", help="fit-on-few, test-on-rest over public measurements",
                       description="For each (spec, source, op, dtype) group with enough "
                       "rows: fit on a few shapes, report the error on all the others; "
                       "attention also fitted at S ≤ 4k and tested at 8k–32k.")
    p.add_argument("paths", nargs="+", help="CSV files or folders of CSVs")
    p.add_argument("--max-fit-rows", type=_rows, default=30,
                   help="shapes fitted per group (default 30)")
    p.add_argument("--min-rows", type=_rows, default=100,
                   help="rows a group needs to be evaluated (default 100)")
    p.add_argument("--residual", default="auto", help="auto, off, scale, size, shape or gp")
    p.add_argument("--include-suspect", action="store_true",
                   help="keep rows whose notes say SUSPECT (left out by default)")
    p.add_argument("--pick", choices=("time", "design"), default="time",
                   help="how fit rows are chosen: time (evenly spaced in measured time, the "
                   "default) or design (a maximin design over log shape, at most half the "
                   "group's shapes, as a suite chooses before measuring)")
    p.add_argument("--fit", dest="method", choices=("auto", "parts"), default="auto",
                   help="auto (parameters, prior and residual chosen by cross-validation; the "
                   "default) or parts (device figures, kernel-family model constants, then a "
                   "kernel-ridge residual: no inner search)")
    p.add_argument("--jobs", type=_threads, default=1,
                   help="groups evaluated in parallel processes (default 1)")
    p.add_argument("--markdown", action="store_true",
                   help="print the table and its summary as Markdown (as in the README)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=public_cmd)

    p = sub.add_parser("transfer", help="carry a calibration to another spec",
                       description="Carry the kernel-family part of a calibrated profile "
                       "(fixed costs, tile and attention efficiencies, per-CTA bandwidth, "
                       "softmax overlap, the model constants fitted on the device) to "
                       "another spec; its achievable compute and bandwidth fractions stay "
                       "at that spec's values. Residual tables are not carried. The new "
                       "profile records what was carried from where.")
    p.add_argument("profile", help="calibrated profile (YAML written by calibrate fit)")
    p.add_argument("--to", required=True, dest="target",
                   help="target spec id or YAML (a plain spec, not a calibrated profile)")
    p.add_argument("--out", required=True, type=_nonempty, help="profile to write (YAML)")
    p.add_argument("--json", action="store_true", help="print what was carried as JSON")
    p.set_defaults(func=transfer_cmd)

    from perfmodel.cli.traces import register_import

    register_import(sub)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _say(args: argparse.Namespace, text: str) -> None:
    if not getattr(args, "quiet", False):
        print(text, file=sys.stderr)


# ----------------------------------------------------------------------------- run
def run_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.run import run_suite

    budget = parse_budget(args.budget)
    out = check_output(args.out, "--out", (args.gpu,))
    if out.is_file() and out.stat().st_size and not args.no_resume:
        from perfmodel.calibrate.run import done_cases

        done_cases(out)  # refuses, before any measuring, a file calibrate run did not write
    result = run_suite(args.device, args.out, budget, gpu=args.gpu, threads=args.threads,
                       dtypes=args.dtypes, quiet=args.quiet, resume=not args.no_resume)
    summary = {
        "out": str(result.out), "env": str(result.env),
        "spec": str(result.spec_path) if result.spec_path else result.hardware,
        "measured": result.measured, "planned": result.planned, "repeated": result.repeated,
        "already_done": result.skipped_done, "left_out_by_budget": result.left_out,
        "unstable": result.unstable, "failed": [list(f) for f in result.failed],
        "seconds": round(result.seconds, 1), "notes": list(result.notes),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    extra = result.measured - result.planned if result.planned else 0
    more = (f"{result.planned} planned and {extra} more the time left allowed, "
            if extra > 0 else "")
    print(f"measured {result.measured} case(s) in {result.seconds:.0f} s "
          f"({more}{result.repeated} noisy one(s) measured again, {result.unstable} flagged "
          f"unstable) -> {result.out}")
    print(f"environment -> {result.env}")
    if result.spec_path:
        print(f"spec -> {result.spec_path}")
    if result.skipped_done:
        print(f"{result.skipped_done} case(s) were already in {result.out.name} (resumed)")
    if result.left_out:
        print(f"{result.left_out} case(s) left for a larger --budget (rerun to resume)")
    for case, why in result.failed:
        print(f"failed: {case}: {why}")
    for note in result.notes:
        print(f"note: {note}")
    fit_gpu = f" --gpu {result.spec_path}" if result.spec_path else (
        "" if result.hardware else " --gpu ID")
    print(f"next: perfmodel calibrate fit {result.out}{fit_gpu} --out calibrated.yaml")
    return 0


# ----------------------------------------------------------------------------- fit
def _sidecar(csv_path: Path) -> dict[str, Any]:
    path = csv_path.with_name(csv_path.name + ".env.json")
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_spec(csv_path: Path) -> tuple[Path, Path] | None:
    """The spec file ``calibrate run`` recorded for ``csv_path`` (its sidecar's
    ``spec_path``) and the same name next to the CSV (where it is once the run folder is
    moved); None without one."""
    recorded = _sidecar(csv_path).get("spec_path")
    if not recorded:
        return None
    path = Path(str(recorded))
    return path, csv_path.with_name(path.name)


def _resolve_spec(csv_path: Path, gpu: str | None, rows: list[Any]) -> tuple[Any, Path | None]:
    """(HardwareSpec, its file path or None for a bundled id)."""
    from perfmodel.hardware.catalog import bundled_path, load_hardware

    if gpu is None:
        run = _run_spec(csv_path)
        if run is not None and run[0].is_file():
            gpu = str(run[0])
        elif run is not None and run[1].is_file():
            # the run folder was moved: the measured spec is still next to its CSV
            gpu = str(run[1])
        elif run is not None:
            recorded = run[0]
            raise PerfmodelError(
                "--gpu", f"the run's spec file {recorded} (recorded in "
                f"{csv_path.name}.env.json) is gone, and no {recorded.name} lies next to "
                "the CSV", "pass --gpu with the spec the run measured")
        else:
            specs = sorted({r.spec for r in rows if r.spec})
            if len(specs) != 1:
                raise PerfmodelError(
                    "--gpu", "not given, and the CSV does not name exactly one device "
                    f"(spec column: {', '.join(specs) or 'empty'})",
                    "pass --gpu ID or a spec YAML")
            gpu = specs[0]
    hw = load_hardware(gpu)
    if Path(gpu).is_file():
        return hw, Path(gpu)
    try:
        return hw, bundled_path(gpu)
    except (KeyError, PerfmodelError):
        return hw, None


def _environment(csv_path: Path, rows: list[Any]) -> dict[str, str]:
    from perfmodel.calibrate.profile import file_sha256

    env = {k: str(v) for k, v in _sidecar(csv_path).items()
           if isinstance(v, (str, int, float)) and k not in ("budget_s",)}
    env["measurements"] = str(csv_path)
    env["measurements_sha256"] = file_sha256(csv_path)
    sources = sorted({r.source for r in rows if r.source})
    if sources:
        env["sources"] = ", ".join(sources)
    return env


def _load(args: argparse.Namespace) -> tuple[Any, Any, Path | None, list[Any]]:
    from perfmodel.calibrate.data import (
        as_run_on,
        check_device,
        dataset_from_rows,
        read_rows,
        thin_rows,
    )

    csv_path = Path(args.csv)
    rows, _ = read_rows(csv_path)
    rows, thinned = thin_rows(rows)
    if thinned:
        print(f"note: {thinned}", file=sys.stderr)
    hw, spec_path = _resolve_spec(csv_path, args.gpu, rows)
    check_device(rows, hw, str(csv_path), allow_other=args.allow_other_gpu)
    rows, rules = as_run_on(rows, hw)
    for rule in rules:
        print(f"note: {rule}", file=sys.stderr)
    return dataset_from_rows(rows), hw, spec_path, rows


def fit_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.fit import fit_auto
    from perfmodel.calibrate.profile import write_calibrated
    from perfmodel.calibrate.report import cross_validate

    t0 = time.monotonic()
    csv_path = Path(args.csv)
    check_output(args.out, "--out", (args.csv, csv_path.with_name(csv_path.name + ".env.json"),
                                     args.gpu if args.gpu and Path(args.gpu).is_file() else None))
    data, hw, spec_path, rows = _load(args)
    # the spec the run measured (recorded beside the CSV) is an input too, even when
    # --gpu names another: overwriting it would lose the run's device figures
    check_output(args.out, "--out", (spec_path, *(_run_spec(csv_path) or ())))
    env = _environment(Path(args.csv), rows)
    if args.method == "parts":
        from perfmodel.calibrate.fit import Selection
        from perfmodel.calibrate.parts import fit_parts

        mode = _residual(args.residual) or "gp"
        result = fit_parts(data, hw, residual=mode)
        sel = Selection(prior=math.nan, residual=mode, scores={}, params="parts")
        env["fit_method"] = "parts"
        cv_kwargs: dict[str, Any] = {"fitter": _parts_fitter}
    else:
        result, sel = fit_auto(data, hw, residual=_residual(args.residual),
                               prior=_prior(args.prior))
        env["fit_prior"] = f"{sel.prior:g}"
        env["fit_params"] = sel.params
        cv_kwargs = {"prior": sel.prior, "params": sel.params}
    env["fit_residual"] = sel.residual
    extra_b: dict[str, float] = {}
    extra_a: dict[str, float] = {}
    if args.folds and args.folds >= 2:
        try:
            cv = cross_validate(data, hw, folds=args.folds, residual=sel.residual,
                                **cv_kwargs)
            for g in cv.to_dict()["groups"]:
                if g["regime"] != "all":
                    continue
                key = "all" if g["family"] == "all" else g["family"]
                extra_a[f"heldout.{key}.median_ape"] = g["after_heldout"]["median_ape"]
                extra_a[f"heldout.{key}.p90_ape"] = g["after_heldout"]["p90_ape"]
            env["heldout"] = f"leave-shape-out {args.folds}-fold"
        except PerfmodelError as exc:
            env["heldout"] = f"not computed: {exc.problem}"
    out = write_calibrated(args.out, hw, result, environment=env, source_path=spec_path,
                           extra_errors=extra_a, extra_errors_before=extra_b)
    payload = {
        "out": str(args.out), "device": hw.id, "points": result.n,
        "params": result.params, "residual_tables": sorted(result.residuals),
        "prior": sel.prior if math.isfinite(sel.prior) else str(sel.prior),
        "residual": sel.residual, "family_constants": result.constants,
        "params_set": sel.params, "selection_scores": sel.scores,
        "error_before": result.error_before, "error_after": {**result.error_after, **extra_a},
        "skipped": [list(s) for s in result.skipped], "seconds": round(time.monotonic() - t0, 2),
    }
    cautions = _param_cautions(result.keys)
    payload["warnings"] = cautions
    if args.json:
        print(json.dumps(payload, indent=2))
        return 0
    how = (f"device figures, {len(result.constants)} kernel-family model constant(s)"
           if args.method == "parts" else f"prior {sel.prior:g}, {sel.params} parameters")
    print(f"fitted {result.n} point(s) on {hw.id} in {payload['seconds']} s "
          f"({how}, residual correction: {sel.residual})")
    for k in result.keys:
        shown = ", ".join(f"{name}={_fmt_param(name, v)}" for name, v in k.params.items())
        if "overlap_p" in (k.defaults or {}) and "overlap_p" not in k.params \
                and "overlap_p" not in k.fixed:
            shown += ", overlap=hard max"
        print(f"  {k.key:18s} n={k.n:4d}  {shown}")
    print(f"{'':20s} {'median APE':>22s} {'p90 APE':>22s}")
    keys = sorted({k.rsplit('.', 1)[0] for k in result.error_before})
    for key in keys:
        b_med = result.error_before[f"{key}.median_ape"]
        a_med = result.error_after[f"{key}.median_ape"]
        b_p90 = result.error_before[f"{key}.p90_ape"]
        a_p90 = result.error_after[f"{key}.p90_ape"]
        h = extra_a.get(f"heldout.{key}.median_ape")
        held = f"  held-out {100 * h:5.1f}%" if h is not None and math.isfinite(h) else ""
        print(f"  {key:18s} {100 * b_med:6.1f}% -> {100 * a_med:5.1f}%      "
              f"{100 * b_p90:6.1f}% -> {100 * a_p90:5.1f}%{held}")
    for line in cautions:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {out.id} calibration -> {args.out} (load it with --gpu {args.out})")
    return 0


def _param_cautions(keys: Any) -> list[str]:
    """What a reader of a fit should not miss: a parameter pinned at its bound (the data
    wanted beyond it), a compute or memory fraction above 1 (faster than the spec's peak
    or bandwidth), a key fitted on no rows."""
    from perfmodel.calibrate.fit import _BOUNDS

    out = []
    for k in keys:
        if k.n == 0 and k.params:
            out.append(f"{k.key}: no rows; its values are the starting ones, not fitted")
            continue
        for name, v in k.params.items():
            lo, hi = _BOUNDS.get(name, (-math.inf, math.inf))
            if math.isclose(v, lo, rel_tol=1e-6) or math.isclose(v, hi, rel_tol=1e-6):
                out.append(f"{k.key}: {name}={_fmt_param(name, v)} sits at its bound "
                           f"[{_fmt_param(name, lo)}, {_fmt_param(name, hi)}]: the data "
                           "pull it further (check the measurements and the spec)")
            elif name in ("compute_fraction", "memory_fraction") and v > 1.0:
                what = "peak" if name == "compute_fraction" else "bandwidth"
                out.append(f"{k.key}: {name}={v:.3g} is above 1, faster than the spec's "
                           f"{what} (check the spec's figures or the measured times)")
    return out


def _parts_fitter(data: Any, hw: Any, residual: str = "gp", **_: Any) -> Any:
    """:func:`perfmodel.calibrate.parts.fit_parts` with the signature cross_validate
    calls a fitter with."""
    from perfmodel.calibrate.parts import fit_parts

    return fit_parts(data, hw, residual=residual)


def _fmt_param(name: str, value: float) -> str:
    if name == "overhead_s":
        return f"{value * 1e6:.3g}us"
    return f"{value:.3g}"


# ----------------------------------------------------------------------------- report
def report_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.fit import fit_auto, uncalibrated
    from perfmodel.calibrate.report import (
        cross_validate,
        format_table,
        scatter_plot,
        split_extrapolation,
    )

    check_plot_target(args.plot, args.csv, args.gpu)
    data, hw, _, _ = _load(args)
    cal_env = hw.calibration.environment if hw.calibration else {}
    residual = _residual(args.residual) if args.residual is not None else (
        cal_env.get("fit_residual"))
    prior = _prior(args.prior) if args.prior is not None else (
        float(cal_env["fit_prior"]) if "fit_prior" in cal_env else None)
    from perfmodel.calibrate.parts import without_constants

    base = without_constants(uncalibrated(hw))  # before = the spec alone
    params = cal_env.get("fit_params") if args.residual is None and args.prior is None \
        else None
    parts = cal_env.get("fit_method") == "parts" and args.prior is None
    if parts:
        residual, prior = residual or "gp", math.nan
        cv = cross_validate(data, base, folds=args.folds, residual=residual,
                            fitter=_parts_fitter)
    else:
        if residual is None or prior is None or params is None:
            _, sel = fit_auto(data, base, residual=residual, prior=prior, params=params)
            residual, prior, params = sel.residual, sel.prior, sel.params
        cv = cross_validate(data, base, folds=args.folds, residual=residual, prior=prior,
                            params=params)
    payload: dict[str, Any] = {"device": hw.id, "points": len(data),
                               "prior": None if parts else prior,
                               "residual": residual, **cv.to_dict()}
    fit_mask, test_mask = split_extrapolation(data)
    extra_lines: list[str] = []
    if test_mask.any() and (fit_mask & data.family_mask("attention")).any():
        from perfmodel.calibrate.fit import apply_params, fit

        res = (_parts_fitter(data.where(fit_mask), base, residual=residual) if parts
               else fit(data.where(fit_mask), base, residual=residual, prior=prior))
        spec = apply_params(base, res.params, res.residuals, constants=res.constants)
        held = data.where(test_mask)
        import numpy as np

        ape_a = np.abs(held.predict(spec) / held.measured_s - 1.0)
        ape_b = np.abs(held.predict(base) / held.measured_s - 1.0)
        ext = {"n": int(test_mask.sum()), "before_median_ape": float(np.median(ape_b)),
               "before_p90_ape": float(np.percentile(ape_b, 90)),
               "after_median_ape": float(np.median(ape_a)),
               "after_p90_ape": float(np.percentile(ape_a, 90))}
        payload["seq_extrapolation"] = ext
        extra_lines.append(
            f"attention sequence extrapolation (fit S <= 4k, predict 8k-32k, n={ext['n']}): "
            f"before {100 * ext['before_median_ape']:.1f}% / p90 "
            f"{100 * ext['before_p90_ape']:.1f}%, after {100 * ext['after_median_ape']:.1f}% / "
            f"p90 {100 * ext['after_p90_ape']:.1f}%")
    if args.plot:
        written = scatter_plot(cv, args.plot, title=f"{hw.id}: predicted vs measured")
        payload["plot"] = str(written) if written else None
        if written is None:
            extra_lines.append("plot: matplotlib is not installed; no plot written")
        else:
            extra_lines.append(f"plot -> {written}")
    if args.json:
        print(json.dumps(payload, indent=2, default=str))
        return 0
    how = "parts fit" if parts else f"prior {prior:g}"
    print(f"{hw.id}: {len(data)} measured points; after = leave-shape-out {args.folds}-fold "
          f"cross-validation ({how}, residual correction: {residual})")
    for line in format_table(cv):
        print(line)
    for line in extra_lines:
        print(line)
    return 0


# ----------------------------------------------------------------------------- cpu-spec
def cpu_spec_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.cpu import measure_cpu, write_cpu_spec

    check_output(args.out, "--out")
    fig = measure_cpu(args.threads, quick=args.quick)
    hw = write_cpu_spec(args.out, fig, spec_id=args.id)
    print(f"{hw.name}: fp32 {fig.matmul_flops_per_s / 1e9:.1f} GFLOP/s, copy "
          f"{fig.copy_bytes_per_s / 1e9:.1f} GB/s, fixed cost {fig.overhead_s * 1e6:.2f} us, "
          f"exp {fig.exp_per_s / 1e9:.2f} G/s -> {args.out}")
    return 0


# ----------------------------------------------------------------------------- transfer
def transfer_cmd(args: argparse.Namespace) -> int:
    from perfmodel import __version__
    from perfmodel.calibrate.profile import file_sha256, write_profile
    from perfmodel.calibrate.transfer import transfer
    from perfmodel.hardware.catalog import load_hardware, load_hardware_file

    src = Path(args.profile)
    target_path = Path(args.target) if Path(args.target).is_file() else None
    check_output(args.out, "--out", (args.profile, target_path))
    if not src.is_file():
        raise PerfmodelError("profile", f"{args.profile!r}: file not found",
                             "pass the YAML written by 'perfmodel calibrate fit'")
    profile = load_hardware_file(src)
    target = load_hardware(args.target)
    env = {"transfer_source_profile": str(src),
           "transfer_source_profile_sha256": file_sha256(src), "perfmodel": __version__}
    if target_path is not None:
        env["base_spec"] = str(target_path)
        env["base_spec_sha256"] = file_sha256(target_path)
    result = transfer(profile, target, environment=env)
    data = result.spec.model_dump(mode="json", exclude_none=True)
    sources = dict(data.get("sources", {}))
    cal = result.spec.calibration
    sources["calibration"] = (f"transferred by perfmodel {__version__} calibrate transfer on "
                              f"{cal.date if cal else ''} from {result.source}'s calibration "
                              f"({src.name}): kernel-family figures carried, device figures "
                              "at this spec's values")
    data["sources"] = sources
    header = ("# Hardware profile written by `perfmodel calibrate transfer`: the target spec\n"
              f"# as loaded (SI units) plus the kernel-family part of {result.source}'s\n"
              "# calibration; calibration.provenance says where each value came from.\n")
    originals = [src] + ([target_path] if target_path is not None else [])
    written = write_profile(args.out, data, header, originals)
    if args.json:
        print(json.dumps({"out": str(args.out), **result.to_dict()}, indent=2))
        return 0
    n_params = sum(len(v) for v in result.params.values())
    print(f"{result.source} ({profile.arch}) -> {result.target} ({target.arch}): carried "
          f"{n_params} family parameter(s) and {len(result.constants)} model constant(s); "
          f"{len(result.dropped)} part(s) not carried")
    if not result.within_reach:
        print(f"note: {profile.arch} and {target.arch} are more than one architecture apart; "
              "kernel families may not behave alike (see perfmodel.calibrate.transfer)")
    for key, values in sorted(result.params.items()):
        shown = ", ".join(f"{k}={_fmt_param(k, v)}" for k, v in sorted(values.items()))
        print(f"  carried {key}: {shown}")
    for name, (old, value) in sorted(result.constants.items()):
        was = "" if old == name else f" (from {old})"
        print(f"  carried {name} = {value:.4g}{was}")
    for figure, text in result.device.items():
        print(f"  device {figure}: {text}")
    reasons: dict[str, int] = {}
    for _, why in result.dropped:
        reasons[why] = reasons.get(why, 0) + 1
    for why, count in sorted(reasons.items()):
        print(f"  not carried ({count}): {why}")
    print(f"wrote {written.id} profile -> {args.out} (load it with --gpu {args.out})")
    return 0


# ----------------------------------------------------------------------------- public
def public_cmd(args: argparse.Namespace) -> int:
    import numpy as np

    from perfmodel.calibrate.public import (
        BUDGET_MEDIAN,
        BUDGET_P90,
        CEILING_SLACK,
        evaluate_public,
        meets_budget_target,
    )
    from perfmodel.calibrate.report import group_table

    t0 = time.monotonic()
    evals, skipped = evaluate_public(args.paths, max_fit_rows=args.max_fit_rows,
                                     min_rows=args.min_rows, residual=_residual(args.residual),
                                     include_suspect=args.include_suspect, pick=args.pick,
                                     method=args.method, jobs=args.jobs)
    seconds = time.monotonic() - t0
    if args.json:
        print(json.dumps({"groups": [e.to_dict() for e in evals],
                          "skipped": [list(s) for s in skipped],
                          "seconds": round(seconds, 1)}, indent=2, allow_nan=False))
        return 0
    if args.markdown:
        from perfmodel.calibrate.public import markdown_table

        for line in markdown_table([e.to_dict() for e in evals], seconds,
                                   budget=args.pick == "design"):
            print(line)
        return 0
    budget = args.pick == "design"
    rows = [{**e.to_dict(), "group": e.name,
             "target": ("yes" if meets_budget_target(e) else "no") if e.kind == "shapes"
             else "-"} for e in evals]
    cols = [("group", "group"), ("kind", "test"), ("n", "n"),
            ("n_fit", "fit"), ("n_test", "held out"), ("before_median", "before med"),
            ("before_p90", "p90"), ("after_median", "after med"), ("after_p90", "p90"),
            ("ceiling_median", "ceiling med"), ("ceiling_p90", "p90")]
    cols += [("target", "target met")] if budget else [("note", "chosen")]
    for line in group_table(rows, cols):
        print(line)
    shapes = [e for e in evals if e.kind == "shapes"]
    if budget:
        strict = sum(e.meets(BUDGET_MEDIAN, BUDGET_P90) for e in shapes)
        print(f"held-out median <= {BUDGET_MEDIAN:.0%} and p90 <= {BUDGET_P90:.0%}, each "
              f"relaxed to {CEILING_SLACK:g}x the dense ceiling's where that is above it: "
              f"{sum(meets_budget_target(e) for e in shapes)} of {len(shapes)} groups "
              f"({strict} within {BUDGET_MEDIAN:.0%} / {BUDGET_P90:.0%} outright; "
              f"{sum(e.ceiling_meets(BUDGET_MEDIAN, BUDGET_P90) for e in shapes)} dense "
              "ceilings do)")
        if shapes:
            mean = {k: 100 * float(np.mean([getattr(e, k) for e in shapes]))
                    for k in ("before_median", "before_p90", "after_median", "after_p90",
                              "ceiling_median", "ceiling_p90")}
            print(f"mean of group medians / p90s: before {mean['before_median']:.1f}% / "
                  f"{mean['before_p90']:.1f}%, after {mean['after_median']:.1f}% / "
                  f"{mean['after_p90']:.1f}%, dense ceiling {mean['ceiling_median']:.1f}% / "
                  f"{mean['ceiling_p90']:.1f}%")
    else:
        reach = [e for e in shapes if e.ceiling_meets()]
        print(f"held-out median <= 5 % and p90 <= 15 %: {sum(e.meets() for e in shapes)} of "
              f"{len(shapes)} groups after calibration, {sum(e.meets() for e in reach)}"
              f" of the {len(reach)} whose dense ceiling reaches them (ceiling: a local "
              f"correction from every other shape of the group, see perfmodel.calibrate.public)")
    for e in evals:
        if e.kind == "seq-extrapolation":
            print(f"sequence extrapolation {e.name}: fit S <= 4k, "
                  f"test 8k-32k, p90 {e.after_p90:.1%} (target <= 20 %)")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    print(f"{len(evals)} evaluation(s) in {seconds:.0f} s")
    return 0
