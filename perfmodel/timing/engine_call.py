"""One op as an inference engine calls it on a GPU.

:func:`engine_call` turns an engine-neutral :class:`~perfmodel.ops.gemm.Gemm` or
:class:`~perfmodel.ops.attention.Attention` into the op ``engine`` dispatches on ``hw``
(the choices and their sources are :mod:`perfmodel.engines`'):

- a GEMM with fp8 or fp4 inputs takes the engine's quantization scheme where it names none
  (:func:`perfmodel.engines.default_quant`: per-channel in SGLang, per-tensor elsewhere,
  nvfp4 for fp4), the engine's kernel family for it (by the rows where the engine picks by
  them: :func:`perfmodel.engines.gemm_kernel_for_rows`; a call whose rows straddle such a
  bound is an error) and, where the call quantizes its bf16
  activations first, that kernel (``quantize_input``); its output is bf16 unless the op
  names another output dtype than its inputs' (the engines' scaled GEMMs write bf16); a
  16-bit GEMM takes the engine's kernel for it (the vendor library);
- an attention takes the engine's kernel family for the call's phase (decode where every
  sequence has one query token, unless ``phase`` says otherwise), head dim, KV-cache dtype
  and query heads per KV head (and, for TensorRT-LLM decode, whether its XQA dispatch
  expects a gain: :func:`perfmodel.engines.trtllm_xqa_pays`; a call whose shapes straddle
  that bound is an error, as for GEMMs); the KV-cache write (and TensorRT-LLM's RoPE) in
  a kernel of their own; the engine's split-KV rule where the op leaves it ``auto``;
  FlashInfer's CUDA-core decode threshold; and fp8 compute over an fp8 KV cache where the
  engine's kernel computes so and the GPU has an fp8 peak; an attention over a ``shared_kv``
  (multi-head latent) cache runs the engines' MLA decode family, ``mla``.

Predict the result with ``RunContext(engine=engine, launch="graph")`` (how the engines
replay their decode steps) to add the engine's own bookkeeping per call. An engine on a GPU
it does not run on is an error (:func:`perfmodel.engines.engine_refusal`), as is a
quantization scheme or kernel with no build there.
"""

from __future__ import annotations

import dataclasses
from typing import Any, overload

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.engines import (
    attention_kernel,
    default_quant,
    gemm_kernel_for_rows,
    normalize_engine,
    trtllm_xqa_pays,
)
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.attention import Attention
from perfmodel.ops.gemm import Gemm

__all__ = ["engine_call"]


@overload
def engine_call(op: Gemm, engine: str, hw: HardwareSpec | str, *,
                sinks: bool = False) -> Gemm: ...


@overload
def engine_call(op: Attention, engine: str, hw: HardwareSpec | str, *,
                sinks: bool = False) -> Attention: ...


def engine_call(op: Gemm | Attention, engine: str, hw: HardwareSpec | str, *,
                sinks: bool = False) -> Gemm | Attention:
    """``op`` (a :class:`Gemm` or :class:`Attention`) as ``engine`` (``trtllm``, ``vllm``,
    ``sglang``) calls it on ``hw`` (a spec or a bundled id / YAML path); see the module doc.
    ``sinks``: the model's attention has sinks (gpt-oss), which changes some engines'
    backend (:func:`perfmodel.engines.attention_kernel`). ``engine="none"`` returns ``op``
    unchanged."""
    eng = normalize_engine(engine)
    if eng == "none":
        return op
    spec = load_hardware(hw)
    changes: dict[str, Any]
    if isinstance(op, Gemm):
        quant = op.quant if op.quant != "none" else default_quant(eng, op.dtype)
        rows = np.asarray(op.m, dtype=np.float64)
        small, large = (gemm_kernel_for_rows(eng, spec.arch, quant, float(x))
                        for x in (np.min(rows), np.max(rows)))
        if small.impl != large.impl:
            raise PerfmodelError("m", f"{eng} runs {small.impl} for the fewest rows of this "
                                 f"call and {large.impl} for the most ({small.source})",
                                 "split the call at that bound")
        choice = small
        changes = {"impl": choice.impl}
        if quant != "none":  # a scaled GEMM; a 16-bit one takes the vendor library
            changes.update(quant=quant, quantize_input=op.quantize_input or choice.quantize_input,
                           out_dtype="bf16" if op.out_dtype == op.dtype else op.out_dtype)
        return dataclasses.replace(op, **changes)
    if isinstance(op, Attention):
        if op.shared_kv:
            # an MLA latent cache: the engines' MLA decode kernels (the ``mla`` family),
            # with the latent's write where the op asks for it
            return dataclasses.replace(op, impl="mla" if op.impl == "flash" else op.impl)
        phase = op.phase if op.phase != "auto" else (
            "decode" if bool(np.all(np.asarray(op.seq_q) == 1)) else "prefill")
        group = float(np.max(np.asarray(op.heads) / np.asarray(op.kv_heads)))
        head_dim = float(np.max(np.asarray(op.head_dim)))
        pays = np.asarray(trtllm_xqa_pays(op.batch, op.kv_heads, op.seq_kv, spec.compute.units)
                          if eng == "trtllm" and phase == "decode" else True)
        att = attention_kernel(eng, spec.arch, phase, head_dim, op.kv_dtype, group, sinks,
                               xqa_pays=bool(np.all(pays)))
        if not np.all(pays) and np.any(pays):
            other = attention_kernel(eng, spec.arch, phase, head_dim, op.kv_dtype, group,
                                     sinks, xqa_pays=True)
            if other.impl != att.impl:
                raise PerfmodelError("batch", f"{eng} runs {att.impl} for the shapes of "
                                     f"this call with the fewest XQA blocks and "
                                     f"{other.impl} for the others ({att.source})",
                                     "split the call where KV heads x sequences x "
                                     "max(1, keys // 128) x 4 reaches the GPU's SMs")
        return dataclasses.replace(op, **att.op_fields(
            op.dtype, spec.peaks, kv_write=op.kv_write, rope=op.rope, num_splits=op.num_splits))
    raise PerfmodelError("op", f"{type(op).__name__} has no engine call (GEMMs and attention "
                         "have)", "pass a Gemm or an Attention")
