"""Serving sweeps: the same model, GPU and engine over concurrency (closed loop) or request
rate (Poisson), the step-time tables built once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.serving.metrics import ServeResult, stats
from perfmodel.serving.requests import Workload, closed_loop, poisson
from perfmodel.serving.serve import prepare, run_prepared

__all__ = ["ServeSweep", "serve_sweep"]

Over = Literal["concurrency", "rate"]


@dataclass(frozen=True)
class ServeSweep:
    """One :class:`ServeResult` per swept value."""

    over: str
    values: tuple[float, ...]
    results: tuple[ServeResult, ...]

    def rows(self) -> list[dict[str, float]]:
        """Per value: TTFT and TPOT mean and p90 (s), throughput (output tok/s, per GPU)."""
        out = []
        for v, r in zip(self.values, self.results, strict=True):
            t, p = stats(r.ttft_s), stats(r.tpot_s)
            out.append({self.over: v, "ttft_mean_s": t.mean, "ttft_p90_s": t.p90,
                        "tpot_mean_s": p.mean, "tpot_p90_s": p.p90,
                        "throughput_tok_s": r.throughput_tok_s,
                        "per_gpu_tok_s": r.per_gpu_tok_s, "requests_per_s": r.requests_per_s})
        return out

    def to_dict(self) -> dict[str, Any]:
        first = self.results[0]
        return {"over": self.over, "model": first.model, "hardware": first.hardware,
                "engine": first.engine, "tp": first.tp, "replicas": first.replicas,
                "points": [r.to_dict() | {self.over: v}
                           for v, r in zip(self.values, self.results, strict=True)]}


def serve_sweep(config: TransformerConfig | str, hw: HardwareSpec | str, over: Over,
                values: Sequence[float], *, prompt: int, gen: int, spread: float = 1.0,
                requests: int | None = None, seed: int = 0, tp: int = 1, replicas: int = 1,
                engine: str = "vllm", progress: Callable[[int, int], None] | None = None,
                parallel: str = "tp", pp: int = 1, **options: Any) -> ServeSweep:
    """Simulate each value of ``over`` (``concurrency``: closed loop, ``requests`` default
    10 × C, at least 100; ``rate``: Poisson requests/s, ``requests`` default 1000).
    ``options``: dtypes and engine overrides as for :func:`perfmodel.serving.simulate`;
    ``parallel``, ``pp``: an MoE model's layout and pipeline stages, as there."""
    if over not in ("concurrency", "rate"):
        raise PerfmodelError("over", f"cannot sweep {over!r} on the simulator",
                             "use concurrency or rate")
    vals = [float(v) for v in values]
    if not vals:
        raise PerfmodelError("values", "nothing to sweep", "e.g. --values 1,8,64")

    def workload(v: float) -> Workload:
        if over == "concurrency":
            c = int(v)
            if c != v:
                raise PerfmodelError("values", f"concurrency must be whole, got {v:g}",
                                     "e.g. 1,8,64")
            return closed_loop(c, requests or max(100, 10 * c), prompt, gen, spread, seed)
        return poisson(v, requests or 1000, prompt, gen, spread, seed)

    loads = [workload(v) for v in vals]
    longest = max(loads, key=lambda w: int(np.max(w.prompt + w.output)))
    cfg, spec, eng, pool, model = prepare(config, hw, longest, tp=tp, engine=engine,
                                          parallel=parallel, pp=pp, **options)
    results = []
    for i, wl in enumerate(loads):
        results.append(run_prepared(cfg, spec, eng, pool, model, wl, tp=tp, replicas=replicas,
                                    parallel=parallel, pp=pp))
        if progress is not None:
            progress(i + 1, len(loads))
    return ServeSweep(over, tuple(vals), tuple(results))
