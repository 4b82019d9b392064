"""Calibrated residual correction: the hook through which a calibrated profile's
``calibration.residuals`` tables reach predictions.

A prediction with kernel-only latency t becomes

    t' = t · exp(r),

with compute, memory and fixed parts scaled alike (so latency = overlap(parts) + fixed
still holds) and any timing-method floor (``extra_overhead_s``) added after. r is read
from the first table found for the op (keys below), of one of two kinds, both fitted by
``perfmodel calibrate fit`` on r_i = log(measured_i / predicted_i):

- **size table**, key ``K``: rows [x, r] sorted by x, x = log10 of the op's size (FLOPs for
  gemm and attention, minimum bytes moved for streaming ops); r is interpolated linearly
  and is 0 outside the table, whose end rows have r = 0 (the correction fades to the
  parametric model outside the measured range);
- **shape table**, key ``K#shape`` (gemm and attention): a first row [h, w0], then rows
  [x_1 … x_d, r_i] with x = log2 of the op's shape (gemm: m, n, k, batch; attention: batch,
  heads, kv_heads, seq_q, seq_kv, head_dim). r is the kernel-weighted mean

      r(x) = Σ w_i·r_i / (Σ w_i + w0),   w_i = exp(−|x − x_i|² / (2h²)),

  which follows the measured shapes near them and falls to 0 (the parametric model) far
  from all of them; w0 sets how many nearby points it takes to trust them;
- **kernel-ridge table**, key ``K#gp`` (gemm and attention): a first row [h_1 … h_d, c]
  (length scales per coordinate, and a constant), then rows [x_1 … x_d, α_i]:

      r(x) = c + Σ α_i·exp(−½·Σ_j ((x_j − x_ij)/h_j)²),

  the posterior mean of a Gaussian process (α = (K + λI)⁻¹(e − c)); with c = 0 it too
  falls to the parametric model far from the measured points. The coordinates are the log2
  shape, optionally followed by the prediction's regime (:func:`regime_features`: log2 of
  the uncorrected latency in µs and of its arithmetic intensity in FLOP/B); the header's
  length says which: d = the shape's coordinates (a table of an older version), or d =
  those + :data:`REGIME_FEATURES`. The regime places a point among those that are
  launch-, memory- or compute-bound, which a shape's coordinates say only through
  products (tokens × width × depth) an axis-aligned kernel follows poorly.

Keys K, most specific first, for an op of dtype d: gemm ``gemm/d``; attention
``attention/<path>[-causal]/d``, then the same path with the other mask, then
``attention/d`` (path: flash2, flash3, paged, naive…);
streaming ops ``stream/<op name>/d`` then ``stream/d``. For each K the kernel-ridge table is tried
first, then the shape table, then the size table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from perfmodel.hardware.spec import HardwareSpec
from perfmodel.timing.prediction import Prediction, as_value

__all__ = ["GP_SUFFIX", "REGIME_FEATURES", "SHAPE_SUFFIX", "apply_residual", "gp_values",
           "regime_features", "residual_keys", "shape_coordinates", "with_regime"]

SHAPE_SUFFIX = "#shape"
GP_SUFFIX = "#gp"
#: Coordinates :func:`regime_features` adds to a kernel-ridge table's shape coordinates.
REGIME_FEATURES = 2
_CHUNK = 4096


def residual_keys(p: Prediction, causal: bool = False) -> tuple[str, ...]:
    """Table keys for prediction ``p``, most specific first (empty for collectives).

    Attention: its kernel path with its mask, then the same path with the other mask (a
    calibration whose rows were all causal, or none, still corrects the other kind on the
    same kernel: the masked tiles are in the uncorrected prediction and in its regime
    coordinates), then the dtype's."""
    d = p.dtype
    if p.op == "gemm":
        return (f"gemm/{d}",)
    if p.op == "attention":
        path = str(p.details.get("impl", "flash"))
        own, other = (f"{path}-causal", path) if causal else (path, f"{path}-causal")
        return (f"attention/{own}/{d}", f"attention/{other}/{d}", f"attention/{d}")
    if p.op == "allreduce":
        return ()
    return (f"stream/{p.op}/{d}", f"stream/{d}")


def shape_coordinates(op: Any) -> np.ndarray | None:
    """log2 of the shape fields of a Gemm or Attention op, shape (rows, d); None for
    other ops."""
    names: tuple[str, ...]
    if getattr(op, "name", "") == "gemm":
        names = ("m", "n", "k", "batch")
    elif getattr(op, "name", "") == "attention":
        names = ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim")
    else:
        return None
    fields = np.broadcast_arrays(*(np.asarray(getattr(op, n), dtype=np.float64) for n in names))
    coords: np.ndarray = np.log2(np.maximum(np.stack([f.ravel() for f in fields], axis=1), 1.0))
    return coords


def regime_features(p: Prediction) -> np.ndarray:
    """The regime of prediction ``p`` as coordinates, shape (rows, :data:`REGIME_FEATURES`):
    log2(latency / 1 µs) and log2(FLOPs / bytes moved), the bytes at least 1 and the FLOPs
    at least 1 (a streaming op's intensity is then ≤ 0), the latency at least 1 ps."""
    lat = np.log2(np.maximum(np.asarray(p.latency_s, dtype=np.float64), 1e-12) / 1e-6)
    intensity = np.log2(np.maximum(np.asarray(p.flops, dtype=np.float64), 1.0)
                        / np.maximum(np.asarray(p.bytes, dtype=np.float64), 1.0))
    a, b = np.broadcast_arrays(lat, intensity)
    return np.stack([a.ravel(), b.ravel()], axis=1)


def with_regime(coords: np.ndarray, p: Prediction) -> np.ndarray:
    """Shape coordinates ``coords`` (rows, d) followed by the :func:`regime_features` of
    their uncorrected prediction ``p``: the coordinates of a kernel-ridge table with the
    regime, shape (rows, d + :data:`REGIME_FEATURES`)."""
    regime = regime_features(p)
    rows = max(coords.shape[0], regime.shape[0])
    return np.hstack([np.broadcast_to(coords, (rows, coords.shape[1])),
                      np.broadcast_to(regime, (rows, REGIME_FEATURES))])


def _size_table(table: list[list[float]], x: Any) -> Any:
    arr = np.asarray(table, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] != 2:
        return np.zeros(np.shape(x))
    return np.interp(x, arr[:, 0], arr[:, 1], left=0.0, right=0.0)


def _shape_table(table: list[list[float]], coords: np.ndarray) -> np.ndarray:
    h, w0 = float(table[0][0]), float(table[0][1])
    pts = np.asarray(table[1:], dtype=np.float64)
    if pts.ndim != 2 or pts.shape[0] == 0 or pts.shape[1] != coords.shape[1] + 1 or h <= 0:
        return np.zeros(coords.shape[0])
    xs, rs = pts[:, :-1], pts[:, -1]
    out = np.empty(coords.shape[0])
    for start in range(0, coords.shape[0], _CHUNK):
        q = coords[start:start + _CHUNK]
        d2 = ((q[:, None, :] - xs[None, :, :]) ** 2).sum(axis=-1)
        w = np.exp(-0.5 * d2 / h**2)
        out[start:start + _CHUNK] = (w @ rs) / (w.sum(axis=1) + w0)
    return out


def gp_values(table: list[list[float]], coords: np.ndarray) -> np.ndarray:
    """r(x) of a kernel-ridge table at ``coords`` (rows, d); zeros for a malformed table."""
    head = np.asarray(table[0], dtype=np.float64)
    pts = np.asarray(table[1:], dtype=np.float64)
    d = coords.shape[1]
    if (head.shape != (d + 1,) or pts.ndim != 2 or pts.shape[0] == 0
            or pts.shape[1] != d + 1 or np.any(head[:d] <= 0)):
        return np.zeros(coords.shape[0])
    inv_h = 1.0 / head[:d]
    xs, alpha = pts[:, :-1] * inv_h, pts[:, -1]
    out = np.empty(coords.shape[0])
    for start in range(0, coords.shape[0], _CHUNK):
        q = coords[start:start + _CHUNK] * inv_h
        d2 = ((q[:, None, :] - xs[None, :, :]) ** 2).sum(axis=-1)
        out[start:start + _CHUNK] = head[d] + np.exp(-0.5 * d2) @ alpha
    return out


def apply_residual(p: Prediction, hw: HardwareSpec, extra_overhead_s: float = 0.0,
                   causal: bool = False, op: Any = None) -> Prediction:
    """``p`` corrected by the first matching residual table of ``hw``; ``p`` unchanged if
    the spec has none. ``op`` (the predicted op) is needed for shape tables."""
    cal = hw.calibration
    if cal is None or not cal.residuals:
        return p
    r: Any = None
    coords = shape_coordinates(op) if op is not None else None
    for key in residual_keys(p, causal):
        gp = cal.residuals.get(key + GP_SUFFIX)
        if gp is not None and coords is not None and len(gp) > 1:
            if len(gp[0]) == coords.shape[1] + 1 + REGIME_FEATURES:
                coords = with_regime(coords, p)
            r = gp_values(gp, coords).reshape(np.shape(p.latency_s))
            break
        shape = cal.residuals.get(key + SHAPE_SUFFIX)
        if shape is not None and coords is not None and len(shape) > 1:
            r = _shape_table(shape, coords).reshape(np.shape(p.latency_s))
            break
        if key in cal.residuals:
            size = p.flops if p.op in ("gemm", "attention") else p.bytes_min
            x = np.log10(np.maximum(np.asarray(size, dtype=np.float64), 1.0))
            r = _size_table(cal.residuals[key], x)
            break
    if r is None:
        return p
    f = np.exp(r)
    lat = np.asarray(p.latency_s, dtype=np.float64)
    new_lat = (lat - extra_overhead_s) * f + extra_overhead_s
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
