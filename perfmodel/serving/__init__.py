"""Serving under load: requests, continuous batching with chunked prefill, a paged KV
cache, engine replicas -> latency percentiles and throughput (DESIGN.md section 2).

    from perfmodel.serving import closed_loop, simulate
    r = simulate("llama-3.1-70b", "h200-sxm", closed_loop(64, 1000, 1024, 1024), tp=4)
    r.to_dict()["ttft_s"]
"""

from perfmodel.serving.engines import ENGINES, EngineConfig, engine_config, scheduler_and_kernels
from perfmodel.serving.metrics import ServeResult, Stats, stats
from perfmodel.serving.requests import Workload, closed_loop, poisson, read_trace
from perfmodel.serving.serve import prepare, run_prepared, simulate

__all__ = [
    "ENGINES", "EngineConfig", "ServeResult", "Stats", "Workload", "closed_loop",
    "engine_config", "poisson", "prepare", "read_trace", "run_prepared", "scheduler_and_kernels",
    "simulate", "stats",
]
