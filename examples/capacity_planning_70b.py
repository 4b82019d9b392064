"""Capacity planning for a 70B model: how many GPUs of which kind, at what cost.

    python examples/capacity_planning_70b.py [--rps 10] [--plot plan.png]

Llama-3.1-70B serving 10 requests/s of 2,048-token prompts and 256-token answers, with a
2 s time-to-first-token and a 50 ms time-per-output-token target, on four GPU types, in
bf16 and with fp8 weights. Prices are the specs' stated assumptions; pass ``prices=`` to
``plan`` (or ``--price`` to ``perfmodel plan``) for your own.
"""

from __future__ import annotations

import argparse

from perfmodel.planning import Plan, Workload, plan

GPUS = ["a100-80gb-sxm", "h100-sxm", "h200-sxm", "b200"]


def summary(title: str, result: Plan) -> None:
    print(title)
    for g in result.ranked():
        b = g.best
        if b is None:
            reasons = "; ".join(f"TP {o.tp}: {o.reason}" for o in g.options)
            print(f"  {g.gpu:14s} cannot meet the targets ({reasons})")
            continue
        cost = (f"${b.usd_per_million_output_tokens:.2f} per million output tokens"
                if b.usd_per_million_output_tokens is not None else "no price")
        print(f"  {g.gpu:14s} TP {b.tp} × {b.replicas} replicas = {b.gpus:3d} GPUs, "
              f"batch {b.batch:3d}, TTFT {b.ttft_s * 1e3:6.0f} ms, TPOT {b.tpot_s * 1e3:4.1f} ms,"
              f" {b.tokens_per_s_per_gpu:5.0f} out tok/s/GPU, {cost}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rps", type=float, default=10.0, help="requests per second")
    parser.add_argument("--plot", help="write a GPU comparison chart (needs matplotlib)")
    args = parser.parse_args()
    workload = Workload(requests_per_s=args.rps, prompt_len=2048, output_len=256,
                        ttft_target_s=2.0, tpot_target_s=0.050)
    bf16 = plan("llama-3.1-70b", GPUS, workload)
    summary("Llama-3.1-70B, bf16 weights:", bf16)
    fp8 = plan("llama-3.1-70b", GPUS, workload, weight_dtype="fp8", kv_dtype="fp8")
    summary("\nLlama-3.1-70B, fp8 weights and KV cache (A100: weights upcast in the kernel):",
            fp8)
    print("\nassumptions:")
    for line in bf16.assumptions:
        print(f"  - {line}")
    if args.plot:
        from perfmodel.plots import plan_comparison_data, plot_gpu_comparison
        chart = plot_gpu_comparison(plan_comparison_data(bf16), args.plot)
        print(f"\nwrote {chart.path}")


if __name__ == "__main__":
    main()
