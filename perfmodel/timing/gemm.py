"""GEMM timing: tile menu, wave quantisation, split-K, L2-aware traffic, tile fill.

For each candidate (tile t_m×t_n with relative efficiency e, split-K factor s):

- tiles T = b·⌈m/t_m⌉·⌈n/t_n⌉·s run in waves of U·r (U SMs/CUs, r tiles per unit):
  W = ⌈T/(U·r)⌉;
- one tile takes t_tile = 2·t_m·t_n·⌈k/s⌉ / (e·R/U), R the achievable rate, so
  t_compute = W·t_tile (a partly filled last wave and padded edge tiles cost full time);
- traffic is :meth:`Gemm.bytes_tiled` (panels shared through L2 inside a wave) plus, for
  s > 1, the fp32 partial sums written and read back (2·s·b·m·n·4 bytes) by a second kernel;
- tile fill: the first k-slab load and the last tile store of a wave are not overlapped
  with math: (min(T, U·r)·((t_m + t_n)·64·s_in + t_m·t_n·s_out)) / BW + latency;
- latency = overlap(t_compute, t_memory) + t_fill + launches·t_fixed.

Split-K is considered only when the unsplit tiles do not fill one wave (T/s < U·r).

The library is modelled as choosing the fastest candidate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfmodel.dtypes import bytes_per_element
from perfmodel.ops.cost import Array
from perfmodel.ops.gemm import Gemm
from perfmodel.timing.core import memory_time, overlap
from perfmodel.timing.knobs import Knobs

__all__ = ["time_gemm"]

_CHUNK = 1 << 15
_K_SLAB = 64.0


def _candidates(k: Knobs) -> Array:
    tiles = k.family.tensor_tiles if k.unit == "tensor" else k.family.vector_tiles
    rows = [(tm, tn, e, s) for tm, tn, e in tiles for s in k.family.split_k]
    return np.asarray(rows, dtype=np.float64)


def _time_flat(m: Array, n: Array, kk: Array, b: Array, b_mats: Array, s_in: float,
               s_out: float, k: Knobs, cand: Array) -> dict[str, Array]:
    """All candidates for flat shape arrays; returns the best per shape."""
    tm, tn, eff, split = (cand[:, i : i + 1] for i in range(4))
    slots = k.units * k.family.tiles_per_unit
    tiles_m = np.ceil(m / tm)
    tiles_n = np.ceil(n / tn)
    tiles = b * tiles_m * tiles_n * split
    waves = np.ceil(tiles / slots)
    rate_per_unit = k.rate / k.units
    t_tile = 2.0 * tm * tn * np.ceil(kk / split) / (eff * rate_per_unit)
    compute = waves * t_tile
    # traffic with L2 reuse inside a wave (see Gemm.bytes_tiled)
    a_bytes = s_in * b * m * kk
    b_bytes = s_in * b_mats * kk * n
    conc = np.minimum(tiles, slots)
    g_m = np.clip(np.round(np.sqrt(conc)), 1.0, tiles_m)
    g_n = np.clip(np.floor(conc / g_m), 1.0, tiles_n)
    fits = (a_bytes / b + b_bytes / b_mats) <= k.l2_bytes
    a_reads = np.where(fits, 1.0, np.ceil(tiles_n / g_n))
    b_reads = np.where(fits, 1.0, np.ceil(tiles_m / g_m))
    c_bytes = s_out * b * m * n
    partials = np.where(split > 1, 2.0 * split * b * m * n * 4.0, 0.0)
    traffic = a_bytes * a_reads + b_bytes * b_reads + c_bytes + partials
    memory = memory_time(traffic, k, ctas=conc)
    fill_bytes = conc * ((tm + tn) * _K_SLAB * s_in + tm * tn * s_out)
    fill = (fill_bytes / k.achievable_bandwidth + k.family.memory_latency_s) * k.family.fill_waves
    launches = np.where(split > 1, 2.0, 1.0)
    total = overlap(compute, memory, k.overlap_p) + fill + launches * k.overhead_s
    # split-K only when the unsplit tiles leave part of the device idle in a single wave
    total = np.where((split > 1) & (tiles / split >= slots), np.inf, total)
    best = np.argmin(total, axis=0)
    pick = np.arange(total.shape[1])

    def sel(x: Array) -> Array:
        full = np.broadcast_to(x, total.shape)
        return np.asarray(full[best, pick], dtype=np.float64)

    return {
        "latency_s": sel(total), "compute_s": sel(compute), "memory_s": sel(memory),
        "overhead_s": sel(fill + launches * k.overhead_s), "bytes": sel(traffic),
        "tile_m": sel(tm), "tile_n": sel(tn), "split_k": sel(split), "waves": sel(waves),
        "launches": sel(launches),
    }


def time_gemm(op: Gemm, k: Knobs) -> dict[str, Any]:
    """Best-candidate timing of ``op`` (arrays shaped like the op's broadcast shape)."""
    shape = op.shape
    m, n, kk, b = (np.broadcast_to(x, shape).ravel() for x in (op.m, op.n, op.k, op.batch))
    b_mats = b if not op.shared_b else np.ones_like(b)
    s_in = bytes_per_element(op.dtype)
    s_out = bytes_per_element(op.out_dtype)
    cand = _candidates(k)
    parts: list[dict[str, Array]] = []
    for start in range(0, max(m.size, 1), _CHUNK):
        sl = slice(start, start + _CHUNK)
        parts.append(_time_flat(m[sl], n[sl], kk[sl], b[sl], b_mats[sl], s_in, s_out, k, cand))
    out: dict[str, Any] = {}
    for key in parts[0]:
        out[key] = np.concatenate([p[key] for p in parts]).reshape(shape)
    if op.bias:
        out["bytes"] = out["bytes"] + s_out * np.broadcast_to(op.n, shape)
    return out
