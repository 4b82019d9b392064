"""A sequence-length what-if: where does attention overtake the MLP, and when does the
KV cache stop fitting?

    python examples/sequence_length_whatif.py [--plot seq.png]

One vectorised pass per question (no Python loop over lengths): TTFT of Llama-3.1-8B for
prompts of 1k to 128k tokens on an H100 and an A100, and the decode step at batch 16 as the
context grows, with the crossovers the sweep finds.
"""

from __future__ import annotations

import argparse

import numpy as np

from perfmodel.sweeps import SweepResult, sweep

MODEL = "llama-3.1-8b"


def show(res: SweepResult, picks: list[int]) -> None:
    print(f"{res.model} on {res.hardware}, {res.phase} over {res.x_label}:")
    for x in picks:
        i = int(np.argmin(np.abs(res.values - x)))
        share = res.groups["attention"][i] / res.latency_s[i]
        print(f"  {res.values[i]:>8,.0f}: {res.latency_s[i] * 1e3:9.1f} ms "
              f"(attention {share:4.0%}), memory {res.memory_bytes[i] / 1e9:6.1f} GB"
              f"{'' if res.fits[i] else '  does NOT fit'}")
    for c in res.crossovers:
        if c.value is not None:
            print(f"  -> {c.description}: from {c.value:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plot", help="write the prefill sweep chart (needs matplotlib)")
    args = parser.parse_args()
    prompts = np.unique(np.round(np.geomspace(1024, 131072, 200)))
    for gpu in ("h100-sxm", "a100-80gb-sxm"):
        show(sweep(MODEL, gpu, "prompt", prompts), [1024, 8192, 32768, 131072])
        print()
    contexts = np.arange(1024, 262145, 1024)
    decode = sweep(MODEL, "h100-sxm", "context", contexts, batch=16)
    show(decode, [4096, 32768, 65536, 131072])
    if args.plot:
        from perfmodel.plots import plot_sweep
        chart = plot_sweep(sweep(MODEL, "h100-sxm", "prompt", prompts), args.plot)
        print(f"\nwrote {chart.path}")


if __name__ == "__main__":
    main()
