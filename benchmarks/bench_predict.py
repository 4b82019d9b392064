"""Predictions per second: one scalar GEMM at a time vs one vectorised call over 10^6 shapes.

    python benchmarks/bench_predict.py [--gpu h100-sxm] [--calls 2000] [--shapes 1000000]

Prints the median time of a scalar ``predict(Gemm(...), hw)`` (op construction included, the
way a scheduler calls it), the time of one call over ``--shapes`` random shapes, both as
predictions per second, and their ratio from this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import perfmodel as pm


def scalar_us(hw: pm.HardwareSpec, calls: int, rng: np.random.Generator) -> float:
    """Median µs of one scalar GEMM prediction over ``calls`` calls (after a warm-up)."""
    shapes = rng.integers(1, 16385, size=(calls, 3))
    for m, n, k in shapes[:50]:
        pm.predict(pm.Gemm(m=int(m), n=int(n), k=int(k), dtype="bf16"), hw)
    times = []
    for m, n, k in shapes:
        t0 = time.perf_counter()
        pm.predict(pm.Gemm(m=int(m), n=int(n), k=int(k), dtype="bf16"), hw)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def vector_s(hw: pm.HardwareSpec, shapes: int, rng: np.random.Generator, repeats: int) -> float:
    """Best wall time of one vectorised call over ``shapes`` GEMM shapes, s."""
    m, n, k = (rng.integers(1, 16385, size=shapes) for _ in range(3))
    pm.predict(pm.Gemm(m=m[:1000], n=n[:1000], k=k[:1000], dtype="bf16"), hw)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = pm.predict(pm.Gemm(m=m, n=n, k=k, dtype="bf16"), hw)
        best = min(best, time.perf_counter() - t0)
        assert np.shape(p.latency_s) == (shapes,)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="h100-sxm")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--shapes", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hw = pm.load_hardware(args.gpu)
    rng = np.random.default_rng(0)
    us = scalar_us(hw, args.calls, rng)
    vs = vector_s(hw, args.shapes, rng, args.repeats)
    scalar_rate = 1e6 / us
    vector_rate = args.shapes / vs
    print(f"gpu {hw.id}, GEMM bf16, shapes uniform in [1, 16384]^3")
    print(f"scalar:     {us:9.1f} µs per call (median of {args.calls}) "
          f"= {scalar_rate:12,.0f} predictions/s")
    print(f"vectorised: {vs:9.3f} s for {args.shapes:,} shapes (best of {args.repeats}) "
          f"= {vector_rate:12,.0f} predictions/s ({vs / args.shapes * 1e9:.0f} ns per shape)")
    print(f"ratio vectorised/scalar: {vector_rate / scalar_rate:,.0f}x")


if __name__ == "__main__":
    main()
