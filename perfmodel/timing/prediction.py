"""Prediction: a latency with its parts and the figures that explain it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel._xp import SCALAR, VECTOR, Ops

__all__ = ["Prediction", "Value", "as_value"]

#: A float for scalar inputs, a numpy array when shape fields were arrays.
Value = float | npt.NDArray[np.float64]
Label = str | npt.NDArray[np.str_]


def as_value(x: Any) -> Value:
    """0-d arrays become Python floats; arrays stay arrays (float64)."""
    if type(x) is float:
        return x
    arr = np.asarray(x, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def _as_label(x: Any) -> Label:
    if type(x) is str:
        return x
    arr = np.asarray(x)
    return str(arr) if arr.ndim == 0 else arr.astype(np.str_)


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one op on one device, and why.

    latency_s = overlap(compute_s, memory_s) + overhead_s, where overlap is max() by
    default (a fitted smooth maximum once calibrated).

    Attributes
    ----------
    latency_s:
        Predicted duration, s.
    compute_s:
        Time of the arithmetic at the achievable rate, with tile/wave quantisation and
        special-function work, s.
    memory_s:
        Time of the modelled device-memory (or link) traffic at the achievable bandwidth for
        this transfer size and CTA count, s.
    overhead_s:
        Fixed part: kernel launch and prologue per kernel, non-overlapped tile fill/drain,
        link latencies, and any timing-method floor passed to ``predict``, s.
    flops:
        Useful FLOPs (2·m·n·k for a GEMM; exact causal pairs for attention), summed over
        the call's kernels where it has several (a GEMM that quantizes its input adds that
        kernel's 3·m·k vector FLOPs; an attention call its pre-processing's).
    bytes:
        Modelled device-memory traffic, bytes (``bytes_min`` is the every-byte-once floor).
    arithmetic_intensity:
        flops / bytes, FLOP/byte.
    ridge_point:
        Achievable peak / achievable bandwidth for the op's dtype, FLOP/byte.
    compute_util, memory_util:
        flops / (latency·peak) and bytes / (latency·bandwidth) against datasheet peaks: the
        "Compute (SM) Throughput" and "Memory Throughput" percentages of Nsight Compute.
    bottleneck:
        ``compute``, ``memory`` or ``latency`` (fixed costs dominate).
    bottleneck_ratio:
        How deep into that regime: the dominant part over the next one (≥ 1).
    stages:
        Per-kernel predictions of multi-kernel ops (naive attention), in launch order.
    details:
        Model choices such as the GEMM tile and split-K, waves, attention path, splits.
    """

    op: str
    hardware: str
    dtype: str
    latency_s: Value
    compute_s: Value
    memory_s: Value
    overhead_s: Value
    flops: Value
    bytes: Value
    bytes_min: Value
    arithmetic_intensity: Value
    ridge_point: float
    compute_util: Value
    memory_util: Value
    bottleneck: Label
    bottleneck_ratio: Value
    stages: tuple[tuple[str, Prediction], ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    peak: float = 0.0
    """The datasheet peak ``compute_util`` is measured against, FLOP/s."""
    bandwidth: float = 0.0
    """The datasheet bandwidth ``memory_util`` is measured against, B/s."""

    @property
    def latency_us(self) -> Value:
        """Latency in microseconds (display convenience)."""
        return as_value(np.asarray(self.latency_s) * 1e6)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping of every field (arrays as lists)."""

        def conv(x: Any) -> Any:
            if isinstance(x, np.ndarray):
                return x.tolist()
            if isinstance(x, (np.floating, np.integer)):
                return x.item()
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            return x

        out: dict[str, Any] = {
            name: conv(getattr(self, name)) for name in (
                "op", "hardware", "dtype", "latency_s", "compute_s", "memory_s", "overhead_s",
                "flops", "bytes", "bytes_min", "arithmetic_intensity", "ridge_point",
                "compute_util", "memory_util", "bottleneck", "bottleneck_ratio",
            )
        }
        out["details"] = conv(self.details)
        out["stages"] = [{"stage": n, **p.to_dict()} for n, p in self.stages]
        return out


def make_prediction(*, op: str, hardware: str, dtype: str, compute_s: Any, memory_s: Any,
                    overhead_s: Any, latency_s: Any, flops: Any, bytes_: Any, bytes_min: Any,
                    peak: float, bandwidth: float, ridge_point: float,
                    stages: tuple[tuple[str, Prediction], ...] = (),
                    details: dict[str, Any] | None = None) -> Prediction:
    """Assemble a :class:`Prediction`, deriving utilisations and the bottleneck.

    Bottleneck rule: ``latency`` when the fixed part exceeds both the compute and the memory
    part, or when both predicted utilisations are under 10 %; otherwise the larger of
    compute and memory. The ratio is that part over the larger of the other two.
    """
    if (type(compute_s) is float and type(memory_s) is float and type(overhead_s) is float
            and type(latency_s) is float and type(flops) is float and type(bytes_) is float):
        if type(bytes_min) is float:
            return _build_floats(op, hardware, dtype, compute_s, memory_s, overhead_s,
                                 latency_s, flops, bytes_, bytes_min, peak, bandwidth,
                                 ridge_point, stages, details)
        return _build(op, hardware, dtype, compute_s, memory_s, overhead_s, latency_s, flops,
                      bytes_, bytes_min, peak, bandwidth, ridge_point, stages, details, SCALAR)
    vals = [compute_s, memory_s, overhead_s, latency_s, flops, bytes_]
    if all(getattr(v, "ndim", 0) == 0 for v in vals):
        x = [float(v) for v in vals]
        return _build(op, hardware, dtype, x[0], x[1], x[2], x[3], x[4], x[5], bytes_min, peak,
                      bandwidth, ridge_point, stages, details, SCALAR)
    a = [np.asarray(v, dtype=np.float64) for v in vals]
    return _build(op, hardware, dtype, a[0], a[1], a[2], a[3], a[4], a[5], bytes_min, peak,
                  bandwidth, ridge_point, stages, details, VECTOR)


def _build(op: str, hardware: str, dtype: str, c: Any, m: Any, o: Any, lat: Any, f: Any,
           b: Any, bytes_min: Any, peak: float, bandwidth: float, ridge_point: float,
           stages: tuple[tuple[str, Prediction], ...], details: dict[str, Any] | None,
           ops: Ops) -> Prediction:
    """The rule of :func:`make_prediction` on floats (``SCALAR``) or arrays (``VECTOR``)."""
    tiny = 1e-30
    cu = f / (ops.maximum(lat, tiny) * peak)
    mu = b / (ops.maximum(lat, tiny) * bandwidth)
    is_latency = ((o > c) & (o > m)) | ((cu < 0.10) & (mu < 0.10))
    is_compute = ~is_latency & (c >= m) if ops is VECTOR else (not is_latency and c >= m)
    label = ops.where(is_latency, "latency", ops.where(is_compute, "compute", "memory"))
    dominant = ops.where(is_latency, o, ops.where(is_compute, c, m))
    other = ops.where(is_latency, ops.maximum(c, m),
                      ops.where(is_compute, ops.maximum(m, o), ops.maximum(c, o)))
    ratio = ops.maximum(dominant, tiny) / ops.maximum(other, tiny)
    fields = {
        "op": op, "hardware": hardware, "dtype": dtype, "latency_s": as_value(lat),
        "compute_s": as_value(c), "memory_s": as_value(m), "overhead_s": as_value(o),
        "flops": as_value(f), "bytes": as_value(b), "bytes_min": as_value(bytes_min),
        "arithmetic_intensity": as_value(f / ops.maximum(b, tiny)),
        "ridge_point": float(ridge_point), "compute_util": as_value(cu),
        "memory_util": as_value(mu), "bottleneck": _as_label(label),
        "bottleneck_ratio": as_value(ops.maximum(ratio, 1.0)), "stages": stages,
        "details": dict(details or {}), "peak": float(peak), "bandwidth": float(bandwidth),
    }
    # a frozen dataclass built without its __init__ (which sets each field through
    # object.__setattr__): the same object, several µs sooner on the scalar path
    pred = Prediction.__new__(Prediction)
    pred.__dict__.update(fields)
    return pred


def _build_floats(op: str, hardware: str, dtype: str, c: float, m: float, o: float,
                  lat: float, f: float, b: float, bytes_min: float, peak: float,
                  bandwidth: float, ridge_point: float,
                  stages: tuple[tuple[str, Prediction], ...],
                  details: dict[str, Any] | None) -> Prediction:
    """:func:`_build` on floats (``SCALAR``), its ``ops`` calls written as Python
    conditionals operation for operation: one prediction in about a µs. ``tests/
    test_scalar_paths.py`` checks it against :func:`_build` on random parts."""
    tiny = 1e-30
    lat_ = lat if lat > tiny else tiny
    cu = f / (lat_ * peak)
    mu = b / (lat_ * bandwidth)
    if (o > c and o > m) or (cu < 0.10 and mu < 0.10):
        label, dominant = "latency", o
        other = c if c > m else m
    elif c >= m:
        label, dominant = "compute", c
        other = m if m > o else o
    else:
        label, dominant = "memory", m
        other = c if c > o else o
    ratio = (dominant if dominant > tiny else tiny) / (other if other > tiny else tiny)
    pred = Prediction.__new__(Prediction)  # as in _build, given its field dict whole
    object.__setattr__(pred, "__dict__", {
        "op": op, "hardware": hardware, "dtype": dtype, "latency_s": lat, "compute_s": c,
        "memory_s": m, "overhead_s": o, "flops": f, "bytes": b, "bytes_min": bytes_min,
        "arithmetic_intensity": f / (b if b > tiny else tiny),
        "ridge_point": float(ridge_point), "compute_util": cu, "memory_util": mu,
        "bottleneck": label, "bottleneck_ratio": ratio if ratio > 1.0 else 1.0,
        "stages": stages, "details": dict(details or {}), "peak": float(peak),
        "bandwidth": float(bandwidth)})
    return pred
