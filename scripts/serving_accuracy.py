"""Simulate every published serving run in benchmarks/serving/published.csv and report the
error (APE = |predicted − published| / published) of TTFT, TPOT, throughput and end-to-end.

    python scripts/serving_accuracy.py [--csv benchmarks/serving/published.csv] [--rows]
    python scripts/serving_accuracy.py --fit [--write]

How each row is run (the benchmark's own settings where its source states them):

- ``offline_max`` (trtllm-bench throughput): every request queued at t = 0, a closed loop at
  concurrency = requests; max_batch_size and max_num_tokens from trtllm-bench's tuning
  heuristic (tensorrt_llm/bench/build/tuning.py: requests that fit 0.95 of the memory left
  by the weights at ISL + OSL tokens, capped at 4096; tokens = that × (1 + ISL/OSL), capped
  at 32768; both rounded up), KV pool 0.95 of free memory; in-process, no frontend. The
  token budget is taken as at least the PyTorch backend's default 8192 (a choice made after
  seeing that the heuristic's 2048 for 2048/2048 cannot hold a prompt beside the decodes and
  would serialise the run, which the published figures rule out; the sources do not state
  the budget used), with chunked prefill where a prompt exceeds it;
- ``closed`` (AIPerf, vllm bench serve): a closed loop at the stated concurrency, 10 × C
  requests (at least 100) where the source does not state a count, through the HTTP
  frontend (the engine's per-request overhead applies);
- ``static`` (offline latency benchmark): C requests at t = 0, no frontend.

``--fit`` chooses the host overheads (per step and per request; per sequence stays 0) by
least squares on log(predicted / published), each metric (TTFT, TPOT, throughput,
end-to-end) weighted equally whatever its row count, on a grid per constant; prints them
(they are ``fitted: benchmarks/serving``) and the leave-one-source-out figure: each source's
rows predicted with the overheads fitted on the other sources. ``--write`` stores the
all-rows fit in perfmodel/engines.py (the serving simulator and ``predict_model(engine=...)``
both read it).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.dtypes import bytes_per_element
from perfmodel.hardware.catalog import load_hardware
from perfmodel.models.config import load_model, num_params
from perfmodel.serving import closed_loop, prepare, run_prepared
from perfmodel.serving.engines import EngineConfig
from perfmodel.serving.kvcache import KVPool
from perfmodel.serving.steptime import StepModel

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "benchmarks" / "serving" / "published.csv"
ENGINES_PY = ROOT / "perfmodel" / "engines.py"
METRICS = ("ttft", "tpot", "throughput", "e2e")


@dataclass
class Case:
    """One published row, prepared for simulation."""

    row: dict[str, str]
    eng: EngineConfig
    pool: KVPool
    model: StepModel
    cfg: Any
    spec: Any
    wl: Any
    tp: int
    frontend: bool
    published: dict[str, float]


def trtllm_bench_settings(model: str, gpu: str, tp: int, weight: str, kv: str, isl: int,
                          osl: int, fraction: float = 0.95) -> tuple[int, int]:
    """trtllm-bench's max_batch_size and max_num_tokens for a dataset of ISL/OSL
    (its tuning heuristic, restated; memory in GiB of the whole TP group)."""
    cfg = load_model(model)
    spec = load_hardware(gpu)
    gib = 2.0**30
    per_token = 2 * cfg.num_layers * max(tp, cfg.num_kv_heads) * cfg.head_dim \
        * bytes_per_element(kv) / gib
    engine = num_params(cfg) * bytes_per_element(weight) / gib
    free = spec.memory.capacity / gib * tp - engine
    requests = fraction * free / (per_token * (isl + osl))
    raw_bs = min(requests, 4096.0)
    raw_tok = min(raw_bs * (1.0 + isl / osl), 32768.0)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    return int(bs), int(tok)


def _f(row: dict[str, str], key: str) -> float:
    text = (row.get(key) or "").strip()
    return float(text) if text else math.nan


def load_cases(path: Path, kernels: str | None = None) -> list[Case]:
    """Prepare every row (``kernels``: whose kernels the step times use; default each row's
    engine's own, ``none`` for engine-neutral ones)."""
    cases = []
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        tp = int(row["tp"])
        isl, osl = int(row["prompt"]), int(row["output"])
        mode = row["mode"]
        overrides: dict[str, Any] = {}
        if mode == "offline_max":
            n = int(row["requests"])
            wl = closed_loop(n, n, isl, osl)
            if row["engine"] == "trtllm":
                bs, tok = trtllm_bench_settings(row["model"], row["gpu"], tp,
                                                row["weight_dtype"], row["kv_dtype"], isl, osl)
                tok = max(tok, 8192)
                overrides = {"max_num_seqs": bs, "max_num_batched_tokens": tok,
                             "memory_fraction": 0.95}
                if isl >= tok:  # the prompt cannot run beside a single decode unchunked
                    overrides["chunked_prefill"] = True
        elif mode == "closed":
            c = int(row["concurrency"])
            n = int(row["requests"]) if row["requests"] else max(100, 10 * c)
            wl = closed_loop(c, n, isl, osl)
        else:
            c = int(row["concurrency"])
            wl = closed_loop(c, int(row["requests"] or c), isl, osl)
        if kernels is not None:
            overrides["kernels"] = kernels
        cfg, spec, eng, pool, model = prepare(
            row["model"], row["gpu"], wl, tp=tp, engine=row["engine"],
            weight_dtype=row["weight_dtype"] or None, kv_dtype=row["kv_dtype"] or None,
            **overrides)
        published = {"ttft": _f(row, "ttft_ms") / 1e3, "tpot": _f(row, "tpot_ms") / 1e3,
                     "throughput": _f(row, "throughput_tok_s"), "e2e": _f(row, "e2e_ms") / 1e3}
        cases.append(Case(row, eng, pool, model, cfg, spec, wl, tp, mode == "closed",
                          published))
    return cases


def predict(case: Case, step: float, per_seq: float, request: float) -> dict[str, float]:
    eng = case.eng.with_(step_overhead_s=step, step_overhead_per_seq_s=per_seq,
                         request_overhead_s=request if case.frontend else 0.0)
    r = run_prepared(case.cfg, case.spec, eng, case.pool, case.model, case.wl, tp=case.tp)
    per_gpu = case.row["throughput_scope"].startswith("output tok/s per GPU")
    return {"ttft": float(np.mean(r.ttft_s)), "tpot": float(np.nanmean(r.tpot_s)),
            "throughput": r.per_gpu_tok_s if per_gpu else r.throughput_tok_s,
            "e2e": float(np.mean(r.e2e_s))}


def errors(cases: list[Case], params: tuple[float, float, float]) -> list[dict[str, float]]:
    out = []
    for c in cases:
        pred = predict(c, *params)
        out.append({m: (pred[m] - c.published[m]) / c.published[m] for m in METRICS
                    if math.isfinite(c.published[m])} | {f"pred_{m}": pred[m]
                                                         for m in METRICS})
    return out


def summary(cases: list[Case], errs: list[dict[str, float]]) -> dict[str, tuple[int, float,
                                                                                 float]]:
    out = {}
    for m in METRICS:
        ape = [abs(e[m]) for e in errs if m in e]
        if ape:
            out[m] = (len(ape), float(np.median(ape)), float(np.percentile(ape, 90)))
    return out


def fit(cases: list[Case], start: tuple[float, float, float]) -> tuple[float, float, float]:
    """Coordinate search on log-ratio squared error over a few values per overhead."""
    def loss(p: tuple[float, float, float]) -> float:
        # each metric weighs the same (the mean over its rows), whatever its row count
        es = errors(cases, p)
        total = 0.0
        for m in METRICS:
            sq = [math.log1p(e[m]) ** 2 for e in es if m in e]
            total += float(np.mean(sq)) if sq else 0.0
        return total

    best, best_loss = start, loss(start)
    # the per-sequence overhead stays 0: on these rows it only trades the 8B runs (then
    # 25 % too slow at 20 µs) against the fp4 and TP8 runs whose kernels are predicted too
    # fast, so no source isolates it
    grids = ([0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3],
             [0.0],
             [0.0, 0.01, 0.02, 0.05, 0.1, 0.2])
    for _ in range(2):
        for i, grid in enumerate(grids):
            for v in grid:
                trial = list(best)
                trial[i] = v
                t = (trial[0], trial[1], trial[2])
                lv = loss(t)
                if lv < best_loss:
                    best, best_loss = t, lv
    return best


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.1%}"


def write_constants(params: tuple[float, float, float]) -> None:
    text = ENGINES_PY.read_text(encoding="utf-8")
    for name, v in zip(("STEP_OVERHEAD_S", "STEP_OVERHEAD_PER_SEQ_S", "REQUEST_OVERHEAD_S"),
                       params, strict=True):
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {v:.4g}", text, flags=re.M)
        if n != 1:
            raise SystemExit(f"cannot find {name} in {ENGINES_PY}")
    ENGINES_PY.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--fit", action="store_true", help="fit the host overheads")
    ap.add_argument("--write", action="store_true", help="store the fit in engines.py")
    ap.add_argument("--kernels", choices=("engine", "none"), default="engine",
                    help="step times with each row's engine kernels (default) or "
                    "engine-neutral ones")
    args = ap.parse_args(argv)
    cases = load_cases(args.csv, None if args.kernels == "engine" else "none")
    eng0 = cases[0].eng
    params = (eng0.step_overhead_s, eng0.step_overhead_per_seq_s, eng0.request_overhead_s)
    if args.fit:
        params = fit(cases, (0.0, 0.0, 0.0))
        print("fitted: benchmarks/serving  step_overhead_s={:.4g} step_overhead_per_seq_s={:.4g} "
              "request_overhead_s={:.4g}".format(*params))
        sources = sorted({c.row["source"] for c in cases})
        held: list[dict[str, float]] = []
        held_cases: list[Case] = []
        for s in sources:
            train = [c for c in cases if c.row["source"] != s]
            test = [c for c in cases if c.row["source"] == s]
            p = fit(train, params)
            print(f"  without {s}: step={p[0]:.4g} per_seq={p[1]:.4g} request={p[2]:.4g}")
            held += errors(test, p)
            held_cases += test
        print("\nleave-one-source-out (metric: n, median APE, p90 APE)")
        for m, (n, med, p90) in summary(held_cases, held).items():
            print(f"  {m:10} {n:4d}  {med:6.1%}  {p90:6.1%}")
        if args.write:
            write_constants(params)
            print(f"wrote {ENGINES_PY.relative_to(ROOT)}")
        print()
    errs = errors(cases, params)
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        by_source[c.row["source"]].append(i)
    rows = []
    for s, idx in sorted(by_source.items()):
        summ = summary([cases[i] for i in idx], [errs[i] for i in idx])
        rows.append([s, str(len(idx))] + [
            f"{_pct(summ[m][1])} ({summ[m][0]})" if m in summ else "-" for m in METRICS])
    total = summary(cases, errs)
    rows.append(["**all**", str(len(cases))] + [
        f"{_pct(total[m][1])} ({total[m][0]})" if m in total else "-" for m in METRICS])
    print(f"median APE (rows) per source; host overheads step {params[0] * 1e3:.3g} ms, "
          f"per sequence {params[1] * 1e6:.3g} µs, per request {params[2] * 1e3:.3g} ms")
    print(table(rows, ["source", "rows", "TTFT", "TPOT", "throughput", "e2e"]))
    print()
    print("p90 APE: " + ", ".join(f"{m} {_pct(v[2])}" for m, v in total.items()))
    if args.rows:
        out = []
        for c, e in zip(cases, errs, strict=True):
            r = c.row
            cells = [r["source"], r["gpu"], r["model"], f"TP{r['tp']}", r["weight_dtype"],
                     r["mode"], r["concurrency"] or r["requests"], f"{r['prompt']}/{r['output']}"]
            for m in METRICS:
                cells.append(f"{e[f'pred_{m}']:.4g} vs {c.published[m]:.4g}"
                             if m in e else "-")
            out.append(cells)
        print()
        print(table(out, ["source", "gpu", "model", "tp", "dtype", "mode", "C or N", "ISL/OSL",
                          "TTFT s", "TPOT s", "throughput", "e2e s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
