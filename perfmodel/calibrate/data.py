"""Measured rows for calibration: read and check a measurement CSV, turn rows into
vectorised perfmodel ops, predict them all at once.

The CSV is the shared measurement schema (:data:`perfmodel.measurements.COLUMNS`).
Besides ``gemm`` and ``attention`` rows, calibration also writes and reads small
streaming ops (``copy``, ``add``, ``rmsnorm``, ``layernorm``, ``silu_mul``, ``silu``,
``gelu``, ``softmax``), with their sizes in the ``m``/``n`` columns (stated in ``notes``
too); each name, its size columns and the op it becomes are in the op registry
(:data:`perfmodel.ops.registry.ROW_OPS`).

Reading is strict: a calibration fitted on a file with a bad line would silently rest on
fewer points than the user believes, so any unusable line is an error naming the line.

Rows become ops through :func:`perfmodel.validation.prepare`, the one mapping from a
measured row to what perfmodel predicts (kernel family from the engine's label, run context
from the timing method: CUDA-graph replay, warm L2, rotated weight copies, floors), so a
calibration fits exactly the predictions ``perfmodel validate`` scores.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_FIT_ROWS
from perfmodel.dtypes import normalize_dtype
from perfmodel.hardware.catalog import resolve_id
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import Measurement, csv_records, parse_row, parse_time_us
from perfmodel.ops.attention import UNFUSED_IMPLS, Attention
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Array
from perfmodel.ops.elementwise import Activation, Elementwise, Norm, Softmax
from perfmodel.ops.gemm import Gemm
from perfmodel.ops.registry import ROW_OPS, STREAM_ROW_OPS
from perfmodel.timing import Prediction, predict
from perfmodel.timing.constants import Constants
from perfmodel.validation import Batch, Prepared, dtype_rule, kernel_path, prepare

__all__ = [
    "STREAM_OPS", "Dataset", "Row", "as_run_on", "check_device", "dataset_from_rows",
    "read_rows", "row_family",
]

#: Streaming ops calibration understands, beyond gemm and attention.
STREAM_OPS: tuple[str, ...] = STREAM_ROW_OPS
_KNOWN_OPS = ("gemm", "attention", *STREAM_OPS)
_REQUIRED_COLUMNS = ("op", "dtype", "measured_us")
_MAX_LISTED = 5


@dataclass(frozen=True)
class Row:
    """One measured op, ready to become part of a vectorised perfmodel op.

    ``static`` holds what must agree inside one vectorised op (op kind, dtype, kernel path,
    timing code); ``sizes`` the shape numbers. ``shape_key`` names the shape regardless of
    repeats (used by leave-shape-out cross-validation).
    """

    line: int
    op: str
    dtype: str
    measured_s: float
    static: tuple[Any, ...]
    sizes: tuple[float, ...]
    spec: str = ""
    source: str = ""
    gpu: str = ""
    timing: str = ""
    unstable: bool = False
    case: str = ""
    notes: str = ""
    record: Measurement | None = field(default=None, compare=False, repr=False)
    """The row as read (engine, kernel, scheme and KV-dtype labels included); rows made in
    code without one get it from ``static`` and ``sizes`` (:meth:`measurement`)."""

    @property
    def family(self) -> str:
        return row_family(self)

    @property
    def group_key(self) -> tuple[str, ...]:
        """The full validation group (:func:`perfmodel.validation.group_key`): device,
        source, op, phase, dtype, KV dtype, scheme and kernel."""
        from perfmodel.validation import group_key

        return group_key(self.measurement(), self.spec)

    def measurement(self) -> Measurement:
        """The row as a :class:`~perfmodel.measurements.Measurement` (what
        :func:`perfmodel.validation.prepare` turns into an op)."""
        if self.record is not None:
            return self.record
        common: dict[str, Any] = {"row": self.line, "op": self.op, "dtype": self.dtype,
                  "measured_s": self.measured_s, "spec": self.spec, "source": self.source,
                  "gpu": self.gpu, "timing": self.timing, "notes": self.notes}
        size = [int(v) for v in self.sizes]
        if self.op == "gemm":
            return Measurement(**common, m=size[0], n=size[1], k=size[2], batch=size[3],
                               impl="bias=true" if self.static[2] else "")
        if self.op == "attention":
            path, splits = str(self.static[3]), self.static[4]
            impl = path if splits == "auto" else f"{path} num_splits={splits}"
            return Measurement(**common, batch=size[0], heads=size[1], kv_heads=size[2],
                               seq_q=size[3], seq_kv=size[4], head_dim=size[5],
                               causal=bool(self.static[2]), impl=impl,
                               phase="decode" if size[3] == 1 else "prefill")
        return Measurement(**common, m=size[0], n=size[1] if len(size) > 1 else None)

    @property
    def shape_key(self) -> tuple[Any, ...]:
        return (*self.static, *self.sizes)

    @property
    def group(self) -> tuple[str, str, str, str]:
        """(spec, source, op, dtype): the reporting group of ``perfmodel validate``."""
        return (self.spec, self.source, self.op, self.dtype)


def row_family(row: Row) -> str:
    """Parameter family of a row: ``gemm``, ``attention`` (fused kernels), ``stream`` or
    ``attention-naive`` (unfused attention: predicted from the gemm and stream parameters)."""
    if row.op == "gemm":
        return "gemm"
    if row.op == "attention":
        return "attention-naive" if row.static[3] in UNFUSED_IMPLS else "attention"
    return "stream"


# ----------------------------------------------------------------------------- reading
def _notes_flag(notes: str, name: str) -> str:
    for part in notes.replace(";", " ").split():
        if part.startswith(name + "="):
            return part[len(name) + 1:]
    return ""


def _stream_row(raw: Mapping[str, str], line: int) -> Row:
    op = (raw.get("op") or "").strip().lower()
    us = parse_time_us(raw)
    sizes: list[float] = []
    for name in ROW_OPS[op].columns:
        value = (raw.get(name) or "").strip()
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"column {name}: {value!r} is not a number (required for "
                             f"{op} rows)") from None
        if not math.isfinite(number) or number < 1 or number != round(number):
            raise ValueError(f"column {name}: {value!r} must be a whole number ≥ 1")
        sizes.append(number)
    dtype = normalize_dtype((raw.get("dtype") or "").strip() or "?", "dtype")
    timing = (raw.get("timing") or "").strip()
    notes = (raw.get("notes") or "").strip()
    return Row(line=line, op=op, dtype=dtype, measured_s=us * 1e-6,
               static=("stream", op, dtype, timing), sizes=tuple(sizes),
               spec=(raw.get("spec") or "").strip(), source=(raw.get("source") or "").strip(),
               gpu=(raw.get("gpu") or "").strip(), timing=timing,
               unstable=_notes_flag(notes, "unstable") == "1", case=_notes_flag(notes, "case"),
               notes=notes)


def _shared_row(raw: Mapping[str, str], line: int) -> Row:
    m = parse_row(raw, line)
    dtype = normalize_dtype(m.dtype, "dtype")
    notes = m.notes
    sizes: tuple[float, ...]
    if m.op == "gemm":
        bias = "bias=y" in notes.lower() or "bias=true" in m.impl.lower()
        static: tuple[Any, ...] = ("gemm", dtype, bias, m.timing)
        sizes = (float(m.m or 1), float(m.n or 1), float(m.k or 1), float(m.batch or 1))
    else:
        path, splits, _ = kernel_path(m.impl, m.phase)
        heads = float(m.heads or 1)
        static = ("attention", dtype, m.causal, path, splits, m.timing)
        sizes = (float(m.batch or 1), heads, float(m.kv_heads or heads), float(m.seq_q or 1),
                 float(m.seq_kv or 1), float(m.head_dim or 1))
    return Row(line=line, op=m.op, dtype=dtype, measured_s=m.measured_s, static=static,
               sizes=sizes, spec=m.spec, source=m.source, gpu=m.gpu, timing=m.timing,
               unstable=_notes_flag(notes, "unstable") == "1", case=_notes_flag(notes, "case"),
               notes=notes, record=m)


def parse_line(raw: Mapping[str, str], line: int) -> Row:
    """One CSV line (a mapping by column) as a :class:`Row`; raises ValueError naming the
    column at fault."""
    op = (raw.get("op") or "").strip().lower()
    if op not in _KNOWN_OPS:
        raise ValueError(f"column op: unknown op {raw.get('op')!r} (calibration knows "
                         f"{', '.join(_KNOWN_OPS)})")
    try:
        if op in STREAM_OPS:
            return _stream_row(raw, line)
        return _shared_row(raw, line)
    except PerfmodelError as exc:
        raise ValueError(str(exc)) from None


def read_rows(path: str | Path, *, strict: bool = True) -> tuple[list[Row], list[tuple[int, str]]]:
    """Read a measurement CSV for calibration.

    Returns (rows, skipped). Raises :class:`PerfmodelError` for a missing, empty, binary or
    non-CSV file, a header without the required columns, or (``strict``) any unusable line:
    a truncated or over-long line, a zero, negative or non-numeric time, a missing size.
    """
    name, records = csv_records(path, _REQUIRED_COLUMNS)
    rows: list[Row] = []
    bad: list[tuple[int, str]] = []
    for i, raw, problem in records:
        if raw is None:
            bad.append((i, problem))
            continue
        try:
            rows.append(parse_line(raw, i))
        except ValueError as exc:
            bad.append((i, str(exc)))
    if bad and strict:
        listed = "; ".join(f"line {ln}: {why}" for ln, why in bad[:_MAX_LISTED])
        more = f" (+{len(bad) - _MAX_LISTED} more)" if len(bad) > _MAX_LISTED else ""
        raise PerfmodelError(name, f"{len(bad)} unusable line(s): {listed}{more}",
                             "fix or remove those lines (calibration never drops rows "
                             "silently)")
    if not rows:
        first = f" (line {bad[0][0]}: {bad[0][1]})" if bad else ""
        raise PerfmodelError(name, f"no usable rows{first}", "check the file's contents")
    return merge_repeats(rows), bad


def merge_repeats(rows: Sequence[Row]) -> list[Row]:
    """Rows of one suite case measured more than once (``case=`` in notes) become the
    fastest of them: interference from other work only slows a kernel down. Rows without
    a case id are kept as they are."""
    best: dict[str, int] = {}
    out: list[Row] = []
    for row in rows:
        if not row.case:
            out.append(row)
            continue
        j = best.get(row.case)
        if j is None:
            best[row.case] = len(out)
            out.append(row)
        elif row.measured_s < out[j].measured_s:
            out[j] = row
    return out


def check_device(rows: Sequence[Row], hw: HardwareSpec, path: str = "measurements",
                 allow_other: bool = False) -> None:
    """Refuse rows measured on another device than ``hw``.

    A row's ``spec`` column (when filled) must resolve to ``hw.id`` or to the spec it was
    derived from; rows without a spec are taken to be for ``hw``.
    """
    if allow_other:
        return
    others: dict[str, int] = defaultdict(int)
    for row in rows:
        if not row.spec:
            continue
        try:
            rid = resolve_id(row.spec)
        except PerfmodelError:
            rid = row.spec.strip().lower()
        if rid not in (hw.id, _base_id(hw)):
            others[row.spec] += 1
    if others:
        listed = ", ".join(f"{k} ({v} rows)" for k, v in sorted(others.items()))
        raise PerfmodelError(
            path, f"measured on another device: {listed}, but --gpu is {hw.id}",
            f"pass --gpu {next(iter(sorted(others)))}, or --allow-other-gpu to fit anyway")


def as_run_on(rows: Sequence[Row], hw: HardwareSpec) -> tuple[list[Row], list[str]]:
    """``rows`` with each dtype replaced by the one ``hw`` runs it in
    (:func:`perfmodel.validation.dtype_rule`: XLA's default f32 is full fp32 on a device
    without TF32), and the rules that fired. (A row's :attr:`Row.group` follows its dtype:
    read it before, to report under the measured dtype.)"""
    out: list[Row] = []
    rules: set[str] = set()
    for row in rows:
        dtype, rule = dtype_rule(row.dtype, row.notes, hw)
        if dtype == row.dtype:
            out.append(row)
            continue
        rules.add(rule)
        static = (row.static[0], dtype, *row.static[2:])
        out.append(dataclasses.replace(row, dtype=dtype, static=static))
    return out, sorted(rules)


def _base_id(hw: HardwareSpec) -> str:
    return hw.calibration.device if hw.calibration is not None else hw.id


# ----------------------------------------------------------------------------- ops
StreamOp = Elementwise | Norm | Activation | Softmax
Op = Gemm | Attention | StreamOp | AllReduce


def _prepare_key(hw: HardwareSpec) -> tuple[Any, ...]:
    """What of a spec the row → op mapping depends on (a calibrated copy of a spec maps
    rows as the spec itself does)."""
    return (hw.id, hw.arch, hw.memory.l2, tuple(sorted(hw.peaks)))


@dataclass(frozen=True)
class Dataset:
    """Rows, their measured times and weights; predicted as vectorised ops.

    ``predict(hw)`` returns one predicted time per row (s), in row order: each row is
    mapped to an op and a run context by :func:`perfmodel.validation.prepare` (the timing
    method's floor, launch mode and L2 state included) on ``hw``, and predicted with
    ``hw``'s parameters.
    """

    rows: tuple[Row, ...]
    measured_s: Array
    weight: Array
    _prepared: dict[tuple[Any, ...], tuple[Prepared, npt.NDArray[np.int64]]] = field(
        default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.rows)

    def prepared(self, hw: HardwareSpec) -> tuple[Prepared, npt.NDArray[np.int64]]:
        """(the rows prepared on ``hw``, each prepared row's position in :attr:`rows`);
        made once per device. Raises if a row cannot be predicted on ``hw``."""
        key = _prepare_key(hw)
        hit = self._prepared.get(key)
        if hit is not None:
            return hit
        # each record a distinct object whose ``row`` is its position here
        records = [dataclasses.replace(r.measurement(), row=i) for i, r in enumerate(self.rows)]
        prep = prepare(records, hw.model_copy(update={"calibration": None}),
                       include_suspect=True)
        if prep.skipped:
            pos, why = prep.skipped[0]
            line = self.rows[pos].line if 0 <= pos < len(self.rows) else pos
            more = f" (+{len(prep.skipped) - 1} more)" if len(prep.skipped) > 1 else ""
            raise PerfmodelError(f"measurements line {line}", f"cannot be predicted: {why}"
                                 + more, "measure ops the device supports, or pass its spec")
        where = np.asarray([r.row for r in prep.rows], dtype=np.int64)
        self._prepared[key] = (prep, where)
        return prep, where

    def _batches(self, hw: HardwareSpec) -> list[tuple[npt.NDArray[np.int64], Batch]]:
        prep, where = self.prepared(hw)
        return [(where[b.index], dataclasses.replace(b, spec=hw)) for b in prep.batches]

    def predict(self, hw: HardwareSpec, constants: Constants | None = None) -> Array:
        out = np.empty(len(self.rows), dtype=np.float64)
        for idx, b in self._batches(hw):
            out[idx] = b.predict(constants)
        return out

    def predictions(self, hw: HardwareSpec,
                    constants: Constants | None = None
                    ) -> list[tuple[npt.NDArray[np.int64], Prediction]]:
        """(row positions, Prediction) per vectorised op: for bottleneck labels."""
        return [(idx, p) for idx, _, p in self.predictions_with_ops(hw, constants)]

    def predictions_with_ops(self, hw: HardwareSpec, constants: Constants | None = None
                             ) -> list[tuple[npt.NDArray[np.int64], Op, Prediction]]:
        """(row positions, vectorised op, Prediction) per vectorised op; the Prediction's
        ``latency_s`` is what :meth:`predict` returns for those rows (the timing method's
        conventions applied)."""
        out: list[tuple[npt.NDArray[np.int64], Op, Prediction]] = []
        for idx, b in self._batches(hw):
            p = predict(b.op, hw, context=b.context, constants=constants)
            p = dataclasses.replace(p, latency_s=b.predict(constants))
            out.append((idx, b.op, p))
        return out

    def subset(self, index: Iterable[int] | Array) -> Dataset:
        idx = [int(i) for i in np.asarray(list(index) if not isinstance(index, np.ndarray)
                                          else index).ravel()]
        return dataset_from_rows([self.rows[i] for i in idx], weight=self.weight[idx])

    def where(self, mask: Any) -> Dataset:
        return self.subset(np.flatnonzero(mask))

    def families(self) -> list[str]:
        return sorted({r.family for r in self.rows})

    def family_mask(self, family: str, dtype: str | None = None) -> Array:
        return np.asarray([r.family == family and (dtype is None or r.dtype == dtype)
                           for r in self.rows], dtype=bool)


def thin_rows(rows: Sequence[Row], cap: int = MAX_FIT_ROWS) -> tuple[list[Row], str]:
    """At most ``cap`` rows for a fit, and a note saying how they were picked ("" if all).

    Rule: the rows sorted by (family, dtype, shape, measured time), and ``cap`` of them
    taken at evenly spaced ranks, so every family, dtype and size range keeps its share.
    A fit's cost grows with its rows (each candidate setting is cross-validated), so a
    file of 10⁵–10⁶ rows is thinned rather than fitted for hours.
    """
    if len(rows) <= cap:
        return list(rows), ""
    order = sorted(range(len(rows)), key=lambda i: (rows[i].family, rows[i].dtype,
                                                      repr(rows[i].static), rows[i].sizes,
                                                      rows[i].measured_s))
    keep = sorted({order[int(j)] for j in np.round(np.linspace(0, len(rows) - 1, cap))})
    note = (f"fitting {len(keep):,} of {len(rows):,} rows (perfmodel._limits.MAX_FIT_ROWS): "
            "evenly spaced over the rows sorted by family, dtype and shape")
    return [rows[i] for i in keep], note


def dataset_from_rows(rows: Sequence[Row], weight: Array | None = None,
                      unstable_weight: float = 0.3) -> Dataset:
    """The rows as a :class:`Dataset`. Unstable rows get ``unstable_weight`` unless
    ``weight`` is given."""
    if weight is None:
        weight = np.asarray([unstable_weight if r.unstable else 1.0 for r in rows])
    return Dataset(rows=tuple(rows), measured_s=np.asarray([r.measured_s for r in rows],
                                                            dtype=np.float64),
                   weight=np.asarray(weight, dtype=np.float64))
