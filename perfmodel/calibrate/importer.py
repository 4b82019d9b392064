"""Your own profiles as measurements: read a ``torch.profiler`` trace or an Nsight Compute
export, group its op calls by shape, write them as rows of the shared measurement schema,
and hold each next to the model's prediction.

    capture = read_capture("trace.json")                    # or "ncu.csv"
    groups = group_calls(capture)                           # one per (op, dtype, path, shape)
    rows = measurement_rows(capture, groups, spec_id="h100-sxm")
    report = explain(capture, load_hardware("h100-sxm"))    # measured vs predicted per group

A group's measured time is the median over its calls (each call: the sum of its kernels
on a GPU; its span on the host thread on a CPU). Predictions follow ``perfmodel validate``:
dtype rule, attention kernel path from ``impl``, and the timing floor of the capture's
``timing`` code (:data:`perfmodel.validation.TIMING_FLOORS`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.capture import Capture, Unit, Unmatched, resolve_device
from perfmodel.calibrate.opmap import MappedOp
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.attention import Attention
from perfmodel.ops.elementwise import Activation, Elementwise, Norm, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.timing import Prediction, predict
from perfmodel.validation import dtype_rule, kernel_path, stream_op, timing_floor

__all__ = [
    "SOURCES", "Explained", "OpGroup", "build_op", "explain", "group_calls",
    "measured_bottleneck", "measurement_rows", "read_capture", "spec_id_of",
    "unmatched_summary",
]

#: ``source`` column of imported rows, per capture format.
SOURCES = {"torch-profiler": "torch-profiler-trace", "nsight-compute": "nsight-compute"}


def read_capture(path: str | Path, *, dtype: str | None = None,
                 causal: bool = False) -> Capture:
    """Read a torch.profiler trace (JSON, optionally gzip) or an Nsight Compute CSV export,
    told apart by content. ``dtype``/``causal`` apply to Nsight exports, which record
    neither (a trace records both)."""
    from perfmodel.calibrate.ncu import read_ncu
    from perfmodel.calibrate.trace import read_trace

    p = Path(path)
    head = b""
    if p.is_file():
        with p.open("rb") as fh:
            head = fh.read(4096)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    is_json = head[:2] == b"\x1f\x8b" or text[:1] in (b"{", b"[")
    if not text and p.suffix.lower() in (".json", ".gz"):
        is_json = True
    if is_json:
        return read_trace(path)
    return read_ncu(path, dtype=dtype, causal=causal)


@dataclass(frozen=True)
class OpGroup:
    """Calls of one op with one shape: their times, s; the median is the measurement.
    Throughputs (Nsight exports) are time-weighted means over the calls, %."""

    op: MappedOp
    times_s: tuple[float, ...]
    source_ops: tuple[str, ...]
    kernels: tuple[str, ...]
    sm_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None

    @property
    def calls(self) -> int:
        return len(self.times_s)

    @property
    def measured_s(self) -> float:
        """Median time of one call, s."""
        return float(statistics.median(self.times_s))

    @property
    def total_s(self) -> float:
        return float(sum(self.times_s))


def _mean(units: Sequence[Unit] | Sequence[Unmatched], name: str) -> float | None:
    pairs = [(getattr(u, name), u.measured_s) for u in units if getattr(u, name) is not None]
    weight = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / weight if pairs and weight > 0 else None


def group_calls(capture: Capture) -> list[OpGroup]:
    """One :class:`OpGroup` per distinct op (op, dtype, path, shape), in order of first
    call."""
    buckets: dict[tuple[Any, ...], list[Unit]] = {}
    for unit in capture.units:
        buckets.setdefault(unit.op.key(), []).append(unit)
    return [OpGroup(op=units[0].op, times_s=tuple(u.measured_s for u in units),
                    source_ops=tuple(dict.fromkeys(u.source_op for u in units)),
                    kernels=tuple(dict.fromkeys(k for u in units for k in u.kernels)),
                    sm_pct=_mean(units, "sm_pct"), memory_pct=_mean(units, "memory_pct"),
                    dram_pct=_mean(units, "dram_pct"))
            for units in buckets.values()]


def _flops(op: MappedOp) -> float:
    if op.op == "gemm":
        return 2.0 * (op.batch or 1) * (op.m or 0) * (op.n or 0) * (op.k or 0)
    built = build_op(op, op.dtype) if op.op == "attention" else None
    return float(np.asarray(built.flops())) if isinstance(built, Attention) else 0.0


def spec_id_of(capture: Capture) -> str:
    """The bundled spec id the capture's device name resolves to, or ''."""
    return resolve_device(capture.device.name) if capture.device.kind == "gpu" else ""


def measurement_rows(capture: Capture, groups: Sequence[OpGroup],
                     spec_id: str = "") -> list[dict[str, object]]:
    """Rows of the shared measurement schema (:data:`perfmodel.measurements.COLUMNS`):
    ``measured_us`` is the median over a group's calls; ``notes`` say how many calls, their
    spread (p90/p10 − 1 over calls), the operator and, for Nsight exports, the measured
    throughputs."""
    gpu = capture.device.name if capture.device.kind == "gpu" else "cpu"
    rows: list[dict[str, object]] = []
    for g in groups:
        t = sorted(g.times_s)
        spread = (float(np.percentile(t, 90)) / float(np.percentile(t, 10)) - 1.0
                  if t[0] > 0 else 0.0)
        notes = [f"calls={g.calls}", f"spread={spread:.3f}", f"from={'+'.join(g.source_ops)}"]
        if g.op.bias:
            notes.append("bias=y")
        if g.op.note:
            notes.append(g.op.note)
        if capture.format == "nsight-compute" and g.op.op == "attention":
            notes.append(f"causal={'given' if g.op.causal else 'assumed-false'}")
        for label, value in (("sm_pct", g.sm_pct), ("memory_pct", g.memory_pct),
                             ("dram_pct", g.dram_pct)):
            if value is not None:
                notes.append(f"{label}={value:.1f}")
        if g.op.op in ("copy", "add"):
            notes.append("m=elements")
        elif g.op.op not in ("gemm", "attention"):
            notes.append("m=rows n=width")
        row: dict[str, object] = {
            "spec": spec_id, "source": SOURCES[capture.format], "gpu": gpu,
            **g.op.columns(), "measured_us": f"{g.measured_s * 1e6:.6g}",
            "timing": capture.timing, "notes": " ".join(notes)}
        flops = _flops(g.op)
        if flops > 0 and g.measured_s > 0:
            row["measured_tflops"] = f"{flops / g.measured_s / 1e12:.5g}"
        rows.append(row)
    return rows


def unmatched_summary(capture: Capture) -> list[dict[str, Any]]:
    """Unmatched kernels/ops aggregated by (name, reason), largest total time first: name,
    kind, reason, context, count, total_s and (Nsight exports) the time-weighted measured
    throughputs with the bottleneck they imply."""
    agg: dict[tuple[str, str], list[Unmatched]] = {}
    for u in capture.unmatched:
        agg.setdefault((u.name, u.reason), []).append(u)
    out: list[dict[str, Any]] = []
    for items in agg.values():
        u = items[0]
        entry: dict[str, Any] = {
            "name": u.name, "kind": u.kind, "reason": u.reason, "context": u.context,
            "count": len(items), "total_s": sum(x.measured_s for x in items)}
        if capture.format == "nsight-compute":
            pct = {k: _mean(items, k) for k in ("sm_pct", "memory_pct", "dram_pct")}
            entry.update(measured_sm_pct=pct["sm_pct"], measured_memory_pct=pct["memory_pct"],
                         measured_dram_pct=pct["dram_pct"],
                         measured_bottleneck=measured_bottleneck(
                             pct["sm_pct"], pct["memory_pct"], pct["dram_pct"]))
        out.append(entry)
    return sorted(out, key=lambda e: -float(e["total_s"]))


# ----------------------------------------------------------------------------- predict
Op = Gemm | Attention | Elementwise | Norm | Activation | Softmax


def build_op(op: MappedOp, dtype: str) -> Op:
    """The perfmodel op of a mapped call, in ``dtype``; attention's kernel path comes from
    its ``impl`` text as in ``perfmodel validate``."""
    if op.op == "gemm":
        return Gemm(m=op.m, n=op.n, k=op.k, batch=op.batch or 1, dtype=dtype, bias=op.bias)
    if op.op == "attention":
        path, splits, _ = kernel_path(op.impl)
        return Attention(batch=op.batch, heads=op.heads, kv_heads=op.kv_heads, seq_q=op.seq_q,
                         seq_kv=op.seq_kv, head_dim=op.head_dim, causal=op.causal, dtype=dtype,
                         impl=path, num_splits=splits)
    return stream_op(op.op, dtype, op.m, op.n or 1)


def measured_bottleneck(sm_pct: float | None, memory_pct: float | None,
                        dram_pct: float | None = None) -> str | None:
    """The bottleneck measured throughputs imply, by the rule the model labels its own
    predictions with: ``latency`` when compute and memory are both under 10 % of peak,
    else the larger. Memory is the DRAM throughput when measured (the model's memory
    utilisation counts device-memory bytes), else Nsight's Memory Throughput."""
    mem = dram_pct if dram_pct is not None else memory_pct
    if sm_pct is None or mem is None:
        return None
    if sm_pct < 10.0 and mem < 10.0:
        return "latency"
    return "compute" if sm_pct >= mem else "memory"


@dataclass(frozen=True)
class Explained:
    """One op group: measured, predicted (None when it could not be), the error, and the
    bottleneck each implies."""

    group: OpGroup
    prediction: Prediction | None
    dtype: str
    floor_s: float
    problem: str = ""

    @property
    def predicted_s(self) -> float | None:
        p = self.prediction
        return None if p is None else float(np.asarray(p.latency_s))

    @property
    def ape(self) -> float | None:
        p = self.predicted_s
        m = self.group.measured_s
        return None if p is None or m <= 0 else abs(p - m) / m

    def to_dict(self) -> dict[str, Any]:
        g, p = self.group, self.prediction

        def num(x: Any) -> float | None:
            v = None if x is None else float(np.asarray(x))
            return v if v is not None and math.isfinite(v) else None

        return {
            "op": g.op.op, "describe": g.op.describe(), **g.op.columns(),
            "predicted_dtype": self.dtype, "calls": g.calls,
            "measured_s": g.measured_s, "predicted_s": num(self.predicted_s),
            "ape": num(self.ape), "floor_s": self.floor_s,
            "predicted_compute_util": num(p.compute_util) if p else None,
            "predicted_memory_util": num(p.memory_util) if p else None,
            "predicted_bottleneck": str(p.bottleneck) if p else None,
            "measured_sm_pct": g.sm_pct, "measured_memory_pct": g.memory_pct,
            "measured_dram_pct": g.dram_pct,
            "measured_bottleneck": measured_bottleneck(g.sm_pct, g.memory_pct, g.dram_pct),
            "operators": list(g.source_ops), "kernels": list(g.kernels),
            "problem": self.problem or None,
        }


def explain(capture: Capture, hw: HardwareSpec) -> list[Explained]:
    """Each op group of ``capture`` with the model's prediction on ``hw``, largest total
    time first. A group the model cannot predict (e.g. a dtype ``hw`` lacks) keeps its
    measurement and says why."""
    floor, _ = timing_floor(capture.timing)
    out: list[Explained] = []
    for g in sorted(group_calls(capture), key=lambda x: -x.total_s):
        dtype = g.op.dtype
        try:
            dtype, _rule = dtype_rule(g.op.dtype, "", hw)
            p = predict(build_op(g.op, dtype), hw, extra_overhead_s=floor)
        except PerfmodelError as exc:
            out.append(Explained(g, None, dtype, floor, str(exc)))
            continue
        out.append(Explained(g, p, dtype, floor))
    return out
