"""Map a profiled PyTorch operator call (its ``aten::`` name and recorded input shapes) to
the perfmodel op it runs, and read what a kernel's name says (op family, dtype).

===============================================  =========================================
operator                                         perfmodel op (measurement schema ``op``)
===============================================  =========================================
aten::mm, aten::_scaled_mm                       gemm m=A[0], k=A[1], n=B[1]
aten::addmm                                      gemm with bias (input, A, B)
aten::bmm / aten::baddbmm                        gemm batch=A[0], m=A[1], k=A[2], n=B[2]
                                                 (baddbmm with bias, as addmm)
aten::matmul                                     gemm; leading dims of A fold into m when
                                                 B is 2-D, broadcast into batch otherwise
aten::linear                                     gemm m = rows of x, k = x[-1], n = W[0]
aten::scaled_dot_product_attention and its       attention: q [B, H_q, S_q, D],
  backends (_scaled_dot_product_flash/            k [B, H_kv, S_kv, D]; is_causal from the
  efficient/cudnn/math..., _flash_attention_     recorded arguments; the kernel path from
  forward with [B, S, H, D] layout)              the backend op or kernel names. Refused:
                                                 a mask/bias tensor, and torch's top-left
                                                 is_causal with S_q != S_kv
aten::layer_norm, aten::native_layer_norm        layernorm m = rows, n = normalized size
aten::rms_norm, aten::_fused_rms_norm            rmsnorm m = rows, n = normalized size
aten::softmax, aten::_softmax, _safe_softmax     softmax m = rows, n = size of ``dim``
aten::silu, aten::gelu (and in-place forms)      silu / gelu m = rows, n = last dim
aten::add, aten::add_ (two tensors, same size)   add m = elements
aten::copy_ (same dtype)                         copy m = elements
===============================================  =========================================

:func:`map_op` returns a :class:`MappedOp`, a reason string when the operator is one of
these but this call cannot be mapped (a broadcast add, a converting copy, a 1-D matmul...),
or None when perfmodel models no such operator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MappedOp", "dtype_from_kernel", "dtype_of_type", "kernel_family", "known", "map_op",
]

Dims = Sequence[Sequence[int]]


@dataclass(frozen=True)
class MappedOp:
    """A perfmodel op with its shape, in the measurement schema's terms.

    ``op`` is the schema's op name (gemm, attention, copy, add, rmsnorm, layernorm, silu,
    gelu, softmax); sizes not used by the op are None. ``impl`` is written to the ``impl``
    column (for attention it selects the kernel path, see
    :func:`perfmodel.validation.kernel_path`).
    """

    op: str
    dtype: str
    m: int | None = None
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    seq_q: int | None = None
    seq_kv: int | None = None
    head_dim: int | None = None
    causal: bool = False
    bias: bool = False
    impl: str = ""
    note: str = ""

    def key(self) -> tuple[Any, ...]:
        """What makes two calls the same measurement (op, dtype, path and shape)."""
        return (self.op, self.dtype, self.impl, self.bias, self.causal, self.m, self.n,
                self.k, self.batch, self.heads, self.kv_heads, self.seq_q, self.seq_kv,
                self.head_dim)

    def columns(self) -> dict[str, object]:
        """The measurement-schema columns of this op (op, impl, dtype, shape)."""
        out: dict[str, object] = {"op": self.op, "impl": self.impl, "dtype": self.dtype}
        if self.op == "gemm":
            out.update(batch=self.batch or 1, m=self.m, n=self.n, k=self.k)
        elif self.op == "attention":
            out.update(batch=self.batch, heads=self.heads, kv_heads=self.kv_heads,
                       seq_q=self.seq_q, seq_kv=self.seq_kv, head_dim=self.head_dim,
                       causal=self.causal, direction="fwd")
        else:
            out.update(m=self.m, n=self.n)
        return out

    def describe(self) -> str:
        """``gemm m=64 n=32 k=128 fp32``: the op and its shape, short."""
        if self.op == "gemm":
            b = f" batch={self.batch}" if (self.batch or 1) > 1 else ""
            bias = " +bias" if self.bias else ""
            shape = f"m={self.m} n={self.n} k={self.k}{b}{bias}"
        elif self.op == "attention":
            gqa = f"/{self.kv_heads}" if self.kv_heads != self.heads else ""
            shape = (f"b={self.batch} h={self.heads}{gqa} sq={self.seq_q} skv={self.seq_kv} "
                     f"d={self.head_dim}{' causal' if self.causal else ''}")
        elif self.op in ("copy", "add"):
            shape = f"elements={self.m}"
        else:
            shape = f"rows={self.m} width={self.n}"
        return f"{self.op} {shape} {self.dtype}"


# ----------------------------------------------------------------------------- dtypes
_TYPES = {
    "float": "fp32", "double": "fp64", "c10::half": "fp16", "half": "fp16",
    "c10::bfloat16": "bf16", "bfloat16": "bf16", "signed char": "int8",
}


def dtype_of_type(text: str) -> str | None:
    """perfmodel dtype of a recorded ``Input type`` (``float``, ``c10::BFloat16``,
    ``c10::Float8_e4m3fn``...), or None for integer, bool and non-tensor arguments."""
    key = text.strip().lower()
    if key in _TYPES:
        return _TYPES[key]
    if "float8" in key:
        return "fp8"
    return None


_KERNEL_DTYPES = (
    (re.compile(r"e4m3|e5m2|fp8|float8", re.I), "fp8"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    (re.compile(r"tf32", re.I), "tf32"),
    (re.compile(r"(?<![a-z])(?:f16|fp16|h884|h1688|h16816|hgemm)|half", re.I), "fp16"),
    (re.compile(r"sgemm|(?<![a-z])(?:f32|fp32)(?![a-z])|<float\b|\bfloat\b", re.I), "fp32"),
)


#: Kernel families whose names write ``f16`` for either 16-bit float: cuDNN's generated
#: SDPA kernels (``cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_...``) were
#: named so for bf16 inputs on an H200 (torch 2.11, cuDNN 9.19, this project's GPU check).
_F16_MEANS_16_BIT = re.compile(r"cudnn_generated", re.I)


def dtype_from_kernel(name: str) -> str | None:
    """The dtype a kernel name states (cuBLAS/CUTLASS tags such as ``bf16``, ``f16``,
    ``sgemm``, template arguments such as ``cutlass::bfloat16_t`` or ``float``), or None,
    also when the name's ``f16`` may mean bf16 as well (cuDNN's generated kernels)."""
    for pattern, dtype in _KERNEL_DTYPES:
        if pattern.search(name):
            if dtype == "fp16" and _F16_MEANS_16_BIT.search(name):
                return None
            return dtype
    return None


_FAMILIES = (
    (re.compile(r"flash|fmha|attention|attn|sdpa", re.I), "attention"),
    (re.compile(r"gemm|gemv|cublas|cutlass|xmma|wgmma|nvjet|matmul|splitk", re.I), "gemm"),
    (re.compile(r"layer_?norm|rms_?norm", re.I), "norm"),
    (re.compile(r"softmax", re.I), "softmax"),
    (re.compile(r"silu|gelu|swiglu|act_and_mul", re.I), "activation"),
    (re.compile(r"memcpy|copy", re.I), "copy"),
    (re.compile(r"functor_add|add_kernel", re.I), "add"),
)


def kernel_family(name: str) -> str | None:
    """The op family a kernel name suggests (attention, gemm, norm, softmax, activation,
    copy, add), or None. Names alone carry no shapes: this only labels and cross-checks."""
    for pattern, family in _FAMILIES:
        if pattern.search(name):
            return family
    return None


# ----------------------------------------------------------------------------- helpers
class _SkipError(Exception):
    """This call of a known operator cannot be mapped; the message says why."""


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _tensor(dims: Dims, i: int, rank: int | tuple[int, ...], what: str) -> list[int]:
    if i >= len(dims) or not dims[i]:
        raise _SkipError(f"{what} has no recorded shape")
    shape = [int(x) for x in dims[i]]
    ranks = (rank,) if isinstance(rank, int) else rank
    if ranks and len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise _SkipError(f"{what} is {len(shape)}-D {shape}, expected {want}-D")
    if any(x <= 0 for x in shape):
        raise _SkipError(f"{what} {shape} is empty")
    return shape


def _concrete(concrete: Sequence[str], i: int) -> str:
    return concrete[i].strip() if i < len(concrete) and isinstance(concrete[i], str) else ""


def _int_list(text: str) -> list[int] | None:
    match = re.fullmatch(r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]", text)
    if not match:
        return None
    return [int(x) for x in match.group(1).split(",")] if match.group(1) else []


def _rows_width(x: list[int], width: int) -> tuple[int, int]:
    numel = _numel(x)
    if width <= 0 or numel % width:
        raise _SkipError(f"normalized size {width} does not divide {x}")
    return numel // width, width


# ----------------------------------------------------------------------------- gemm
def _gemm(name: str, dims: Dims, concrete: Sequence[str]) -> dict[str, Any]:
    op = name.removeprefix("aten::")
    if op in ("mm", "_scaled_mm"):
        a, b = _tensor(dims, 0, 2, "A"), _tensor(dims, 1, 2, "B")
        batch, m, k, n = 1, a[0], a[1], b[1]
        kb, bias = b[0], False
    elif op == "addmm":
        a, b = _tensor(dims, 1, 2, "A"), _tensor(dims, 2, 2, "B")
        batch, m, k, n, kb, bias = 1, a[0], a[1], b[1], b[0], True
    elif op in ("bmm", "baddbmm"):
        off = 1 if op == "baddbmm" else 0
        a, b = _tensor(dims, off, 3, "A"), _tensor(dims, off + 1, 3, "B")
        if a[0] != b[0]:
            raise _SkipError(f"batch sizes differ: {a} x {b}")
        # baddbmm adds its input (beta·input + A·B), as addmm does
        batch, m, k, n, kb, bias = a[0], a[1], a[2], b[2], b[1], op == "baddbmm"
    elif op == "linear":
        x, w = _tensor(dims, 0, (), "input"), _tensor(dims, 1, 2, "weight")
        bias = len(dims) > 2 and bool(dims[2])
        batch, m, k, n, kb = 1, _numel(x[:-1]), x[-1], w[0], w[1]
    else:  # matmul
        a, b = _tensor(dims, 0, (), "A"), _tensor(dims, 1, (), "B")
        if len(a) < 2 or len(b) < 2:
            raise _SkipError(f"matrix-vector product {a} x {b}: perfmodel's gemm needs 2-D or "
                        "higher operands (the mv/dot it dispatches to is listed instead)")
        bias = False
        if len(b) == 2:
            batch, m, k, n, kb = 1, _numel(a[:-1]), a[-1], b[1], b[0]
        else:
            lead_a, lead_b = a[:-2], b[:-2]
            width = max(len(lead_a), len(lead_b))
            lead_a = [1] * (width - len(lead_a)) + lead_a
            lead_b = [1] * (width - len(lead_b)) + lead_b
            if any(x != y and 1 not in (x, y) for x, y in zip(lead_a, lead_b, strict=True)):
                raise _SkipError(f"batch dims do not broadcast: {a} x {b}")
            batch = _numel([max(x, y) for x, y in zip(lead_a, lead_b, strict=True)])
            m, k, n, kb = a[-2], a[-1], b[-1], b[-2]
    if k != kb:
        raise _SkipError(f"inner dims differ ({k} vs {kb})")
    return {"op": "gemm", "m": m, "n": n, "k": k, "batch": batch, "bias": bias}


# ----------------------------------------------------------------------------- attention
#: operator -> (index of is_causal among its arguments, layout of q/k/v, index of its mask
#: or bias tensor (None: it takes none), what is_causal means when S_q != S_kv). torch's
#: ``is_causal`` is a top-left mask (query i sees keys j <= i; the documentation of
#: ``scaled_dot_product_attention`` and ``torch.nn.attention.bias``), kept by the backends
#: sdpa dispatches to (the CPU flash, mem-efficient: custom_mask_type 1, cuDNN, math). The
#: CUDA flash ops run FlashAttention-2, whose causal mask is bottom-right (torch sends them no
#: causal call with S_q != S_kv; ``causal_lower_right`` calls them directly).
#: ``_efficient_attention_forward`` says which in its custom_mask_type: 1 top-left,
#: 2 bottom-right.
_ATTENTION: dict[str, tuple[int, str, int | None, str]] = {
    "aten::scaled_dot_product_attention": (5, "bhsd", 3, "top-left"),
    "aten::_scaled_dot_product_flash_attention": (4, "bhsd", None, "bottom-right"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (4, "bhsd", 5, "top-left"),
    "aten::_scaled_dot_product_efficient_attention": (6, "bhsd", 3, "top-left"),
    "aten::_scaled_dot_product_cudnn_attention": (6, "bhsd", 3, "top-left"),
    "aten::_scaled_dot_product_attention_math": (5, "bhsd", 3, "top-left"),
    "aten::_scaled_dot_product_fused_attention_overrideable": (5, "bhsd", 3, "top-left"),
    "aten::_flash_attention_forward": (8, "bshd", None, "bottom-right"),
    "aten::_efficient_attention_forward": (9, "bshd", 3, "mask type"),
}

#: backend operator or kernel-name pattern -> impl text (read by validation.kernel_path)
_BACKENDS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "sdpa flash (cpu)"),
    ("_scaled_dot_product_flash_attention", "sdpa flash2 (FlashAttention-2)"),
    ("_flash_attention_forward", "sdpa flash2 (FlashAttention-2)"),
    ("_scaled_dot_product_cudnn_attention", "sdpa cudnn"),
    ("_scaled_dot_product_efficient_attention", "sdpa mem-efficient"),
    ("_efficient_attention_forward", "sdpa mem-efficient"),
    ("_scaled_dot_product_attention_math", "sdpa math"),
)
_KERNEL_BACKENDS = (
    (re.compile(r"cudnn", re.I), "sdpa cudnn"),
    (re.compile(r"flash_fwd|flash::", re.I), "sdpa flash2 (FlashAttention-2)"),
    (re.compile(r"fmha_cutlass|AttentionKernel|efficient", re.I), "sdpa mem-efficient"),
)


def _attention_impl(name: str, hints: Sequence[str]) -> str:
    names = [name, *hints]
    for marker, impl in _BACKENDS:
        if any(n.endswith(marker) for n in names):
            return impl
    for pattern, impl in _KERNEL_BACKENDS:
        if any(pattern.search(n) for n in hints):
            return impl
    return "sdpa"


def _attention(name: str, dims: Dims, types: Sequence[str], concrete: Sequence[str],
               hints: Sequence[str]) -> dict[str, Any]:
    """Attention fields of one call. Refuses (:class:`_SkipError`) a call with a mask or
    bias tensor (perfmodel's attention has no arbitrary mask), and a top-left causal call
    with S_q != S_kv (perfmodel's causal is bottom-right, aligned to the end of the keys;
    the two are the same mask only when S_q == S_kv)."""
    causal_at, layout, mask_at, alignment = _ATTENTION[name]
    q, k, v = (_tensor(dims, i, (3, 4), w) for i, w in enumerate(("query", "key", "value")))
    if layout == "bshd":
        q, k, v = ([t[0], t[2], t[1], t[3]] if len(t) == 4 else t for t in (q, k, v))
    q4, k4 = ([1, *t] if len(t) == 3 else t for t in (q, k))
    if q4[0] != k4[0] or q4[3] != k4[3] or k4[2] != v[-2]:
        raise _SkipError(f"query {q}, key {k} and value {v} do not agree")
    if mask_at is not None and mask_at < len(dims) and dims[mask_at]:
        kind = types[mask_at] if mask_at < len(types) and types[mask_at] else "tensor"
        raise _SkipError(f"an explicit attention mask/bias {list(dims[mask_at])} ({kind}): "
                         "perfmodel's attention models no mask but causal, so the work "
                         "this mask leaves is not known")
    flag = _concrete(concrete, causal_at).lower()
    if alignment == "mask type":  # _efficient_attention_forward's custom_mask_type
        causal = flag in ("1", "2")
        alignment = "top-left" if flag == "1" else "bottom-right"
    else:
        causal = flag in ("true", "1")
    if causal and alignment == "top-left" and q4[2] != k4[2]:
        raise _SkipError(f"is_causal with seq_q {q4[2]} != seq_kv {k4[2]} is torch's top-left "
                         "causal mask (query i sees keys j <= i); perfmodel's causal is "
                         "bottom-right (aligned to the end of the keys): other work, which it "
                         "cannot express")
    note = f"value_dim={v[-1]}" if v[-1] != q4[3] else ""
    return {"op": "attention", "batch": q4[0], "heads": q4[1], "kv_heads": k4[1],
            "seq_q": q4[2], "seq_kv": k4[2], "head_dim": q4[3], "causal": causal,
            "impl": _attention_impl(name, hints), "note": note}


# ----------------------------------------------------------------------------- streaming
def _normalized(dims: Dims, concrete: Sequence[str], what: str) -> dict[str, Any]:
    """Rows and width of a norm: the width is its recorded normalized_shape; without one (an
    Nsight export records no non-tensor arguments) the last dim, noted as assumed."""
    x = _tensor(dims, 0, (), "input")
    shape = _int_list(_concrete(concrete, 1))
    width = _numel(shape) if shape else x[-1]
    m, n = _rows_width(x, width)
    return {"op": what, "m": m, "n": n,
            "note": "" if shape else "width=assumed-last-dim"}


def _softmax(dims: Dims, concrete: Sequence[str]) -> dict[str, Any]:
    """Rows and width of a softmax over its recorded ``dim``; without one (an Nsight export
    records no non-tensor arguments) the last dim, noted as assumed."""
    x = _tensor(dims, 0, (), "input")
    text = _concrete(concrete, 1)
    recorded = re.fullmatch(r"-?\d+", text) is not None
    dim = int(text) if recorded else -1
    if not -len(x) <= dim < len(x):
        raise _SkipError(f"dim {dim} out of range for {x}")
    m, n = _rows_width(x, x[dim])
    return {"op": "softmax", "m": m, "n": n, "note": "" if recorded else "dim=assumed-last"}


def _activation(dims: Dims, what: str) -> dict[str, Any]:
    x = _tensor(dims, 0, (), "input")
    m, n = _rows_width(x, x[-1])
    return {"op": what, "m": m, "n": n}


def _add(dims: Dims) -> dict[str, Any]:
    a = _tensor(dims, 0, (), "self")
    if len(dims) < 2 or not dims[1]:
        raise _SkipError("adds a scalar: perfmodel's add reads two tensors")
    b = _tensor(dims, 1, (), "other")
    if _numel(a) != _numel(b):
        raise _SkipError(f"broadcast add {a} + {b}: perfmodel's add reads two tensors of one size")
    return {"op": "add", "m": _numel(a)}


def _copy(dims: Dims, types: Sequence[str]) -> dict[str, Any]:
    dst, src = _tensor(dims, 0, (), "self"), _tensor(dims, 1, (), "src")
    if len(types) >= 2 and types[0] != types[1]:
        raise _SkipError(f"converting copy ({types[1]} -> {types[0]}): perfmodel's copy moves "
                    "one dtype")
    if _numel(dst) != _numel(src):
        raise _SkipError(f"broadcast copy {src} -> {dst}")
    return {"op": "copy", "m": _numel(src)}


_GEMMS = {f"aten::{n}" for n in ("mm", "_scaled_mm", "addmm", "bmm", "baddbmm", "linear",
                                 "matmul")}
_STREAMS = {
    "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
    "aten::rms_norm": "rmsnorm", "aten::_fused_rms_norm": "rmsnorm",
    "aten::softmax": "softmax", "aten::_softmax": "softmax", "aten::_safe_softmax": "softmax",
    "aten::silu": "silu", "aten::silu_": "silu", "aten::gelu": "gelu", "aten::gelu_": "gelu",
    "aten::add": "add", "aten::add_": "add", "aten::copy_": "copy",
}


def known(name: str) -> bool:
    """Whether ``name`` is an operator :func:`map_op` can map."""
    return name in _GEMMS or name in _ATTENTION or name in _STREAMS


def map_op(name: str, dims: Dims, types: Sequence[str] = (), concrete: Sequence[str] = (),
           hints: Sequence[str] = (), dtype: str | None = None) -> MappedOp | str | None:
    """Map one operator call to a perfmodel op.

    ``dims``/``types``/``concrete`` are the call's recorded ``Input Dims``, ``Input type``
    and ``Concrete Inputs``; ``hints`` names nested operators and kernels (they pick the
    attention kernel path); ``dtype`` overrides the dtype read from ``types`` (an Nsight
    export records no types). Returns the op, a reason string when this call of a known
    operator cannot be mapped, or None for an operator perfmodel does not model.
    """
    if not known(name):
        return None
    try:
        if name in _GEMMS:
            fields = _gemm(name, dims, concrete)
        elif name in _ATTENTION:
            fields = _attention(name, dims, types, concrete, hints)
        else:
            what = _STREAMS[name]
            if what in ("layernorm", "rmsnorm"):
                fields = _normalized(dims, concrete, what)
            elif what == "softmax":
                fields = _softmax(dims, concrete)
            elif what == "add":
                fields = _add(dims)
            elif what == "copy":
                fields = _copy(dims, types)
            else:
                fields = _activation(dims, what)
    except _SkipError as why:
        return f"{name}: {why}"
    if dtype is None:
        index = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
        text = types[index] if index < len(types) else ""
        dtype = dtype_of_type(text)
        if dtype is None:
            return (f"{name}: input type {text!r} is not a floating-point dtype perfmodel "
                    "models" if text else f"{name}: no recorded input type")
    return MappedOp(dtype=dtype, **fields)
