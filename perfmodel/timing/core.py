"""Shared timing formulas: memory time for a transfer (from DRAM or, for a warm repeated
call whose footprint fits, from L2), overlap of compute and memory, and the per-call
environment (:class:`Env`) the op timings share.

Each formula takes an ``ops`` namespace (:mod:`perfmodel._xp`) so the same formula runs on
floats (scalar fast path) or numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perfmodel._xp import VECTOR, Ops
from perfmodel.timing.constants import Constants, arch_name
from perfmodel.timing.context import RunContext
from perfmodel.timing.knobs import Knobs

__all__ = ["Env", "cta_bandwidth_fraction", "l2_hit_fraction", "make_env", "memory_time",
           "overlap", "share_limited_efficiency", "stream_time"]


@dataclass(frozen=True)
class Env:
    """Per-call figures beyond the knobs: the fixed cost of one kernel in this launch mode,
    and whether (and how much) L2 holds operands across repeats.

    Attributes
    ----------
    kernel_s:
        Fixed cost per kernel, s: the spec's ``kernel_overhead`` for stream launches, the
        graph floor (constant ``graph_kernel_s``) for CUDA-graph replay.
    warm:
        The call is repeated with nothing in between (no L2 flush).
    l2_capacity:
        Bytes of L2 a repeated call's footprint may occupy and still hit: L2 size /
        its SM-side partitions (each may hold its own copy of what every SM reads) ×
        ``l2_capacity_fraction``.
    l2_bandwidth:
        Achievable L2 bandwidth, B/s (peak × ``l2_bandwidth_fraction``).
    copies, input_copies:
        Weight (and input) copies the harness rotates (:class:`RunContext`).
    engine:
        The inference engine making the call (:class:`RunContext`).
    """

    kernel_s: float
    warm: bool
    l2_capacity: float
    l2_bandwidth: float
    copies: float = 1.0
    input_copies: bool = False
    engine: str = ""
    """The engine making the call (its configuration of a kernel family)."""
    split_reduce: float = 1.0
    """Fixed cost of a split-K GEMM's reduce kernel in units of ``kernel_s``: constant
    ``gemm_split_reduce`` (per architecture) under CUDA-graph replay, 1 for stream
    launches."""


def make_env(k: Knobs, ctx: RunContext, consts: Constants, arch: str = "") -> Env:
    """The :class:`Env` of knobs ``k`` under context ``ctx`` and model constants (``arch``
    picks per-architecture refinements)."""
    graph = ctx.launch == "graph"
    kernel_s = (consts[arch_name("graph_kernel_s", arch)] * k.clock_scale
                if graph else k.overhead_s)
    return Env(kernel_s=kernel_s, warm=ctx.l2 == "warm",
               l2_capacity=k.l2_bytes / k.l2_partitions * consts["l2_capacity_fraction"],
               l2_bandwidth=k.l2_bandwidth * consts["l2_bandwidth_fraction"],
               copies=ctx.copies, input_copies=ctx.input_copies, engine=ctx.engine,
               split_reduce=(consts[arch_name("gemm_split_reduce", arch)] if graph
                             else 1.0))


def cta_bandwidth_fraction(ctas: Any, k: Knobs, ops: Ops = VECTOR,
                           cta_bandwidth: float | None = None) -> Any:
    """Fraction of the achievable bandwidth that ``ctas`` concurrent CTAs can pull:
    min(1, CTAs·c/units), c = the per-CTA bandwidth multiple of the fair share (the
    family's, or calibrated; ``cta_bandwidth`` replaces it for a kernel family of its
    own)."""
    c = k.cta_bandwidth if cta_bandwidth is None else cta_bandwidth
    return ops.clip(ctas * (c / k.units), 1e-3, 1.0)


def memory_time(bytes_: Any, k: Knobs, ctas: Any = None, ops: Ops = VECTOR,
                cta_bandwidth: float | None = None) -> Any:
    """Time to move ``bytes_`` through device memory, s.

    t = bytes / (BW·η_m·f_cta) + latency: the latency term is the size dependence of
    bandwidth (a transfer smaller than BW × latency bytes cannot keep enough requests in
    flight); f_cta caps bandwidth when few CTAs run. Zero bytes cost nothing.
    """
    frac = 1.0 if ctas is None else cta_bandwidth_fraction(ctas, k, ops, cta_bandwidth)
    t = bytes_ / (k.achievable_bandwidth * frac) + k.memory_latency_s
    return ops.where(bytes_ > 0, t, 0.0 * t)


def l2_hit_fraction(footprint: Any, capacity: float, ops: Ops = VECTOR) -> Any:
    """Share of a warm repeated call's traffic that hits in L2: 1 / (1 + (F/C)^8) for
    footprint F and usable capacity C — near 1 well inside the cache, near 0 beyond it,
    with the transition over ±10 % of C that set-associativity and partitioning give a
    real cache (and a smooth dependence a fit can follow)."""
    ratio = footprint / max(capacity, 1.0)
    return 1.0 / (1.0 + ratio ** 8)


def stream_time(bytes_: Any, footprint: Any, k: Knobs, env: Env, ctas: Any = None,
                ops: Ops = VECTOR, cta_bandwidth: float | None = None) -> Any:
    """:func:`memory_time`, except that for a warm repeated call the share h of the traffic
    that hits in L2 (:func:`l2_hit_fraction` of its ``footprint``: the bytes it touches,
    × the harness's copies) streams at the L2 bandwidth:
    t = bytes·((1 − h)/BW_dram + h/BW_L2)/f_cta + latency."""
    if not env.warm:
        return memory_time(bytes_, k, ctas, ops, cta_bandwidth)
    frac = 1.0 if ctas is None else cta_bandwidth_fraction(ctas, k, ops, cta_bandwidth)
    h = l2_hit_fraction(footprint, env.l2_capacity, ops)
    per_byte = (1.0 - h) / k.achievable_bandwidth + h / env.l2_bandwidth
    t = bytes_ * per_byte / frac + k.memory_latency_s
    return ops.where(bytes_ > 0, t, 0.0 * t)


def share_limited_efficiency(eff: Any, share: float, ops: Ops = VECTOR) -> Any:
    """A kernel's efficiency e (its rate / the device's achievable tensor rate) on a device
    that runs its SM design's tensor units at the share c ≤ 1 of the design's rate:
    max(e, min(e/c, 1)).

    Below 1, e is what the kernel loses to the rest of the SM (operand feeds from shared
    memory and L2, the softmax, instruction issue, latency), measured on full-rate parts.
    Those limits hold at the design's rate R/c, so they cap the kernel at e·R/c, while the
    product's own tensor units cap it at R: the rate is min(e/c, 1)·R. A value above 1 (a
    fitted family rate) is kept. c = 1 (the design itself) returns e unchanged."""
    if share >= 1.0:
        return eff
    return ops.maximum(eff, ops.minimum(eff / share, 1.0))


def overlap(compute_s: Any, memory_s: Any, p: float, ops: Ops = VECTOR) -> Any:
    """max(t_c, t_m) for p = ∞, else the smooth maximum (t_c^p + t_m^p)^(1/p)."""
    if math.isinf(p):
        return ops.maximum(compute_s, memory_s)
    hi = ops.maximum(ops.maximum(compute_s, memory_s), 1e-30)
    return hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p)
