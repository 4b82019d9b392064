"""Attention over a multi-head latent cache (``Attention.shared_kv``) and the engines' MLA
decode family (``mla``): bytes and FLOPs by hand, the cache write, the CLI, engine calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.engines import ENGINES
from perfmodel.measurements import read_measurements


def test_shared_kv_attention_counts_one_latent_vector_per_token() -> None:
    """Absorbed MLA decode: B = 4 sequences, 16 heads over one latent KV head of D = 576
    (512 latent + 64 rotary) elements, values its first 512, 1,000 keys, bf16."""
    b, heads, skv, d, dv = 4, 16, 1000, 576, 512
    op = pm.Attention(batch=b, heads=heads, kv_heads=1, seq_q=1, seq_kv=skv, head_dim=d,
                      value_dim=dv, causal=True, dtype="bf16", impl="mla", shared_kv=True)
    p = pm.predict(op, "h100-sxm")
    cache = b * skv * d * 2                  # the latent cache read once: D per token
    q, o = b * heads * d * 2, b * heads * dv * 2
    assert float(p.bytes_min) == pytest.approx(cache + q + o, rel=1e-12)
    # one query sees every key: 2·pairs·(D + D_v) per head
    assert float(p.flops) == pytest.approx(2 * b * heads * skv * (d + dv), rel=1e-12)
    separate = pm.Attention(batch=b, heads=heads, kv_heads=1, seq_q=1, seq_kv=skv,
                            head_dim=d, value_dim=dv, causal=True, dtype="bf16", impl="mla")
    extra = b * skv * dv * 2                 # K and V as two vectors: D_v more per token
    assert float(pm.predict(separate, "h100-sxm").bytes_min) \
        == pytest.approx(cache + extra + q + o, rel=1e-12)


def test_shared_kv_cache_write_counts_the_latent_once() -> None:
    op = pm.Attention(batch=2, heads=16, kv_heads=1, seq_q=1, seq_kv=64, head_dim=576,
                      value_dim=512, shared_kv=True, kv_write=True)
    stage = op.prologue_stage()
    assert stage is not None
    assert float(stage.numel) == 2 * 1 * 576  # B·S_q·H_kv·D elements


def test_cli_shared_kv_counts_the_latent(capsys: pytest.CaptureFixture[str]) -> None:
    from perfmodel.cli.main import main

    argv = ["predict", "attention", "--gpu", "h100-sxm", "--batch", "8", "--heads", "16",
            "--kv-heads", "1", "--seq-q", "1", "--seq-kv", "4096", "--head-dim", "576",
            "--value-dim", "512", "--dtype", "bf16", "--impl", "mla", "--json"]
    assert main([*argv, "--shared-kv"]) == 0
    data = json.loads(capsys.readouterr().out)
    # the latent cache 8·4096·576·2 B, Q 8·16·576·2, O 8·16·512·2
    assert data["bytes_min"] == 8 * 4096 * 576 * 2 + 8 * 16 * 576 * 2 + 8 * 16 * 512 * 2
    assert data["details"]["impl"] == "mla"
    assert main(argv) == 0  # without the flag K and V are two vectors: 512 more per token
    assert json.loads(capsys.readouterr().out)["bytes_min"] == data["bytes_min"] \
        + 8 * 4096 * 512 * 2


@pytest.mark.parametrize("engine", ENGINES[1:])
def test_engine_call_of_a_latent_cache_is_the_mla_family(engine: str) -> None:
    op = pm.Attention(batch=8, heads=16, kv_heads=1, seq_q=1, seq_kv=4096, head_dim=576,
                      value_dim=512, shared_kv=True, kv_write=True)
    call = pm.engine_call(op, engine, "h100-sxm")
    assert call.impl == "mla"
    assert call.shared_kv
    assert call.kv_write


_LATENT_ROWS = """spec,source,op,dtype,batch,heads,kv_heads,seq_q,seq_kv,head_dim,value_dim,\
causal,phase,measured_us,timing,kernel,engine,kv_layout
h100-sxm,mine,attention,bf16,64,128,1,1,4096,576,512,true,decode,1,aic_cuda_graph_replay_mean,\
flashmla,sglang,latent
h100-sxm,mine,attention,bf16,32,16,1,1,16384,576,512,true,decode,1,aic_cuda_graph_replay_mean,\
flashmla,sglang,latent
"""


def test_latent_cache_rows_are_validated_as_the_mla_call(tmp_path: Path) -> None:
    """A measurement row with ``kv_layout=latent`` is the absorbed MLA decode over a latent
    cache: it is predicted as ``Attention(shared_kv=True)`` in the ``mla`` family (whatever
    engine ran it), in a group of its own."""
    from perfmodel.validation import group_key, group_label, prepare

    path = tmp_path / "mla.csv"
    path.write_text(_LATENT_ROWS)
    rows = read_measurements(path).rows
    assert [r.kv_layout for r in rows] == ["latent", "latent"]
    prep = prepare(path)
    ctx = pm.RunContext(launch="graph", engine="sglang")
    for r, got in zip(prep.rows, prep.predict(), strict=True):
        op = pm.Attention(batch=r.batch, heads=r.heads, kv_heads=1, seq_q=1, seq_kv=r.seq_kv,
                          head_dim=576, value_dim=512, causal=True, dtype="bf16", impl="mla",
                          shared_kv=True, phase="decode")
        assert got == pytest.approx(pm.predict(op, "h100-sxm", context=ctx).latency_s,
                                    rel=1e-9)
        assert group_label(*group_key(r, "h100-sxm")).endswith("/flashmla latent")


@pytest.mark.parametrize(("change", "message"), [
    ({"kv_layout": "paged"}, "unknown layout"),
    ({"op": "gemm", "m": "8", "n": "8", "k": "8"}, "describes an attention cache"),
])
def test_bad_kv_layouts_are_named(tmp_path: Path, change: dict[str, str],
                                  message: str) -> None:
    header, first = _LATENT_ROWS.replace("\\\n", "").splitlines()[:2]
    row = dict(zip(header.split(","), first.split(","), strict=True))
    row.update(change)
    path = tmp_path / "bad.csv"
    cols = list(row)
    path.write_text(",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n")
    with pytest.raises(pm.PerfmodelError, match=message):
        read_measurements(path)  # the file's only row: "no usable rows", naming why


@settings(max_examples=120, deadline=None)
@given(gpu=st.sampled_from(["h100-sxm", "b200", "a100-80gb-sxm", "l40s", "mi300x"]),
       impl=st.sampled_from(["mla", "flash", "flash2", "flashinfer", "triton"]),
       batch=st.integers(1, 256), heads=st.sampled_from([1, 2, 8, 16, 64, 128]),
       seq_q=st.sampled_from([1, 1, 2, 4]), seq_kv=st.integers(1, 40_000),
       dims=st.sampled_from([(64, 64), (128, 64), (192, 96), (576, 512)]),
       fp8_cache=st.booleans())
def test_a_latent_cache_never_costs_more_than_separate_keys_and_values(
        gpu: str, impl: str, batch: int, heads: int, seq_q: int, seq_kv: int,
        dims: tuple[int, int], fp8_cache: bool) -> None:
    """The same attention over one cached vector per token (``shared_kv``) moves fewer
    bytes and takes no longer than over separate K and V: the kernel is the same, only its
    K/V stream shrinks (its residency is not allowed to change with it)."""
    d, dv = dims
    kv = "fp8" if fp8_cache and gpu in ("h100-sxm", "b200", "l40s", "mi300x") else "bf16"
    common: dict[str, Any] = {
        "batch": batch, "heads": heads, "kv_heads": 1, "seq_q": seq_q, "seq_kv": seq_kv,
        "head_dim": d, "value_dim": dv, "causal": True, "dtype": "bf16", "kv_dtype": kv,
        "impl": impl}
    try:
        latent = pm.predict(pm.Attention(**common, shared_kv=True), gpu)
    except pm.PerfmodelError:  # a family with no build there: both calls refuse
        with pytest.raises(pm.PerfmodelError):
            pm.predict(pm.Attention(**common), gpu)
        return
    separate = pm.predict(pm.Attention(**common), gpu)
    assert float(latent.bytes_min) < float(separate.bytes_min)
    assert float(latent.latency_s) <= float(separate.latency_s) * (1 + 1e-12)


@pytest.mark.parametrize(("engine", "gpu", "rows", "impl"), [
    ("vllm", "h100-sxm", 8, "flashinfer"), ("vllm", "h100-sxm", 31, "flashinfer"),
    ("vllm", "h100-sxm", 32, "deepgemm"), ("vllm", "b200", 8, "deepgemm"),
    ("sglang", "h100-sxm", 8, "deepgemm"), ("trtllm", "h100-sxm", 8, "cutlass")])
def test_block_fp8_engine_call_by_rows(engine: str, gpu: str, rows: int, impl: str) -> None:
    """vLLM's block-scaled fp8 linear on Hopper: FlashInfer's kernel below 32 rows,
    DeepGEMM from 32 (FlashInferFp8DeepGEMMDynamicBlockScaledKernel); the others by engine."""
    op = pm.Gemm(m=rows, n=4096, k=7168, dtype="fp8", quant="block")
    assert pm.engine_call(op, engine, gpu).impl == impl


def test_block_fp8_engine_call_straddling_the_bound_is_an_error() -> None:
    op = pm.Gemm(m=np.asarray([8, 64]), n=4096, k=7168, dtype="fp8", quant="block")
    with pytest.raises(pm.PerfmodelError, match="split the call"):
        pm.engine_call(op, "vllm", "h100-sxm")
    assert pm.engine_call(op, "vllm", "b200").impl == "deepgemm"
