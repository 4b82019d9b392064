"""Read an Nsight Compute CSV export into a :class:`~perfmodel.calibrate.capture.Capture`.

Format (Nsight Compute CLI documentation, "Output Pages" and "Metrics and Units"):
``ncu --csv --page raw`` prints one header line (``"ID","Process ID","Process Name",
"Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC"``
then one column per metric), one line of units (``nsecond``, ``%``...; identity columns
empty), then one line per profiled kernel launch. The default ``--page details`` is
long instead: one line per (kernel, metric) with ``Section Name``, ``Metric Name``,
``Metric Unit`` and ``Metric Value``; both are read. Lines before the header (the
``==PROF==`` progress lines ncu prints, comments) are skipped; numbers may carry
thousands separators; ``n/a`` is a missing value.

Metrics read (raw name, or the label of the "GPU Speed Of Light Throughput" section):

==============================================================  ==========================
``gpu__time_duration.sum`` / ``Duration``                       kernel time
``sm__throughput.avg.pct_of_peak_sustained_elapsed`` /          Compute (SM) Throughput, %
``Compute (SM) Throughput``
``gpu__compute_memory_throughput.avg.pct_of_peak_sustained_     Memory Throughput, % (the
elapsed`` / ``Memory Throughput``                               busiest of DRAM, L1, L2)
``dram__throughput.avg.pct_of_peak_sustained_elapsed`` /        DRAM Throughput, %
``gpu__dram_throughput...`` / ``DRAM Throughput``
``device__attribute_display_name``                              the GPU's name
==============================================================  ==========================

Shapes: an export records none. When the program ran under
``torch.autograd.profiler.emit_nvtx(record_shapes=True)`` and ncu was given ``--nvtx``,
each launch carries its NVTX push/pop range stack (a column whose header contains
``Push/Pop_Range``), in which PyTorch names every operator call as
``aten::mm, seq = 3, op_id = 7, sizes = [[64, 128], [128, 32]]``. The op call of a launch
is the outermost range on that stack that maps to a perfmodel op; consecutive launches
under the same range text are one call until a kernel name repeats (a repeat starts the
next call of the same op), and a call's time is their ``gpu__time_duration`` summed
(timing code ``ncu_gpu_time_duration``). The dtype comes from the kernel's name (``bf16``,
``cutlass::bfloat16_t``, ``sgemm``...) unless given; ``is_causal`` is not recorded, so
attention is taken as given by the caller (non-causal by default). Launches without shapes
are listed with their measured throughput, never dropped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.capture import Capture, Device, Unit, Unmatched
from perfmodel.calibrate.opmap import MappedOp, dtype_from_kernel, kernel_family, map_op

__all__ = ["TIMING", "NcuLaunch", "nvtx_calls", "read_ncu"]

#: ``timing`` code of rows from an Nsight Compute export.
TIMING = "ncu_gpu_time_duration"

_EXPORT_FIX = ("export with 'ncu --csv --page raw --nvtx --metrics gpu__time_duration.sum,"
               "sm__throughput.avg.pct_of_peak_sustained_elapsed,"
               "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,"
               "dram__throughput.avg.pct_of_peak_sustained_elapsed ... > file.csv' "
               "(or 'ncu -i report.ncu-rep --csv --page raw > file.csv')")

_DURATION = ("gpu__time_duration.sum", "Duration")
_SM = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput")
_MEMORY = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
           "Memory Throughput")
_DRAM = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
         "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput")
_NAME = ("device__attribute_display_name",)
_TIME_UNITS = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "µs": 1e-6,
               "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0}


@dataclass(frozen=True)
class NcuLaunch:
    """One profiled kernel launch: its metrics (None when not collected) and NVTX ranges."""

    line: int
    id: str
    kernel: str
    duration_s: float | None
    sm_pct: float | None
    memory_pct: float | None
    dram_pct: float | None
    device_name: str
    cc: str
    nvtx: str


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "").replace(" ", "")
    if t == "" or t.lower() == "n/a":
        return None
    try:
        value = float(t)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _lines(path: str | Path) -> tuple[str, list[list[str]], int]:
    """(file name, CSV records from the header on, line number of the header)."""
    p = Path(path)
    name = str(path)
    if not p.is_file():
        raise PerfmodelError(name, "file not found", "pass the path of an Nsight Compute CSV "
                             "export or a torch.profiler trace (.json)")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PerfmodelError(name, f"cannot read as UTF-8 text ({exc.__class__.__name__}): a "
                             "corrupt or binary file", _EXPORT_FIX) from None
    if "\x00" in text:
        raise PerfmodelError(name, "contains NUL bytes: a corrupt or binary file", _EXPORT_FIX)
    if not text.strip():
        raise PerfmodelError(name, "the file is empty: an empty export", _EXPORT_FIX)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.lstrip().startswith(('"ID"', "ID,"))), None)
    if start is None:
        if "No kernels were profiled" in text:
            raise PerfmodelError(name, "an empty export: ncu profiled no kernels",
                                 "check ncu's --kernel-name / --launch-skip / --launch-count "
                                 "filters, then export again")
        raise PerfmodelError(name, "no Nsight Compute table in the file (no header line "
                             "starting with \"ID\")", _EXPORT_FIX)
    records = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return name, records, start + 1


def _nvtx_column(header: Sequence[str]) -> int | None:
    return next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)


def _launches(path: str | Path) -> tuple[str, list[NcuLaunch], list[str]]:
    """(file name, the launches in file order, notes on how they were read)."""
    name, records, first = _lines(path)
    header = [h.strip() for h in records[0]]
    col = {h: i for i, h in enumerate(header)}
    if "Kernel Name" not in col:
        raise PerfmodelError(name, f"the table has no 'Kernel Name' column (header: "
                             f"{', '.join(header[:8])})", _EXPORT_FIX)
    nvtx = _nvtx_column(header)
    long = "Metric Name" in col and "Metric Value" in col
    body = records[1:]
    units: list[str] = [""] * len(header)
    if not long and body and not body[0][col["ID"]].strip():
        units, body = body[0], body[1:]
    # One launch per line of the raw page; on the details page, one per run of lines with
    # the same ID and kernel in which no (section, metric, unit) repeats. A repeated ID (two
    # processes, IDs restarting) is a launch of its own, never merged with the first.
    metrics: list[dict[str, list[tuple[str, str]]]] = []
    meta: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    lines_of: dict[str, list[int]] = {}
    kname = col["Kernel Name"]
    for offset, row in enumerate(body, start=first + (1 if long else 2)):
        if not any(cell.strip() for cell in row):
            continue
        if row and row[0].startswith("=="):  # ==PROF==, ==WARNING== lines of ncu
            continue
        if row[0].strip() == "ID":  # a header line starts with "ID", as _lines finds it
            raise PerfmodelError(f"{name}:{offset}", f"the header line repeats here (first on "
                                 f"line {first}): two exports appended into one file",
                                 "import each export on its own (split the file at this line)")
        if len(row) != len(header):
            raise PerfmodelError(f"{name}:{offset}", f"{len(row)} fields where the header has "
                                 f"{len(header)} (a truncated or corrupt export)", _EXPORT_FIX)
        kid = row[col["ID"]].strip() if "ID" in col else str(offset)
        metric: tuple[str, ...] = ()
        if long:
            metric = tuple(row[col[h]].strip() if h in col else ""
                           for h in ("Section Name", "Metric Name", "Metric Unit"))
        last = meta[-1] if meta else None
        same = (long and last is not None and last[kname] == row[kname]
                and ("ID" not in col or last[col["ID"]].strip() == kid) and metric not in seen)
        if not same:
            meta.append([*row, str(offset)])
            metrics.append({})
            seen = set()
            lines_of.setdefault(kid, []).append(offset)
        seen.add(metric)
        if long:
            metrics[-1].setdefault(metric[1], []).append((row[col["Metric Value"]], metric[2]))
        else:
            for h, i in col.items():
                metrics[-1][h] = [(row[i], units[i].strip() if i < len(units) else "")]
    if not meta:
        raise PerfmodelError(name, "an empty export: the table has a header but no kernel "
                             "rows", "profile at least one kernel, then export again")
    out = []
    for m, row in zip(metrics, meta, strict=True):
        kid = row[col["ID"]].strip() if "ID" in col else row[-1]

        def get(names: Sequence[str], unit: str | None = None,
                m: Mapping[str, list[tuple[str, str]]] = m) -> tuple[float | None, str]:
            for n in names:
                for value, got in m.get(n, ()):
                    if unit is None or got in (unit, ""):
                        return _number(value), got
            return None, ""

        value, unit = get(_DURATION)
        duration = None
        if value is not None:
            scale = _TIME_UNITS.get(unit.strip().lower())
            if scale is None:
                raise PerfmodelError(f"{name}:{row[-1]}", f"duration unit {unit!r} is not a "
                                     "time unit", "export with --print-units base")
            duration = value * scale
        display = next((m[n][0][0].strip() for n in _NAME if m.get(n)), "")
        out.append(NcuLaunch(
            line=int(row[-1]), id=kid, kernel=row[col["Kernel Name"]].strip(),
            duration_s=duration, sm_pct=get(_SM, "%")[0], memory_pct=get(_MEMORY, "%")[0],
            dram_pct=get(_DRAM, "%")[0], device_name=display,
            cc=row[col["CC"]].strip() if "CC" in col else "",
            nvtx=row[nvtx] if nvtx is not None else ""))
    if all(launch.duration_s is None for launch in out):
        raise PerfmodelError(name, "no kernel duration in the export (metric "
                             "gpu__time_duration.sum, or 'Duration' of the SpeedOfLight "
                             "section)", _EXPORT_FIX)
    repeats = {k: v for k, v in lines_of.items() if len(v) > 1}
    notes = [f"launch ID {k} appears {len(v)} times (lines {', '.join(map(str, v))}): each "
             "read as a launch of its own" for k, v in list(repeats.items())[:5]]
    if len(repeats) > 5:
        notes.append(f"... and {len(repeats) - 5} more repeated launch IDs")
    return name, out, notes


_OPNAME = re.compile(r"[A-Za-z_][\w.]*::[A-Za-z_][\w.]*")


def _brackets(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def nvtx_calls(cell: str) -> list[tuple[str, list[list[int]], str]]:
    """Operator calls named in an NVTX range stack, outermost first: (operator name,
    recorded sizes, the range text up to its sizes). Ranges without ``sizes = [...]`` are
    left out."""
    out: list[tuple[str, list[list[int]], str]] = []
    for match in _OPNAME.finditer(cell):
        tail = cell[match.end():]
        info = re.match(r"((?:\s*,\s*(?:seq|op_id|stashed seq)\s*=\s*\d+)*)\s*,\s*sizes\s*=\s*",
                        tail)
        if not info:
            continue
        begin = match.end() + info.end()
        if begin >= len(cell) or cell[begin] != "[":
            continue
        end = _brackets(cell, begin)
        if end < 0:
            continue
        try:
            sizes = json.loads(cell[begin:end])
        except ValueError:
            continue
        if isinstance(sizes, list) and all(isinstance(s, list) for s in sizes):
            out.append((match.group(0), sizes, cell[match.start():end]))
    return out


def _device(name: str, launches: Sequence[NcuLaunch]) -> Device:
    names = sorted({x.device_name for x in launches if x.device_name})
    ccs = sorted({x.cc for x in launches if x.cc})
    if len(names) > 1 or len(ccs) > 1:
        raise PerfmodelError(name, "the export covers several GPUs ("
                             f"{', '.join(names or ccs)})",
                             "export one GPU per file (ncu --devices N)")
    cc = None
    if ccs:
        match = re.fullmatch(r"(\d+)\.(\d+)", ccs[0])
        cc = (int(match.group(1)), int(match.group(2))) if match else None
    evidence = ("device__attribute_display_name" if names else
                "the CC column (no device__attribute_display_name metric)" if cc else
                "neither device__attribute_display_name nor a CC column")
    return Device(kind="gpu", name=names[0] if names else "", compute_capability=cc,
                  evidence=evidence)


def _weighted(values: Sequence[tuple[float | None, float]]) -> float | None:
    pairs = [(v, w) for v, w in values if v is not None]
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return sum(v * w for v, w in pairs) / total


def read_ncu(path: str | Path, *, dtype: str | None = None, causal: bool = False) -> Capture:
    """Read an Nsight Compute CSV export into a :class:`Capture` (see the module doc).

    ``dtype`` overrides the dtype read from kernel names; ``causal`` says the exported
    attention calls were causal (an export does not record it). Raises
    :class:`PerfmodelError` naming the file (and line) for a missing, empty, binary,
    truncated or headerless file, one without kernel durations, and one holding two exports
    appended (the header line repeats). A launch ID that repeats (two processes, IDs
    restarting) is read as a launch of its own, with a note.
    """
    name, launches, notes = _launches(path)
    device = _device(name, launches)
    groups: list[tuple[str, MappedOp | str | None, str, list[NcuLaunch]]] = []
    for launch in launches:
        call: tuple[str, MappedOp | str | None, str] = ("", None, "")
        calls = nvtx_calls(launch.nvtx)
        kdtype = dtype or dtype_from_kernel(launch.kernel)
        reasons: list[str] = []
        names = [c[0] for c in calls]
        for opname, sizes, text in calls:
            got = map_op(opname, sizes, hints=[*names, launch.kernel], dtype=kdtype or "fp32")
            if isinstance(got, MappedOp):
                if kdtype is None:
                    got = (f"{opname}: the kernel's name states no dtype (pass --dtype)")
                elif got.op == "attention":
                    got = dataclasses.replace(got, causal=causal)
                call = (opname, got, text)
                break
            if isinstance(got, str):
                reasons.append(got)
        if call[1] is None:
            why = (reasons[0] if reasons else
                   "no NVTX range with shapes (run the program under torch.autograd.profiler"
                   ".emit_nvtx(record_shapes=True) and ncu with --nvtx)" if not calls else
                   f"no perfmodel op among its NVTX ranges ({', '.join(names)})")
            call = ("", why, "")
        last = groups[-1] if groups else None
        if (last is not None and isinstance(call[1], MappedOp) and last[2] == call[2]
                and isinstance(last[1], MappedOp)
                and all(x.kernel != launch.kernel for x in last[3])):
            last[3].append(launch)
        else:
            groups.append((call[0], call[1], call[2], [launch]))
    units: list[Unit] = []
    unmatched: list[Unmatched] = []
    untimed = 0
    ids = Counter(x.id for x in launches)
    for opname, got, _text, members in groups:
        timed = [x for x in members if x.duration_s is not None]
        untimed += len(members) - len(timed)
        if isinstance(got, MappedOp) and timed:
            weights = [(x, x.duration_s or 0.0) for x in timed]
            units.append(Unit(
                op=got, measured_s=sum(w for _, w in weights), source_op=opname,
                kernels=tuple(dict.fromkeys(x.kernel for x in timed)),
                sm_pct=_weighted([(x.sm_pct, w) for x, w in weights]),
                memory_pct=_weighted([(x.memory_pct, w) for x, w in weights]),
                dram_pct=_weighted([(x.dram_pct, w) for x, w in weights])))
            continue
        for x in timed:
            reason = got if isinstance(got, str) else "maps to no perfmodel op"
            family = kernel_family(x.kernel)
            if family:
                reason += f"; the kernel's name looks like {family}"
            unmatched.append(Unmatched(x.kernel, "kernel", reason, x.duration_s or 0.0,
                                       context=f"ID {x.id}" + (
                                           f", line {x.line}" if ids[x.id] > 1 else ""),
                                       sm_pct=x.sm_pct,
                                       memory_pct=x.memory_pct, dram_pct=x.dram_pct))
    if untimed:
        notes.append(f"{untimed} launch(es) without a duration value were left out")
    notes.append("ncu locks clocks to base by default (--clock-control base) and flushes "
                 "caches before each kernel (--cache-control all): its times can run longer "
                 "than the boost-clock peaks of a spec assume")
    return Capture(path=name, format="nsight-compute", device=device, units=tuple(units),
                   unmatched=tuple(unmatched), timing=TIMING, notes=tuple(notes))
