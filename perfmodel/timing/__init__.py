"""The timing model: where ops meet hardware. ``predict(op, hw) -> Prediction``.

Per kernel: t_compute (FLOPs at the achievable rate, with tile/wave quantisation),
t_memory (bytes at the achievable bandwidth for that size and CTA count), t_fixed
(launch and prologue). latency = overlap(t_compute, t_memory) + t_fixed. Multi-kernel ops
(naive attention) sum their stages and report each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._xp import SCALAR, VECTOR, Ops
from perfmodel.engines import (
    BEFORE_TURING_ARCHS,
    ENGINES,
    NVIDIA_ARCHS,
    PRE_AMPERE_ARCHS,
    engine_refusal,
    gemm_dispatch,
)
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.attention import IMPLS, UNFUSED_IMPLS, Attention
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Array
from perfmodel.ops.elementwise import Activation, Elementwise, Embedding, Norm, Rotary, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.ops.registry import op_class
from perfmodel.timing.attention import time_flash
from perfmodel.timing.comm import predict_allreduce
from perfmodel.timing.constants import Constants, bundled_constants
from perfmodel.timing.context import DEFAULT_CONTEXT, RunContext
from perfmodel.timing.core import make_env, overlap, stream_time
from perfmodel.timing.engine_costs import call_fixed_s, call_row_s, eager_host_s
from perfmodel.timing.gemm import time_gemm
from perfmodel.timing.kernels import ATTENTION_FAMILIES, gemm_cta_bandwidth, gemm_efficiency
from perfmodel.timing.knobs import Knobs, clock_scale, knobs_for
from perfmodel.timing.prediction import Prediction, as_value, make_prediction
from perfmodel.timing.residual import apply_residual

__all__ = ["Constants", "Prediction", "RunContext", "attention_runs_on", "predict",
           "register_timer", "spec_constants", "timer_for"]

StreamOp = Elementwise | Norm | Activation | Rotary | Softmax | Embedding
Op = Gemm | Attention | StreamOp | AllReduce
Timer = Callable[[Any, HardwareSpec, RunContext, Constants], Prediction]

#: Families with FA3/cuDNN-class fused attention (warp-specialised, TMA).
_FA3_ARCHS = ("hopper", "blackwell")
_FLASH_HINT = "use impl='flash' (the native fused kernel) or 'flash2'"
_BLACKWELL_HINT = ("use impl='fmha-v2' or 'xqa' (TensorRT-LLM before Blackwell), "
                   "'flashinfer', or impl='flash'")
#: Kernel families built for some architectures only: (architectures, how the error says
#: it, the fix). FA4 needs TMA and warpgroup MMA (Hopper or later); FlashAttention-3 also
#: builds an SM8x path (Ampere, Ada: the ``flash3-sm8x`` family), none before.
_BUILT_FOR: dict[str, tuple[tuple[str, ...], str, str]] = {
    "flash4": (_FA3_ARCHS, "are modelled for Hopper and datacenter Blackwell (SM90, SM100; "
               "FA4's SM120 build, flash_attn/cute/flash_fwd_sm120.py, is not modelled)",
               _FLASH_HINT),
    "flash3": (("ampere", "ada", *_FA3_ARCHS), "are built for Ampere, Ada and Hopper (SM8x "
               "path before Hopper; on Blackwell FA4's kernel stands for them)", _FLASH_HINT),
    "trtllm-gen": (("blackwell",), "are built for Blackwell", _BLACKWELL_HINT),
    "flashinfer-sm100": (("blackwell",), "are built for Blackwell", _BLACKWELL_HINT),
}


def _old_nvidia_hint(arch: str) -> str:
    """The fix on an NVIDIA GPU before Ampere: kernels that run there (Triton from Volta)."""
    triton = "" if arch == "pascal" else " or 'triton'"
    return "use impl='flash' (the native fused kernel: PyTorch's mem-efficient kernel " \
           f"before Ampere), 'mem-efficient'{triton}"


#: TensorRT-LLM's kernel families (fmha_v2, XQA, masked MHA): it runs on NVIDIA GPUs from
#: Ampere on (its supported-hardware page, nvidia.github.io/TensorRT-LLM/
#: supported-hardware.html).
_TRTLLM_BUILDS = ("ampere", "ada", *_FA3_ARCHS, "blackwell-consumer")
_TRTLLM_WHERE = "are TensorRT-LLM's, which runs on NVIDIA GPUs from Ampere on (its " \
                "supported-hardware page)"
_BUILT_FOR.update(dict.fromkeys(("fmha-v2", "xqa", "mmha"),
                                (_TRTLLM_BUILDS, _TRTLLM_WHERE, _FLASH_HINT)))
#: NVIDIA architectures from Turing (SM75) on: FlashInfer's kernels (its README,
#: flashinfer-ai/flashinfer; no ROCm or Intel build).
_FROM_TURING = tuple(a for a in NVIDIA_ARCHS if a not in BEFORE_TURING_ARCHS)
_BUILT_FOR["flashinfer"] = (_FROM_TURING, "are built for NVIDIA GPUs from Turing (SM75) on "
                            "(FlashInfer's README)", _FLASH_HINT)
#: Triton compiles for NVIDIA GPUs from compute capability 7.0 (and for AMD GPUs).
_TRITON_FLOOR = "need Volta or later (Triton compiles for compute capability 7.0 and " \
                "later: triton-lang/triton issue 161)"
_FA2_FLOOR = (tuple(sorted(PRE_AMPERE_ARCHS)),
              "need Ampere or later (FlashAttention-2's CUDA build supports Ampere, Ada and "
              "Hopper GPUs: its README, Dao-AILab/flash-attention; Turing has "
              "FlashAttention 1.x)")
#: Kernel families with no build for some older NVIDIA architectures: (architectures, how
#: the error says it; the fix names what runs there, :func:`_old_nvidia_hint`). Other
#: vendors' GPUs keep the family's model (ROCm builds of FlashAttention-2 exist).
_NOT_BUILT_FOR: dict[str, tuple[tuple[str, ...], str]] = {
    "flash2": _FA2_FLOOR, "paged": _FA2_FLOOR,
    "triton": (("pascal",), _TRITON_FLOOR),
}


_SM90_SM100 = ("hopper", "blackwell")
_VENDOR_HINT = "use impl='auto' (the vendor library) or 'triton'"
_PASCAL_GEMM_HINT = "use impl='auto' (cuBLAS)"
#: GEMM kernel families built for some architectures only: (architectures, how the error
#: says it, the fix). DeepGEMM and the CuTe-DSL kernels the engines run are SM90/SM100
#: designs (warpgroup and tensor-memory MMA; on SM120 the engines take CUTLASS instead,
#: perfmodel.engines), cuBLAS, CUTLASS and FlashInfer are NVIDIA's (FlashInfer from SM75),
#: Triton compiles from compute capability 7.0 (and for AMD GPUs).
_GEMM_BUILT_FOR: dict[str, tuple[tuple[str, ...], str, str]] = {
    "deepgemm": (_SM90_SM100, "are built for SM90 and SM100 (DeepGEMM's README: Hopper and "
                 "datacenter Blackwell)", "use impl='cutlass', 'triton' or 'auto'"),
    "cutedsl": (_SM90_SM100, "are built for SM90 and SM100 (the engines' CuTe-DSL GEMMs use "
                "warpgroup and tensor-memory MMA)", "use impl='cutlass' or 'auto'"),
    "cublas": (NVIDIA_ARCHS, "are NVIDIA's", _VENDOR_HINT),
    "cutlass": (NVIDIA_ARCHS, "are NVIDIA's", _VENDOR_HINT),
    "flashinfer": (_FROM_TURING, "are FlashInfer's, built for NVIDIA GPUs from SM75 (its "
                   "README)", "use impl='auto' (the vendor library)"),
}


def _gemm_built_here(impl: str, arch: str) -> tuple[str, str] | None:
    """None where GEMM kernel family ``impl`` has a build for ``arch``; else (why, fix)."""
    if impl == "triton" and arch == "pascal":
        return _TRITON_FLOOR, _PASCAL_GEMM_HINT
    built = _GEMM_BUILT_FOR.get(impl)
    if built is None or arch in built[0]:
        return None
    fix = _PASCAL_GEMM_HINT if arch == "pascal" else \
        built[2] if arch in NVIDIA_ARCHS else _VENDOR_HINT
    return built[1], fix


def _built_here(impl: str, arch: str) -> tuple[str, str] | None:
    """None where kernel family ``impl`` has a build for ``arch``; else (why, the fix)."""
    built = _BUILT_FOR.get(impl)
    if built is not None and arch not in built[0]:
        # the fix names kernels that run there: the old-NVIDIA list before Ampere, the
        # native fused kernel on other vendors' GPUs
        hint = _old_nvidia_hint(arch) if arch in PRE_AMPERE_ARCHS else \
            built[2] if arch in NVIDIA_ARCHS else _FLASH_HINT
        return built[1], hint
    missing = _NOT_BUILT_FOR.get(impl)
    if missing is not None and arch in missing[0]:
        return missing[1], _old_nvidia_hint(arch)
    return None


def attention_runs_on(impl: str, arch: str) -> bool:
    """Whether attention kernel family ``impl`` (or a kernel class, ``persistent`` /
    ``resident``) runs as itself on architecture ``arch``: built for it (FA4 from Hopper
    on, trtllm-gen on Blackwell), not built there as another family (FA3 on Ampere, Ada
    and Blackwell; FA4 and fmha_v2 on Hopper), and, for a family that is another's build on
    some architectures only (``flash3-sm8x``, ``flash4-sm90``, ``fmha-v2-sm90``), on one
    of those."""
    fam = ATTENTION_FAMILIES.get(impl)
    if fam is None:
        return True
    if _built_here(impl, arch) is not None:
        return False
    if any(a == arch for a, _ in fam.built_as):
        return False
    stands_for = {a for f in ATTENTION_FAMILIES.values() for a, other in f.built_as
                  if other == impl}
    # a family a caller can name runs wherever it is built; one that only stands for
    # another's build runs where it does
    return not stands_for or arch in stands_for or impl in IMPLS


def predict(op: Op, hw: HardwareSpec | str, *, extra_overhead_s: float = 0.0,
            context: RunContext | None = None, constants: Constants | None = None) -> Prediction:
    """Predict the duration of ``op`` on ``hw`` and explain it.

    Parameters
    ----------
    op:
        A :class:`Gemm`, :class:`Attention`, small op or :class:`AllReduce`; shape fields
        may be numpy arrays (results broadcast).
    hw:
        A :class:`HardwareSpec`, or a bundled id / YAML path.
    extra_overhead_s:
        A timing-method floor added once per call (e.g. the host gap of an eager call),
        s; 0 for kernel-only time. Added to ``context.floor_s``.
    context:
        How the call runs and is timed (:class:`RunContext`: launch mode, L2 state,
        rotated copies, host dispatch, the engine); default: stream launches, cold L2. An
        engine on a GPU it does not run on is an error
        (:func:`perfmodel.engines.engine_refusal`).
    constants:
        Model constants (:class:`Constants`); default: the bundled fitted table.
    """
    spec = load_hardware(hw)
    if not np.isfinite(extra_overhead_s) or extra_overhead_s < 0:
        raise PerfmodelError("extra_overhead_s", f"must be ≥ 0, got {extra_overhead_s!r}",
                             "pass 0 for kernel-only time")
    ctx = context or DEFAULT_CONTEXT
    if ctx.engine in ENGINES:
        # an engine's call on a GPU it does not run on (engines.engine_refusal) is an error
        refusal = engine_refusal(ctx.engine, spec.arch)
        if refusal is not None:
            raise refusal
    consts = spec_constants(spec, constants)
    floor = extra_overhead_s + ctx.floor_s
    timer = timer_for(op)
    host = ctx.host_s if ctx.host_s is not None else (
        eager_host_s(ctx.engine, consts, spec.arch, str(getattr(op, "impl", "")))
        if ctx.launch == "eager" else 0.0)
    p = _finish(timer(op, spec, ctx, consts), host, floor)
    if isinstance(op, AllReduce):
        return p
    # a calibrated profile's residual tables (timing/residual.py); a no-op without them
    return apply_residual(p, spec, floor, causal=bool(getattr(op, "causal", False)), op=op)


#: Merged constants by (bundled table, calibrated values): keyed by value (a table hashes
#: its fitted values), so an equal profile loaded twice shares one entry; bounded.
_MERGED: dict[tuple[Constants, tuple[tuple[str, float], ...]], Constants] = {}


def spec_constants(spec: HardwareSpec, constants: Constants | None = None) -> Constants:
    """The model constants predictions on ``spec`` use: ``constants`` (default: the bundled
    fitted table) with the spec's calibrated profile's fitted constants, if any, on top."""
    consts = constants if constants is not None else bundled_constants()
    if spec.calibration is not None and spec.calibration.constants:
        consts = _calibrated(consts, spec.calibration.constants)
    return consts


def _calibrated(base: Constants, values: dict[str, float]) -> Constants:
    """``base`` with a calibrated profile's fitted model constants (memoised by value)."""
    key = (base, tuple(sorted(values.items())))
    hit = _MERGED.get(key)
    if hit is not None:
        return hit
    merged = base.with_values(values, "calibrated profile")
    if len(_MERGED) > 256:
        _MERGED.clear()
    _MERGED[key] = merged
    return merged


def _finish(p: Prediction, host_s: float, floor: float) -> Prediction:
    """Add the per-call floor and, for an eager call, the host bound: a call cannot finish
    before the host has dispatched it, latency = max(device time, host_s) + floor."""
    if floor == 0.0 and host_s == 0.0:
        return p
    lat = np.asarray(p.latency_s, dtype=np.float64)
    wait = np.maximum(host_s - lat, 0.0)
    return dataclasses.replace(
        p, latency_s=as_value(lat + wait + floor),
        overhead_s=as_value(np.asarray(p.overhead_s, dtype=np.float64) + wait + floor),
        details={**p.details, **({"host_wait_s": as_value(wait)} if host_s else {})},
    )


def _check_dtype(spec: HardwareSpec, dtype: str, field: str = "dtype") -> None:
    if dtype not in spec.peaks:
        raise PerfmodelError(field, f"{spec.id} does not support {dtype} "
                             f"(no {dtype} peak in its spec)",
                             f"use one of {', '.join(spec.peaks)}")


def _ridge(k: Knobs) -> float:
    return k.rate / k.achievable_bandwidth


def _combine(op: str, spec: HardwareSpec, dtype: str, main: Prediction,
             stages: list[tuple[str, Prediction]], bytes_min: Any) -> Prediction:
    """One prediction for a call of several kernels: parts summed, details of the main
    kernel, each kernel kept in ``stages`` (launch order)."""
    def total(field: str) -> Array:
        return _sum_stages(stages, field)

    kernels = sum(np.asarray(p.details.get("kernels", 1.0), dtype=np.float64)
                  for _, p in stages)
    return make_prediction(
        op=op, hardware=spec.id, dtype=dtype, compute_s=total("compute_s"),
        memory_s=total("memory_s"), overhead_s=total("overhead_s"),
        latency_s=total("latency_s"), flops=total("flops"), bytes_=total("bytes"),
        bytes_min=bytes_min, peak=main.peak, bandwidth=main.bandwidth,
        ridge_point=main.ridge_point, stages=tuple(stages),
        details={**main.details, "kernels": kernels},
    )


def _engine_time(ctx: RunContext, kind: str, spec: HardwareSpec, impl: str, rows: Any,
                 consts: Constants) -> Any:
    """Time of an engine call's own small kernels: fixed + rows·per-row/SMs (None when it
    has none)."""
    fixed = call_fixed_s(ctx.engine, kind, consts, spec.arch, impl)
    per_row = call_row_s(ctx.engine, kind, consts, spec.arch, impl)
    if not fixed and not per_row:
        return None
    # both are SM time stated at the reference clock (timing.constants.REFERENCE_CLOCK_HZ)
    return (fixed + np.asarray(rows, dtype=np.float64) * per_row / spec.compute.units) \
        * clock_scale(spec)


def _fixed(spec: HardwareSpec, dtype: str, seconds: Any, like: Prediction) -> Prediction:
    """A stage of pure fixed time (an engine's bookkeeping kernels)."""
    zero = np.zeros(np.shape(like.latency_s))
    return make_prediction(op="engine", hardware=spec.id, dtype=dtype, compute_s=zero,
                           memory_s=zero, overhead_s=zero + seconds, latency_s=zero + seconds,
                           flops=zero, bytes_=zero, bytes_min=zero, peak=like.peak,
                           bandwidth=like.bandwidth, ridge_point=like.ridge_point,
                           details={"kernels": 0.0})


def _predict_gemm(op: Gemm, spec: HardwareSpec, ctx: RunContext,
                  consts: Constants) -> Prediction:
    _check_dtype(spec, op.dtype)
    missing = _gemm_built_here(op.impl, spec.arch)
    if missing is not None:
        raise PerfmodelError("impl", f"{op.impl} GEMM kernels {missing[0]}; {spec.id} is "
                             f"{spec.arch}", missing[1])
    k = knobs_for(spec, "gemm", op.dtype)
    env = make_env(k, ctx, consts, spec.arch)
    dispatch = gemm_dispatch(ctx.engine or "none", spec.arch, op.impl, op.quant)
    t = time_gemm(op, k, env, gemm_efficiency(op, consts, spec.arch),
                  gemm_cta_bandwidth(k, consts, op), dispatch)
    main = make_prediction(
        op="gemm", hardware=spec.id, dtype=op.dtype, compute_s=t["compute_s"],
        memory_s=t["memory_s"], overhead_s=t["overhead_s"], latency_s=t["latency_s"],
        flops=t["flops"], bytes_=t["bytes"], bytes_min=t["bytes_min"], peak=k.peak,
        bandwidth=k.bandwidth, ridge_point=_ridge(k),
        details={"tile_m": t["tile_m"], "tile_n": t["tile_n"], "split_k": t["split_k"],
                 "waves": t["waves"], "kernels": t["launches"], "unit": k.unit,
                 "impl": op.impl, "quant": op.quant,
                 **({"tile_from": "the engine's dispatch table"} if dispatch else {})},
    )
    stages: list[tuple[str, Prediction]] = []
    if op.quantize_input:
        stages.append(("quantize", _predict_stream(op.quantize_stage(), spec, ctx, consts)))
    stages.append(("gemm", main))
    # a quantized call's bookkeeping (scales, amax, memsets) belongs to the quantizing call:
    # an input that arrives quantized (fused into its producer) runs the GEMM kernel alone
    engine = _engine_time(ctx, f"gemm-{op.quant}", spec, op.impl, op.batch * op.m, consts) \
        if op.quant == "none" or op.quantize_input else None
    if engine is not None:
        stages.append(("engine", _fixed(spec, op.dtype, engine, main)))
    if len(stages) == 1:
        return main
    return _combine("gemm", spec, op.dtype, main, stages, main.bytes_min)


def _predict_attention(op: Attention, spec: HardwareSpec, ctx: RunContext,
                       consts: Constants) -> Prediction:
    if op.impl in UNFUSED_IMPLS:
        return _predict_naive(op, spec, ctx, consts)
    return _predict_flash(op, spec, ctx, consts)


def _predict_flash(op: Attention, spec: HardwareSpec, ctx: RunContext,
                   consts: Constants) -> Prediction:
    _check_dtype(spec, op.dtype)
    _check_dtype(spec, op.kv_dtype, "kv_dtype")
    missing = _built_here(op.impl, spec.arch)
    if missing is not None:
        raise PerfmodelError("impl", f"{op.impl} kernels {missing[0]}; {spec.id} is "
                             f"{spec.arch}", missing[1])
    k = knobs_for(spec, "attention", op.dtype)
    env = make_env(k, ctx, consts, spec.arch)
    t = time_flash(op, k, env, consts)
    main = make_prediction(
        op="attention", hardware=spec.id, dtype=op.dtype, compute_s=t["compute_s"],
        memory_s=t["memory_s"], overhead_s=t["overhead_s"],
        latency_s=t["latency_s"], flops=t["useful_flops"], bytes_=t["bytes"],
        bytes_min=t["bytes_min"], peak=k.peak, bandwidth=k.bandwidth, ridge_point=_ridge(k),
        details={"impl": t["impl"], "q_tile": t["q_tile"], "kv_tile": t["kv_tile"],
                 "splits": t["splits"],
                 "ctas": t["ctas"], "resident": t["resident"], "kernels": t["launches"],
                 **({"fp8_build": t["fp8_build"]} if t["fp8_build"] else {})},
    )
    stages: list[tuple[str, Prediction]] = []
    pro = op.prologue_stage()
    if pro is not None:
        stages.append(("rope_kv_write" if op.rope else "kv_write",
                       _predict_stream(pro, spec, ctx, consts)))
    stages.append(("attention", main))
    # the engine call's kind: the op's phase, or (auto) each row's own: decode where it has
    # one query token; an fp8 call is a kind of its own (it quantizes the query first)
    impl, rows = str(main.details["impl"]), op.batch * op.seq_q
    fp8 = "-fp8" if op.dtype == "fp8" else ""
    engine = None
    if op.phase != "auto":
        engine = _engine_time(ctx, f"attention-{op.phase}{fp8}", spec, impl, rows, consts)
    else:
        decode = _engine_time(ctx, f"attention-decode{fp8}", spec, impl, rows, consts)
        prefill = _engine_time(ctx, f"attention-prefill{fp8}", spec, impl, rows, consts)
        if decode is not None or prefill is not None:
            engine = np.where(np.asarray(op.seq_q) == 1, 0.0 if decode is None else decode,
                              0.0 if prefill is None else prefill)
    if engine is not None:
        stages.append(("engine", _fixed(spec, op.dtype, engine, main)))
    if len(stages) == 1:
        return main
    return _combine("attention", spec, op.dtype, main, stages, main.bytes_min)


def _sum_stages(stages: list[tuple[str, Prediction]], field: str) -> Array:
    return np.asarray(sum(np.asarray(getattr(p, field)) for _, p in stages), dtype=np.float64)


def _predict_naive(op: Attention, spec: HardwareSpec, ctx: RunContext,
                   consts: Constants) -> Prediction:
    _check_dtype(spec, op.dtype)
    stages = [(name, timer_for(stage)(stage, spec, ctx, consts))
              for name, stage in op.naive_stages()]
    k = knobs_for(spec, "attention", op.dtype)
    return make_prediction(
        op="attention", hardware=spec.id, dtype=op.dtype,
        compute_s=_sum_stages(stages, "compute_s"), memory_s=_sum_stages(stages, "memory_s"),
        overhead_s=_sum_stages(stages, "overhead_s"),
        latency_s=_sum_stages(stages, "latency_s"),
        flops=_sum_stages(stages, "flops"), bytes_=_sum_stages(stages, "bytes"),
        bytes_min=op.bytes_min(), peak=k.peak, bandwidth=k.bandwidth, ridge_point=_ridge(k),
        stages=tuple(stages), details={"impl": op.impl, "kernels": float(len(stages))},
    )


def _predict_stream(op: StreamOp, spec: HardwareSpec, ctx: RunContext,
                    consts: Constants) -> Prediction:
    dtype = op.dtype if op.dtype in spec.peaks else ("fp32" if "fp32" in spec.peaks
                                                     else next(iter(spec.peaks)))
    k = knobs_for(spec, "stream", dtype)
    env = make_env(k, ctx, consts, spec.arch)
    fields = op_class(op).shape_fields
    ops: Ops
    terms: Any = op.terms
    if op.shape == () and np.ndim(env.copies) == 0:  # one shape: plain floats
        ops, copies = SCALAR, float(env.copies)
        t = terms(*(float(getattr(op, f)) for f in fields), ops=ops)
    else:
        ops, copies = VECTOR, env.copies
        t = terms(*(getattr(op, f) for f in fields))
    compute = t.vector_flops / k.vector_op_rate + t.sfu_ops / k.sfu_rate
    footprint = t.bytes * (copies if env.input_copies else 1.0)
    # each CTA moves its own bytes at the per-CTA bandwidth c·BW/units
    memory = stream_time(ops.maximum(t.bytes, t.cta_bytes * (k.units / k.cta_bandwidth)),
                         footprint, k, env, ops=ops)
    overhead: Any = env.kernel_s  # one launch
    latency = overlap(compute, memory, k.overlap_p, ops) + overhead
    flops, bytes_ = 0.0 + t.vector_flops, t.bytes
    if ops is VECTOR:  # every figure shaped as the call (a size may not enter them all)
        shape = np.broadcast_shapes(op.shape, np.shape(env.copies))
        compute, memory, overhead, latency, flops, bytes_ = (
            np.broadcast_to(np.asarray(x, dtype=np.float64), shape)
            for x in (compute, memory, overhead, latency, flops, bytes_))
    return make_prediction(
        op=op.name, hardware=spec.id, dtype=op.dtype, compute_s=compute, memory_s=memory,
        overhead_s=overhead, latency_s=latency, flops=flops, bytes_=bytes_,
        bytes_min=bytes_, peak=k.vector_op_rate * 2.0, bandwidth=k.bandwidth,
        ridge_point=k.vector_op_rate * 2.0 / k.achievable_bandwidth,
        details={"kernels": 1.0},
    )


#: The timing function of each op class of the op registry (:func:`register_timer`).
_TIMERS: dict[type, Timer] = {}


def register_timer(cls: type, timer: Timer) -> None:
    """Make ``timer`` the timing function of op class ``cls`` (a class of the op registry,
    :data:`perfmodel.ops.registry.OP_CLASSES`); a timing module registers its own at
    import. Registering a class twice replaces its timer."""
    op_class(cls)  # raises for a class the registry does not know
    _TIMERS[cls] = timer


def timer_for(op: object) -> Timer:
    """The timing function of ``op``'s class; :class:`PerfmodelError` if it has none."""
    timer = _TIMERS.get(type(op))
    if timer is None:
        raise PerfmodelError("op", f"cannot predict {type(op).__name__}",
                             "pass a perfmodel op such as Gemm or Attention")
    return timer


register_timer(Gemm, _predict_gemm)
register_timer(Attention, _predict_attention)
register_timer(AllReduce, predict_allreduce)
for _cls in (Elementwise, Norm, Activation, Rotary, Softmax, Embedding):
    register_timer(_cls, _predict_stream)
