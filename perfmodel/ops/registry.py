"""The op registry: every op perfmodel knows, named once.

Two tables, both read-only:

- :data:`OP_CLASSES`: each op class by its short name (``gemm``, ``attention``, ``norm``...,
  the ``perfmodel predict OP`` names), with its shape fields (the constructor arguments
  that take numpy arrays and broadcast) and the timing family whose parameters it uses
  (``gemm``, ``attention``, ``stream``, ``comm``). The timing model registers one timer per
  class (:func:`perfmodel.timing.timer_for`); whole-model evaluation concatenates the shape
  fields of ops of one class.
- :data:`ROW_OPS`: each ``op`` name of the measurement schema (``gemm``, ``attention``,
  ``copy``, ``rmsnorm``, ``silu_mul``...) with its op class, the CSV size columns it
  needs and how they fill the constructor (:meth:`RowOp.build`). Measurement reading,
  validation, calibration and trace import all build ops through it.

The cost formulas (FLOPs, bytes) live with each class, once; the registry only names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.ops.attention import Attention
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.elementwise import Activation, Elementwise, Embedding, Norm, Rotary, Softmax
from perfmodel.ops.gemm import Gemm

__all__ = ["OP_CLASSES", "ROW_OPS", "STREAM_ROW_OPS", "OpClass", "RowOp", "op_class",
           "row_op"]

Op = Gemm | Attention | Elementwise | Norm | Activation | Rotary | Softmax | Embedding | AllReduce


@dataclass(frozen=True)
class OpClass:
    """One op class.

    Attributes
    ----------
    name:
        Short name (the ``perfmodel predict`` subcommand).
    cls:
        The class.
    family:
        Timing parameter family: ``gemm``, ``attention``, ``stream`` (memory-bound streams
        plus a launch) or ``comm`` (collectives).
    shape_fields:
        Constructor arguments that accept numpy arrays (broadcast together); the others
        are static (dtype, kind, flags) and must agree inside one vectorised op.
    summary:
        One line for help texts.
    """

    name: str
    cls: type[Op]
    family: str
    shape_fields: tuple[str, ...]
    summary: str


def _classes(*entries: OpClass) -> Mapping[type, OpClass]:
    return MappingProxyType({e.cls: e for e in entries})


_BY_CLASS: Mapping[type, OpClass] = _classes(
    OpClass("gemm", Gemm, "gemm", ("m", "n", "k", "batch"), "matrix multiply C = A @ B"),
    OpClass("attention", Attention, "attention",
            ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "value_dim"),
            "scaled dot-product attention (prefill, decode; GQA; causal)"),
    OpClass("norm", Norm, "stream", ("tokens", "hidden"), "RMSNorm / LayerNorm"),
    OpClass("activation", Activation, "stream", ("tokens", "width"),
            "activation (SwiGLU, GeGLU, GELU, SiLU, ReLU)"),
    OpClass("rotary", Rotary, "stream", ("tokens", "heads", "kv_heads", "head_dim"),
            "rotary position embedding on Q and K"),
    OpClass("softmax", Softmax, "stream", ("rows", "cols"), "row softmax"),
    OpClass("embedding", Embedding, "stream", ("tokens", "hidden", "vocab"),
            "embedding gather"),
    OpClass("elementwise", Elementwise, "stream", ("numel", "reads", "writes"),
            "generic elementwise kernel"),
    OpClass("allreduce", AllReduce, "comm", ("numel", "gpus"),
            "all-reduce across GPUs (NCCL, custom one/two-shot, NVLS)"),
)
#: Op classes by short name.
OP_CLASSES: Mapping[str, OpClass] = MappingProxyType({e.name: e for e in _BY_CLASS.values()})


def op_class(op_or_cls: object) -> OpClass:
    """The registry entry of an op (or op class); raises :class:`PerfmodelError` for
    anything else."""
    cls = op_or_cls if isinstance(op_or_cls, type) else type(op_or_cls)
    try:
        return _BY_CLASS[cls]
    except KeyError:
        raise PerfmodelError("op", f"cannot predict {cls.__name__}",
                             "pass a perfmodel op such as Gemm or Attention") from None


@dataclass(frozen=True)
class RowOp:
    """One ``op`` name of the measurement schema and how its rows become an op.

    Attributes
    ----------
    name:
        The value of the CSV ``op`` column.
    op_class:
        The class its rows become.
    columns:
        Size columns a row must fill (whole numbers ≥ 1).
    optional:
        Size columns a row may leave empty (the class's default applies: batch 1,
        kv_heads = heads, value_dim = head_dim).
    fields:
        Constructor argument each size column fills (``m`` → ``tokens``...).
    fixed:
        Constructor arguments fixed by the name (``reads=2`` for ``add``...).
    sizes:
        What the size columns mean, for documentation.
    """

    name: str
    op_class: OpClass
    columns: tuple[str, ...]
    optional: tuple[str, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    sizes: str = ""

    def build(self, dtype: str, sizes: Mapping[str, Any], **options: Any) -> Op:
        """The op of rows with these ``sizes`` (column → number or array; optional columns
        may be missing or None) in ``dtype``; ``options`` are further constructor arguments
        (kernel path, flags)."""
        args: dict[str, Any] = {}
        for col in (*self.columns, *self.optional):
            value = sizes.get(col)
            if value is None:
                if col in self.columns:
                    raise PerfmodelError(col, f"required for {self.name} ops",
                                         f"give the {col} column")
                continue
            args[self.fields.get(col, col)] = value
        return self.op_class.cls(dtype=dtype, **args, **self.fixed, **options)


def _stream(name: str, cls: type[Op], fields: tuple[str, ...], sizes: str,
            **fixed: Any) -> RowOp:
    cols = ("m", "n")[:len(fields)]
    return RowOp(name, _BY_CLASS[cls], cols, fields=dict(zip(cols, fields, strict=True)),
                 fixed=MappingProxyType(fixed), sizes=sizes)


_ROWS = (
    RowOp("gemm", _BY_CLASS[Gemm], ("m", "n", "k"), ("batch",), sizes="m, n, k [, batch]"),
    RowOp("attention", _BY_CLASS[Attention], ("heads", "seq_q", "seq_kv", "head_dim"),
          ("batch", "kv_heads", "value_dim"),
          sizes="heads, seq_q, seq_kv, head_dim [, batch, kv_heads, value_dim]"),
    _stream("copy", Elementwise, ("numel",), "m = elements", reads=1.0, writes=1.0,
            flops_per_element=0.0, kind="copy"),
    _stream("add", Elementwise, ("numel",), "m = elements", reads=2.0, writes=1.0,
            flops_per_element=1.0, kind="add"),
    _stream("rmsnorm", Norm, ("tokens", "hidden"), "m = rows, n = hidden", kind="rms"),
    _stream("layernorm", Norm, ("tokens", "hidden"), "m = rows, n = hidden", kind="layer"),
    _stream("silu_mul", Activation, ("tokens", "width"), "m = rows, n = width",
            kind="silu_mul"),
    _stream("silu", Activation, ("tokens", "width"), "m = rows, n = width", kind="silu"),
    _stream("gelu", Activation, ("tokens", "width"), "m = rows, n = width", kind="gelu"),
    _stream("softmax", Softmax, ("rows", "cols"), "m = rows, n = columns"),
    RowOp("allreduce", _BY_CLASS[AllReduce], ("m", "n"), fields={"m": "numel", "n": "gpus"},
          sizes="m = elements in the buffer, n = GPUs"),
)
#: Measurement op names, in schema order.
ROW_OPS: Mapping[str, RowOp] = MappingProxyType({r.name: r for r in _ROWS})
#: The streaming op names (neither GEMM nor attention).
STREAM_ROW_OPS: tuple[str, ...] = tuple(r.name for r in _ROWS
                                        if r.op_class.family == "stream")


def row_op(name: str) -> RowOp:
    """The registry entry of measurement op ``name``; raises :class:`PerfmodelError`
    listing the known names."""
    try:
        return ROW_OPS[name]
    except KeyError:
        raise PerfmodelError("op", f"unknown op {name!r}",
                             f"use one of {', '.join(ROW_OPS)}") from None
