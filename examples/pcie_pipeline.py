"""Llama 3.3 70B on PCIe cards: one card, or two split by tensor or by pipeline parallelism.

    python examples/pcie_pipeline.py [--gpu rtx-pro-6000-server] [--requests 600]

Cards without NVLink exchange activations over PCIe. Tensor parallelism (TP2) all-reduces
every layer's output twice per step; pipeline parallelism (PP2) puts half the layers on
each card and sends one micro-batch's hidden states across once per stage, keeping two
micro-batches in flight. Both double the memory for the KV cache. This runs the offline
benchmark TensorRT-LLM publishes for these cards (every request queued at once, fp4
weights, fp8 KV cache, 1,024 in / 1,024 out, decode batches padded to the CUDA graphs its
runs capture) on the serving simulator and prints output
tokens per second per GPU, with the running batch and KV capacity behind it.
"""

from __future__ import annotations

import argparse

from perfmodel.serving import closed_loop, simulate
from perfmodel.serving.engines import TRTLLM_PERF_OVERVIEW_GRAPHS

MODEL = "llama-3.1-70b"  # Llama 3.3 70B has the same shapes
LAYOUTS = (("one card", 1, 1), ("TP2", 2, 1), ("PP2", 1, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="rtx-pro-6000-server")
    parser.add_argument("--requests", type=int, default=600)
    args = parser.parse_args()
    wl = closed_loop(args.requests, args.requests, 1024, 1024)
    print(f"{MODEL} fp4 on {args.gpu}, {args.requests} requests of 1024 in / 1024 out, "
          "all queued at once, TensorRT-LLM")
    for name, tp, pp in LAYOUTS:
        r = simulate(MODEL, args.gpu, wl, tp=tp, pp=pp, engine="trtllm", weight_dtype="fp4",
                     kv_dtype="fp8", graph_batch_sizes=TRTLLM_PERF_OVERVIEW_GRAPHS)
        seqs = r.kv_blocks * r.kv_block_size // 2048
        print(f"  {name:8s} {r.gpus} GPU{'s' if r.gpus > 1 else ' '}  "
              f"{r.per_gpu_tok_s:7,.0f} output tok/s per GPU, TPOT {r.itl().mean * 1e3:5.1f} ms,"
              f" KV for {seqs:4d} sequences of 2048 tokens"
              + (" per micro-batch" if pp > 1 else ""))


if __name__ == "__main__":
    main()
