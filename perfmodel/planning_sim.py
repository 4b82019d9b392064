"""Capacity planning on the serving simulator (``plan(..., method="simulate")``).

Per GPU and TP degree: build the step-time tables and KV pool once, then find the highest
Poisson request rate one replica sustains with TTFT and TPOT at the stated percentile within
the targets. The arrival gaps are drawn once at unit rate and divided by the rate tried
(common random numbers), so the answer is deterministic and the search sees a monotone load.

A rate is judged on the replica's steady state, not on its start-up. By Little's law a
replica serving λ requests/s with mean end-to-end latency E holds N = λ·E requests at once.
The first requests see a batch still filling up (and the batch and its step time grow
together, over several E) and the last ~N a draining one, both lighter than steady state:
a run of N requests or fewer is all start-up and absorbs any rate. So a run holds at least
``_STEADY_MULTIPLE``·N requests (the requests asked for, more where λ·E needs it) and the
percentiles are those of its steady state, the requests after the first ``_WARMUP`` share
and before the last ``_DRAIN`` one (in send order). Above the replica's throughput the
queue grows without bound: a rate is taken as beyond what the replica sustains where the
requests completed while the steady-state ones were sent fall short of those sent (by more
than Poisson noise), or where no run of at most ``_MAX_REQUESTS`` requests holds the
multiple. The rate reported is what the confirming run completes, the rate tried × min(1,
completed / sent) (:func:`_sustained`): the keep-up test tolerates a shortfall as noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.models.graph import check_instance
from perfmodel.planning import PlanOption, Workload, refused_tp
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
from perfmodel.serving.serve import simulated_runners

__all__ = ["assumptions_simulated", "plan_gpu_simulated"]

_DTYPE_KEYS = ("weight_dtype", "activation_dtype", "kv_dtype", "expert_dtype")
_BISECTIONS = 8
#: Doublings of the request rate from 1/e2e of one request alone (a bound on the search;
#: a rate past the replica's throughput fails long before).
_DOUBLINGS = 30
#: A run of the search holds at least this many times the requests in flight at steady
#: state (λ·E); the rate found is then confirmed on runs of ``_CONFIRM_MULTIPLE`` times,
#: stepping down by ``_CONFIRM_STEP`` until one meets the targets (near the replica's
#: throughput a burst of arrivals raises the batch for long: longer runs see more of them).
_STEADY_MULTIPLE = 10.0
_CONFIRM_MULTIPLE = 30.0
_CONFIRM_STEP = 0.97
_CONFIRM_TRIES = 40
#: Shares of a run's requests (in send order) left out of its steady state: the start-up
#: and the drain (the last λ·E requests, one tenth of a run of ten times that).
_WARMUP, _DRAIN = 0.3, 0.1
#: The most requests one simulated run may hold.
_MAX_REQUESTS = 64_000
#: Least shortfall of completions against sends taken as falling behind (``_keeps_up``).
_KEEP_UP_SLACK = 0.03


def assumptions_simulated(engine: str, percentile: str, requests: int,
                          spread: float) -> tuple[str, ...]:
    scheduler, kernels = scheduler_and_kernels(engine)
    return (
        f"each option sized on the serving simulator: {scheduler}'s scheduler defaults "
        f"(continuous batching, chunked prefill, KV-cache pool from memory), "
        f"{'engine-neutral' if kernels == 'none' else kernels} kernels",
        f"per replica: the highest Poisson request rate whose {percentile} TTFT and TPOT meet "
        f"the targets in steady state: requests {_WARMUP:.0%}–{1 - _DRAIN:.0%} of a run of "
        f"at least {requests} requests and {_STEADY_MULTIPLE:g}× the requests in flight "
        f"(rate × mean end-to-end latency), confirmed at {_CONFIRM_MULTIPLE:g}× (at most "
        f"{_MAX_REQUESTS:,}; a rate needing more is past the replica's throughput; lengths "
        + ("fixed" if spread == 1.0 else f"uniform in [{spread:g}·L, L]") + "); 8 bisections",
        "replicas = ceil(request rate / per-replica rate) behind a round-robin router; "
        "tensor parallelism within one node over the spec's GPU link",
        "cost per million output tokens = GPUs × price per GPU-hour / (output tokens per "
        "hour); prices are the specs' stated assumptions unless overridden",
    )


def _window(res: ServeResult) -> tuple[npt.NDArray[np.intp], float, float]:
    """The steady-state requests (indices, in send order, without the ``_WARMUP`` and
    ``_DRAIN`` shares) and the first and last of their send times."""
    order = np.argsort(res.send_s, kind="stable")
    lo = int(order.size * _WARMUP)
    hi = max(order.size - int(order.size * _DRAIN), lo + 1)
    keep = order[lo:hi]
    return keep, float(res.send_s[keep[0]]), float(res.send_s[keep[-1]])


def _pct(res: ServeResult, percentile: str, steady: bool = False) -> tuple[float, float]:
    """TTFT and TPOT at ``percentile``; with ``steady``, over the steady-state requests
    (:func:`_window`)."""
    ttft, tpot = res.ttft_s, res.tpot_s
    if steady:
        keep = _window(res)[0]
        ttft, tpot = ttft[keep], tpot[keep]
    t = stats(tpot).at(percentile)
    return stats(ttft).at(percentile), (0.0 if math.isnan(t) else t)


def _completed(res: ServeResult) -> tuple[int, int]:
    """(requests completed, requests sent) while the steady-state ones were sent."""
    keep, t1, t2 = _window(res)
    return int(np.count_nonzero((res.finish_s >= t1) & (res.finish_s <= t2))), keep.size


def _keeps_up(res: ServeResult) -> bool:
    """Whether the requests completed while the steady-state ones were sent keep up with
    those sent, within three standard deviations of a Poisson count (at least 3 %): a
    replica past its throughput falls behind by (λ − μ) per second, its queue growing."""
    done, sent = _completed(res)
    return done >= sent * (1.0 - max(_KEEP_UP_SLACK, 3.0 / math.sqrt(max(sent, 1))))


def _sustained(rate: float, res: ServeResult) -> float:
    """The request rate a replica sustains in ``res``, a run at ``rate`` that keeps up
    (:func:`_keeps_up`): rate × min(1, completed / sent). The test tolerates a shortfall
    as noise, so a rate up to that tolerance past the throughput μ passes it, and there
    the replica completes only μ/rate of what is sent: the completions, not the sends,
    are what it sustains."""
    done, sent = _completed(res)
    return rate * min(1.0, done / max(sent, 1))


def _steady_batch(res: ServeResult) -> int:
    """Mean running sequences while the steady-state requests were sent."""
    t, running = res.timeline["t_s"], res.timeline["running"]
    if not running.size:
        return 0
    _, t1, t2 = _window(res)
    inside = (t >= t1) & (t <= t2)
    return round(float(np.mean(running[inside] if np.any(inside) else running)))


def plan_gpu_simulated(cfg: TransformerConfig, spec: HardwareSpec, wl: Workload,
                       tps: Sequence[int], price: float | None, engine: str, percentile: str,
                       requests: int, spread: float,
                       options: Mapping[str, Any]) -> tuple[PlanOption, ...]:
    """Options for one GPU type (see the module docstring)."""
    dtypes: dict[str, Any] = {k: options.get(k) for k in _DTYPE_KEYS}
    parallel = str(options.get("parallel") or "tp")
    pp = int(options.get("pp") or 1)
    scheduler, kernels = scheduler_and_kernels(engine)
    overrides: dict[str, Any] = {"kernels": kernels}
    if options.get("attention_impl") not in (None, "flash"):
        overrides["attention_impl"] = options["attention_impl"]
    p_len, g_len = wl.prompt_len, wl.output_len
    rng = np.random.default_rng(0)
    n = int(requests)
    pool_n = max(n, _MAX_REQUESTS)  # runs take the first k of these
    gaps = rng.exponential(1.0, size=pool_n)
    gaps[0] = 0.0
    unit_send = np.cumsum(gaps)
    prompt = lengths(pool_n, p_len, spread, rng, "prompt")
    output = lengths(pool_n, g_len, spread, rng, "gen")
    out = []
    for t in tps:
        try:
            check_instance(cfg, parallel, np.asarray(float(t)))
        except PerfmodelError as exc:
            if exc.field == "parallel":  # the layout itself, whatever the GPU count
                raise
            out.append(refused_tp(spec, int(t), exc, pp))
            continue
        base: dict[str, Any] = {"gpu": spec.id, "tp": int(t), "pp": pp, "batch": 0,
                                "limited_by": "",
                                "replicas": 0, "gpus": 0, "usd_per_hour": None,
                                "usd_per_million_output_tokens": None,
                                "usd_per_million_tokens": None}
        longest = closed_loop(1, 1, int(np.max(prompt)), int(np.max(output)))
        try:
            c, s, eng, pool, model = prepare(cfg, spec, longest, tp=int(t), engine=scheduler,
                                             parallel=parallel, pp=pp, **dtypes, **overrides)
        except PerfmodelError as exc:
            if exc.field not in ("kv_cache", "max_num_batched_tokens"):
                raise
            out.append(PlanOption(**base, feasible=False, reason=f"does not fit: {exc.problem}",
                                  ttft_s=math.nan, tpot_s=math.nan, step_s=math.nan,
                                  prefill_s=math.nan, requests_per_s_per_replica=0.0,
                                  tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0,
                                  weights_bytes_per_gpu=math.nan, max_batch_memory=0))
            continue

        def meets(res: ServeResult) -> bool:
            ttft, tpot = _pct(res, percentile, steady=True)
            return ttft <= wl.ttft_target_s and tpot <= wl.tpot_target_s

        def run(rate: float, prepared: tuple[Any, ...] = (c, s, eng, pool, model),
                tp: int = int(t), multiple: float = _STEADY_MULTIPLE
                ) -> tuple[ServeResult, bool]:
            """The run at ``rate`` long enough for its steady state, and whether that state
            meets the targets and keeps up (module docstring). A shorter run that misses
            the targets ends the search early: its batch is lighter than steady state's."""
            cfg_, spec_, eng_, pool_, model_ = prepared
            k = min(n, pool_n)
            while True:
                load = Requests("poisson", prompt[:k], output[:k], unit_send[:k] / rate, 0,
                                rate)
                res = run_prepared(cfg_, spec_, eng_, pool_, model_, load, tp=tp,
                                   parallel=parallel, pp=pp)
                if not meets(res):
                    return res, False
                need = math.ceil(multiple * rate * float(np.mean(res.e2e_s)))
                if need <= k:
                    return res, _keeps_up(res)
                if k >= pool_n:
                    return res, False
                k = min(max(need, 2 * k), pool_n)

        # the pool is one attention rank's under dep (one micro-batch's with pp stages), a
        # replica's otherwise; a run's timeline holds each rank's records (its mean running
        # count is one rank's)
        ranks = simulated_runners(parallel, int(t), pp)
        max_mem = pool.tokens // (p_len + g_len) * ranks
        base.update(weights_bytes_per_gpu=pool.weights_bytes, max_batch_memory=int(max_mem))
        alone = run_prepared(c, s, eng, pool, model, closed_loop(1, 1, p_len, g_len),
                             tp=int(t), parallel=parallel, pp=pp)
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
        lo, lo_res = 0.0, (alone, True)
        hi = 1.0 / max(e2e0, 1e-9)
        hi_res = run(hi)
        for _ in range(_DOUBLINGS):
            if not hi_res[1]:
                break
            lo, lo_res = hi, hi_res
            hi *= 2.0
            hi_res = run(hi)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi) if lo > 0 else 0.5 * hi
            res = run(mid)
            if res[1]:
                lo, lo_res = mid, res
            else:
                hi, hi_res = mid, res
        if lo > 0.0:  # confirm on longer runs (module docstring)
            for _ in range(_CONFIRM_TRIES):
                res = run(lo, multiple=_CONFIRM_MULTIPLE)
                if res[1]:
                    lo_res = res
                    break
                hi, hi_res = lo, res
                lo *= _CONFIRM_STEP
            else:
                lo = 0.0
        if lo <= 0.0:
            out.append(PlanOption(**base, feasible=False,
                                  reason=f"no request rate meets the targets at {percentile} "
                                  f"(one request alone: TTFT {ttft0 * 1e3:.0f} ms)",
                                  ttft_s=ttft0, tpot_s=tpot0, step_s=alone.itl().mean,
                                  prefill_s=ttft0, requests_per_s_per_replica=0.0,
                                  tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0))
            continue
        steady_res = lo_res[0]
        lo = _sustained(lo, steady_res)
        ttft, tpot = _pct(steady_res, percentile, steady=True)
        ttft_hi, tpot_hi = _pct(hi_res[0], percentile, steady=True)
        bound = "TTFT target" if ttft_hi > wl.ttft_target_s else "TPOT target" \
            if tpot_hi > wl.tpot_target_s else \
            "throughput (above it the queue grows without bound)"
        if int(np.sum(hi_res[0].preemptions)) > 0:
            bound += " (KV cache full: preemptions)"
        replicas = math.ceil(wl.requests_per_s / lo - 1e-9)
        gpus = replicas * int(t) * pp
        out_tok = wl.requests_per_s * float(np.mean(output[:n]))
        cost = gpus * price if price is not None else None
        batch = _steady_batch(steady_res) * ranks
        base.update(batch=batch, limited_by=bound, replicas=replicas, gpus=gpus,
                    usd_per_hour=cost,
                    usd_per_million_output_tokens=(cost / (out_tok * 3600.0) * 1e6)
                    if cost else None,
                    usd_per_million_tokens=(cost / (wl.requests_per_s * float(
                        np.mean(prompt[:n] + output[:n])) * 3600.0) * 1e6) if cost else None)
        out.append(PlanOption(
            **base, feasible=True,
            reason=f"{lo:.3g} requests/s per replica at {percentile} (limited by {bound}; "
            f"{batch} running on average)", ttft_s=ttft, tpot_s=tpot,
            step_s=steady_res.itl().mean, prefill_s=ttft0, requests_per_s_per_replica=lo,
            tokens_per_s_per_gpu=out_tok / gpus,
            capacity_tokens_per_s_per_gpu=lo * float(np.mean(output[:n])) / (int(t) * pp)))
    return tuple(out)
