"""Flags and formatting shared by ``perfmodel model``, ``sweep`` and ``plan``."""

from __future__ import annotations

import argparse
import math
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel._limits import (
    MAX_BATCH,
    MAX_SIZE,
    MAX_SWEEP_POINTS,
    MAX_TOKENS,
    MAX_TP,
    clip_message,
)
from perfmodel.models.graph import PARALLEL_LAYOUTS

__all__ = ["add_dtype_flags", "add_layout_flags", "add_memory_flags", "add_strict_flag",
           "batch_int", "count_int", "dtype_options", "fmt_bytes", "fmt_rate", "fmt_time",
           "fraction", "gib", "gpu_list", "positive_float", "positive_int", "sweep_points",
           "table", "token_int", "tp_int"]


def _whole(text: str, minimum: float, maximum: float, cap: str) -> int:
    shown = clip_message(repr(text), 60)
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {shown}") from None
    if not math.isfinite(value) or value < minimum or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ {minimum:g}, got {shown}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{value:.4g} is above the cap of {maximum:.4g} "
                                         f"(perfmodel._limits.{cap})")
    return int(value)


def positive_int(text: str) -> int:
    """A whole number ≥ 1 (argparse type), at most 2⁵³."""
    return _whole(text, 1, MAX_SIZE, "MAX_SIZE")


def token_int(text: str) -> int:
    """Tokens of one sequence (argparse type): 1 … 2³¹."""
    return _whole(text, 1, MAX_TOKENS, "MAX_TOKENS")


def count_int(text: str) -> int:
    """Tokens that may be zero (argparse type): 0 … 2³¹."""
    return _whole(text, 0, MAX_TOKENS, "MAX_TOKENS")


def batch_int(text: str) -> int:
    """Sequences of a batch (argparse type): 1 … 2²⁴."""
    return _whole(text, 1, MAX_BATCH, "MAX_BATCH")


def sweep_points(text: str) -> int:
    """Points of a sweep (argparse type): 1 … 10⁵."""
    return _whole(text, 1, MAX_SWEEP_POINTS, "MAX_SWEEP_POINTS")


def tp_int(text: str) -> int:
    """Tensor-parallel GPUs (argparse type): 1 … 2¹⁶."""
    return _whole(text, 1, MAX_TP, "MAX_TP")


def add_strict_flag(p: argparse.ArgumentParser) -> None:
    """``--strict``: warnings (a context past the model's window, a peak that cannot be
    cross-checked, an unknown model type) become errors."""
    p.add_argument("--strict", action="store_true",
                   help="refuse what would only warn: a context past the model's window, an "
                   "unknown model type, a peak that cannot be cross-checked")


def _number(text: str, unit: str = "") -> tuple[float, str]:
    """``text`` as a float and as shown in an error (argparse types); not a number: an
    ArgumentTypeError "expected a number[ of <unit>]"."""
    shown = clip_message(repr(text), 60)
    try:
        return float(text), shown
    except ValueError:
        what = f"a number of {unit}" if unit else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown}") from None


def positive_float(text: str) -> float:
    value, shown = _number(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {shown}")
    return value


def host_ms(text: str) -> float:
    """Milliseconds of host time per engine step, finite, in [0, 10,000] (argparse type)."""
    value, shown = _number(text, "ms")
    if not math.isfinite(value) or not 0 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds in [0, 10000], got {shown}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1) (argparse type)."""
    value, shown = _number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {shown}")
    return value


def gib(text: str) -> float:
    """GiB ≥ 0, at most 2²⁰ GiB (argparse type)."""
    value, shown = _number(text, "GiB")
    if not math.isfinite(value) or not 0 <= value <= 2**20:
        raise argparse.ArgumentTypeError(f"expected GiB in [0, 1048576], got {shown}")
    return value


#: GPUs one command compares (each is a whole prediction).
MAX_GPUS = 64


def gpu_list(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected one or more GPU ids, comma-separated")
    if len(items) > MAX_GPUS:
        raise argparse.ArgumentTypeError(f"{len(items)} GPUs is more than the {MAX_GPUS} one "
                                         "command compares")
    return items


def add_dtype_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dtypes (chosen independently)")
    g.add_argument("--weight-dtype", metavar="DT",
                   help="linear weights (default: the checkpoint's; fp8 → fp8 GEMMs where the "
                   "GPU runs them faster than the activation dtype, else weights upcast in "
                   "the kernel; int4 (AWQ/GPTQ) → always upcast to the activation dtype)")
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


def add_layout_flags(p: argparse.ArgumentParser, gpus: str, note: str = "") -> None:
    """``--parallel`` (an MoE model's layout over ``gpus``) and ``--pp`` (pipeline stages
    of ``gpus`` each); ``note`` ends both help texts (where the command takes them)."""
    p.add_argument("--parallel", choices=PARALLEL_LAYOUTS, default="tp",
                   help=f"an MoE model's layout over {gpus}: tp (default), tep (whole "
                   "experts per GPU beside tensor-parallel attention) or dep (attention "
                   "data-parallel: each GPU runs its own share of the sequences; experts "
                   f"expert-parallel){note}")
    p.add_argument("--pp", type=tp_int, default=1,
                   help=f"pipeline-parallel stages of {gpus} each, holding their share of "
                   "the layers (default 1; memory is the largest stage's GPU's; serving "
                   f"keeps as many micro-batches in flight){note}")


def add_memory_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory reserve")
    g.add_argument("--reserve-fraction", type=fraction, default=0.10, metavar="F",
                   help="fraction of GPU memory held back (default 0.10)")
    g.add_argument("--reserve-gib", type=gib, default=1.0, metavar="GIB",
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
