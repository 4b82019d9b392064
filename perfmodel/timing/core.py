"""Shared timing formulas: memory time for a transfer, overlap of compute and memory.

Each takes an ``ops`` namespace (:mod:`perfmodel.timing._xp`) so the same formula runs on
floats (scalar fast path) or numpy arrays.
"""

from __future__ import annotations

import math
from typing import Any

from perfmodel.timing._xp import VECTOR, Ops
from perfmodel.timing.knobs import Knobs

__all__ = ["cta_bandwidth_fraction", "memory_time", "overlap"]


def cta_bandwidth_fraction(ctas: Any, k: Knobs, ops: Ops = VECTOR) -> Any:
    """Fraction of the achievable bandwidth that ``ctas`` concurrent CTAs can pull:
    min(1, CTAs·c/units), c = the per-CTA bandwidth multiple of the fair share (the
    family's, or calibrated)."""
    return ops.clip(ctas * (k.cta_bandwidth / k.units), 1e-3, 1.0)


def memory_time(bytes_: Any, k: Knobs, ctas: Any = None, ops: Ops = VECTOR) -> Any:
    """Time to move ``bytes_`` through device memory, s.

    t = bytes / (BW·η_m·f_cta) + latency: the latency term is the size dependence of
    bandwidth (a transfer smaller than BW × latency bytes cannot keep enough requests in
    flight); f_cta caps bandwidth when few CTAs run. Zero bytes cost nothing.
    """
    frac = 1.0 if ctas is None else cta_bandwidth_fraction(ctas, k, ops)
    t = bytes_ / (k.achievable_bandwidth * frac) + k.family.memory_latency_s
    return ops.where(bytes_ > 0, t, 0.0 * t)


def overlap(compute_s: Any, memory_s: Any, p: float, ops: Ops = VECTOR) -> Any:
    """max(t_c, t_m) for p = ∞, else the smooth maximum (t_c^p + t_m^p)^(1/p)."""
    if math.isinf(p):
        return ops.maximum(compute_s, memory_s)
    hi = ops.maximum(ops.maximum(compute_s, memory_s), 1e-30)
    return hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p)
