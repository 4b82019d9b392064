"""``simulate``: a model served by an engine on replicas of TP-sharded GPUs, under a workload.

Replicas sit behind a round-robin router (request i goes to replica i mod R; a closed
loop's clients are split the same way), so each replica is simulated on its own share and
the results merged; throughput is over the whole run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from perfmodel._limits import check_whole
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig, load_model
from perfmodel.models.graph import attention_ranks, check_instance
from perfmodel.models.pipeline import check_stages
from perfmodel.models.predict import resolve_dtypes
from perfmodel.serving.engines import EngineConfig, engine_config
from perfmodel.serving.kvcache import KVPool, kv_pool
from perfmodel.serving.metrics import ServeResult
from perfmodel.serving.requests import Workload
from perfmodel.serving.simulator import ReplicaRun, check_fits, simulate_replica
from perfmodel.serving.steptime import StepModel, build_step_model

__all__ = ["prepare", "run_prepared", "simulate", "simulated_runners"]

Progress = Callable[[int, int], None]


def prepare(config: TransformerConfig | str, hw: HardwareSpec | str, workload: Workload, *,
            tp: int = 1, engine: str | EngineConfig = "vllm", weight_dtype: str | None = None,
            activation_dtype: str | None = None, kv_dtype: str | None = None,
            expert_dtype: str | None = None, kv_blocks: int | None = None,
            parallel: str = "tp", pp: int = 1,
            **engine_overrides: Any) -> tuple[TransformerConfig, HardwareSpec, EngineConfig,
                                               KVPool, StepModel]:
    """Resolve the model, GPU, engine knobs and KV pool, and build the step-time tables
    (the part of :func:`simulate` that does not depend on the arrival pattern). Under
    ``parallel="dep"`` the pool and tables are one attention rank's (one GPU's); with
    ``pp`` pipeline stages, one micro-batch's."""
    cfg = load_model(config)
    spec = load_hardware(hw)
    tp = check_whole(tp, "tp", "e.g. --tp 4")
    pp = check_stages(cfg, pp)
    check_instance(cfg, parallel, np.asarray(float(tp)))
    dt = resolve_dtypes(cfg, spec, weight_dtype, activation_dtype, kv_dtype, expert_dtype)
    if isinstance(engine, EngineConfig):
        eng = engine.with_(**engine_overrides)
    else:
        eng = engine_config(engine, spec.memory.capacity, spec.name, **engine_overrides)
    pool = kv_pool(cfg, spec, tp, dt, eng, kv_blocks, parallel, pp)
    check_fits(workload, eng, pool)
    longest = int(np.max(workload.prompt + workload.output))
    max_tokens = eng.max_num_batched_tokens
    if not eng.chunked_prefill:
        max_tokens = max(max_tokens, int(np.max(workload.prompt)) + 1)
    max_batch = max(min(eng.max_num_seqs, pool.tokens), 2)
    model = build_step_model(cfg, spec, tp, dt, eng, max_tokens=max_tokens + 1,
                             max_batch=max_batch, max_context=longest + 1,
                             max_prompt=longest, parallel=parallel, pp=pp)
    return cfg, spec, eng, pool, model


def simulate(config: TransformerConfig | str, hw: HardwareSpec | str, workload: Workload, *,
             tp: int = 1, replicas: int = 1, engine: str | EngineConfig = "vllm",
             weight_dtype: str | None = None, activation_dtype: str | None = None,
             kv_dtype: str | None = None, expert_dtype: str | None = None,
             kv_blocks: int | None = None, progress: Progress | None = None,
             parallel: str = "tp", pp: int = 1, **engine_overrides: Any) -> ServeResult:
    """Simulate serving ``workload`` (see :mod:`perfmodel.serving.requests`).

    ``engine``: ``vllm``, ``trtllm``, ``sglang`` or an :class:`EngineConfig`;
    ``engine_overrides``: any :class:`EngineConfig` field (``max_num_batched_tokens``,
    ``max_num_seqs``, ``step_overhead_s``...); ``kv_blocks`` fixes the pool size;
    ``parallel``: an MoE model's layout over the ``tp`` GPUs of a replica
    (:mod:`perfmodel.models.graph`). Under ``dep`` each GPU is an attention rank with its
    own scheduler, KV pool and share of the requests (round-robin, as between replicas),
    the ranks stepping together at the pace of one (equally loaded); the engine's sequence
    cap and token budget are per rank, as TensorRT-LLM's are with attention DP.
    ``pp``: pipeline stages per replica (each ``tp`` GPUs holding ⌈L/pp⌉ layers), with
    ``pp`` micro-batches in flight, each simulated as a replica with its own scheduler
    and KV pool (:mod:`perfmodel.serving.kvcache`) whose step is the pipeline cycle
    (:mod:`perfmodel.serving.steptime`); the sequence cap and token budget are per
    micro-batch, as trtllm-bench sets them (its max batch size over pp).
    """
    reps = check_whole(replicas, "replicas", "e.g. --replicas 2")
    cfg, spec, eng, pool, model = prepare(
        config, hw, workload, tp=tp, engine=engine, weight_dtype=weight_dtype,
        activation_dtype=activation_dtype, kv_dtype=kv_dtype, expert_dtype=expert_dtype,
        kv_blocks=kv_blocks, parallel=parallel, pp=pp, **engine_overrides)
    return run_prepared(cfg, spec, eng, pool, model, workload, tp=int(tp), replicas=reps,
                        progress=progress, parallel=parallel, pp=int(pp))


def simulated_runners(parallel: str, tp: int, pp: int = 1) -> int:
    """How many schedulers one replica of this layout runs, each simulated on its own share
    of the requests with its own KV pool: its attention ranks (``tp`` under ``dep``, else
    1) times its pipeline micro-batches (``pp``)."""
    return attention_ranks(parallel, tp) * pp


def run_prepared(cfg: TransformerConfig, spec: HardwareSpec, eng: EngineConfig, pool: KVPool,
                 model: StepModel, workload: Workload, *, tp: int, replicas: int = 1,
                 progress: Progress | None = None, parallel: str = "tp",
                 pp: int = 1) -> ServeResult:
    """Simulate ``workload`` on ``replicas`` replicas with prepared tables (``parallel``,
    ``pp``: the layout they were prepared for; under ``dep`` each of a replica's ``tp``
    attention ranks, and with ``pp`` stages each of its pp micro-batches, is simulated as
    a replica of its own)."""
    ranks = attention_ranks(parallel, tp)
    runners = replicas * simulated_runners(parallel, tp, pp)
    parts = workload.split(runners)
    total = workload.requests
    done_before = [0]
    runs: list[ReplicaRun] = []
    for part in parts:
        def report(done: int, _n: int, base: int = done_before[0]) -> None:
            if progress is not None:
                progress(base + done, total)
        runs.append(simulate_replica(model, eng, pool, part, report))
        done_before[0] += part.requests
    index = np.concatenate(workload.shares(runners))
    order = np.argsort(index, kind="stable")

    def cat(name: str) -> Any:
        return np.concatenate([getattr(r, name) for r in runs])[order]

    timeline = {k: np.concatenate([r.timeline[k] for r in runs]) for k in runs[0].timeline}
    if len(runs) > 1:
        timeline["replica"] = np.concatenate([np.full(r.timeline["t_s"].size, float(i))
                                              for i, r in enumerate(runs)])
    knobs = {k: getattr(eng, k) for k in (
        "policy", "kv_policy", "max_num_batched_tokens", "max_num_seqs", "chunked_prefill",
        "block_size", "memory_fraction", "step_overhead_s", "step_overhead_per_seq_s",
        "request_overhead_s", "fuse_allreduce", "attention_impl", "kernels",
        "graph_batch_sizes")}
    knobs["parallel"] = parallel
    knobs["pp"] = pp
    return ServeResult(
        model=cfg.name, hardware=spec.id, engine=eng.name, tp=tp, replicas=replicas,
        workload=workload.describe(), send_s=cat("send_s"), arrival_s=cat("arrival_s"),
        start_s=cat("start_s"), first_token_s=cat("first_token_s"), finish_s=cat("finish_s"),
        prompt=workload.prompt, output=workload.output, preemptions=cat("preemptions"),
        itl_values=np.concatenate([r.itl_values for r in runs]),
        itl_weights=np.concatenate([r.itl_weights for r in runs]), timeline=timeline,
        kv_blocks=pool.blocks, kv_block_size=pool.block_size,
        steps=sum(r.steps for r in runs), engine_knobs=knobs,
        assumptions=_assumptions(eng, pool, replicas, model, ranks), pp=pp)


def _assumptions(eng: EngineConfig, pool: KVPool, replicas: int,
                 model: StepModel, ranks: int = 1) -> tuple[str, ...]:
    out = [
        f"engine {eng.name}: {eng.policy.replace('_', '-')} scheduling, step budget "
        f"{eng.max_num_batched_tokens} tokens, at most {eng.max_num_seqs} sequences, "
        f"chunked prefill {'on' if eng.chunked_prefill else 'off'}, KV blocks "
        + ("reserved for prompt + output at admission (no preemption)" if
           eng.kv_policy == "reserve" else "allocated as computed; preemption by recompute"),
        pool.explain(),
        "step time = host overhead + dense(tokens) + LM head(sampled) + decode attention at "
        "the mean context + prefill-chunk attention, from the model graphs "
        f"({'engine-neutral' if eng.kernels == 'none' else eng.kernels} kernels, attention "
        f"path {eng.attention_impl}; all-reduce "
        f"{'fused with residual + RMSNorm' if eng.fuse_allreduce else 'separate'})",
        f"host overheads: {eng.step_overhead_s * 1e3:g} ms per step + "
        f"{eng.step_overhead_per_seq_s * 1e6:g} µs per sequence; "
        f"{eng.request_overhead_s * 1e3:g} ms per request before scheduling",
        "TTFT and end-to-end from the client's send; TPOT = (e2e − TTFT)/(output − 1); "
        "throughput = output tokens / (last completion − first send)",
    ]
    if eng.graph_batch_sizes:
        out.append("decode-only steps padded up to the next captured CUDA-graph batch "
                   f"({', '.join(map(str, eng.graph_batch_sizes))}): the padding entries' "
                   "GEMM, MoE, norm and LM-head work is paid, their attention is not")
    if replicas > 1:
        out.append(f"{replicas} replicas behind a round-robin router")
    if ranks > 1:
        out.append(f"data-parallel attention: {ranks} ranks per replica, each one GPU with "
                   "its own scheduler, KV pool and round-robin share of the requests, "
                   "stepping together at one rank's pace (equally loaded); the experts "
                   "expert-parallel over the replica's GPUs")
    out += list(model.notes)
    return tuple(out)
