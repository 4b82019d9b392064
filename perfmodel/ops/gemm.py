"""GEMM: C[b, m, n] = A[b, m, k] · B[b, k, n] (a linear layer shares B across the batch).

Quantized GEMMs (fp8, fp4 inputs) carry their scale factors and, when the call quantizes
its bf16 activations on the fly (as inference engines do), that quantize kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._xp import VECTOR, Ops
from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields
from perfmodel.ops.elementwise import Elementwise

__all__ = ["GEMM_IMPLS", "QUANT_SCHEMES", "SCALE_BLOCK", "Gemm", "operand_bytes", "tile_count",
           "tiled_traffic"]

#: Quantization schemes of the inputs: ``none``; fp8 with one scale per tensor, per channel
#: (weight rows; activations per token), or per block (activations 1×128, weights 128×128,
#: DeepSeek-style); ``nvfp4``: e2m1 values with one fp8 scale per 16 elements (plus a global
#: scale).
QUANT_SCHEMES: tuple[str, ...] = ("none", "per-tensor", "per-channel", "block", "nvfp4")
#: Block edge of the ``block`` scheme, elements.
SCALE_BLOCK = 128.0
#: Elements per scale of ``nvfp4``.
_NVFP4_GROUP = 16.0
#: Scale bytes written per quantized activation element, by scheme.
_SCALE_PER_ELEMENT = {"none": 0.0, "per-tensor": 0.0, "per-channel": 0.0,
                      "block": 4.0 / SCALE_BLOCK, "nvfp4": 1.0 / _NVFP4_GROUP}
#: GEMM kernel families (``auto``: the vendor library, cuBLAS / hipBLASLt).
GEMM_IMPLS: tuple[str, ...] = ("auto", "cublas", "cutlass", "deepgemm", "cutedsl", "triton",
                               "flashinfer")
_IMPL_SET = frozenset(GEMM_IMPLS)


def _scheme(quant: str, dtype: DType) -> str:
    key = str(quant).strip().lower()
    if key not in QUANT_SCHEMES:
        raise PerfmodelError("quant", f"unknown quantization scheme {quant!r}",
                             f"use one of {', '.join(QUANT_SCHEMES)}")
    if key == "nvfp4" and dtype != "fp4":
        raise PerfmodelError("quant", "nvfp4 scales fp4 values", "pass dtype='fp4'")
    if key in ("per-tensor", "per-channel", "block") and dtype not in ("fp8", "int8"):
        raise PerfmodelError("quant", f"{key} scales apply to fp8/int8 inputs, not {dtype}",
                             "pass dtype='fp8', or quant='none'")
    return key


def operand_bytes(m: Any, n: Any, k: Any, b: Any, s_a: float, s_b: float, s_out: float,
                  shared_b: bool, bias: bool, quant: str = "none",
                  ops: Ops = VECTOR) -> tuple[Any, Any, Any]:
    """(A, B, C) bytes of C[b,m,n] = A[b,m,k]·B[b_B,k,n], each read (written) once:
    A = s_a·b·m·k (+ its scales), B = s_b·b_B·k·n (+ its scales; b_B = 1 if ``shared_b``),
    C = s_out·b·m·n (+ s_out·n for a bias). Scales by ``quant``: per-channel 4 bytes per
    row of A and column of B; block 4 bytes per 1×128 block of A and 128×128 block of B;
    nvfp4 one byte per 16 elements. One formula for the scalar (``ops=SCALAR``) and array
    paths; s_a ≠ s_b for weight-only quantization (weights stored narrower than the
    activations)."""
    b_mats = 1.0 if shared_b else b
    a = s_a * b * m * k
    w = s_b * b_mats * k * n
    if quant == "per-channel":
        a = a + 4.0 * b * m
        w = w + 4.0 * b_mats * n
    elif quant == "block":
        a = a + 4.0 * b * m * ops.ceil(k / SCALE_BLOCK)
        w = w + 4.0 * b_mats * ops.ceil(n / SCALE_BLOCK) * ops.ceil(k / SCALE_BLOCK)
    elif quant == "nvfp4":
        a = a + b * m * k / _NVFP4_GROUP
        w = w + b_mats * k * n / _NVFP4_GROUP
    c = s_out * b * m * n
    if bias:
        c = c + s_out * n
    return a, w, c


def tile_count(m: Any, n: Any, b: Any, tile_m: Any, tile_n: Any, split_k: Any = 1.0,
               ops: Ops = VECTOR) -> Any:
    """Output tiles (CTAs) of a tiled GEMM: (b·split_k)·⌈m/t_m⌉·⌈n/t_n⌉."""
    return (b * split_k) * ops.ceil(m / tile_m) * ops.ceil(n / tile_n)


def tiled_traffic(a: Any, w: Any, c: Any, fits: Any, m: Any, n: Any, tile_m: Any,
                  tile_n: Any, concurrent_tiles: Any, ops: Ops = VECTOR) -> Any:
    """Device-memory traffic of a tiled kernel with L2 reuse inside a wave, bytes.

    Tiles of one wave (``concurrent_tiles`` of them, rasterised as a near-square block of
    g_m × g_n tiles, g_m = round(√concurrent)) share A and B panels through L2. A is then
    re-read once per column band of g_n·t_n, B once per row band of g_m·t_m:
    traffic = A·⌈⌈n/t_n⌉/g_n⌉ + B·⌈⌈m/t_m⌉/g_m⌉ + C, with (A, B, C) from
    :func:`operand_bytes`. If one batch entry's A and B fit in the L2 together (``fits``),
    each is read once. Never below A + B + C.
    """
    tiles_m = ops.ceil(m / tile_m)
    tiles_n = ops.ceil(n / tile_n)
    conc = ops.maximum(concurrent_tiles, 1.0)
    g_m = ops.clip(ops.round(ops.sqrt(conc)), 1.0, tiles_m)
    g_n = ops.clip(ops.floor(conc / g_m), 1.0, tiles_n)
    a_reads = ops.where(fits, 1.0, ops.ceil(tiles_n / g_n))
    b_reads = ops.where(fits, 1.0, ops.ceil(tiles_m / g_m))
    return a * a_reads + w * b_reads + c


@dataclass(frozen=True, init=False)
class Gemm:
    """A (batched) matrix multiply.

    FLOPs = 2·b·m·n·k (multiply and add counted separately; never MACs).
    Minimum traffic = s_in·(b·m·k + k·n·(1 if shared_b else b)) + s_out·b·m·n
    (+ s_out·n for a bias vector, + the scale factors of a quantized scheme:
    :meth:`scale_bytes`). Shape fields accept numpy arrays and broadcast.

    Parameters
    ----------
    m, n, k:
        Rows of A/C, columns of B/C, reduction length.
    batch:
        Independent products (``torch.bmm`` batch, or heads).
    dtype:
        Input dtype; ``out_dtype`` defaults to it.
    shared_b:
        B is one matrix shared by every batch entry (a linear layer's weight).
    bias:
        An epilogue bias vector of length n is read.
    quant:
        Quantization scheme of the inputs (:data:`QUANT_SCHEMES`); ``none`` for plain
        dtypes.
    quantize_input:
        The call first quantizes A from ``out_dtype`` (the activations' dtype) to ``dtype``
        with its scales: a separate streaming kernel (:meth:`quantize_stage`).
    impl:
        GEMM kernel family (:data:`GEMM_IMPLS`); ``auto`` is the vendor library.
    """

    m: Array
    n: Array
    k: Array
    batch: Array
    dtype: DType
    out_dtype: DType
    shared_b: bool
    bias: bool
    quant: str
    quantize_input: bool
    impl: str

    def __init__(self, m: Any, n: Any, k: Any, batch: Any = 1, dtype: str = "bf16",
                 out_dtype: str | None = None, shared_b: bool = False, bias: bool = False,
                 quant: str = "none", quantize_input: bool = False,
                 impl: str = "auto") -> None:
        m_, n_, k_, b_ = as_size(m, "m"), as_size(n, "n"), as_size(k, "k"), \
            as_size(batch, "batch")
        dt = normalize_dtype(dtype, "dtype")
        out = normalize_dtype(out_dtype, "out_dtype") if out_dtype else dt
        scheme = "none" if type(quant) is str and quant == "none" else _scheme(quant, dt)
        if quantize_input and scheme == "none":
            raise PerfmodelError("quantize_input", "there is nothing to quantize with "
                                 "quant='none'", "pass a quantization scheme, e.g. "
                                 "quant='per-tensor' with dtype='fp8'")
        key = impl if type(impl) is str and impl in _IMPL_SET else str(impl).strip().lower()
        if key not in GEMM_IMPLS:
            raise PerfmodelError("impl", f"unknown GEMM kernel family {impl!r}",
                                 f"use one of {', '.join(GEMM_IMPLS)}")
        if m_.ndim or n_.ndim or k_.ndim or b_.ndim:  # one shape broadcasts trivially
            broadcast_fields(m=m_, n=n_, k=k_, batch=b_)
        # a frozen dataclass filled in one update rather than a setattr per field
        self.__dict__.update(m=m_, n=n_, k=k_, batch=b_, dtype=dt, out_dtype=out,
                             shared_b=bool(shared_b), bias=bool(bias), quant=scheme,
                             quantize_input=bool(quantize_input), impl=key)

    @property
    def name(self) -> str:
        return "gemm"

    @property
    def shape(self) -> tuple[int, ...]:
        if not (self.m.ndim or self.n.ndim or self.k.ndim or self.batch.ndim):
            return ()
        return broadcast_fields(m=self.m, n=self.n, k=self.k, batch=self.batch)

    def flops(self) -> Array:
        """2·b·m·n·k, FLOPs."""
        return 2.0 * self.batch * self.m * self.n * self.k

    # ------------------------------------------------------------------ traffic
    def operand_bytes(self, m: Any, n: Any, k: Any, b: Any,
                      ops: Ops = VECTOR) -> tuple[Any, Any, Any]:
        """(A, B, C) bytes of this GEMM's dtypes and options for the given shape values
        (:func:`operand_bytes`)."""
        s_in = bytes_per_element(self.dtype)
        return operand_bytes(m, n, k, b, s_in, s_in, bytes_per_element(self.out_dtype),
                             self.shared_b, self.bias, self.quant, ops)

    def scale_bytes(self) -> Array:
        """Bytes of the scale factors read with A and B, by scheme: per-channel 4·(m + n);
        block 4·(m·⌈k/128⌉ + ⌈n/128⌉·⌈k/128⌉); nvfp4 (m·k + n·k)/16 (one fp8 per 16
        elements); per-tensor and none 0 (a scalar)."""
        a, w, _ = self.operand_bytes(self.m, self.n, self.k, self.batch)
        s_in = bytes_per_element(self.dtype)
        b_mats = 1.0 if self.shared_b else self.batch
        plain = s_in * (self.batch * self.m * self.k + b_mats * self.k * self.n)
        return np.asarray(a + w - plain, dtype=np.float64)

    def bytes_min(self) -> Array:
        """Every operand (and scale) read once and C written once, bytes."""
        a, w, c = self.operand_bytes(self.m, self.n, self.k, self.batch)
        return np.asarray(a + w + c, dtype=np.float64)

    def tiles(self, tile_m: float | Array, tile_n: float | Array,
              split_k: float | Array = 1.0) -> Array:
        """Output tiles (CTAs): b·split_k·⌈m/t_m⌉·⌈n/t_n⌉ (:func:`tile_count`)."""
        return np.asarray(tile_count(self.m, self.n, self.batch, tile_m, tile_n, split_k),
                          dtype=np.float64)

    def tiled_traffic(self, m: Any, n: Any, k: Any, b: Any, tile_m: Any, tile_n: Any,
                      concurrent_tiles: Any, cache_bytes: float,
                      ops: Ops = VECTOR) -> Any:
        """Device-memory traffic of a tiled kernel with L2 reuse inside a wave, bytes
        (:func:`tiled_traffic`)."""
        a, w, c = self.operand_bytes(m, n, k, b, ops)
        b_mats = 1.0 if self.shared_b else b
        fits = (a / b + w / b_mats) <= cache_bytes
        return tiled_traffic(a, w, c, fits, m, n, tile_m, tile_n, concurrent_tiles, ops)

    def bytes_tiled(self, tile_m: float | Array, tile_n: float | Array,
                    concurrent_tiles: float | Array, cache_bytes: float) -> Array:
        """:meth:`tiled_traffic` for this op's own shape, bytes (arrays)."""
        return np.asarray(self.tiled_traffic(self.m, self.n, self.k, self.batch, tile_m,
                                             tile_n, concurrent_tiles, cache_bytes),
                          dtype=np.float64)

    # ------------------------------------------------------------------ stages
    def quantize_stage(self) -> Elementwise:
        """The activation-quantize kernel of a ``quantize_input`` call: reads A in
        ``out_dtype``, writes it in ``dtype`` with its scales (per element: 4/128 bytes for
        ``block``, 1/16 for ``nvfp4``; per-token and per-tensor scales are negligible);
        about 3 vector operations per element (scale, round, clamp) and, for dynamic
        scales, an amax reduction folded into the same pass."""
        numel = np.asarray(self.batch * self.m * self.k, dtype=np.float64)
        s_q = bytes_per_element(self.dtype) + _SCALE_PER_ELEMENT[self.quant]
        return Elementwise(numel, reads=1, writes=s_q / bytes_per_element(self.out_dtype),
                           flops_per_element=3, dtype=self.out_dtype, kind="quantize")

    def cost(self) -> Cost:
        """Hardware-free cost with the minimum traffic and 128×128 tiles as work units
        (the quantize kernel, if any, included)."""
        bmin = self.bytes_min()
        main = Cost(
            tensor_flops=self.flops(), bytes_min=bmin, bytes_hbm=bmin,
            launches=np.ones(()), work_units=self.tiles(128.0, 128.0),
        )
        return main + self.quantize_stage().cost() if self.quantize_input else main
