"""Data types: canonical names, aliases and bytes per element."""

from __future__ import annotations

from typing import Literal, get_args

from perfmodel._errors import PerfmodelError

__all__ = ["DTYPES", "WEIGHT_SCALE_BYTES", "DType", "bytes_per_element", "normalize_dtype",
           "weight_bytes_per_element"]

DType = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"]
DTYPES: tuple[DType, ...] = get_args(DType)

#: Bytes per element in memory. tf32 is stored as fp32 (4 bytes); fp4/int4 pack two per byte.
_BYTES: dict[DType, float] = {
    "fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5,
}

_ALIASES: dict[str, DType] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "nvfp4": "fp4", "mxfp4": "fp4", "float4": "fp4",
}


def normalize_dtype(name: object, field: str = "dtype") -> DType:
    """Return the canonical dtype for ``name`` (case-insensitive; aliases such as
    ``"bfloat16"`` or ``"half"`` accepted). Raises :class:`PerfmodelError` otherwise."""
    if type(name) is str and name in _BYTES:  # a canonical name (the common case)
        return name
    if not isinstance(name, str):
        raise PerfmodelError(field, f"expected a dtype name, got {name!r}",
                             f"use one of {', '.join(DTYPES)}")
    key = name.strip().lower()
    for dt in DTYPES:
        if key == dt:
            return dt
    if key in _ALIASES:
        return _ALIASES[key]
    raise PerfmodelError(field, f"unknown dtype {name!r}", f"use one of {', '.join(DTYPES)}")


def bytes_per_element(dtype: str) -> float:
    """Bytes one element of ``dtype`` occupies in memory (fp4/int4: 0.5)."""
    size = _BYTES.get(dtype) if type(dtype) is str else None  # type: ignore[call-overload]
    return size if size is not None else _BYTES[normalize_dtype(dtype)]


#: Scale-factor bytes stored with each weight element of a model checkpoint, by weight
#: dtype: int4 checkpoints (GPTQ, AWQ) keep one fp16 scale per group of 128 weights (their
#: default group size), 2/128 B per weight, which is what makes Marlin's ideal speedup
#: over fp16 16/4.125 = 3.88x rather than 4x (Frantar et al., PPoPP 2025). Zero points of
#: asymmetric (AWQ) checkpoints, 4 bits per group, are left out. fp4 checkpoints are taken
#: as MXFP4 (OCP Microscaling: one e8m0 scale per 32 elements, 1/32 B; gpt-oss's experts);
#: NVFP4 ones keep an fp8 scale per 16 (1/16 B, 1/32 B more per weight), which a quantized
#: GEMM's ``nvfp4`` scheme counts in its own traffic (:mod:`perfmodel.ops.gemm`).
WEIGHT_SCALE_BYTES: dict[DType, float] = {"int4": 2.0 / 128.0, "fp4": 1.0 / 32.0}


def weight_bytes_per_element(dtype: str) -> float:
    """Bytes one stored weight of ``dtype`` takes with its scale factors:
    :func:`bytes_per_element` + :data:`WEIGHT_SCALE_BYTES` (int4: 0.5 + 2/128; fp4:
    0.5 + 1/32)."""
    dt = normalize_dtype(dtype)
    return _BYTES[dt] + WEIGHT_SCALE_BYTES.get(dt, 0.0)
