"""Measurement CSVs in the shared schema: read, check, and turn rows into ops.

Schema (columns; order free, extra columns kept in ``extra``)::

    spec, source, gpu, op, impl, dtype, batch, m, n, k, heads, kv_heads, seq_q, seq_kv,
    head_dim, causal, phase, direction, measured_us, measured_tflops, timing, notes,
    out_dtype, kv_dtype, value_dim, quant, kernel, engine, kv_layout

The last seven are optional and describe what the engine ran: ``out_dtype`` (GEMM output,
default: the input dtype), ``kv_dtype`` (attention KV-cache dtype, default: ``dtype``),
``value_dim`` (attention V head dim, default: ``head_dim``), ``quant`` (quantization
scheme of a GEMM: :data:`QUANT_SCHEMES`), ``kernel`` (the kernel the engine dispatched, as
the engine names it), ``engine`` (``trtllm``, ``vllm``, ``sglang``, …) and ``kv_layout``
(``latent``: a multi-head latent attention cache, one vector of ``head_dim`` elements per
token whose first ``value_dim`` are the values, as an absorbed MLA decode kernel reads it:
:attr:`perfmodel.ops.attention.Attention.shared_kv`; empty: keys and values per KV head).
Where such a column is empty, the ``notes`` labels of AIConfigurator's database fill it
(:func:`notes_fields`): ``kv=`` the KV dtype, ``ks=`` the kernel, ``q=`` the quantization.

Only ``op``, ``dtype``, ``measured_us`` and the op's size columns are required (each op
name and its columns: :data:`perfmodel.ops.registry.ROW_OPS`; GEMM: m, n, k [batch];
attention: heads, seq_q, seq_kv, head_dim [batch, kv_heads, value_dim]; copy/add: m =
elements; rmsnorm, layernorm, silu_mul, silu, gelu, softmax: m = rows, n = width;
allreduce: m = elements, n = GPUs); ``spec`` may be replaced by an explicit device. A
row that cannot be used is never dropped silently: it is returned as skipped with its
reason.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_CSV_BYTES, clip_message
from perfmodel.ops.gemm import QUANT_SCHEMES
from perfmodel.ops.registry import ROW_OPS

__all__ = [
    "BASE_COLUMNS", "COLUMNS", "ENGINE_COLUMNS", "KV_LAYOUTS", "QUANT_SCHEMES", "Measurement",
    "MeasurementSet", "Record", "csv_records", "is_suspect", "notes_fields", "parse_time_us",
    "read_measurements", "write_measurements",
]

#: The columns every file of the shared schema has.
BASE_COLUMNS: tuple[str, ...] = (
    "spec", "source", "gpu", "op", "impl", "dtype", "batch", "m", "n", "k", "heads",
    "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "phase", "direction", "measured_us",
    "measured_tflops", "timing", "notes",
)
#: Optional columns that say what an engine ran (see the module doc).
ENGINE_COLUMNS: tuple[str, ...] = ("out_dtype", "kv_dtype", "value_dim", "quant", "kernel",
                                   "engine", "kv_layout")
#: Values of the ``kv_layout`` column: keys and values per KV head (empty), or one latent
#: vector per token (multi-head latent attention).
KV_LAYOUTS: tuple[str, ...] = ("", "latent")
#: Every column the reader knows, in the order :func:`write_measurements` writes them.
COLUMNS: tuple[str, ...] = BASE_COLUMNS + ENGINE_COLUMNS
#: AIConfigurator's ``q=`` labels -> scheme. Its README: fp8 is per-tensor in TRT-LLM and
#: vLLM, per-channel in SGLang (the engine decides; see :func:`notes_fields`).
_AIC_QUANT = {"bfloat16": "none", "float16": "none", "fp8": "per-tensor",
              "fp8_block": "block", "nvfp4": "nvfp4"}
_ENGINES = ("trtllm", "vllm", "sglang")
_REQUIRED = ("op", "dtype", "measured_us")


def is_suspect(notes: str) -> bool:
    """A row its source flagged SUSPECT in ``notes`` (its value implies more FLOP/s than
    the device's dense peak); validation and calibration leave such rows out by default."""
    return "SUSPECT" in notes


#: One data line of a CSV: (line number, fields or None if malformed, problem).
Record = tuple[int, Mapping[str, str] | None, str]
_INT_FIELDS = ("batch", "m", "n", "k", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
               "value_dim")
_LABELS = ("out_dtype", "kv_dtype", "quant", "kernel", "engine", "kv_layout")


def notes_fields(notes: str, source: str = "") -> dict[str, str]:
    """Labels of AIConfigurator's ``notes`` (``key=value`` pairs joined by ``;``) as schema
    columns: ``kv=`` -> ``kv_dtype``, ``ks=`` -> ``kernel``, ``q=`` -> ``quant`` (fp8 is
    per-channel when the source is SGLang, per-tensor otherwise); ``engine`` is the first
    of trtllm/vllm/sglang named in ``source``. Unknown keys are ignored."""
    pairs = dict(kv.split("=", 1) for kv in notes.split(";") if "=" in kv)
    out: dict[str, str] = {}
    low = source.lower()
    engine = next((e for e in _ENGINES if e in low), "")
    if engine:
        out["engine"] = engine
    if pairs.get("kv"):
        out["kv_dtype"] = pairs["kv"].strip()
    if pairs.get("ks"):
        out["kernel"] = pairs["ks"].strip()
    q = pairs.get("q", "").strip().lower()
    if q in _AIC_QUANT:
        out["quant"] = _AIC_QUANT[q]
        if q == "fp8" and engine == "sglang":
            out["quant"] = "per-channel"
    return out


@dataclass(frozen=True)
class Measurement:
    """One measured kernel (or op) time. Sizes are ints or None; time in seconds."""

    row: int
    op: str
    dtype: str
    measured_s: float
    spec: str = ""
    source: str = ""
    gpu: str = ""
    impl: str = ""
    timing: str = ""
    phase: str = ""
    causal: bool = False
    batch: int | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    seq_q: int | None = None
    seq_kv: int | None = None
    head_dim: int | None = None
    notes: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)
    value_dim: int | None = None
    out_dtype: str = ""
    kv_dtype: str = ""
    quant: str = ""
    kernel: str = ""
    engine: str = ""
    kv_layout: str = ""


@dataclass(frozen=True)
class MeasurementSet:
    """Rows read from one or more CSVs, plus the rows that could not be read and why."""

    rows: tuple[Measurement, ...]
    skipped: tuple[tuple[int, str], ...] = ()
    path: str = ""

    def __len__(self) -> int:
        return len(self.rows)


def _int(value: str, name: str, row: int) -> int | None:
    text = value.strip()
    if text == "":
        return None
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"column {name}: {value!r} is not a number") from None
    if not math.isfinite(number) or number != round(number):
        raise ValueError(f"column {name}: {value!r} is not a whole number")
    if number < 1:
        raise ValueError(f"column {name}: {value!r} must be ≥ 1")
    return int(number)


def _bool(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes", "y", "t")


def parse_time_us(raw: Mapping[str, str]) -> float:
    """The row's ``measured_us`` as a number of µs; ValueError naming the column unless it
    is a finite positive number."""
    text = (raw.get("measured_us") or "").strip()
    try:
        us = float(text)
    except ValueError:
        raise ValueError(f"column measured_us: {text!r} is not a number") from None
    if not math.isfinite(us) or us <= 0:
        raise ValueError(f"column measured_us: {text!r} must be a positive time in µs")
    return us


def parse_row(raw: Mapping[str, str], row: int) -> Measurement:
    """Turn one CSV row into a :class:`Measurement`; raises ValueError naming the column."""
    op = (raw.get("op") or "").strip().lower()
    kind = ROW_OPS.get(op)
    if kind is None:
        raise ValueError(f"column op: unknown op {raw.get('op')!r} (this reader knows "
                         f"{', '.join(ROW_OPS)})")
    us = parse_time_us(raw)
    sizes = {name: _int(raw.get(name) or "", name, row) for name in _INT_FIELDS}
    for name in kind.columns:
        if sizes[name] is None:
            raise ValueError(f"column {name}: required for {op} rows but empty")
    dtype = (raw.get("dtype") or "").strip()
    if not dtype:
        raise ValueError("column dtype: empty")
    extra = {k: v for k, v in raw.items() if k not in COLUMNS and k is not None}
    notes = (raw.get("notes") or "").strip()
    source = (raw.get("source") or "").strip()
    labels = notes_fields(notes, source)
    for name in _LABELS:
        text = (raw.get(name) or "").strip()
        if text:
            labels[name] = text
    quant = labels.get("quant", "").lower()
    if quant and quant not in QUANT_SCHEMES:
        raise ValueError(f"column quant: unknown scheme {quant!r} (use one of "
                         f"{', '.join(QUANT_SCHEMES)})")
    layout = labels.get("kv_layout", "").lower()
    if layout not in KV_LAYOUTS:
        raise ValueError(f"column kv_layout: unknown layout {layout!r} (use 'latent' for a "
                         "multi-head latent attention cache, or leave it empty)")
    if layout and op != "attention":
        raise ValueError(f"column kv_layout: {layout!r} describes an attention cache, not "
                         f"a {op} row (leave it empty)")
    return Measurement(
        row=row, op=op, dtype=dtype, measured_s=us * 1e-6,
        spec=(raw.get("spec") or "").strip(), source=source,
        gpu=(raw.get("gpu") or "").strip(), impl=(raw.get("impl") or "").strip(),
        timing=(raw.get("timing") or "").strip(), phase=(raw.get("phase") or "").strip(),
        causal=_bool(raw.get("causal") or ""), notes=notes, extra=extra,
        out_dtype=labels.get("out_dtype", ""), kv_dtype=labels.get("kv_dtype", ""),
        quant=quant, kernel=labels.get("kernel", ""), engine=labels.get("engine", "").lower(),
        kv_layout=layout, **sizes,
    )


def csv_records(source: str | Path | Iterable[str],
                required: Sequence[str] = _REQUIRED) -> tuple[str, list[Record]]:
    """Open a measurement CSV and split it into lines, before any row is interpreted.

    Returns (name, records): one ``(line number, fields or None, problem)`` per data line,
    fields None when the line has more or fewer fields than the header. Raises
    :class:`PerfmodelError` naming the file for a missing, unreadable, binary or empty file
    and for a header without the ``required`` columns.
    """
    name = str(source) if isinstance(source, (str, Path)) else "<lines>"
    if isinstance(source, (str, Path)):
        p = Path(source)
        if p.is_dir():
            raise PerfmodelError(name, "is a folder", "pass the path of a measurement CSV")
        if not p.is_file():
            raise PerfmodelError(name, "file not found", "pass the path of a measurement CSV")
        if p.stat().st_size > MAX_CSV_BYTES:
            raise PerfmodelError(name, f"{p.stat().st_size:,} bytes is above the cap of "
                                 f"{MAX_CSV_BYTES:,} (perfmodel._limits.MAX_CSV_BYTES)",
                                 "split the file")
        try:
            # utf-8-sig: a byte-order mark, as Excel writes "CSV UTF-8", is not a column name
            text = p.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PerfmodelError(name, f"not UTF-8 text (byte {exc.start} cannot be decoded)",
                                 "save the CSV as UTF-8 (corrupt or binary file?)") from None
        except OSError as exc:
            raise PerfmodelError(name, f"cannot read ({exc.strerror or exc})",
                                 "pass a readable measurement CSV") from None
    else:
        text = "".join(line if line.endswith("\n") else line + "\n" for line in source)
        text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise PerfmodelError(name, "contains NUL bytes: a corrupt or binary file",
                             "pass a measurement CSV in the shared schema")
    if not text.strip():
        raise PerfmodelError(name, "the file is empty",
                             f"a measurement CSV needs a header with {', '.join(required)}")
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise _csv_error(name, 1, exc) from None
    missing = [c for c in required if c not in header]
    if missing:
        raise PerfmodelError(
            name, f"wrong schema: missing column(s) {', '.join(missing)} (header: "
            f"{', '.join(header[:8])}{', ...' if len(header) > 8 else ''})",
            f"the header must include {', '.join(required)} and the op's shape columns "
            "(the shared measurement schema: " + ", ".join(COLUMNS) + ")",
        )
    reader.fieldnames = header
    records: list[Record] = []
    try:
        for raw in reader:  # line_num: the physical line (blank lines are skipped)
            _record(records, reader.line_num, raw)
    except csv.Error as exc:
        raise _csv_error(name, reader.line_num, exc) from None
    return name, records


def _csv_error(name: str, line: int, exc: csv.Error) -> PerfmodelError:
    """A clean error for what the csv module refuses (a field over its 128 KiB limit, a
    NUL byte, a quote left open), naming the file and line."""
    text = str(exc)
    if "field larger than field limit" in text:
        problem = (f"line {line}: a field longer than {csv.field_size_limit():,} characters "
                   "(a quote left open, or not a measurement CSV)")
    else:
        problem = f"line {line}: not CSV ({clip_message(text, 80)})"
    return PerfmodelError(name, problem, "check the file's quoting, or pass a measurement CSV")


def _record(records: list[Record], i: int, raw: dict[str | Any, Any]) -> None:
    """Append line ``i`` to ``records``: its fields, or None and why it is malformed."""
    if None in raw:
        records.append((i, None, "more fields than the header (corrupt line)"))
    elif any(v is None for v in raw.values()):
        records.append((i, None, "fewer fields than the header (truncated line)"))
    else:
        records.append((i, raw, ""))


def read_measurements(path: str | Path | Iterable[str], *, strict: bool = False) -> MeasurementSet:
    """Read a measurement CSV (a path, or lines of text).

    Raises :class:`PerfmodelError` if the file is missing, empty, not CSV, or lacks a
    required column. Individual bad rows are skipped with a reason, or raise with
    ``strict=True``.
    """
    name, records = csv_records(path)
    rows: list[Measurement] = []
    skipped: list[tuple[int, str]] = []
    for i, raw, reason in records:
        if raw is not None:
            try:
                rows.append(parse_row(raw, i))
                continue
            except ValueError as exc:
                reason = str(exc)
        if strict:
            raise PerfmodelError(f"{name}:{i}", reason, "fix or remove the line")
        skipped.append((i, reason))
    if not rows:
        first = f" (line {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise PerfmodelError(name, f"no usable rows{first}", "check the file's contents")
    return MeasurementSet(rows=tuple(rows), skipped=tuple(skipped), path=name)


def write_measurements(path: str | Path, rows: Iterable[Mapping[str, object]],
                       append: bool = True) -> None:
    """Write rows (mappings keyed by :data:`COLUMNS`) to ``path``; adds the header when the
    file is new. Values are written with ``str``; None becomes an empty field. Appending
    follows the existing file's header (its column order; columns it lacks are not
    written) and starts on a new line where the file does not end with one."""
    p = Path(path)
    new = not p.exists() or p.stat().st_size == 0 or not append
    fields = list(COLUMNS)
    lead = ""
    if not new:
        with p.open("rb") as fh:
            first = fh.readline().decode("utf-8-sig", errors="replace")
            fh.seek(-1, 2)
            lead = "" if fh.read(1) in (b"\n", b"\r") else "\n"
        header = [h.strip() for h in next(csv.reader([first]), [])]
        if header and header != fields:
            if "op" not in header or "measured_us" not in header:
                shown = clip_message(", ".join(header), 80)
                raise PerfmodelError(str(p), f"cannot append: its header ({shown}) is not a "
                                     "measurement CSV's", "write to a new file, or append "
                                     "to a measurement CSV")
            fields = header
    with p.open("a" if append else "w", newline="", encoding="utf-8") as fh:
        fh.write(lead)
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in fields})
