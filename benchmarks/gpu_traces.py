"""Record the traces that ``perfmodel calibrate import`` and ``perfmodel explain-trace`` read.

Runs a small inference-shaped workload (bf16 GEMMs of prefill and decode shapes, causal
prefill attention, decode attention over a long KV cache with GQA) and writes, into the
folder given as the first argument:

- ``trace.json``: a ``torch.profiler`` Chrome trace recorded with ``record_shapes=True``
  (CUDA kernels when a GPU is visible, else host-side operator spans);
- with ``--nvtx``: nothing is recorded by torch.profiler; instead the workload runs once
  under ``torch.autograd.profiler.emit_nvtx(record_shapes=True)``, for ``ncu --nvtx``
  to attribute each kernel to its operator call (see ``benchmarks/gpu_check.sh``).

    python benchmarks/gpu_traces.py OUTDIR            # profiler trace
    ncu --csv --page raw --nvtx python benchmarks/gpu_traces.py OUTDIR --nvtx

Shapes are those of a Llama-3-8B-like layer (hidden 4096, 32 query heads, 8 KV heads,
head dim 128, MLP 14336); sizes are kept small enough for a CPU to run in seconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def workload(device: str, small: bool) -> list[tuple[str, Callable[[], object]]]:
    """The calls to profile, as (label, thunk) pairs; tensors allocated up front."""
    import torch as t
    from torch.nn import functional

    dtype = t.bfloat16 if device == "cuda" else t.float32
    hidden, heads, kv_heads, head_dim, mlp = 4096, 32, 8, 128, 14336
    tokens, seq, kv_len, batch = (64, 128, 512, 2) if small else (2048, 2048, 8192, 16)
    if small:
        hidden, mlp = 512, 1792

    def mk(*shape: int) -> t.Tensor:
        return t.randn(*shape, device=device, dtype=dtype)

    x = mk(tokens, hidden)
    w_qkv = mk(hidden, (heads + 2 * kv_heads) * head_dim // (8 if small else 1))
    w_up = mk(hidden, mlp)
    x_dec = mk(batch, hidden)
    q = mk(1, heads, seq, head_dim)
    k, v = mk(1, heads, seq, head_dim), mk(1, heads, seq, head_dim)
    q_dec = mk(batch, heads, 1, head_dim)
    k_dec, v_dec = mk(batch, kv_heads, kv_len, head_dim), mk(batch, kv_heads, kv_len, head_dim)
    return [
        ("prefill qkv gemm", lambda: t.mm(x, w_qkv)),
        ("prefill mlp gemm", lambda: t.matmul(x, w_up)),
        ("decode mlp gemm", lambda: t.mm(x_dec, w_up)),
        ("prefill causal attention",
         lambda: functional.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("decode gqa attention",
         lambda: functional.scaled_dot_product_attention(q_dec, k_dec, v_dec,
                                                         enable_gqa=True)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--nvtx", action="store_true",
                        help="run once under emit_nvtx (for ncu --nvtx) instead of profiling")
    parser.add_argument("--repeat", type=int, default=3, help="profiled calls per op")
    args = parser.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    calls = workload(device, small=device == "cpu")

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):  # warm up: first calls pick algorithms and allocate
        for _, fn in calls:
            fn()
    sync()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.nvtx:
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):  # type: ignore[no-untyped-call]
            for _ in range(args.repeat):
                for _, fn in calls:
                    fn()
            sync()
        return 0
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(args.repeat):
            for _, fn in calls:
                fn()
        sync()
    path = args.out / "trace.json"
    prof.export_chrome_trace(str(path))
    print(f"{device}: {len(calls)} ops x {args.repeat} calls -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
