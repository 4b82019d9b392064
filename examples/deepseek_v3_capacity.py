"""DeepSeek-V3 (or R1) on one 8-GPU node: what the latent cache buys, and what it costs.

    python examples/deepseek_v3_capacity.py [--context 8192] [--engine sglang]

DeepSeek-V3 caches one 576-element latent per token and layer (multi-head latent
attention) instead of keys and values per head. This compares H100, H200 and B200 nodes at
TP 8 with its fp8 checkpoint: weights and cache per GPU, the largest batch of a given
context, and the decode step at a few batch sizes as an engine runs it (its block-scaled
fp8 GEMMs and MLA decode kernels). Then the layout DeepSeek deployments use instead, data-
parallel attention with expert parallelism ("DEP 8", ``parallel="dep"``): each GPU keeps the
latents of its own sequences only, so the node holds many more. Spec-only: the MLA kernels'
rates are not fitted (no public per-kernel measurements in the project's data).
"""

from __future__ import annotations

import argparse

import perfmodel as pm
from perfmodel.models.config import active_params, num_params

GPUS = ["h100-sxm", "h200-sxm", "b200"]
BATCHES = [1, 16, 64]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=8192, help="tokens per sequence")
    parser.add_argument("--engine", default="sglang", choices=("vllm", "sglang", "trtllm"))
    args = parser.parse_args()
    cfg = pm.load_model("deepseek-v3")
    print(f"{cfg.name}: {num_params(cfg) / 1e9:.1f} B parameters, "
          f"{active_params(cfg) / 1e9:.1f} B active")
    print(f"\nTP 8, context {args.context:,}, {args.engine}: memory per GPU and the decode "
          "step at each batch")
    for gpu in GPUS:
        steps, mem = [], None
        for batch in BATCHES:
            p = pm.predict_model(cfg, gpu, phase="decode", batch=batch,
                                 context_len=args.context, tp=8, engine=args.engine)
            mem = mem or p.memory
            steps.append(f"b{batch} {float(p.latency_s) * 1e3:5.1f} ms")
        assert mem is not None
        print(f"  {gpu:9s} weights {float(mem.weights_bytes) / 1e9:5.1f} GB, cache "
              f"{float(mem.kv_bytes_per_token) / 1e3:.1f} kB/token, largest batch "
              f"{int(float(mem.max_batch)):4d}; " + ", ".join(steps))
    print(f"\nDEP 8 (attention data-parallel, experts expert-parallel), context "
          f"{args.context:,}: the largest batch of the node and the decode step")
    for gpu in GPUS:
        steps, mem = [], None
        for batch in (64, 256):
            p = pm.predict_model(cfg, gpu, phase="decode", batch=batch,
                                 context_len=args.context, tp=8, engine=args.engine,
                                 parallel="dep")
            mem = mem or p.memory
            steps.append(f"b{batch} {float(p.latency_s) * 1e3:5.1f} ms")
        assert mem is not None
        print(f"  {gpu:9s} weights {float(mem.weights_bytes) / 1e9:5.1f} GB per GPU, largest "
              f"batch {int(float(mem.max_batch)):5d}; " + ", ".join(steps))
    gqa = cfg.num_layers * 2 * cfg.num_heads * cfg.head_dim * 2  # K and V of every head
    print(f"\n(keys and values for its {cfg.num_heads} heads would take {gqa / 1e6:.1f} MB "
          "per token in bf16; the latent and rotary key take 576 elements per layer)")


if __name__ == "__main__":
    main()
