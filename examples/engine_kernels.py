"""What TensorRT-LLM, vLLM and SGLang run, predicted from the spec, and how close it lands.

    python examples/engine_kernels.py

1. One decode-attention call (Llama-3.1-8B's shape: 32 query heads over 8 KV heads, 4,096
   cached tokens, 32 sequences) as each engine makes it on an H100, a B200 and an L40S:
   the kernel family it dispatches there and the parts of the call (KV-cache write,
   kernel, the engine's own bookkeeping), replayed from a CUDA graph as the engines do.
2. The same model's fp8 linear layers (a 64-token decode batch) per engine on the H100:
   the quantization scheme, kernel and activation-quantize step of each.
3. The accuracy behind those numbers: the cited subset of NVIDIA AIConfigurator's
   measurements that ships with perfmodel, per engine and op (median APE, spec-only).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

import perfmodel as pm
from perfmodel.data import measurements_dir

ENGINES = ("trtllm", "vllm", "sglang")


def decode_attention() -> None:
    neutral = pm.Attention(batch=32, heads=32, kv_heads=8, seq_q=1, seq_kv=4096,
                           head_dim=128, causal=True)
    print("decode attention, 32 × (32 q / 8 kv heads) over 4,096 keys, bf16 cache")
    for gpu in ("h100-sxm", "b200", "l40s"):
        for engine in ENGINES:
            op = pm.engine_call(neutral, engine, gpu)
            p = pm.predict(op, gpu, context=pm.RunContext(engine=engine, launch="graph"))
            parts = ", ".join(f"{name} {float(s.latency_s) * 1e6:.1f}"
                              for name, s in p.stages)
            print(f"  {gpu:9s} {engine:7s} {op.impl:11s} {float(p.latency_s) * 1e6:7.1f} µs"
                  f"  ({parts} µs; {p.bottleneck}-bound)")


def fp8_linear() -> None:
    print("\nfp8 linear layer, 64 tokens × 4096 → 14336 (gate/up of Llama-3.1-8B), h100-sxm")
    neutral = pm.Gemm(m=64, n=14336, k=4096, dtype="fp8")
    for engine in ENGINES:
        op = pm.engine_call(neutral, engine, "h100-sxm")
        p = pm.predict(op, "h100-sxm", context=pm.RunContext(engine=engine, launch="graph"))
        print(f"  {engine:7s} {op.quant:11s} {op.impl:8s} quantize={op.quantize_input!s:5s}"
              f" {float(p.latency_s) * 1e6:6.1f} µs")


def bundled_accuracy() -> None:
    report = pm.validate(measurements_dir() / "aic_engine_kernels.csv")
    measured = np.asarray([r.measured_s for r in report.rows])
    ape = np.abs(np.asarray(report.predicted_s) - measured) / measured
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row, err in zip(report.rows, ape, strict=True):
        groups[(row.source.split("_")[1], f"{row.op} {row.phase}".strip())].append(float(err))
    print(f"\nspec-only accuracy on {report.overall.n:,} bundled AIConfigurator rows: median "
          f"{report.overall.median_ape:.1%}, p90 {report.overall.p90_ape:.1%}")
    for (engine, op), errs in sorted(groups.items()):
        print(f"  {engine:7s} {op:20s} n={len(errs):4d} median {np.median(errs):6.1%}")


def main() -> None:
    decode_attention()
    fp8_linear()
    bundled_accuracy()


if __name__ == "__main__":
    main()
