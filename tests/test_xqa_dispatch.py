"""TensorRT-LLM runs a grouped-query decode call on XQA only where its dispatch expects a
gain (DecoderXQARunner::mayHavePerfGain, multi-block mode on): KV heads × sequences ×
max(1, ⌊keys/128⌋) blocks, times kEnableMinBlockFactor = 4, at least the SMs; else its
masked-MHA kernel, except over an fp8 cache with 16-bit queries, which masked MHA does not
support (DecoderXQARunner::shouldUse then keeps XQA). The bounds below are worked by hand
from those lines and the datasheet SM counts (H100 SXM 132, A100 108)."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.engines import attention_kernel, trtllm_xqa_pays
from perfmodel.measurements import Measurement, MeasurementSet
from perfmodel.validation import prepare

# (sequences, KV heads, keys, SMs, XQA pays), by hand
CASES = [
    (1, 8, 527, 132, False),   # ⌊527/128⌋ = 4 blocks: 1·8·4·4 = 128 < 132
    (1, 8, 640, 132, True),    # 5 blocks: 160 ≥ 132
    (4, 8, 100, 132, False),   # under 128 keys still one block: 4·8·1·4 = 128
    (33, 1, 100, 132, True),   # 33·1·1·4 = 132: the bound itself pays
    (16, 1, 64, 108, False),   # A100: 16·4 = 64 < 108
    (16, 1, 1024, 108, True),  # 8 blocks: 512
]


@pytest.mark.parametrize(("batch", "kv_heads", "keys", "units", "pays"), CASES)
def test_the_dispatch_bound(batch: int, kv_heads: int, keys: int, units: int,
                            pays: bool) -> None:
    assert bool(trtllm_xqa_pays(batch, kv_heads, keys, units)) is pays
    vec = trtllm_xqa_pays(np.array([batch, batch]), kv_heads, np.array([keys, keys]), units)
    assert vec.tolist() == [pays, pays]


def test_the_kernel_each_side_of_the_bound() -> None:
    def impl(arch: str, kv: str = "bf16", pays: bool = False, engine: str = "trtllm",
             group: float = 4.0) -> str:
        return attention_kernel(engine, arch, "decode", kv_dtype=kv, group=group,
                                xqa_pays=pays).impl

    assert impl("hopper") == "mmha"
    assert impl("hopper", pays=True) == "xqa"
    assert impl("ampere") == "mmha"
    assert impl("ada", kv="fp8") == "xqa"  # masked MHA takes no fp8 cache under bf16 queries
    assert impl("blackwell") == "trtllm-gen"  # trtllm-gen replaces both there
    assert impl("hopper", engine="vllm") == "flash3"  # TensorRT-LLM's rule only
    assert attention_kernel("trtllm", "hopper", "prefill", group=4.0,
                            xqa_pays=False).impl == "fmha-v2"  # decode only


def _decode(batch: object, keys: object, kv: str = "bf16") -> pm.Attention:
    return pm.Attention(batch=batch, heads=32, kv_heads=8, seq_q=1, seq_kv=keys,
                        head_dim=128, kv_dtype=kv)


def test_engine_call_takes_the_kernel_of_its_side() -> None:
    # H100: one sequence × 8 KV heads pays from 640 keys (five blocks)
    assert pm.engine_call(_decode(1, 512), "trtllm", "h100-sxm").impl == "mmha"
    assert pm.engine_call(_decode(1, 640), "trtllm", "h100-sxm").impl == "xqa"
    assert pm.engine_call(_decode(1, 512, "fp8"), "trtllm", "h100-sxm").impl == "xqa"
    assert pm.engine_call(_decode(np.array([1, 2]), 512, "fp8"), "trtllm",
                          "h100-sxm").impl == "xqa"  # both sides run XQA over fp8
    with pytest.raises(PerfmodelError, match="split the call"):
        pm.engine_call(_decode(1, np.array([512, 8192])), "trtllm", "h100-sxm")


def _row(i: int, batch: int, keys: int, kv: str = "bf16", phase: str = "decode",
         seq_q: int = 1) -> Measurement:
    return Measurement(row=i, op="attention", dtype="bf16", measured_s=20e-6, spec="h100-sxm",
                       source="test", gpu="h100", timing="aic_cuda_graph_replay_mean",
                       phase=phase, causal=True, batch=batch, heads=32, kv_heads=8,
                       seq_q=seq_q, seq_kv=keys, head_dim=128, kv_dtype=kv, engine="trtllm",
                       kernel="torch_flow")


def test_validation_batches_rows_by_the_side_they_fall_on() -> None:
    rows = (_row(1, 1, 512), _row(2, 1, 8192), _row(3, 1, 512, "fp8"), _row(4, 2, 512, "fp8"),
            # a one-token prompt: TensorRT-LLM's context kernel, batched with its phase
            _row(5, 1, 1, phase="prefill"), _row(6, 1, 64, phase="prefill", seq_q=64))
    prep = prepare(MeasurementSet(rows))
    impl = {prep.rows[int(i)].row: getattr(b.op, "impl", "") for b in prep.batches
            for i in b.index}
    assert impl == {1: "mmha", 2: "xqa", 3: "xqa", 4: "xqa", 5: "fmha-v2", 6: "fmha-v2"}
    batch = {prep.rows[int(i)].row: n for n, b in enumerate(prep.batches) for i in b.index}
    assert batch[5] == batch[6]  # a one-token prompt is not split off by the decode bound


def test_a_model_sweep_splits_its_decode_attention_at_the_bound() -> None:
    """Llama-3.1-8B (8 KV heads) decoding one sequence on an H100: masked MHA at 512 keys,
    XQA at 4,096, each point's attention the op engine_call makes for its shape."""
    ctx = pm.RunContext(engine="trtllm", launch="graph")
    for keys, impl in ((512, "mmha"), (4096, "xqa")):
        model = pm.predict_model("llama-3.1-8b", "h100-sxm", engine="trtllm", phase="decode",
                                 batch=1, context_len=keys, step_overhead_s=0.0)
        assert model.decode is not None
        row = model.decode.op("attention")
        call = pm.engine_call(pm.Attention(batch=1, heads=32, kv_heads=8, seq_q=1,
                                           seq_kv=keys, head_dim=128, causal=True),
                              "trtllm", "h100-sxm")
        assert call.impl == impl
        alone = pm.predict(call, "h100-sxm", context=ctx)
        assert float(row.latency_s) / float(row.count) == pytest.approx(
            float(alone.latency_s), rel=1e-9)
