"""GEMM timing: tile menu, wave quantisation, split-K, L2-aware traffic, tile fill.

For each candidate (tile t_m×t_n with relative efficiency e, split-K factor s):

- tiles T = (b·s)·⌈m/t_m⌉·⌈n/t_n⌉ (:func:`perfmodel.ops.gemm.tile_count`) run in waves of
  U·r (U SMs/CUs, r tiles per unit): W = ⌈T/(U·r)⌉;
- one tile takes t_tile = 2·t_m·t_n·⌈k/s⌉ / (e·R/U), R the achievable rate, so
  t_compute = W·t_tile (a partly filled last wave and padded edge tiles cost full time);
  on a device that runs its SM design's tensor units at a share c < 1 of their rate (H20,
  GeForce FP32 accumulate) a tile's e becomes min(e/c, 1): its loss is the operand feed
  of the full-rate design (:func:`perfmodel.timing.core.share_limited_efficiency`);
- traffic is :func:`perfmodel.ops.gemm.tiled_traffic` (panels shared through L2 inside a
  wave; scale factors of quantized schemes included) plus, for s > 1, the fp32 partial sums
  written and read back (2·s·b·m·n·4 bytes) by a second kernel; it streams from DRAM, or
  from L2 for a warm repeated call whose footprint fits
  (:func:`perfmodel.timing.core.stream_time`);
- per-CTA bandwidth: one CTA pulls at most c·BW/U (c the per-CTA multiple of the fair
  share, :func:`perfmodel.timing.kernels.gemm_cta_bandwidth`; for a family that never
  splits K, c·BW/U = f·smem_per_SM / memory latency, its pipeline's in-flight bytes over
  the latency), and each CTA moves its own
  tile's bytes o, the operands of its r × q × ⌈k/s⌉ product with r = min(t_m, m) rows and
  q = min(t_n, n) columns (:func:`perfmodel.ops.gemm.operand_bytes` of that shape: A's
  rows and B's columns with their scales, the output tile and bias, fp32 partials instead
  when split), panels it shares with other CTAs included: CTAs that start together wait
  on the same misses, whatever L2 later saves in traffic. So t_memory = max(traffic,
  o·U/c) at the stream rate + latency. A CTA's own bytes never shrink as the GEMM grows,
  so neither does its time (dividing the shared traffic among the CTAs instead made a
  976-row GEMM faster than a 64-row one);
- tile fill: the first k-slab load and the last tile store of a wave are not overlapped
  with math: min(T, U·r)·((t_m + t_n)·min(64, ⌈k/s⌉)·s_in + t_m·t_n·s_out) bytes at the
  call's stream rate (DRAM, or partly L2 for a warm call whose footprint fits), + latency
  (a k-slab is never deeper than the k a tile reduces);
- latency = overlap(t_compute, t_memory) + t_fill + f·t_kernel (t_kernel: the fixed
  cost of one kernel in the launch mode, :class:`perfmodel.timing.core.Env`); f is 1 for
  one kernel, 1 + ρ for a split-K candidate's two, ρ the reduce kernel's fixed cost in floors
  (``Env.split_reduce``: constant ``gemm_split_reduce.<arch>`` under CUDA-graph replay,
  1 for stream launches, whose fixed cost is each launch's own).

A calibration may rescale the fill (``fill_waves``), the per-CTA bandwidth and the tile
efficiencies (e → e^a, ``tile_efficiency_exponent``); see :mod:`perfmodel.timing.knobs`.

Split-K is considered only when the unsplit tiles do not fill one wave (T/s < U·r), only
while each split keeps at least 128 of k, and only for kernel families that split K (the
vendor library; not the engines' quantized-GEMM kernels:
:data:`perfmodel.timing.kernels.GEMM_UNSPLIT`).

A tile's efficiency e < 1 is the operand bandwidth a small tile lacks when every SM draws
on L2 at once; with C = min(T, U·r) < U·r tiles in flight the busy SMs share it among
fewer, so for a family that does not split K the compute time is scaled by
max(e, C/(U·r)) (at most the SM's full rate per tile: e·slots/C ≥ 1 removes the
penalty). The vendor library is left without it: with few tiles it splits K and fills the
device rather than run a few CTAs (applied to cuBLAS too, the relief picked few-CTA
candidates that moved AIConfigurator's small bf16 GEMMs from ratio 0.85 to 0.66, p90 on
A100 27 → 31-35 % after a refit).

On a vector unit (SIMT: no tensor cores, or a dtype they do not take) a GEMM of m ≤ 16
rows (:data:`GEMV_ROWS`) has one more candidate, a GEMV-style kernel (cuBLAS's gemv and
small-n gemm paths: each thread keeps its rows' dot products in registers and streams the
weights once): one launch, no split-K, the traffic and fill of the plain tile that makes it
fastest and t_compute = 2·b·m·n·k / R, as it pads no rows (:func:`_gemv_best`); it is taken
where faster.
A tensor core computes whole fragments; its padded tiles stay.

A kernel whose engine picks its CTA tile from a fixed table by the call's shape
(:class:`perfmodel.engines.GemmDispatch`: vLLM's and SGLang's SM89 fp8 scaled-mm,
TensorRT-LLM's SM89 block-fp8 GEMM, whose one tile is 32×128) has one candidate per
shape, the table's tile, whatever is fastest; a tile the architecture's menu lacks takes
the efficiency the menu gives its operand reuse I = t_m·t_n/(t_m + t_n)
(:func:`menu_efficiency`).

The library is modelled as choosing the fastest candidate (the first of equals in menu
order). The search prunes: a candidate's latency is at least
max(t_compute, t_memory,min) + t_fill + f·t_kernel, where t_memory,min streams
max(A + B + C (+ split partials), o'·U/c), o' = (r + q)·⌈k/s⌉·s_in (a CTA's own bytes
without scales or output); the terms are cheap and exact but the tiled re-reads and those
few bytes, so a candidate whose bound cannot beat the best so far is skipped. One formula
(:func:`_parts`) serves plain floats (one shape) and numpy arrays (many); both give the
same numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel._xp import SCALAR, VECTOR, Ops
from perfmodel.dtypes import bytes_per_element
from perfmodel.engines import GemmDispatch
from perfmodel.ops.cost import Array
from perfmodel.ops.gemm import Gemm, operand_bytes, tiled_traffic
from perfmodel.timing.core import Env, l2_hit_fraction, overlap, share_limited_efficiency
from perfmodel.timing.family import FamilyParams
from perfmodel.timing.kernels import gemm_splits_k
from perfmodel.timing.knobs import Knobs

__all__ = ["menu_efficiency", "time_gemm"]

_CHUNK = 1 << 15
#: Shapes up to which one call evaluates every candidate on every shape (:func:`_time_all`)
#: rather than pruning (:func:`_time_flat`).
_FEW = 512
_K_SLAB = 64.0
#: A bound this far (relative) below the best is still evaluated: float rounding of the
#: bound can never prune a candidate that would win.
_SLACK = 1.0 - 1e-9
_FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "bytes", "waves")


@dataclass(frozen=True)
class _Tile:
    """One candidate with its per-call constants."""

    tm: float
    tn: float
    eff: float
    split: float
    tile_s: float
    """2·U·t_m·t_n/(e·R): time of one tile per unit of ⌈k/s⌉, s."""
    fill_in: float
    """(t_m + t_n)·s_in: bytes of one k step of a tile's first slab (× min(64, ⌈k/s⌉))."""
    fill_out: float
    """t_m·t_n·s_out: bytes of a tile's store."""
    floors: float
    """Kernel floors f it pays: 1, or 1 + ρ for split-K (module doc)."""


@dataclass(frozen=True)
class _Call:
    """Constants of one GEMM call: the candidate menus and the device figures."""

    plain: tuple[_Tile, ...]
    splits: tuple[_Tile, ...]
    min_tm: float
    min_tn: float
    slots: float
    s_in: float
    s_out: float
    quant: str
    bias: bool
    """Element sizes, scheme and bias of the operands (a CTA's own bytes, :func:`_own`)."""
    cta_share: float
    """Per-CTA bandwidth over the units, c/U: a CTA moves its own bytes o in at least
    o·U/(c·BW) (:func:`_own`)."""
    bandwidth: float
    latency: float
    fill_waves: float
    kernel_s: float
    overlap_p: float
    warm: bool
    l2_capacity: float
    l2_bandwidth: float
    relieved: bool
    """Whether few tiles in flight relieve a small tile's penalty (:func:`_relief`): the
    families that do not split K."""
    tile_ms: tuple[float, ...]
    tile_ns: tuple[float, ...]
    split_values: tuple[float, ...]
    split_groups: tuple[tuple[_Tile, ...], ...]
    """The split-K candidates by tile (one group per tile of the menu)."""
    split_index: tuple[tuple[int, ...], ...]
    """Positions in ``splits`` of each group's members."""
    table: Array
    """Every candidate, plain then split: (t_m, t_n, e, s, t_tile, fill_in, fill_out,
    floors)."""
    least_tile_s: float
    """The least t_tile·e per unit of t_m·t_n of the menu (a tile's time at its least
    relieved efficiency, :func:`_relief`): 2·U/R."""
    plain_cols: _Tile
    """The plain candidates as one tile of column arrays (candidates × 1)."""
    split_cols: _Tile | None
    """The split-K candidates likewise (None without split-K)."""


@functools.lru_cache(maxsize=256)
def _tiles(fam: FamilyParams, unit: str, split: bool, exponent: float, units: int,
           rate: float, s_in: float, s_out: float, share: float = 1.0,
           reduce: float = 1.0) -> tuple[_Tile, ...]:
    menu = fam.tensor_tiles if unit == "tensor" else fam.vector_tiles
    out = []
    for tm, tn, e in menu:
        # a small tile's loss is the operand feed of the full-rate SM design: on a device
        # that runs the design's tensor units at a share of their rate it costs less
        eff = share_limited_efficiency(e if exponent == 1.0 else e**exponent, share, SCALAR)
        for s in fam.split_k:
            if (s > 1) != split:
                continue
            out.append(_Tile(tm, tn, eff, s, 2.0 * units * tm * tn / (eff * rate),
                             (tm + tn) * s_in, tm * tn * s_out, 1.0 + reduce if split else 1.0))
    return tuple(out)


def _call(k: Knobs, env: Env, rate: float, op: Gemm, split_k: bool = True,
          cta_bandwidth: float | None = None) -> _Call:
    cta = k.cta_bandwidth if cta_bandwidth is None else cta_bandwidth
    return _call_cached(k.family, k.unit, k.tile_exponent, k.units, rate,
                        bytes_per_element(op.dtype), bytes_per_element(op.out_dtype),
                        k.achievable_bandwidth, cta, k.memory_latency_s,
                        k.fill_waves, env.kernel_s, k.overlap_p, env.warm, env.l2_capacity,
                        env.l2_bandwidth, split_k, k.tensor_share, op.quant, op.bias,
                        env.split_reduce)


@functools.lru_cache(maxsize=512)
def _call_cached(fam: FamilyParams, unit: str, exponent: float, units: int, rate: float,
                 s_in: float, s_out: float, bandwidth: float, cta_bandwidth: float,
                 latency: float, fill_waves: float, kernel_s: float, overlap_p: float,
                 warm: bool, l2_capacity: float, l2_bandwidth: float,
                 split_k: bool = True, share: float = 1.0, quant: str = "none",
                 bias: bool = False, split_reduce: float = 1.0) -> _Call:
    key = (fam, unit, exponent, units, rate, s_in, s_out, share)
    plain = _tiles(*key[:2], False, *key[2:])
    splits = _tiles(*key[:2], True, *key[2:], split_reduce) if split_k else ()
    shapes = sorted({(t.tm, t.tn) for t in splits}, key=[(t.tm, t.tn) for t in plain].index)
    index = tuple(tuple(j for j, t in enumerate(splits) if (t.tm, t.tn) == tile)
                  for tile in shapes)
    table = np.asarray([(t.tm, t.tn, t.eff, t.split, t.tile_s, t.fill_in, t.fill_out,
                         t.floors) for t in plain + splits],
                       dtype=np.float64).reshape(-1, 8)
    table.setflags(write=False)
    return _Call(plain=plain, splits=splits, min_tm=min(t.tm for t in plain),
                 min_tn=min(t.tn for t in plain), slots=units * fam.tiles_per_unit,
                 s_in=s_in, s_out=s_out, quant=quant, bias=bias,
                 cta_share=cta_bandwidth / units, bandwidth=bandwidth, latency=latency,
                 fill_waves=fill_waves, kernel_s=kernel_s, overlap_p=overlap_p, warm=warm,
                 l2_capacity=l2_capacity, l2_bandwidth=l2_bandwidth, relieved=not split_k,
                 tile_ms=tuple(sorted({t.tm for t in plain})),
                 tile_ns=tuple(sorted({t.tn for t in plain})),
                 split_values=tuple(sorted({t.split for t in plain + splits})),
                 split_groups=tuple(tuple(splits[j] for j in idx) for idx in index),
                 split_index=index, table=table,
                 least_tile_s=min(t.tile_s * t.eff / (t.tm * t.tn) for t in plain),
                 plain_cols=_columns(plain), split_cols=_columns(splits) if splits else None)


def _kernels(split: Any, ops: Ops) -> Any:
    """Kernels a candidate of split-K factor ``split`` launches: the GEMM, and with
    split-K its reduce kernel (whose fixed cost :attr:`_Tile.floors` counts)."""
    return ops.where(split > 1.0, 2.0, 1.0)


def _columns(rows: tuple[_Tile, ...]) -> _Tile:
    """``rows`` as one :class:`_Tile` whose figures are read-only column arrays."""
    def col(name: str) -> Any:
        x = np.asarray([getattr(t, name) for t in rows], dtype=np.float64)[:, None]
        x.setflags(write=False)
        return x
    return _Tile(col("tm"), col("tn"), col("eff"), col("split"), col("tile_s"),
                 col("fill_in"), col("fill_out"), rows[0].floors)


def _per_byte(call: _Call, footprint: Any, ops: Ops) -> Any:
    """Seconds per byte of a warm call's stream: a hit share h of its footprint from L2
    (:func:`perfmodel.timing.core.stream_time`); None for a cold call."""
    if not call.warm:
        return None
    h = l2_hit_fraction(footprint, call.l2_capacity, ops)
    return (1.0 - h) / call.bandwidth + h / call.l2_bandwidth


def _stream(call: _Call, bytes_: Any, per_byte: Any, ops: Ops) -> Any:
    """Memory time of ``bytes_`` at the call's stream rate (0 for no bytes)."""
    if per_byte is None:
        t = bytes_ / call.bandwidth + call.latency
    else:
        t = bytes_ * per_byte + call.latency
    return ops.where(bytes_ > 0, t, 0.0 * t)


def _per(call: _Call, per_byte: Any) -> Any:
    """Seconds per byte of the call's stream at full bandwidth (DRAM for a cold call)."""
    return 1.0 / call.bandwidth if per_byte is None else per_byte


def _own(ops: Ops, call: _Call, t: _Tile, m: Any, n: Any, k_tile: Any, split: Any) -> Any:
    """Bytes one CTA of candidate ``t`` moves itself: the operands of its r × q × ⌈k/s⌉
    product, r = min(t_m, m), q = min(t_n, n) (:func:`perfmodel.ops.gemm.operand_bytes` of
    that shape: A's r rows, B's q columns with their scales, its output tile and bias); a
    split-K tile stores fp32 partials (4 bytes per element) instead."""
    rows = ops.minimum(m, t.tm)
    cols = ops.minimum(n, t.tn)
    split_k = not (isinstance(split, bool) and not split)
    a, w, c = operand_bytes(rows, cols, k_tile, 1.0, call.s_in, call.s_in, call.s_out, True,
                            call.bias and not split_k, call.quant, ops)
    return a + w + (4.0 * rows * cols if split_k else c)


def _relief(call: _Call, t: _Tile, conc: Any, ops: Ops) -> Any:
    """max(e, C/slots): the share of a tile's efficiency penalty left with C of the slots
    busy, for a family that does not split K; 1 otherwise (module doc)."""
    return ops.maximum(t.eff, conc / call.slots) if call.relieved else 1.0


def _too_thin(kk: Any, split: Any, ops: Ops) -> Any:
    """Whether a split-K factor leaves a part less than 128 of k (module doc)."""
    return ops.ceil(kk / split) < 128.0


def _parts(ops: Ops, call: _Call, t: _Tile, m: Any, n: Any, kk: Any, b: Any, mn: Any,
           a: Any, w: Any, c: Any, fits: Any, per_byte: Any,
           is_split: bool | None = None) -> dict[str, Any]:
    """Latency and parts of candidate ``t`` for the given shapes (floats or arrays; ``t``
    may hold a column of candidates, all split-K or none as ``is_split`` says)."""
    split = t.split > 1 if is_split is None else is_split
    tiles_m = ops.ceil(m / t.tm)
    tiles_n = ops.ceil(n / t.tn)
    tiles = (b * t.split) * tiles_m * tiles_n
    waves = ops.ceil(tiles / call.slots)
    conc = ops.minimum(tiles, call.slots)
    if isinstance(split, bool) and not split:  # no split-K: each tile reduces all of k
        k_tile, slab = kk, ops.minimum(kk, _K_SLAB)
    else:
        k_tile = ops.ceil(kk / t.split)
        slab = ops.minimum(k_tile, _K_SLAB)
    compute = waves * t.tile_s * k_tile * _relief(call, t, conc, ops)
    traffic = tiled_traffic(a, w, c, fits, m, n, t.tm, t.tn, conc, ops)
    if split:  # split-K: fp32 partials written and read back by a reduce kernel
        traffic = traffic + (8.0 * t.split) * mn
    # each CTA moves its own tile's bytes at the per-CTA bandwidth c·BW/U (module doc)
    own = _own(ops, call, t, m, n, k_tile, split)
    memory = _stream(call, ops.maximum(traffic, own / call.cta_share), per_byte, ops)
    if per_byte is None:  # a cold call's seconds per byte: one number, folded first
        per = 1.0 / call.bandwidth
        fill = (t.fill_in * per) * slab + t.fill_out * per
    else:
        fill = (t.fill_in * slab + t.fill_out) * per_byte
    overhead = (conc * fill + call.latency) * call.fill_waves + t.floors * call.kernel_s
    total = overlap(compute, memory, call.overlap_p, ops) + overhead
    if split:
        total = ops.where((tiles / t.split >= call.slots) | _too_thin(kk, t.split, ops),
                          math.inf, total)
    return {"latency_s": total, "compute_s": compute, "memory_s": memory,
            "overhead_s": overhead, "bytes": traffic, "waves": waves}


def _stream_lb(call: _Call, bytes_: Any, per_byte: Any) -> Any:
    """:func:`_stream` of a positive byte count (a lower bound needs no zero case)."""
    if per_byte is None:
        return bytes_ / call.bandwidth + call.latency
    return bytes_ * per_byte + call.latency


class _Shape:
    """Per-shape values the bounds of every candidate share (floats or arrays)."""

    def __init__(self, ops: Ops, call: _Call, m: Any, n: Any, kk: Any, b: Any, a: Any,
                 w: Any, c: Any, per_byte: Any) -> None:
        self.b = b
        self.kk = kk
        self.m, self.n = m, n
        self.mn = b * m * n
        self.least = a + w + c
        self.per_byte = per_byte
        self.tiles_m = {tm: ops.ceil(m / tm) for tm in call.tile_ms}
        self.tiles_n = {tn: ops.ceil(n / tn) for tn in call.tile_ns}
        self.k_split = {s: ops.ceil(kk / s) for s in call.split_values}
        self.slab = {s: ops.minimum(k, _K_SLAB) for s, k in self.k_split.items()}


def _bound(ops: Ops, call: _Call, t: _Tile, sh: _Shape) -> Any:
    """A lower bound of candidate ``t``'s latency (:func:`_parts` with the every-byte-once
    traffic A + B + C, plus split partials, for the tiled traffic), times a slack of
    1 − 10⁻⁹ so that rounding never lifts it above the true latency."""
    tiles = (sh.b * t.split) * sh.tiles_m[t.tm] * sh.tiles_n[t.tn]
    conc = ops.minimum(tiles, call.slots)
    k_tile = sh.k_split[t.split]
    compute = ops.ceil(tiles / call.slots) * t.tile_s * k_tile * _relief(call, t, conc, ops)
    traffic = sh.least + (8.0 * t.split) * sh.mn if t.split > 1 else sh.least
    # a CTA's own bytes are at least its A rows' and B columns' elements (_own)
    own = (ops.minimum(sh.m, t.tm) + ops.minimum(sh.n, t.tn)) * (call.s_in * k_tile)
    memory = _stream_lb(call, ops.maximum(traffic, own / call.cta_share), sh.per_byte)
    fill = (t.fill_in * sh.slab[t.split] + t.fill_out) * _per(call, sh.per_byte)
    overhead = (conc * fill + call.latency) * call.fill_waves + t.floors * call.kernel_s
    return (ops.maximum(compute, memory) + overhead) * _SLACK


def _split_bound(ops: Ops, call: _Call, t: _Tile, sh: _Shape) -> Any:
    """A lower bound of every split-K candidate of tile ``t`` at once (s ≥ 2): compute ≥
    the work spread over every slot at the tile's most relieved rate,
    b·⌈m/t_m⌉·⌈n/t_n⌉·t_tile·e·k/slots; memory ≥ A + B + C
    + 16·b·m·n bytes at full bandwidth; the fixed part grows with s (the fill counted by
    its stores alone: a split's k-slab may be shallower)."""
    tiles = sh.b * sh.tiles_m[t.tm] * sh.tiles_n[t.tn]
    compute = tiles * t.tile_s * t.eff * sh.kk / call.slots
    memory = _stream_lb(call, sh.least + 16.0 * sh.mn, sh.per_byte)
    conc = ops.minimum(2.0 * tiles, call.slots)
    fill = t.fill_out * _per(call, sh.per_byte)
    overhead = (conc * fill + call.latency) * call.fill_waves + t.floors * call.kernel_s
    return (ops.maximum(compute, memory) + overhead) * _SLACK


def _time_scalar(call: _Call, m: float, n: float, kk: float, b: float, a: float, w: float,
                 c: float, fits: bool, per_byte: Any) -> dict[str, Any]:
    """The search on floats for one shape: candidates in order of their bound (the
    :func:`_bound` formula, inlined on floats), each evaluated only while its bound can
    reach the best so far; the first of equals in menu order wins (as for the vectorised
    search). The split-K candidates are reached through one bound of them all (the least
    work of any tile over every slot, A + B + C + 16·b·m·n bytes at full bandwidth, the
    fixed part of a split's floors), then by tile group (:func:`_split_bound`)."""
    ceil = math.ceil
    slots, share, lat, relieved = call.slots, call.cta_share, call.latency, call.relieved
    fill_waves, kernel_s, s_in = call.fill_waves, call.kernel_s, call.s_in
    least = a + w + c
    mn = b * m * n
    # seconds per byte at full bandwidth
    per = 1.0 / call.bandwidth if per_byte is None else per_byte
    tiles_m = {tm: float(ceil(m / tm)) for tm in call.tile_ms}
    tiles_n = {tn: float(ceil(n / tn)) for tn in call.tile_ns}

    def bound(t: _Tile) -> float:
        split = t.split
        tiles = (b * split) * tiles_m[t.tm] * tiles_n[t.tn]
        conc = tiles if tiles < slots else slots
        relief = (conc / slots if conc / slots > t.eff else t.eff) if relieved else 1.0
        k_tile = kk if split == 1.0 else float(ceil(kk / split))
        compute = ceil(tiles / slots) * t.tile_s * k_tile * relief
        traffic = least if split == 1.0 else least + 8.0 * split * mn
        # at least its A rows' and B columns' elements (_own)
        own = ((m if m < t.tm else t.tm) + (n if n < t.tn else t.tn)) * s_in * k_tile / share
        memory = (traffic if traffic > own else own) * per + lat
        fill = (t.fill_in * (k_tile if k_tile < _K_SLAB else _K_SLAB) + t.fill_out) * per
        return ((compute if compute > memory else memory)
                + (conc * fill + lat) * fill_waves + t.floors * kernel_s) * _SLACK

    order = sorted((bound(t), i) for i, t in enumerate(call.plain))
    n_plain = len(call.plain)
    if call.splits and b * tiles_m[call.min_tm] * tiles_n[call.min_tn] < slots:
        compute = call.least_tile_s * mn * kk / slots
        memory = (least + 16.0 * mn) * per + lat
        order.append((((compute if compute > memory else memory) + lat * fill_waves
                       + call.splits[0].floors * kernel_s) * _SLACK, -1))
        order.sort()
    best: dict[str, Any] = {"latency_s": math.inf}
    top, top_i = math.inf, n_plain + len(call.splits)
    while order:
        low, i = order.pop(0)
        if low > top:
            break
        if i == -1:  # all split-K candidates: a bound per tile group
            for g, group in enumerate(call.split_groups):
                t = group[0]
                tiles = b * tiles_m[t.tm] * tiles_n[t.tn]
                compute = tiles * t.tile_s * t.eff * kk / slots
                conc = 2.0 * tiles if 2.0 * tiles < slots else slots
                memory = (least + 16.0 * mn) * per + lat
                order.append((((compute if compute > memory else memory)
                               + (conc * t.fill_out * per + lat) * fill_waves
                               + t.floors * kernel_s)
                              * _SLACK, -2 - g))
            order.sort()
            continue
        if i < -1:  # one tile group: its members, each with its own bound
            for j in call.split_index[-2 - i]:
                t = call.splits[j]
                if (b * t.split) * tiles_m[t.tm] * tiles_n[t.tn] / t.split >= slots \
                        or _too_thin(kk, t.split, SCALAR):
                    continue  # split-K not taken for this shape (infinite latency)
                order.append((bound(t), n_plain + j))
            order.sort()
            continue
        t = call.plain[i] if i < n_plain else call.splits[i - n_plain]
        parts = _parts(SCALAR, call, t, m, n, kk, b, mn, a, w, c, fits, per_byte)
        lat_i = parts["latency_s"]
        if lat_i < top or (lat_i == top and i < top_i):
            top, top_i = lat_i, i
            best = {**parts, "tile_m": t.tm, "tile_n": t.tn, "split_k": t.split,
                    "launches": _kernels(t.split, SCALAR)}
    return best


def _time_flat(call: _Call, m: Array, n: Array, kk: Array, b: Array, a: Array, w: Array,
               c: Array, fits: Array, per_byte: Any) -> dict[str, Array]:
    """The search on arrays: every plain candidate's bound first; the candidate of the
    lowest bound evaluated on every shape; then, in menu order, each candidate only on the
    shapes whose bound reaches the best so far (split-K groups first by a bound of the
    whole group, on the shapes with few tiles). The first of equals in menu order wins."""
    ops = VECTOR
    size = m.size
    sh = _Shape(ops, call, m, n, kk, b, a, w, c, per_byte)
    bounds = np.stack([np.broadcast_to(_bound(ops, call, t, sh), (size,))
                       for t in call.plain])
    first = np.argmin(bounds, axis=0)
    table = call.table
    pick = table[first]
    lead: Any = _Tile(pick[:, 0], pick[:, 1], pick[:, 2], 1.0, pick[:, 4], pick[:, 5],
                      pick[:, 6], 1.0)
    parts = _parts(ops, call, lead, m, n, kk, b, sh.mn, a, w, c, fits, per_byte)
    best = {name: np.array(np.broadcast_to(parts[name], (size,)), dtype=np.float64)
            for name in _FIELDS}
    chosen = first.astype(np.intp)

    def visit(j: int, t: _Tile, idx: npt.NDArray[np.intp]) -> None:
        every = idx.size == size

        def sel(x: Any) -> Any:
            return x if every else x[idx]

        parts = _parts(ops, call, t, sel(m), sel(n), sel(kk), sel(b), sel(sh.mn), sel(a),
                       sel(w), sel(c), sel(fits), None if per_byte is None else sel(per_byte))
        lat = np.broadcast_to(parts["latency_s"], idx.shape)
        old = best["latency_s"][idx]
        win = (lat < old) | ((lat == old) & (j < chosen[idx]))
        where = idx[win]
        for name in _FIELDS:
            best[name][where] = np.broadcast_to(parts[name], idx.shape)[win]
        chosen[where] = j

    for j, t in enumerate(call.plain):
        idx = np.flatnonzero((bounds[j] <= best["latency_s"]) & (first != j))
        if idx.size:
            visit(j, t, idx)
    few = np.flatnonzero(b * sh.tiles_m[call.min_tm] * sh.tiles_n[call.min_tn] < call.slots)
    if few.size and call.splits:
        sub = _Shape(ops, call, m[few], n[few], kk[few], b[few], a[few], w[few], c[few],
                     None if per_byte is None else per_byte[few])
        for g, group in enumerate(call.split_groups):
            near = _split_bound(ops, call, group[0], sub) <= best["latency_s"][few]
            if not near.any():
                continue
            for j in call.split_index[g]:
                t = call.splits[j]
                keep = near & (_bound(ops, call, t, sub) <= best["latency_s"][few])
                idx = few[keep]
                if idx.size:
                    visit(len(call.plain) + j, t, idx)
    out = dict(best)
    pick = table[chosen]
    out["tile_m"], out["tile_n"] = pick[:, 0], pick[:, 1]
    out["split_k"] = pick[:, 3]
    out["launches"] = _kernels(pick[:, 3], VECTOR)
    return out


def _time_all(call: _Call, m: Array, n: Array, kk: Array, b: Array, a: Array, w: Array,
              c: Array, fits: Array, per_byte: Any) -> dict[str, Array]:
    """The search on a few shapes: every candidate on every shape in two broadcast passes
    (candidates × shapes; split-K only on the shapes with few tiles), fewer numpy calls
    than pruning when shapes are few. The same choice as :func:`_time_flat`: the least
    latency, the first of equals in menu order (a split-K candidate only when strictly
    faster than every plain one)."""
    size = m.size
    mn = b * m * n
    parts = _parts(VECTOR, call, call.plain_cols, m, n, kk, b, mn, a, w, c, fits, per_byte,
                   False)
    shape = (len(call.plain), size)
    best = np.argmin(np.broadcast_to(parts["latency_s"], shape), axis=0)
    pick = np.arange(size)
    out = {name: np.array(np.broadcast_to(parts[name], shape)[best, pick], dtype=np.float64)
           for name in _FIELDS}
    chosen = best.astype(np.intp)
    few = np.flatnonzero(b * np.ceil(m / call.min_tm) * np.ceil(n / call.min_tn) < call.slots)
    if few.size and call.split_cols is not None:
        sp = _parts(VECTOR, call, call.split_cols, m[few], n[few], kk[few], b[few], mn[few],
                    a[few], w[few], c[few], fits[few],
                    None if per_byte is None else per_byte[few], True)
        sshape = (len(call.splits), few.size)
        sbest = np.argmin(np.broadcast_to(sp["latency_s"], sshape), axis=0)
        spick = np.arange(few.size)
        better = np.broadcast_to(sp["latency_s"], sshape)[sbest, spick] \
            < out["latency_s"][few]
        win = few[better]
        for name in _FIELDS:
            out[name][win] = np.broadcast_to(sp[name], sshape)[sbest, spick][better]
        chosen[win] = len(call.plain) + sbest[better]
    table = call.table[chosen]
    out["tile_m"], out["tile_n"] = table[:, 0], table[:, 1]
    out["split_k"] = table[:, 3]
    out["launches"] = _kernels(table[:, 3], VECTOR)
    return out


def footprint(op: Gemm, env: Env, ops: Ops = VECTOR) -> Any:
    """Bytes a warm repeated call touches between two calls of the same buffers
    (:func:`_footprint` of its operands); 0 for a cold call."""
    if not env.warm:
        return 0.0
    a, w, c = op.operand_bytes(op.m, op.n, op.k, op.batch, ops)
    return _footprint(a, w, c, env, env.copies)


def _footprint(a: Any, w: Any, c: Any, env: Env, copies: Any) -> Any:
    """copies·(B + C) + A (copies·A with ``input_copies``): the harness rotates the
    weights and outputs (and, where it says so, the inputs) through ``copies`` buffers.
    (Counting one output buffer instead moved AIConfigurator's bf16 GEMM rows from 9.47 /
    31.4 % median / p90 to 9.51 / 31.4 % after refitting the L2 constants: better on
    L40S, worse elsewhere, so the rotation stays.)"""
    a_copies = copies if env.input_copies else 1.0
    return a_copies * a + copies * (w + c)


def _one_shape(op: Gemm, call: _Call, env: Env, l2: float,
               gemv_rate: float = 0.0) -> dict[str, Any]:
    """:func:`time_gemm` of a scalar op, on floats; with its FLOPs and minimum bytes. A
    ``gemv_rate`` > 0 times the GEMV-style kernel at that rate instead (:func:`_gemv_best`;
    ``call`` without split-K)."""
    m, n, kk, b = float(op.m), float(op.n), float(op.k), float(op.batch)
    a, w, c = operand_bytes(m, n, kk, b, call.s_in, call.s_in, call.s_out, op.shared_b,
                            op.bias, op.quant, SCALAR)
    fits = (a / b + w / (1.0 if op.shared_b else b)) <= l2
    per_byte = _per_byte(call, _footprint(a, w, c, env, float(env.copies)), SCALAR) \
        if env.warm else None
    if gemv_rate > 0.0:
        out = _gemv_best(SCALAR, call, m, n, kk, b, a, w, c, fits, per_byte, gemv_rate)
    else:
        out = _time_scalar(call, m, n, kk, b, a, w, c, fits, per_byte)
    out["flops"] = 2.0 * b * m * n * kk
    out["bytes_min"] = a + w + c
    return out


#: Rows at or below which a vector-unit GEMM runs as a GEMV-style kernel (module doc).
GEMV_ROWS = 16.0


def _gemv(out: dict[str, Any], m: Any, n: Any, kk: Any, b: Any, rate: float, p: float,
          ops: Ops) -> dict[str, Any]:
    """``out`` (a plain candidate's parts for shapes of m ≤ GEMV_ROWS on a vector unit) as
    the GEMV-style kernel (module doc): c' = min(c, 2·b·m·n·k / R), latency −
    overlap(c, t_mem) + overlap(c', t_mem)."""
    c, mem = out["compute_s"], out["memory_s"]
    c2 = ops.minimum(c, 2.0 * b * m * n * kk / rate)
    lat = out["latency_s"] - overlap(c, mem, p, ops) + overlap(c2, mem, p, ops)
    return {**out, "compute_s": c2, "latency_s": lat}


def _gemv_best(ops: Ops, call: _Call, m: Any, n: Any, kk: Any, b: Any, a: Any, w: Any,
               c: Any, fits: Any, per_byte: Any, rate: float) -> dict[str, Any]:
    """The GEMV-style kernel on the plain tile that makes it fastest (:func:`_gemv` of every
    plain candidate of ``call``, the first of equals in menu order): its traffic and fill
    are that tile's, its compute the unpadded rows'. (Taking the tile the padded kernel
    would choose kept that tile's traffic: with every CTA moving its own B columns, a wide
    tile made a batch of 251 one-row fp64 GEMMs on an MI355X 1.95× slower than 252.)"""
    mn = b * m * n
    if ops is SCALAR:
        best: dict[str, Any] = {"latency_s": math.inf}
        for t in call.plain:
            g = _gemv(_parts(SCALAR, call, t, m, n, kk, b, mn, a, w, c, fits, per_byte),
                      m, n, kk, b, rate, call.overlap_p, SCALAR)
            if g["latency_s"] < best["latency_s"]:
                best = {**g, "tile_m": t.tm, "tile_n": t.tn, "split_k": 1.0,
                        "launches": 1.0}
        return best
    g = _gemv(_parts(VECTOR, call, call.plain_cols, m, n, kk, b, mn, a, w, c, fits, per_byte,
                     False), m, n, kk, b, rate, call.overlap_p, VECTOR)
    shape = (len(call.plain), m.size)
    pick = np.argmin(np.broadcast_to(g["latency_s"], shape), axis=0)
    cols = np.arange(m.size)
    out = {name: np.array(np.broadcast_to(g[name], shape)[pick, cols], dtype=np.float64)
           for name in _FIELDS}
    table = call.table[pick]
    out["tile_m"], out["tile_n"] = table[:, 0], table[:, 1]
    out["split_k"] = table[:, 3]
    out["launches"] = np.ones(m.size)  # a plain tile: one kernel
    return out


def _search(call: _Call, m: Array, n: Array, kk: Array, b: Array, a: Array, w: Array,
            c: Array, fits: Array, per_byte: Any) -> dict[str, Array]:
    """The best candidate of every shape (flat arrays), searched in chunks."""
    if m.size <= _FEW:
        return _time_all(call, m, n, kk, b, a, w, c, fits, per_byte)
    if m.size <= _CHUNK:
        return _time_flat(call, m, n, kk, b, a, w, c, fits, per_byte)
    return _chunked(functools.partial(_time_flat, call), (m, n, kk, b, a, w, c, fits),
                    per_byte)


def _chunked(time: Callable[..., dict[str, Array]], cols: tuple[Array, ...],
             per_byte: Any) -> dict[str, Array]:
    """``time(*cols, per_byte)``, evaluated on :data:`_CHUNK` shapes at a time (bounded
    temporaries) and concatenated."""
    parts = []
    for i in range(0, cols[0].size, _CHUNK):
        sl = slice(i, i + _CHUNK)
        parts.append(time(*(x[sl] for x in cols), None if per_byte is None else per_byte[sl]))
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def _one(op: Gemm, env: Env) -> bool:
    """Whether the call is one shape: a scalar op, and one number of rotated copies."""
    return op.shape == () and np.ndim(env.copies) == 0


def _flat(op: Gemm, env: Env) -> tuple[tuple[int, ...], Array, Array, Array, Array]:
    """The broadcast shape of ``op``'s fields and ``env.copies``, and m, n, k and batch
    flattened over it."""
    shape = np.broadcast_shapes(op.shape, np.shape(env.copies))
    m, n, kk, b = (np.broadcast_to(x, shape).ravel() for x in (op.m, op.n, op.k, op.batch))
    return shape, m, n, kk, b


def _flat_copies(env: Env, shape: tuple[int, ...]) -> Array:
    """``env.copies`` flattened over ``shape`` (:func:`_flat`)."""
    return np.broadcast_to(np.asarray(env.copies, dtype=np.float64), shape).ravel()


def menu_efficiency(menu: tuple[tuple[float, float, float], ...], tm: float,
                    tn: float) -> float:
    """Relative efficiency of a t_m×t_n tile by the menu ``menu`` ((t_m, t_n, e) rows): its
    own e where the menu has the tile; else by its operand reuse I = t_m·t_n/(t_m + t_n)
    (elements of math per element loaded), linearly between the menu's (I, e) points (the
    best e at equal I), the largest point's e above them, and e_min·I/I_min below the
    smallest (a tile that loads more per MMA is fed at a rate proportional to its reuse).
    Ampere's menu: 32×128 (I = 25.6) → 0.53, 16×64 (I = 12.8) → 0.27."""
    for a, b, e in menu:
        if a == tm and b == tn:
            return e
    best: dict[float, float] = {}
    for a, b, e in menu:
        i = a * b / (a + b)
        best[i] = max(e, best.get(i, 0.0))
    points = sorted(best.items())
    reuse = tm * tn / (tm + tn)
    if reuse <= points[0][0]:
        return points[0][1] * reuse / points[0][0]
    for (i0, e0), (i1, e1) in itertools.pairwise(points):
        if reuse <= i1:
            return e0 + (e1 - e0) * (reuse - i0) / (i1 - i0)
    return points[-1][1]


def _dispatched(k: Knobs, tm: float, tn: float) -> Knobs:
    """``k`` with a one-tile tensor menu: the t_m×t_n tile a dispatch table names."""
    fam = k.family
    tile = (tm, tn, menu_efficiency(fam.tensor_tiles, tm, tn))
    return dataclasses.replace(k, family=dataclasses.replace(fam, tensor_tiles=(tile,)))


def _table_tiles(dispatch: GemmDispatch, m: Array,
                 n: Array) -> tuple[npt.NDArray[np.intp], list[tuple[float, float]]]:
    """The tile ``dispatch`` names for each shape (:meth:`perfmodel.engines.GemmDispatch.tile`
    on arrays, the first matching row wins): an index per shape into the distinct tiles."""
    tiles = sorted({(tm, tn) for _, _, tm, tn in dispatch.rows})
    which = np.full(m.size, -1, dtype=np.intp)
    for m_max, n_max, tm, tn in reversed(dispatch.rows):  # the first row wins: set last
        which[(m <= m_max) & (n <= n_max)] = tiles.index((tm, tn))
    if (which < 0).any():
        i = int(np.flatnonzero(which < 0)[0])
        dispatch.tile(float(m[i]), float(n[i]))  # raises: no row holds this shape
    return which, tiles


def _time_dispatched(op: Gemm, k: Knobs, env: Env, efficiency: float,
                     cta_bandwidth: float | None, dispatch: GemmDispatch) -> dict[str, Any]:
    """:func:`time_gemm` of a kernel whose tile ``dispatch`` fixes by shape: each distinct
    tile's shapes timed with that tile alone."""
    if _one(op, env):
        return time_gemm(op, _dispatched(k, *dispatch.tile(float(op.m), float(op.n))), env,
                         efficiency, cta_bandwidth)
    shape, m, n, kk, b = _flat(op, env)
    copies = _flat_copies(env, shape)
    which, tiles = _table_tiles(dispatch, m, n)
    out: dict[str, Array] = {}
    for j in np.unique(which).tolist():
        idx = np.flatnonzero(which == j)
        sub = dataclasses.replace(op, m=m[idx], n=n[idx], k=kk[idx], batch=b[idx])
        rotated: Any = copies[idx]  # Env.copies: a number, or an array like the shape
        part = time_gemm(sub, _dispatched(k, *tiles[j]), dataclasses.replace(env, copies=rotated),
                         efficiency, cta_bandwidth)
        for key, v in part.items():
            out.setdefault(key, np.empty(m.size))[idx] = v
    return {key: v.reshape(shape) for key, v in out.items()}


def time_gemm(op: Gemm, k: Knobs, env: Env, efficiency: float = 1.0,
              cta_bandwidth: float | None = None,
              dispatch: GemmDispatch | None = None) -> dict[str, Any]:
    """Best-candidate timing of the GEMM kernel of ``op`` (arrays shaped like the op's
    broadcast shape; floats for a scalar op; the activation-quantize stage, if any, is
    timed by the caller). ``efficiency`` scales the achievable rate for the op's kernel
    family and scheme; ``cta_bandwidth`` is the per-CTA bandwidth multiple (default: the
    knobs'). On a vector unit a GEMV-style kernel is one more candidate for a GEMM of few
    rows (:func:`_gemv`). With a ``dispatch`` table (a tensor-core kernel whose engine
    fixes its tile by shape) each shape has that one tile (:func:`_time_dispatched`)."""
    if dispatch is not None and k.unit == "tensor":
        return _time_dispatched(op, k, env, efficiency, cta_bandwidth, dispatch)
    rate = k.rate * efficiency
    call = _call(k, env, rate, op, gemm_splits_k(op.impl), cta_bandwidth)
    gemv = k.unit == "vector"
    l2 = k.l2_bytes
    if _one(op, env):
        one = _one_shape(op, call, env, l2)
        if gemv and float(op.m) <= GEMV_ROWS:
            # the GEMV kernel: one launch, no split-K, the rows it has
            plain = _call(k, env, rate, op, False, cta_bandwidth)
            g = _one_shape(op, plain, env, l2, rate)
            if g["latency_s"] < one["latency_s"]:
                return g
        return one
    shape, m, n, kk, b = _flat(op, env)
    a, w, c = operand_bytes(m, n, kk, b, call.s_in, call.s_in, call.s_out, op.shared_b,
                            op.bias, op.quant)
    b_mats = 1.0 if op.shared_b else b
    fits = (a / b + w / b_mats) <= l2
    per_byte: Any = None
    if env.warm:
        per_byte = _per_byte(call, _footprint(a, w, c, env, _flat_copies(env, shape)),
                             VECTOR)
    flat = _search(call, m, n, kk, b, a, w, c, fits, per_byte)
    few = np.flatnonzero(m <= GEMV_ROWS) if gemv else np.empty(0, dtype=np.intp)
    if few.size:
        plain = _call(k, env, rate, op, False, cta_bandwidth)
        g = _chunked(functools.partial(_gemv_best, VECTOR, plain, rate=rate),
                     tuple(x[few] for x in (m, n, kk, b, a, w, c, fits)),
                     None if per_byte is None else per_byte[few])
        take = g["latency_s"] < flat["latency_s"][few]
        better = few[take]
        for key in flat:
            flat[key] = np.array(flat[key], dtype=np.float64)
            flat[key][better] = np.asarray(g[key], dtype=np.float64)[take]
    flat["flops"] = 2.0 * b * m * n * kk
    flat["bytes_min"] = a + w + c
    return {key: v.reshape(shape) for key, v in flat.items()}
