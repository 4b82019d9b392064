"""What an inference engine's call costs beyond its main kernels.

An engine's attention or quantized-GEMM call runs small kernels of its own around the
main ones (metadata and sequence-length bookkeeping, scale buffers, memsets), and an eager
call from Python cannot finish before the engine's wrapper has dispatched it. No
datasheet states these; they are model constants (:mod:`perfmodel.timing.constants`)
with a prior and, where public measurements exist, a value fitted to them.

Both GPU-side times (``call``, ``row``) are SM time at the reference clock
(:data:`perfmodel.timing.constants.REFERENCE_CLOCK_HZ`), scaled to a device's clock where
they are used; the host time is the host's.

- ``call.<engine>.<kind>_s``: fixed time of the engine's bookkeeping per call of ``kind``
  (``gemm-<scheme>``, ``attention-prefill``, ``attention-decode``, and the ``-fp8`` variants
  of the attention kinds), s (prior 0), refined per
  kernel family (``call.<engine>.<kind>.<impl>_s``) and per architecture
  (``….<impl>_s.<arch>``); the quantized GEMM kinds of an engine refine one class-level
  value, ``call.<engine>.gemm-quantized_s`` (the mean of its measured schemes), which a
  scheme nobody measured with that engine inherits: the bookkeeping around a quantized
  GEMM (scale buffers, amax and quantize launches, memsets) is the engine's, whatever
  the number format; an fp8 attention kind defaults to the engine's bf16 kind of the
  same phase (its call runs that bookkeeping and quantizes the query besides), without
  being averaged into it;
- ``row.<engine>.<kind>_s``: SM time per row (token) of the engine's own per-row kernels
  (activation quantization, KV-cache write), refined likewise: rows·this/SMs, s (prior 0);
- ``host.<engine>.eager_s``: host time of one eager call through the engine's Python
  wrapper, s (prior 50 µs).
"""

from __future__ import annotations

from collections.abc import Callable

from perfmodel.ops.gemm import QUANT_SCHEMES
from perfmodel.timing.constants import ARCH_FAMILIES, Constants, Param, arch_name, register

__all__ = ["CALL_KINDS", "ENGINE_NAMES", "QUANTIZED_KIND", "call_fixed_s", "call_name",
           "call_row_s", "eager_host_s", "row_name"]

#: Engines with call constants.
ENGINE_NAMES: tuple[str, ...] = ("trtllm", "vllm", "sglang")
#: Kinds of engine calls. An fp8 attention call is a kind of its own: the engine first
#: quantizes the query (and computes its scales) in kernels a bf16 call does not run (on
#: AIConfigurator's B200 rows SGLang's fastest fp8 prefill call takes 14.5 µs, its bf16 one
#: 8.4 µs), so the two do not share one fixed cost; until an engine's fp8 call is
#: measured it costs the engine's bf16 call (vLLM's fp8 calls are measured on B200 only:
#: with B200 left out of the fit they had inherited no bookkeeping at all).
CALL_KINDS: tuple[str, ...] = (*(f"gemm-{q}" for q in QUANT_SCHEMES), "attention-prefill",
                               "attention-decode", "attention-prefill-fp8",
                               "attention-decode-fp8")


def call_name(engine: str, kind: str) -> str:
    """Constant name of the fixed bookkeeping time of ``engine`` calls of ``kind``."""
    return f"call.{engine}.{kind}_s"


def row_name(engine: str, kind: str) -> str:
    """Constant name of the per-row time of ``engine`` calls of ``kind``."""
    return f"row.{engine}.{kind}_s"


#: Class-level kind that each quantized GEMM kind (``gemm-<scheme>``, scheme ≠ none) of
#: an engine refines: what a scheme the engine was never measured with inherits.
QUANTIZED_KIND = "gemm-quantized"


def _kind_parent(e: str, kind: str, name: Callable[[str, str], str]) -> str | None:
    """The class-level constant a quantized GEMM kind's constant refines; for an fp8
    attention kind, the engine's bf16 kind of the same phase (else None)."""
    quantized = kind.startswith("gemm-") and kind != "gemm-none"
    if quantized:
        return name(e, QUANTIZED_KIND)
    if kind.endswith("-fp8"):
        return name(e, kind.removesuffix("-fp8"))
    return None


register(*(
    Param(call_name(e, QUANTIZED_KIND), 0.0, 0.0, 40e-6, "s at 1.5 GHz",
          f"{e}: bookkeeping time of its quantized GEMM calls, any scheme (the mean of "
          "its measured schemes). Prior: 0.", "linear")
    for e in ENGINE_NAMES
))
register(*(
    Param(call_name(e, kind), 0.0, 0.0, 40e-6, "s at 1.5 GHz",
          f"{e}: time of the small kernels its {kind} call runs around the main kernels "
          "(metadata, scales, memsets). Prior: 0 (main kernels only); a quantized GEMM "
          "scheme: as the engine's other quantized schemes.", "linear",
          parent=_kind_parent(e, kind, call_name), pooled=not kind.endswith("-fp8"))
    for e in ENGINE_NAMES for kind in CALL_KINDS
))
#: Kernel families an engine call may run (GEMM and attention ``impl`` values).
_IMPLS = ("auto", "cublas", "cutlass", "deepgemm", "cutedsl", "triton", "flash2", "flash3",
          "flash3-sm8x", "flash4", "flash4-sm90", "fmha-v2", "fmha-v2-sm90", "xqa", "mmha",
          "trtllm-gen", "flashinfer", "flashinfer-sm100")
register(*(
    Param(call_name(e, f"{kind}.{impl}"), 0.0, 0.0, 40e-6, "s at 1.5 GHz",
          f"{call_name(e, kind)} when the call runs {impl} kernels (each backend of an "
          "engine does its own bookkeeping).", "linear", parent=call_name(e, kind))
    for e in ENGINE_NAMES for kind in CALL_KINDS for impl in _IMPLS
))
register(*(
    Param(arch_name(call_name(e, f"{kind}.{impl}"), a), 0.0, 0.0, 40e-6, "s at 1.5 GHz",
          f"{call_name(e, f'{kind}.{impl}')} on {a} GPUs (kernels and their launch costs "
          "differ by architecture).", "linear", parent=call_name(e, f"{kind}.{impl}"))
    for e in ENGINE_NAMES for kind in CALL_KINDS for impl in _IMPLS for a in ARCH_FAMILIES
))
register(*(
    Param(f"host.{e}.eager_s", 50e-6, 1e-6, 1e-3, "s",
          f"{e}: host time of one eager call through the engine's Python wrapper. Prior: "
          "50 µs, typical of a Python-level op dispatch with argument checks.")
    for e in ENGINE_NAMES
))


register(*(
    Param(row_name(e, QUANTIZED_KIND), 0.0, 0.0, 1e-5, "s at 1.5 GHz",
          f"{e}: SM time per row of its quantized GEMM calls' own per-row kernels, any "
          "scheme (the mean of its measured schemes). Prior: 0.", "linear")
    for e in ENGINE_NAMES
))
register(*(
    Param(row_name(e, kind), 0.0, 0.0, 1e-5, "s at 1.5 GHz",
          f"{e}: SM time its {kind} call spends per row (token) in its own per-row kernels "
          "(activation quantization, KV-cache write): rows·this/SMs. Prior: 0; a quantized "
          "GEMM scheme: as the engine's other quantized schemes.", "linear",
          parent=_kind_parent(e, kind, row_name), pooled=not kind.endswith("-fp8"))
    for e in ENGINE_NAMES for kind in CALL_KINDS
))
register(*(
    Param(row_name(e, f"{kind}.{impl}"), 0.0, 0.0, 1e-5, "s at 1.5 GHz",
          f"{row_name(e, kind)} when the call runs {impl} kernels.", "linear",
          parent=row_name(e, kind))
    for e in ENGINE_NAMES for kind in CALL_KINDS for impl in _IMPLS
))
register(*(
    Param(arch_name(row_name(e, f"{kind}.{impl}"), a), 0.0, 0.0, 1e-5, "s at 1.5 GHz",
          f"{row_name(e, f'{kind}.{impl}')} on {a} GPUs.", "linear",
          parent=row_name(e, f"{kind}.{impl}"))
    for e in ENGINE_NAMES for kind in CALL_KINDS for impl in _IMPLS for a in ARCH_FAMILIES
))


def call_row_s(engine: str, kind: str, consts: Constants, arch: str = "",
               impl: str = "") -> float:
    """SM time per row of an ``engine`` call's per-row kernels (most specific value of
    row.<engine>.<kind>.<impl>.<arch>); 0 without an engine."""
    if engine not in ENGINE_NAMES or kind not in CALL_KINDS:
        return 0.0
    if impl not in _IMPLS:
        return consts[row_name(engine, kind)]
    return consts[arch_name(row_name(engine, f"{kind}.{impl}"), arch)]


def call_fixed_s(engine: str, kind: str, consts: Constants, arch: str = "",
                 impl: str = "") -> float:
    """The fixed bookkeeping time of an ``engine`` call of ``kind`` running ``impl``
    kernels on architecture ``arch``: the most specific fitted value of
    call.<engine>.<kind>.<impl>.<arch> → .<impl> → call.<engine>.<kind>; 0 without an
    engine."""
    if engine not in ENGINE_NAMES or kind not in CALL_KINDS:
        return 0.0
    if impl not in _IMPLS:
        return consts[call_name(engine, kind)]
    return consts[arch_name(call_name(engine, f"{kind}.{impl}"), arch)]


register(*(
    Param(f"host.{e}.eager_s.{impl}", 50e-6, 1e-6, 1e-3, "s",
          f"host.{e}.eager_s for a call of its {impl} kernel wrapper.",
          parent=f"host.{e}.eager_s")
    for e in ENGINE_NAMES for impl in _IMPLS
))
register(*(
    Param(arch_name(f"host.{e}.eager_s.{impl}", a), 50e-6, 1e-6, 1e-3, "s",
          f"host.{e}.eager_s.{impl} on the machine hosting an {a} GPU (the host CPU, not "
          "the GPU, sets it: a property of the measured machine).",
          parent=f"host.{e}.eager_s.{impl}")
    for e in ENGINE_NAMES for impl in _IMPLS for a in ARCH_FAMILIES
))


def eager_host_s(engine: str, consts: Constants, arch: str = "", impl: str = "") -> float:
    """Host dispatch time of one eager ``engine`` call, s (0 without an engine): the most
    specific value of host.<engine>.eager_s.<impl>.<arch>."""
    if engine not in ENGINE_NAMES:
        return 0.0
    if impl not in _IMPLS:
        return consts[f"host.{engine}.eager_s"]
    return consts[arch_name(f"host.{engine}.eager_s.{impl}", arch)]
