"""``perfmodel sweep``: a whole model over prompt length, context, batch or TP, in one
vectorised pass, with the crossovers (attention passing the MLP, compute-bound, memory)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from perfmodel._limits import MAX_SWEEP_POINTS
from perfmodel.cli._model_args import (
    add_dtype_flags,
    add_layout_flags,
    add_memory_flags,
    add_strict_flag,
    batch_int,
    dtype_options,
    fmt_bytes,
    fmt_time,
    positive_int,
    sweep_points,
    table,
    token_int,
    tp_int,
)
from perfmodel.cli._paths import check_plot_target, plot_path
from perfmodel.models.config import load_model
from perfmodel.sweeps import GROUPS, SweepResult, parse_values, sweep

__all__ = ["register"]

_EPILOG = """examples:
  perfmodel sweep llama-3.1-8b --gpu a100-80gb-sxm --over prompt --values 128:32768:128
  perfmodel sweep llama-3.1-8b --gpu h100-sxm --over context --values 1024:1048576 \\
      --points 100 --log --batch 8 --plot context.png
  perfmodel sweep llama-2-7b --gpu h100-sxm --over batch --values 1:1024 --points 64 --log \\
      --context 4096 --format csv > batch.csv
  perfmodel sweep llama-3.1-70b --gpu h100-sxm --over tp --values 2,4,8 --json
  perfmodel sweep llama-3.1-70b --gpu h200-sxm --tp 4 --over concurrency --values 1,8,32,128 \\
      --prompt 1024 --gen 1024 --engine trtllm

Values: a list (1,2,4,8), START:STOP:STEP (up to STOP, included when a step lands on it),
or START:STOP with --points (--log for geometric spacing); at most 100,000 points. A value
that starts with '-' needs '=': --values=-5:5. Points past the model's context window warn
(--strict refuses them) and are shaded on the chart. Phase: prefill for prompt sweeps,
decode otherwise (--phase generate sweeps the whole request). Crossovers are interpolated
between points.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "sweep", help="what-if sweep of a whole model (prompt, context, batch or TP)",
        description="Sweep one variable of a model prediction in one vectorised pass and "
        "report where the regime changes.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="preset id or a config.json path")
    p.add_argument("--gpu", required=True, metavar="ID", help="bundled id or YAML spec")
    p.add_argument("--over", required=True,
                   choices=("prompt", "context", "batch", "tp", "concurrency", "rate"),
                   help="concurrency or rate: serving under load on the simulator "
                   "(closed loop / Poisson; --prompt, --gen, --engine, --requests)")
    p.add_argument("--values", required=True, metavar="SPEC",
                   help="1,2,4 | START:STOP:STEP | START:STOP with --points")
    p.add_argument("--points", type=sweep_points,
                   help=f"points between START:STOP (at most {MAX_SWEEP_POINTS:,})")
    p.add_argument("--log", action="store_true", help="geometric spacing with --points")
    p.add_argument("--phase", choices=("prefill", "decode", "generate"),
                   help="default: prefill for --over prompt, decode otherwise")
    p.add_argument("--batch", type=batch_int, default=1)
    p.add_argument("--prompt", type=token_int, default=2048)
    p.add_argument("--context", type=token_int, help="decode context (default --prompt)")
    p.add_argument("--gen", type=token_int, default=256, help="for --phase generate")
    p.add_argument("--tp", type=tp_int, default=1)
    add_layout_flags(p, "the --tp GPUs")
    p.add_argument("--requests", type=positive_int,
                   help="serving sweeps: requests per point (default 10×C, or 1000)")
    add_dtype_flags(p)
    add_memory_flags(p)
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--rows", type=positive_int, default=24,
                   help="table rows shown (evenly spread; csv/json give every point)")
    p.add_argument("--plot", metavar="OUT.png", type=plot_path,
                   help="write the sweep chart (.png, .svg or .pdf); a context window the "
                   "sweep passes is marked")
    add_strict_flag(p)
    p.set_defaults(func=run)


def _table(res: SweepResult, rows: int) -> None:
    pred = res.prediction
    fixed = []
    keys = {"prefill": ("batch", "prompt_len", "tp"), "decode": ("batch", "context_len", "tp"),
            "generate": ("batch", "prompt_len", "gen_len", "tp")}[res.phase]
    for key, label in (("batch", "batch"), ("prompt_len", "prompt"), ("context_len", "context"),
                       ("gen_len", "gen"), ("tp", "TP")):
        if key.removesuffix("_len") == res.over or key not in keys:
            continue
        v = float(np.asarray(getattr(pred, key), dtype=np.float64).flat[0])
        if np.isfinite(v):
            fixed.append(f"{label} {v:g}")
    print(f"{res.model} on {res.hardware}: {res.phase} over {res.x_label}, "
          f"{len(res.values)} points in one pass; {', '.join(fixed)}")
    print("crossovers:")
    for c in res.crossovers:
        if c.value is not None:
            where = f"at {c.value:,.1f}" + (f" (between {c.bracket[0]:,g} and "
                                            f"{c.bracket[1]:,g})" if c.bracket else "")
        elif c.status == "from_start":
            where = "already at the first point"
        else:
            where = "not within the sweep"
        print(f"  {c.name:22s} {where}: {c.description}")
    idx = np.unique(np.round(np.linspace(0, len(res.values) - 1,
                                         min(rows, len(res.values)))).astype(int))
    groups = [g for g in GROUPS if np.any(res.groups[g] > 0)]
    header = [res.over, "time", *[g.replace("_", " ") for g in groups], "bound", "memory",
              "fits"]
    body = []
    for i in idx:
        bound = "compute" if res.compute_s[i] >= res.memory_s[i] else "memory"
        body.append([f"{res.values[i]:,.0f}", fmt_time(float(res.latency_s[i])),
                     *[fmt_time(float(res.groups[g][i])) for g in groups], bound,
                     fmt_bytes(float(res.memory_bytes[i])), "yes" if res.fits[i] else "NO"])
    print()
    print("\n".join(table(header, body, right=set(range(len(header) - 2)) | {len(header) - 2})))
    if len(idx) < len(res.values):
        print(f"(showing {len(idx)} of {len(res.values)} points; --format csv for all)")


def _serve_sweep(args: argparse.Namespace, values: np.ndarray) -> int:
    from perfmodel.serving import scheduler_and_kernels
    from perfmodel.serving.sweep import serve_sweep
    opts = {k: getattr(args, k) for k in ("weight_dtype", "activation_dtype", "kv_dtype",
                                          "expert_dtype")}
    scheduler, kernels = scheduler_and_kernels(args.engine)
    res = serve_sweep(args.model, args.gpu, args.over, values.tolist(), prompt=args.prompt,
                      gen=args.gen, requests=args.requests, tp=args.tp, engine=scheduler,
                      kernels=kernels, parallel=args.parallel, pp=args.pp, **opts)
    fmt = "json" if args.json else args.format
    rows = res.rows()
    if fmt == "json":
        print(json.dumps(res.to_dict()))
        return 0
    if fmt == "csv":
        print(",".join(rows[0]))
        for r in rows:
            print(",".join(f"{v:.6g}" for v in r.values()))
        return 0
    first = res.results[0]
    print(f"{first.model} on {first.gpus} × {first.hardware}, engine {first.engine}: serving "
          f"over {args.over}, prompt {args.prompt}, output {args.gen} tokens")
    body = [[f"{r[args.over]:g}", fmt_time(r["ttft_mean_s"]), fmt_time(r["ttft_p90_s"]),
             fmt_time(r["tpot_mean_s"]), fmt_time(r["tpot_p90_s"]),
             f"{r['throughput_tok_s']:,.0f}", f"{r['per_gpu_tok_s']:,.0f}",
             f"{r['requests_per_s']:.3g}"] for r in rows]
    print("\n".join(table([args.over, "TTFT mean", "TTFT p90", "TPOT mean", "TPOT p90",
                           "out tok/s", "per GPU", "req/s"], body)))
    return 0


def run(args: argparse.Namespace) -> int:
    values = parse_values(args.values, args.points, args.log)
    if args.over in ("concurrency", "rate"):
        return _serve_sweep(args, values)
    cfg = load_model(args.model)
    check_plot_target(args.plot, args.model, args.gpu)
    res = sweep(cfg, args.gpu, args.over, values, phase=args.phase, batch=args.batch,
                prompt_len=args.prompt, context_len=args.context, gen_len=args.gen,
                tp=args.tp, strict=args.strict, parallel=args.parallel, pp=args.pp,
                **dtype_options(args))
    fmt = "json" if args.json else args.format
    if args.plot:
        from perfmodel.plots import plot_sweep
        plot_sweep(res, Path(args.plot))
    if fmt == "json":
        print(json.dumps(res.to_dict()))
    elif fmt == "csv":
        print(res.to_csv(), end="")
    else:
        _table(res, args.rows)
        if args.plot:
            print(f"\nwrote {args.plot}")
    return 0
