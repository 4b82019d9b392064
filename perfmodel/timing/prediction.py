"""Prediction: a latency with its parts and the figures that explain it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Prediction", "Value", "as_value"]

#: A float for scalar inputs, a numpy array when shape fields were arrays.
Value = float | npt.NDArray[np.float64]
Label = str | npt.NDArray[np.str_]


def as_value(x: Any) -> Value:
    """0-d arrays become Python floats; arrays stay arrays (float64)."""
    arr = np.asarray(x, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def _as_label(x: Any) -> Label:
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
        Useful FLOPs (2·m·n·k for a GEMM; exact causal pairs for attention).
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
    c = np.asarray(compute_s, dtype=np.float64)
    m = np.asarray(memory_s, dtype=np.float64)
    o = np.asarray(overhead_s, dtype=np.float64)
    lat = np.asarray(latency_s, dtype=np.float64)
    f = np.asarray(flops, dtype=np.float64)
    b = np.asarray(bytes_, dtype=np.float64)
    cu = f / (lat * peak)
    mu = b / (lat * bandwidth)
    tiny = 1e-30
    fixed_dominates = (o > c) & (o > m)
    low_util = (cu < 0.10) & (mu < 0.10)
    is_latency = fixed_dominates | low_util
    is_compute = ~is_latency & (c >= m)
    label = np.where(is_latency, "latency", np.where(is_compute, "compute", "memory"))
    dominant = np.where(is_latency, o, np.where(is_compute, c, m))
    other = np.where(is_latency, np.maximum(c, m),
                     np.where(is_compute, np.maximum(m, o), np.maximum(c, o)))
    ratio = np.maximum(dominant, tiny) / np.maximum(other, tiny)
    return Prediction(
        op=op, hardware=hardware, dtype=dtype, latency_s=as_value(lat), compute_s=as_value(c),
        memory_s=as_value(m), overhead_s=as_value(o), flops=as_value(f), bytes=as_value(b),
        bytes_min=as_value(bytes_min), arithmetic_intensity=as_value(f / np.maximum(b, tiny)),
        ridge_point=float(ridge_point), compute_util=as_value(cu), memory_util=as_value(mu),
        bottleneck=_as_label(label), bottleneck_ratio=as_value(np.maximum(ratio, 1.0)),
        stages=stages, details=dict(details or {}),
    )
