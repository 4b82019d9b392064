"""GEMM timing: tile menu, wave quantisation, split-K, L2-aware traffic, tile fill.

For each candidate (tile t_m×t_n with relative efficiency e, split-K factor s):

- tiles T = b·⌈m/t_m⌉·⌈n/t_n⌉·s run in waves of U·r (U SMs/CUs, r tiles per unit):
  W = ⌈T/(U·r)⌉;
- one tile takes t_tile = 2·t_m·t_n·⌈k/s⌉ / (e·R/U), R the achievable rate, so
  t_compute = W·t_tile (a partly filled last wave and padded edge tiles cost full time);
- traffic is :meth:`Gemm.tiled_traffic` (panels shared through L2 inside a wave; scale
  factors of quantized schemes included) plus, for s > 1, the fp32 partial sums written
  and read back (2·s·b·m·n·4 bytes) by a second kernel; it streams from DRAM, or from L2
  for a warm repeated call whose footprint fits (:func:`perfmodel.timing.core.stream_time`);
- tile fill: the first k-slab load and the last tile store of a wave are not overlapped
  with math: (min(T, U·r)·((t_m + t_n)·64·s_in + t_m·t_n·s_out)) / BW + latency;
- latency = overlap(t_compute, t_memory) + t_fill + launches·t_kernel (t_kernel: the fixed
  cost of one kernel in the launch mode, :class:`perfmodel.timing.core.Env`).

A calibration may rescale the fill (``fill_waves``), the per-CTA bandwidth and the tile
efficiencies (e → e^a, ``tile_efficiency_exponent``); see :mod:`perfmodel.timing.knobs`.

Split-K is considered only when the unsplit tiles do not fill one wave (T/s < U·r).

The library is modelled as choosing the fastest candidate.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from perfmodel._xp import SCALAR, VECTOR, Ops
from perfmodel.dtypes import bytes_per_element
from perfmodel.ops.cost import Array
from perfmodel.ops.gemm import Gemm
from perfmodel.timing.core import Env, overlap, stream_time
from perfmodel.timing.family import FamilyParams
from perfmodel.timing.knobs import Knobs

__all__ = ["time_gemm"]

_CHUNK = 1 << 15
_K_SLAB = 64.0


def _candidates(k: Knobs, split: bool) -> Array:
    return _candidate_table(k.family, k.unit, split, k.tile_exponent)


@functools.lru_cache(maxsize=64)
def _candidate_table(fam: FamilyParams, unit: str, split: bool, exponent: float = 1.0) -> Array:
    tiles = fam.tensor_tiles if unit == "tensor" else fam.vector_tiles
    splits = [x for x in fam.split_k if (x > 1) == split]
    rows = [(tm, tn, e if exponent == 1.0 else e**exponent, s)
            for tm, tn, e in tiles for s in splits]
    table = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    table.setflags(write=False)
    return table


@functools.lru_cache(maxsize=64)
def _candidate_rows(fam: FamilyParams, unit: str, split: bool,
                    exponent: float = 1.0) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(r) for r in _candidate_table(fam, unit, split, exponent).tolist())


_FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "bytes", "waves")


def _evaluate(ops: Ops, op: Gemm, m: Any, n: Any, kk: Any, b: Any, fp: Any, s_in: float,
              s_out: float, k: Knobs, env: Env, rate: float, tm: Any, tn: Any, eff: Any,
              split: Any, is_split: bool) -> dict[str, Any]:
    """Parts of one candidate (or a column of candidates) for the given shapes."""
    slots = k.units * k.family.tiles_per_unit
    tiles_m = ops.ceil(m / tm)
    tiles_n = ops.ceil(n / tn)
    tiles = (b * split) * tiles_m * tiles_n
    waves = ops.ceil(tiles / slots)
    tile_s = 2.0 * k.units * tm * tn / (eff * rate)
    compute = waves * tile_s * ops.ceil(kk / split)
    conc = ops.minimum(tiles, slots)
    traffic = op.tiled_traffic(m, n, kk, b, tm, tn, conc, k.l2_bytes, ops)
    launches = 1.0
    mn = b * m * n
    if is_split:  # split-K: fp32 partials written and read back by a reduce kernel
        traffic = traffic + (8.0 * split) * mn
        launches = 2.0
    memory = stream_time(traffic, fp, k, env, ctas=conc, ops=ops)
    fill_const = ((tm + tn) * _K_SLAB * s_in + tm * tn * s_out) / k.achievable_bandwidth
    overhead = (conc * fill_const + k.family.memory_latency_s) * k.fill_waves \
        + launches * env.kernel_s
    total = overlap(compute, memory, k.overlap_p, ops) + overhead
    if is_split:
        # split-K only when the unsplit tiles leave part of the device idle in one wave,
        # and only while each split keeps at least 128 of k
        total = ops.where((tiles / split >= slots) | (kk < 128.0 * split), math.inf, total)
    return {"latency_s": total, "compute_s": compute, "memory_s": memory,
            "overhead_s": overhead, "bytes": traffic, "waves": waves}


def _best_vector(op: Gemm, m: Array, n: Array, kk: Array, b: Array, fp: Array, s_in: float,
                 s_out: float, k: Knobs, env: Env, rate: float,
                 cand: Array) -> tuple[Array, dict[str, Array]]:
    tm, tn, eff, split = (cand[:, i : i + 1] for i in range(4))
    parts = _evaluate(VECTOR, op, m, n, kk, b, fp, s_in, s_out, k, env, rate, tm, tn, eff,
                      split, is_split=bool(cand[0, 3] > 1))
    total = parts["latency_s"]
    best = np.argmin(total, axis=0)
    pick = np.arange(total.shape[1])
    return best, {name: np.broadcast_to(v, total.shape)[best, pick] for name, v in parts.items()}


def _time_flat(op: Gemm, m: Array, n: Array, kk: Array, b: Array, fp: Array, s_in: float,
               s_out: float, k: Knobs, env: Env, rate: float) -> dict[str, Array]:
    """Best candidate per shape: unsplit tiles for all, split-K only where tiles are few."""
    plain = _candidates(k, split=False)
    best, out = _best_vector(op, m, n, kk, b, fp, s_in, s_out, k, env, rate, plain)
    chosen = plain[best].copy()
    slots = k.units * k.family.tiles_per_unit
    few = b * np.ceil(m / plain[:, 0].min()) * np.ceil(n / plain[:, 1].min()) < slots
    splits = _candidates(k, split=True)
    if splits.size and np.any(few):
        idx = np.flatnonzero(few)
        sbest, sout = _best_vector(op, m[idx], n[idx], kk[idx], b[idx], fp[idx], s_in, s_out,
                                   k, env, rate, splits)
        better = sout["latency_s"] < out["latency_s"][idx]
        win = idx[better]
        for name in _FIELDS:
            out[name][win] = sout[name][better]
        chosen[win] = splits[sbest[better]]
    out["tile_m"], out["tile_n"], out["split_k"] = chosen[:, 0], chosen[:, 1], chosen[:, 3]
    out["launches"] = np.where(chosen[:, 3] > 1, 2.0, 1.0)
    return out


def _time_scalar(op: Gemm, m: float, n: float, kk: float, b: float, fp: float, s_in: float,
                 s_out: float, k: Knobs, env: Env, rate: float) -> dict[str, Any]:
    """The same search on floats, one candidate at a time (fast for a single shape); same
    result as the vectorised search, candidates that cannot win are skipped early."""
    best: dict[str, Any] = {"latency_s": math.inf}
    plain = _candidate_rows(k.family, k.unit, False, k.tile_exponent)
    slots = k.units * k.family.tiles_per_unit
    min_tm = min(c[0] for c in plain)
    min_tn = min(c[1] for c in plain)
    rows = [(c, False) for c in plain]
    if b * math.ceil(m / min_tm) * math.ceil(n / min_tn) < slots:
        rows += [(c, True) for c in _candidate_rows(k.family, k.unit, True, k.tile_exponent)]
    scale = 2.0 * k.units / rate
    for (tm, tn, eff, split), is_split in rows:
        # exact pruning: a candidate's latency is at least its compute time plus its launch
        # cost, so one whose lower bound cannot beat the best so far is skipped
        tiles = b * split * -(-m // tm) * -(-n // tn)
        bound = (-(-tiles // slots) * scale * tm * tn / eff * -(-kk // split)
                 + (2.0 if is_split else 1.0) * env.kernel_s)
        if bound >= best["latency_s"]:
            continue
        parts = _evaluate(SCALAR, op, m, n, kk, b, fp, s_in, s_out, k, env, rate, tm, tn, eff,
                          split, is_split)
        if parts["latency_s"] < best["latency_s"]:
            best = {**parts, "tile_m": tm, "tile_n": tn, "split_k": split,
                    "launches": 2.0 if is_split else 1.0}
    return best


def footprint(op: Gemm, env: Env, ops: Ops = VECTOR) -> Any:
    """Bytes a warm repeated call touches between two calls of the same buffers: the
    rotated copies of B and C (and of A with ``input_copies``), else A once."""
    if not env.warm:
        return 0.0
    a, w, c = op.operand_bytes(op.m, op.n, op.k, op.batch, ops)
    a_copies = env.copies if env.input_copies else 1.0
    return a_copies * a + env.copies * (w + c)


def time_gemm(op: Gemm, k: Knobs, env: Env, efficiency: float = 1.0) -> dict[str, Any]:
    """Best-candidate timing of the GEMM kernel of ``op`` (arrays shaped like the op's
    broadcast shape; the activation-quantize stage, if any, is timed by the caller).
    ``efficiency`` scales the achievable rate for the op's kernel family and scheme."""
    shape = op.shape
    s_in = bytes_per_element(op.dtype)
    s_out = bytes_per_element(op.out_dtype)
    rate = k.rate * efficiency
    if shape == () and np.ndim(env.copies) == 0:
        ms, ns, ks, bs = (float(x) for x in (op.m, op.n, op.k, op.batch))
        fp0 = float(footprint(op, env, SCALAR)) if env.warm else 0.0
        return _time_scalar(op, ms, ns, ks, bs, fp0, s_in, s_out, k, env, rate)
    shape = np.broadcast_shapes(shape, np.shape(env.copies))
    m, n, kk, b = (np.broadcast_to(x, shape).ravel() for x in (op.m, op.n, op.k, op.batch))
    fp: Array = np.broadcast_to(np.asarray(footprint(op, env), dtype=np.float64),
                                shape).ravel()
    if m.size <= _CHUNK:
        flat = _time_flat(op, m, n, kk, b, fp, s_in, s_out, k, env, rate)
        return {key: v.reshape(shape) for key, v in flat.items()}
    parts = [_time_flat(op, m[i:i + _CHUNK], n[i:i + _CHUNK], kk[i:i + _CHUNK],
                        b[i:i + _CHUNK], fp[i:i + _CHUNK], s_in, s_out, k, env, rate)
             for i in range(0, m.size, _CHUNK)]
    return {key: np.concatenate([p[key] for p in parts]).reshape(shape) for key in parts[0]}
