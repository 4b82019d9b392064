"""Model-level prediction speed: vectorised passes against the scalar loops they replace.

    python benchmarks/bench_models.py [--model llama-2-7b] [--gpu a100-80gb-sxm]
                                      [--points 1000] [--repeats 30]

Runs on one core (the process is pinned to CPU 0 where the OS allows; BLAS threads off).

1. Full prediction: ``predict_model(phase="generate", prompt 2048, gen 256)`` with the
   per-op table (prefill, decode steps averaged over the generation, whole-request rows;
   computed each time: predict_model's memo of repeated calls is cleared before each),
   against the scalar loop a tool without vectorisation runs: one ``perfmodel.predict`` call
   per op of the graph for the prefill and for each of the 255 decode steps (per-layer ops
   predicted once and multiplied by the layer count, as here).
2. A ``--points``-point sequence-length sweep of the whole model (prefill, prompts
   32, 64, ... tokens, per-op times and crossovers), against a Python loop of scalar
   ``predict_model`` calls over the same prompts.

Prints median milliseconds and the ratios from this one run.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

import perfmodel as pm  # noqa: E402
from perfmodel.models.graph import decode_graph, prefill_graph  # noqa: E402
from perfmodel.models.predict import MEMO, resolve_dtypes  # noqa: E402
from perfmodel.sweeps import sweep  # noqa: E402


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def full_prediction(cfg: pm.TransformerConfig, hw: pm.HardwareSpec) -> object:
    MEMO.clear()  # computed each time, not answered from predict_model's memo
    r = pm.predict_model(cfg, hw, phase="generate", batch=1, prompt_len=2048, gen_len=256)
    return r.ops  # the per-op table of the whole request


def full_prediction_scalar_loop(cfg: pm.TransformerConfig, hw: pm.HardwareSpec) -> float:
    dt = resolve_dtypes(cfg, hw)
    total = sum(float(g.count) * float(pm.predict(g.op, hw).latency_s)
                for g in prefill_graph(cfg, 1, 2048, dtypes=dt))
    for ctx in range(2049, 2048 + 256):
        total += sum(float(g.count) * float(pm.predict(g.op, hw).latency_s)
                     for g in decode_graph(cfg, 1, ctx, dtypes=dt))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--gpu", default="a100-80gb-sxm")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    cfg, hw = pm.load_model(args.model), pm.load_hardware(args.gpu)

    full = median_ms(lambda: full_prediction(cfg, hw), args.repeats)
    loop = median_ms(lambda: full_prediction_scalar_loop(cfg, hw), max(args.repeats // 10, 3))
    print(f"{cfg.name} on {hw.id}, one core")
    print(f"1. prefill 2048 + decode 256 with the per-op table: {full:8.2f} ms "
          f"(target < 5 ms)")
    print(f"   scalar loop, one predict() per op per pass (1 prefill + 255 decode steps): "
          f"{loop:8.1f} ms -> {loop / full:6.0f}x")

    prompts = np.arange(1, args.points + 1) * 32
    vec = median_ms(lambda: sweep(cfg, hw, "prompt", prompts), args.repeats)
    def scalar_loop() -> object:
        MEMO.clear()  # each prompt computed, as on a first call
        return [pm.predict_model(cfg, hw, phase="prefill", prompt_len=int(p)) for p in prompts]

    scalar = median_ms(scalar_loop, 3)
    print(f"2. {args.points}-point sequence-length sweep (prefill, 32..{prompts[-1]} tokens): "
          f"{vec:8.2f} ms (target < 20 ms)")
    print(f"   scalar loop of predict_model over the same prompts: {scalar:8.1f} ms -> "
          f"{scalar / vec:6.0f}x")
    check = sweep(cfg, hw, "prompt", prompts[:3])
    one = pm.predict_model(cfg, hw, phase="prefill", prompt_len=int(prompts[2]))
    assert abs(check.latency_s[2] - float(one.ttft_s)) <= 1e-12 * float(one.ttft_s)


if __name__ == "__main__":
    main()
