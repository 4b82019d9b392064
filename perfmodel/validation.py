"""Compare predictions with measured times: APE statistics per group, with the bare
roofline as the baseline, and every skipped row with its reason.

APE = |predicted − measured| / measured. Groups are keyed by (spec, source, op, dtype).
Rows are predicted in vectorised batches (one ``predict`` call per distinct device,
op path and timing method), so 30k rows take well under a second.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel.dtypes import normalize_dtype
from perfmodel.engines import (
    attention_kernel_for_label,
    gemm_dispatch,
    gemm_kernel_for_label,
    trtllm_xqa_pays,
)
from perfmodel.hardware.catalog import load_hardware, resolve_id
from perfmodel.hardware.spec import HardwareSpec, spec_fitted_sources
from perfmodel.measurements import (
    Measurement,
    MeasurementSet,
    is_suspect,
    read_measurements,
)
from perfmodel.ops.attention import Attention
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Array
from perfmodel.ops.elementwise import Activation, Elementwise, Norm, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.ops.registry import ROW_OPS, STREAM_ROW_OPS, RowOp
from perfmodel.timing import predict
from perfmodel.timing.comm_params import SOURCES as COMM_SOURCES
from perfmodel.timing.constants import Constants, bundled_constants
from perfmodel.timing.context import L2State, Launch, RunContext
from perfmodel.timing.prediction import Prediction

__all__ = [
    "GROUP_FIELDS",
    "TIMING_FLOORS",
    "Batch",
    "ErrorStats",
    "GroupResult",
    "Prepared",
    "ValidationReport",
    "concat",
    "dtype_rule",
    "error_stats",
    "group_key",
    "group_label",
    "group_results",
    "implausible",
    "in_sample",
    "kernel_path",
    "prepare",
    "run_context",
    "stream_op",
    "timing_floor",
    "validate",
]

#: Time a measurement method adds to the kernel time, s, and why. Kernel-timed sources get
#: 0; a CUDA-event pair around an eager PyTorch call also times the host's dispatch gap; a
#: host wall clock with synchronize adds launch and sync; nvbench's cold runs flush L2 and
#: time from an event recorded before the launch.
TIMING_FLOORS: Mapping[str, tuple[float, str]] = MappingProxyType({
    "perfmodel_cuda_event_pair_l2_flushed_spin_ahead_median": (
        0.0, "perfmodel's own harness: CUDA events around the kernel, L2 flushed, each batch "
             "of samples behind a GPU spin so host dispatch stays out of the pair"),
    "perfmodel_cuda_event_pair_l2_flushed_median": (
        0.0, "perfmodel's own harness before the spin ahead (to 2026-12-04): CUDA events "
             "around the kernel, L2 flushed; a pair could hold host dispatch when the host "
             "fell behind the GPU (flagged unstable)"),
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
    "aic_cuda_graph_replay_mean": (
        0.0, "AIConfigurator: mean of CUDA-graph replays, no L2 flush: graph kernel floors, "
             "operands that fit L2 (with the collector's rotated weight copies) stay warm"),
    "aic_cuda_events_eager_mean_of6": (
        0.0, "AIConfigurator eager calls between CUDA events, no L2 flush: the call takes at "
             "least the engine wrapper's host dispatch time"),
    "nccl_tests_out_of_place_avg": (
        0.0, "nccl-tests (all_reduce_perf): average time of an out-of-place collective over "
             "many back-to-back iterations between CUDA events: the collective's own time"),
    "torch_profiler_trace_kernel_sum": (
        0.0, "an op call's GPU kernels summed from a torch.profiler trace: kernel time only"),
    "torch_profiler_trace_cpu_op": (
        0.0, "an op call's span on its host thread in a torch.profiler trace of a CPU run: "
             "the work plus dispatch, which a CPU spec's fixed cost covers"),
    "ncu_gpu_time_duration": (
        0.0, "Nsight Compute gpu__time_duration: kernel time only (ncu's default base clocks "
             "and cache flush can make it longer than at boost clocks)"),
})

#: How each timing method launches kernels and leaves the L2 (see
#: :class:`perfmodel.timing.context.RunContext`); methods not listed: stream launches,
#: cold L2.
_METHOD_CONTEXT: Mapping[str, tuple[Launch, L2State]] = MappingProxyType({
    "aic_cuda_graph_replay_mean": ("graph", "warm"),
    "aic_cuda_events_eager_mean_of6": ("eager", "warm"),
})


#: Other properties of a timing method that change what a fair prediction is.
_METHOD_TRAITS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "xla_kernel_tracer_median_of5": ("median_over_kernel_events",),
})


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
    bmm); ``math`` (PyTorch's MATH backend) computes in fp32. FlashAttention's KV-cache
    entry points run the paged kernel; through the C++ API (``mha_fwd_kvcache``) the caller
    passes ``num_splits`` (1 unless stated), while the Python ``flash_attn_with_kvcache``
    chooses splits automatically.
    """
    text = impl_text.lower()
    if _UNFUSED.search(text):
        if re.search(r"\bmath\b", text):
            return "math", "auto", ("PyTorch's MATH backend -> math (unfused, fp32 compute "
                                    "for 16-bit inputs)")
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
    if "mem-efficient" in text or "efficient_attention" in text or "fmha_cutlass" in text:
        return "mem-efficient", "auto", ("PyTorch's memory-efficient (CUTLASS) kernel -> "
                                         "mem-efficient")
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


_T = TypeVar("_T")

#: Fields that key a validation group (besides the device).
GROUP_FIELDS: tuple[str, ...] = ("source", "op", "phase", "dtype", "kv_dtype", "quant",
                                 "kernel")


def group_key(row: Measurement, spec_id: str) -> tuple[str, ...]:
    """(spec, source, op, phase, dtype, kv_dtype, quant, kernel) of a row: rows of one
    device, source, op and dtype that an engine ran with the same kernel and cache or
    quantization scheme (empty labels where the CSV has none); a latent (MLA) cache's rows
    are a group of their own (``latent`` after the kernel)."""
    kernel = row.kernel
    if row.kv_layout:
        kernel = f"{kernel} {row.kv_layout}" if kernel else row.kv_layout
    return (spec_id, row.source, row.op, row.phase, row.dtype, row.kv_dtype, row.quant,
            kernel)


def group_label(spec: str, source: str, op: str, phase: str, dtype: str, kv_dtype: str,
                quant: str, kernel: str) -> str:
    """A validation group's name, ``spec/source/op[/phase]/dtype[/kv=..][/q=..][/kernel]``:
    the phase of attention only, the KV dtype where it differs, a quantization scheme and
    the recorded kernel where there are any."""
    parts = [spec, source, op]
    if phase and op == "attention":
        parts.append(phase)
    parts.append(dtype)
    if kv_dtype and kv_dtype != dtype:
        parts.append(f"kv={kv_dtype}")
    if quant and quant != "none":
        parts.append(f"q={quant}")
    if kernel:
        parts.append(kernel)
    return "/".join(parts)


@dataclass(frozen=True)
class GroupResult:
    """Statistics of one group (:func:`group_key`), ours and the bare roofline's."""

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
    phase: str = ""
    kv_dtype: str = ""
    quant: str = ""
    kernel: str = ""

    @property
    def key(self) -> tuple[str, ...]:
        return (self.spec, self.source, self.op, self.phase, self.dtype, self.kv_dtype,
                self.quant, self.kernel)

    @property
    def label(self) -> str:
        """``spec/source/op[/phase]/dtype[/kv=..][/q=..][/kernel]``."""
        return group_label(self.spec, self.source, self.op, self.phase, self.dtype,
                           self.kv_dtype, self.quant, self.kernel)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "source": self.source, "op": self.op, "dtype": self.dtype,
                "phase": self.phase, "kv_dtype": self.kv_dtype, "quant": self.quant,
                "kernel": self.kernel,
                **self.ours.to_dict(), "baseline": self.baseline.to_dict(),
                "timing": self.timing, "floor_us": self.floor_s * 1e6,
                "floor_rule": self.floor_rule, "kernel_paths": list(self.paths)}


def group_results(rows: Sequence[Measurement], spec_ids: Sequence[str], predicted: Array,
                  baseline: Array, paths: dict[tuple[str, ...], set[str]]
                  ) -> tuple[GroupResult, ...]:
    """Per-group statistics of aligned rows / predictions / baseline predictions."""
    measured = np.asarray([r.measured_s for r in rows], dtype=np.float64)
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, (r, sid) in enumerate(zip(rows, spec_ids, strict=True)):
        index[group_key(r, sid)].append(i)
    groups = []
    for gkey in sorted(index):
        idx = np.asarray(index[gkey])
        code = rows[idx[0]].timing
        floor, rule = timing_floor(code)
        groups.append(GroupResult(
            spec=gkey[0], source=gkey[1], op=gkey[2], phase=gkey[3], dtype=gkey[4],
            kv_dtype=gkey[5], quant=gkey[6], kernel=gkey[7],
            ours=error_stats(predicted[idx], measured[idx]),
            baseline=error_stats(baseline[idx], measured[idx]),
            timing=code, floor_s=floor, floor_rule=rule, paths=tuple(sorted(paths[gkey])),
        ))
    return tuple(groups)


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
    spec_ids: tuple[str, ...] = ()
    """The device each row was predicted on (its spec column, or the fixed ``hw``)."""

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
#: The op of a batch of measured rows.
BatchOp = Gemm | Attention | StreamOp | AllReduce


def stream_op(op: str, dtype: str, m: Any, n: Any = 1) -> StreamOp:
    """The perfmodel op of a streaming measurement row (:data:`perfmodel.ops.registry.ROW_OPS`):
    ``copy``/``add`` over m elements; ``rmsnorm``/``layernorm``/``silu_mul``/``silu``/``gelu``/
    ``softmax`` over m rows of width n."""
    kind = ROW_OPS.get(op)
    if kind is None or op not in STREAM_ROW_OPS:
        raise PerfmodelError("op", f"unknown streaming op {op!r}",
                             f"use one of {', '.join(STREAM_ROW_OPS)}")
    built = kind.build(dtype, {"m": m, "n": n})
    assert isinstance(built, (Elementwise, Norm, Activation, Softmax))
    return built


def _batch_key(row: Measurement, units: int = 0) -> tuple[Any, ...]:
    """Everything besides the shape that decides how a row is predicted (``units``: the SMs
    of the row's GPU, 0 where not known, for TensorRT-LLM's decode dispatch)."""
    labels = (row.timing, row.engine, row.kernel, row.quant, row.out_dtype, row.kv_dtype,
              row.kv_layout)
    if row.op == "allreduce":  # NCCL's own choice when the row names NCCL, else an engine's
        return (row.op, row.dtype, "nccl" if "nccl" in row.impl.lower() else "auto", *labels)
    if row.op not in ("gemm", "attention"):
        return (row.op, row.dtype, *labels)
    if row.op == "gemm":
        return (row.op, row.dtype, "bias=y" in row.notes.lower() or "bias=true" in
                row.impl.lower(), *labels)
    path, splits, _ = kernel_path(row.impl, row.phase)
    # an engine may dispatch another kernel when each KV head has one query head, or more
    # than 32, or a decode call has too few XQA blocks for the SMs (TensorRT-LLM's
    # masked-MHA fallbacks): rows are batched by that band
    band = 0
    if row.engine and row.heads:
        group = row.heads / (row.kv_heads or row.heads)
        band = 1 if group == 1 else (3 if group > 32 else 2)
        decode = row.phase != "prefill" and (row.seq_q or 1) == 1
        if band == 2 and units and row.engine == "trtllm" and decode and not bool(
                trtllm_xqa_pays(row.batch or 1, row.kv_heads or row.heads, row.seq_kv or 1,
                                units)):
            band = 4
    return (row.op, row.dtype, row.causal, path, splits, row.phase, band, *labels)


def _arr(rows: Sequence[Measurement], name: str, default: int) -> Array:
    return np.asarray([getattr(r, name) or default for r in rows], dtype=np.float64)


#: Defaults of optional size columns that follow another column (kv_heads = heads...).
_FOLLOWS = {"kv_heads": "heads", "value_dim": "head_dim"}


def _sizes(rows: Sequence[Measurement], kind: RowOp) -> dict[str, Array]:
    """The size columns of ``kind`` over ``rows`` as arrays: an empty optional column takes
    its class's default (batch 1; kv_heads = heads, value_dim = head_dim)."""
    out: dict[str, Array] = {}
    for col in (*kind.columns, *kind.optional):
        follow = _FOLLOWS.get(col)
        out[col] = np.asarray([getattr(r, col) or (getattr(r, follow) if follow else 0) or 1
                               for r in rows], dtype=np.float64)
    return out


def dtype_rule(dtype: str, notes: str, spec: HardwareSpec) -> tuple[str, str]:
    """The dtype to predict a row with, from its ``dtype`` and ``notes`` columns, and the
    rule used. XLA's default f32 precision runs TF32 where the hardware has it and full
    fp32 where it has none (CDNA4)."""
    dtype = normalize_dtype(dtype)
    if dtype == "tf32" and "tf32" not in spec.peaks and "f32_xla_default" in notes:
        return "fp32", "XLA default f32 on a device without TF32 -> fp32"
    return dtype, ""


def _build(rows: Sequence[Measurement], key: tuple[Any, ...], dtype: str,
           spec: HardwareSpec) -> tuple[BatchOp, str]:
    """The op of a batch of rows with one key, and the kernel rule used."""
    first = rows[0]
    if key[0] == "allreduce":
        collective = ROW_OPS["allreduce"].build(dtype, _sizes(rows, ROW_OPS["allreduce"]),
                                                algorithm=str(key[2]))
        assert isinstance(collective, AllReduce)
        return collective, f"allreduce {key[2]}"
    if key[0] not in ("gemm", "attention"):
        return stream_op(key[0], dtype, _arr(rows, "m", 1), _arr(rows, "n", 1)), key[0]
    if key[0] == "gemm":
        quant = first.quant or "none"
        rule = "gemm"
        impl, quantize = "auto", False
        if first.engine or quant != "none":
            choice = gemm_kernel_for_label(first.engine or "none", first.kernel, spec.arch,
                                           quant)
            impl, quantize = choice.impl, choice.quantize_input
            rule = f"gemm {impl}" + (f" {quant} (+ activation quantize)" if quantize else "")
            if gemm_dispatch(first.engine or "none", spec.arch, impl, quant) is not None:
                rule += ", tile by the engine's dispatch table"
        gemm = ROW_OPS["gemm"].build(
            dtype, _sizes(rows, ROW_OPS["gemm"]), bias=bool(key[2]),
            out_dtype=first.out_dtype or ("bf16" if quant != "none" else None), quant=quant,
            quantize_input=quantize, impl=impl)
        assert isinstance(gemm, Gemm)
        return gemm, rule
    sizes = _sizes(rows, ROW_OPS["attention"])
    head_dim = sizes["head_dim"]
    impl, splits = str(key[3]), key[4]
    kv_write = rope = False
    tc_group = 0.0
    rule = f"{impl} (num_splits={splits}): {kernel_path(first.impl)[2]}"
    latent = first.kv_layout == "latent"
    if latent:
        # an absorbed MLA decode kernel over the latent cache: the engines' MLA family
        # (engine_call's rule) unless the impl text names a kernel path itself
        impl = "mla" if impl == "flash" else impl
        rule = f"{impl} over a latent cache (kv_layout=latent)"
    elif first.engine:
        attn = attention_kernel_for_label(first.engine, first.kernel, spec.arch,
                                          first.phase, float(np.max(head_dim)),
                                          first.kv_dtype or dtype,
                                          float(np.max(sizes["heads"] / sizes["kv_heads"]))
                                          if key[6] else 0.0, xqa_pays=key[6] != 4)
        impl, kv_write, rope = attn.impl, attn.kv_write, attn.rope
        splits, tc_group = attn.num_splits, attn.tensor_core_min_group
        rule = (f"{first.engine} {impl}" + (" + KV write" if kv_write else "")
                + (" with RoPE" if rope else "") + f" ({attn.source})")
    attn_op = ROW_OPS["attention"].build(
        dtype, sizes, causal=bool(key[2]), kv_dtype=first.kv_dtype or None, impl=impl,
        num_splits=splits, kv_write=kv_write, rope=rope, tensor_core_min_group=tc_group,
        shared_kv=latent,
        # the engine call's kind, for the whole batch (rows are grouped by their phase
        # column): decode when every row has one query token, as the model constants were
        # fitted (a batch labelled prefill that runs a decode kernel on one-token rows)
        phase="decode" if bool(np.all(sizes["seq_q"] == 1)) else "prefill")
    assert isinstance(attn_op, Attention)
    return attn_op, rule


#: Weight copies AIConfigurator's GEMM collectors rotate between calls (their source):
#: TensorRT-LLM ⌈L2 / weight bytes⌉ capped at 5 (inputs shared); vLLM 6 for bf16 and fp8,
#: 1 for fp8 block and nvfp4 (inputs shared); SGLang 6 (inputs rotated too).
def _aic_copies(engine: str, op: BatchOp,
                spec: HardwareSpec) -> tuple[Any, bool]:
    if not isinstance(op, Gemm):
        return 1.0, False
    if engine == "sglang":
        return 6.0, True
    if engine == "vllm":
        return (1.0 if op.quant in ("block", "nvfp4") else 6.0), False
    if engine == "trtllm":
        _, w, _ = op.operand_bytes(op.m, op.n, op.k, op.batch)
        l2 = spec.memory.l2 or 0.0
        return np.clip(np.ceil(l2 / np.asarray(w, dtype=np.float64)), 1.0, 5.0), False
    return 1.0, False


def run_context(timing: str, engine: str, op: BatchOp,
                spec: HardwareSpec) -> RunContext:
    """The :class:`RunContext` of rows timed by method ``timing`` (floor included; an
    eager call's host time is the engine's constant)."""
    floor, _ = timing_floor(timing)
    launch, l2 = _METHOD_CONTEXT.get(timing, ("stream", "cold"))
    copies: Any = 1.0
    input_copies = False
    if timing.startswith("aic_"):
        copies, input_copies = _aic_copies(engine, op, spec)
    return RunContext(launch=launch, l2=l2, copies=copies, input_copies=input_copies,
                      floor_s=floor, engine=engine)


def _bare_roofline(op: BatchOp, hw: HardwareSpec) -> Array:
    if isinstance(op, AllReduce):  # ring bytes over the spec's GPU (else host) link
        link = hw.interconnect.gpu_link or hw.interconnect.host_link
        bw = link.bandwidth_per_direction if link is not None else hw.memory.bandwidth
        return np.asarray(op.cost_of("ring").link_bytes / bw, dtype=np.float64)
    if isinstance(op, (Gemm, Attention)):
        flops, bytes_min = op.flops(), op.bytes_min()
        peak = hw.peak(op.dtype)
    else:  # streaming ops: vector FLOPs at the fp32 (vector) peak
        cost = op.cost()
        flops, bytes_min = cost.flops, cost.bytes_min
        peak = hw.peaks["fp32"].peak if "fp32" in hw.peaks else hw.peak(op.dtype)
    return np.asarray(np.maximum(flops / peak, bytes_min / hw.memory.bandwidth),
                      dtype=np.float64)


@dataclass(frozen=True)
class Batch:
    """Rows predicted together: one device, one op object (arrays over the rows), one
    run context; ``index`` are the rows' positions in :attr:`Prepared.rows`."""

    spec: HardwareSpec
    op: BatchOp
    context: RunContext
    index: npt.NDArray[np.intp]
    rule: str
    timing: str

    def predict(self, constants: Constants | None = None) -> Array:
        """Predicted time of each row, s (the timing method's conventions applied)."""
        p = predict(self.op, self.spec, context=self.context, constants=constants)
        latency = np.atleast_1d(np.asarray(p.latency_s, dtype=np.float64))
        if "median_over_kernel_events" in _METHOD_TRAITS.get(self.timing, ()):
            # the source reports the median over individual kernel events: for an op of
            # two kernels (split-K main + reduce) that is their mean, i.e. latency / 2
            kernels = np.atleast_1d(np.asarray(p.details.get("kernels", 1.0), dtype=np.float64))
            latency = latency / np.maximum(kernels, 1.0)
        return np.broadcast_to(latency, self.index.shape)


@dataclass(frozen=True)
class Prepared:
    """Measured rows turned into ops once, ready to be predicted under any model
    constants (what a fit of the constants evaluates many times)."""

    rows: tuple[Measurement, ...]
    spec_ids: tuple[str, ...]
    batches: tuple[Batch, ...]
    skipped: tuple[tuple[int, str], ...]

    @property
    def measured_s(self) -> Array:
        return np.asarray([r.measured_s for r in self.rows], dtype=np.float64)

    def predict(self, constants: Constants | None = None) -> Array:
        """Predicted time of every row, s, aligned with :attr:`rows`."""
        out = np.empty(len(self.rows))
        for b in self.batches:
            out[b.index] = b.predict(constants)
        return out

    def baseline(self) -> Array:
        """The bare roofline of every row, s."""
        out = np.empty(len(self.rows))
        for b in self.batches:
            out[b.index] = np.broadcast_to(_bare_roofline(b.op, b.spec), b.index.shape)
        return out

    def subset(self, keep: npt.NDArray[np.bool_]) -> Prepared:
        """The rows where ``keep`` is true (each batch's op and context cut to them)."""
        new_pos = np.cumsum(keep) - 1
        batches = []
        for b in self.batches:
            mask = keep[b.index]
            if mask.all():
                batches.append(dataclasses.replace(b, index=new_pos[b.index]))
            elif mask.any():
                batches.append(dataclasses.replace(
                    b, op=_take(b.op, mask), context=_take(b.context, mask),
                    index=new_pos[b.index[mask]]))
        rows = tuple(r for r, k in zip(self.rows, keep, strict=True) if k)
        specs = tuple(s for s, k in zip(self.spec_ids, keep, strict=True) if k)
        return Prepared(rows, specs, tuple(batches), self.skipped)


def concat(parts: Sequence[Prepared]) -> Prepared:
    """Several prepared sets as one (rows in order, batches re-indexed)."""
    rows: list[Measurement] = []
    specs: list[str] = []
    batches: list[Batch] = []
    skipped: list[tuple[int, str]] = []
    for part in parts:
        offset = len(rows)
        rows.extend(part.rows)
        specs.extend(part.spec_ids)
        batches.extend(dataclasses.replace(b, index=b.index + offset) for b in part.batches)
        skipped.extend(part.skipped)
    return Prepared(tuple(rows), tuple(specs), tuple(batches), tuple(skipped))


def _take(obj: _T, mask: npt.NDArray[np.bool_]) -> _T:
    """A copy of a frozen op or context with every per-row array field cut to ``mask``."""
    changes = {f.name: getattr(obj, f.name)[mask] for f in dataclasses.fields(obj)  # type: ignore[arg-type]
               if isinstance(getattr(obj, f.name), np.ndarray)
               and getattr(obj, f.name).shape == mask.shape}
    return dataclasses.replace(obj, **changes) if changes else obj  # type: ignore[type-var]


#: Slack on the datasheet figures before a row is called impossible (timer rounding).
_PEAK_SLACK = 1.02


def _impossible(rows: Sequence[Measurement], p: Prediction,
                spec: HardwareSpec) -> dict[int, str]:
    """Rows a device could not have run in their measured time, with the reason (by
    position in ``rows``), by the datasheet figures with ``_PEAK_SLACK``:

    - memory: the bytes the op must move at least once (its ``bytes_min``: operands and
      results once) beyond what the L2 could hold from an earlier call,
      max(bytes_min − L2, 0), cannot stream from DRAM faster than the spec's bandwidth;
    - compute: its FLOPs (exact, no tile padding) cannot run faster than the dense peak of
      its dtype, what a source's ``SUSPECT`` note says of a row (for files without notes).

    Such a row's sizes or dtypes are mislabelled."""
    measured = np.asarray([r.measured_s for r in rows], dtype=np.float64)

    def per_row(x: Any) -> npt.NDArray[np.float64]:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), measured.shape)

    l2 = spec.memory.l2 or 0.0
    bw = spec.memory.bandwidth
    beyond = np.maximum(per_row(p.bytes_min) - l2, 0.0)
    rate = per_row(p.flops) / measured
    peak = per_row(p.peak)
    out = {int(i): f"{beyond[i] / 1e9:.3g} GB beyond the {l2 / 2**20:.0f} MiB L2 in "
                   f"{measured[i] * 1e6:.4g} µs is {beyond[i] / measured[i] / 1e12:.2f} TB/s, "
                   f"above the datasheet's {bw / 1e12:.2f} TB/s"
           for i in np.flatnonzero(beyond / measured > bw * _PEAK_SLACK)}
    for i in np.flatnonzero(rate > peak * _PEAK_SLACK):
        out.setdefault(int(i), f"{rate[i] / 1e12:.4g} TFLOP/s, above the dense peak of "
                               f"{peak[i] / 1e12:.4g} TFLOP/s")
    return {i: why + ": sizes or dtypes mislabelled (pass include_suspect=True to keep it)"
            for i, why in out.items()}


def implausible(records: Sequence[Measurement]) -> dict[int, str]:
    """Positions in ``records`` of the rows no device could have run in their measured time
    (:func:`_impossible`: above the datasheet bandwidth or the dense peak), with the reason;
    what :func:`prepare` skips unless ``include_suspect``, for callers that keep their own
    rows (the calibration evaluations). Rows that cannot be predicted are not listed."""
    prep = prepare([dataclasses.replace(r, row=i) for i, r in enumerate(records)],
                   include_suspect=True)
    out: dict[int, str] = {}
    for b in prep.batches:
        if "median_over_kernel_events" in _METHOD_TRAITS.get(b.timing, ()):
            continue
        rows = [prep.rows[i] for i in b.index]
        first = predict(b.op, b.spec, context=b.context)
        out.update({rows[j].row: why for j, why in _impossible(rows, first, b.spec).items()})
    return out


def prepare(records: MeasurementSet | str | Path | Iterable[Measurement],
            hw: HardwareSpec | str | None = None, *,
            include_suspect: bool = False) -> Prepared:
    """Turn measured rows into ops, grouped for vectorised prediction (:class:`Prepared`).
    Rows that cannot be predicted are returned in ``skipped`` with the reason; so are,
    unless ``include_suspect``, rows whose notes say SUSPECT and rows measured faster than
    the datasheet bandwidth or dense peak allows (:func:`_impossible`)."""
    if isinstance(records, (str, Path)):
        records = read_measurements(records)
    if isinstance(records, MeasurementSet):
        rows = list(records.rows)
        skipped = list(records.skipped)
    else:
        rows, skipped = list(records), []
    fixed = load_hardware(hw) if hw is not None else None
    grouped: dict[tuple[Any, ...], list[Measurement]] = defaultdict(list)
    ids: dict[str, str] = {}  # a row's spec as written -> the bundled id it names
    units: dict[str, int] = {}  # bundled id -> its SMs
    for row in rows:
        if not include_suspect and is_suspect(row.notes):
            skipped.append((row.row, "notes say SUSPECT: implied FLOP/s above the device's "
                                     "dense peak (pass include_suspect=True to keep it)"))
            continue
        if fixed is None and not row.spec:
            skipped.append((row.row, "no spec column and no --gpu given"))
            continue
        spec_id = _spec_id(row.spec, ids) if fixed is None else fixed.id
        if spec_id not in units:
            try:
                units[spec_id] = (fixed or load_hardware(spec_id)).compute.units
            except PerfmodelError:  # reported with the batch below
                units[spec_id] = 0
        grouped[(spec_id,) + _batch_key(row, units[spec_id])].append(row)  # noqa: RUF005

    kept: list[Measurement] = []
    kept_specs: list[str] = []
    batches: list[Batch] = []
    for key, group in grouped.items():
        spec_id = key[0]
        try:
            spec = fixed or load_hardware(spec_id)
            dtype, _rule = dtype_rule(group[0].dtype, group[0].notes, spec)
            op, rule = _build(group, key[1:], dtype, spec)
            ctx = run_context(group[0].timing, group[0].engine, op, spec)
            # an op this device cannot run is skipped here, with the reason
            first = predict(op, spec, context=ctx)
        except PerfmodelError as exc:
            skipped.extend((r.row, f"{spec_id}: {exc}") for r in group)
            continue
        if not include_suspect and "median_over_kernel_events" not in _METHOD_TRAITS.get(
                group[0].timing, ()):
            too_fast = _impossible(group, first, spec)
            if too_fast:
                skipped.extend((group[i].row, f"{spec_id}: {why}")
                               for i, why in too_fast.items())
                if len(too_fast) == len(group):
                    continue
                keep = np.ones(len(group), dtype=bool)
                keep[list(too_fast)] = False
                op, ctx = _take(op, keep), _take(ctx, keep)
                group = [r for r, k in zip(group, keep, strict=True) if k]
        batch = Batch(spec, op, ctx, np.arange(len(kept), len(kept) + len(group)), rule,
                      group[0].timing)
        kept.extend(group)
        kept_specs.extend([spec_id] * len(group))
        batches.append(batch)
    return Prepared(tuple(kept), tuple(kept_specs), tuple(batches), tuple(sorted(skipped)))


def _spec_id(written: str, ids: dict[str, str]) -> str:
    """The bundled id a row's spec names (``H100-SXM``, ``h100`` -> ``h100-sxm``), so that
    one device is one group; the text as written when it names none (a spec file, or an
    unknown GPU: refused later, with the reason)."""
    if written not in ids:
        try:
            ids[written] = resolve_id(written)
        except PerfmodelError:
            ids[written] = written
    return ids[written]


def in_sample(group: GroupResult, constants: Constants | None = None) -> bool:
    """Whether constants the group's predictions use were fitted on rows of its source:
    the model-constant table's datasets (:attr:`Constants.datasets`), the all-reduce
    model's (:data:`perfmodel.timing.comm_params.SOURCES`) or figures of its device's spec
    fitted on that source."""
    consts = constants if constants is not None else bundled_constants()
    if group.source in consts.datasets:
        return True
    if group.op == "allreduce" and group.source in COMM_SOURCES:
        return True
    try:
        spec = load_hardware(group.spec)
    except PerfmodelError:
        return False
    return group.source in spec_fitted_sources(spec)


def validate(records: MeasurementSet | str | Path | Iterable[Measurement] | Prepared,
             hw: HardwareSpec | str | None = None, *,
             include_suspect: bool = False,
             constants: Constants | None = None) -> ValidationReport:
    """Predict every measured row and report errors per group (:func:`group_key`).

    ``hw`` replaces each row's ``spec`` column (required when the CSV has none). Each row's
    ``timing`` code sets the run context (:func:`run_context`: floor, launch mode, L2
    state); the kernel comes from its engine and ``kernel`` label, or its ``impl`` text
    (:func:`kernel_path`). Rows whose notes say SUSPECT (a source's value implies more than
    the dense peak) and rows whose compulsory bytes beyond the L2 imply more than the
    datasheet bandwidth, or whose FLOPs more than the dense peak, are skipped with the
    reason unless ``include_suspect``.
    ``constants`` replaces the bundled model constants.
    """
    prep = records if isinstance(records, Prepared) else prepare(
        records, hw, include_suspect=include_suspect)
    predicted = prep.predict(constants)
    baseline = prep.baseline()
    measured = prep.measured_s
    paths: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for b in prep.batches:
        for i in b.index:
            paths[group_key(prep.rows[i], prep.spec_ids[i])].add(b.rule)
    groups = group_results(prep.rows, prep.spec_ids, predicted, baseline, paths)
    return ValidationReport(
        overall=error_stats(predicted, measured), overall_baseline=error_stats(baseline, measured),
        groups=groups, skipped=prep.skipped, rows=prep.rows,
        predicted_s=predicted, baseline_s=baseline, spec_ids=prep.spec_ids,
    )
