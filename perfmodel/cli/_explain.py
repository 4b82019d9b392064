"""Text of ``perfmodel predict``: the Nsight-style explain block, the comparison table and
the one line of advice keyed on the bottleneck."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from perfmodel._units import format_quantity
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops import AllReduce, Attention, Op
from perfmodel.ops.attention import UNFUSED_IMPLS
from perfmodel.timing import Prediction

__all__ = ["advice", "compare_lines", "describe", "explain_lines"]

_LOW_PRECISION = ("fp8", "int8", "fp4", "int4")


def _scalar(x: Any) -> float:
    return float(np.asarray(x, dtype=np.float64))


def _fmt_us(seconds: float) -> str:
    us = seconds * 1e6
    if us >= 1000:
        return f"{us:,.1f} µs ({us / 1000:.3f} ms)"
    return f"{us:.2f} µs"


def _fmt_count(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _fmt_bytes(value: float) -> str:
    return f"{format_quantity(value, 'bytes', digits=4)} ({value:,.0f} B)"


def describe(op: Op) -> str:
    """``gemm m=4096 n=4096 k=4096 batch=1 dtype=bf16``: the op's fields, scalars only."""
    parts: list[str] = []
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        if isinstance(value, np.ndarray):
            number = _scalar(value)
            text = str(int(number)) if number.is_integer() else f"{number:g}"
            parts.append(f"{f.name}={text}")
        elif isinstance(value, bool):
            if value:
                parts.append(f.name)
        elif value is not None:
            parts.append(f"{f.name}={value}")
    return f"{op.name}  " + " ".join(parts)


def _bottleneck_text(p: Prediction) -> str:
    label = str(p.bottleneck)
    ratio = _scalar(p.bottleneck_ratio)
    c, m, o = _scalar(p.compute_s), _scalar(p.memory_s), _scalar(p.overhead_s)
    if label == "latency":
        if o > c and o > m:
            return (f"latency-bound, {ratio:.1f}x (fixed costs over the larger of compute and "
                    "memory)")
        return (f"latency-bound (compute {_scalar(p.compute_util):.1%} and memory "
                f"{_scalar(p.memory_util):.1%} of peak: too little work to fill the GPU)")
    other = "memory" if label == "compute" else "compute"
    return f"{label}-bound, {ratio:.1f}x ({label} part over the larger of {other} and overhead)"


def advice(op: Op, p: Prediction) -> str:
    """One line of advice keyed on the bottleneck."""
    label = str(p.bottleneck)
    if label == "latency":
        return "launch-bound: fuse kernels, use CUDA graphs, or batch more work per launch"
    if label == "compute":
        if _scalar(p.compute_util) < 0.5:
            return ("compute-bound at a low fraction of peak: padded edge tiles or a partly "
                    "filled last wave waste the GPU; use sizes that are multiples of the tile "
                    "and fill whole waves")
        if p.dtype in _LOW_PRECISION:
            return f"near the roofline at {p.dtype}: a faster GPU (or more of them) helps"
        return "near the roofline: a lower-precision dtype (fp8) or a faster GPU helps"
    if isinstance(op, AllReduce):
        return ("link-bound: overlap the all-reduce with compute, shrink the buffer (lower "
                "precision), or use a faster interconnect")
    if isinstance(op, Attention) and op.impl in UNFUSED_IMPLS:
        return ("memory-bound on the S x S score matrix: use a fused (flash) kernel, which "
                "never writes it to HBM")
    if isinstance(op, Attention) and _scalar(np.max(op.seq_q)) * _scalar(
            np.max(op.heads / op.kv_heads)) <= 128:
        return ("KV-cache reads dominate: batch more sequences per step, use GQA/MQA or an "
                "fp8 KV cache")
    return "fuse with neighbours or batch more to raise arithmetic intensity"


def _detail_lines(p: Prediction) -> list[str]:
    d = dict(p.details)
    out: list[str] = []
    if "tile_m" in d and "tile_n" in d:
        out.append(f"tile {_scalar(d.pop('tile_m')):g}x{_scalar(d.pop('tile_n')):g}")
    if "split_k" in d:
        out.append(f"split-K {_scalar(d.pop('split_k')):g}")
    if "waves" in d:
        out.append(f"waves {_scalar(d.pop('waves')):g}")
    if "impl" in d:
        out.append(f"{'kernel family' if p.op == 'gemm' else 'attention path'} "
                   f"{d.pop('impl')}")
    if "q_tile" in d:
        out.append(f"query tile {_scalar(d.pop('q_tile')):g}")
    if "splits" in d:
        out.append(f"KV splits {_scalar(d.pop('splits')):g}")
    if "ctas" in d:
        out.append(f"CTAs {_scalar(d.pop('ctas')):g}")
    if "resident" in d:
        out.append(f"{_scalar(d.pop('resident')):g} per SM")
    if "link_s" in d:
        out.append(f"link time {_fmt_us(_scalar(d.pop('link_s')))}")
    for key, value in d.items():
        if isinstance(value, (np.ndarray, float, int)) and not isinstance(value, bool):
            out.append(f"{key.replace('_', ' ')} {_scalar(value):g}")
        else:
            out.append(f"{key.replace('_', ' ')} {value}")
    return out


def _ridge_note(p: Prediction, hw: HardwareSpec) -> str:
    """Which ridge point that was: the achievable one, with the datasheet one beside it."""
    if p.op == "allreduce" or not hw.supports(p.dtype):
        return "(ridge point at the achievable rates the prediction uses)"
    return (f"(achievable: the rates the prediction uses; datasheet peak / bandwidth "
            f"{hw.ridge_point(p.dtype):.4g} FLOP/B)")


def explain_lines(op: Op, p: Prediction, hw: HardwareSpec) -> list[str]:
    """The Nsight-style explain block for a scalar prediction."""
    w = 30

    def row(label: str, value: str, indent: int = 2) -> str:
        pad = " " * indent
        return f"{pad}{label:<{w - indent + 2}}{value}".rstrip()

    ai = _scalar(p.arithmetic_intensity)
    ridge = p.ridge_point
    side = "compute side" if ai >= ridge else "memory side"
    ratio = ai / ridge if ridge > 0 else math.inf
    lines = [
        describe(op),
        f"GPU  {hw.id} ({hw.name})",
        "",
        row("Duration", _fmt_us(_scalar(p.latency_s))),
        row("Compute (SM) Throughput", f"{_scalar(p.compute_util) * 100:.1f} %"),
        row("Memory Throughput", f"{_scalar(p.memory_util) * 100:.1f} %"),
        row("Arithmetic Intensity",
            f"{ai:.4g} FLOP/B vs ridge point {ridge:.4g} FLOP/B ({ratio:.3g}x: {side})"),
        row("", _ridge_note(p, hw)),
        row("FLOPs", _fmt_count(_scalar(p.flops), "FLOP")),
        row("Bytes (modelled)", _fmt_bytes(_scalar(p.bytes))),
        row("Bytes (minimum)", _fmt_bytes(_scalar(p.bytes_min))),
        "",
        "  Latency parts",
        row("compute", _fmt_us(_scalar(p.compute_s)), 4),
        row("memory", _fmt_us(_scalar(p.memory_s)), 4),
        row("overhead", _fmt_us(_scalar(p.overhead_s)) + "  (launch, prologue, tile fill)", 4),
        row("Bottleneck", _bottleneck_text(p)),
    ]
    details = _detail_lines(p)
    if details:
        lines += ["", row("Model", ", ".join(details))]
    if p.stages:
        lines += ["", f"  Stages ({len(p.stages)} kernels)"]
        header = f"    {'stage':<12}{'duration':>14}  {'compute %':>9}  {'memory %':>8}  bottleneck"
        lines.append(header)
        for name, s in p.stages:
            lines.append(
                f"    {name:<12}{_scalar(s.latency_s) * 1e6:>11.2f} µs  "
                f"{_scalar(s.compute_util) * 100:>9.1f}  {_scalar(s.memory_util) * 100:>8.1f}  "
                f"{s.bottleneck} ({_scalar(s.latency_s) / _scalar(p.latency_s):.0%} of time)"
            )
    lines += ["", f"  Advice: {advice(op, p)}"]
    return lines


def compare_lines(op: Op, results: Sequence[tuple[HardwareSpec, Prediction | None, str]]
                  ) -> list[str]:
    """A table of one op across GPUs."""
    header = ["GPU", "DURATION", "VS FIRST", "COMPUTE %", "MEMORY %", "BOTTLENECK"]
    first = next(p for _, p, _ in results if p is not None)
    base = _scalar(first.latency_s)
    rows: list[list[str]] = []
    for hw, p, err in results:
        if p is None:
            rows.append([hw.id, "-", "-", "-", "-", f"n/a: {err}"])
            continue
        lat = _scalar(p.latency_s)
        rows.append([
            hw.id, f"{lat * 1e6:,.2f} µs", f"{base / lat:.2f}x",
            f"{_scalar(p.compute_util) * 100:.1f}", f"{_scalar(p.memory_util) * 100:.1f}",
            f"{p.bottleneck} ({_scalar(p.bottleneck_ratio):.1f}x)",
        ])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = (1, 2, 3, 4)

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(wd) if i in right else c.ljust(wd)
                         for i, (c, wd) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [describe(op), "", line(header), *(line(r) for r in rows),
            "", "VS FIRST: speed relative to the first GPU with a result (>1 is faster)."]
