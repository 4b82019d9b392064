"""Flags and formatting shared by ``perfmodel model``, ``sweep`` and ``plan``."""

from __future__ import annotations

import argparse
import math
from typing import Any

from perfmodel._errors import PerfmodelError

__all__ = ["add_dtype_flags", "add_memory_flags", "dtype_options", "fmt_bytes", "fmt_rate",
           "fmt_time", "gpu_list", "positive_float", "positive_int", "table"]


def positive_int(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
    return int(value)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def gpu_list(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected one or more GPU ids, comma-separated")
    return items


def add_dtype_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dtypes (chosen independently)")
    g.add_argument("--weight-dtype", metavar="DT",
                   help="linear weights (default: the checkpoint's; fp8 → fp8 GEMMs where the "
                   "GPU has them, else weights upcast in the kernel)")
    g.add_argument("--dtype", "--activation-dtype", dest="activation_dtype", metavar="DT",
                   help="activations (default bf16, fp16 where the GPU lacks bf16)")
    g.add_argument("--kv-dtype", metavar="DT", help="KV cache (default: the activation dtype)")
    g.add_argument("--expert-dtype", metavar="DT",
                   help="MoE expert weights (default: the checkpoint's, e.g. fp4 for gpt-oss)")
    g.add_argument("--attention-impl", default="flash", metavar="IMPL",
                   help="attention kernel path: flash (default), paged, naive, flash2, flash3")
    g.add_argument("--engine", default="none", choices=("none", "trtllm", "vllm", "sglang"),
                   help="inference engine whose kernels, fusions and bookkeeping to model "
                        "(CUDA-graph replay); none (default): engine-neutral")


def add_memory_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory reserve")
    g.add_argument("--reserve-fraction", type=float, default=0.10, metavar="F",
                   help="fraction of GPU memory held back (default 0.10)")
    g.add_argument("--reserve-gib", type=float, default=1.0, metavar="GIB",
                   help="plus this many GiB for the CUDA context and workspaces (default 1)")


def dtype_options(args: argparse.Namespace) -> dict[str, Any]:
    """predict_model keyword arguments from the dtype and memory flags."""
    if not 0 <= args.reserve_fraction < 1 or args.reserve_gib < 0:
        raise PerfmodelError("--reserve-fraction/--reserve-gib",
                             "fraction must be in [0, 1) and GiB ≥ 0", "e.g. 0.1 and 1")
    return {"weight_dtype": args.weight_dtype, "activation_dtype": args.activation_dtype,
            "kv_dtype": args.kv_dtype, "expert_dtype": args.expert_dtype,
            "attention_impl": args.attention_impl, "reserve_fraction": args.reserve_fraction,
            "reserve_bytes": args.reserve_gib * 2**30,
            "engine": getattr(args, "engine", "none")}


def fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_bytes(n: float) -> str:
    if not math.isfinite(n):
        return "-"
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(n: float, unit: str) -> str:
    if not math.isfinite(n):
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}"


def table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """Fixed-width text table; columns in ``right`` are right-aligned."""
    right = right if right is not None else set(range(1, len(header)))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                 enumerate(zip(r, widths, strict=True))]
        return "  ".join(cells).rstrip()
    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
