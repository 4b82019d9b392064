"""Your own profiles: ``perfmodel calibrate import`` turns a torch.profiler trace or an
Nsight Compute export into measurement rows; ``perfmodel explain-trace`` holds each op of
it next to the model's prediction.

    perfmodel calibrate import trace.json --out m.csv [--gpu ID]
    perfmodel calibrate import ncu.csv --out m.csv --gpu h100-sxm [--dtype bf16] [--causal]
    perfmodel explain-trace trace.json --gpu h100-sxm [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.cli._paths import check_output

__all__ = ["explain_cmd", "import_cmd", "register", "register_import"]

_FORMATS = {"torch-profiler": "torch.profiler trace", "nsight-compute": "Nsight Compute export"}
_LISTED = 10


def _add_capture_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="torch.profiler Chrome trace (.json, recorded with "
                   "record_shapes=True) or Nsight Compute CSV (ncu --csv --page raw)")
    p.add_argument("--allow-other-gpu", action="store_true",
                   help="use --gpu even if the capture was recorded on another device")
    p.add_argument("--dtype", help="dtype of an Nsight export's kernels (default: read from "
                   "kernel names; a torch.profiler trace records it)")
    p.add_argument("--causal", action="store_true",
                   help="the attention calls of an Nsight export were causal (not recorded)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def register_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel calibrate import`` to the calibrate subcommands."""
    p = sub.add_parser(
        "import", help="turn a torch.profiler trace or Nsight Compute export into rows",
        description="Map the profiled kernels to perfmodel ops (by recorded shapes and kernel "
        "names) and write one measurement row per distinct op (median over its calls). "
        "Kernels or ops that map to no op are listed on stderr, never dropped silently.")
    _add_capture_args(p)
    p.add_argument("--out", required=True, help="measurement CSV to write")
    p.add_argument("--gpu", help="spec id or YAML of the device (fills the spec column and is "
                   "checked against the capture's device; default: the device the capture "
                   "names, when it is a bundled spec)")
    p.add_argument("--append", action="store_true", help="append to an existing --out")
    p.set_defaults(func=import_cmd)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel explain-trace``."""
    p = subparsers.add_parser(
        "explain-trace", help="measured vs predicted time per op of a profile",
        description="Per op of a torch.profiler trace or Nsight Compute export: measured and "
        "predicted time and the error; for Nsight exports also the measured compute (SM) and "
        "DRAM throughput (%% of peak) beside the predicted ones, and the bottleneck each "
        "implies.")
    _add_capture_args(p)
    p.add_argument("--gpu", required=True, help="spec id or YAML to predict with")
    p.set_defaults(func=explain_cmd)


# ----------------------------------------------------------------------------- helpers
def _load(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """(capture, spec or None, notes)."""
    from perfmodel.calibrate.capture import check_device
    from perfmodel.calibrate.importer import read_capture
    from perfmodel.dtypes import normalize_dtype
    from perfmodel.hardware.catalog import load_hardware

    dtype = normalize_dtype(args.dtype, "--dtype") if args.dtype else None
    capture = read_capture(args.file, dtype=dtype, causal=args.causal)
    notes: list[str] = []
    if capture.format == "torch-profiler" and (args.dtype or args.causal):
        notes.append("--dtype/--causal apply to Nsight exports only; the trace records both")
    hw = load_hardware(args.gpu) if args.gpu else None
    if hw is not None:
        notes += check_device(capture, hw, allow_other=args.allow_other_gpu)
    return capture, hw, notes + list(capture.notes)


def _us(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    us = seconds * 1e6
    return f"{us:,.1f} µs" if us >= 100 else f"{us:.2f} µs"


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _short(name: str, width: int = 90) -> str:
    """A kernel name shortened for a table: no ``void``, namespaces or parameter list,
    template arguments nested deeper than one level as ``<...>``, then the middle elided."""
    text = name.strip().removeprefix("void ")
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i].rstrip() or text
                break
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "<":
            depth += 1
            if depth == 2:
                out.append("<...>")
        elif ch == ">":
            depth -= 1
            if depth == 1:
                continue
        if (depth < 2 and ch != ">") or (depth == 0 and ch == ">"):
            out.append(ch)
    text = re.sub(r"\b[A-Za-z_]\w*::", "", "".join(out))
    if len(text) <= width:
        return text
    half = (width - 3) // 2
    return text[:half] + "..." + text[-(width - 3 - half):]


def _print_unmatched(summary: list[dict[str, Any]], total_s: float) -> None:
    if not summary:
        return
    lost = sum(e["total_s"] for e in summary)
    count = sum(e["count"] for e in summary)
    print(f"unmatched: {count} kernel/op call(s), {_us(lost)} "
          f"({100 * lost / total_s if total_s > 0 else 0:.1f} % of the measured time), "
          "mapped to no perfmodel op:", file=sys.stderr)
    for e in summary[:_LISTED]:
        where = f" (in {e['context']})" if e["context"] else ""
        print(f"  {e['kind']} {_short(e['name'], 80)}{where} x{e['count']}, "
              f"{_us(e['total_s'])}: {e['reason']}", file=sys.stderr)
    if len(summary) > _LISTED:
        print(f"  ... and {len(summary) - _LISTED} more (all of them under 'unmatched' with "
              "--json)", file=sys.stderr)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]


# ----------------------------------------------------------------------------- import
def _write(path: Path, rows: list[dict[str, object]], append: bool) -> None:
    from perfmodel.measurements import COLUMNS, write_measurements

    if path.exists() and path.stat().st_size > 0:
        if not append:
            raise PerfmodelError("--out", f"{path} exists", "pass --append to add rows to it, "
                                 "or another --out")
        with path.open(encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), [])
        if [h.strip() for h in header] != list(COLUMNS):
            raise PerfmodelError(str(path), "its header is not the shared measurement schema "
                                 "in perfmodel's column order, so rows cannot be appended",
                                 "write to a new --out")
        write_measurements(path, rows, append=True)
        return
    if path.is_dir():
        raise PerfmodelError("--out", f"{path} is a folder", "pass a CSV file path")
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp",
                               dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        write_measurements(tmp, rows, append=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def import_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.importer import (
        group_calls,
        measurement_rows,
        spec_id_of,
        unmatched_summary,
    )

    check_output(args.out, "--out", (args.file, args.gpu))  # before reading the trace
    capture, hw, notes = _load(args)
    groups = group_calls(capture)
    # a group timed at 0 s (below the trace's timer resolution) is no measurement: a row of
    # 0 µs would be refused by every later step
    zero = [g for g in groups if not g.measured_s > 0.0]
    groups = [g for g in groups if g.measured_s > 0.0]
    if zero:
        notes = [*notes, f"{len(zero)} op(s) timed at 0 s (below the trace's timer "
                 "resolution) not written: " + ", ".join(g.op.describe() for g in zero[:3])
                 + (", ..." if len(zero) > 3 else "")]
    if not groups:
        top = max(capture.unmatched, key=lambda u: u.measured_s, default=None)
        why = (f"the largest unmatched: {_short(top.name, 60)}, {top.reason}" if top
               else "every op mapped was timed at 0 s" if zero else "nothing was timed")
        raise PerfmodelError(capture.path, f"no launch maps to a perfmodel op with shapes "
                             f"({why})", "nothing was written; see 'perfmodel explain-trace' "
                             "for the measured kernels")
    spec_id = hw.id if hw is not None else spec_id_of(capture)
    rows = measurement_rows(capture, groups, spec_id)
    out = Path(args.out)
    _write(out, rows, args.append)
    summary = unmatched_summary(capture)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    _print_unmatched(summary, capture.measured_s)
    if args.json:
        print(json.dumps({
            "file": capture.path, "format": capture.format,
            "device": {"kind": capture.device.kind, "name": capture.device.name,
                       "evidence": capture.device.evidence},
            "spec": spec_id, "timing": capture.timing, "out": str(out),
            "calls": len(capture.units), "rows": len(rows),
            "groups": [{"describe": g.op.describe(), "calls": g.calls,
                        "measured_s": g.measured_s, "operators": list(g.source_ops),
                        "kernels": list(g.kernels)} for g in groups],
            "unmatched": summary, "notes": notes}, indent=2))
        return 0
    print(f"{capture.path}: {_FORMATS[capture.format]} recorded on "
          f"{capture.device.describe()} ({capture.device.evidence})")
    print(f"imported {len(capture.units)} op call(s) as {len(rows)} row(s) -> {out} "
          f"(timing {capture.timing}; spec column: {spec_id or 'empty'})")
    for g in groups:
        print(f"  {g.op.describe():48s} {g.calls:5d} call(s)  median {_us(g.measured_s)}")
    if summary:
        print(f"{sum(e['count'] for e in summary)} unmatched kernel/op call(s), listed on "
              "stderr")
    gpu = f" --gpu {spec_id}" if spec_id else " --gpu ID"
    print(f"next: perfmodel validate {out}{gpu}   or   perfmodel calibrate fit {out}{gpu} "
          "--out calibrated.yaml")
    return 0


# ----------------------------------------------------------------------------- explain
def explain_cmd(args: argparse.Namespace) -> int:
    from perfmodel.calibrate.importer import explain, measured_bottleneck, unmatched_summary
    from perfmodel.validation import timing_floor

    capture, hw, notes = _load(args)
    assert hw is not None
    results = explain(capture, hw)
    summary = unmatched_summary(capture)
    apes = [r.ape for r in results if r.ape is not None]
    weights = [r.group.total_s for r in results if r.ape is not None]
    median = statistics.median(apes) if apes else None
    weighted = (sum(a * w for a, w in zip(apes, weights, strict=True)) / sum(weights)
                if apes and sum(weights) > 0 else None)
    floor, floor_rule = timing_floor(capture.timing)
    if args.json:
        print(json.dumps({
            "file": capture.path, "format": capture.format, "gpu": hw.id,
            "device": {"kind": capture.device.kind, "name": capture.device.name,
                       "evidence": capture.device.evidence},
            "timing": capture.timing, "floor_s": floor, "floor_rule": floor_rule,
            "ops": [r.to_dict() for r in results],
            "median_ape": median, "time_weighted_ape": weighted,
            "unmatched": summary, "notes": notes}, indent=2, allow_nan=False))
        return 0
    nsight = capture.format == "nsight-compute"
    print(f"{capture.path}: {_FORMATS[capture.format]} recorded on "
          f"{capture.device.describe()}; predicted on {hw.id} ({hw.name})")
    print(f"timing {capture.timing}: floor {floor * 1e6:g} µs ({floor_rule})")
    print()
    header = ["OP", "CALLS", "MEASURED", "PREDICTED", "APE"]
    if nsight:
        header += ["SM % meas/ours", "DRAM % meas/ours", "BOTTLENECK meas/ours"]
    else:
        header += ["BOTTLENECK (ours)"]
    table = [header]
    for r in results:
        g, p = r.group, r.prediction
        ape = "-" if r.ape is None else f"{100 * r.ape:.1f}%"
        ours = str(p.bottleneck) if p is not None else "-"
        row = [g.op.describe(), str(g.calls), _us(g.measured_s), _us(r.predicted_s), ape]
        if nsight:
            mem = g.dram_pct if g.dram_pct is not None else g.memory_pct
            cu = None if p is None else 100 * float(p.compute_util)
            mu = None if p is None else 100 * float(p.memory_util)
            meas = measured_bottleneck(g.sm_pct, g.memory_pct, g.dram_pct) or "-"
            row += [f"{_pct(g.sm_pct)} / {_pct(cu)}", f"{_pct(mem)} / {_pct(mu)}",
                    f"{meas} / {ours}"]
        else:
            row += [ours]
        table.append(row)
    if results:
        for line in _table(table, right={1, 2, 3, 4}):
            print(line)
    else:
        print("no op call maps to a perfmodel op with shapes (the unmatched list on stderr "
              "says why)")
    if nsight and summary:
        print()
        print("Kernels without a perfmodel op (measured only):")
        rest = [["KERNEL", "CALLS", "MEASURED", "SM %", "DRAM %", "BOTTLENECK meas"]]
        for e in summary[:_LISTED]:
            mem = e.get("measured_dram_pct")
            mem = e.get("measured_memory_pct") if mem is None else mem
            rest.append([_short(e["name"], 60), str(e["count"]), _us(e["total_s"] / e["count"]),
                         _pct(e.get("measured_sm_pct")), _pct(mem),
                         e.get("measured_bottleneck") or "-"])
        for line in _table(rest, right={1, 2, 3, 4}):
            print(line)
    for r in results:
        if r.problem:
            print(f"not predicted: {r.group.op.describe()}: {r.problem}")
    print()
    for r in results:
        if r.group.kernels:
            shown = ", ".join(_short(k, 70) for k in r.group.kernels[:3])
            more = f" (+{len(r.group.kernels) - 3})" if len(r.group.kernels) > 3 else ""
            print(f"  {r.group.op.describe()}: {shown}{more}")
    if median is not None:
        print(f"median APE over {len(apes)} op(s): {100 * median:.1f}%; weighted by "
              f"measured time: {100 * (weighted or 0):.1f}%")
    if nsight:
        print("SM %: Nsight's Compute (SM) Throughput (busiest SM unit) vs our FLOP/s over "
              "the dense peak; DRAM %: measured DRAM throughput vs our device-memory bytes "
              "over the datasheet bandwidth. Bottleneck: latency when both are under 10 %, "
              "else the larger.")
    if summary:
        print(f"{sum(e['count'] for e in summary)} unmatched kernel/op call(s), listed on "
              "stderr")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    _print_unmatched(summary, capture.measured_s)
    return 0
