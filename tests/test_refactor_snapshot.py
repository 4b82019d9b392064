"""Predictions of a fixed random set of ops (every class, six GPUs, four run contexts) and of
a few whole-model runs equal, to 1e-12 relative, the values recorded by
``scripts/refactor_snapshot.py`` (tests/fixtures/refactor_snapshot.json.gz): a restructuring
of the code must not move a prediction.

The record is retaken only with a deliberate change of the model, said in its commit. It was
last retaken when TensorRT-LLM's masked-MHA decode began to split its keys by the library's
own multi-block launch rule (one wave of its widest CTAs, whole key loops, the shared-memory
floor) and to pay its last block's merge as one more tile step instead of a combine kernel,
with the refit of every constant that came with it: 831 op latencies moved by 0.997-1.001x
(refit only), the model runs' headline figures by at most 0.11 %; before that when
TensorRT-LLM's decode began to run its masked-MHA kernel where its XQA dispatch expects no
gain (over a 16-bit cache), with the refit of every constant that came with it: 831 op
latencies moved by 0.946-1.005x (refit only: every record names its kernel, and the dispatch
enters through the engine's choice), the model runs' headline figures by at most 0.17 %
(Llama 3.1 70B's TPOT on four H100s with TensorRT-LLM, whose decode stays on XQA); before
that when a resident attention kernel's CTAs per SM began to follow from its own shared
memory (FlashAttention-2's one K/V stage, its split-KV tiles through a paged cache), a lone
CTA of a kernel sized for two per SM to run at a fitted share of its SM (a decode tile at
its own), and TensorRT-LLM's XQA to split by its multi-block rule, with the refit of every
constant that came with them: 831 op latencies moved by 0.998-1.309x, the model runs'
headline figures by at most 0.20 % (Llama 3.1 70B's TPOT on four H100s with TensorRT-LLM,
whose XQA decode now splits its keys over more blocks); before that when TensorRT-LLM's
Hopper context kernels and its trtllm-gen kernels began to end a causal call of more query
tiles than slots with the last tile they start, a long one
(``AttentionFamily.causal_order``), with the refit of every constant that came with it: 831
op latencies moved by 0.921-1.015x, the model runs' headline figures by at most 0.83 %
(Llama 3.1 70B's TTFT on four H100s with TensorRT-LLM, whose prefill attention, 512 tiles on
132 SMs, takes 18 % longer); before that when a causal call's compute began to be no less
than its longest CTA's (the last query tile, which visits every key of its split), with the
refit of every constant that came with it: 831 op latencies moved by 0.956-1.072x, the model
runs' headline figures by at most 0.04 %; before that when trtllm-gen's decode kernels began
to load whole 128-key KV tiles (``AttentionFamily.whole_kv_tiles``), with the refit of every
constant that came with it: 831 op latencies moved by 0.885-2.064x (the largest, 1.47-2.06x,
a B200 trtllm-gen decode over one cached token at head dim 512, which now moves a whole
tile; the rest refit), the model runs' headline figures by at most 0.23 %; before that when
TensorRT-LLM's SM89 fp8 context kernels took one fp8 rate per kernel build
(``AttentionFamily.fp8_builds``), with the refit of every constant that came with it: 831 op
latencies moved by 0.982-1.005x (refit noise: no record is a TensorRT-LLM fp8 context call
on an SM89 GPU), the model runs by at most 0.03 %; before that when MXFP4 expert weights
began to run W4A8 (fp8 MMA, MXFP8 activations) on GPUs with fp4 tensor cores (the gpt-
oss-20b model run on the B200: TTFT 26.97 → 26.74 ms; no op record moved); before that when
the native fused attention (``flash``) began to be PyTorch's memory-efficient kernel for
heads wider than 256 where it is FlashAttention-2 or -3 (two head-dim-512 cases on the H100,
L4 and MI300X: 22 op records, 0.76-5.4x; nothing else moved); before that when FlashInfer
attention stopped running on other vendors' GPUs (36 op and 3 vectorised MI300X records now
raise; no value moved); before that when GEMM kernel families began to run only where they
are built (cuBLAS and CUTLASS GEMMs on the MI300X and Arc Pro B60: 171 op and 12 vectorised
records that predicted now raise; no value moved); before that when a call in an engine's
context on a GPU the engine does not run on became an error (TensorRT-LLM's "eager-trtllm"
context on the MI300X and Arc Pro B60: 288 op and 52 vectorised records that predicted now
raise, the others raise the engine's error first; no value moved); before that when
TensorRT-LLM's kernel families (fmha-v2, XQA, masked MHA) stopped running on other vendors'
GPUs (12 records of two cases on the MI300X and Arc Pro B60 became the error they now raise;
nothing else moved); before that when ``flash`` and ``flash3`` on Blackwell began to mean
FA4's kernel (FA3 has no Blackwell build; 92 B200 attention records moved, 0.63-2.0x);
before that when TensorRT-LLM's SM89 block-fp8 GEMM began to run its one 32×128 tile
(perfmodel.engines.gemm_dispatch, with the refit that came with it); before that when vLLM's
and SGLang's SM89 fp8 scaled-mm kernels began to take the tile of their engines' dispatch
tables (with the refit that came with it); before that when a split-K GEMM's reduce kernel
began to cost a fitted number of graph kernel floors per architecture (gemm_split_reduce,
with the refit that came with it); before that when a persistent attention family's decode
kernels began to hide a share of their later tiles' fixed time of their own
(decode_tile_overlap, with the refit that came with it); before that when the CTAs of GEMM
families that never split K began to pull their pipeline's in-flight bytes over the memory
latency (with the refit that came with it); before that when kernel-design constants with no
value fitted for their architecture began to take their predecessor architecture's
(timing.constants.ARCH_PREDECESSOR: XQA on a B200 takes Hopper's constants, FlashAttention-2
on an L4 Ampere's where Ada has none); before that with GEMM CTAs moving their own tiles'
bytes at a fitted per-CTA bandwidth (and the refit that came with it), whose record took in
the deliberate changes earlier records allowed as exceptions.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

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

SNAPSHOT = Path(__file__).parent / "fixtures" / "refactor_snapshot.json.gz"
DOC: dict[str, Any] = json.loads(gzip.decompress(SNAPSHOT.read_bytes()))
CLASSES: dict[str, Any] = {c.__name__: c for c in (
    Gemm, Attention, Elementwise, Norm, Activation, Rotary, Softmax, Embedding, AllReduce)}
FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes", "bytes_min")
#: Shape arguments of each class (concatenated into arrays for the vectorised calls).
SHAPES = {"Gemm": ("m", "n", "k", "batch"),
          "Attention": ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                        "value_dim"),
          "Elementwise": ("numel", "reads", "writes"), "Norm": ("tokens", "hidden"),
          "Activation": ("tokens", "width"), "Rotary": ("tokens", "heads", "kv_heads",
                                                          "head_dim"),
          "Softmax": ("rows", "cols"), "Embedding": ("tokens", "hidden", "vocab"),
          "AllReduce": ("numel", "gpus")}
RTOL = 1e-12


def _close(got: Any, want: Any) -> bool:
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    return bool(np.all(np.abs(g - w) <= RTOL * np.abs(w) + 1e-300))


def _op(case: dict[str, Any]) -> Any:
    return CLASSES[case["class"]](**case["args"])


def _check(p: pm.Prediction, want: dict[str, Any], where: str) -> list[str]:
    bad = [f"{where} {f}: {getattr(p, f)!r} != {want[f]!r}" for f in FIELDS
           if not _close(getattr(p, f), want[f])]
    if np.asarray(p.bottleneck).tolist() != want["bottleneck"]:
        bad.append(f"{where} bottleneck: {p.bottleneck!r} != {want['bottleneck']!r}")
    stages = {name: s.latency_s for name, s in p.stages}
    if sorted(stages) != sorted(want["stages"]):
        bad.append(f"{where} stages {sorted(stages)} != {sorted(want['stages'])}")
    else:
        bad += [f"{where} stage {n}" for n in stages if not _close(stages[n], want["stages"][n])]
    return bad


def _predicted(make: Any, spec: dict[str, Any], hw: Any, ctx: RunContext,
               rec: dict[str, Any], where: str, bad: list[str]) -> Any:
    """The prediction of ``make(spec)``, or None when it raised or the record holds an error
    (a mismatch between the two is added to ``bad``)."""
    try:
        p = pm.predict(make(spec), hw, context=ctx)
    except pm.PerfmodelError as exc:
        if rec.get("error") != exc.field:
            bad.append(f"{where}: raised {exc.field!r}, recorded {rec.get('error')!r}")
        return None
    if "error" in rec:
        bad.append(f"{where}: predicted, recorded the error {rec['error']!r}")
        return None
    return p


@pytest.mark.parametrize("gpu", DOC["gpus"])
def test_one_op_at_a_time_unchanged(gpu: str) -> None:
    hw = pm.load_hardware(gpu)
    bad: list[str] = []
    for rec in (r for r in DOC["ops"] if r["gpu"] == gpu):
        case = DOC["cases"][rec["case"]]
        ctx = RunContext(**DOC["contexts"][rec["context"]])
        where = f"case {rec['case']} {case['class']} {rec['context']}"
        p = _predicted(_op, case, hw, ctx, rec, where, bad)
        if p is None:
            continue
        bad += _check(p, rec, where)
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} differences)"


def _array_op(group: dict[str, Any]) -> Any:
    members = [DOC["cases"][i]["args"] for i in group["cases"]]
    shape = SHAPES[group["class"]]
    args = {k: (np.asarray([m[k] for m in members], dtype=np.float64) if k in shape else v)
            for k, v in members[0].items()}
    return CLASSES[group["class"]](**args)


@pytest.mark.parametrize("gpu", DOC["gpus"])
def test_vectorised_calls_unchanged(gpu: str) -> None:
    hw = pm.load_hardware(gpu)
    bad: list[str] = []
    for rec in (r for r in DOC["vectors"] if r["gpu"] == gpu):
        ctx = RunContext(**DOC["contexts"][rec["context"]])
        where = f"{rec['class']} x{len(rec['cases'])} {rec['context']}"
        p = _predicted(_array_op, rec, hw, ctx, rec, where, bad)
        if p is None:
            continue
        bad += _check(p, rec, where)
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} differences)"


@pytest.mark.parametrize("case", DOC["models"], ids=lambda c: f"{c['config']}-{c['hw']}")
def test_model_predictions_unchanged(case: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = pm.predict_model(case["config"], case["hw"], **case["kw"])
    bad = [f for f in ("latency_s", "ttft_s", "tpot_s", "e2e_s", "tokens_per_s")
           if not np.allclose(getattr(r, f), case[f], rtol=RTOL, atol=0.0, equal_nan=True)]
    rows = {row.name: row.latency_s for row in r.ops}
    assert sorted(rows) == sorted(case["ops"])
    bad += [f"ops.{n}" for n in rows if not _close(rows[n], case["ops"][n])]
    for ph in (r.prefill, r.decode):
        if ph is None:
            continue
        for row in ph.ops:
            got = [getattr(row, f) for f in ("latency_s", "compute_s", "memory_s",
                                              "overhead_s", "flops", "bytes")]
            if not _close(got, case[ph.phase][row.name]):
                bad.append(f"{ph.phase}.{row.name}")
    assert not bad, bad


def test_snapshot_covers_every_class_and_some_errors() -> None:
    classes = {DOC["cases"][r["case"]]["class"] for r in DOC["ops"] if "error" not in r}
    assert classes == set(CLASSES)
    assert {r["class"] for r in DOC["vectors"] if "error" not in r} == set(CLASSES)
    assert any("error" in r for r in DOC["ops"])
