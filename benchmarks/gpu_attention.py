"""Time PyTorch's fused attention backends on a GPU and score perfmodel's spec-only prediction.

On Hopper and later, PyTorch's ``CUDNN_ATTENTION`` backend runs cuDNN's warp-specialised
flash kernels (the FA3 class, ``flash3`` in perfmodel; ``kernel_path`` maps ``cudnn`` there)
and ``FLASH_ATTENTION`` runs FlashAttention-2 (``flash2``). Each backend times the same
prefill and decode shapes with perfmodel's CUDA harness (L2 flushed, samples behind a GPU
spin: :class:`perfmodel.calibrate.measure.QueueAhead`) and writes rows in the shared
measurement schema, so ``perfmodel validate OUT.csv`` scores any later model on them:

    python benchmarks/gpu_attention.py OUT.csv [--gpu SPEC] [--max-seconds 0.4]

Shapes (bf16, 32 query heads): prefill B·S ≈ 16k tokens for S from 128 to 16k, causal or
not, 32 or 8 KV heads, head dim 64 or 128; decode one query over 512 to 131,072 cached
tokens for batch 1 to 64, 8 KV heads, head dim 64 or 128. A backend that cannot run a
shape (an unsupported head dim or GQA in some versions) is listed and skipped.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

IMPL = {"cudnn": "cudnn (torch sdpa CUDNN_ATTENTION backend)",
        "flash2": "flash2 (torch sdpa FLASH_ATTENTION backend)"}


def shapes() -> list[dict[str, int | bool]]:
    """Prefill and decode shapes, as keyword arguments of the measurement row."""
    out: list[dict[str, int | bool]] = []
    for s, causal, kv, d in itertools.product(
            (128, 256, 512, 1024, 2048, 4096, 8192, 16384), (True, False), (32, 8), (128, 64)):
        out.append({"batch": max(1, 16384 // s), "heads": 32, "kv_heads": kv, "seq_q": s,
                    "seq_kv": s, "head_dim": d, "causal": causal})
    for b, ctx, d in itertools.product((1, 4, 16, 64), (512, 2048, 8192, 32768, 131072),
                                       (128, 64)):
        if b * ctx > 64 * 32768:  # keep the KV cache under ~17 GB
            continue
        out.append({"batch": b, "heads": 32, "kv_heads": 8, "seq_q": 1, "seq_kv": ctx,
                    "head_dim": d, "causal": False})
    return out


def _caller(sdpa: Any, select: Any, backend: Any, q: Any, k: Any, v: Any, causal: bool,
            gqa: bool) -> Callable[[], Any]:
    """One SDPA call with only ``backend`` allowed (a fresh ``select(backend)`` context per
    call: it is a generator-based context manager, entered once each)."""
    def call() -> Any:
        with select(backend):
            return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gpu", default=None, help="spec id (default: from the device name)")
    parser.add_argument("--max-seconds", type=float, default=0.4, help="per shape and backend")
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F  # noqa: N812
    from _cuda import cuda_target
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from perfmodel.calibrate.measure import L2Flusher, QueueAhead, TimerConfig, time_cuda
    from perfmodel.measurements import write_measurements

    dev, name, spec = cuda_target(args.gpu)
    props = torch.cuda.get_device_properties(0)
    flusher = L2Flusher(dev, int(getattr(props, "L2_cache_size", 0) or 64 << 20))
    queue = QueueAhead(torch)
    cfg = TimerConfig(max_samples=100, target_rel_err=0.005, max_seconds=args.max_seconds)
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash2": SDPBackend.FLASH_ATTENTION}
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for z in shapes():
        b, h, kv, sq, skv, d = (int(z[k]) for k in ("batch", "heads", "kv_heads", "seq_q",
                                                     "seq_kv", "head_dim"))
        q = torch.randn(b, h, sq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, kv, skv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, kv, skv, d, device=dev, dtype=torch.bfloat16)
        causal = bool(z["causal"]) and sq > 1
        for label, backend in backends.items():
            call = _caller(F.scaled_dot_product_attention, sdpa_kernel, backend, q, k, v,
                           causal, h != kv)
            try:
                sample = time_cuda(call, cfg, flusher, queue=queue)
            except Exception as exc:  # unsupported by this backend: list it, go on
                failed.append(f"{label} b{b} h{h}/{kv} sq{sq} skv{skv} d{d}: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                continue
            rows.append({
                "spec": spec, "source": "perfmodel-gpu-attention", "gpu": name,
                "op": "attention", "impl": IMPL[label], "kernel": label, "dtype": "bf16",
                "batch": b,
                "heads": h, "kv_heads": kv, "seq_q": sq, "seq_kv": skv, "head_dim": d,
                "causal": causal, "phase": "decode" if sq == 1 else "prefill",
                "direction": "fwd", "measured_us": f"{sample.median_s * 1e6:.4g}",
                "timing": "perfmodel_cuda_event_pair_l2_flushed_spin_ahead_median",
                "notes": f"backend={label} n={sample.n} spread={sample.spread:.3f} "
                         f"unstable={int(sample.unstable)} torch={torch.__version__}",
            })
        del q, k, v
        torch.cuda.empty_cache()
    write_measurements(args.out, rows, append=False)
    print(f"{name} ({spec}): {len(rows)} rows -> {args.out}; {len(failed)} skipped")
    for line in failed:
        print("  skipped", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
