"""Capacity planning: how many GPUs of which kind, at what TP, for a model and a workload.

For each GPU and each TP degree t (one replica = t GPUs), one vectorised decode prediction
over a grid of concurrent batches b gives the step time s(b) at the mean context
P + G/2, and one prefill prediction the single-request prefill time p. Serving model
(continuous batching, prefills not chunked, stated in :data:`ASSUMPTIONS`):

- a replica holding b requests completes r(b) = b / ((G − 1)·s(b) + b·p) requests/s: each
  request needs its prefill, which pauses decoding, and G − 1 decode steps shared by b;
- users see TPOT = s(b) + b·p/(G − 1) (the steps plus the prefills interleaved among them)
  and TTFT = p + s(b) (a prefill waits for the step in flight; no queueing);
- memory: weights + activations of one prefill + b KV caches of P + G tokens + reserve must
  fit on each GPU.

The largest b meeting both targets and memory sets r; replicas = ⌈λ / r⌉; GPUs = t ×
replicas. Per GPU type the option with the fewest GPUs wins (ties: the smaller TP).
Cost = GPUs × price per GPU-hour (the spec's pricing, or an override); per million output
tokens = cost per hour / (λ·G·3600) × 10⁶.

``method="simulate"`` (what ``perfmodel plan`` uses) sizes each option on the serving
simulator instead (:mod:`perfmodel.serving`): one replica under Poisson arrivals, the highest
rate r whose TTFT and TPOT at the stated percentile meet the targets (the same unit-rate
arrival draws scaled by 1/r at every rate, so the search is deterministic; doubling from the
single-request rate, then 8 bisections), continuous batching, chunked prefill and the KV
pool of the chosen engine included. Replicas = ⌈λ / r⌉ as above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_TOKENS, MAX_TP, check_count
from perfmodel.engines import engine_refusal
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig, load_model
from perfmodel.models.graph import tp_heads
from perfmodel.models.memory import (
    DEFAULT_RESERVE_BYTES,
    DEFAULT_RESERVE_FRACTION,
    activation_bytes,
    kv_cache_bytes,
    weight_bytes,
)
from perfmodel.models.predict import check_context, predict_model, resolve_dtypes

__all__ = ["ASSUMPTIONS", "GpuPlan", "Plan", "PlanOption", "Workload", "plan"]

ASSUMPTIONS = (
    "continuous batching: a replica keeps b requests decoding; each new request's prefill "
    "runs alone (batch 1, not chunked) and pauses decoding",
    "TPOT seen = decode step at the mean context P+G/2 plus the prefills interleaved: "
    "s(b) + b·p/(G-1); TTFT = p + s(b) (no queueing delay: size for a utilisation you accept)",
    "memory per GPU: weights + one prefill's activations + b KV caches of P+G tokens + reserve",
    "replicas = ceil(request rate / per-replica capacity at the largest batch meeting the "
    "targets); tensor parallelism within one node over the spec's GPU link",
    "cost per million output tokens = GPUs × price per GPU-hour / (output tokens per hour); "
    "prices are the specs' stated assumptions unless overridden",
)

_BATCH_CAP = 4096


@dataclass(frozen=True)
class Workload:
    """Traffic and targets: requests/s, tokens in and out, TTFT and TPOT targets (s)."""

    requests_per_s: float
    prompt_len: int
    output_len: int
    ttft_target_s: float
    tpot_target_s: float

    def __post_init__(self) -> None:
        for name in ("requests_per_s", "prompt_len", "output_len", "ttft_target_s",
                     "tpot_target_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise PerfmodelError(name, f"must be a positive number, got {v!r}",
                                     "e.g. requests_per_s=10, ttft_target_s=1.0")
        for name in ("prompt_len", "output_len"):
            check_count(getattr(self, name), name, MAX_TOKENS,
                        what="perfmodel._limits.MAX_TOKENS")
        check_count(self.requests_per_s, "requests_per_s", 1e9, integer=False,
                    minimum=0.0, what="10⁹ requests/s")


@dataclass(frozen=True)
class PlanOption:
    """One GPU type at one TP degree: feasible or not, and why."""

    gpu: str
    tp: int
    feasible: bool
    reason: str
    batch: int
    """Concurrent requests per replica (the largest meeting targets and memory)."""
    limited_by: str
    """What stops a larger batch: memory, the TPOT or TTFT target, or the batch grid
    (the largest batch tried); empty when infeasible."""
    replicas: int
    gpus: int
    ttft_s: float
    tpot_s: float
    step_s: float
    prefill_s: float
    requests_per_s_per_replica: float
    tokens_per_s_per_gpu: float
    """Output tokens/s per GPU at the planned load."""
    capacity_tokens_per_s_per_gpu: float
    """Output tokens/s per GPU at the replica's capacity."""
    weights_bytes_per_gpu: float
    max_batch_memory: int
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    usd_per_million_tokens: float | None
    """Per million tokens in and out."""
    pp: int = 1
    """Pipeline stages per replica, each ``tp`` GPUs (a replica is tp × pp GPUs)."""


@dataclass(frozen=True)
class GpuPlan:
    gpu: str
    name: str
    usd_per_gpu_hour: float | None
    price_source: str
    best: PlanOption | None
    options: tuple[PlanOption, ...]
    engine_refused: str = ""
    """Why the planned engine does not run on this GPU (empty where it does)."""


@dataclass(frozen=True)
class Plan:
    model: str
    workload: Workload
    gpus: tuple[GpuPlan, ...]
    assumptions: tuple[str, ...]

    def ranked(self) -> list[GpuPlan]:
        """Feasible GPU types by cost per million output tokens (or GPU count), then the
        infeasible ones."""
        def key(g: GpuPlan) -> tuple[float, float]:
            if g.best is None:
                return (math.inf, math.inf)
            cost = g.best.usd_per_million_output_tokens
            return (cost if cost is not None else math.inf, g.best.gpus)
        return sorted(self.gpus, key=key)

    def to_dict(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            return x
        return {
            "model": self.model, "workload": asdict(self.workload),
            "gpus": [{"gpu": g.gpu, "name": g.name, "usd_per_gpu_hour": g.usd_per_gpu_hour,
                      "price_source": g.price_source,
                      "best": clean(asdict(g.best)) if g.best else None,
                      "engine_refused": g.engine_refused,
                      "options": [clean(asdict(o)) for o in g.options]}
                     for g in self.ranked()],
            "assumptions": list(self.assumptions),
        }


def _batch_grid(limit: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    small = np.arange(1.0, min(limit, 64) + 1.0)
    if limit <= 64:
        return small
    big = np.unique(np.round(np.geomspace(64.0, float(limit), 96)))
    return np.unique(np.concatenate([small, big]))


def refused_tp(spec: HardwareSpec, t: int, exc: PerfmodelError, pp: int = 1) -> PlanOption:
    """An infeasible option for a TP degree (of ``pp`` stages) the model cannot be split
    into (or on a GPU the engine does not run on), with why."""
    nan = math.nan
    return PlanOption(gpu=spec.id, tp=t, pp=pp, feasible=False, reason=exc.problem,
                      batch=0, limited_by="", replicas=0, gpus=0, ttft_s=nan, tpot_s=nan,
                      step_s=nan, prefill_s=nan, requests_per_s_per_replica=0.0,
                      tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0,
                      weights_bytes_per_gpu=nan, max_batch_memory=0, usd_per_hour=None,
                      usd_per_million_output_tokens=None, usd_per_million_tokens=None)


def _plan_gpu(cfg: TransformerConfig, spec: HardwareSpec, wl: Workload, tps: Sequence[int],
              price: float | None, options: Mapping[str, Any]) -> tuple[PlanOption, ...]:
    dt = resolve_dtypes(cfg, spec, options.get("weight_dtype"),
                        options.get("activation_dtype"), options.get("kv_dtype"),
                        options.get("expert_dtype"))
    cap = spec.memory.capacity
    reserve = cap * options.get("reserve_fraction", DEFAULT_RESERVE_FRACTION) \
        + options.get("reserve_bytes", DEFAULT_RESERVE_BYTES)
    p_len, g_len = float(wl.prompt_len), float(wl.output_len)
    valid = []
    refused: list[PlanOption] = []
    for t in tps:
        try:
            tp_heads(cfg, np.asarray(float(t)))
            valid.append(t)
        except PerfmodelError as exc:
            refused.append(refused_tp(spec, int(t), exc))
    if not valid:
        return tuple(refused)
    t_arr = np.asarray(valid, dtype=np.float64)
    w = weight_bytes(cfg, t_arr, dt)
    act = activation_bytes(cfg, 1.0, p_len, t_arr, dt)
    kv_seq = kv_cache_bytes(cfg, 1.0, p_len + g_len, t_arr, dt.kv)
    b_mem = np.floor(np.maximum(cap - reserve - w - act, 0.0) / kv_seq)
    pred_opts = {k: v for k, v in options.items() if k not in ("reserve_fraction",
                                                                "reserve_bytes")}
    prefill = np.asarray(predict_model(cfg, spec, phase="prefill", batch=1, prompt_len=p_len,
                                       tp=t_arr, **pred_opts).latency_s) * np.ones_like(t_arr)
    grid = _batch_grid(int(min(max(float(np.max(b_mem)), 1.0), _BATCH_CAP)))
    step = np.asarray(predict_model(
        cfg, spec, phase="decode", batch=grid[None, :], tp=t_arr[:, None],
        context_len=np.round(p_len + g_len / 2.0), **pred_opts).latency_s)
    steps_per_req = max(g_len - 1.0, 0.0)
    out = []
    for i, t in enumerate(valid):
        s, p, b = step[i], float(prefill[i]), grid
        rate = b / (steps_per_req * s + b * p)
        tpot = s + b * p / steps_per_req if steps_per_req else np.zeros_like(s)
        ttft = p + s
        ok = (b <= b_mem[i]) & (ttft <= wl.ttft_target_s) & (tpot <= wl.tpot_target_s)
        base: dict[str, Any] = {"gpu": spec.id, "tp": int(t), "weights_bytes_per_gpu": float(w[i]),
                "max_batch_memory": int(min(b_mem[i], 2**31 - 1)), "prefill_s": p}
        if not np.any(ok):
            if b_mem[i] < 1:
                need = (w[i] + act[i] + kv_seq[i] + reserve) / 1e9
                why = (f"does not fit: weights {w[i] / 1e9:.1f} GB + activations "
                       f"{act[i] / 1e9:.1f} GB + one KV cache {kv_seq[i] / 1e9:.2f} GB + "
                       f"reserve {reserve / 1e9:.1f} GB = {need:.1f} GB > {cap / 1e9:.1f} GB")
            elif ttft[0] > wl.ttft_target_s:
                why = (f"TTFT {ttft[0] * 1e3:.0f} ms at batch 1 exceeds the "
                       f"{wl.ttft_target_s * 1e3:.0f} ms target")
            else:
                why = (f"TPOT {tpot[0] * 1e3:.1f} ms at batch 1 exceeds the "
                       f"{wl.tpot_target_s * 1e3:.1f} ms target")
            out.append(PlanOption(**base, feasible=False, reason=why, batch=0, limited_by="",
                                  replicas=0,
                                  gpus=0, ttft_s=float(ttft[0]), tpot_s=float(tpot[0]),
                                  step_s=float(s[0]), requests_per_s_per_replica=0.0,
                                  tokens_per_s_per_gpu=0.0, capacity_tokens_per_s_per_gpu=0.0,
                                  usd_per_hour=None, usd_per_million_output_tokens=None,
                                  usd_per_million_tokens=None))
            continue
        j = int(np.flatnonzero(ok)[-1])
        replicas = math.ceil(wl.requests_per_s / float(rate[j]) - 1e-9)
        gpus = replicas * int(t)
        out_tok = wl.requests_per_s * g_len
        cost = gpus * price if price is not None else None
        if j + 1 >= b.size:
            bound = "batch grid"
        elif b[j + 1] > b_mem[i]:
            bound = "memory"
        elif ttft[j + 1] > wl.ttft_target_s:
            bound = "TTFT target"
        else:
            bound = "TPOT target"
        out.append(PlanOption(
            **base, feasible=True, reason=f"batch {int(b[j])} per replica (limited by "
            f"{bound})", limited_by=bound, batch=int(b[j]), replicas=replicas, gpus=gpus,
            ttft_s=float(ttft[j]),
            tpot_s=float(tpot[j]), step_s=float(s[j]),
            requests_per_s_per_replica=float(rate[j]), tokens_per_s_per_gpu=out_tok / gpus,
            capacity_tokens_per_s_per_gpu=float(rate[j]) * g_len / int(t), usd_per_hour=cost,
            usd_per_million_output_tokens=(cost / (out_tok * 3600.0) * 1e6) if cost else None,
            usd_per_million_tokens=(cost / (wl.requests_per_s * (p_len + g_len) * 3600.0)
                                    * 1e6) if cost else None))
    return tuple(out + refused)


def plan(config: TransformerConfig | str, gpus: Sequence[HardwareSpec | str],
         workload: Workload, *, tp_options: Sequence[int] = (1, 2, 4, 8),
         prices: Mapping[str, float] | None = None, method: str = "analytic",
         engine: str = "none", percentile: str = "p90", requests: int = 400,
         length_spread: float = 1.0, **options: Any) -> Plan:
    """Size a deployment of ``config`` for ``workload`` on each GPU type in ``gpus``.

    ``prices`` overrides USD per GPU-hour by GPU id; ``options`` go to
    :func:`perfmodel.predict_model` (dtypes, attention_impl, reserve_fraction...;
    ``parallel``, an MoE model's layout over each option's tp GPUs, and ``pp``, pipeline
    stages of tp GPUs each, with ``method="simulate"`` only).
    ``engine`` (``none``, ``vllm``, ``trtllm``, ``sglang``) picks the kernels, and for
    ``method="simulate"`` (the serving simulator) the scheduler too (vLLM's for ``none``);
    targets met at ``percentile`` (mean, p50, p90, p99) over ``requests`` simulated requests
    of lengths uniform in [``length_spread``·L, L].
    """
    if method not in ("analytic", "simulate"):
        raise PerfmodelError("method", f"unknown planning method {method!r}",
                             "use 'simulate' or 'analytic'")
    if options.get("parallel", "tp") != "tp" and method != "simulate":
        raise PerfmodelError("parallel", "the analytic plan lays models out by TP only",
                             "use method='simulate' for tep or dep")
    if options.get("pp", 1) != 1 and method != "simulate":
        raise PerfmodelError("pp", "the analytic plan lays models out by TP only",
                             "use method='simulate' for pipeline stages")
    if percentile not in ("mean", "p50", "p90", "p99"):
        raise PerfmodelError("percentile", f"unknown statistic {percentile!r}",
                             "use mean, p50, p90 or p99")
    if not isinstance(workload, Workload):
        raise PerfmodelError("workload", f"expected a perfmodel.planning.Workload (request "
                             f"rate, prompt and output lengths, TTFT and TPOT targets), got "
                             f"{type(workload).__name__}", "e.g. Workload(requests_per_s=10, "
                             "prompt_len=2048, output_len=256, ttft_target_s=2.0, "
                             "tpot_target_s=0.05)")
    cfg = load_model(config)
    if not gpus:
        raise PerfmodelError("gpus", "no GPUs to plan for", "pass at least one GPU id")
    options = dict(options)
    # the longest context is checked once here (P + G - 1 tokens at the end of a request);
    # the predictions below run at shorter ones and need not warn again
    window = check_context(cfg, workload.prompt_len + workload.output_len - 1,
                           strict=bool(options.pop("strict", False)))
    if window:
        cfg = cfg.model_copy(update={"max_position_embeddings": None})
    for t in tp_options:
        check_count(t, "tp_options", MAX_TP, what="perfmodel._limits.MAX_TP")
    prices = dict(prices or {})
    out = []
    for gpu in gpus:
        spec = load_hardware(gpu)
        if spec.id in prices:
            price, source = float(prices[spec.id]), "override"
        elif spec.pricing is not None:
            price, source = spec.pricing.usd_per_hour, "spec: " + spec.pricing.assumption
        else:
            price, source = None, "no price in the spec (pass one to get costs)"
        refusal = engine_refusal(engine, spec.arch)
        if refusal is not None:  # the engine does not run on this GPU: say so, plan the rest
            opts = tuple(refused_tp(spec, int(t), refusal) for t in sorted(set(tp_options)))
        elif method == "simulate":
            from perfmodel.planning_sim import plan_gpu_simulated
            opts = plan_gpu_simulated(cfg, spec, workload, sorted(set(tp_options)), price,
                                      engine, percentile, requests, length_spread, options)
        else:
            opts = _plan_gpu(cfg, spec, workload, sorted(set(tp_options)), price,
                             {**options, "engine": engine})
        feasible = [o for o in opts if o.feasible]
        best = min(feasible, key=lambda o: (o.gpus, o.tp)) if feasible else None
        out.append(GpuPlan(gpu=spec.id, name=spec.name, usd_per_gpu_hour=price,
                           price_source=source, best=best, options=opts,
                           engine_refused="" if refusal is None else refusal.problem))
    assumptions: tuple[str, ...] = ASSUMPTIONS
    if method == "simulate":
        from perfmodel.planning_sim import assumptions_simulated
        assumptions = assumptions_simulated(engine, percentile, requests, length_spread)
    return Plan(model=cfg.name, workload=workload, gpus=tuple(out),
                assumptions=(*assumptions, window) if window else assumptions)
