"""Record predictions of a fixed random set of ops and model runs, to check a refactor.

    python scripts/refactor_snapshot.py [--out tests/fixtures/refactor_snapshot.json.gz]

Draws (seed 11) ops of every class with random shapes and options, predicts each on several
GPUs under several run contexts (one op at a time, and all shapes of a class in one
vectorised call), plus a few whole-model predictions, and writes the case arguments with
the predicted figures. ``tests/test_refactor_snapshot.py`` rebuilds every case from the
file and requires the same figures to 1e-12 relative: a restructuring of the code must not
move a prediction. Rerun only when a change of the model itself is intended, and say so in
the commit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import perfmodel as pm
from perfmodel.ops import (
    Activation,
    AllReduce,
    Attention,
    Elementwise,
    Embedding,
    Gemm,
    Norm,
    Rotary,
    Softmax,
)
from perfmodel.timing import RunContext

GPUS = ("a100-80gb-sxm", "h100-sxm", "b200", "l4", "mi300x", "arc-pro-b60")
CONTEXTS: dict[str, dict[str, Any]] = {
    "default": {},
    "graph-vllm": {"launch": "graph", "engine": "vllm"},
    "warm-copies": {"l2": "warm", "copies": 4.0, "input_copies": True},
    "eager-trtllm": {"launch": "eager", "engine": "trtllm", "floor_s": 6e-6},
}
FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes", "bytes_min")
CLASSES: dict[str, Any] = {c.__name__: c for c in (
    Gemm, Attention, Elementwise, Norm, Activation, Rotary, Softmax, Embedding, AllReduce)}


def _log_int(rng: np.random.Generator, lo: float, hi: float) -> int:
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _gemm(rng: np.random.Generator) -> dict[str, Any]:
    quant = str(rng.choice(["none", "none", "none", "per-tensor", "per-channel", "block",
                            "nvfp4"]))
    dtype = {"none": str(rng.choice(["bf16", "fp16", "fp32", "tf32", "fp8"])),
             "nvfp4": "fp4"}.get(quant, "fp8")
    args: dict[str, Any] = {"m": _log_int(rng, 1, 65536), "n": _log_int(rng, 1, 65536),
                            "k": _log_int(rng, 1, 65536), "batch": _log_int(rng, 1, 64),
                            "dtype": dtype, "shared_b": bool(rng.random() < 0.5),
                            "bias": bool(rng.random() < 0.3), "quant": quant,
                            "impl": str(rng.choice(["auto", "cublas", "cutlass", "triton"]))}
    if quant != "none":
        args["out_dtype"] = "bf16"
        args["quantize_input"] = bool(rng.random() < 0.5)
    return args


def _attention(rng: np.random.Generator) -> dict[str, Any]:
    kv = int(rng.choice([1, 2, 4, 8, 16, 32]))
    group = int(rng.choice([1, 2, 4, 8, 16, 64]))
    decode = rng.random() < 0.4
    seq_kv = _log_int(rng, 1, 131072)
    head_dim = int(rng.choice([64, 80, 96, 128, 192, 256, 512]))
    dtype = str(rng.choice(["bf16", "fp16", "fp8"]))
    return {"batch": _log_int(rng, 1, 128), "heads": kv * group, "kv_heads": kv,
            "seq_q": 1 if decode else _log_int(rng, 1, seq_kv), "seq_kv": seq_kv,
            "head_dim": head_dim,
            "value_dim": head_dim if rng.random() < 0.7 else int(rng.choice([64, 128])),
            "causal": bool(rng.random() < 0.6), "dtype": dtype,
            "kv_dtype": str(rng.choice([dtype, "fp8"])),
            "impl": str(rng.choice(["flash", "flash", "flash2", "paged", "naive", "fmha-v2",
                                    "xqa", "flashinfer", "triton", "flash3", "trtllm-gen"])),
            "num_splits": ["auto", "auto", "gqa", 1, 4][int(rng.integers(5))],
            "kv_write": bool(rng.random() < 0.3), "rope": bool(rng.random() < 0.2)}


def _small(rng: np.random.Generator, cls: str) -> dict[str, Any]:
    t = _log_int(rng, 1, 65536)
    h = _log_int(rng, 64, 16384)
    dtype = str(rng.choice(["bf16", "fp16", "fp32"]))
    if cls == "Elementwise":
        return {"numel": t * h, "reads": float(rng.choice([0.5, 1, 2, 3])),
                "writes": float(rng.choice([0.5, 1])), "flops_per_element": float(
                    rng.choice([0, 1, 3])), "sfu_per_element": float(rng.choice([0, 1])),
                "dtype": dtype, "kind": "elementwise"}
    if cls == "Norm":
        return {"tokens": t, "hidden": h, "kind": str(rng.choice(["rms", "layer"])),
                "dtype": dtype}
    if cls == "Activation":
        return {"tokens": t, "width": h, "dtype": dtype,
                "kind": str(rng.choice(["silu_mul", "gelu_mul", "gelu", "silu", "relu"]))}
    if cls == "Rotary":
        kv = int(rng.choice([1, 8, 32]))
        return {"tokens": t, "heads": kv * int(rng.choice([1, 4])), "kv_heads": kv,
                "head_dim": int(rng.choice([64, 128])), "dtype": dtype}
    if cls == "Softmax":
        return {"rows": t, "cols": h, "dtype": dtype}
    if cls == "Embedding":
        return {"tokens": t, "hidden": h, "vocab": _log_int(rng, 1000, 256000), "dtype": dtype}
    return {"numel": t * h, "gpus": int(rng.choice([1, 2, 4, 8])), "dtype": dtype}


def _draw(rng: np.random.Generator, name: str) -> dict[str, Any]:
    if name == "Gemm":
        return _gemm(rng)
    if name == "Attention":
        return _attention(rng)
    return _small(rng, name)


#: Arguments that may be arrays, per class (concatenated in a vectorised call).
ARRAY_FIELDS = {"Gemm": ("m", "n", "k", "batch"),
                "Attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                              "value_dim"),
                "Elementwise": ("numel", "reads", "writes"), "Norm": ("tokens", "hidden"),
                "Activation": ("tokens", "width"),
                "Rotary": ("tokens", "heads", "kv_heads", "head_dim"),
                "Softmax": ("rows", "cols"), "Embedding": ("tokens", "hidden", "vocab"),
                "AllReduce": ("numel", "gpus")}
#: Shape arguments drawn afresh inside a group of GEMM or attention cases.
_SHAPES = {"Gemm": ("m", "n", "k", "batch"),
           "Attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                         "value_dim")}


def op_cases(seed: int = 11, per_class: int = 12, groups: int = 5,
             group_size: int = 12) -> list[dict[str, Any]]:
    """Random op arguments of every class: ``{"class": name, "args": {...}}``; for GEMM and
    attention also ``groups`` runs of ``group_size`` cases that share every non-shape
    argument (predicted together as one array op too)."""
    rng = np.random.default_rng(seed)
    cases = []
    for name in CLASSES:
        for _ in range(per_class):
            cases.append({"class": name, "args": _draw(rng, name)})
    for name, shape in _SHAPES.items():
        for _ in range(groups):
            first = _draw(rng, name)
            for _ in range(group_size):
                args = _draw(rng, name)
                if name == "Attention":  # keep heads a multiple of kv_heads
                    args = {**first, **{k: args[k] for k in shape if k not in
                                        ("heads", "kv_heads")}}
                else:
                    args = {**first, **{k: args[k] for k in shape}}
                cases.append({"class": name, "args": args})
    return cases


MODEL_CASES: list[dict[str, Any]] = [
    {"config": "llama-2-7b", "hw": "a100-80gb-sxm",
     "kw": {"phase": "generate", "prompt_len": 2048, "gen_len": 256}},
    {"config": "llama-3.1-8b", "hw": "h100-sxm",
     "kw": {"phase": "generate", "prompt_len": 1000, "gen_len": 300, "batch": 8}},
    {"config": "llama-3.1-70b", "hw": "h100-sxm",
     "kw": {"phase": "generate", "prompt_len": 4096, "gen_len": 512, "tp": 4,
            "engine": "trtllm"}},
    {"config": "mixtral-8x7b", "hw": "a100-80gb-sxm",
     "kw": {"phase": "generate", "prompt_len": 512, "gen_len": 128, "batch": 4, "tp": 2}},
    {"config": "llama-3.1-8b", "hw": "a100-80gb-sxm",
     "kw": {"phase": "generate", "prompt_len": 2048, "gen_len": 64, "weight_dtype": "fp8",
            "kv_dtype": "fp8"}},
    {"config": "qwen2.5-7b", "hw": "l4",
     "kw": {"phase": "decode", "context_len": 8000, "batch": 16, "engine": "vllm"}},
    {"config": "gpt-oss-20b", "hw": "b200",
     "kw": {"phase": "prefill", "prompt_len": 3000, "batch": 2, "engine": "sglang"}},
    {"config": "mistral-7b", "hw": "mi300x",
     "kw": {"phase": "generate", "prompt_len": 6000, "gen_len": 100, "attention_impl":
            "naive"}},
]


def _num(x: Any) -> Any:
    arr = np.asarray(x, dtype=np.float64)
    return arr.tolist()


def _prediction(p: pm.Prediction) -> dict[str, Any]:
    out = {f: _num(getattr(p, f)) for f in FIELDS}
    out["bottleneck"] = np.asarray(p.bottleneck).tolist()
    out["stages"] = {name: _num(s.latency_s) for name, s in p.stages}
    return out


def _context(name: str) -> RunContext:
    return RunContext(**CONTEXTS[name])


def record_ops(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for gpu in GPUS:
        hw = pm.load_hardware(gpu)
        for ctx in CONTEXTS:
            for i, case in enumerate(cases):
                op = CLASSES[case["class"]](**case["args"])
                try:
                    res: dict[str, Any] = _prediction(pm.predict(op, hw, context=_context(ctx)))
                except pm.PerfmodelError as exc:
                    res = {"error": exc.field}
                out.append({"case": i, "gpu": gpu, "context": ctx, **res})
    return out


def vector_groups(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases of one class and the same non-shape arguments, as one array op each."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, case in enumerate(cases):
        shape = ARRAY_FIELDS[case["class"]]
        static = tuple(sorted((k, str(v)) for k, v in case["args"].items() if k not in shape))
        groups.setdefault((case["class"], static), []).append(i)
    return [{"class": key[0], "cases": idx} for key, idx in groups.items() if len(idx) > 1]


def array_op(cases: list[dict[str, Any]], group: dict[str, Any]) -> Any:
    cls = CLASSES[group["class"]]
    shape = ARRAY_FIELDS[group["class"]]
    members = [cases[i]["args"] for i in group["cases"]]
    args = {k: (np.asarray([m[k] for m in members], dtype=np.float64) if k in shape else v)
            for k, v in members[0].items()}
    return cls(**args)


def record_vectors(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for gpu in GPUS:
        hw = pm.load_hardware(gpu)
        for ctx in CONTEXTS:
            for g in vector_groups(cases):
                try:
                    res: dict[str, Any] = _prediction(pm.predict(array_op(cases, g), hw,
                                                                  context=_context(ctx)))
                except pm.PerfmodelError as exc:
                    res = {"error": exc.field}
                out.append({"cases": g["cases"], "class": g["class"], "gpu": gpu,
                            "context": ctx, **res})
    return out


def record_models() -> list[dict[str, Any]]:
    out = []
    for case in MODEL_CASES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = pm.predict_model(case["config"], case["hw"], **case["kw"])
        res = {f: _num(getattr(r, f)) for f in ("latency_s", "ttft_s", "tpot_s", "e2e_s",
                                                 "tokens_per_s")}
        res["ops"] = {row.name: _num(row.latency_s) for row in r.ops}
        for ph in (r.prefill, r.decode):
            if ph is not None:
                res[ph.phase] = {row.name: [_num(getattr(row, f)) for f in
                                            ("latency_s", "compute_s", "memory_s",
                                             "overhead_s", "flops", "bytes")]
                                 for row in ph.ops}
        out.append({**case, **res})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/fixtures/refactor_snapshot.json.gz")
    args = parser.parse_args()
    cases = op_cases()
    doc = {"note": "predictions before the op-registry/speed refactor (scripts/"
                   "refactor_snapshot.py); tests/test_refactor_snapshot.py checks them",
           "gpus": list(GPUS), "contexts": CONTEXTS, "cases": cases,
           "ops": record_ops(cases), "vectors": record_vectors(cases),
           "models": record_models()}
    Path(args.out).write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(),
                                             mtime=0))
    print(f"wrote {args.out}: {len(doc['ops'])} op predictions, {len(doc['vectors'])} "
          f"vectorised calls, {len(doc['models'])} model runs")


if __name__ == "__main__":
    main()
