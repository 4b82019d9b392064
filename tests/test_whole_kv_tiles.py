"""trtllm-gen's decode kernels load whole KV tiles (128 keys on Blackwell): the bytes of a
one-token call count every key up to the end of each split's last tile. Expected bytes are
derived here by hand: Q and O once (B·H_q·D·s), K and V of the keys loaded
(B·H_kv·keys·(D + D_v)·s_kv), the split partials (2·B·H_q·splits·(D_v + 2)·4 bytes, fp32)."""

from __future__ import annotations

import math

import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.kernels import ATTENTION_FAMILIES, attention_family

CTX = RunContext(launch="graph")
KV_TILE = 128  # trtllm-gen's key tile for head dims ≤ 256 (its tile rule)


def _decode(seq_kv: int, *, batch: int = 256, heads: int = 32, kv_heads: int = 8,
            head_dim: int = 128, kv_dtype: str = "bf16", impl: str = "trtllm-gen",
            gpu: str = "b200") -> pm.Prediction:
    op = pm.Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=1, seq_kv=seq_kv,
                      head_dim=head_dim, dtype="bf16", kv_dtype=kv_dtype, impl=impl)
    return predict(op, gpu, context=CTX)


def _q_and_o(batch: int, heads: int, head_dim: int) -> int:
    return 2 * batch * heads * head_dim * 2  # bf16 Q read once, O written once


@pytest.mark.parametrize("seq_kv", [1, 2, 64, 127, 128, 129, 255, 256, 300])
@pytest.mark.parametrize(("kv_dtype", "s_kv"), [("bf16", 2), ("fp8", 1)])
def test_a_decode_call_moves_its_keys_up_to_the_tile_end(seq_kv: int, kv_dtype: str,
                                                         s_kv: int) -> None:
    p = _decode(seq_kv, kv_dtype=kv_dtype)
    assert p.details["splits"] == 1.0  # 2,048 (sequence, KV head) units fill the SMs
    keys = KV_TILE * math.ceil(seq_kv / KV_TILE)
    expected = _q_and_o(256, 32, 128) + 256 * 8 * keys * (128 + 128) * s_kv
    assert float(p.bytes) == expected
    # the minimum still counts only the keys the sequence has
    assert float(p.bytes_min) == _q_and_o(256, 32, 128) + 256 * 8 * seq_kv * 256 * s_kv


def test_each_split_pads_its_own_last_tile() -> None:
    """One sequence over many keys is split; each split loads whole tiles of its share."""
    seq_kv = 1000
    p = _decode(seq_kv, batch=1)
    s = float(p.details["splits"])
    assert s > 1
    keys = s * KV_TILE * math.ceil(seq_kv / s / KV_TILE)
    partials = 2 * 1 * 32 * s * (128 + 2) * 4
    expected = _q_and_o(1, 32, 128) + 1 * 8 * keys * 256 * 2 + partials
    assert float(p.bytes) == pytest.approx(expected, rel=1e-12)


def test_time_is_flat_within_a_tile_and_steps_past_it() -> None:
    flat = {float(_decode(k).latency_s) for k in (1, 16, 64, 128)}
    assert len(flat) == 1
    assert float(_decode(129).latency_s) > flat.pop()


@pytest.mark.parametrize(("impl", "gpu"), [("flash3", "h100-sxm"), ("xqa", "h100-sxm"),
                                           ("flash2", "a100-80gb-sxm"),
                                           ("flashinfer", "l40s")])
def test_other_families_move_only_the_keys_they_have(impl: str, gpu: str) -> None:
    p = _decode(2, impl=impl, gpu=gpu)
    assert float(p.details["splits"]) == 1.0  # two keys are never split
    assert float(p.bytes) == float(p.bytes_min)
    assert not attention_family(impl).whole_kv_tiles


def test_prefill_is_unchanged() -> None:
    """The trait is the decode kernel's: a short prompt's bytes are the keys it has."""
    op = pm.Attention(batch=4, heads=32, kv_heads=8, seq_q=16, seq_kv=16, head_dim=128,
                      causal=True, dtype="bf16", impl="trtllm-gen")
    p = predict(op, "b200", context=CTX)
    assert float(p.bytes) == float(p.bytes_min)


def test_only_trtllm_gen_declares_it() -> None:
    assert {f.name for f in ATTENTION_FAMILIES.values() if f.whole_kv_tiles} == {"trtllm-gen"}
