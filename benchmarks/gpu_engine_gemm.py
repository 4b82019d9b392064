"""Time bf16 GEMMs the way AIConfigurator times vLLM's, on a GPU it never measured.

vLLM runs an unquantized linear layer as ``F.linear(x, W)`` (cuBLAS). AIConfigurator's vLLM
collector (``../shared/data/measurements/aic/README.md``) captures the op in a CUDA graph
that calls 6 layers with distinct weights (inputs shared), replays it 6 times between two
CUDA events and divides by the calls: no L2 flush, launch gaps removed. This script does
the same (and repeats the mean of 6 replays 3 times, keeping the median) for the (n, k) of
Llama-3 8B and 70B (TP 1 and 8) layers and m from 1 to 8,192 tokens, and writes rows with
``engine = vllm`` and timing ``aic_cuda_graph_replay_mean``, so that ``perfmodel validate``
predicts them as it predicts AIConfigurator's vLLM rows:

    python benchmarks/gpu_engine_gemm.py OUT.csv [--gpu SPEC]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

#: (n, k) of Llama-3-8B (qkv, o, gate+up, down) and Llama-3-70B at TP 1 and TP 8.
LAYERS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
          (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),
          (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
COPIES, REPLAYS, REPEATS = 6, 6, 3


def graph_time(torch: Any, x: Any, weights: list[Any]) -> float:
    """Seconds per call: a CUDA graph of one F.linear per weight, replayed REPLAYS times
    between two events, divided by the calls; the median of REPEATS such means."""
    import torch.nn.functional as F  # noqa: N812

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the graph (cuBLAS picks its kernel)
        for w in weights:
            F.linear(x, w)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [F.linear(x, w) for w in weights]
    graph.replay()
    torch.cuda.synchronize()
    means = []
    for _ in range(REPEATS):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(REPLAYS):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        means.append(begin.elapsed_time(end) * 1e-3 / (REPLAYS * len(weights)))
    del outs, graph
    return float(statistics.median(means))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gpu", default=None, help="spec id (default: from the device name)")
    args = parser.parse_args(argv)

    import torch
    from _cuda import cuda_target

    from perfmodel.measurements import write_measurements

    dev, name, spec = cuda_target(args.gpu)
    rows: list[dict[str, Any]] = []
    for n, k in LAYERS:
        weights = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
                   for _ in range(COPIES)]
        for m in TOKENS:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            t = graph_time(torch, x, weights)
            rows.append({
                "spec": spec, "source": "perfmodel-aic-style-vllm", "gpu": name, "op": "gemm",
                "impl": "torch F.linear (cuBLAS), as vLLM's unquantized linear",
                "dtype": "bf16", "batch": 1, "m": m, "n": n, "k": k,
                "measured_us": f"{t * 1e6:.4g}",
                "measured_tflops": f"{2 * m * n * k / t / 1e12:.5g}",
                "timing": "aic_cuda_graph_replay_mean", "out_dtype": "bf16", "engine": "vllm",
                "notes": f"AIConfigurator vLLM collector's method: graph of {COPIES} layers "
                         f"(distinct weights), mean of {REPLAYS} replays, median of {REPEATS} "
                         f"such means; torch={torch.__version__}",
            })
        del weights
        torch.cuda.empty_cache()
    write_measurements(args.out, rows, append=False)
    print(f"{name} ({spec}): {len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
