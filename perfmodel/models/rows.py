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
           "value", "with_host"]

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
    onehot = np.zeros((len(names), len(index)))
    onehot[index, np.arange(len(index))] = 1.0
    contrib = {f: timing.counts * timing.values[f] for f in NUMERIC}
    sums = {f: np.tensordot(onehot, contrib[f], axes=(1, 0)) for f in NUMERIC}
    first = [index.index(i) for i in range(len(names))]
    labels = timing.bottleneck[first]
    counts = timing.counts[first]
    for i, n in enumerate(names):  # a name with several ops: the bottleneck of the longest
        rows = [j for j, m in enumerate(timing.names) if m == n]
        if len(rows) > 1:
            best = np.argmax(contrib["latency_s"][rows], axis=0)
            labels[i] = np.take_along_axis(timing.bottleneck[rows], best[None], axis=0)[0]
            counts[i] = np.max(timing.counts[rows], axis=0)
    if weights is not None:
        sums = {f: np.sum(v * weights, axis=-1) for f, v in sums.items()}
        labels = labels[..., labels.shape[-1] // 2]
        counts = counts[..., 0]
    total = {f: np.sum(v, axis=0) for f, v in sums.items()}
    share = sums["latency_s"] / np.maximum(total["latency_s"], 1e-30)
    intensity = sums["flops"] / np.maximum(sums["bytes"], 1e-30)
    rows_out = tuple(
        OpRow(name=n, kind=timing.kinds[first[i]], phase=phase, count=value(counts[i]),
              latency_s=value(sums["latency_s"][i]), share=value(share[i]),
              compute_s=value(sums["compute_s"][i]), memory_s=value(sums["memory_s"][i]),
              overhead_s=value(sums["overhead_s"][i]), flops=value(sums["flops"][i]),
              bytes=value(sums["bytes"][i]), arithmetic_intensity=value(intensity[i]),
              bottleneck=label_of(labels[i]))
        for i, n in enumerate(names))
    return PhaseResult(phase=phase, ops=rows_out, **{f: value(total[f]) for f in NUMERIC})


def with_host(res: PhaseResult, host_s: Any, name: str = "engine step (host)") -> PhaseResult:
    """``res`` with a row for the engine's host time per pass (scheduler, input preparation,
    sampling: the GPU idle between one pass's kernels and the next), ``host_s`` seconds (a
    number or an array broadcastable to the pass's points), counted as fixed overhead
    (bottleneck ``latency``); the other rows' shares rescaled."""
    host_s = np.asarray(host_s, dtype=np.float64)
    if not np.any(host_s > 0.0):
        return res
    total = np.asarray(res.latency_s) + host_s
    zero = value(np.zeros_like(total))
    rows = tuple(dataclasses.replace(r, share=value(np.asarray(r.latency_s) / total))
                 for r in res.ops)
    host = OpRow(name=name, kind="host", phase=res.phase, count=1.0,
                 latency_s=value(host_s * np.ones_like(total)),
                 share=value(host_s / total), compute_s=zero, memory_s=zero,
                 overhead_s=value(host_s * np.ones_like(total)), flops=zero, bytes=zero,
                 arithmetic_intensity=zero, bottleneck="latency")
    return dataclasses.replace(res, latency_s=value(total),
                               overhead_s=value(np.asarray(res.overhead_s) + host_s),
                               ops=(*rows, host))
