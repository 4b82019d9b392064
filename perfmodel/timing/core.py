"""Shared timing formulas: memory time for a transfer, overlap of compute and memory."""

from __future__ import annotations

import math

import numpy as np

from perfmodel.ops.cost import Array
from perfmodel.timing.knobs import Knobs

__all__ = ["cta_bandwidth_fraction", "memory_time", "overlap"]


def cta_bandwidth_fraction(ctas: Array | float, k: Knobs) -> Array:
    """Fraction of the achievable bandwidth that ``ctas`` concurrent CTAs can pull:
    min(1, CTAs·c/units), c = the family's per-CTA bandwidth multiple of the fair share."""
    return np.clip(np.asarray(ctas, dtype=np.float64) * k.family.cta_bandwidth / k.units,
                   1e-3, 1.0)


def memory_time(bytes_: Array | float, k: Knobs, ctas: Array | float | None = None) -> Array:
    """Time to move ``bytes_`` through device memory, s.

    t = bytes / (BW·η_m·f_cta) + latency: the latency term is the size dependence of
    bandwidth (a transfer smaller than BW × latency bytes cannot keep enough requests in
    flight); f_cta caps bandwidth when few CTAs run. Zero bytes cost nothing.
    """
    b = np.asarray(bytes_, dtype=np.float64)
    frac = 1.0 if ctas is None else cta_bandwidth_fraction(ctas, k)
    t = b / (k.achievable_bandwidth * frac) + k.family.memory_latency_s
    return np.where(b > 0, t, 0.0)


def overlap(compute_s: Array, memory_s: Array, p: float) -> Array:
    """max(t_c, t_m) for p = ∞, else the smooth maximum (t_c^p + t_m^p)^(1/p)."""
    if math.isinf(p):
        return np.maximum(compute_s, memory_s)
    hi = np.maximum(np.maximum(compute_s, memory_s), 1e-30)
    return np.asarray(hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p))
