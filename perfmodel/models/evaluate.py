"""Evaluate op graphs on one GPU in a few vectorised calls.

Ops of the same type and static arguments (dtype, kind, causal...) are gathered from every
graph passed in, their shape fields flattened and concatenated, and predicted in one
:func:`perfmodel.predict` call; a decode graph over many context points and a 1,000-point
sweep cost one call per op group. A group of a few instances (one prediction of a model:
a prefill and a few decode points) is predicted instead shape by shape on the scalar path,
each distinct shape once (:data:`_SCALAR_MAX`): the same figures, with fewer numpy calls
on tiny arrays.

Dtype fallbacks, decided here because they depend on the GPU:

- A GEMM whose weight dtype the GPU has no peak for (fp8 on A100, fp4 on H100), or no
  higher peak than the activation dtype's (int8 on V100), or whose weights are int4
  (:data:`WEIGHT_ONLY_DTYPES`), runs in the activation dtype with the weights read at
  their stored width and upcast in the kernel (weight-only quantisation, Marlin-style):
  the stand-in GEMM's memory time and bytes are scaled by the ratio of the two minimum
  traffics; latency = stand-in latency − max(c, m) + max(c', m'). Its compute c' is the
  stand-in's, except for a batch of at most 64 rows (decode): a mixed-input kernel
  computes it in one pass of 16-row blocks (:data:`MIXED_INPUT_ROWS`) spread over every
  SM, c' = min(c, 2·b·16⌈m/16⌉·n·k / R) at the activation dtype's achievable rate R, so a
  4-bit decode GEMM runs at its weights' memory time, not at the padded small tile's.
  Any other GEMM runs in its weight dtype (activations quantised on the fly; the
  quantise kernel is not counted).
- MXFP4 weights (gpt-oss's experts, :attr:`TransformerConfig.mx_experts`) are not run
  fp4 × fp4: the engines' MoE kernels for them quantize the activations to MXFP8 and
  multiply fp4 weights by fp8 activations at the fp8 rate on a GPU with fp4 tensor cores
  (Blackwell: TensorRT-LLM's deployment guide for gpt-oss lists MXFP8 activations × MXFP4
  weights on B200/GB200/B300/GB300, BF16 activations on H200 [cited: nvidia.github.io/
  TensorRT-LLM deployment-guide-for-gpt-oss-on-trtllm]; vLLM's mxfp4 path runs FlashInfer's
  MXFP4 × MXFP8 MoE kernels there). So such a GEMM is predicted as an fp8 GEMM of the
  same shape with the weights' traffic at 0.5 + 1/32 B per element (the ratio above), and
  where the GPU has no fp4 tensor cores it is weight-only, as above.
- Attention with a KV-cache dtype the GPU has no peak for: the same, on the K/V bytes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from perfmodel.dtypes import DType, bytes_per_element, weight_bytes_per_element
from perfmodel.engines import (
    attention_kernel,
    default_quant,
    fused_quantize,
    gemm_kernel_for_rows,
    gemm_rows_bound,
    normalize_engine,
    trtllm_xqa_pays,
)
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.graph import GraphOp
from perfmodel.models.memo import Memo, spec_token
from perfmodel.ops import AllReduce, Attention, Gemm, Op, Rotary
from perfmodel.ops.attention import kv_bytes, o_bytes, q_bytes
from perfmodel.ops.cost import Array
from perfmodel.ops.gemm import operand_bytes
from perfmodel.ops.registry import op_class
from perfmodel.timing import RunContext, predict, spec_constants
from perfmodel.timing.core import overlap
from perfmodel.timing.kernels import gemm_efficiency
from perfmodel.timing.knobs import Knobs, knobs_for
from perfmodel.timing.prediction import Prediction, make_prediction

__all__ = ["FIELDS", "GraphTiming", "evaluate_graphs"]

Labels = np.ndarray[Any, np.dtype[np.str_]]
#: Per-instance numbers of every op, in this order in ``GraphTiming.values``.
FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes")


@dataclass(frozen=True)
class GraphTiming:
    """Timings of one graph: row i is op i of the graph, per instance (not × count).

    ``values[f]`` and ``counts`` have shape (ops, *points); ``bottleneck`` likewise.
    """

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    counts: Array
    values: dict[str, Array]
    bottleneck: Labels


def _shape_fields(cls: type) -> tuple[str, ...]:
    """Constructor arguments of an op class that are shape arrays (the op registry)."""
    return op_class(cls).shape_fields


#: Weight dtypes that are only a storage format for weights: a model GEMM with weights of
#: one of them computes in its activations' dtype (weight-only quantisation) even on a GPU
#: with tensor cores of that dtype, unless the activations are of it too. int4: AWQ and
#: GPTQ checkpoints run W4A16 (vLLM's Marlin/Machete, TensorRT-LLM's int4_awq) or W4A8;
#: no mainstream engine quantises LLM activations to int4 on the int4 MMA of Ampere/Turing.
WEIGHT_ONLY_DTYPES = frozenset({"int4"})


def _native_weights(hw: HardwareSpec, w: str, a: str) -> bool:
    """Whether a GEMM of ``w`` weights and ``a`` activations runs in ``w`` on ``hw`` (the
    activations quantised to it): the GPU multiplies ``w`` faster than ``a`` (datasheet
    peaks), and ``w`` is not a weight storage format (:data:`WEIGHT_ONLY_DTYPES`) unless
    the activations are of it too. Otherwise the weights are upcast to ``a`` in the
    kernel (weight-only quantisation)."""
    if w == a:
        return True
    if w not in hw.peaks or w in WEIGHT_ONLY_DTYPES:
        return False
    return a not in hw.peaks or hw.peaks[w].peak > hw.peaks[a].peak


def _mx_compute(hw: HardwareSpec, a: str) -> str | None:
    """The dtype an MXFP4-weight GEMM computes in on ``hw`` with ``a`` activations where
    that is not ``a`` itself: fp8 (the activations quantized to MXFP8, the MMA taking fp4
    weights beside fp8 activations at the fp8 rate) on a GPU with fp4 tensor cores whose
    fp8 peak is above ``a``'s; else None (the weights are upcast to ``a``: weight-only)."""
    if "fp4" in hw.peaks and "fp8" in hw.peaks and a in hw.peaks \
            and hw.peaks["fp8"].peak > hw.peaks[a].peak:
        return "fp8"
    return None


def _stored_weight_ratio(args: dict[str, Any], s_in: float, s_w: float,
                         s_out: float) -> Any:
    """Traffic of GEMM ``args`` with its weights stored at ``s_w`` bytes per element
    over that of its stand-in reading them at the input width ``s_in`` (A at ``s_in``, C
    and a bias at ``s_out``): the ratio of two :func:`perfmodel.ops.gemm.operand_bytes`."""
    m, n, k = (np.asarray(args[x], dtype=np.float64) for x in ("m", "n", "k"))
    b = np.asarray(args.get("batch", 1.0), dtype=np.float64)
    shared, bias = bool(args.get("shared_b")), bool(args.get("bias"))
    real = sum(operand_bytes(m, n, k, b, s_in, s_w, s_out, shared, bias))
    stand = sum(operand_bytes(m, n, k, b, s_in, s_in, s_out, shared, bias))
    return real / stand


def _substitute(g: GraphOp, hw: HardwareSpec,
                mx_weights: bool = False) -> tuple[dict[str, Any], Any, str | None]:
    """Arguments of a predictable stand-in for ``g`` on ``hw``, the ratio of real to
    stand-in memory traffic (None if unchanged) and a note. ``mx_weights``: the model's
    fp4 weights are MXFP4 (:attr:`TransformerConfig.mx_experts`), which engines run with
    8-bit activations (see the module docstring)."""
    args = g.args
    if g.kind is Gemm:
        w, a = str(args["dtype"]), str(args.get("out_dtype") or args["dtype"])
        mx = _mx_compute(hw, a) if mx_weights and w == "fp4" else None
        if mx is not None:
            ratio = _stored_weight_ratio(args, bytes_per_element(mx),
                                         weight_bytes_per_element(w), bytes_per_element(a))
            return ({**args, "dtype": mx, "quant": "none", "quantize_input": False,
                     "impl": "auto"}, ratio,
                    f"MXFP4 weights run with {mx} (MXFP8) activations at the {mx} rate "
                    "(W4A8: the MoE kernels engines run for MXFP4 checkpoints on "
                    f"{hw.arch}), read at {weight_bytes_per_element(w):.4g} B/element with "
                    "their scales")
        # int4 weights (AWQ/GPTQ-style checkpoints) are a storage format: engines compute
        # with the activations' dtype (W4A16, W4A8) even where the GPU has int4 tensor
        # cores; so is any weight dtype whose matmul is no faster than the activations'
        # (int8 on V100: dp4a on the vector units, below its fp16 tensor peak)
        if not _native_weights(hw, w, a) and a in hw.peaks \
                and bytes_per_element(w) < bytes_per_element(a):
            # the weights with their scale factors (int4: one fp16 per 128)
            s_w, s_a = weight_bytes_per_element(w), bytes_per_element(a)
            s_w_raw = bytes_per_element(w)
            what = (f"{hw.id} has no {w} matmul: {w} weights are upcast" if w not in hw.peaks
                    else f"{w} weights are a storage format (AWQ/GPTQ checkpoints): upcast"
                    if w in WEIGHT_ONLY_DTYPES
                    else f"{hw.id}'s {w} matmul is no faster than its {a} one: {w} weights "
                    "are upcast")
            return ({**args, "dtype": a}, _stored_weight_ratio(args, s_a, s_w, s_a),
                    f"{what} to {a} in the kernel (weight-only quantisation), read at "
                    f"{s_w:.4g} B/element" + (" with their scales" if s_w > s_w_raw else ""))
    if g.kind is Attention:
        a, kvd = str(args["dtype"]), str(args.get("kv_dtype") or args["dtype"])
        if kvd not in hw.peaks and a in hw.peaks:
            s_a = bytes_per_element(a)
            scale = bytes_per_element(kvd) / s_a
            hq, sq = np.asarray(args["heads"]), np.asarray(args["seq_q"])
            d = np.asarray(args["head_dim"])
            dv = np.asarray(args.get("value_dim") or args["head_dim"])
            # elements of Q and O, and of the cache (ops.attention's formulas, 1 B each)
            qo = q_bytes(1.0, hq, sq, d, 1.0) + o_bytes(1.0, hq, sq, dv, 1.0)
            kv = kv_bytes(1.0, np.asarray(args["kv_heads"]), np.asarray(args["seq_kv"]), d,
                          dv, 1.0, bool(args.get("shared_kv")))
            return ({**args, "kv_dtype": a}, (qo + kv * scale) / (qo + kv),
                    f"{hw.id} has no {kvd} peak: the {kvd} KV cache is dequantised to {a} "
                    "inside attention")
    return args, None, None


#: Rows of a mixed-input (weight-only) GEMM kernel's MMA block: Marlin (Frantar et al.,
#: "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference on Large Language Models",
#: PPoPP 2025, arXiv 2408.11743) computes a batch in 16-row blocks (the m16 of the
#: tensor-core MMA, up to 4 per pass: :data:`MIXED_INPUT_PASS_ROWS`) with the weights
#: partitioned in stripes over every SM, and measures its FP16×INT4 GEMM within 5 % of the
#: ideal 3.87× speedup over FP16 up to batch 32 (A10, 72k × 18k): the weight stream, not
#: the padded MMA, is its bound.
MIXED_INPUT_ROWS = 16.0
#: The widest batch (rows) a mixed-input kernel computes in one pass over the weights
#: (4 blocks of :data:`MIXED_INPUT_ROWS`, Marlin's); a wider one is timed as the stand-in.
MIXED_INPUT_PASS_ROWS = 64.0


def _mixed_input_compute(p: Prediction, op: Gemm, hw: HardwareSpec, k: Knobs,
                         ratio: Array) -> Array:
    """Compute time of the mixed-input kernel that runs weight-only GEMM ``op`` (its
    stand-in in the activation dtype, predicted as ``p``; an instance is weight-only where
    its traffic ratio is below 1, a GEMM of the activation dtype sharing the stand-in's
    group has ratio 1 and keeps c): min(c, 2·b·16⌈m/16⌉·n·k / R)
    for m ≤ 64 (:data:`MIXED_INPUT_ROWS`, :data:`MIXED_INPUT_PASS_ROWS`; m itself on a
    vector unit, which pads no rows; R the activation dtype's achievable rate from its
    GEMM knobs ``k``, peak × compute fraction, × the GEMM class's efficiency in the model
    constants the prediction used: bundled, with a calibrated profile's on top), else the
    stand-in's c.
    Dequantisation is taken as hidden under the weight stream, as Marlin's measurements
    show it up to batch 32."""
    c = np.asarray(p.compute_s, dtype=np.float64)
    m = np.asarray(op.m, dtype=np.float64)
    # tensor cores compute whole 16-row blocks; a vector (SIMT) kernel only the rows
    rows = MIXED_INPUT_ROWS * np.ceil(m / MIXED_INPUT_ROWS) if k.unit == "tensor" else m
    rate = k.rate * gemm_efficiency(op, spec_constants(hw), hw.arch)
    mixed = 2.0 * np.asarray(op.batch, dtype=np.float64) * rows \
        * np.asarray(op.n, dtype=np.float64) * np.asarray(op.k, dtype=np.float64) / rate
    return np.where((m <= MIXED_INPUT_PASS_ROWS) & (ratio < 1.0), np.minimum(c, mixed), c)


def _adjust(p: Prediction, ratio: Array, hw: HardwareSpec, family: str,
            op: Op | None = None) -> Prediction:
    """Scale the memory part of ``p`` by ``ratio`` (see the module docstring): the
    overlapped part is recombined with the overlap the timing of op family ``family``
    uses on ``hw`` (the hard max, or a calibrated smooth maximum of order p):
    latency − overlap(c, m) + overlap(c', m·ratio), c' the mixed-input kernel's compute
    (:func:`_mixed_input_compute`) when ``op`` is the stand-in of a weight-only GEMM, else
    c. The stages, if any, are kept."""
    c, m = np.asarray(p.compute_s), np.asarray(p.memory_s)
    m2 = m * ratio
    k = knobs_for(hw, family, cast(DType, p.dtype))
    c2 = _mixed_input_compute(p, op, hw, k, ratio) if isinstance(op, Gemm) else c
    order = k.overlap_p
    lat = np.asarray(p.latency_s) - overlap(c, m, order) + overlap(c2, m2, order)
    return make_prediction(
        op=p.op, hardware=p.hardware, dtype=p.dtype, compute_s=c2, memory_s=m2,
        overhead_s=p.overhead_s, latency_s=lat, flops=p.flops,
        bytes_=np.asarray(p.bytes) * ratio, bytes_min=np.asarray(p.bytes_min) * ratio,
        peak=hw.peak(p.dtype), bandwidth=hw.memory.bandwidth, ridge_point=p.ridge_point,
        stages=p.stages, details=p.details)


def _flat(x: Any, shape: tuple[int, ...], size: int) -> Array:
    """``x`` broadcast to ``shape`` and flattened (fast paths for the common cases)."""
    a = np.asarray(x, dtype=np.float64)
    if a.shape == shape:
        return a.reshape(-1)
    if a.size == 1:
        return np.full(size, a.item())
    return np.broadcast_to(a, shape).reshape(-1)


def _auto_phase(g: GraphOp, args: dict[str, Any]) -> dict[str, Any]:
    """An attention op's phase as ``auto`` where every row's own phase (decode where
    seq_q = 1, else prefill) is the graph's: the same predictions, and the prefill and
    decode attention of a request then share one predict call."""
    phase = args.get("phase") if g.kind is Attention else None
    if phase not in ("prefill", "decode"):
        return args
    one = np.asarray(args["seq_q"]) == 1
    if bool(np.all(one)) if phase == "decode" else not bool(np.any(one)):
        return {**args, "phase": "auto"}
    return args


#: Instances of one op group from which whole-model evaluation predicts distinct shapes only
#: (a 1,000-point decode sweep of Llama-2-7B: 1.28x faster; one generate prediction, 6
#: points: 6 % slower with it, so below this it is skipped).
_DISTINCT_MIN = 256


def _distinct(flat: dict[str, Array], ratio: Array | None, total: int
              ) -> tuple[dict[str, Array], Array | None, npt.NDArray[np.intp] | None]:
    """The distinct shapes of one op group: each column of (shape fields, traffic ratio)
    once, and the index of every instance's column (None when all are distinct). A decode
    step's GEMMs repeat across the context points of a sweep or a generation: each
    distinct shape is predicted once (one shape: the scalar fast path). Groups under
    :data:`_DISTINCT_MIN` instances are left as they are: finding the distinct columns
    (~30 µs) costs more than it saves on a few dozen shapes."""
    if total < _DISTINCT_MIN or not flat:
        return flat, ratio, None
    names = sorted(flat)
    cols = [flat[n] for n in names] + ([] if ratio is None else [ratio])
    table = np.stack(cols)
    # only the fields that vary decide; their columns sorted together (a stable lexsort:
    # the first of equal columns leads its run), a new run wherever a field changes
    varying = table[np.any(table != table[:, :1], axis=1)]
    if varying.shape[0] == 0:
        first, inverse = np.zeros(1, dtype=np.intp), np.zeros(total, dtype=np.intp)
    else:
        order = np.lexsort(varying[::-1])
        ordered = varying[:, order]
        new = np.empty(total, dtype=bool)
        new[0] = True
        np.any(ordered[:, 1:] != ordered[:, :-1], axis=0, out=new[1:])
        inverse = np.empty(total, dtype=np.intp)
        inverse[order] = np.cumsum(new) - 1
        first = order[new]
    if first.size == total:
        return flat, ratio, None
    uniq = table[:, first]
    if uniq.shape[1] == 1:  # one shape: scalar fields, so predict takes its scalar path
        out = {n: uniq[i, 0] for i, n in enumerate(names)}
    else:
        out = {n: uniq[i] for i, n in enumerate(names)}
    new_ratio = None if ratio is None else uniq[-1] if uniq.shape[1] > 1 else uniq[-1, 0]
    return out, new_ratio, inverse.reshape(-1)


#: Instances of one op group up to which whole-model evaluation predicts each distinct shape
#: on the scalar path (plain floats, one prediction per shape) instead of one vectorised
#: call: a generate prediction's groups hold 6–30 instances of a few distinct shapes, and a
#: vectorised call on so few costs about what 15 scalar ones do (its numpy calls on tiny
#: arrays). The two paths agree to 1e-12 (``tests/test_scalar_paths.py``).
_SCALAR_MAX = 64


def _column(x: Any, shape: tuple[int, ...], size: int) -> list[float]:
    """:func:`_flat` of ``x`` as plain floats (a Python number without numpy)."""
    if type(x) is float or type(x) is int:
        return [float(x)] * size
    out: list[float] = _flat(x, shape, size).tolist()
    return out


#: Scalar op predictions by value, across whole-model calls: the key is the op's class,
#: its fields, the traffic ratio, the spec's value token (:func:`spec_token`) and the run
#: context; an entry is the prediction's fields, bottleneck and op name (floats, strings). A
#: tool asking for many prompt lengths repeats every decode-step op but attention (a
#: Llama-2-7B generate prediction: 11 of its 25 scalar predictions), which a hit answers.
#: Like :data:`perfmodel.models.predict.MEMO` it assumes the bundled model constants do not
#: change within a process.
OP_MEMO: Memo[tuple[list[float], str, str]] = Memo(4096)


def _group_scalar(cls: type, static: tuple[tuple[str, Any], ...],
                  group: list[tuple[int, int, dict[str, Any], Any]],
                  graphs: list[tuple[list[GraphOp], tuple[int, ...]]], hw: HardwareSpec,
                  context: RunContext | None, out_vals: list[Array], out_labels: list[Any],
                  kinds: list[list[str]], token: int) -> None:
    """Predict a small op group shape by shape on plain floats (:data:`_SCALAR_MAX`): each
    distinct (shape fields, traffic ratio) once, written into every instance's column;
    a shape predicted before for the spec of value ``token`` comes from :data:`OP_MEMO`."""
    shape_f = _shape_fields(cls)
    done: dict[tuple[float, ...], tuple[list[float], str, str]] = {}
    name = ""
    for gi, oi, args, ratio in group:
        shape = graphs[gi][1]
        size = math.prod(shape)
        names = [k for k in args if k in shape_f]
        cols = [_column(args[k], shape, size) for k in names]
        ratios = None if ratio is None else _column(ratio, shape, size)
        values: list[list[float]] = []
        labels: list[str] = []
        for point, fields in enumerate(zip(*cols, strict=True) if cols else [()] * size):
            r = None if ratios is None else ratios[point]
            key = (*fields, math.nan if r is None else r)
            hit = done.get(key)
            if hit is None:
                memo_key = (cls, static, tuple(names), key, token, context)
                hit = OP_MEMO.get(memo_key)
                if hit is None:
                    op: Op = cls(**dict(static), **dict(zip(names, fields, strict=True)))
                    p = predict(op, hw, context=context)
                    if r is not None:
                        p = _adjust(p, np.asarray(r), hw,
                                    "gemm" if cls is Gemm else "attention", op)
                    hit = ([float(getattr(p, f)) for f in FIELDS], str(p.bottleneck), op.name)
                    OP_MEMO.put(memo_key, hit)
                done[key] = hit
            name = hit[2]
            values.append(hit[0])
            labels.append(hit[1])
        if values:
            out_vals[gi][:, oi] = np.asarray(values).T
            out_labels[gi][oi] = labels
        kinds[gi][oi] = name or op_class(cls).name


def _engine_ops(g: GraphOp, hw: HardwareSpec, engine: str, rotary: bool = True,
                sinks: bool = False,
                block_scales: bool = False) -> list[tuple[GraphOp, str | None]]:
    """``g`` as ``engine`` runs it on ``hw``, with a note (:func:`_engine_attention`,
    :func:`_with_engine`). An attention op's kernel depends on the point: points with
    another phase (seq_q = 1 or not), GQA group (query heads over KV heads per GPU, which a
    TP sweep changes once KV heads replicate) or, for TensorRT-LLM decode, side of its XQA
    dispatch bound (:func:`perfmodel.engines.trtllm_xqa_pays`) get a copy of the op counted
    only there (0 elsewhere), each with its own kernel. Points where the op does not occur
    (count 0) choose nothing and add no note. ``rotary``: the model applies RoPE (its graph
    has a rotary op), which an engine may fuse into the attention call; ``sinks``: its
    attention has sinks (gpt-oss), which some engines run on another backend;
    ``block_scales``: its fp8 weights carry block scales (:func:`_with_engine`)."""
    args = g.args
    if g.name == "mla_attention" and bool(args.get("shared_kv")):
        impl = str(args.get("impl"))
        return [(g, f"{engine}: MLA decode runs {impl}" + (
            " (the engines' MLA kernels: FlashMLA, trtllm-gen and FlashInfer's; spec-only, "
            "none measured)" if impl == "mla" else ""))]
    if g.kind is Gemm:
        return _engine_gemm(g, hw, engine, block_scales)
    if not (g.kind is Attention and str(args.get("impl", "flash")) == "flash"):
        return [_with_engine(g, hw, engine, block_scales)]
    heads = np.asarray(args["heads"], dtype=np.float64)
    kv = args.get("kv_heads")  # an array under a tp sweep: no truth value
    kv_heads = np.asarray(args["heads"] if kv is None else kv, dtype=np.float64)
    group = heads / kv_heads
    decode = np.asarray(args["seq_q"]) == 1
    count = np.asarray(g.count, dtype=np.float64)
    # TensorRT-LLM's decode dispatch: XQA only where its blocks fill the SMs
    pays = np.asarray(trtllm_xqa_pays(args.get("batch", 1.0), kv_heads, args["seq_kv"],
                                      hw.compute.units) if engine == "trtllm" else True)
    shape = np.broadcast_shapes(group.shape, decode.shape, count.shape, pays.shape)
    group, decode, count = (np.broadcast_to(x, shape) for x in (group, decode, count))
    pays = np.broadcast_to(pays, shape) | ~decode  # the bound is a decode call's
    occurs = count > 0
    keys = sorted({(bool(d), float(gr), bool(p))
                   for d, gr, p, o in zip(decode.ravel(), group.ravel(), pays.ravel(),
                                          occurs.ravel(), strict=True) if o})
    if len(keys) <= 1:
        d, gr, p = keys[0] if keys else (bool(np.all(decode)), float(np.max(group)), True)
        op, note = _engine_attention(g, hw, engine, d, gr, rotary, sinks, p)
        return [(op, note if keys else None)]
    out: list[tuple[GraphOp, str | None]] = []
    for d, gr, p in keys:
        mask = occurs & (decode == d) & (group == gr) & (pays == p)
        part = dataclasses.replace(g, count=np.where(mask, count, 0.0))
        out.append(_engine_attention(part, hw, engine, d, gr, rotary, sinks, p))
    return out


def _engine_attention(g: GraphOp, hw: HardwareSpec, engine: str, decode: bool,
                      group: float, rotary: bool = True, sinks: bool = False,
                      xqa_pays: bool = True) -> tuple[GraphOp, str]:
    """Attention op ``g`` as ``engine`` runs it on ``hw`` (:mod:`perfmodel.engines`) in
    ``decode`` or prefill at GQA ``group``: its kernel, with the KV-cache write (and, for
    TensorRT-LLM, RoPE, if the model has it: ``rotary``) in a pre-processing kernel, in fp8
    over an fp8 KV cache where the kernel computes so. Returns the op and a note."""
    args = g.args
    head_dim = float(np.max(np.asarray(args["head_dim"])))
    kvd = str(args.get("kv_dtype") or args["dtype"])
    choice = attention_kernel(engine, hw.arch, "decode" if decode else "prefill",
                              head_dim, kvd, group, sinks, xqa_pays)
    new = {**args, **choice.op_fields(str(args["dtype"]), hw.peaks),
           "rope": choice.rope and rotary}
    mla = g.name == "mla_attention"
    if mla:  # its cache write and RoPE are ops of their own in the graph (graph.py)
        new.update(kv_write=False, rope=False)
    fp8 = choice.fp8_compute and new["dtype"] == "fp8"
    return dataclasses.replace(g, args=new), (
        f"{engine}: {'decode' if decode else 'prefill'} attention runs {choice.impl} "
        + ("over MLA's decompressed heads " if mla else "")
        + ("in fp8 over the fp8 KV cache " if fp8 else "") + f"({choice.source})")


def _engine_gemm(g: GraphOp, hw: HardwareSpec, engine: str,
                 block_scales: bool) -> list[tuple[GraphOp, str | None]]:
    """GEMM ``g`` as ``engine`` runs it (:func:`_with_engine`); where the engine picks its
    kernel by the rows (:func:`perfmodel.engines.gemm_kernel_for_rows`) and the points'
    rows fall on both sides of its bound, a copy of the op per side, each counted only at
    its points (as attention ops are split by phase)."""
    m = np.asarray(g.args["m"], dtype=np.float64)
    count = np.asarray(g.count, dtype=np.float64)
    shape = np.broadcast_shapes(m.shape, count.shape)
    rows, counts = np.broadcast_to(m, shape), np.broadcast_to(count, shape)
    seen = rows[counts > 0]
    if seen.size == 0:
        return [_with_engine(g, hw, engine, block_scales)]
    low = _with_engine(g, hw, engine, block_scales, float(np.min(seen)))
    high = _with_engine(g, hw, engine, block_scales, float(np.max(seen)))
    bound = gemm_rows_bound(engine, hw.arch, str(low[0].args.get("quant")))
    if bound is None or low[0].args.get("impl") == high[0].args.get("impl"):
        return [low]
    small = rows < bound
    return [_with_engine(dataclasses.replace(g, count=np.where(mask, counts, 0.0)), hw, engine,
                         block_scales, edge)
            for mask, edge in ((small, float(np.min(seen))), (~small, float(np.max(seen))))]


def _with_engine(g: GraphOp, hw: HardwareSpec, engine: str, block_scales: bool = False,
                 rows: float = 1.0) -> tuple[GraphOp, str | None]:
    """Non-attention op ``g`` as ``engine`` runs it on ``hw`` (:mod:`perfmodel.engines`):
    quantized GEMMs with their scheme (``block`` for fp8 weights with block scales, else
    the engine's default), kernel (for calls of ``rows`` rows, where the engine picks by
    them) and activation quantization; a separate RoPE kernel the engine fuses away gets
    count 0. Returns the op and a note."""
    args = g.args
    if g.kind is Gemm:
        w = str(args["dtype"])
        quant = "block" if block_scales and w == "fp8" else default_quant(engine, w)
        act = str(args.get("out_dtype") or "bf16")
        if quant != "none" and _native_weights(hw, w, act) \
                and (w != "fp4" or hw.arch == "blackwell"):
            gemm = gemm_kernel_for_rows(engine, hw.arch, quant, rows)
            bound = gemm_rows_bound(engine, hw.arch, quant)
            by_rows = bound is not None and rows < bound
            fused = fused_quantize(engine, quant)
            new = {**args, "quant": quant, "impl": gemm.impl,
                   "quantize_input": gemm.quantize_input and not fused,
                   "out_dtype": args.get("out_dtype") or "bf16"}
            return dataclasses.replace(g, args=new), (
                f"{engine}: {w} GEMMs "
                + (f"of fewer than {bound:.0f} rows " if by_rows else "")
                + f"run {gemm.impl} with {quant} scales, activations "
                + ("quantized by the kernel before (norm, activation)" if fused
                   else "quantized in the call"))
    if g.kind is Rotary and engine == "trtllm":
        return dataclasses.replace(g, count=0.0 * np.asarray(g.count)), (
            "trtllm: RoPE runs inside the attention pre-processing kernel")
    return g, None


def evaluate_graphs(graphs: list[tuple[list[GraphOp], tuple[int, ...]]],
                    hw: HardwareSpec, engine: str = "none", sinks: bool = False,
                    block_scales: bool = False,
                    mx_weights: bool = False) -> tuple[list[GraphTiming], list[str]]:
    """Predict every op of every ``(graph, points shape)`` on ``hw``, one predict call
    per op group across all graphs. Returns one :class:`GraphTiming` per graph and the
    notes on dtype fallbacks taken.

    With an ``engine`` (``trtllm``, ``vllm``, ``sglang``) the ops are those the engine runs
    (:func:`_engine_ops`), predicted as CUDA-graph replays with the engine's bookkeeping;
    ``none`` is engine-neutral (the architecture's native kernels, one kernel per op).
    ``sinks``: the model's attention has sinks (``TransformerConfig.attention_sinks``),
    which changes some engines' attention backend; ``block_scales``: its fp8 weights carry
    block scales (``TransformerConfig.block_scales``), which an engine's GEMMs take;
    ``mx_weights``: its fp4 weights are MXFP4 (``TransformerConfig.mx_experts``), run with
    8-bit activations (:func:`_substitute`) under every engine."""
    engine = normalize_engine(engine)
    context = RunContext(launch="graph", engine=engine) if engine != "none" else None
    notes: list[str] = []
    members: dict[tuple[Any, ...], list[tuple[int, int, dict[str, Any], Any]]] = {}
    if engine != "none":
        engined = []
        for graph, shape in graphs:
            ops = []
            rotary = any(g.kind is Rotary for g in graph)
            for g in graph:
                if mx_weights and g.kind is Gemm and g.args["dtype"] == "fp4":
                    ops.append(g)  # its kernel: _substitute's W4A8 or weight-only GEMM
                    continue
                for new, note in _engine_ops(g, hw, engine, rotary, sinks, block_scales):
                    if note and note not in notes:
                        notes.append(note)
                    ops.append(new)
            engined.append((ops, shape))
        graphs = engined
    for gi, (graph, _) in enumerate(graphs):
        for oi, g in enumerate(graph):
            args, ratio, note = _substitute(g, hw, mx_weights)
            if note and note not in notes:
                notes.append(note)
            args = _auto_phase(g, args)
            shape_f = _shape_fields(g.kind)
            key = (g.kind, tuple(sorted((k, v) for k, v in args.items() if k not in shape_f)))
            members.setdefault(key, []).append((gi, oi, args, ratio))
    # every field of a graph in one array: (field, op, point)
    out_vals = [np.empty((len(FIELDS), len(graph), math.prod(shape))) for graph, shape in graphs]
    out_labels = [np.empty((len(graph), math.prod(shape)), dtype="<U8")
                  for graph, shape in graphs]
    kinds: list[list[str]] = [[""] * len(graph) for graph, _ in graphs]
    token = spec_token(hw)
    for (cls, static), group in members.items():
        shape_f = _shape_fields(cls)
        sizes = [math.prod(graphs[gi][1]) for gi, _, _, _ in group]
        if 0 < sum(sizes) <= _SCALAR_MAX and cls is not AllReduce:
            _group_scalar(cls, static, group, graphs, hw, context, out_vals, out_labels, kinds,
                          token)
            continue
        flat: dict[str, Array] = {}
        for name in sorted({k for _, _, args, _ in group for k in args if k in shape_f}):
            flat[name] = np.concatenate([
                _flat(args[name], graphs[gi][1], size)
                for (gi, _, args, _), size in zip(group, sizes, strict=True)])
        total = sum(sizes)
        ratios: Array | None = None
        if any(r is not None for _, _, _, r in group):
            ratios = np.concatenate([_flat(1.0 if r is None else r, graphs[gi][1], size)
                                    for (gi, _, _, r), size in zip(group, sizes, strict=True)])
        flat, ratios, inverse = _distinct(flat, ratios, total)
        count = total if inverse is None else int(inverse.max()) + 1
        op: Op = cls(**dict(static), **flat)
        with np.errstate(divide="ignore", invalid="ignore"):  # free ops (1-GPU all-reduce)
            p = predict(op, hw, context=context)
        if ratios is not None:
            p = _adjust(p, ratios, hw, "gemm" if cls is Gemm else "attention", op)
        vals = np.stack([_flat(getattr(p, f), (count,), count) for f in FIELDS])
        labels = np.asarray(p.bottleneck).reshape(-1)
        if labels.size != count:
            labels = np.broadcast_to(labels, (count,))
        if inverse is not None:  # back to one value per instance
            vals = vals[:, inverse]
            labels = labels[inverse]
        start = 0
        for (gi, oi, _, _), size in zip(group, sizes, strict=True):
            sl = slice(start, start + size)
            out_vals[gi][:, oi] = vals[:, sl]
            out_labels[gi][oi] = labels[sl]
            kinds[gi][oi] = op.name
            start += size
    result = []
    for gi, (graph, shape) in enumerate(graphs):
        full = (len(graph), *shape)
        size = math.prod(shape)
        counts = np.stack([_flat(g.count, shape, size) for g in graph]).reshape(full) \
            if graph else np.zeros(full)
        result.append(GraphTiming(
            names=tuple(g.name for g in graph), kinds=tuple(kinds[gi]), counts=counts,
            values={f: out_vals[gi][i].reshape(full) for i, f in enumerate(FIELDS)},
            bottleneck=out_labels[gi].reshape(full)))
    return result, notes
