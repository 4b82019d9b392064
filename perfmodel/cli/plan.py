"""``perfmodel plan``: the GPUs, TP degree and replicas a model needs for a workload, and
what it costs per hour and per million tokens, across a list of GPU types."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from perfmodel._errors import PerfmodelError
from perfmodel.cli._model_args import (
    add_dtype_flags,
    add_layout_flags,
    add_memory_flags,
    add_strict_flag,
    dtype_options,
    fmt_time,
    gpu_list,
    positive_float,
    positive_int,
    table,
    token_int,
    tp_int,
)
from perfmodel.cli._paths import check_plot_target, plot_path
from perfmodel.models.config import load_model
from perfmodel.planning import Plan, PlanOption, Workload, plan
from perfmodel.serving.requests import MAX_SIM_REQUESTS

__all__ = ["register"]

_EPILOG = """examples:
  perfmodel plan llama-3.1-70b --gpus a100-80gb-sxm,h100-sxm,h200-sxm --rps 10 \\
      --prompt 2048 --output 256 --ttft-ms 2000 --tpot-ms 50
  perfmodel plan llama-3.1-70b --gpus h200-sxm --rps 10 --prompt 2048 --output 256 \\
      --ttft-ms 2000 --tpot-ms 50 --engine trtllm --percentile p99
  perfmodel plan llama-3.1-70b --gpus h100-sxm,h200-sxm --rps 5 --prompt 8192 --output 512 \\
      --ttft-ms 3000 --tpot-ms 40 --weight-dtype fp8 --price h100-sxm=1.99 --json
  perfmodel plan mixtral-8x7b --gpus h100-sxm,a100-80gb-sxm --rps 20 --prompt 1024 \\
      --output 256 --ttft-ms 1000 --tpot-ms 30 --plot plan.png

Each option is sized on the serving simulator (--method simulate): the highest Poisson
request rate one replica sustains with TTFT and TPOT at --percentile within the targets.
Prices come from each spec's pricing block (an assumption it states) unless --price gives
USD per GPU-hour (ID=USD, or one number for every GPU).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "plan", help="capacity planning: GPUs, TP, replicas and cost for a workload",
        description="Find, per GPU type, the smallest deployment (TP degree × replicas) that "
        "meets TTFT and TPOT targets and fits memory, and its cost.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="preset id or a config.json path")
    p.add_argument("--gpus", "--gpu", dest="gpus", type=gpu_list, required=True,
                   metavar="ID[,ID...]", help="GPU types to compare")
    p.add_argument("--rps", type=positive_float, required=True, help="requests per second")
    p.add_argument("--prompt", type=token_int, required=True, help="prompt tokens")
    p.add_argument("--output", type=token_int, required=True, help="output tokens")
    p.add_argument("--ttft-ms", type=positive_float, required=True, help="TTFT target, ms")
    p.add_argument("--tpot-ms", type=positive_float, required=True,
                   help="TPOT target (per output token after the first), ms")
    p.add_argument("--tp", default="1,2,4,8", metavar="T,T...",
                   help="TP degrees to consider (default 1,2,4,8)")
    add_layout_flags(p, "each option's TP GPUs", "; with --method simulate")
    p.add_argument("--price", action="append", default=[], metavar="ID=USD",
                   help="USD per GPU-hour for a GPU (repeatable), or one number for all")
    p.add_argument("--method", choices=("simulate", "analytic"), default="simulate",
                   help="simulate (default): size each option on the serving simulator; "
                   "analytic: the closed-form continuous-batching estimate")
    p.add_argument("--percentile", choices=("mean", "p50", "p90", "p99"), default="p90",
                   help="statistic the TTFT and TPOT targets apply to (default p90)")
    p.add_argument("--requests", type=_requests, default=400,
                   help="requests per simulation (default 400)")
    p.add_argument("--length-spread", type=float, default=1.0, metavar="A",
                   help="lengths uniform in [A·L, L] (default 1: fixed)")
    add_dtype_flags(p)
    add_memory_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--plot", metavar="OUT.png", type=plot_path,
                   help="write a GPU comparison chart (.png, .svg or .pdf)")
    add_strict_flag(p)
    p.set_defaults(func=run)


def _requests(text: str) -> int:
    n = positive_int(text)
    if n > MAX_SIM_REQUESTS:
        raise argparse.ArgumentTypeError(f"{n:,} requests per simulation is above the cap of "
                                          f"{MAX_SIM_REQUESTS:,}")
    return n


def _prices(items: list[str], gpus: list[str]) -> dict[str, float]:
    from perfmodel.hardware.catalog import load_hardware
    out: dict[str, float] = {}
    for item in items:
        for part in item.split(","):
            key, eq, value = part.rpartition("=")
            if eq and not key.strip():
                raise PerfmodelError("--price", f"{part!r} names no GPU before '='",
                                     "use ID=USD, e.g. h100-sxm=2.49, or one number")
            try:
                usd = float(value)
            except ValueError:
                raise PerfmodelError("--price", f"cannot read {part!r}",
                                     "use ID=USD, e.g. h100-sxm=2.49, or one number") from None
            if not math.isfinite(usd) or usd <= 0:
                raise PerfmodelError("--price", f"{part!r}: price must be > 0", "e.g. 2.49")
            targets = [key] if key else gpus
            for gpu in targets:
                out[load_hardware(gpu).id] = usd
    return out


def _money(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"${x:,.{digits}f}"


def _report(p: Plan) -> None:
    wl = p.workload
    print(f"{p.model}: {wl.requests_per_s:g} requests/s, {wl.prompt_len} prompt + "
          f"{wl.output_len} output tokens, TTFT ≤ {wl.ttft_target_s * 1e3:g} ms, "
          f"TPOT ≤ {wl.tpot_target_s * 1e3:g} ms")
    print()
    rows = []
    for g in p.ranked():
        b = g.best
        if b is None:
            verdict = "engine does not run here" if g.engine_refused else "cannot meet"
            rows.append([g.gpu, "-", "-", "-", "-", "-", "-", "-", "-", "-", verdict])
            continue
        rows.append([g.gpu, _layout(b), str(b.replicas), str(b.gpus), str(b.batch),
                     fmt_time(b.ttft_s), fmt_time(b.tpot_s), f"{b.tokens_per_s_per_gpu:,.0f}",
                     _money(b.usd_per_hour), _money(b.usd_per_million_output_tokens, 3),
                     b.limited_by])
    print("\n".join(table(["gpu", "TP", "replicas", "GPUs", "batch", "TTFT", "TPOT",
                           "out tok/s/GPU", "$/hour", "$/M out tok", "batch limited by"],
                          rows, right=set(range(1, 10)))))
    print()
    print("options per GPU (TP degree: verdict)")
    for g in p.ranked():
        price = _money(g.usd_per_gpu_hour) + "/GPU-hour" if g.usd_per_gpu_hour else "no price"
        print(f"  {g.gpu} ({g.name}; {price}, {g.price_source})")
        if not g.options:
            print("    no TP degree divides the model's heads")
        for o in g.options:
            if o.feasible:
                detail = (f"{o.replicas} × {o.tp * o.pp} GPUs, {o.reason}, TTFT "
                          f"{fmt_time(o.ttft_s)}, "
                          f"TPOT {fmt_time(o.tpot_s)}, capacity "
                          f"{o.capacity_tokens_per_s_per_gpu:,.0f} out tok/s/GPU")
            else:
                detail = o.reason
            print(f"    TP {_layout(o)}: {detail}")
    print()
    print("assumptions:")
    for a in p.assumptions:
        print(f"  - {a}")


def _layout(o: PlanOption) -> str:
    """An option's TP degree, with its pipeline stages where there are several."""
    return f"{o.tp} × PP {o.pp}" if o.pp > 1 else str(o.tp)


def run(args: argparse.Namespace) -> int:
    items = [x for x in args.tp.split(",") if x.strip()]
    if not items or len(items) > 32:
        raise PerfmodelError("--tp", f"expected 1 to 32 TP degrees, got {len(items)}",
                             "e.g. 1,2,4,8")
    try:
        tps = [tp_int(x) for x in items]
    except argparse.ArgumentTypeError as exc:
        raise PerfmodelError("--tp", str(exc), "e.g. 1,2,4,8") from None
    wl = Workload(args.rps, args.prompt, args.output, args.ttft_ms / 1e3, args.tpot_ms / 1e3)
    cfg = load_model(args.model)
    check_plot_target(args.plot, args.model, *args.gpus)
    result = plan(cfg, args.gpus, wl, tp_options=tps, prices=_prices(args.price, args.gpus),
                  method=args.method, percentile=args.percentile,
                  requests=args.requests, length_spread=args.length_spread,
                  strict=args.strict, parallel=args.parallel, pp=args.pp,
                  **dtype_options(args))
    if args.plot:
        from perfmodel.plots import plan_comparison_data, plot_gpu_comparison
        plot_gpu_comparison(plan_comparison_data(result), Path(args.plot))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    _report(result)
    if args.plot:
        print(f"\nwrote {args.plot}")
    return 0
