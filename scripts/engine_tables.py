"""Markdown tables of the engine-kernel accuracy for the README.

    perfmodel validate ../shared/data/measurements/aic/*.csv --json > aic.json
    perfmodel validate ../shared/data/measurements/aic/*.csv \\
        ../shared/data/measurements/a30_flashattn_nvbench.csv \\
        ../shared/data/measurements/vidur_attention_a100.csv --leave-gpu-out --json > logo.json
    python scripts/engine_tables.py aic.json logo.json

Prints: the summary per op and phase, the per-GPU in-sample vs leave-one-GPU-out table,
and every group with ≥ 300 rows (median and p90 APE, ours and the bare roofline).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def main(argv: list[str]) -> int:
    aic = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    logo = json.loads(Path(argv[1]).read_text(encoding="utf-8")) if len(argv) > 1 else None
    groups: list[dict[str, Any]] = aic["groups"]
    big = [g for g in groups if g["n"] >= 300]
    ok = [g for g in big if g["median_ape"] <= 0.15 and g["p90_ape"] <= 0.40]
    o = aic["overall"]
    print(f"All {o['n']:,} rows: median {_pct(o['median_ape'])}, p90 {_pct(o['p90_ape'])} "
          f"(bare roofline {_pct(o['baseline']['median_ape'])} / "
          f"{_pct(o['baseline']['p90_ape'])}); groups with ≥ 300 rows meeting median ≤ 15 % "
          f"and p90 ≤ 40 %: {len(ok)} of {len(big)} (median alone: "
          f"{sum(g['median_ape'] <= 0.15 for g in big)}, p90 alone: "
          f"{sum(g['p90_ape'] <= 0.40 for g in big)}).\n")
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in groups:
        by[g["op"] + (f" {g['phase']}" if g["op"] == "attention" else "")].append(g)
    print("| op | groups | rows | mean of group medians | worst group median |")
    print("|---|---:|---:|---:|---:|")
    for op, gs in sorted(by.items()):
        meds = [g["median_ape"] for g in gs]
        print(f"| {op} | {len(gs)} | {sum(g['n'] for g in gs):,} | "
              f"{_pct(sum(meds) / len(meds))} | {_pct(max(meds))} |")
    if logo is not None:
        print("\n| GPU | rows | in-sample median | p90 | left out: median | p90 |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in logo["leave_gpu_out"]:
            i, x = r["in_sample"], r["out_of_sample"]
            print(f"| {r['spec']} | {x['n']:,} | {_pct(i['median_ape'])} | "
                  f"{_pct(i['p90_ape'])} | {_pct(x['median_ape'])} | {_pct(x['p90_ape'])} |")
    print("\n| GPU | engine | op | dtype | kv | scheme | kernel | n | median | p90 | "
          "roofline median | target |")
    print("|---|---|---|---|---|---|---|---:|---:|---:|---:|:-:|")
    for g in sorted(big, key=lambda g: (g["spec"], g["source"], g["op"], g["phase"],
                                        g["dtype"], g["kv_dtype"], g["quant"], g["kernel"])):
        engine = g["source"].split("_")[1]
        op = g["op"] + (f" {g['phase']}" if g["op"] == "attention" else "")
        met = "✓" if g["median_ape"] <= 0.15 and g["p90_ape"] <= 0.40 else ""
        print(f"| {g['spec']} | {engine} | {op} | {g['dtype']} | {g['kv_dtype']} | "
              f"{g['quant'] if g['quant'] != 'none' else ''} | {g['kernel']} | {g['n']} | "
              f"{_pct(g['median_ape'])} | {_pct(g['p90_ape'])} | "
              f"{_pct(g['baseline']['median_ape'])} | {met} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
