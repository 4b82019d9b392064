"""The timing model: where ops meet hardware. ``predict(op, hw) -> Prediction``.

Per kernel: t_compute (FLOPs at the achievable rate, with tile/wave quantisation),
t_memory (bytes at the achievable bandwidth for that size and CTA count), t_fixed
(launch and prologue). latency = overlap(t_compute, t_memory) + t_fixed. Multi-kernel ops
(naive attention) sum their stages and report each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.attention import Attention
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Array
from perfmodel.ops.elementwise import Activation, Elementwise, Embedding, Norm, Rotary, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.timing.attention import time_flash
from perfmodel.timing.core import memory_time, overlap
from perfmodel.timing.gemm import time_gemm
from perfmodel.timing.knobs import Knobs, knobs_for
from perfmodel.timing.prediction import Prediction, make_prediction
from perfmodel.timing.residual import apply_residual

__all__ = ["Prediction", "predict"]

StreamOp = Elementwise | Norm | Activation | Rotary | Softmax | Embedding
Op = Gemm | Attention | StreamOp | AllReduce

#: Achievable fraction of a GPU-GPU link's per-direction bandwidth (NVLink/IF measure
#: 80–88 % of spec, PCIe 85–88 %: hardware-datasheets.md, memory and interconnect table).
LINK_EFFICIENCY = 0.8
#: Families with FA3/cuDNN-class fused attention (warp-specialised, TMA).
_FA3_ARCHS = ("hopper", "blackwell")
#: Per-step latency when the spec gives none for its link, s.
DEFAULT_LINK_LATENCY_S = 5e-6


def predict(op: Op, hw: HardwareSpec | str, *, extra_overhead_s: float = 0.0) -> Prediction:
    """Predict the duration of ``op`` on ``hw`` and explain it.

    Parameters
    ----------
    op:
        A :class:`Gemm`, :class:`Attention`, small op or :class:`AllReduce`; shape fields
        may be numpy arrays (results broadcast).
    hw:
        A :class:`HardwareSpec`, or a bundled id / YAML path.
    extra_overhead_s:
        A timing-method floor added once per call (e.g. the host gap of an eager call),
        s; 0 for kernel-only time.
    """
    spec = load_hardware(hw)
    if not np.isfinite(extra_overhead_s) or extra_overhead_s < 0:
        raise PerfmodelError("extra_overhead_s", f"must be ≥ 0, got {extra_overhead_s!r}",
                             "pass 0 for kernel-only time")
    # apply_residual: a calibrated profile's residual tables (timing/residual.py); a no-op
    # for specs without them.
    if isinstance(op, Gemm):
        return apply_residual(_predict_gemm(op, spec, extra_overhead_s), spec, extra_overhead_s,
                              op=op)
    if isinstance(op, Attention):
        if op.impl == "naive":
            p = _predict_naive(op, spec, extra_overhead_s)
        else:
            p = _predict_flash(op, spec, extra_overhead_s)
        return apply_residual(p, spec, extra_overhead_s, causal=op.causal, op=op)
    if isinstance(op, AllReduce):
        return _predict_allreduce(op, spec, extra_overhead_s)
    if isinstance(op, (Elementwise, Norm, Activation, Rotary, Softmax, Embedding)):
        return apply_residual(_predict_stream(op, spec, extra_overhead_s), spec,
                              extra_overhead_s)
    raise PerfmodelError("op", f"cannot predict {type(op).__name__}",
                         "pass a perfmodel op such as Gemm or Attention")


def _check_dtype(spec: HardwareSpec, dtype: str, field: str = "dtype") -> None:
    if dtype not in spec.peaks:
        raise PerfmodelError(field, f"{spec.id} does not support {dtype} "
                             f"(no {dtype} peak in its spec)",
                             f"use one of {', '.join(spec.peaks)}")


def _ridge(k: Knobs) -> float:
    return k.rate / k.achievable_bandwidth


def _predict_gemm(op: Gemm, spec: HardwareSpec, extra: float) -> Prediction:
    _check_dtype(spec, op.dtype)
    k = knobs_for(spec, "gemm", op.dtype)
    t = time_gemm(op, k)
    return make_prediction(
        op="gemm", hardware=spec.id, dtype=op.dtype, compute_s=t["compute_s"],
        memory_s=t["memory_s"], overhead_s=t["overhead_s"] + extra,
        latency_s=t["latency_s"] + extra, flops=op.flops(), bytes_=t["bytes"],
        bytes_min=op.bytes_min(), peak=k.peak, bandwidth=k.bandwidth, ridge_point=_ridge(k),
        details={"tile_m": t["tile_m"], "tile_n": t["tile_n"], "split_k": t["split_k"],
                 "waves": t["waves"], "kernels": t["launches"], "unit": k.unit},
    )


def _predict_flash(op: Attention, spec: HardwareSpec, extra: float) -> Prediction:
    _check_dtype(spec, op.dtype)
    _check_dtype(spec, op.kv_dtype, "kv_dtype")
    if op.impl == "flash3" and spec.arch not in _FA3_ARCHS:
        raise PerfmodelError("impl", f"flash3 (FA3-class) kernels need Hopper or later; "
                             f"{spec.id} is {spec.arch}",
                             "use impl='flash' (the native fused kernel) or 'flash2'")
    k = knobs_for(spec, "attention", op.dtype)
    t = time_flash(op, k)
    return make_prediction(
        op="attention", hardware=spec.id, dtype=op.dtype, compute_s=t["compute_s"],
        memory_s=t["memory_s"], overhead_s=t["overhead_s"] + extra,
        latency_s=t["latency_s"] + extra, flops=op.flops(), bytes_=t["bytes"],
        bytes_min=op.bytes_min(), peak=k.peak, bandwidth=k.bandwidth, ridge_point=_ridge(k),
        details={"impl": t["impl"], "q_tile": t["q_tile"], "splits": t["splits"],
                 "ctas": t["ctas"], "kernels": t["launches"]},
    )


def _sum_stages(stages: list[tuple[str, Prediction]], field: str) -> Array:
    return np.asarray(sum(np.asarray(getattr(p, field)) for _, p in stages), dtype=np.float64)


def _predict_naive(op: Attention, spec: HardwareSpec, extra: float) -> Prediction:
    _check_dtype(spec, op.dtype)
    stages = [(name, predict(stage, spec)) for name, stage in op.naive_stages()]
    k = knobs_for(spec, "attention", op.dtype)
    return make_prediction(
        op="attention", hardware=spec.id, dtype=op.dtype,
        compute_s=_sum_stages(stages, "compute_s"), memory_s=_sum_stages(stages, "memory_s"),
        overhead_s=_sum_stages(stages, "overhead_s") + extra,
        latency_s=_sum_stages(stages, "latency_s") + extra,
        flops=_sum_stages(stages, "flops"), bytes_=_sum_stages(stages, "bytes"),
        bytes_min=op.bytes_min(), peak=k.peak, bandwidth=k.bandwidth, ridge_point=_ridge(k),
        stages=tuple(stages), details={"impl": "naive", "kernels": float(len(stages))},
    )


def _predict_stream(op: StreamOp, spec: HardwareSpec, extra: float) -> Prediction:
    dtype = op.dtype if op.dtype in spec.peaks else ("fp32" if "fp32" in spec.peaks
                                                     else next(iter(spec.peaks)))
    k = knobs_for(spec, "stream", dtype)
    c = op.cost()
    compute = c.vector_flops / k.vector_op_rate + c.sfu_ops / k.sfu_rate
    memory = memory_time(c.bytes_hbm, k, ctas=c.work_units)
    overhead = c.launches * k.overhead_s + extra
    latency = overlap(compute, memory, k.overlap_p) + overhead
    return make_prediction(
        op=op.name, hardware=spec.id, dtype=op.dtype, compute_s=compute, memory_s=memory,
        overhead_s=overhead, latency_s=latency, flops=c.flops, bytes_=c.bytes_hbm,
        bytes_min=c.bytes_min, peak=k.vector_op_rate * 2.0, bandwidth=k.bandwidth,
        ridge_point=k.vector_op_rate * 2.0 / k.achievable_bandwidth,
        details={"kernels": 1.0},
    )


def _predict_allreduce(op: AllReduce, spec: HardwareSpec, extra: float) -> Prediction:
    dtype = op.dtype if op.dtype in spec.peaks else "fp32"
    k = knobs_for(spec, "comm", dtype if dtype in spec.peaks else next(iter(spec.peaks)))
    link = spec.interconnect.gpu_link or spec.interconnect.host_link
    if link is None:
        raise PerfmodelError("hw.interconnect", f"{spec.id} has no GPU or host link in its spec",
                             "add interconnect.gpu_link (or host_link) to the spec")
    c = op.cost()
    lat = link.latency if link.latency is not None else DEFAULT_LINK_LATENCY_S
    link_s = c.link_bytes / (link.bandwidth_per_direction * LINK_EFFICIENCY) + c.link_steps * lat
    hbm_s = np.where(c.bytes_hbm > 0, c.bytes_hbm / k.achievable_bandwidth, 0.0)
    memory = np.maximum(link_s, hbm_s)
    compute = c.vector_flops / k.vector_op_rate
    overhead = c.launches * k.overhead_s + extra
    latency = overlap(compute, memory, k.overlap_p) + overhead
    details: dict[str, Any] = {"link": link.name, "link_s": link_s, "kernels": c.launches}
    return make_prediction(
        op="allreduce", hardware=spec.id, dtype=op.dtype, compute_s=compute, memory_s=memory,
        overhead_s=overhead, latency_s=latency, flops=c.flops, bytes_=c.link_bytes,
        bytes_min=c.link_bytes, peak=k.vector_op_rate * 2.0,
        bandwidth=link.bandwidth_per_direction, ridge_point=_ridge(k), details=details,
    )
