"""Library-call speed, the figures of issue 11, optionally against another checkout.

    python benchmarks/bench_speed.py [--repeats 200]
    python benchmarks/bench_speed.py --against ../main [--rounds 3]

Measures, on one core (BLAS threads off), the median time of:

- ``model``: one Llama-2-7B prediction on A100 (prefill 2048 + generation of 256 with the
  per-op table, ``predict_model(...).ops``), the same call repeated: answered from
  ``predict_model``'s memo of scalar-input calls after the first;
- ``model_cold``: the same with a prompt length not asked before at each call (2049,
  2050, ...): computed each time;
- ``sweep``: a 1,000-point prompt-length sweep of the same model (``sweeps.sweep``);
- ``gemm``: a scalar GEMM 4096³ bf16 on H100 (op construction included);
- ``gemm_decode``: a decode-shaped GEMM, m = 8, n = k = 4096;
- ``attention``: scalar attention, prefill (32 heads, 2048 causal) and decode (batch 8,
  GQA 32/8, 4096 keys), the mean of the two;
- ``yaml_path``: ``predict`` of the GEMM 4096³ with the spec given as a YAML path, and its
  ratio to the id path (``yaml_over_id``);
- ``vector``: GEMM predictions per second in one call over 10⁶ shapes log-uniform in
  m, n, k ∈ [1, 16384].

With ``--against DIR`` each round runs this script once on ``DIR``'s perfmodel and once on
this checkout's, alternately (``PYTHONPATH``), and prints both medians over the rounds
and the ratios other/this: one run, so the machine's load is shared by both.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
UNITS = {"model": "ms", "model_cold": "ms", "sweep": "ms", "gemm": "µs", "gemm_decode": "µs",
         "attention": "µs", "yaml_path": "µs", "yaml_over_id": "x", "vector": "M/s"}


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()
    fn()  # warm-up (caches, lazy imports)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(repeats: int) -> dict[str, float]:
    """The figures of the module doc on the perfmodel this interpreter imports."""
    import warnings

    import perfmodel as pm
    from perfmodel.hardware.catalog import _bundled_paths
    from perfmodel.sweeps import sweep

    warnings.simplefilter("ignore")  # the sweep runs prompts past the model's window
    cfg, a100, h100 = pm.load_model("llama-2-7b"), pm.load_hardware("a100-80gb-sxm"), \
        pm.load_hardware("h100-sxm")
    out: dict[str, float] = {}
    out["model"] = 1e3 * _median_s(lambda: pm.predict_model(
        cfg, a100, phase="generate", batch=1, prompt_len=2048, gen_len=256).ops,
        max(repeats // 10, 5))
    fresh = iter(range(2049, 10**9))
    out["model_cold"] = 1e3 * _median_s(lambda: pm.predict_model(
        cfg, a100, phase="generate", batch=1, prompt_len=next(fresh), gen_len=256).ops,
        max(repeats // 10, 5))
    prompts = np.arange(1, 1001) * 32
    out["sweep"] = 1e3 * _median_s(lambda: sweep(cfg, a100, "prompt", prompts),
                                   max(repeats // 20, 3))
    out["gemm"] = 1e6 * _median_s(
        lambda: pm.predict(pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16"), h100), repeats)
    out["gemm_decode"] = 1e6 * _median_s(
        lambda: pm.predict(pm.Gemm(m=8, n=4096, k=4096, dtype="bf16"), h100), repeats)
    prefill = 1e6 * _median_s(lambda: pm.predict(pm.Attention(
        heads=32, seq_q=2048, seq_kv=2048, head_dim=128, causal=True), h100), repeats)
    decode = 1e6 * _median_s(lambda: pm.predict(pm.Attention(
        batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128, causal=True),
        h100), repeats)
    out["attention"] = (prefill + decode) / 2.0
    path = str(_bundled_paths()["h100-sxm"])
    gemm = pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    out["yaml_path"] = 1e6 * _median_s(lambda: pm.predict(gemm, path), max(repeats // 4, 10))
    by_id = 1e6 * _median_s(lambda: pm.predict(gemm, "h100-sxm"), repeats)
    out["yaml_over_id"] = out["yaml_path"] / by_id
    rng = np.random.default_rng(0)
    m, n, k = (np.round(np.exp(rng.uniform(0.0, np.log(16384.0), 1_000_000)))
               for _ in range(3))
    op = pm.Gemm(m=m, n=n, k=k, dtype="bf16")
    out["vector"] = 1.0 / _median_s(lambda: pm.predict(op, h100), 2)  # 10⁶ per call: M/s
    return out


def _run(root: Path, repeats: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    res = subprocess.run([sys.executable, __file__, "--json", "--repeats", str(repeats)],
                         env=env, capture_output=True, text=True, check=True, cwd=root)
    data: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return data


def _show(name: str, value: float) -> str:
    if name == "vector":
        return f"{value:8.2f} M/s"
    return f"{value:8.3f} {UNITS[name]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout (its root folder) to measure alternately")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    if args.json:
        print(json.dumps(measure(args.repeats)))
        return
    if args.against is None:
        for name, value in measure(args.repeats).items():
            print(f"{name:13s} {_show(name, value)}")
        return
    other, this = args.against.resolve(), HERE
    runs: dict[str, list[dict[str, float]]] = {"other": [], "this": []}
    for _ in range(args.rounds):
        runs["other"].append(_run(other, args.repeats))
        runs["this"].append(_run(this, args.repeats))
    print(f"other = {other}, this = {this}; medians of {args.rounds} alternating rounds")
    print(f"{'':13s} {'other':>14s} {'this':>14s}  other/this")
    for name in runs["this"][0]:
        a = statistics.median(r[name] for r in runs["other"])
        b = statistics.median(r[name] for r in runs["this"])
        better = (b / a) if name == "vector" else (a / b)
        print(f"{name:13s} {_show(name, a):>14s} {_show(name, b):>14s}  {better:6.2f}x")


if __name__ == "__main__":
    main()
