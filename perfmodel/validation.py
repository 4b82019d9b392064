"""Compare predictions with measured times: APE statistics per group, with the bare
roofline as the baseline, and every skipped row with its reason.

APE = |predicted − measured| / measured. Groups are keyed by (spec, source, op, dtype).
Rows are predicted in vectorised batches (one ``predict`` call per distinct device,
op path and timing method), so 30k rows take well under a second.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.dtypes import normalize_dtype
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import (
    Measurement,
    MeasurementSet,
    is_suspect,
    read_measurements,
)
from perfmodel.ops.attention import Attention
from perfmodel.ops.cost import Array
from perfmodel.ops.elementwise import Activation, Elementwise, Norm, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.timing import predict

__all__ = [
    "TIMING_FLOORS",
    "ErrorStats",
    "GroupResult",
    "ValidationReport",
    "dtype_rule",
    "error_stats",
    "kernel_path",
    "stream_op",
    "timing_floor",
    "validate",
]

#: Time a measurement method adds to the kernel time, s, and why. Kernel-timed sources get
#: 0; a CUDA-event pair around an eager PyTorch call also times the host's dispatch gap; a
#: host wall clock with synchronize adds launch and sync; nvbench's cold runs flush L2 and
#: time from an event recorded before the launch.
TIMING_FLOORS: dict[str, tuple[float, str]] = {
    "perfmodel_cuda_event_pair_l2_flushed_median": (
        0.0, "perfmodel's own harness: CUDA events around the kernel, L2 flushed"),
    "perfmodel_cpu_perf_counter_median": (
        0.0, "perfmodel's own harness on the CPU: a monotonic timer around the call"),
    "torch_profiler_kernel_sum_median_of20": (
        0.0, "kernel sum from the profiler: kernel time only"),
    "torch_profiler_kernel_sum_median_of5": (
        5e-6, "kernel sum of the whole attention call: the KV-cache write kernel around the "
              "attention kernel adds ~5 µs"),
    "xla_kernel_tracer_median_of5": (0.0, "per-kernel tracer: kernel time only"),
    "cuda_events_eager_mean_fastest5_of25": (
        6e-6, "CUDA events around one eager call: includes the host dispatch gap (~6 µs)"),
    "host_wallclock_sync_median_of50": (
        15e-6, "host wall clock around call + synchronize: launch and sync (~15 µs)"),
    "nvbench_cold_gpu_time_l2_flushed": (
        11e-6, "nvbench cold GPU time: the rows' own hot times are ~11 µs shorter at small "
               "sizes (L2 refill and the event-timed launch gap)"),
    "torch_profiler_trace_kernel_sum": (
        0.0, "an op call's GPU kernels summed from a torch.profiler trace: kernel time only"),
    "torch_profiler_trace_cpu_op": (
        0.0, "an op call's span on its host thread in a torch.profiler trace of a CPU run: "
             "the work plus dispatch, which a CPU spec's fixed cost covers"),
    "ncu_gpu_time_duration": (
        0.0, "Nsight Compute gpu__time_duration: kernel time only (ncu's default base clocks "
             "and cache flush can make it longer than at boost clocks)"),
}


#: Other properties of a timing method that change what a fair prediction is.
_METHOD_TRAITS: dict[str, tuple[str, ...]] = {
    "xla_kernel_tracer_median_of5": ("median_over_kernel_events",),
}


def timing_floor(code: str) -> tuple[float, str]:
    """Timing-method floor for a ``timing`` code: (seconds, explanation).
    Unknown codes get 0 (kernel time) and say so."""
    if code in TIMING_FLOORS:
        return TIMING_FLOORS[code]
    if "eager" in code or "cuda_events" in code:
        return 6e-6, f"unknown code {code!r} names an eager/event method: ~6 µs host gap"
    if "wallclock" in code or "host" in code:
        return 15e-6, f"unknown code {code!r} names a host clock: ~15 µs launch and sync"
    return 0.0, f"unknown timing code {code!r}: kernel time only assumed"


_UNFUSED = re.compile(r"\b(naive|math|unfused|bmm|eager attention)\b", re.IGNORECASE)


def kernel_path(impl_text: str, phase: str = "") -> tuple[str, int | str, str]:
    """Map a row's ``impl`` text to (kernel path, num_splits, rule used).

    Attention rows are fused unless ``impl`` names an unfused path (naive, math, unfused,
    bmm). FlashAttention's KV-cache entry points run the paged kernel; through the C++ API
    (``mha_fwd_kvcache``) the caller passes ``num_splits`` (1 unless stated), while the
    Python ``flash_attn_with_kvcache`` chooses splits automatically.
    """
    text = impl_text.lower()
    if _UNFUSED.search(text):
        return "naive", "auto", "impl names an unfused path -> naive"
    splits: int | str = "auto"
    match = re.search(r"num_splits\s*=\s*(\d+)", text)
    if "kvcache" in text or "paged" in text:
        if "mha_fwd_kvcache" in text or "c++" in text:
            splits = 1
            rule = "paged-KV kernel via the C++ API -> paged, num_splits=1"
        else:
            rule = "paged-KV kernel via the Python API -> paged, num_splits=auto"
        if match:
            splits = int(match.group(1))
        return "paged", splits, rule
    if "flash-attn 3" in text or "fa3" in text or "flash3" in text or "cudnn" in text:
        return "flash3", "auto", "FA3/cuDNN-class fused kernel -> flash3"
    if "flash-attn 2" in text or "fa2" in text or "flash2" in text:
        return "flash2", "auto", "FlashAttention-2 fused kernel -> flash2"
    return "flash", "auto", "fused by default -> the architecture's native flash kernel"


@dataclass(frozen=True)
class ErrorStats:
    """APE statistics as fractions (0.05 = 5 %)."""

    n: int
    median_ape: float
    p90_ape: float
    mape: float

    def to_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "median_ape": self.median_ape, "p90_ape": self.p90_ape,
                "mape": self.mape}


def error_stats(predicted: Array, measured: Array) -> ErrorStats:
    """Median, 90th percentile and mean of |p − m| / m."""
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    if p.size == 0:
        return ErrorStats(0, float("nan"), float("nan"), float("nan"))
    ape = np.abs(p - m) / m
    return ErrorStats(int(p.size), float(np.median(ape)), float(np.percentile(ape, 90)),
                      float(np.mean(ape)))


@dataclass(frozen=True)
class GroupResult:
    """Statistics of one (spec, source, op, dtype) group, ours and the bare roofline's."""

    spec: str
    source: str
    op: str
    dtype: str
    ours: ErrorStats
    baseline: ErrorStats
    timing: str
    floor_s: float
    floor_rule: str
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "source": self.source, "op": self.op, "dtype": self.dtype,
                **self.ours.to_dict(), "baseline": self.baseline.to_dict(),
                "timing": self.timing, "floor_us": self.floor_s * 1e6,
                "floor_rule": self.floor_rule, "kernel_paths": list(self.paths)}


@dataclass(frozen=True)
class ValidationReport:
    """Result of :func:`validate`. ``rows``/``predicted_s``/``baseline_s`` are aligned."""

    overall: ErrorStats
    overall_baseline: ErrorStats
    groups: tuple[GroupResult, ...]
    skipped: tuple[tuple[int, str], ...]
    rows: tuple[Measurement, ...] = ()
    predicted_s: Array = field(default_factory=lambda: np.zeros(0))
    baseline_s: Array = field(default_factory=lambda: np.zeros(0))

    @property
    def mean_group_median(self) -> float:
        return float(np.mean([g.ours.median_ape for g in self.groups])) if self.groups else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": {**self.overall.to_dict(), "mean_group_median_ape": self.mean_group_median,
                        "baseline": self.overall_baseline.to_dict()},
            "groups": [g.to_dict() for g in self.groups],
            "skipped": [{"row": r, "reason": why} for r, why in self.skipped],
        }


StreamOp = Elementwise | Norm | Activation | Softmax


def stream_op(op: str, dtype: str, m: Any, n: Any = 1) -> StreamOp:
    """The perfmodel op of a streaming measurement row: ``copy``/``add`` over m elements;
    ``rmsnorm``/``layernorm``/``silu_mul``/``silu``/``gelu``/``softmax`` over m rows of width
    n."""
    if op == "copy":
        return Elementwise(m, reads=1, writes=1, flops_per_element=0, dtype=dtype, kind="copy")
    if op == "add":
        return Elementwise(m, reads=2, writes=1, flops_per_element=1, dtype=dtype, kind="add")
    if op in ("rmsnorm", "layernorm"):
        return Norm(m, n, kind="rms" if op == "rmsnorm" else "layer", dtype=dtype)
    if op in ("silu_mul", "silu", "gelu"):
        return Activation(m, n, kind=op, dtype=dtype)
    if op == "softmax":
        return Softmax(m, n, dtype=dtype)
    raise PerfmodelError("op", f"unknown streaming op {op!r}",
                         "use copy, add, rmsnorm, layernorm, silu_mul, silu, gelu or softmax")


def _batch_key(row: Measurement) -> tuple[Any, ...]:
    if row.op not in ("gemm", "attention"):
        return (row.op, row.dtype, row.timing)
    if row.op == "gemm":
        return (row.op, row.dtype, "bias=y" in row.notes.lower() or "bias=true" in
                row.impl.lower(), row.timing)
    path, splits, _ = kernel_path(row.impl, row.phase)
    return (row.op, row.dtype, row.causal, path, splits, row.timing)


def _arr(rows: Sequence[Measurement], name: str, default: int) -> Array:
    return np.asarray([getattr(r, name) or default for r in rows], dtype=np.float64)


def dtype_rule(dtype: str, notes: str, spec: HardwareSpec) -> tuple[str, str]:
    """The dtype to predict a row with, from its ``dtype`` and ``notes`` columns, and the
    rule used. XLA's default f32 precision runs TF32 where the hardware has it and full
    fp32 where it has none (CDNA4)."""
    dtype = normalize_dtype(dtype)
    if dtype == "tf32" and "tf32" not in spec.peaks and "f32_xla_default" in notes:
        return "fp32", "XLA default f32 on a device without TF32 -> fp32"
    return dtype, ""


def _build(rows: Sequence[Measurement], key: tuple[Any, ...],
           dtype: str) -> Gemm | Attention | StreamOp:
    if key[0] not in ("gemm", "attention"):
        return stream_op(key[0], dtype, _arr(rows, "m", 1), _arr(rows, "n", 1))
    if key[0] == "gemm":
        return Gemm(m=_arr(rows, "m", 1), n=_arr(rows, "n", 1), k=_arr(rows, "k", 1),
                    batch=_arr(rows, "batch", 1), dtype=dtype, bias=bool(key[2]))
    heads = _arr(rows, "heads", 1)
    kv = np.asarray([r.kv_heads or r.heads or 1 for r in rows], dtype=np.float64)
    return Attention(batch=_arr(rows, "batch", 1), heads=heads, kv_heads=kv,
                     seq_q=_arr(rows, "seq_q", 1), seq_kv=_arr(rows, "seq_kv", 1),
                     head_dim=_arr(rows, "head_dim", 1), causal=bool(key[2]), dtype=dtype,
                     impl=str(key[3]), num_splits=key[4])


def _bare_roofline(op: Gemm | Attention | StreamOp, hw: HardwareSpec) -> Array:
    if isinstance(op, (Gemm, Attention)):
        flops, bytes_min = op.flops(), op.bytes_min()
        peak = hw.peak(op.dtype)
    else:  # streaming ops: vector FLOPs at the fp32 (vector) peak
        cost = op.cost()
        flops, bytes_min = cost.flops, cost.bytes_min
        peak = hw.peaks["fp32"].peak if "fp32" in hw.peaks else hw.peak(op.dtype)
    return np.asarray(np.maximum(flops / peak, bytes_min / hw.memory.bandwidth),
                      dtype=np.float64)


def validate(records: MeasurementSet | str | Path | Iterable[Measurement],
             hw: HardwareSpec | str | None = None, *,
             include_suspect: bool = False) -> ValidationReport:
    """Predict every measured row and report errors per (spec, source, op, dtype).

    ``hw`` replaces each row's ``spec`` column (required when the CSV has none). The
    timing-method floor of each row's ``timing`` code (:data:`TIMING_FLOORS`) is added to
    the kernel prediction; the kernel path comes from its ``impl`` (:func:`kernel_path`).
    Rows whose notes say SUSPECT (a source's value implies more than the dense peak) are
    skipped with that reason unless ``include_suspect``.
    """
    if isinstance(records, (str, Path)):
        records = read_measurements(records)
    if isinstance(records, MeasurementSet):
        rows = list(records.rows)
        skipped = list(records.skipped)
    else:
        rows, skipped = list(records), []
    fixed = load_hardware(hw) if hw is not None else None
    batches: dict[tuple[Any, ...], list[Measurement]] = defaultdict(list)
    for row in rows:
        if not include_suspect and is_suspect(row.notes):
            skipped.append((row.row, "notes say SUSPECT: implied FLOP/s above the device's "
                                     "dense peak (pass include_suspect=True to keep it)"))
            continue
        if fixed is None and not row.spec:
            skipped.append((row.row, "no spec column and no --gpu given"))
            continue
        spec_id = row.spec if fixed is None else fixed.id
        batches[(spec_id,) + _batch_key(row)].append(row)  # noqa: RUF005

    kept: list[Measurement] = []
    pred: list[Array] = []
    base: list[Array] = []
    paths: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for key, group in batches.items():
        spec_id = key[0]
        try:
            spec = fixed or load_hardware(spec_id)
            dtype, _rule = dtype_rule(group[0].dtype, group[0].notes, spec)
            op = _build(group, key[1:], dtype)
            floor, _ = timing_floor(group[0].timing)
            p = predict(op, spec, extra_overhead_s=floor)
            b = _bare_roofline(op, spec)
        except PerfmodelError as exc:
            skipped.extend((r.row, f"{spec_id}: {exc}") for r in group)
            continue
        kept.extend(group)
        latency = np.atleast_1d(np.asarray(p.latency_s, dtype=np.float64))
        if "median_over_kernel_events" in _METHOD_TRAITS.get(group[0].timing, ()):
            # the source reports the median over individual kernel events: for an op of
            # two kernels (split-K main + reduce) that is their mean, i.e. latency / 2
            kernels = np.atleast_1d(np.asarray(p.details.get("kernels", 1.0), dtype=np.float64))
            latency = latency / np.maximum(kernels, 1.0)
        pred.append(latency)
        base.append(np.atleast_1d(b))
        for r in group:
            label = r.op
            if r.op == "attention":
                label = f"{key[4]} (num_splits={key[5]}): {kernel_path(r.impl)[2]}"
            paths[(spec_id, r.source, r.op, r.dtype)].add(str(label))

    predicted = np.concatenate(pred) if pred else np.zeros(0)
    baseline = np.concatenate(base) if base else np.zeros(0)
    measured = np.asarray([r.measured_s for r in kept], dtype=np.float64)
    index: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(kept):
        index[(fixed.id if fixed else r.spec, r.source, r.op, r.dtype)].append(i)
    groups = []
    for gkey in sorted(index):
        idx = np.asarray(index[gkey])
        code = kept[idx[0]].timing
        floor, rule = timing_floor(code)
        groups.append(GroupResult(
            spec=gkey[0], source=gkey[1], op=gkey[2], dtype=gkey[3],
            ours=error_stats(predicted[idx], measured[idx]),
            baseline=error_stats(baseline[idx], measured[idx]),
            timing=code, floor_s=floor, floor_rule=rule, paths=tuple(sorted(paths[gkey])),
        ))
    return ValidationReport(
        overall=error_stats(predicted, measured), overall_baseline=error_stats(baseline, measured),
        groups=tuple(groups), skipped=tuple(sorted(skipped)), rows=tuple(kept),
        predicted_s=predicted, baseline_s=baseline,
    )
