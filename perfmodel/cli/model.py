"""``perfmodel model``: a whole transformer on a GPU: TTFT, TPOT, memory, per-op table.

Text output is for people; ``--json`` prints one JSON object (SI units) with at least
``ttft_s``, ``tpot_s``, ``e2e_s``, ``tokens_per_s``, ``memory`` and ``ops``.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._units import format_capacity
from perfmodel.cli._model_args import (
    add_dtype_flags,
    add_layout_flags,
    add_memory_flags,
    add_strict_flag,
    batch_int,
    count_int,
    dtype_options,
    fmt_bytes,
    fmt_rate,
    fmt_time,
    gpu_list,
    host_ms,
    table,
    token_int,
    tp_int,
)
from perfmodel.cli._paths import check_plot_target, plot_path
from perfmodel.engines import engine_refusal
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import (
    TransformerConfig,
    active_params,
    list_models,
    load_model,
    num_params,
)
from perfmodel.models.memory import weight_bytes
from perfmodel.models.predict import ModelPrediction, predict_model

__all__ = ["register"]

_EPILOG = """examples:
  perfmodel model llama-2-7b --gpu a100-80gb-sxm --prompt 2048 --gen 256
  perfmodel model llama-3.1-70b --gpu h200-sxm,b200 --prompt 32768 --gen 512 --tp 2
  perfmodel model ./config.json --gpu h100-sxm --batch 16 --prompt 1024 --gen 128 \\
      --weight-dtype fp8 --kv-dtype fp8 --json
  perfmodel model mixtral-8x7b --gpu h100-sxm --prompt 4096 --gen 256 --tp 2 --plot roof.png
  perfmodel model --list

TTFT is the prefill of the whole prompt (every sequence of the batch at once); TPOT is the
mean time per output token excluding the first (decode steps at contexts P+1..P+G-1);
end-to-end = TTFT + (G-1)·TPOT; tokens/s = batch·G / end-to-end. Memory is per GPU.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "model", help="predict a transformer: TTFT, TPOT, memory and the per-op table",
        description="Predict a transformer model (a bundled preset or a Hugging Face "
        "config.json) on one or more GPUs.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="preset id (see --list) or a config.json path")
    p.add_argument("--list", action="store_true", help="list the bundled presets")
    p.add_argument("--gpu", type=gpu_list, metavar="ID[,ID...]",
                   help="bundled id or YAML spec; several for a comparison")
    p.add_argument("--batch", type=batch_int, default=1, help="sequences (default 1)")
    p.add_argument("--prompt", type=token_int, metavar="P", help="prompt tokens")
    p.add_argument("--gen", type=token_int, metavar="G", help="tokens to generate")
    p.add_argument("--cached-prefix", type=count_int, default=0, metavar="C",
                   help="tokens of the prompt already in the KV cache (prefix caching): "
                   "part of --prompt, so the prefill computes P - C tokens; C < P")
    p.add_argument("--tp", type=tp_int, default=1, help="tensor-parallel GPUs")
    add_layout_flags(p, "the --tp GPUs")
    add_dtype_flags(p)
    p.add_argument("--step-overhead-ms", type=host_ms, metavar="MS",
                   help="host time per pass (prefill, each decode step) under --engine, "
                   "instead of the engine's fitted figure (perfmodel.engines.STEP_OVERHEAD_S)")
    add_memory_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--plot", metavar="OUT.png", type=plot_path,
                   help="write a roofline chart of the model's ops (several GPUs: a "
                   "comparison chart); .png, .svg or .pdf")
    add_strict_flag(p)
    p.set_defaults(func=run)


def _list(as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for mid in list_models():
        cfg = load_model(mid)
        rows.append({"id": mid, "params": num_params(cfg), "active_params": active_params(cfg),
                     "layers": cfg.num_layers, "hidden": cfg.hidden_size,
                     "heads": cfg.num_heads, "kv_heads": cfg.num_kv_heads,
                     "kv_lora_rank": cfg.kv_lora_rank, "experts": cfg.num_experts,
                     "experts_per_token": cfg.experts_per_token,
                     "max_position_embeddings": cfg.max_position_embeddings,
                     "source": cfg.source})
    if as_json:
        print(json.dumps({"models": rows}, indent=2))
        return 0
    body = [[r["id"], f"{r['params'] / 1e9:.2f} B",
             f"{r['active_params'] / 1e9:.2f} B" if r["experts"] else "",
             str(r["layers"]), str(r["hidden"]),
             f"{r['heads']}/" + (f"MLA {r['kv_lora_rank']}" if r["kv_lora_rank"]
                                 else str(r["kv_heads"])),
             f"{r['experts_per_token']} of {r['experts']}" if r["experts"] else "",
             str(r["max_position_embeddings"] or "")] for r in rows]
    print("\n".join(table(["model", "params", "active", "layers", "hidden", "heads/kv",
                           "experts", "max ctx"], body)))
    return 0


def _predict(cfg: TransformerConfig, gpu: str, args: argparse.Namespace) -> ModelPrediction:
    return predict_model(cfg, gpu, phase="generate", batch=args.batch, prompt_len=args.prompt,
                         gen_len=args.gen, cached_prefix=args.cached_prefix, tp=args.tp,
                         parallel=args.parallel, pp=args.pp, strict=args.strict,
                         **dtype_options(args),
                         step_overhead_s=None if args.step_overhead_ms is None
                         else args.step_overhead_ms / 1e3)


def _suggest_tp(cfg: TransformerConfig, pred: ModelPrediction) -> str:
    need = float(np.asarray(pred.memory.total_bytes)) - float(np.asarray(
        pred.memory.weights_bytes))
    for t in (2, 4, 8, 16):
        if t <= float(np.asarray(pred.tp)) or cfg.num_heads % t:
            continue
        try:
            w = float(weight_bytes(cfg, t, pred.dtypes))
        except PerfmodelError:
            continue
        if w + need / t <= pred.memory.capacity_bytes:
            return f"; try --tp {t}"
    return ""


def _report(cfg: TransformerConfig, pred: ModelPrediction, args: argparse.Namespace,
            hw: HardwareSpec) -> None:
    mem = pred.memory
    f = float
    p, g, b = args.prompt, args.gen, args.batch
    layout = {"tp": "TP", "tep": "TP attention + EP", "dep": "DP attention + EP"}
    print(f"{cfg.name} ({num_params(cfg) / 1e9:.2f} B params) on {hw.name} [{hw.id}], "
          f"batch {b}, prompt {p}, generate {g}, {layout[args.parallel]} {args.tp}"
          + (f" × PP {args.pp}" if args.pp > 1 else ""))
    dt = pred.dtypes
    print(f"dtypes: weights {dt.weight}" + (f", experts {dt.expert}" if cfg.is_moe else "")
          + f", activations {dt.activation}, KV cache {dt.kv}")
    print()
    prefill = pred.prefill
    decode = pred.decode
    assert prefill is not None
    c = args.cached_prefix
    cached = f" ({c} of {p} cached)" if c else ""
    print(f"  TTFT         {fmt_time(f(pred.ttft_s)):>10}   prefill of {b}×{p - c} tokens"
          f"{cached}, {fmt_rate(f(prefill.flops), 'FLOP')}, "
          f"{fmt_rate(b * (p - c) / f(pred.ttft_s), 'tok/s')}")
    if decode is not None and g > 1:
        print(f"  TPOT         {fmt_time(f(pred.tpot_s)):>10}   per output token after the "
              f"first (mean over contexts {p + 1}..{p + g - 1}), "
              f"{fmt_rate(b / f(pred.tpot_s), 'tok/s')} while decoding")
    print(f"  end-to-end   {fmt_time(f(pred.e2e_s)):>10}   TTFT + {g - 1} × TPOT")
    print(f"  throughput   {fmt_rate(f(pred.tokens_per_s), 'tok/s'):>10}   batch × generated "
          "/ end-to-end")
    print()
    ctx = int(f(pred.context_len))
    max_b, max_c = f(mem.max_batch), f(mem.max_context)
    print(f"memory per GPU ({format_capacity(mem.capacity_bytes, hw.memory.type)} on "
          f"{hw.id}; sizes below in 10⁹ B)")
    print(f"  weights      {fmt_bytes(f(mem.weights_bytes)):>10}")
    dep = args.parallel == "dep"  # a GPU caches its own share of the sequences, unsplit
    per_token = f(mem.kv_bytes_per_token)  # this GPU's layers
    window = (f"; {cfg.num_sliding_layers} of {cfg.num_layers} layers keep at most "
              f"{cfg.sliding_window} tokens") if cfg.num_sliding_layers else ""
    seqs = f"{-(-b // args.tp)} (this GPU's share of {b})" if dep else f"{b}"
    print(f"  KV cache     {fmt_bytes(f(mem.kv_cache_bytes)):>10}   {seqs} × {ctx} tokens × "
          f"{fmt_bytes(per_token)}/token{window}")
    print(f"  activations  {fmt_bytes(f(mem.activation_bytes)):>10}   peak of the prefill")
    print(f"  reserve      {fmt_bytes(mem.reserve_bytes):>10}   "
          f"{args.reserve_fraction:.0%} of capacity + {args.reserve_gib:g} GiB")
    verdict = "fits" if mem.fits else "does NOT fit" + _suggest_tp(cfg, pred)
    longest = "unbounded (sliding window)" if math.isinf(max_c) else f"{max_c:,.0f} tokens"
    print(f"  total        {fmt_bytes(f(mem.total_bytes)):>10}   {verdict}; largest batch at "
          f"this context {max_b:,.0f}; longest context at batch {b}: {longest}")
    if cfg.max_position_embeddings and max_c > cfg.max_position_embeddings:
        print(f"               (the model itself stops at {cfg.max_position_embeddings:,} "
              "positions)")
    print()
    print(f"per op, summed over {cfg.num_layers} layers (prefill; one decode step at the mean "
          "context; whole request)")
    rows = []
    for row in pred.ops:
        pr = prefill.op(row.name)
        try:
            dr = decode.op(row.name) if decode is not None else None
        except KeyError:
            dr = None
        rows.append([
            row.name, f"{f(row.count):g}", fmt_time(f(pr.latency_s)), f"{f(pr.share):.1%}",
            str(pr.bottleneck), f"{f(pr.arithmetic_intensity):.3g}",
            fmt_time(f(dr.latency_s)) if dr else "-", f"{f(dr.share):.1%}" if dr else "-",
            str(dr.bottleneck) if dr else "-",
            f"{f(dr.arithmetic_intensity):.3g}" if dr else "-", f"{f(row.share):.1%}"])
    rows.append(["total", "", fmt_time(f(prefill.latency_s)), "100%", "", "",
                 fmt_time(f(decode.latency_s)) if decode else "-", "100%" if decode else "",
                 "", "", "100%"])
    header = ["op", "count", "prefill", "share", "bound", "FLOP/B", "decode/step", "share",
              "bound", "FLOP/B", "request"]
    print("\n".join("  " + x for x in table(header, rows, right={1, 2, 3, 5, 6, 7, 9, 10})))
    print()
    print("assumptions:")
    for a in pred.assumptions:
        print(f"  - {a}")


def _window_note(cfg: TransformerConfig, args: argparse.Namespace) -> str:
    window = cfg.max_position_embeddings
    ctx = args.prompt + args.gen - 1
    if window is None or ctx <= window:
        return ""
    return f"context {ctx:,} tokens > the model's {window:,}-position window"


def _compare(cfg: TransformerConfig, preds: list[ModelPrediction],
             args: argparse.Namespace) -> None:
    f = float
    rows = [[p.hardware, fmt_time(f(p.ttft_s)), fmt_time(f(p.tpot_s)), fmt_time(f(p.e2e_s)),
             fmt_rate(f(p.tokens_per_s), "tok/s"), fmt_bytes(f(p.memory.total_bytes)),
             format_capacity(p.memory.capacity_bytes), "yes" if p.memory.fits else "NO",
             f"{f(p.memory.max_batch):,.0f}"] for p in preds]
    print(f"{cfg.name}: batch {f(preds[0].batch):g}, prompt {f(preds[0].prompt_len):g}, "
          f"generate {f(preds[0].gen_len):g}, TP {f(preds[0].tp):g}"
          + ("" if args.parallel == "tp" else f" ({args.parallel})")
          + (f" × PP {args.pp}" if args.pp > 1 else ""))
    print("\n".join(table(["gpu", "TTFT", "TPOT", "end-to-end", "throughput", "memory",
                           "capacity", "fits", "max batch"], rows)))


def _cap_batch(cfg: TransformerConfig, preds: list[ModelPrediction],
               args: argparse.Namespace) -> int:
    """A single-GPU prediction whose batch does not fit memory is re-run at the largest
    batch that fits (returns the batch asked for; 0 when nothing was capped). When not even
    one sequence fits, the report says "does NOT fit" instead."""
    if len(preds) != 1 or preds[0].memory.fits:
        return 0
    most = int(float(np.asarray(preds[0].memory.max_batch)))
    if not 1 <= most < args.batch:
        return 0
    asked = int(args.batch)
    args.batch = most
    return asked


def _to_dict(cfg: TransformerConfig, pred: ModelPrediction) -> dict[str, Any]:
    d = pred.to_dict()
    d["params"] = num_params(cfg)
    d["active_params"] = active_params(cfg)
    return d


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.json)
    missing = [flag for flag, value in (("MODEL", args.model), ("--gpu", args.gpu),
                                        ("--prompt", args.prompt), ("--gen", args.gen))
               if value is None]
    if missing:
        raise PerfmodelError("usage", f"missing {', '.join(missing)}",
                             "e.g. perfmodel model llama-2-7b --gpu a100-80gb-sxm "
                             "--prompt 2048 --gen 256")
    if args.cached_prefix >= args.prompt:
        raise PerfmodelError("--cached-prefix", f"{args.cached_prefix} is not below --prompt "
                             f"{args.prompt} (the cached prefix is part of the prompt)",
                             f"pass at most {args.prompt - 1}")
    cfg = load_model(args.model)
    check_plot_target(args.plot, args.model, *args.gpu)
    if args.engine != "none" and len(args.gpu) > 1:
        # a comparison names the GPU the engine does not run on
        for gpu in args.gpu:
            refusal = engine_refusal(args.engine, load_hardware(gpu).arch)
            if refusal is not None:
                raise PerfmodelError("engine", f"{gpu}: {refusal.problem}",
                                     f"drop {gpu} from --gpu, or {refusal.fix}")
    preds = [_predict(cfg, gpu, args) for gpu in args.gpu]
    capped_from = _cap_batch(cfg, preds, args)
    if capped_from:
        preds = [_predict(cfg, args.gpu[0], args)]
    # the first GPU's spec as given (a YAML path's id is not a bundled one)
    first = load_hardware(args.gpu[0])
    if args.plot:
        from perfmodel import plots
        if len(preds) == 1:
            plots.plot_roofline(plots.roofline_data(preds[0], first,
                                                    note=_window_note(cfg, args)), args.plot)
        else:
            plots.plot_gpu_comparison(plots.comparison_data(preds, _window_note(cfg, args)),
                                      args.plot)
    if args.json:
        if len(preds) == 1:
            d = _to_dict(cfg, preds[0])
            if capped_from:
                d["batch_capped_from"] = capped_from
            print(json.dumps(d, indent=2))
        else:
            print(json.dumps({"compare": [_to_dict(cfg, p) for p in preds]}, indent=2))
        return 0
    if len(preds) == 1:
        if capped_from:
            print(f"note: a batch of {capped_from} does not fit in memory at this context; "
                  f"capped to {args.batch}, the largest that fits (more GPUs with --tp, or "
                  "narrower --weight-dtype/--kv-dtype, hold more)\n")
        _report(cfg, preds[0], args, first)
    else:
        _compare(cfg, preds, args)
    if args.plot:
        print(f"\nwrote {args.plot}")
    return 0
