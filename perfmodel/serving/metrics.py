"""Serving results: per-request latencies, their statistics, throughput, goodput, timeline.

Per request (client view): TTFT = first token − send; end-to-end = last token − send;
TPOT = (end-to-end − TTFT) / (output − 1) (requests of one output token have none);
queue = first scheduled − arrival at the engine. Inter-token latency (ITL) is over tokens:
each decode token waits one engine step, so the ITL distribution is that of step times
weighted by the decode tokens they produce. Throughput = output tokens / (last completion −
first send); per GPU divides by replicas × TP. Goodput: completed requests per second whose
TTFT and TPOT meet the SLOs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ServeResult", "Stats", "stats", "weighted_percentile"]

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Stats:
    """Mean and percentiles of one metric, s."""

    mean: float
    p50: float
    p90: float
    p99: float

    def to_dict(self) -> dict[str, float | None]:
        return {k: (v if math.isfinite(v) else None) for k, v in
                (("mean", self.mean), ("p50", self.p50), ("p90", self.p90), ("p99", self.p99))}

    def at(self, percentile: str) -> float:
        """The statistic named ``mean``, ``p50``, ``p90`` or ``p99``."""
        return float(getattr(self, percentile))


def stats(x: Floats) -> Stats:
    """Mean, p50, p90, p99 of the finite values of ``x`` (NaN when none)."""
    v = np.asarray(x, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        nan = float("nan")
        return Stats(nan, nan, nan, nan)
    p = np.percentile(v, [50, 90, 99])
    return Stats(float(np.mean(v)), float(p[0]), float(p[1]), float(p[2]))


def weighted_percentile(values: Floats, weights: Floats, q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` weighted by ``weights``."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = w > 0
    if not np.any(keep):
        return float("nan")
    v, w = v[keep], w[keep]
    order = np.argsort(v)
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    idx = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
    return float(v[min(idx, v.size - 1)])


@dataclass(frozen=True)
class ServeResult:
    """One simulated serving run (see the module docstring for the definitions)."""

    model: str
    hardware: str
    engine: str
    tp: int
    replicas: int
    workload: str
    send_s: Floats
    arrival_s: Floats
    start_s: Floats
    first_token_s: Floats
    finish_s: Floats
    prompt: npt.NDArray[np.int64]
    output: npt.NDArray[np.int64]
    preemptions: npt.NDArray[np.int64]
    itl_values: Floats
    itl_weights: Floats
    timeline: dict[str, Floats]
    kv_blocks: int
    kv_block_size: int
    steps: int
    engine_knobs: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    pp: int = 1
    """Pipeline stages per replica (each ``tp`` GPUs)."""

    @property
    def gpus(self) -> int:
        """GPUs of the whole run: replicas × tp × pp."""
        return self.replicas * self.tp * self.pp

    @property
    def ttft_s(self) -> Floats:
        return self.first_token_s - self.send_s

    @property
    def e2e_s(self) -> Floats:
        return self.finish_s - self.send_s

    @property
    def tpot_s(self) -> Floats:
        out = self.output.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out > 1, (self.e2e_s - self.ttft_s) / (out - 1.0), np.nan)

    @property
    def queue_s(self) -> Floats:
        return self.start_s - self.arrival_s

    @property
    def duration_s(self) -> float:
        return float(np.max(self.finish_s) - np.min(self.send_s))

    @property
    def throughput_tok_s(self) -> float:
        """Output tokens per second over the run."""
        return float(np.sum(self.output)) / max(self.duration_s, 1e-12)

    @property
    def requests_per_s(self) -> float:
        return self.prompt.size / max(self.duration_s, 1e-12)

    @property
    def per_gpu_tok_s(self) -> float:
        return self.throughput_tok_s / self.gpus

    def itl(self) -> Stats:
        """Inter-token latency over all decode tokens (step times weighted by tokens)."""
        v, w = self.itl_values, self.itl_weights
        if v.size == 0 or float(np.sum(w)) <= 0:
            nan = float("nan")
            return Stats(nan, nan, nan, nan)
        mean = float(np.sum(v * w) / np.sum(w))
        return Stats(mean, *(weighted_percentile(v, w, q) for q in (50.0, 90.0, 99.0)))

    def goodput(self, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> float:
        """Requests per second that meet both SLOs (None: no limit on that metric)."""
        ok = np.ones(self.prompt.size, dtype=bool)
        if ttft_slo_s is not None:
            ok &= self.ttft_s <= ttft_slo_s
        if tpot_slo_s is not None:
            tp = self.tpot_s
            ok &= ~(tp > tpot_slo_s)  # NaN (one output token) passes
        return float(np.sum(ok)) / max(self.duration_s, 1e-12)

    def to_dict(self, ttft_slo_s: float | None = None,
                tpot_slo_s: float | None = None) -> dict[str, Any]:
        """JSON-ready summary (s, tokens/s, requests/s); no per-request arrays."""
        out: dict[str, Any] = {
            "model": self.model, "hardware": self.hardware, "engine": self.engine,
            "tp": self.tp, "pp": self.pp, "replicas": self.replicas, "gpus": self.gpus,
            "workload": self.workload, "requests": int(self.prompt.size),
            "ttft_s": stats(self.ttft_s).to_dict(), "tpot_s": stats(self.tpot_s).to_dict(),
            "itl_s": self.itl().to_dict(), "e2e_s": stats(self.e2e_s).to_dict(),
            "queue_s": stats(self.queue_s).to_dict(),
            "throughput_tok_s": self.throughput_tok_s,
            "total_tok_s": float(np.sum(self.prompt) + np.sum(self.output))
            / max(self.duration_s, 1e-12),
            "requests_per_s": self.requests_per_s, "per_gpu_tok_s": self.per_gpu_tok_s,
            "duration_s": self.duration_s, "steps": self.steps,
            "preemptions": int(np.sum(self.preemptions)),
            "kv_cache": {"blocks": self.kv_blocks, "block_size": self.kv_block_size,
                         "peak_used_fraction": float(np.max(self.timeline["kv_blocks"]))
                         / max(self.kv_blocks, 1) if self.timeline["kv_blocks"].size
                         else 0.0},
            "engine_knobs": dict(self.engine_knobs),
        }
        if ttft_slo_s is not None or tpot_slo_s is not None:
            out["goodput"] = {"requests_per_s": self.goodput(ttft_slo_s, tpot_slo_s),
                              "ttft_slo_s": ttft_slo_s, "tpot_slo_s": tpot_slo_s}
        out["assumptions"] = list(self.assumptions)
        return out
