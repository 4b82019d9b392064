"""Small memory-bound ops: norms, activations, residual add, rotary, softmax, embedding.

Each is a stream over its tensors plus one launch. Counts per element are stated in each
docstring; ``tokens`` (rows) and widths accept numpy arrays and broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._xp import VECTOR, Ops
from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields

__all__ = ["Activation", "Elementwise", "Embedding", "Norm", "Rotary", "Softmax", "StreamTerms",
           "stream_ctas", "stream_terms"]

#: Elements handled by one CTA of a streaming kernel (for the work-unit count).
_ELEMS_PER_CTA = 4096.0


class StreamTerms(NamedTuple):
    """What a streaming kernel does, as plain floats (one shape) or arrays (many)."""

    vector_flops: Any
    sfu_ops: Any
    bytes: Any
    """Device-memory traffic: every input read once, every output written once."""
    work_units: Any
    """CTAs as they share bandwidth: elements / 4096, at least 1. The kernel's time is a
    full CTA's 4096 elements at the per-CTA bandwidth, so a last, partial CTA adds only its
    share (with ⌈elements / 4096⌉ one element more would halve a one-CTA kernel's time)."""
    cta_bytes: Any
    """Bytes one CTA moves itself: its elements' share of the traffic, and all it reads of
    the data every CTA shares (a norm's weights for the columns it covers)."""


def stream_terms(numel: Any, read_elems: Any, write_elems: Any, s: float, vector_flops: Any,
                 sfu_ops: Any, extra_bytes: Any = 0.0, ops: Ops = VECTOR,
                 shared_per_cta: Any = None) -> StreamTerms:
    """bytes = (read + written elements)·s + extra bytes; one CTA per 4096 elements, as a
    bandwidth share (:attr:`StreamTerms.work_units`). A CTA moves its elements' share of the
    element traffic and of the extra bytes, or, where every CTA reads the extra bytes it
    needs itself (``shared_per_cta``: those bytes), that instead of a share."""
    ctas = stream_ctas(numel, ops)
    elems = (read_elems + write_elems) * s
    own = extra_bytes / ctas if shared_per_cta is None else shared_per_cta
    return StreamTerms(vector_flops, sfu_ops, elems + extra_bytes, ctas, elems / ctas + own)


def stream_ctas(numel: Any, ops: Ops = VECTOR) -> Any:
    """CTAs of a streaming kernel of ``numel`` elements as they share bandwidth:
    max(numel / 4096, 1) (:attr:`StreamTerms.work_units`)."""
    return ops.maximum(numel / _ELEMS_PER_CTA, 1.0)


def _stream_cost(t: StreamTerms) -> Cost:
    return Cost(
        vector_flops=np.asarray(t.vector_flops, dtype=np.float64),
        sfu_ops=np.asarray(t.sfu_ops, dtype=np.float64),
        bytes_min=np.asarray(t.bytes, dtype=np.float64),
        bytes_hbm=np.asarray(t.bytes, dtype=np.float64),
        launches=np.ones(()),
        work_units=np.asarray(t.work_units, dtype=np.float64),
    )


@dataclass(frozen=True, init=False)
class Elementwise:
    """A generic elementwise kernel over ``numel`` elements.

    Traffic = (reads + writes)·numel·s bytes; ``flops_per_element`` on vector lanes and
    ``sfu_per_element`` special-function operations (exp, tanh, rsqrt).
    Example: a residual add is ``Elementwise(numel, reads=2, writes=1, flops_per_element=1)``.
    """

    numel: Array
    reads: float | Array
    writes: float | Array
    flops_per_element: float
    sfu_per_element: float
    dtype: DType
    kind: str

    def __init__(self, numel: Any, reads: float | Array = 1, writes: float | Array = 1,
                 flops_per_element: float = 1, sfu_per_element: float = 0,
                 dtype: str = "bf16", kind: str = "elementwise") -> None:
        set_ = object.__setattr__
        set_(self, "numel", as_size(numel, "numel"))
        for name, value in (("reads", reads), ("writes", writes),
                            ("flops_per_element", flops_per_element),
                            ("sfu_per_element", sfu_per_element)):
            arr = np.asarray(value, dtype=np.float64)
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise PerfmodelError(name, f"must be a finite number ≥ 0, got {value!r}",
                                     "pass a per-element count")
        # reads/writes may be arrays (per-element byte ratios that vary with the shape)
        set_(self, "reads", float(reads) if np.ndim(reads) == 0 else np.asarray(reads, float))
        set_(self, "writes", float(writes) if np.ndim(writes) == 0
             else np.asarray(writes, float))
        set_(self, "flops_per_element", float(flops_per_element))
        set_(self, "sfu_per_element", float(sfu_per_element))
        set_(self, "dtype", normalize_dtype(dtype))
        set_(self, "kind", kind)

    @property
    def name(self) -> str:
        return self.kind

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.numel.shape)

    def terms(self, numel: Any, reads: Any, writes: Any, ops: Ops = VECTOR) -> StreamTerms:
        """(reads + writes)·numel·s bytes; per element ``flops_per_element`` vector FLOPs
        and ``sfu_per_element`` special-function operations."""
        n = numel
        return stream_terms(n, reads * n, writes * n, bytes_per_element(self.dtype),
                            self.flops_per_element * n, self.sfu_per_element * n, ops=ops)

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.numel, self.reads, self.writes))


@dataclass(frozen=True, init=False)
class Norm:
    """RMSNorm or LayerNorm over ``tokens`` rows of width ``hidden``.

    Reads x and the weight (LayerNorm: and bias), writes y:
    bytes = s·(2·T·H + H·p) with p = 1 (RMS) or 2 (Layer). FLOPs per element: 4 (RMS: square,
    add, scale, weight) or 7 (Layer: mean and variance too); one rsqrt per row. Each CTA
    (4096 elements) reads the weights of the columns it covers itself, s·p·min(H, 4096, T·H)
    bytes: more rows never spread them thinner (they made a 16-token norm faster than a
    1-token one).
    """

    tokens: Array
    hidden: Array
    kind: Literal["rms", "layer"]
    dtype: DType

    def __init__(self, tokens: Any, hidden: Any, kind: str = "rms", dtype: str = "bf16") -> None:
        if kind not in ("rms", "layer"):
            raise PerfmodelError("kind", f"unknown norm {kind!r}", "use 'rms' or 'layer'")
        set_ = object.__setattr__
        set_(self, "tokens", as_size(tokens, "tokens"))
        set_(self, "hidden", as_size(hidden, "hidden"))
        set_(self, "kind", kind)
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(tokens=self.tokens, hidden=self.hidden)

    @property
    def name(self) -> str:
        return f"{self.kind}norm"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(tokens=self.tokens, hidden=self.hidden)

    def terms(self, tokens: Any, hidden: Any, ops: Ops = VECTOR) -> StreamTerms:
        """The formula of the class doc for these sizes (floats or arrays)."""
        numel = tokens * hidden
        params = 1.0 if self.kind == "rms" else 2.0
        per = 4.0 if self.kind == "rms" else 7.0
        s = bytes_per_element(self.dtype)
        return stream_terms(numel, numel, numel, s, per * numel, tokens,
                            extra_bytes=params * hidden * s, ops=ops,
                            shared_per_cta=params * s * ops.minimum(
                                ops.minimum(hidden, _ELEMS_PER_CTA), numel))

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.tokens, self.hidden))


@dataclass(frozen=True, init=False)
class Activation:
    """Activation over ``tokens`` × ``width``: ``silu_mul`` (SwiGLU: silu(gate)·up),
    ``gelu_mul`` (GeGLU), ``gelu``, ``silu`` or ``relu``.

    Gated forms read two inputs (2·T·W) and write one (T·W); plain forms read one.
    FLOPs per output element: silu 4 (+1 for the gate multiply), gelu (tanh form) 8 (+1),
    relu 1; one exp/tanh per element on the special-function unit (relu: none).
    """

    tokens: Array
    width: Array
    kind: Literal["silu_mul", "gelu_mul", "gelu", "silu", "relu"]
    dtype: DType

    def __init__(self, tokens: Any, width: Any, kind: str = "silu_mul",
                 dtype: str = "bf16") -> None:
        if kind not in ("silu_mul", "gelu_mul", "gelu", "silu", "relu"):
            raise PerfmodelError("kind", f"unknown activation {kind!r}",
                                 "use silu_mul, gelu_mul, gelu, silu or relu")
        set_ = object.__setattr__
        set_(self, "tokens", as_size(tokens, "tokens"))
        set_(self, "width", as_size(width, "width"))
        set_(self, "kind", kind)
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(tokens=self.tokens, width=self.width)

    @property
    def name(self) -> str:
        return self.kind

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(tokens=self.tokens, width=self.width)

    def terms(self, tokens: Any, width: Any, ops: Ops = VECTOR) -> StreamTerms:
        """The formula of the class doc for these sizes (floats or arrays)."""
        numel = tokens * width
        gated = self.kind.endswith("_mul")
        base = {"silu": 4.0, "gelu": 8.0, "relu": 1.0}[self.kind.removesuffix("_mul")]
        flops = (base + (1.0 if gated else 0.0)) * numel
        sfu = 0.0 * numel if self.kind == "relu" else numel
        reads = (2.0 if gated else 1.0) * numel
        return stream_terms(numel, reads, numel, bytes_per_element(self.dtype), flops, sfu,
                            ops=ops)

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.tokens, self.width))


@dataclass(frozen=True, init=False)
class Rotary:
    """Rotary position embedding applied to Q and K in place.

    Reads and writes T·(H_q + H_kv)·D elements, reads cos and sin tables (2·T·D/2 elements);
    3 FLOPs per element (two multiplies, one add).
    """

    tokens: Array
    heads: Array
    kv_heads: Array
    head_dim: Array
    dtype: DType

    def __init__(self, tokens: Any, heads: Any, kv_heads: Any, head_dim: Any,
                 dtype: str = "bf16") -> None:
        set_ = object.__setattr__
        set_(self, "tokens", as_size(tokens, "tokens"))
        set_(self, "heads", as_size(heads, "heads"))
        set_(self, "kv_heads", as_size(kv_heads, "kv_heads"))
        set_(self, "head_dim", as_size(head_dim, "head_dim"))
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(tokens=self.tokens, heads=self.heads, kv_heads=self.kv_heads,
                         head_dim=self.head_dim)

    @property
    def name(self) -> str:
        return "rotary"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(tokens=self.tokens, heads=self.heads, kv_heads=self.kv_heads,
                                head_dim=self.head_dim)

    def terms(self, tokens: Any, heads: Any, kv_heads: Any, head_dim: Any,
              ops: Ops = VECTOR) -> StreamTerms:
        """The formula of the class doc for these sizes (floats or arrays)."""
        numel = tokens * (heads + kv_heads) * head_dim
        s = bytes_per_element(self.dtype)
        table = tokens * head_dim * s
        return stream_terms(numel, numel, numel, s, 3.0 * numel, 0.0 * numel,
                            extra_bytes=table, ops=ops)

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.tokens, self.heads, self.kv_heads, self.head_dim))


@dataclass(frozen=True, init=False)
class Softmax:
    """Row softmax over ``rows`` × ``cols``: read once, write once (one fused kernel).

    Per element: one exp (special-function unit), 4 FLOPs (max, subtract, sum, divide).
    """

    rows: Array
    cols: Array
    dtype: DType

    def __init__(self, rows: Any, cols: Any, dtype: str = "bf16") -> None:
        set_ = object.__setattr__
        set_(self, "rows", as_size(rows, "rows"))
        set_(self, "cols", as_size(cols, "cols"))
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(rows=self.rows, cols=self.cols)

    @property
    def name(self) -> str:
        return "softmax"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(rows=self.rows, cols=self.cols)

    def terms(self, rows: Any, cols: Any, ops: Ops = VECTOR) -> StreamTerms:
        """The formula of the class doc for these sizes (floats or arrays)."""
        numel = rows * cols
        return stream_terms(numel, numel, numel, bytes_per_element(self.dtype), 4.0 * numel,
                            numel, ops=ops)

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.rows, self.cols))


@dataclass(frozen=True, init=False)
class Embedding:
    """Embedding gather: ``tokens`` rows of width ``hidden`` copied from a ``vocab`` table.

    Reads T·H·s of the table plus 8·T bytes of int64 ids, writes T·H·s; no FLOPs.
    """

    tokens: Array
    hidden: Array
    vocab: Array
    dtype: DType

    def __init__(self, tokens: Any, hidden: Any, vocab: Any = 32000, dtype: str = "bf16") -> None:
        set_ = object.__setattr__
        set_(self, "tokens", as_size(tokens, "tokens"))
        set_(self, "hidden", as_size(hidden, "hidden"))
        set_(self, "vocab", as_size(vocab, "vocab"))
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(tokens=self.tokens, hidden=self.hidden, vocab=self.vocab)

    @property
    def name(self) -> str:
        return "embedding"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(tokens=self.tokens, hidden=self.hidden, vocab=self.vocab)

    def terms(self, tokens: Any, hidden: Any, vocab: Any, ops: Ops = VECTOR) -> StreamTerms:
        """The formula of the class doc for these sizes (floats or arrays; the table size
        does not enter)."""
        numel = tokens * hidden
        return stream_terms(numel, numel, numel, bytes_per_element(self.dtype), 0.0 * numel,
                            0.0 * numel, extra_bytes=8.0 * tokens, ops=ops)

    def cost(self) -> Cost:
        return _stream_cost(self.terms(self.tokens, self.hidden, self.vocab))
