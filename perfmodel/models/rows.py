"""Per-op rows of a model prediction: ops of a graph summed by name over their occurrences.

``OpRow`` is one op kind (QKV projection, attention...) of one pass or request: time,
its share, the compute, memory and fixed parts, FLOPs, bytes, arithmetic intensity and
bottleneck. ``PhaseResult`` is one pass (a prefill or a decode step) with its rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.models.evaluate import GraphTiming
from perfmodel.ops.cost import Array
from perfmodel.timing.prediction import Value

__all__ = ["NUMERIC", "Label", "OpRow", "PhaseResult", "aggregate", "label_of", "to_json",
           "value", "with_host", "with_stage_sends"]

Label = str | np.ndarray[Any, np.dtype[np.str_]]
#: Summed fields of a row, in this order.
NUMERIC = ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes")


def value(x: Array) -> Value:
    """A 0-d array as a float, else the array (fast :func:`as_value` for float arrays)."""
    return float(x) if x.ndim == 0 else x


def label_of(x: Any) -> Label:
    arr = np.asarray(x)
    return str(arr.item()) if arr.ndim == 0 else arr.astype(np.str_)


def to_json(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        clean = np.where(np.isfinite(arr), arr, np.nan).astype(object)
        clean[~np.isfinite(arr)] = None
        return clean.tolist() if arr.ndim else clean.item()
    return arr.tolist() if arr.ndim else arr.item()


@dataclass(frozen=True)
class OpRow:
    """One op kind of the model, summed over its occurrences in one pass (or request).

    ``latency_s`` etc. are totals over ``count`` occurrences; ``share`` is the fraction of
    the pass's time; ``arithmetic_intensity`` = flops / bytes (FLOP/byte).
    """

    name: str
    kind: str
    phase: str
    count: Value
    latency_s: Value
    share: Value
    compute_s: Value
    memory_s: Value
    overhead_s: Value
    flops: Value
    bytes: Value
    arithmetic_intensity: Value
    bottleneck: Label

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "phase": self.phase}
        for key in ("count", "latency_s", "share", "compute_s", "memory_s", "overhead_s",
                    "flops", "bytes", "arithmetic_intensity", "bottleneck"):
            out[key] = to_json(getattr(self, key))
        return out


@dataclass(frozen=True)
class PhaseResult:
    """One forward pass (prefill, or one decode step): totals and the per-op rows."""

    phase: str
    latency_s: Value
    compute_s: Value
    memory_s: Value
    overhead_s: Value
    flops: Value
    bytes: Value
    ops: tuple[OpRow, ...]

    def op(self, name: str) -> OpRow:
        """The row called ``name`` (KeyError if the graph has no such op)."""
        for row in self.ops:
            if row.name == name:
                return row
        raise KeyError(name)


def aggregate(timing: GraphTiming, phase: str, weights: Array | None = None) -> PhaseResult:
    """Sum a graph's ops into rows by name (count × per-instance value). With ``weights``
    (trapezoid weights over the last axis, the decode context points) the rows are the
    weighted mean over that axis; the bottleneck is taken at its middle point."""
    names: list[str] = []
    for n in timing.names:
        if n not in names:
            names.append(n)
    index = [names.index(n) for n in timing.names]
    first = [index.index(i) for i in range(len(names))]
    # every field at once: (field, op, *points), fields in NUMERIC order
    contrib = timing.counts * np.stack([timing.values[f] for f in NUMERIC])
    labels = timing.bottleneck[first]
    counts = timing.counts[first]
    if len(names) == len(index):  # every name once: its row is its op
        sums = contrib
    else:
        onehot = np.zeros((len(names), len(index)))
        onehot[index, np.arange(len(index))] = 1.0
        sums = np.stack([np.tensordot(onehot, c, axes=(1, 0)) for c in contrib])
        for i, n in enumerate(names):  # a name with several ops: the bottleneck of the longest
            rows = [j for j, m in enumerate(timing.names) if m == n]
            if len(rows) > 1:
                best = np.argmax(contrib[0][rows], axis=0)
                labels[i] = np.take_along_axis(timing.bottleneck[rows], best[None], axis=0)[0]
                counts[i] = np.max(timing.counts[rows], axis=0)
    if weights is not None:
        sums = np.sum(sums * weights, axis=-1)
        labels = labels[..., labels.shape[-1] // 2]
        counts = counts[..., 0]
    total = np.sum(sums, axis=1)
    share = sums[0] / np.maximum(total[0], 1e-30)
    intensity = sums[4] / np.maximum(sums[5], 1e-30)
    kinds = [timing.kinds[j] for j in first]
    if sums.ndim == 2:  # one value per row: plain floats and strings, made at once
        lat, comp, mem, over, flops, byts = sums.tolist()
        cnt, shr, ai, lab = counts.tolist(), share.tolist(), intensity.tolist(), labels.tolist()
        rows_out = tuple(
            OpRow(name=n, kind=kinds[i], phase=phase, count=cnt[i], latency_s=lat[i],
                  share=shr[i], compute_s=comp[i], memory_s=mem[i], overhead_s=over[i],
                  flops=flops[i], bytes=byts[i], arithmetic_intensity=ai[i],
                  bottleneck=str(lab[i]))
            for i, n in enumerate(names))
    else:
        rows_out = tuple(
            OpRow(name=n, kind=kinds[i], phase=phase, count=value(counts[i]),
                  latency_s=value(sums[0][i]), share=value(share[i]),
                  compute_s=value(sums[1][i]), memory_s=value(sums[2][i]),
                  overhead_s=value(sums[3][i]), flops=value(sums[4][i]),
                  bytes=value(sums[5][i]), arithmetic_intensity=value(intensity[i]),
                  bottleneck=label_of(labels[i]))
            for i, n in enumerate(names))
    return PhaseResult(phase=phase, ops=rows_out,
                       **{f: value(total[k]) for k, f in enumerate(NUMERIC)})


def _with_row(res: PhaseResult, t: Any, *, name: str, kind: str, count: float, part: str,
              bottleneck: str, moved: Any = None) -> PhaseResult:
    """``res`` with one more row of ``t`` seconds (a number or an array broadcastable to
    the pass's points) counted as its ``part`` (``overhead_s`` or ``memory_s``), moving
    ``moved`` bytes if given; the pass's totals grow by them and the other rows' shares
    are rescaled."""
    total = np.asarray(res.latency_s) + t
    zero = value(np.zeros_like(total))
    full = value(t * np.ones_like(total))
    if moved is not None:
        moved = np.asarray(moved, dtype=np.float64) * np.ones_like(total)
    rows = tuple(dataclasses.replace(r, share=value(np.asarray(r.latency_s) / total))
                 for r in res.ops)
    row = OpRow(name=name, kind=kind, phase=res.phase, count=count, latency_s=full,
                share=value(t / total), compute_s=zero,
                memory_s=full if part == "memory_s" else zero,
                overhead_s=full if part == "overhead_s" else zero, flops=zero,
                bytes=zero if moved is None else value(moved), arithmetic_intensity=zero,
                bottleneck=bottleneck)
    grown: dict[str, Any] = {"latency_s": value(total),
                             part: value(np.asarray(getattr(res, part)) + t)}
    if moved is not None:
        grown["bytes"] = value(np.asarray(res.bytes) + moved)
    return dataclasses.replace(res, **grown, ops=(*rows, row))


def with_host(res: PhaseResult, host_s: Any, name: str = "engine step (host)") -> PhaseResult:
    """``res`` with a row for the engine's host time per pass (scheduler, input preparation,
    sampling: the GPU idle between one pass's kernels and the next), ``host_s`` seconds (a
    number or an array broadcastable to the pass's points), counted as fixed overhead
    (bottleneck ``latency``); the other rows' shares rescaled."""
    host_s = np.asarray(host_s, dtype=np.float64)
    if not np.any(host_s > 0.0):
        return res
    return _with_row(res, host_s, name=name, kind="host", count=1.0, part="overhead_s",
                     bottleneck="latency")


def with_stage_sends(res: PhaseResult, sends: float, latency_s: Any, bytes_: Any,
                     name: str = "stage_send") -> PhaseResult:
    """``res`` with a row for a pipeline pass's sends between stages
    (:mod:`perfmodel.models.pipeline`): ``sends`` of them, each ``latency_s`` seconds
    moving ``bytes_`` bytes (numbers or arrays broadcastable to the pass's points), on the
    critical path (the next stage waits for them; bottleneck ``memory``: a transfer); the
    other rows' shares rescaled. No row when ``sends`` is 0."""
    if sends <= 0:
        return res
    return _with_row(res, sends * np.asarray(latency_s, dtype=np.float64), name=name,
                     kind="transfer", count=float(sends), part="memory_s",
                     bottleneck="memory", moved=sends * np.asarray(bytes_, dtype=np.float64))
