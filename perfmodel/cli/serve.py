"""``perfmodel serve``: a model served under load by an engine (continuous batching, chunked
prefill, paged KV cache): latency percentiles, throughput, goodput, a timeline.

``--json`` prints one JSON object with at least ``ttft_s``, ``tpot_s``, ``e2e_s`` (each
``{mean, p50, p90, p99}``), ``throughput_tok_s``, ``requests_per_s`` and ``per_gpu_tok_s``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.cli._model_args import (
    add_dtype_flags,
    add_layout_flags,
    batch_int,
    fmt_time,
    positive_float,
    positive_int,
    table,
    token_int,
    tp_int,
)
from perfmodel.cli._paths import check_plot_target, plot_path
from perfmodel.serving import (
    ServeResult,
    Workload,
    closed_loop,
    poisson,
    read_trace,
    scheduler_and_kernels,
    simulate,
    stats,
)
from perfmodel.serving.requests import MAX_SIM_REQUESTS

__all__ = ["register"]

_EPILOG = """examples:
  perfmodel serve llama-3.1-70b --gpu h200-sxm --tp 4 --concurrency 64 --prompt 1024 --gen 1024
  perfmodel serve llama-3.1-8b --gpu h100-sxm --engine trtllm --rate 20 --prompt 2048 \\
      --gen 256 --length-spread 0.8 --requests 2000 --ttft-slo-ms 500 --tpot-slo-ms 30
  perfmodel serve llama-3.1-70b --gpu h100-sxm --tp 4 --replicas 2 --trace requests.csv \\
      --weight-dtype fp8 --kv-dtype fp8 --json --plot timeline.png

Closed loop (--concurrency C): C clients each send a request, then the next one as soon as
the previous completes (what benchmark clients do). Open loop (--rate): Poisson arrivals.
A trace is a CSV (or JSON lines) with arrival_s, prompt_tokens, output_tokens per request.
--engine picks the scheduler (its defaults) and the kernels (its profile); without it,
vLLM's scheduler with engine-neutral kernels.
TTFT and end-to-end are from the client's send; TPOT = (end-to-end - TTFT)/(output - 1);
ITL is over all decode tokens.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve", help="simulate serving under load: TTFT/TPOT percentiles and throughput",
        description="Simulate an inference engine serving a model under load, step by step: "
        "continuous batching, chunked prefill, the KV-cache pool, replicas.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="preset id or a config.json path")
    p.add_argument("--gpu", required=True, metavar="ID", help="bundled id or YAML spec")
    p.add_argument("--tp", type=tp_int, default=1, help="tensor-parallel GPUs per replica")
    p.add_argument("--replicas", type=batch_int, default=1,
                   help="data-parallel replicas behind a round-robin router")
    add_layout_flags(p, "each replica's --tp GPUs")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--concurrency", type=batch_int, metavar="C",
                     help="closed loop: C requests in flight")
    src.add_argument("--rate", type=_rate, metavar="QPS", help="open loop: Poisson requests/s")
    src.add_argument("--trace", metavar="FILE", help="CSV/JSONL: arrival_s, prompt_tokens, "
                     "output_tokens")
    p.add_argument("--prompt", type=token_int, metavar="P", help="prompt tokens (longest "
                   "with --length-spread)")
    p.add_argument("--gen", type=_gen, metavar="G", help="output tokens per request")
    p.add_argument("--length-spread", type=float, default=1.0, metavar="A",
                   help="lengths uniform in [A·L, L] (default 1: fixed)")
    p.add_argument("--requests", type=_requests, metavar="N",
                   help="requests to simulate (default 10×concurrency, at least 100; "
                   "1000 with --rate)")
    p.add_argument("--seed", type=int, default=0, help="random seed (lengths, arrivals)")
    g = p.add_argument_group("engine knobs (default: the engine's own)")
    g.add_argument("--max-num-batched-tokens", type=positive_int, metavar="N",
                   help="token budget per step (TRT-LLM max_num_tokens, SGLang "
                   "chunked_prefill_size)")
    g.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                   help="cap on running sequences (TRT-LLM max_batch_size)")
    g.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="split prompts across steps")
    g.add_argument("--kv-blocks", type=positive_int, metavar="N",
                   help="KV-cache blocks per replica, per GPU under --parallel dep (default: "
                   "sized from memory)")
    g.add_argument("--memory-fraction", type=float, metavar="F",
                   help="GPU memory fraction for weights + KV cache (vLLM "
                   "gpu_memory_utilization; TRT-LLM: fraction of free memory)")
    g.add_argument("--step-overhead-ms", type=float, metavar="MS", help="host time per step")
    g.add_argument("--request-overhead-ms", type=float, metavar="MS",
                   help="frontend time per request (HTTP, tokenisation)")
    g.add_argument("--graph-batch-sizes", metavar="N,N,...",
                   help="captured CUDA-graph batch sizes decode-only steps are padded up to "
                   "(TRT-LLM cuda_graph_config batch_sizes with enable_padding: true; "
                   "default: no padding)")
    add_dtype_flags(p)
    p.add_argument("--ttft-slo-ms", type=positive_float, help="TTFT SLO for goodput, ms")
    p.add_argument("--tpot-slo-ms", type=positive_float, help="TPOT SLO for goodput, ms")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--plot", type=plot_path, metavar="OUT.png", help="write a timeline chart")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected requests/s, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"the rate must be a positive number of requests/s, "
                                         f"got {text!r}")
    return v


def _requests(text: str) -> int:
    n = positive_int(text)
    if n > MAX_SIM_REQUESTS:
        raise argparse.ArgumentTypeError(f"{n:,} requests is above the cap of "
                                          f"{MAX_SIM_REQUESTS:,}")
    return n


def _gen(text: str) -> int:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not math.isfinite(v) or v < 1 or v != int(v):
        raise argparse.ArgumentTypeError(f"output tokens must be a whole number ≥ 1 (a "
                                         f"request generates at least one token), got "
                                         f"{text!r}")
    return token_int(text)


def workload_from_args(args: argparse.Namespace) -> Workload:
    if args.trace:
        if args.prompt or args.gen:
            raise PerfmodelError("--prompt/--gen", "lengths come from the trace",
                                 "drop --prompt and --gen with --trace")
        return read_trace(args.trace)
    if args.prompt is None or args.gen is None:
        raise PerfmodelError("--prompt/--gen", "required with --concurrency or --rate",
                             "e.g. --prompt 1024 --gen 256")
    if args.concurrency:
        n = args.requests or max(100, 10 * args.concurrency)
        return closed_loop(args.concurrency, n, args.prompt, args.gen, args.length_spread,
                           args.seed)
    return poisson(args.rate, args.requests or 1000, args.prompt, args.gen,
                   args.length_spread, args.seed)


def engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_num_seqs": args.max_num_seqs, "chunked_prefill": args.chunked_prefill,
        "memory_fraction": args.memory_fraction,
        "step_overhead_s": None if args.step_overhead_ms is None
        else args.step_overhead_ms / 1e3,
        "request_overhead_s": None if args.request_overhead_ms is None
        else args.request_overhead_ms / 1e3,
        "graph_batch_sizes": args.graph_batch_sizes,
    }
    if args.attention_impl != "flash":
        out["attention_impl"] = args.attention_impl
    out["kernels"] = scheduler_and_kernels(args.engine)[1]
    return out


class ProgressBar:
    """A one-line progress bar on stderr, shown once a run has taken over 0.5 s."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or time.perf_counter() - self.start < 0.5:
            return
        frac = done / max(total, 1)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\rsimulating [{bar:<30}] {frac:4.0%} ({done:,}/{total:,} requests)")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    check_plot_target(args.plot, args.model, args.gpu, args.trace)
    wl = workload_from_args(args)
    bar = ProgressBar(not args.no_progress)
    try:
        result = simulate(
            args.model, args.gpu, wl, tp=args.tp, replicas=args.replicas,
            engine=scheduler_and_kernels(args.engine)[0],
            weight_dtype=args.weight_dtype, activation_dtype=args.activation_dtype,
            kv_dtype=args.kv_dtype, expert_dtype=args.expert_dtype, kv_blocks=args.kv_blocks,
            progress=bar, parallel=args.parallel, pp=args.pp, **engine_overrides(args))
    finally:
        bar.close()
    ttft_slo = args.ttft_slo_ms / 1e3 if args.ttft_slo_ms else None
    tpot_slo = args.tpot_slo_ms / 1e3 if args.tpot_slo_ms else None
    if args.plot:
        from perfmodel.plots import plot_serve_timeline
        plot_serve_timeline(result, Path(args.plot))
    if args.json:
        print(json.dumps(result.to_dict(ttft_slo, tpot_slo), indent=2))
        return 0
    report(result, ttft_slo, tpot_slo)
    if args.plot:
        print(f"\nwrote {args.plot}")
    return 0


def report(r: ServeResult, ttft_slo: float | None, tpot_slo: float | None) -> None:
    gpus = r.gpus
    layout = {"tep": "TP attention + EP", "dep": "DP attention + EP"}.get(
        str(r.engine_knobs.get("parallel")), "TP")
    stages = f" × PP{r.pp}" if r.pp > 1 else ""
    print(f"{r.model} on {gpus} × {r.hardware} ({layout}{r.tp}{stages}, {r.replicas} "
          f"replica{'s' if r.replicas > 1 else ''}), {r.engine} scheduler, "
          f"{str(r.engine_knobs.get('kernels', 'none')).replace('none', 'engine-neutral')} "
          "kernels")
    print(f"workload: {r.workload}")
    print()
    rows = []
    for name, st in (("TTFT", stats(r.ttft_s)), ("TPOT", stats(r.tpot_s)), ("ITL", r.itl()),
                     ("end-to-end", stats(r.e2e_s)), ("queue", stats(r.queue_s))):
        rows.append([name, fmt_time(st.mean), fmt_time(st.p50), fmt_time(st.p90),
                     fmt_time(st.p99)])
    print("\n".join(table(["", "mean", "p50", "p90", "p99"], rows)))
    print()
    print(f"throughput   {r.throughput_tok_s:,.0f} output tok/s ({r.per_gpu_tok_s:,.0f} per "
          f"GPU), {r.requests_per_s:.3g} requests/s over {r.duration_s:.1f} s")
    if ttft_slo is not None or tpot_slo is not None:
        slo = ", ".join(x for x in (
            f"TTFT ≤ {ttft_slo * 1e3:g} ms" if ttft_slo else "",
            f"TPOT ≤ {tpot_slo * 1e3:g} ms" if tpot_slo else "") if x)
        good = r.goodput(ttft_slo, tpot_slo)
        print(f"goodput      {good:.3g} requests/s meet {slo} "
              f"({good / max(r.requests_per_s, 1e-12):.0%} of requests)")
    d = r.to_dict()
    dep = r.engine_knobs.get("parallel") == "dep"
    holder = "per GPU (attention rank)" if dep else "per replica"
    if r.pp > 1:
        holder += " micro-batch"
    print(f"KV cache     {r.kv_blocks:,} blocks of {r.kv_block_size} tokens {holder}, "
          f"peak {d['kv_cache']['peak_used_fraction']:.0%} used; preemptions "
          f"{d['preemptions']}; {r.steps:,} engine steps")
    print()
    print("assumptions:")
    for a in r.assumptions:
        print(f"  - {a}")
