"""Read a ``torch.profiler`` Chrome trace (``prof.export_chrome_trace(path)``, recorded with
``record_shapes=True``) into a :class:`~perfmodel.calibrate.capture.Capture`. Plain JSON
(or gzip-compressed JSON): torch is not needed.

The trace's ``traceEvents`` hold complete events (``ph: X``, ``ts``/``dur`` in µs):

- ``cat: cpu_op``: one per operator call on a host thread, with ``args`` ``Input Dims``,
  ``Input type``, ``Concrete Inputs`` (with ``record_shapes``) and ``External id``.
  Operator calls nest by time on their thread (``aten::linear`` holds ``aten::addmm``).
- ``cat: kernel`` (and ``gpu_memcpy``, ``gpu_memset``): GPU work, with ``args``
  ``External id`` (the operator that launched it), ``correlation`` (shared with the
  ``cuda_runtime`` launch call) and ``device``. Flow events (``ph: s``/``f``, same ``id``)
  join the launch call to the kernel too.

Each kernel is linked to the innermost operator that launched it: by ``External id``;
else through its launch call (``correlation``, or a flow event) and the operator whose
span holds that call on the same thread. The op call it measures is the *outermost*
operator on that chain which maps to a perfmodel op (:func:`perfmodel.calibrate.opmap.map_op`):
``aten::linear`` rather than the ``aten::addmm`` inside it, the whole
``aten::scaled_dot_product_attention`` rather than its backend. A call's time is the sum of
its kernels (timing code ``torch_profiler_trace_kernel_sum``). Under ``torch.autocast`` a call
is recorded twice, the outer one with the caller's input types around the casts and the
inner one with the cast inputs: the inner call is the one measured (the dtype its kernel
ran, without the casts' time), and the casts are listed as unmatched. Host-device and
peer-to-peer memcpy events (``aten::copy_`` of a tensor to or from the host) are listed
as unmatched: they are transfers, not work on the GPU perfmodel's copy models.

A trace with no GPU work was recorded on the CPU: the op calls are the outermost mapped
operators on each thread, timed by their span (``torch_profiler_trace_cpu_op``). Kernels
(GPU) or leaf operators (CPU) that map to no op are listed with the reason, never dropped.
On the CPU an operator that maps to no op (or whose call was refused) but holds nested
calls is replaced by them; its own time outside them is listed as unmatched with its
reason, so the rows and the unmatched list together account for every top-level span.
"""

from __future__ import annotations

import bisect
import dataclasses
import gzip
import json
import re
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.capture import Capture, Device, Unit, Unmatched
from perfmodel.calibrate.opmap import MappedOp, kernel_family, map_op

__all__ = ["TIMING_CPU", "TIMING_GPU", "load_trace_json", "read_trace"]

#: ``timing`` code of rows from a GPU trace: the op call's kernels summed.
TIMING_GPU = "torch_profiler_trace_kernel_sum"
#: ``timing`` code of rows from a CPU trace: the op call's span on its host thread.
TIMING_CPU = "torch_profiler_trace_cpu_op"

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_RECORD_FIX = ("record with torch.profiler.profile(record_shapes=True) and export with "
               "prof.export_chrome_trace(path) after the profiled region")
#: Reason prefix of the time an unmapped operator spent outside its nested calls (CPU).
_SELF_TIME = "self time outside its nested operator calls"
#: Reason of work inside an autocast call outside the call it re-dispatches (the casts).
_AUTOCAST = ("autocast's wrapper and input casts around the re-dispatched call (that call is "
             "measured on its own, in the dtype its kernel ran)")
#: GPU activity that moves bytes across the host link or between GPUs (Kineto names memcpy
#: events ``Memcpy HtoD (Pageable -> Device)``, ``Memcpy DtoH ...``, ``Memcpy PtoP ...``);
#: ``Memcpy DtoD`` stays within one GPU.
_TRANSFER = re.compile(r"Memcpy (HtoD|DtoH|HtoH|PtoP|HtoA|AtoH)\b")
#: Slack when nesting spans: the trace rounds times to 1 ns (0.001 µs).
_EPS_US = 2e-3


def load_trace_json(path: str | Path) -> Any:
    """The parsed JSON of a trace file (gzip allowed). Raises :class:`PerfmodelError`
    naming the file for a missing, empty, binary, truncated or corrupt file."""
    p = Path(path)
    name = str(path)
    if not p.is_file():
        raise PerfmodelError(name, "file not found", "pass the path of a torch.profiler trace "
                             "(.json) or an Nsight Compute CSV export")
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            raise PerfmodelError(name, "a gzip file that cannot be decompressed (truncated "
                                 "or corrupt)", "export the trace again") from None
    if not raw.strip():
        raise PerfmodelError(name, "the file is empty", _RECORD_FIX)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PerfmodelError(name, "cannot read as UTF-8 JSON (a corrupt or binary file)",
                             _RECORD_FIX) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        problem = ("truncated: the JSON ends early" if exc.pos >= len(text.rstrip()) - 1
                   else "corrupt JSON")
        raise PerfmodelError(name, f"not a readable trace: {problem} ({exc.msg} at {where})",
                             "export the trace again (export_chrome_trace writes it whole "
                             "once the profiler has stopped)") from None


@dataclass
class _Op:
    """One operator call on a host thread; times in µs."""

    index: int
    name: str
    thread: tuple[Any, Any]
    start: float
    end: float
    args: Mapping[str, Any]
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    kernels: list[int] = field(default_factory=list)


def _args(event: Mapping[str, Any]) -> Mapping[str, Any]:
    args = event.get("args")
    return args if isinstance(args, Mapping) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _span(event: Mapping[str, Any]) -> tuple[float, float] | None:
    ts, dur = _num(event.get("ts")), _num(event.get("dur"))
    if ts is None or dur is None or dur < 0:
        return None
    return ts, ts + dur


def _nest(ops: list[_Op]) -> dict[tuple[Any, Any], list[int]]:
    """Set parent/children by time containment per thread; returns each thread's ops
    sorted by start."""
    by_thread: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for op in ops:
        by_thread[op.thread].append(op.index)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (ops[i].start, -(ops[i].end - ops[i].start), i))
        stack: list[int] = []
        for i in indices:
            op = ops[i]
            while stack and ops[stack[-1]].end + _EPS_US < op.end:
                stack.pop()
            if stack:
                op.parent = stack[-1]
                ops[stack[-1]].children.append(i)
            stack.append(i)
    return by_thread


def _innermost(ops: list[_Op], starts: dict[tuple[Any, Any], list[float]],
               order: dict[tuple[Any, Any], list[int]], thread: tuple[Any, Any],
               ts: float) -> int | None:
    """The innermost operator on ``thread`` whose span holds time ``ts``."""
    if thread not in order:
        return None
    j = bisect.bisect_right(starts[thread], ts + _EPS_US) - 1
    i: int | None = order[thread][j] if j >= 0 else None
    while i is not None and ops[i].end + _EPS_US < ts:
        i = ops[i].parent
    return i


def _device(doc: Mapping[str, Any], gpu: list[Mapping[str, Any]], path: str) -> Device:
    props = doc.get("deviceProperties")
    props = props if isinstance(props, list) else []
    if not gpu:
        listed = ", ".join(str(p.get("name")) for p in props if isinstance(p, Mapping))
        why = ("no GPU activity events" + (f" (deviceProperties lists {listed}, but no "
               "kernel ran on it)" if listed else " and an empty deviceProperties"))
        return Device(kind="cpu", evidence=why)
    used = sorted({str(_args(e).get("device", "")) for e in gpu})
    by_id = {str(p.get("id")): p for p in props if isinstance(p, Mapping)}
    named = [by_id[d] for d in used if d in by_id]
    if not named and len(by_id) == 1:  # kernels without a device id, one GPU traced
        named = list(by_id.values())
    names = sorted({str(p.get("name", "")) for p in named})
    if len(names) > 1:
        raise PerfmodelError(path, f"kernels ran on several different GPUs ({', '.join(names)})",
                             "profile one GPU per trace (one process per device)")
    if not named:
        return Device(kind="gpu", evidence=f"GPU kernels on device {', '.join(used)}, but no "
                      "deviceProperties entry for it")
    p = named[0]
    major, minor = p.get("computeMajor"), p.get("computeMinor")
    cc = (int(major), int(minor)) if isinstance(major, int) and isinstance(minor, int) else None
    return Device(kind="gpu", name=str(p.get("name", "")), compute_capability=cc,
                  evidence=f"deviceProperties of device {p.get('id')}, which ran its "
                  f"{len(gpu)} GPU event(s)")


def _call(op: _Op, hints: Sequence[str]) -> MappedOp | str | None:
    a = op.args
    dims = a.get("Input Dims")
    types = a.get("Input type")
    concrete = a.get("Concrete Inputs")
    return map_op(op.name, dims if isinstance(dims, list) else [],
                  types if isinstance(types, list) else [],
                  concrete if isinstance(concrete, list) else [], hints)


class _Mapper:
    """Maps operator calls once each, with the names nested under them as hints."""

    def __init__(self, ops: list[_Op], events: Sequence[Mapping[str, Any]]) -> None:
        self.ops = ops
        self.events = events
        self.cache: dict[int, MappedOp | str | None] = {}
        self.redispatched: dict[int, int | None] = {}

    def hints(self, i: int) -> list[str]:
        out: list[str] = []
        todo = list(self.ops[i].children)
        while todo and len(out) < 200:
            j = todo.pop()
            out.append(self.ops[j].name)
            out.extend(str(self.events[k].get("name", "")) for k in self.ops[j].kernels)
            todo.extend(self.ops[j].children)
        out.extend(str(self.events[k].get("name", "")) for k in self.ops[i].kernels)
        return out

    def __call__(self, i: int) -> MappedOp | str | None:
        if i not in self.cache:
            # only attention reads hints (its kernel path); other ops skip the subtree walk
            hints = self.hints(i) if "attention" in self.ops[i].name else []
            self.cache[i] = _call(self.ops[i], hints)
        return self.cache[i]

    def redispatch(self, i: int) -> int | None:
        """The call nested directly in mapped call ``i`` that runs the same operator on the
        same shape again, or None. ``torch.autocast`` records a call twice: the outer one
        with the caller's input types (fp32), holding the casts (``aten::to``) and the
        inner call with the cast inputs (bf16), which runs the kernel. Found once a call."""
        if i not in self.redispatched:
            outer = self(i)
            same = [j for j in self.ops[i].children if self.ops[j].name == self.ops[i].name
                    and isinstance(inner := self(j), MappedOp)
                    and dataclasses.replace(inner, dtype=outer.dtype) == outer] \
                if isinstance(outer, MappedOp) else []
            self.redispatched[i] = same[0] if len(same) == 1 else None
        return self.redispatched[i]

    def owner(self, chain: Sequence[int]) -> int | None:
        """The op call measured through ``chain`` (innermost first): its outermost mapped
        operator, or the re-dispatched call inside that (see :meth:`redispatch`); None when
        no operator maps, or when the chain leaves the call outside its re-dispatched call
        (autocast's input casts)."""
        i = next((i for i in reversed(chain) if isinstance(self(i), MappedOp)), None)
        while i is not None and (j := self.redispatch(i)) is not None:
            i = j if j in chain else None
        return i

    def chain(self, i: int | None) -> list[int]:
        """Operators from ``i`` up to its thread's root, innermost first."""
        out: list[int] = []
        while i is not None:
            out.append(i)
            i = self.ops[i].parent
        return out


def _link(ops: list[_Op], events: Sequence[Mapping[str, Any]], gpu: list[int],
          by_thread: dict[tuple[Any, Any], list[int]]) -> dict[int, int | None]:
    """Kernel event index -> innermost launching operator (None when none is found)."""
    by_ext: dict[Any, int] = {}
    for call in ops:
        ext = call.args.get("External id")
        if ext is not None:
            by_ext.setdefault(ext, call.index)
    starts = {t: [ops[i].start for i in idx] for t, idx in by_thread.items()}
    launches: dict[Any, tuple[tuple[Any, Any], float]] = {}
    flow_start: dict[Any, tuple[tuple[Any, Any], float]] = {}
    flow_end: dict[tuple[Any, Any, float], Any] = {}
    for e in events:
        cat, ph = e.get("cat"), e.get("ph")
        ts = _num(e.get("ts"))
        if ts is None:
            continue
        thread = (e.get("pid"), e.get("tid"))
        if ph == "X" and cat in ("cuda_runtime", "cuda_driver", "hip_runtime"):
            corr = _args(e).get("correlation")
            if corr is not None:
                launches[corr] = (thread, ts)
        elif ph == "s" and cat == "ac2g":
            flow_start[e.get("id")] = (thread, ts)
        elif ph == "f" and cat == "ac2g":
            flow_end[(e.get("pid"), e.get("tid"), ts)] = e.get("id")
    out: dict[int, int | None] = {}
    for k in gpu:
        e = events[k]
        args = _args(e)
        op = by_ext.get(args.get("External id"))
        if op is None:
            where = launches.get(args.get("correlation"))
            if where is None:
                fid = flow_end.get((e.get("pid"), e.get("tid"), _num(e.get("ts")) or 0.0))
                where = flow_start.get(fid) if fid is not None else None
            if where is not None:
                op = _innermost(ops, starts, by_thread, where[0], where[1])
        out[k] = op
    return out


def read_trace(path: str | Path) -> Capture:
    """Read a torch.profiler Chrome trace into a :class:`Capture` (see the module doc).

    Raises :class:`PerfmodelError` naming the file and the fix for a missing, empty,
    truncated or corrupt file, a JSON file that is no trace, a trace without operator
    events or recorded without ``record_shapes=True``, and a trace in which no operator
    call maps to a perfmodel op.
    """
    name = str(path)
    doc = load_trace_json(path)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise PerfmodelError(name, "not a torch.profiler Chrome trace (no traceEvents list)",
                             _RECORD_FIX)
    if not events:
        raise PerfmodelError(name, "an empty trace: traceEvents holds no events",
                             "profile a region that runs the model (the profiler context "
                             "must enclose the work), then export it")
    ops: list[_Op] = []
    gpu: list[int] = []
    malformed = 0
    for k, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat not in ("cpu_op", *_GPU_CATS):
            continue
        span = _span(e)
        if span is None:
            malformed += 1
            continue
        if cat == "cpu_op":
            ops.append(_Op(len(ops), str(e.get("name", "")), (e.get("pid"), e.get("tid")),
                           span[0], span[1], _args(e)))
        else:
            gpu.append(k)
    if not ops:
        raise PerfmodelError(name, "no operator events (cat 'cpu_op') in the trace: not a "
                             "torch.profiler trace, or nothing ran while it recorded",
                             _RECORD_FIX)
    if not any("Input Dims" in op.args for op in ops):
        raise PerfmodelError(name, "recorded without shapes: no operator has 'Input Dims'",
                             "record again with torch.profiler.profile(record_shapes=True)")
    device = _device(doc, [events[k] for k in gpu], name)
    by_thread = _nest(ops)
    mapper = _Mapper(ops, events)
    notes = [f"{malformed} event(s) without a valid ts/dur were ignored"] if malformed else []
    if device.kind == "gpu":
        units, unmatched, more = _gpu_units(ops, events, gpu, by_thread, mapper)
        timing = TIMING_GPU
    else:
        units, unmatched, more = _cpu_units(ops, by_thread, mapper)
        timing = TIMING_CPU
    notes += more
    if not units:
        listed = "; ".join(f"{u.name}: {u.reason}" for u in unmatched[:3])
        raise PerfmodelError(name, "no operator call maps to a perfmodel op"
                             + (f" (e.g. {listed})" if listed else ""),
                             "profile GEMMs (mm/addmm/bmm/matmul/linear), "
                             "scaled_dot_product_attention, norms, softmax, activations, "
                             "adds or copies")
    return Capture(path=name, format="torch-profiler", device=device, units=tuple(units),
                   unmatched=tuple(unmatched), timing=timing, notes=tuple(notes))


def _cpu_units(ops: list[_Op], by_thread: dict[tuple[Any, Any], list[int]],
               mapper: _Mapper) -> tuple[list[Unit], list[Unmatched], list[str]]:
    units: list[Unit] = []
    unmatched: list[Unmatched] = []

    def visit(i: int, context: str) -> None:
        op = ops[i]
        got = mapper(i)
        if isinstance(got, MappedOp) and mapper.redispatch(i) is None:
            units.append(Unit(op=got, measured_s=(op.end - op.start) * 1e-6,
                              source_op=op.name))
            return
        reason = (got if isinstance(got, str) else _AUTOCAST if got is not None
                  else "perfmodel models no such operator")
        if op.children:
            for j in op.children:
                visit(j, op.name)
            inner = sum(ops[j].end - ops[j].start for j in op.children)
            own = max(0.0, (op.end - op.start) - inner)
            if own > 0:
                unmatched.append(Unmatched(op.name, "op", f"{_SELF_TIME}: {reason}",
                                           own * 1e-6, context))
            return
        unmatched.append(Unmatched(op.name, "op", reason, (op.end - op.start) * 1e-6, context))

    for indices in by_thread.values():
        for i in indices:
            if ops[i].parent is None:
                visit(i, "")
    return units, unmatched, []


def _gpu_units(ops: list[_Op], events: Sequence[Mapping[str, Any]], gpu: list[int],
               by_thread: dict[tuple[Any, Any], list[int]],
               mapper: _Mapper) -> tuple[list[Unit], list[Unmatched], list[str]]:
    link = _link(ops, events, gpu, by_thread)
    for k, i in link.items():
        if i is not None:
            ops[i].kernels.append(k)
    calls: dict[int, list[int]] = defaultdict(list)
    unmatched: list[Unmatched] = []
    for k in gpu:
        e = events[k]
        kname = str(e.get("name", ""))
        dur = (_num(e.get("dur")) or 0.0) * 1e-6
        chain = mapper.chain(link[k])
        transfer = _TRANSFER.match(kname)
        if transfer:
            where = "between two GPUs" if transfer.group(1) == "PtoP" else "host-device"
            unmatched.append(Unmatched(
                kname, "kernel", f"a {where} transfer, not a device kernel: perfmodel's "
                "copy moves bytes within one GPU's memory", dur,
                " < ".join(ops[i].name for i in chain[:3])))
            continue
        if not chain:
            unmatched.append(Unmatched(kname, "kernel", "launched outside any recorded "
                                       "operator (no External id, launch call or flow event "
                                       "links it)", dur))
            continue
        owner = mapper.owner(chain)
        if owner is not None:
            calls[owner].append(k)
            continue
        reasons = [r for r in (mapper(i) for i in chain) if isinstance(r, str)]
        reason = reasons[0] if reasons else (
            f"perfmodel models no such operator ({ops[chain[0]].name})")
        wrapper = next((i for i in chain if mapper.redispatch(i) is not None), None)
        if wrapper is not None:
            reason += f"; {_AUTOCAST}: {ops[wrapper].name}"
        family = kernel_family(kname)
        if family:
            reason += f"; the kernel's name looks like {family}"
        context = " < ".join(ops[i].name for i in chain[:3])
        unmatched.append(Unmatched(kname, "kernel", reason, dur, context))
    units = []
    for i in sorted(calls, key=lambda j: ops[j].start):
        op = mapper(i)
        assert isinstance(op, MappedOp)
        ks = calls[i]
        names = tuple(dict.fromkeys(str(events[k].get("name", "")) for k in ks))
        units.append(Unit(op=op, measured_s=sum((_num(events[k].get("dur")) or 0.0)
                                                for k in ks) * 1e-6,
                          source_op=ops[i].name, kernels=names))
    idle = sum(1 for i in range(len(ops)) if mapper.owner(mapper.chain(i)) == i
               and i not in calls)
    notes = ([f"{idle} mapped operator call(s) launched no GPU kernel (they ran on the host "
              "or were views): not measured"] if idle else [])
    return units, unmatched, notes
