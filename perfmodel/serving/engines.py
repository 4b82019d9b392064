"""Serving engines as data: the scheduler knobs that change the answer, with their defaults.

Each default cites where it comes from (engine source or docs, the version read). Host
overheads are labelled ``fitted: benchmarks/serving`` where they were chosen by looking at
the published serving rows (``scripts/serving_accuracy.py --fit`` makes them), else cited.

Policies:

- ``decode_first`` (vLLM, TensorRT-LLM): every step first gives each running decode one
  token, then continues partial prefills, then admits waiting requests while the token
  budget, the sequence cap and the KV cache allow (continuous batching with mixed steps).
- ``prefill_first`` (SGLang's default, mixed chunks off): when a waiting request can be
  admitted, the step is a prefill-only batch of up to ``chunked_prefill_size`` tokens and
  decoding pauses; otherwise the step decodes every running request.

KV cache: ``lazy`` (vLLM, SGLang) allocates blocks as tokens are computed and preempts the
newest request (its KV freed, recomputed later) when a step finds no free block;
``reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler) admits a request only
when blocks for its whole prompt and output are free, and never preempts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from perfmodel._errors import PerfmodelError
from perfmodel._limits import check_whole
from perfmodel.engines import REQUEST_OVERHEAD_S, STEP_OVERHEAD_PER_SEQ_S, STEP_OVERHEAD_S

__all__ = ["ENGINES", "TRTLLM_PERF_OVERVIEW_GRAPHS", "EngineConfig", "engine_config",
           "scheduler_and_kernels"]

Policy = Literal["decode_first", "prefill_first"]
KVPolicy = Literal["lazy", "reserve"]
MemoryRule = Literal["of_total", "of_free"]


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler and memory knobs of one engine (SI units; see the module docstring).

    ``max_num_batched_tokens``: token budget of one step (vLLM ``max_num_batched_tokens``,
    TRT-LLM ``max_num_tokens``, SGLang ``chunked_prefill_size`` for prefill batches); None
    picks the engine's default for the GPU (:func:`engine_config`).
    """

    name: str
    policy: Policy
    kv_policy: KVPolicy
    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    block_size: int
    memory_fraction: float
    memory_rule: MemoryRule
    """``of_total``: the KV pool is fraction·capacity − weights − activations − CUDA
    context; ``of_free``: fraction·(capacity − weights − activations − CUDA context)."""
    step_overhead_s: float
    """Host time per engine step (scheduling, input preparation, sampling), s."""
    step_overhead_per_seq_s: float
    """Host time per sequence in a step, s."""
    request_overhead_s: float
    """Frontend time per request before it reaches the scheduler (HTTP, tokenisation), s."""
    fuse_allreduce: bool
    """All-reduce fused with the residual add and RMSNorm (tp > 1)."""
    attention_impl: str = "flash"
    kernels: str = "none"
    """Whose kernels the step times use (:func:`perfmodel.models.evaluate.evaluate_graphs`'s
    ``engine``: ``none`` engine-neutral, or ``vllm``/``trtllm``/``sglang`` — their attention
    and GEMM kernels, fusions and CUDA-graph replay)."""
    batch_wait_iters: int = 0
    """TRT-LLM ``batch_wait_timeout_iters``: steps new prefills may be held back."""
    batch_wait_tokens_ratio: float = 0.0
    """TRT-LLM ``batch_wait_max_tokens_ratio``: hold new prefills until their tokens reach
    this fraction of the budget (or the wait times out)."""
    graph_batch_sizes: tuple[int, ...] = ()
    """Batch sizes of the captured CUDA graphs a decode-only step is padded up to
    (TensorRT-LLM ``cuda_graph_config`` with ``enable_padding: true`` and these
    ``batch_sizes``): a decode-only step of d sequences runs the graph of the smallest
    size p ≥ d, so its non-attention work (GEMMs, MoE, norms, LM head and sampling) is that
    of p tokens; the p − d padding entries are dummy requests of one token, whose attention
    is left out. No graph is larger than the biggest decode batch the engine can run,
    c = min(``max_num_seqs``, ``max_num_batched_tokens``): sizes above it are dropped and,
    with padding, c itself captured instead (TensorRT-LLM's
    ``_filter_cuda_graph_batch_sizes``), so p ≤ c. A step with a prefill chunk runs
    without a graph and is not padded, nor is a decode step above every size. Empty (the
    default of every engine here; TensorRT-LLM's ``enable_padding`` defaults to false): no
    padding."""
    sources: tuple[str, ...] = ()

    def with_(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` (None values ignored), checked."""
        clean = {k: v for k, v in changes.items() if v is not None}
        if "graph_batch_sizes" in clean:
            clean["graph_batch_sizes"] = _graph_sizes(clean["graph_batch_sizes"])
        cfg = dataclasses.replace(self, **clean)
        cfg.check()
        return cfg

    def padded(self, batch: int) -> int:
        """The batch a decode-only step of ``batch`` sequences runs as: the smallest
        captured size ≥ ``batch`` (:attr:`graph_batch_sizes`, capped at the engine's largest
        decode batch), else ``batch`` itself."""
        cap = min(self.max_num_seqs, self.max_num_batched_tokens)
        for size in self.graph_batch_sizes:
            if size >= batch:
                return min(size, cap) if batch <= cap else batch
        return batch

    def check(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
            check_whole(getattr(self, name), name,
                        "e.g. max_num_batched_tokens=8192, max_num_seqs=256")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise PerfmodelError("memory_fraction", f"must be in (0, 1], got "
                                 f"{self.memory_fraction!r}", "e.g. 0.9")
        for name in ("step_overhead_s", "step_overhead_per_seq_s", "request_overhead_s",
                     "batch_wait_tokens_ratio"):
            v = getattr(self, name)
            if not v >= 0.0:
                raise PerfmodelError(name, f"must be ≥ 0, got {v!r}", "e.g. 0")
        if self.batch_wait_iters < 0:
            raise PerfmodelError("batch_wait_iters", "must be ≥ 0", "e.g. 0")
        if self.graph_batch_sizes != _graph_sizes(self.graph_batch_sizes):
            raise PerfmodelError("graph_batch_sizes", "must be increasing whole numbers ≥ 1",
                                 "e.g. (1, 2, 4, 8, 16, 32, 64, 128)")


def _graph_sizes(value: Any) -> tuple[int, ...]:
    """``value`` (an iterable of whole numbers ≥ 1, or a comma-separated string) as the
    sorted tuple of its distinct sizes; a clear error otherwise."""
    items = value.split(",") if isinstance(value, str) else value
    try:
        raw = list(items)
    except TypeError:
        raise PerfmodelError("graph_batch_sizes", f"must be a list of batch sizes, got "
                             f"{value!r}", "e.g. 1,2,4,8,16,32,64,128") from None
    sizes = set()
    for item in raw:
        text = item.strip() if isinstance(item, str) else item
        try:
            size = int(text)
        except (TypeError, ValueError):
            size = 0
        if isinstance(text, bool) or size < 1 or (not isinstance(text, str)
                                                  and size != text):
            raise PerfmodelError("graph_batch_sizes", f"{item!r} is not a whole number ≥ 1",
                                 "e.g. 1,2,4,8,16,32,64,128")
        sizes.add(size)
    return tuple(sorted(sizes))


# Host overheads come from one table, in perfmodel.engines (fitted: benchmarks/serving by
# scripts/serving_accuracy.py --fit; the README's Serving section gives the held-out
# figure), so ``perfmodel model --engine`` and the simulator charge the same step.
_VLLM = EngineConfig(
    name="vllm", policy="decode_first", kv_policy="lazy",
    max_num_batched_tokens=8192, max_num_seqs=1024, chunked_prefill=True, block_size=16,
    memory_fraction=0.9, memory_rule="of_total",
    step_overhead_s=STEP_OVERHEAD_S, step_overhead_per_seq_s=STEP_OVERHEAD_PER_SEQ_S,
    request_overhead_s=REQUEST_OVERHEAD_S, fuse_allreduce=False,
    sources=(
        "cited: vllm/engine/arg_utils.py get_batch_defaults (v0.10-0.11): OpenAI server "
        "max_num_batched_tokens 8192 and max_num_seqs 1024 on GPUs with ≥ 70 GiB other "
        "than A100, else 2048 and 256",
        "cited: vLLM V1 scheduler: running requests first, chunked prefill on; "
        "preemption by recompute of the last running request",
        "cited: vLLM CacheConfig block_size 16, gpu_memory_utilization 0.9",
    ))

_TRTLLM = EngineConfig(
    name="trtllm", policy="decode_first", kv_policy="reserve",
    max_num_batched_tokens=8192, max_num_seqs=2048, chunked_prefill=False, block_size=32,
    memory_fraction=0.9, memory_rule="of_free",
    step_overhead_s=STEP_OVERHEAD_S, step_overhead_per_seq_s=STEP_OVERHEAD_PER_SEQ_S,
    request_overhead_s=REQUEST_OVERHEAD_S, fuse_allreduce=True,
    sources=(
        "cited: TensorRT-LLM BuildConfig max_batch_size 2048, max_num_tokens 8192; "
        "KvCacheConfig free_gpu_memory_fraction 0.9 of the memory free after loading, "
        "tokens_per_block 32; enable_chunked_prefill False (llmapi/llm_args.py, v1.0)",
        "cited: TensorRT-LLM capacity scheduler GUARANTEED_NO_EVICT (default): a request "
        "starts only when its whole KV cache fits; in-flight batching of context and "
        "generation requests in one step",
        "cited: TensorRT-LLM batch_wait_timeout_iters 0, batch_wait_max_tokens_ratio 0 "
        "(llm_args.py)",
        "cited: TensorRT-LLM AllReduceFusionOp.RESIDUAL_RMS_NORM fuses the TP all-reduce "
        "with the residual add and RMSNorm",
    ))

_SGLANG = EngineConfig(
    name="sglang", policy="prefill_first", kv_policy="lazy",
    max_num_batched_tokens=8192, max_num_seqs=4096, chunked_prefill=True, block_size=1,
    memory_fraction=0.88, memory_rule="of_total",
    step_overhead_s=STEP_OVERHEAD_S, step_overhead_per_seq_s=STEP_OVERHEAD_PER_SEQ_S,
    request_overhead_s=REQUEST_OVERHEAD_S, fuse_allreduce=False,
    sources=(
        "cited: sglang/srt/server_args.py: chunked_prefill_size 2048 below 35 GiB, 8192 "
        "below 160 GiB, 16384 above; mem_fraction_static 0.88 when not derived; "
        "page_size 1; enable_mixed_chunk False (prefill and decode batches apart)",
        "cited: SGLang scheduler: a new prefill batch runs before decoding when requests "
        "wait; retraction (recompute) when decoding runs out of KV memory",
        "max_running_requests: from the KV pool (4096 here as a cap)",
    ))

ENGINES: dict[str, EngineConfig] = {"vllm": _VLLM, "trtllm": _TRTLLM, "sglang": _SGLANG}

#: The CUDA-graph batch sizes TensorRT-LLM's published throughput runs capture and pad
#: decode batches to (``EngineConfig.graph_batch_sizes``): the llm_options.yml of every
#: model its perf overview lists, dense and MoE, in both versions read
#: (docs/source/performance/perf-overview.md @00f37686, v1.0;
#: docs/source/developer-guide/perf-overview.md @03e27c7d, main: ``cuda_graph_config``,
#: ``enable_padding: true``). Not a default: pass it to reproduce those runs.
TRTLLM_PERF_OVERVIEW_GRAPHS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512,
                                                1024, 2048, 4096, 8192)


def scheduler_and_kernels(engine: str) -> tuple[str, str]:
    """The scheduler and kernels a run uses for an ``--engine`` choice: the engine's own
    for ``vllm``/``trtllm``/``sglang``; vLLM's scheduler with engine-neutral kernels for
    ``none`` (the model commands' default)."""
    key = engine.strip().lower()
    return ("vllm", "none") if key in ("", "none") else (key, key)


def engine_config(name: str, capacity_bytes: float, gpu_name: str = "",
                  **overrides: Any) -> EngineConfig:
    """The engine's defaults for a GPU of ``capacity_bytes`` (the per-GPU-size rules of
    vLLM and SGLang; its own kernels), then ``overrides`` (None values ignored)."""
    key = name.strip().lower().replace("-", "").replace("_", "").replace("tensorrtllm",
                                                                           "trtllm")
    if key not in ENGINES:
        raise PerfmodelError("engine", f"unknown engine {name!r}",
                             f"use one of {', '.join(ENGINES)}")
    cfg = dataclasses.replace(ENGINES[key], kernels=key)
    gib = capacity_bytes / 2**30
    if key == "vllm" and (gib < 70 or "a100" in gpu_name.lower()):
        cfg = dataclasses.replace(cfg, max_num_batched_tokens=2048, max_num_seqs=256)
    if key == "sglang":
        size = 2048 if gib < 35 else (8192 if gib < 160 else 16384)
        cfg = dataclasses.replace(cfg, max_num_batched_tokens=size)
    return cfg.with_(**overrides)
