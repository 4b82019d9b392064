"""Serving simulator speed: 10,000 requests of 1k in / 1k out, llama-3.1-70b TP4 on h200-sxm,
closed loop at concurrency 64 (the issue's target: under 1 s on one core).

    python benchmarks/bench_serving.py [--requests 10000] [--concurrency 64] [--sample 200]

Runs on one core (pinned to CPU 0 where the OS allows; BLAS threads off). Three ways to
get the same answer:

1. ``simulate``: tables built once, runs of identical decode steps in closed form;
2. ``per-step loop``: the same tables, every engine step one Python iteration
   (``bulk=False``, the reference the closed form must match);
3. ``per-step scalar evaluation``: what a simulator without tables pays — one scalar
   ``predict_model`` decode-step call per engine step; timed on ``--sample`` calls and
   multiplied by the number of steps of the run.

Prints the times from this one run and their ratios to (1).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel.serving import closed_loop, prepare, run_prepared  # noqa: E402
from perfmodel.serving.simulator import simulate_replica  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--sample", type=int, default=200)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {0})
    model, gpu, tp = "llama-3.1-70b", "h200-sxm", 4
    wl = closed_loop(args.concurrency, args.requests, 1024, 1024)
    t0 = time.perf_counter()
    cfg, spec, eng, pool, tables = prepare(model, gpu, wl, tp=tp, engine="vllm")
    t_tables = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = run_prepared(cfg, spec, eng, pool, tables, wl, tp=tp)
    t_sim = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = simulate_replica(tables, eng, pool, wl, bulk=False)
    t_loop = time.perf_counter() - t0
    same = float(np.max(np.abs(ref.finish_s - res.finish_s) / res.finish_s))
    steps = res.steps
    rng = np.random.default_rng(0)
    batches = rng.integers(1, args.concurrency + 1, size=args.sample)
    ctx = rng.integers(1025, 2048, size=args.sample)
    t0 = time.perf_counter()
    for b, c in zip(batches.tolist(), ctx.tolist(), strict=True):
        pm.predict_model(model, gpu, phase="decode", batch=b, context_len=c, tp=tp)
    per_call = (time.perf_counter() - t0) / args.sample
    t_scalar = per_call * steps
    print(f"{args.requests:,} requests, 1024 in / 1024 out, {model} TP{tp} on {gpu}, closed "
          f"loop C={args.concurrency}: {steps:,} engine steps")
    print(f"  tables (once)                 {t_tables * 1e3:9.1f} ms")
    print(f"  simulate (closed-form runs)   {t_sim * 1e3:9.1f} ms   1.0x")
    print(f"  per-step loop, same tables    {t_loop * 1e3:9.1f} ms   {t_loop / t_sim:6.1f}x"
          f"   (finish times agree to {same:.1e})")
    print(f"  per-step scalar evaluation    {t_scalar:9.1f} s    {t_scalar / t_sim:6.0f}x"
          f"   ({per_call * 1e3:.2f} ms per predict_model call × {steps:,} steps, "
          f"{args.sample} calls timed)")
    print(f"  result: TTFT mean {float(np.mean(res.ttft_s)) * 1e3:.0f} ms, TPOT mean "
          f"{float(np.nanmean(res.tpot_s)) * 1e3:.2f} ms, {res.throughput_tok_s:,.0f} tok/s")


if __name__ == "__main__":
    main()
