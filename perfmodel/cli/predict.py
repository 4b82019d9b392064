"""``perfmodel predict OP``: predict one op on one GPU (or several) and explain why.

The text output reads like an Nsight Compute summary (duration, compute and memory
throughput, arithmetic intensity against the ridge point) plus what the model saw: the
latency parts, the bottleneck and how deep into it the op sits, the kernel choices and
one line of advice. ``--json`` prints :meth:`Prediction.to_dict` as one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable, Sequence

from perfmodel._errors import PerfmodelError, SpecError
from perfmodel._limits import MAX_SIZE
from perfmodel.cli._explain import compare_lines, explain_lines
from perfmodel.engines import ENGINES, default_quant
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops import (
    Activation,
    AllReduce,
    Attention,
    Elementwise,
    Embedding,
    Gemm,
    Norm,
    Op,
    Rotary,
    Softmax,
)
from perfmodel.ops.comm import ALGORITHMS
from perfmodel.ops.registry import OP_CLASSES
from perfmodel.timing import Prediction, RunContext, predict
from perfmodel.timing.engine_call import engine_call

__all__ = ["register"]

_PREDICT_EPILOG = """examples:
  perfmodel predict gemm --gpu h100-sxm --m 4096 --n 4096 --k 4096 --dtype bf16
  perfmodel predict attention --gpu a100-80gb-sxm --batch 1 --heads 32 --kv-heads 8 \\
      --seq-q 4096 --head-dim 128 --causal --dtype bf16
  perfmodel predict norm --gpu h100-sxm --tokens 8192 --hidden 4096
  perfmodel predict gemm --compare a100-80gb-sxm,h100-sxm,h200-sxm --m 8192 --n 8192 \\
      --k 8192 --dtype bf16

Every op takes --gpu ID|FILE.yaml, --compare ID,ID,... and --json; see
'perfmodel predict OP --help' for the op's own flags.
"""

_COMMON_HELP = """
Common flags: --gpu ID|FILE.yaml (a bundled id, alias or spec file), --compare ID,ID,...
(side-by-side table; with --gpu the --gpu device comes first), --json (one JSON object:
Prediction.to_dict(), or {"compare": [...]}). Sizes are positive integers.
"""

_EPILOGS: dict[str, str] = {
    "gemm": """examples:
  perfmodel predict gemm --gpu h100-sxm --m 4096 --n 4096 --k 4096 --dtype bf16
  perfmodel predict gemm --gpu a100-80gb-sxm --m 128 --n 128 --k 128 --dtype fp16 --json
  perfmodel predict gemm --gpu h100-sxm --m 16 --n 8192 --k 8192 --dtype fp8 \\
      --out-dtype bf16 --shared-b --batch 4
C[batch,m,n] = A[batch,m,k] @ B[batch,k,n]; FLOPs = 2*batch*m*n*k. --shared-b: one B for
the whole batch (a linear layer's weight); --bias: an epilogue bias vector of length n.
""",
    "attention": """examples:
  perfmodel predict attention --gpu h100-sxm --batch 1 --heads 32 --kv-heads 8 \\
      --seq-q 8192 --head-dim 128 --causal --dtype bf16
  perfmodel predict attention --gpu a100-80gb-sxm --batch 1 --heads 32 --seq-q 32768 \\
      --head-dim 128 --causal --dtype fp16 --impl naive          (per-kernel stages)
  perfmodel predict attention --gpu h100-sxm --batch 8 --heads 32 --kv-heads 8 \\
      --seq-q 1 --seq-kv 8192 --head-dim 128 --dtype bf16 --kv-dtype fp8   (decode)
  perfmodel predict attention --gpu h100-sxm --batch 4 --heads 32 --kv-heads 8 \
      --seq-q 2048 --head-dim 128 --causal --dtype bf16 --kernel fmha-v2 --kv-write --rope
  perfmodel predict attention --gpu b200 --batch 64 --heads 32 --kv-heads 8 --seq-q 1 \
      --seq-kv 4096 --head-dim 128 --dtype bf16 --engine trtllm --launch graph
  perfmodel predict attention --gpu h100-sxm --batch 64 --heads 128 --kv-heads 1 \
      --seq-q 1 --seq-kv 4096 --head-dim 576 --value-dim 512 --dtype bf16 --impl mla \
      --shared-kv                                     (DeepSeek MLA decode, latent cache)
--impl/--kernel: flash (the fused kernel native to the GPU), flash2, flash3 (its SM8x build
on Ampere and Ada; none for Blackwell, where it means FA4's kernel), flash4, paged
(FA2 paged-KV), fmha-v2 and xqa (TensorRT-LLM before Blackwell), trtllm-gen (Blackwell),
flashinfer, flashinfer-sm100 (its Blackwell backends), triton, mem-efficient (PyTorch's
memory-efficient SDPA kernel; the native one before Ampere), mla (the engines' multi-head
latent attention decode kernels, with --shared-kv), naive (unfused path: QK^T,
scale/mask, softmax, PV), math (PyTorch's MATH backend: the unfused path in fp32).
--num-splits: split-KV factor, auto (the library heuristic) or an integer >= 1.
--engine trtllm|vllm|sglang: the engine's kernel for this GPU, its KV-cache write (and RoPE)
kernel and bookkeeping; the stages are listed.
""",
    "norm": """examples:
  perfmodel predict norm --gpu h100-sxm --tokens 8192 --hidden 4096
  perfmodel predict norm --gpu a100-80gb-sxm --tokens 1 --hidden 8192 --kind layer
""",
    "activation": """examples:
  perfmodel predict activation --gpu h100-sxm --tokens 8192 --width 14336
  perfmodel predict activation --gpu l40s --tokens 512 --width 11008 --kind gelu
--width is the output width (for silu_mul/gelu_mul the input is twice as wide).
""",
    "rotary": """examples:
  perfmodel predict rotary --gpu h100-sxm --tokens 8192 --heads 32 --kv-heads 8 --head-dim 128
""",
    "softmax": """examples:
  perfmodel predict softmax --gpu h100-sxm --rows 65536 --cols 4096
""",
    "embedding": """examples:
  perfmodel predict embedding --gpu h100-sxm --tokens 8192 --hidden 4096 --vocab 128256
""",
    "elementwise": """examples:
  perfmodel predict elementwise --gpu h100-sxm --numel 33554432 --reads 2 --writes 1
      (a residual add of 8192 x 4096)
""",
    "allreduce": """examples:
  perfmodel predict allreduce --gpu h100-sxm --numel 33554432 --gpus 8 --dtype bf16
Ring all-reduce: each GPU sends 2*(n-1)/n of the buffer over its link.
""",
}


# ----------------------------------------------------------------------- argument types
def _size(text: str) -> int:
    """A positive integer size (argparse type)."""
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not math.isfinite(value) or value != round(value):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    if value > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{value:.4g} is above the cap of {MAX_SIZE:.4g} "
                                         "(2^53, perfmodel._limits.MAX_SIZE)")
    return int(value)


def _count(text: str) -> float:
    """A finite number >= 0 (per-element counts of ``elementwise``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    if value > _MAX_PER_ELEMENT:
        raise argparse.ArgumentTypeError(f"{value:g} per element is above the cap of "
                                         f"{_MAX_PER_ELEMENT:g}")
    return value


#: Reads, writes or operations per element of a generic elementwise kernel.
_MAX_PER_ELEMENT = 1e6


def _splits(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _size(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected 'auto' or an integer >= 1, got {text!r}") from None


def _gpu_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of GPU ids")
    return items


# ------------------------------------------------------------------------ op definitions
def _add_gemm(p: argparse.ArgumentParser) -> None:
    p.add_argument("--m", type=_size, required=True, help="rows of A and C")
    p.add_argument("--n", type=_size, required=True, help="columns of B and C")
    p.add_argument("--k", type=_size, required=True, help="reduction length")
    p.add_argument("--batch", type=_size, default=1, help="independent products (default 1)")
    p.add_argument("--dtype", required=True, help="input dtype (bf16, fp16, fp8, tf32, ...)")
    p.add_argument("--out-dtype", default=None, help="output dtype (default: --dtype)")
    p.add_argument("--shared-b", action="store_true", help="one B shared by the whole batch")
    p.add_argument("--bias", action="store_true", help="read a bias vector of length n")
    p.add_argument("--quant", default=None,
                   help="quantization scheme of fp8/fp4 inputs: per-tensor, per-channel, "
                        "block, nvfp4 (default: none; per-tensor for fp8, nvfp4 for fp4)")
    p.add_argument("--quantize-input", action="store_true",
                   help="the call first quantizes A from --out-dtype (one more kernel)")
    p.add_argument("--impl", "--kernel", dest="impl", default=None,
                   help="GEMM kernel family: auto, cublas, cutlass, deepgemm, cutedsl, triton, "
                        "flashinfer (default auto, or the --engine's choice)")


def _build_gemm(a: argparse.Namespace) -> Op:
    quant = a.quant or default_quant(a.engine or "none", a.dtype)
    gemm = Gemm(m=a.m, n=a.n, k=a.k, batch=a.batch, dtype=a.dtype,
                out_dtype=a.out_dtype or ("bf16" if quant != "none" else None),
                shared_b=a.shared_b, bias=a.bias, quant=quant,
                quantize_input=a.quantize_input, impl=a.impl or "auto")
    if a.engine:
        gemm = engine_call(gemm, a.engine, a.hw_for_engine)
        if a.impl:  # --impl names the kernel; the engine's call (quantize) stays
            gemm = dataclasses.replace(gemm, impl=a.impl)
    return gemm


def _add_attention(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=_size, required=True, help="sequences")
    p.add_argument("--heads", type=_size, required=True, help="query heads")
    p.add_argument("--kv-heads", type=_size, default=None,
                   help="key/value heads (GQA/MQA; default: --heads); must divide --heads")
    p.add_argument("--seq-q", type=_size, required=True, help="query length (1 for decode)")
    p.add_argument("--seq-kv", type=_size, default=None, help="key length (default: --seq-q)")
    p.add_argument("--head-dim", type=_size, required=True, help="Q/K head dimension")
    p.add_argument("--value-dim", type=_size, default=None,
                   help="V head dimension (default: --head-dim)")
    p.add_argument("--causal", action="store_true",
                   help="causal mask, aligned bottom-right (queries are the last positions)")
    p.add_argument("--dtype", required=True, help="dtype of Q and O (bf16, fp16, fp8)")
    p.add_argument("--kv-dtype", default=None, help="dtype of K and V (default: --dtype)")
    p.add_argument("--impl", "--kernel", dest="impl", default=None,
                   help="kernel family: flash (native), flash2, flash3, flash4, paged, "
                        "fmha-v2, xqa, trtllm-gen, flashinfer, flashinfer-sm100, triton, "
                        "mla, naive (default flash, or the --engine's choice)")
    p.add_argument("--num-splits", type=_splits, default="auto",
                   help="split-KV factor: auto or an integer >= 1 (default auto)")
    p.add_argument("--kv-write", action="store_true",
                   help="the call first writes the new K/V into the paged cache (a kernel)")
    p.add_argument("--rope", action="store_true",
                   help="that pre-processing kernel also applies RoPE to Q and K")
    p.add_argument("--shared-kv", action="store_true",
                   help="K and V are one cached vector per token, V its first --value-dim "
                        "elements (multi-head latent attention's latent cache, e.g. "
                        "--kv-heads 1 --head-dim 576 --value-dim 512 --impl mla)")
    p.add_argument("--sinks", action="store_true",
                   help="the model's attention has sinks (gpt-oss): with --engine, the "
                        "backend the engine runs for them (vLLM and SGLang: Triton where "
                        "they would run FA2 or FlashInfer)")


def _build_attention(a: argparse.Namespace) -> Op:
    attn = Attention(batch=a.batch, heads=a.heads, kv_heads=a.kv_heads, seq_q=a.seq_q,
                     seq_kv=a.seq_kv, head_dim=a.head_dim, value_dim=a.value_dim,
                     causal=a.causal, dtype=a.dtype, kv_dtype=a.kv_dtype,
                     impl=a.impl or "flash", num_splits=a.num_splits, kv_write=a.kv_write,
                     rope=a.rope, shared_kv=a.shared_kv)
    if a.engine:
        call = engine_call(attn, a.engine, a.hw_for_engine, sinks=a.sinks)
        if a.impl and a.impl != call.impl:
            # --impl names another kernel: the engine's call around it (KV write, RoPE,
            # split rule) stays, the chosen kernel's own traits do not
            call = dataclasses.replace(call, impl=a.impl, dtype=attn.dtype,
                                       tensor_core_min_group=0.0)
        attn = call
    return attn


def _dtype_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="bf16", help="element dtype (default bf16)")


def _add_norm(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=_size, required=True, help="rows")
    p.add_argument("--hidden", type=_size, required=True, help="row width")
    p.add_argument("--kind", default="rms", choices=("rms", "layer"),
                   help="rms (RMSNorm) or layer (LayerNorm); default rms")
    _dtype_flag(p)


def _add_activation(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=_size, required=True, help="rows")
    p.add_argument("--width", type=_size, required=True, help="output width")
    p.add_argument("--kind", default="silu_mul",
                   choices=("silu_mul", "gelu_mul", "gelu", "silu", "relu"),
                   help="activation (default silu_mul, SwiGLU)")
    _dtype_flag(p)


def _add_rotary(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=_size, required=True, help="tokens")
    p.add_argument("--heads", type=_size, required=True, help="query heads")
    p.add_argument("--kv-heads", type=_size, default=None, help="key heads (default: --heads)")
    p.add_argument("--head-dim", type=_size, required=True, help="head dimension")
    _dtype_flag(p)


def _add_softmax(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=_size, required=True, help="rows")
    p.add_argument("--cols", type=_size, required=True, help="row length")
    _dtype_flag(p)


def _add_embedding(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=_size, required=True, help="ids looked up")
    p.add_argument("--hidden", type=_size, required=True, help="row width")
    p.add_argument("--vocab", type=_size, default=32000, help="table rows (default 32000)")
    _dtype_flag(p)


def _add_elementwise(p: argparse.ArgumentParser) -> None:
    p.add_argument("--numel", type=_size, required=True, help="elements")
    p.add_argument("--reads", type=_count, default=1.0, help="inputs read per element")
    p.add_argument("--writes", type=_count, default=1.0, help="outputs written per element")
    p.add_argument("--flops-per-element", type=_count, default=1.0, help="vector FLOPs")
    p.add_argument("--sfu-per-element", type=_count, default=0.0,
                   help="special-function ops (exp, tanh, rsqrt) per element")
    _dtype_flag(p)


def _add_allreduce(p: argparse.ArgumentParser) -> None:
    p.add_argument("--numel", type=_size, required=True, help="elements in the buffer")
    p.add_argument("--gpus", type=_size, required=True, help="GPUs taking part (a count)")
    p.add_argument("--algorithm", default="auto", choices=list(ALGORITHMS),
                   help="auto: what inference engines run (custom one-/two-shot kernels on "
                   "NVSwitch for small buffers, else NCCL); nccl: NCCL's own choice; or one "
                   "algorithm")
    _dtype_flag(p)


@dataclasses.dataclass(frozen=True)
class _OpCommand:
    """The flags and the builder of one op class (its name and summary: the op registry,
    :data:`perfmodel.ops.registry.OP_CLASSES`)."""

    add: Callable[[argparse.ArgumentParser], None]
    build: Callable[[argparse.Namespace], Op]


_OPS: dict[str, _OpCommand] = {
    "gemm": _OpCommand(_add_gemm, _build_gemm),
    "attention": _OpCommand(_add_attention, _build_attention),
    "norm": _OpCommand(_add_norm,
                       lambda a: Norm(a.tokens, a.hidden, kind=a.kind, dtype=a.dtype)),
    "activation": _OpCommand(_add_activation,
                             lambda a: Activation(a.tokens, a.width, kind=a.kind,
                                                  dtype=a.dtype)),
    "rotary": _OpCommand(_add_rotary,
                         lambda a: Rotary(a.tokens, a.heads,
                                          a.heads if a.kv_heads is None else a.kv_heads,
                                          a.head_dim, dtype=a.dtype)),
    "softmax": _OpCommand(_add_softmax,
                          lambda a: Softmax(a.rows, a.cols, dtype=a.dtype)),
    "embedding": _OpCommand(_add_embedding,
                            lambda a: Embedding(a.tokens, a.hidden, vocab=a.vocab,
                                                dtype=a.dtype)),
    "elementwise": _OpCommand(_add_elementwise,
                              lambda a: Elementwise(a.numel, reads=a.reads, writes=a.writes,
                                                    flops_per_element=a.flops_per_element,
                                                    sfu_per_element=a.sfu_per_element,
                                                    dtype=a.dtype)),
    "allreduce": _OpCommand(_add_allreduce,
                            lambda a: AllReduce(a.numel, gpus=a.gpus, dtype=a.dtype,
                                                algorithm=a.algorithm)),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perfmodel predict {gemm,attention,...}`` to the top-level parser."""
    parser = subparsers.add_parser(
        "predict", help="predict one op's latency and explain it",
        description="Predict the latency of one op on a GPU and say why: Nsight-style "
                    "throughputs, latency parts, bottleneck and advice.",
        epilog=_PREDICT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=lambda _args: _print_help(parser))
    sub = parser.add_subparsers(dest="op", metavar="OP")
    for name, cmd in _OPS.items():
        summary = OP_CLASSES[name].summary
        p = sub.add_parser(
            name, help=summary, description=f"Predict {summary}." + _COMMON_HELP,
            epilog=_EPILOGS[name], formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        p.add_argument("--gpu", metavar="ID|FILE.yaml", default=None,
                       help="bundled hardware id, alias, or spec YAML file")
        p.add_argument("--compare", metavar="ID,ID,...", type=_gpu_list, default=None,
                       help="compare across these GPUs (a table)")
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        if name in ("gemm", "attention"):
            p.add_argument("--engine", default=None, choices=ENGINES[1:],
                           help="predict the call as this inference engine makes it: its "
                                "kernel for the GPU, its pre-processing or activation "
                                "quantization, its bookkeeping kernels")
        p.add_argument("--launch", default="stream", choices=("stream", "graph", "eager"),
                       help="how kernels are launched: stream (timed per kernel, default), "
                            "graph (CUDA-graph replay), eager (one Python call)")
        p.add_argument("--strict", action="store_true",
                       help="refuse a spec that only warns (a peak it cannot cross-check)")
        cmd.add(p)
        p.set_defaults(func=run, op_name=name)


def _print_help(parser: argparse.ArgumentParser) -> int:
    import sys

    parser.print_help(sys.stderr)
    return 2


# ------------------------------------------------------------------------------- running
def _flag(field: str, args: argparse.Namespace) -> str:
    """The command-line flag of an op field (``kv_heads`` -> ``--kv-heads``)."""
    if field in vars(args):
        return "--" + field.replace("_", "-")
    return field


def _load(gpu: str, flag: str) -> HardwareSpec:
    try:
        return load_hardware(gpu)
    except SpecError:
        raise
    except PerfmodelError as exc:
        raise PerfmodelError(flag, exc.problem, exc.fix) from None


def _build(args: argparse.Namespace, hw: HardwareSpec | None = None) -> Op:
    args.engine = getattr(args, "engine", None)
    args.hw_for_engine = hw
    try:
        return _OPS[args.op_name].build(args)
    except PerfmodelError as exc:
        raise PerfmodelError(_flag(exc.field, args), exc.problem, exc.fix) from None


def _context(args: argparse.Namespace) -> RunContext:
    return RunContext(launch=args.launch, engine=getattr(args, "engine", None) or "")


def _predict(op: Op, hw: HardwareSpec, args: argparse.Namespace) -> Prediction:
    try:
        return predict(op, hw, context=_context(args))
    except PerfmodelError as exc:
        raise PerfmodelError(_flag(exc.field, args), exc.problem, exc.fix) from None


def run(args: argparse.Namespace) -> int:
    """``perfmodel predict OP ...``."""
    gpus: list[str] = [args.gpu] if args.gpu else []
    for g in args.compare or []:
        if g not in gpus:
            gpus.append(g)
    if not gpus:
        raise PerfmodelError("--gpu", "no GPU given",
                             "pass --gpu ID (see 'perfmodel specs list') or --compare ID,ID")
    if args.op_name == "allreduce" and args.gpus < 2:
        raise PerfmodelError("--gpus", f"an all-reduce needs at least 2 GPUs, got {args.gpus}",
                             "pass --gpus 2 or more")
    if args.compare is None:
        hw = _load(gpus[0], "--gpu")
        op = _build(args, hw)
        p = _predict(op, hw, args)
        if args.json:
            print(json.dumps(p.to_dict(), indent=2))
        else:
            print("\n".join(explain_lines(op, p, hw)))
        return 0
    return _run_compare(gpus, args)


def _run_compare(gpus: Sequence[str], args: argparse.Namespace) -> int:
    # an unknown id is an error, not a row
    specs = [_load(g, "--gpu" if g == args.gpu else "--compare") for g in gpus]
    results: list[tuple[HardwareSpec, Prediction | None, str]] = []
    op = _build(args, specs[0])
    for hw in specs:
        try:
            # with --engine the kernel depends on the GPU's architecture
            results.append((hw, _predict(_build(args, hw) if args.engine else op, hw, args),
                            ""))
        except PerfmodelError as exc:
            results.append((hw, None, str(exc)))
    if all(p is None for _, p, _ in results):
        raise PerfmodelError(_flag("dtype", args), "no GPU in --compare can run this op: "
                             + results[0][2])
    if args.json:
        rows = [p.to_dict() if p is not None else {"hardware": hw.id, "error": err}
                for hw, p, err in results]
        print(json.dumps({"compare": rows}, indent=2))
        return 0
    print("\n".join(compare_lines(op, results)))
    return 0
