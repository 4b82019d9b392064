"""``perfmodel specs``: list the bundled hardware specs, show one, validate YAML files.

Text output is for people (units written out, fixed columns); ``--json`` prints one JSON
object on stdout with SI numbers (bytes, B/s, FLOP/s, FLOP/byte) for programs.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from perfmodel._errors import PerfmodelError, PerfmodelWarning, SpecError
from perfmodel._limits import clip_message
from perfmodel._units import Kind, format_capacity, format_quantity
from perfmodel.hardware.catalog import bundled_path, list_hardware, load_hardware
from perfmodel.hardware.provenance import describe
from perfmodel.hardware.spec import HardwareSpec, MemorySpec, quantity_kind

__all__ = ["register"]

_SPECS_EPILOG = """examples:
  perfmodel specs list                      every bundled GPU, one line each
  perfmodel specs show h100-sxm             all fields of one spec, with units
  perfmodel specs validate my_gpu.yaml      check a spec you wrote
"""

_LIST_EPILOG = """examples:
  perfmodel specs list
  perfmodel specs list --json               {"specs": [...]} with SI numbers

Peaks are dense (no 2:4 sparsity). Memory is printed as vendors print it ("80 GB" is
80 GiB) with the byte count beside it. The ridge point shown is the datasheet one (dense bf16
peak / memory bandwidth): kernels with fewer FLOPs per byte are memory-bound on paper;
'specs show' adds the achievable ridge (the rates predictions use).
"""

_SHOW_EPILOG = """examples:
  perfmodel specs show h100-sxm
  perfmodel specs show H100                 common spellings resolve to a bundled id
  perfmodel specs show ./my_gpu.yaml --json
"""

_VALIDATE_EPILOG = """examples:
  perfmodel specs validate my_gpu.yaml
  perfmodel specs validate hardware_specs/*/*.yaml

A spec of your own can start from a bundled one and override a few fields:
  extends: h100-sxm                 # a bundled id, or a path relative to this file
  id: h100-sxm-500w
  name: H100 SXM capped at 500 W
  tdp: 500 W
  efficiency: {memory: 0.80}
  pricing: {usd_per_hour: 1.90, assumption: "our contract, 2026"}
  sources: {power: "our nvidia-smi -pl setting", efficiency: "our measurements"}
Exit status: 0 when every file is valid, 2 otherwise (each problem names its field).
"""

#: Integer dtypes count operations, not floating-point operations.
_INTEGER_DTYPES = ("int8", "int4")

#: Header fields of ``specs show`` (printed on the first lines, not as a block).
_HEADER_FIELDS = ("id", "name", "vendor", "arch", "form_factor", "launch_year")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel specs {list,show,validate}`` to the top-level parser."""
    specs = subparsers.add_parser(
        "specs",
        help="list, show and validate hardware specs",
        description="Bundled hardware specs and your own YAML specs.",
        epilog=_SPECS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    specs.set_defaults(func=lambda _args: _print_help(specs))
    sub = specs.add_subparsers(dest="specs_command", metavar="SUBCOMMAND")

    p_list = sub.add_parser(
        "list", help="one line per bundled spec", description="List the bundled hardware specs.",
        epilog=_LIST_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_list.add_argument("--json", action="store_true", help="print JSON (SI units) on stdout")
    p_list.set_defaults(func=run_list)

    p_show = sub.add_parser(
        "show", help="every field of one spec, with units",
        description="Show one spec: every field with units, ridge points per dtype, sources.",
        epilog=_SHOW_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_show.add_argument("gpu", metavar="ID|FILE.yaml", help="bundled id, alias, or YAML path")
    p_show.add_argument("--json", action="store_true", help="print JSON (SI units) on stdout")
    p_show.add_argument("--strict", action="store_true", help="refuse a spec that warns")
    p_show.set_defaults(func=run_show)

    p_validate = sub.add_parser(
        "validate", help="check YAML spec files",
        description="Read and check YAML spec files (extends resolved, units, cross-checks).",
        epilog=_VALIDATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_validate.add_argument("files", metavar="FILE.yaml", nargs="+", help="spec files to check")
    p_validate.add_argument("--json", action="store_true", help="print JSON results on stdout")
    p_validate.add_argument("--strict", action="store_true",
                            help="treat warnings (a peak that cannot be cross-checked) as "
                            "problems")
    p_validate.set_defaults(func=run_validate)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --------------------------------------------------------------------------------- list
def _peak_or_none(hw: HardwareSpec, dtype: str) -> float | None:
    return hw.peak(dtype) if hw.supports(dtype) else None


def list_rows(specs: Sequence[HardwareSpec]) -> list[dict[str, Any]]:
    """One JSON-ready row (SI numbers, None when absent) per spec."""
    rows: list[dict[str, Any]] = []
    for hw in specs:
        rows.append({
            "id": hw.id,
            "name": hw.name,
            "vendor": hw.vendor,
            "arch": hw.arch,
            "memory_capacity_bytes": hw.memory.capacity,
            "memory_bandwidth_bytes_per_s": hw.memory.bandwidth,
            "bf16_dense_flops_per_s": _peak_or_none(hw, "bf16"),
            "fp8_dense_flops_per_s": _peak_or_none(hw, "fp8"),
            "bf16_ridge_flop_per_byte": hw.ridge_point("bf16") if hw.supports("bf16") else None,
        })
    return rows


def run_list(args: argparse.Namespace) -> int:
    """``perfmodel specs list``."""
    rows = list_rows([load_hardware(spec_id) for spec_id in list_hardware()])
    if args.json:
        print(json.dumps({"specs": rows}, indent=2))
        return 0

    def number(value: float | None, scale: float, fmt: str) -> str:
        return "-" if value is None else format(value / scale, fmt)

    header = ["ID", "NAME", "MEMORY", "BANDWIDTH", "BF16 TFLOP/s", "FP8 TFLOP/s",
              "BF16 RIDGE (DATASHEET)"]
    table = [[
        row["id"], row["name"],
        format_capacity(row["memory_capacity_bytes"]),
        format_quantity(row["memory_bandwidth_bytes_per_s"], "bandwidth", digits=3),
        number(row["bf16_dense_flops_per_s"], 1e12, ".1f"),
        number(row["fp8_dense_flops_per_s"], 1e12, ".1f"),
        number(row["bf16_ridge_flop_per_byte"], 1.0, ".0f"),
    ] for row in rows]
    for line in _table(header, table, right=(4, 5, 6)):
        print(line)
    print("\npeaks are dense; memory as vendors print it (GB = 2^30 bytes) with the bytes; "
          "datasheet ridge = dense peak / memory bandwidth (FLOP/byte); 'perfmodel specs "
          "show ID' gives the achievable ridge the predictions use, and every field.")
    return 0


def _table(header: list[str], rows: list[list[str]], right: tuple[int, ...] = ()) -> list[str]:
    """Columns padded to their widest cell; columns in ``right`` are right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return [line(header), *(line(r) for r in rows)]


# --------------------------------------------------------------------------------- show
def _spec_file(name: str) -> str:
    """Where the spec named on the command line lives."""
    if name.endswith((".yaml", ".yml")) or Path(name).is_file():
        return str(Path(name))
    return str(bundled_path(name))


def ridge_points(hw: HardwareSpec) -> dict[str, float]:
    """Dense peak / memory bandwidth per supported dtype, FLOP/byte."""
    return {dt: hw.ridge_point(dt) for dt in hw.peaks}


def run_show(args: argparse.Namespace) -> int:
    """``perfmodel specs show ID|FILE.yaml``."""
    hw = load_hardware(args.gpu)
    path = _spec_file(args.gpu)
    if args.json:
        out = {
            "file": path,
            "spec": hw.model_dump(mode="json"),
            "derived": {"ridge_point_flop_per_byte": ridge_points(hw),
                        "achievable_ridge_point_flop_per_byte": achievable_ridge_points(hw)},
            "provenance": [{"figure": figure, "value": value, "provenance": text or None}
                           for figure, value, text in describe(hw)],
            "model_constants": model_constants(hw.arch),
            "engines": engine_support(hw),
        }
        print(json.dumps(out, indent=2))
        return 0
    for line in show_lines(hw, path):
        print(line)
    return 0


def show_lines(hw: HardwareSpec, path: str = "") -> list[str]:
    """Human-readable lines for ``specs show``: every field with its unit."""
    facts = [f"vendor {hw.vendor}", f"arch {hw.arch}"]
    if hw.form_factor:
        facts.append(f"form factor {hw.form_factor}")
    if hw.launch_year is not None:
        facts.append(f"launched {hw.launch_year}")
    lines = [f"{hw.id}: {hw.name}", "  " + ", ".join(facts)]
    if path:
        lines.append(f"  file {path}")
    for name in HardwareSpec.model_fields:
        if name in _HEADER_FIELDS:
            continue
        value = getattr(hw, name)
        if value is None or value == "" or value == {}:
            continue
        if name == "efficiency":
            lines.append("")
            lines.extend(_efficiency_lines(hw))
            lines.append("")
            lines.extend(_engine_lines(hw))
            continue
        if isinstance(value, BaseModel):
            block = _model_lines(value, indent=1)
            if block:  # an interconnect with no links says nothing
                lines.append("")
                lines.append(name + ("" if name in hw.model_fields_set else "  (defaults)"))
                lines.extend(block)
            continue
        lines.append("")
        if name == "peaks":
            lines.extend(_peak_lines(hw))
        elif name == "sources":
            lines.append("sources")
            lines.extend(f"  {key}: {text}" for key, text in hw.sources.items())
        else:
            kind = quantity_kind(HardwareSpec.model_fields[name])
            lines.append(f"{name:<26}{_format_value(value, kind)}")
    return lines


def _efficiency_lines(hw: HardwareSpec) -> list[str]:
    """Each efficiency figure with its provenance, then the model constants of the arch."""
    defaults = "" if "efficiency" in hw.model_fields_set else "  (defaults)"
    rows = []
    for figure, value, text in describe(hw):
        kinds: dict[str, Kind] = {"kernel_overhead": "time", "sustained_clock": "frequency"}
        kind = kinds.get(figure, "ratio")
        shown = format_quantity(value, kind, digits=5)
        rows.append([figure, shown, text or "(no provenance stated)"])
    lines = [f"efficiency (figure, value, provenance){defaults}"]
    lines.extend("  " + line for line in _table(["figure", "value", "provenance"], rows)[1:])
    consts = model_constants(hw.arch)
    lines.append("")
    lines.append(f"model constants for {hw.arch} (perfmodel.timing.constants): "
                 f"{consts['per_arch_count']} named '<constant>.{hw.arch}'"
                 + ("" if consts["per_arch_count"] else ", so the global values apply")
                 + "; headline:")
    crows = [[c["name"], _constant_value(c["value"], c["unit"]), c["provenance"]]
             for c in consts["headline"]]
    lines.extend("  " + line for line in _table(["name", "value", "provenance"], crows)[1:])
    return lines


def model_constants(arch: str) -> dict[str, Any]:
    """The model constants that apply to ``arch``: how many have a per-architecture name
    (``<name>.<arch>``) and the headline ones (graph kernel cost, L2, GEMM per-CTA
    bandwidth, split-K reduce cost, each unsplit GEMM family's in-flight share, the
    efficiency of each attention kernel family that runs on ``arch`` as itself,
    :func:`perfmodel.timing.attention_runs_on`) with their values and provenance."""
    from perfmodel.timing import attention_runs_on  # (also registers every constant)
    from perfmodel.timing.constants import PARAMS, arch_name, bundled_constants

    consts = bundled_constants()
    suffix = f".{arch}"
    families = [n.split(".")[1] for n in PARAMS
                if n.startswith("attn.") and n.endswith(".efficiency") and n.count(".") == 2
                and attention_runs_on(n.split(".")[1], arch)]
    # the unsplit GEMM families' in-flight shares for the schemes fitted anywhere
    inflight = [n for n in PARAMS if n.endswith(".cta_inflight") and n.count(".") == 3
                and n in consts.fitted]
    names = [arch_name("graph_kernel_s", arch), "l2_capacity_fraction",
             "l2_bandwidth_fraction", arch_name("gemm_cta_bandwidth", arch),
             arch_name("gemm_split_reduce", arch),
             *(arch_name(n, arch) for n in inflight),
             *(arch_name(f"attn.{f}.efficiency", arch) for f in families)]
    return {
        "arch": arch,
        "per_arch_count": sum(n.endswith(suffix) for n in PARAMS),
        "headline": [{"name": n, "value": consts[n], "unit": PARAMS[n].unit,
                      "provenance": consts.provenance(n)} for n in names if n in PARAMS],
    }


def engine_support(hw: HardwareSpec) -> dict[str, dict[str, Any]]:
    """Per engine (``trtllm``, ``vllm``, ``sglang``): whether it runs on ``hw`` and, where it
    does, the kernel families its profile runs there (:mod:`perfmodel.engines`): attention
    for prefill and decode (a GQA group of 4, over a 16-bit and an fp8 KV cache where the
    GPU has fp8; ``decode_few_blocks``: the kernel of a 16-bit decode call too small for
    XQA, :func:`perfmodel.engines.trtllm_xqa_pays`) and the GEMM of each quantization scheme
    the GPU has a peak for; where it does not, why
    (:func:`perfmodel.engines.engine_refusal`)."""
    from perfmodel.engines import (
        ENGINES,
        attention_kernel,
        engine_refusal,
        gemm_kernel,
        gemm_kernel_for_rows,
        gemm_rows_bound,
    )

    out: dict[str, dict[str, Any]] = {}
    for engine in ENGINES[1:]:  # the named engines (not "none")
        refusal = engine_refusal(engine, hw.arch)
        if refusal is not None:
            out[engine] = {"runs": False, "why": refusal.problem}
            continue
        kvs = ("bf16", "fp8") if "fp8" in hw.peaks else ("bf16",)
        attention = {f"{phase}{'' if kv == 'bf16' else ' (fp8 KV)'}":
                     attention_kernel(engine, hw.arch, phase, kv_dtype=kv, group=4.0).impl
                     for kv in kvs for phase in ("prefill", "decode")}
        schemes = [q for q, dt in (("per-tensor", "fp8"), ("block", "fp8"), ("nvfp4", "fp4"))
                   if dt in hw.peaks]
        gemm = {q: gemm_kernel(engine, hw.arch, q).impl for q in ("none", *schemes)}
        few = {q: gemm_kernel_for_rows(engine, hw.arch, q, 1.0).impl
               for q in gemm if gemm_rows_bound(engine, hw.arch, q) is not None}
        # a decode call with too few XQA blocks for the SMs (TensorRT-LLM's dispatch)
        small = attention_kernel(engine, hw.arch, "decode", group=4.0, xqa_pays=False).impl
        out[engine] = {"runs": True, "attention": attention, "gemm": gemm,
                       **({"gemm_few_rows": few} if few else {}),
                       **({"decode_few_blocks": small}
                          if small != attention["decode"] else {})}
    return out


def _engine_lines(hw: HardwareSpec) -> list[str]:
    """``specs show``'s engine block: each engine's kernels here, or why it does not run."""
    from perfmodel.engines import gemm_rows_bound

    lines = ["engines (the kernels each engine profile runs here: perfmodel.engines)"]
    for engine, info in engine_support(hw).items():
        if not info["runs"]:
            lines.append(f"  {engine:<7} does not run here: {info['why']}")
            continue
        small = info.get("decode_few_blocks")
        attn = ", ".join(f"{k} {_native(v, hw.arch)}"
                         + (f" ({small} where XQA blocks x 4 < {hw.compute.units} SMs)"
                            if k == "decode" and small else "")
                         for k, v in info["attention"].items())
        few = info.get("gemm_few_rows", {})
        gemm = ", ".join(f"{'bf16' if k == 'none' else k} "
                         + (f"{few[k]} < {gemm_rows_bound(engine, hw.arch, k):.0f} rows, "
                            if k in few else "") + v for k, v in info["gemm"].items())
        lines.append(f"  {engine:<7} attention: {attn}; GEMM: {gemm}")
    return lines


def _native(impl: str, arch: str) -> str:
    """``flash`` (the architecture's native fused kernel) with the family it is there."""
    from perfmodel.timing.family import family_params

    return f"flash (native: {family_params(arch).flash_impl})" if impl == "flash" else impl


def _constant_value(value: float, unit: str) -> str:
    return format_quantity(value, "time", digits=4) if unit == "s" else f"{value:g}"


def _peak_lines(hw: HardwareSpec) -> list[str]:
    unit_name = hw.compute.unit_name
    header = ["dtype", "dense peak", "unit", f"FLOPs/clock/{unit_name}", "sparse peak",
              "ridge: datasheet", "achievable"]
    rows: list[list[str]] = []
    achievable = achievable_ridge_points(hw)
    cut = any(pk.full_rate_flops_per_clock_per_unit is not None for pk in hw.peaks.values())
    if cut:
        header.append("share of design")
    for dt, pk in hw.peaks.items():
        per_clock = pk.flops_per_clock_per_unit
        rows.append([
            dt, _rate(pk.peak, dt), pk.unit,
            "-" if per_clock is None else f"{per_clock:g}",
            _rate(pk.sparse_peak, dt), f"{hw.ridge_point(dt):.1f}", f"{achievable[dt]:.1f}",
        ] + ([f"{hw.tensor_share(dt):.3g}" if pk.unit == "tensor" else "-"] if cut else []))
    lines = ["peaks (dense)"]
    lines.extend("  " + line for line in _table(header, rows, right=(5, 6)))
    if cut:
        lines.extend(textwrap.wrap(SHARE_NOTE, width=96, initial_indent="  ",
                                   subsequent_indent="  "))
    lines.extend(textwrap.wrap(RIDGE_NOTE, width=96, initial_indent="  ",
                               subsequent_indent="  "))
    return lines


#: What the "share of design" column means.
SHARE_NOTE = ("share of design: the part of its SM design's tensor rate this product keeps "
              "(peak / (units x clock x full_rate_flops_per_clock_per_unit)); the rest of the "
              "SM is the design's, so small tiles and attention kernels lose less of this rate "
              "than on the full-rate part")


#: The two ridge points, said once wherever one is shown.
RIDGE_NOTE = ("ridge point (FLOP/byte where a kernel turns compute-bound): datasheet = dense "
              "peak / memory bandwidth; achievable = the rates predictions use (peak × compute "
              "fraction × clock ratio) / (bandwidth × memory fraction)")


def achievable_ridge_points(hw: HardwareSpec) -> dict[str, float]:
    """Ridge point per dtype at the rates a GEMM prediction uses (achievable compute rate /
    achievable bandwidth, calibration included), FLOP/byte."""
    from perfmodel.timing.knobs import knobs_for

    out: dict[str, float] = {}
    for dt in hw.peaks:
        k = knobs_for(hw, "gemm", dt)
        out[dt] = k.rate / k.achievable_bandwidth
    return out


def _rate(value: float | None, dtype: str) -> str:
    """A peak for display: FLOP/s, or OP/s for integer dtypes; "-" when absent."""
    if value is None:
        return "-"
    text = format_quantity(value, "flops", digits=6, prefix="T")
    return text.replace("FLOP/s", "OP/s") if dtype in _INTEGER_DTYPES else text


def _model_lines(model: BaseModel, indent: int) -> list[str]:
    pad = "  " * indent
    width = max(len(name) for name in type(model).model_fields) + 2
    lines: list[str] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None or value == "" or value == {}:
            continue
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}")
            lines.extend(_model_lines(value, indent + 1))
            continue
        default = "" if name in model.model_fields_set else "  (default)"
        if isinstance(model, MemorySpec) and name == "capacity":
            text = format_capacity(value, model.type)  # "80 GB HBM3 (85.9 × 10⁹ B)"
        else:
            text = _format_value(value, quantity_kind(info))
        lines.append(f"{pad}{name:<{width}}{text}{default}")
    return lines


def _format_value(value: object, kind: Any) -> str:
    """A field's value for display: quantities with units, mappings as ``key value`` pairs."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_format_value(v, kind)}" for k, v in value.items())
    if kind is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_quantity(float(value), kind, digits=5)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ----------------------------------------------------------------------------- validate
def run_validate(args: argparse.Namespace) -> int:
    """``perfmodel specs validate FILE.yaml [FILE ...]``: 0 if all valid, else 2."""
    results: list[dict[str, Any]] = []
    for name in args.files:
        try:
            hw = load_hardware(name)
        except SpecError as exc:
            results.append({"file": name, "ok": False, "id": None, "errors": exc.errors})
        except (PerfmodelError, PerfmodelWarning) as exc:
            results.append({"file": name, "ok": False, "id": None, "errors": [str(exc)]})
        else:
            results.append({"file": name, "ok": True, "id": hw.id, "errors": []})
    if args.json:
        print(json.dumps({"results": results}, indent=2))
    for result in results:
        if result["ok"]:
            if not args.json:
                print(f"ok: {result['id']}")
            continue
        errors = [clip_message(e) for e in result["errors"]] or ["invalid spec"]
        if len(errors) == 1:
            print(f"error: {result['file']}: invalid spec: {errors[0]}", file=sys.stderr)
            continue
        print(f"error: {result['file']}: invalid spec:", file=sys.stderr)
        for line in errors:
            print(f"  - {line}", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 2
