"""Capacity planning on the serving simulator (``plan(..., method="simulate")``).

Per GPU and TP degree: build the step-time tables and KV pool once, then find the highest
Poisson request rate one replica sustains with TTFT and TPOT at the stated percentile within
the targets. The arrival gaps are drawn once at unit rate and divided by the rate tried
(common random numbers), so the answer is deterministic and the search sees a monotone load.

A run of finitely many requests absorbs any rate as one burst: where the targets are loose
enough that the requests meet them even when all of them arrive at once, the search finds
no rate that fails. The replica is then limited by its throughput, and the rate is the one
it completes that burst at, n / (last finish − first send): a lower bound of what it
sustains (the burst's last requests drain a shrinking batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.models.graph import tp_heads
from perfmodel.planning import PlanOption, Workload
from perfmodel.serving import (
    ServeResult,
    closed_loop,
    prepare,
    run_prepared,
    scheduler_and_kernels,
    stats,
)
from perfmodel.serving.requests import Workload as Requests
from perfmodel.serving.requests import lengths

__all__ = ["assumptions_simulated", "plan_gpu_simulated"]

_DTYPE_KEYS = ("weight_dtype", "activation_dtype", "kv_dtype", "expert_dtype")
_BISECTIONS = 8
#: Doublings of the request rate from 1/e2e of one request alone before the load is taken
#: as one burst (2^30: every request sent within a billionth of its own latency).
_DOUBLINGS = 30


def assumptions_simulated(engine: str, percentile: str, requests: int,
                          spread: float) -> tuple[str, ...]:
    scheduler, kernels = scheduler_and_kernels(engine)
    return (
        f"each option sized on the serving simulator: {scheduler}'s scheduler defaults "
        f"(continuous batching, chunked prefill, KV-cache pool from memory), {kernels} "
        "kernels",
        f"per replica: the highest Poisson request rate whose {percentile} TTFT and TPOT meet "
        f"the targets over {requests} simulated requests (lengths "
        + ("fixed" if spread == 1.0 else f"uniform in [{spread:g}·L, L]") + "); 8 bisections",
        "replicas = ceil(request rate / per-replica rate) behind a round-robin router; "
        "tensor parallelism within one node over the spec's GPU link",
        "cost per million output tokens = GPUs × price per GPU-hour / (output tokens per "
        "hour); prices are the specs' stated assumptions unless overridden",
    )


def _pct(res: ServeResult, percentile: str) -> tuple[float, float]:
    ttft = stats(res.ttft_s).at(percentile)
    tpot = stats(res.tpot_s).at(percentile)
    return ttft, (0.0 if math.isnan(tpot) else tpot)


def plan_gpu_simulated(cfg: TransformerConfig, spec: HardwareSpec, wl: Workload,
                       tps: Sequence[int], price: float | None, engine: str, percentile: str,
                       requests: int, spread: float,
                       options: Mapping[str, Any]) -> tuple[PlanOption, ...]:
    """Options for one GPU type (see the module docstring)."""
    dtypes = {k: options.get(k) for k in _DTYPE_KEYS}
    scheduler, kernels = scheduler_and_kernels(engine)
    overrides: dict[str, Any] = {"kernels": kernels}
    if options.get("attention_impl") not in (None, "flash"):
        overrides["attention_impl"] = options["attention_impl"]
    p_len, g_len = wl.prompt_len, wl.output_len
    rng = np.random.default_rng(0)
    n = int(requests)
    gaps = rng.exponential(1.0, size=n)
    gaps[0] = 0.0
    unit_send = np.cumsum(gaps)
    prompt = lengths(n, p_len, spread, rng, "prompt")
    output = lengths(n, g_len, spread, rng, "gen")
    out = []
    for t in tps:
        try:
            tp_heads(cfg, np.asarray(float(t)))
        except PerfmodelError:
            continue
        base: dict[str, Any] = {"gpu": spec.id, "tp": int(t), "batch": 0, "limited_by": "",
                                "replicas": 0, "gpus": 0, "usd_per_hour": None,
                                "usd_per_million_output_tokens": None,
                                "usd_per_million_tokens": None}
        longest = closed_loop(1, 1, int(np.max(prompt)), int(np.max(output)))
        try:
            c, s, eng, pool, model = prepare(cfg, spec, longest, tp=int(t), engine=scheduler,
                                             **dtypes, **overrides)
        except PerfmodelError as exc:
            if exc.field not in ("kv_cache", "max_num_batched_tokens"):
                raise
            out.append(PlanOption(**base, feasible=False, reason=f"does not fit: {exc.problem}",
                                  ttft_s=math.nan, tpot_s=math.nan, step_s=math.nan,
                                  prefill_s=math.nan, requests_per_s_per_replica=0.0,
                                  tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0,
                                  weights_bytes_per_gpu=math.nan, max_batch_memory=0))
            continue

        def run(rate: float, prepared: tuple[Any, ...] = (c, s, eng, pool, model),
                tp: int = int(t)) -> ServeResult:
            load = Requests("poisson", prompt, output, unit_send / rate, 0, rate)
            cfg_, spec_, eng_, pool_, model_ = prepared
            return run_prepared(cfg_, spec_, eng_, pool_, model_, load, tp=tp)

        def ok(res: ServeResult) -> bool:
            ttft, tpot = _pct(res, percentile)
            return ttft <= wl.ttft_target_s and tpot <= wl.tpot_target_s

        max_mem = pool.tokens // (p_len + g_len)
        base.update(weights_bytes_per_gpu=pool.weights_bytes, max_batch_memory=int(max_mem))
        alone = run_prepared(c, s, eng, pool, model, closed_loop(1, 1, p_len, g_len),
                             tp=int(t))
        ttft0, tpot0 = _pct(alone, "mean")
        e2e0 = float(np.mean(alone.e2e_s))
        if ttft0 > wl.ttft_target_s or tpot0 > wl.tpot_target_s:
            what = (f"TTFT {ttft0 * 1e3:.0f} ms" if ttft0 > wl.ttft_target_s
                    else f"TPOT {tpot0 * 1e3:.1f} ms")
            target = (f"{wl.ttft_target_s * 1e3:.0f} ms" if ttft0 > wl.ttft_target_s
                      else f"{wl.tpot_target_s * 1e3:.1f} ms")
            out.append(PlanOption(**base, feasible=False,
                                  reason=f"{what} for one request alone exceeds the {target} "
                                  "target", ttft_s=ttft0, tpot_s=tpot0,
                                  step_s=alone.itl().mean, prefill_s=ttft0,
                                  requests_per_s_per_replica=0.0, tokens_per_s_per_gpu=0.0,
                                  capacity_tokens_per_s_per_gpu=0.0))
            continue
        lo, lo_res = 0.0, alone
        hi = 1.0 / max(e2e0, 1e-9)
        hi_res = run(hi)
        burst = False
        for _ in range(_DOUBLINGS):
            if not ok(hi_res):
                break
            lo, lo_res = hi, hi_res
            hi *= 2.0
            hi_res = run(hi)
        else:  # every rate met the targets: the requests ran as one burst
            burst = ok(hi_res)
            if burst:
                lo, lo_res = len(prompt) / hi_res.duration_s, hi_res
        for _ in range(0 if burst else _BISECTIONS):
            mid = 0.5 * (lo + hi) if lo > 0 else 0.5 * hi
            res = run(mid)
            if ok(res):
                lo, lo_res = mid, res
            else:
                hi, hi_res = mid, res
        if lo <= 0.0:
            out.append(PlanOption(**base, feasible=False,
                                  reason=f"no request rate meets the targets at {percentile} "
                                  f"(one request alone: TTFT {ttft0 * 1e3:.0f} ms)",
                                  ttft_s=ttft0, tpot_s=tpot0, step_s=alone.itl().mean,
                                  prefill_s=ttft0, requests_per_s_per_replica=0.0,
                                  tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0))
            continue
        ttft, tpot = _pct(lo_res, percentile)
        ttft_hi, _ = _pct(hi_res, percentile)
        bound = "throughput (all requests at once meet the targets)" if burst else \
            "TTFT target" if ttft_hi > wl.ttft_target_s else "TPOT target"
        if int(np.sum(hi_res.preemptions)) > 0:
            bound += " (KV cache full: preemptions)"
        replicas = math.ceil(wl.requests_per_s / lo - 1e-9)
        gpus = replicas * int(t)
        out_tok = wl.requests_per_s * float(np.mean(output))
        cost = gpus * price if price is not None else None
        batch = round(float(np.mean(lo_res.timeline["running"]))) \
            if lo_res.timeline["running"].size else 0
        base.update(batch=batch, limited_by=bound, replicas=replicas, gpus=gpus,
                    usd_per_hour=cost,
                    usd_per_million_output_tokens=(cost / (out_tok * 3600.0) * 1e6)
                    if cost else None,
                    usd_per_million_tokens=(cost / (wl.requests_per_s * float(
                        np.mean(prompt + output)) * 3600.0) * 1e6) if cost else None)
        out.append(PlanOption(
            **base, feasible=True,
            reason=f"{lo:.3g} requests/s per replica at {percentile} (limited by {bound}; "
            f"{batch} running on average)", ttft_s=ttft, tpot_s=tpot,
            step_s=lo_res.itl().mean, prefill_s=ttft0, requests_per_s_per_replica=lo,
            tokens_per_s_per_gpu=out_tok / gpus,
            capacity_tokens_per_s_per_gpu=lo * float(np.mean(output)) / int(t)))
    return tuple(out)
