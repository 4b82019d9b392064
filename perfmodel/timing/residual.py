"""Calibrated residual correction: the hook through which a calibrated profile's
``calibration.residuals`` tables reach predictions.

A table (written by ``perfmodel calibrate fit --residual``) is a list of rows [x, r] sorted
by x, where x = log10 of the op's size coordinate and r = log(measured / predicted) of the
parametric model at that size. A prediction with kernel-only latency t becomes

    t' = t · exp(r(x)),   r = linear interpolation in the table, 0 outside it,

with compute, memory and fixed parts scaled alike (so latency = overlap(parts) + fixed
still holds) and any timing-method floor (``extra_overhead_s``) added after. The tables
end in rows with r = 0, so the correction fades to the parametric model outside the
measured range.

Size coordinate: FLOPs for gemm and attention, minimum bytes moved for streaming ops.
Table keys, most specific first, for an op of dtype d:

- gemm: ``gemm/d``;
- attention: ``attention/<path>[-causal]/d`` then ``attention/d`` (path: flash2, flash3,
  paged, naive ...);
- streaming ops: ``stream/<op name>/d`` (copy, add, rmsnorm, layernorm, gelu, softmax ...)
  then ``stream/d``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from perfmodel.hardware.spec import HardwareSpec
from perfmodel.timing.prediction import Prediction, as_value

__all__ = ["apply_residual", "residual_keys"]


def residual_keys(p: Prediction, causal: bool = False) -> tuple[str, ...]:
    """Table keys for prediction ``p``, most specific first (empty for collectives)."""
    d = p.dtype
    if p.op == "gemm":
        return (f"gemm/{d}",)
    if p.op == "attention":
        path = str(p.details.get("impl", "flash")) + ("-causal" if causal else "")
        return (f"attention/{path}/{d}", f"attention/{d}")
    if p.op == "allreduce":
        return ()
    return (f"stream/{p.op}/{d}", f"stream/{d}")


def _interp(table: list[list[float]], x: Any) -> Any:
    arr = np.asarray(table, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 2:
        return np.zeros(np.shape(x))
    return np.interp(x, arr[:, 0], arr[:, 1], left=0.0, right=0.0)


def apply_residual(p: Prediction, hw: HardwareSpec, extra_overhead_s: float = 0.0,
                   causal: bool = False) -> Prediction:
    """``p`` corrected by the first matching residual table of ``hw``; ``p`` unchanged if
    the spec has none."""
    cal = hw.calibration
    if cal is None or not cal.residuals:
        return p
    table = next((cal.residuals[k] for k in residual_keys(p, causal) if k in cal.residuals),
                 None)
    if table is None:
        return p
    size = p.flops if p.op in ("gemm", "attention") else p.bytes_min
    x = np.log10(np.maximum(np.asarray(size, dtype=np.float64), 1.0))
    f = np.exp(_interp(table, x))
    lat = np.asarray(p.latency_s, dtype=np.float64)
    kernel = lat - extra_overhead_s
    new_lat = kernel * f + extra_overhead_s
    ratio = lat / np.maximum(new_lat, 1e-30)
    return dataclasses.replace(
        p, latency_s=as_value(new_lat),
        compute_s=as_value(np.asarray(p.compute_s) * f),
        memory_s=as_value(np.asarray(p.memory_s) * f),
        overhead_s=as_value((np.asarray(p.overhead_s) - extra_overhead_s) * f
                            + extra_overhead_s),
        compute_util=as_value(np.asarray(p.compute_util) * ratio),
        memory_util=as_value(np.asarray(p.memory_util) * ratio),
        details={**p.details, "residual_factor": as_value(f)},
    )
