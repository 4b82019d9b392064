"""Attention cost formulas: causal pair counts, GQA traffic, flash vs naive, decode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.ops import Attention, Elementwise, Gemm, Softmax, causal_pairs


def _mask_pairs(seq_q: int, seq_kv: int) -> int:
    """Brute force: query i (of the last seq_q positions) sees key j iff j <= i + (S_kv - S_q)."""
    i = np.arange(seq_q)[:, None]
    j = np.arange(seq_kv)[None, :]
    return int(np.count_nonzero(j <= i + (seq_kv - seq_q)))


@pytest.mark.parametrize("s", [1, 2, 7, 128, 4096])
def test_causal_pairs_square_is_triangle_with_diagonal(s: int) -> None:
    # S(S+1)/2, never S^2/2: for S = 7 that is 28, not 24.5
    assert float(causal_pairs(np.float64(s), np.float64(s))) == s * (s + 1) / 2


def test_causal_pairs_chunked_prefill_by_hand() -> None:
    # 4 new queries after 6 cached keys (S_q = 4, S_kv = 10): each query sees the 6 old keys
    # plus 1..4 new ones: 4*6 + (1+2+3+4) = 24 + 10 = 34 = S_q*(S_kv-S_q) + S_q(S_q+1)/2
    assert float(causal_pairs(np.float64(4), np.float64(10))) == 34.0
    # decode: one query sees every key
    assert float(causal_pairs(np.float64(1), np.float64(4097))) == 4097.0


@settings(max_examples=200, deadline=None)
@given(seq_q=st.integers(1, 64), seq_kv=st.integers(1, 64))
def test_causal_pairs_match_a_brute_force_mask(seq_q: int, seq_kv: int) -> None:
    assert float(causal_pairs(np.float64(seq_q), np.float64(seq_kv))) == _mask_pairs(seq_q, seq_kv)
    op = Attention(batch=1, heads=1, seq_q=seq_q, seq_kv=seq_kv, head_dim=8, causal=True)
    assert float(op.pairs()) == _mask_pairs(seq_q, seq_kv)


def test_flops_by_hand() -> None:
    # B=2, H=4, S=8 causal: pairs = 8*9/2 = 36; D = D_v = 16
    # 2 * 2 * 4 * 36 * (16 + 16) = 18,432
    op = Attention(batch=2, heads=4, seq_q=8, head_dim=16, causal=True, dtype="bf16")
    assert float(op.flops()) == 18_432.0
    # non-causal: 64 pairs -> 2*2*4*64*32 = 32,768; exps = B*H*pairs = 2*4*64 = 512
    full = Attention(batch=2, heads=4, seq_q=8, head_dim=16, causal=False, dtype="bf16")
    assert float(full.flops()) == 32_768.0
    assert float(full.exps()) == 512.0


def test_gqa_kv_bytes_by_hand_and_scale_with_kv_heads() -> None:
    # B=2, H_kv=8, S_kv=1024, D = D_v = 128, bf16: 2*8*1024*(128+128)*2 = 8,388,608 bytes
    gqa = Attention(batch=2, heads=32, kv_heads=8, seq_q=1024, head_dim=128, dtype="bf16")
    assert float(gqa.kv_bytes()) == 8_388_608.0
    for kv in (1, 2, 4, 16, 32):
        other = Attention(batch=2, heads=32, kv_heads=kv, seq_q=1024, head_dim=128,
                          dtype="bf16")
        assert float(other.kv_bytes()) == 8_388_608.0 * kv / 8
        # Q and O belong to query heads: unchanged by GQA
        assert float(other.q_bytes()) == float(gqa.q_bytes())
        assert float(other.o_bytes()) == float(gqa.o_bytes())


def test_value_dim_and_kv_dtype_enter_kv_bytes() -> None:
    # D=192, D_v=128, fp8 KV: 1*4*100*(192+128)*1 = 128,000 bytes
    op = Attention(batch=1, heads=4, seq_q=100, head_dim=192, value_dim=128, dtype="bf16",
                   kv_dtype="fp8")
    assert float(op.kv_bytes()) == 128_000.0


def test_decode_traffic_is_kv_cache_plus_q_plus_o() -> None:
    # B=4, H=32, H_kv=8, S_q=1, S_kv=4096, D=128, bf16
    # KV cache: 4*8*4096*(128+128)*2 = 67,108,864; Q = O = 4*32*1*128*2 = 32,768
    op = Attention(batch=4, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                   causal=True, dtype="bf16")
    expected = 67_108_864.0 + 32_768.0 + 32_768.0
    assert float(op.bytes_min()) == expected
    # the fused kernel has one query tile: K/V are streamed once whatever the cache
    for cache in (0.0, 50e6, 1e12):
        assert float(op.flash_bytes(q_tile=128, heads_in_flight=132, cache_bytes=cache)) \
            == expected
    # an fp8 KV cache halves the dominant term
    fp8 = Attention(batch=4, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                    causal=True, dtype="bf16", kv_dtype="fp8")
    assert float(fp8.bytes_min()) == 33_554_432.0 + 65_536.0


@settings(max_examples=100, deadline=None)
@given(batch=st.integers(1, 4), heads=st.sampled_from([8, 32]), seq=st.integers(256, 16384),
       head_dim=st.sampled_from([64, 128]), causal=st.booleans(),
       q_tile=st.sampled_from([64, 128]), cache=st.sampled_from([0.0, 40e6]))
def test_flash_traffic_never_includes_the_score_matrix(batch: int, heads: int, seq: int,
                                                       head_dim: int, causal: bool,
                                                       q_tile: int, cache: float) -> None:
    op = Attention(batch=batch, heads=heads, seq_q=seq, head_dim=head_dim, causal=causal,
                   dtype="fp16")
    flash = float(op.flash_bytes(q_tile=q_tile, heads_in_flight=heads, cache_bytes=cache))
    # at most Q + O + K/V re-read once per query tile: no S_q x S_kv term
    bound = float(op.q_bytes() + op.o_bytes() + op.kv_bytes() * np.ceil(seq / q_tile))
    assert float(op.bytes_min()) <= flash <= bound
    # the unfused stages move the B*H*S_q*S_kv score matrix at least six times (QK^T writes
    # S; scale/mask reads and writes it; softmax reads S and writes P; PV reads P)
    scores = batch * heads * seq * seq * 2.0
    naive = sum(float(stage.cost().bytes_min) for _, stage in op.naive_stages())
    assert naive >= 6 * scores
    # with K/V resident in cache the fused kernel moves exactly the minimum
    assert float(op.flash_bytes(q_tile=q_tile, heads_in_flight=heads, cache_bytes=1e15)) \
        == float(op.bytes_min())


def test_naive_stages_are_the_four_unfused_kernels() -> None:
    op = Attention(batch=2, heads=8, kv_heads=2, seq_q=64, seq_kv=96, head_dim=32,
                   value_dim=16, causal=True, dtype="fp16")
    stages = op.naive_stages()
    assert [name for name, _ in stages] == ["qk", "scale_mask", "softmax", "pv"]
    qk, mask, soft, pv = (stage for _, stage in stages)
    assert isinstance(qk, Gemm)
    assert isinstance(mask, Elementwise)
    assert isinstance(soft, Softmax)
    assert isinstance(pv, Gemm)
    # QK^T: (S_q x D) @ (D x S_kv) per query head, B*H_q = 16 of them
    assert (float(qk.m), float(qk.n), float(qk.k), float(qk.batch)) == (64, 96, 32, 16)
    # PV: (S_q x S_kv) @ (S_kv x D_v)
    assert (float(pv.m), float(pv.n), float(pv.k), float(pv.batch)) == (64, 16, 96, 16)
    # softmax rows = B*H*S_q = 1024 of length S_kv
    assert (float(soft.rows), float(soft.cols)) == (1024, 96)
    assert float(mask.numel) == 16 * 64 * 96


@settings(max_examples=100, deadline=None)
@given(seq_q=st.integers(1, 2048), extra=st.integers(0, 2048), head_dim=st.sampled_from([64, 128]),
       value_dim=st.sampled_from([64, 128]), causal=st.booleans())
def test_naive_matmul_flops_cover_flash_flops(seq_q: int, extra: int, head_dim: int,
                                              value_dim: int, causal: bool) -> None:
    op = Attention(batch=2, heads=4, seq_q=seq_q, seq_kv=seq_q + extra, head_dim=head_dim,
                   value_dim=value_dim, causal=causal, dtype="bf16")
    stages = dict(op.naive_stages())
    matmul = float(stages["qk"].cost().tensor_flops + stages["pv"].cost().tensor_flops)
    flash = float(op.flops())
    assert matmul >= flash
    if not causal:
        # the full rectangle either way: 2*B*H*S_q*S_kv*(D + D_v)
        assert matmul == flash


def test_math_backend_computes_in_fp32_for_16_bit_inputs() -> None:
    """PyTorch's MATH backend (pytorch/pytorch#128922): Q, K, V cast up to fp32, Q and K
    pre-scaled, both GEMMs and the softmax in fp32, O cast back; no mask kernel when the
    call is not causal; fp32 inputs need no casts but are pre-scaled too. Bytes and FLOPs
    by hand for B=2, H=H_kv=4, S=64, D=D_v=32, bf16."""
    op = Attention(batch=2, heads=4, seq_q=64, seq_kv=64, head_dim=32, dtype="bf16",
                   impl="math")
    stages = dict(op.naive_stages())
    assert list(stages) == ["upcast", "prescale", "qk", "softmax", "pv", "downcast"]
    q = 2 * 4 * 64 * 32  # Q elements; K and V as many each
    # upcast: Q, K, V read at 2 bytes, written at 4
    assert float(stages["upcast"].cost().bytes_min) == 3 * q * (2 + 4)
    # prescale: Q and K read and written in fp32
    assert float(stages["prescale"].cost().bytes_min) == 2 * q * (4 + 4)
    for name in ("qk", "pv"):
        gemm = stages[name]
        assert isinstance(gemm, Gemm)
        assert gemm.dtype == "fp32"
        assert float(gemm.cost().flops) == 2 * 64 * 64 * 32 * 8  # per head, B*H = 8 heads
    soft = stages["softmax"]
    assert isinstance(soft, Softmax)
    assert soft.dtype == "fp32"
    # downcast: O read at 4 bytes, written at 2
    assert float(stages["downcast"].cost().bytes_min) == q * (4 + 2)
    # causal adds the mask kernel over the fp32 scores; fp32 inputs need no casts
    causal = Attention(batch=2, heads=4, seq_q=64, seq_kv=64, head_dim=32, dtype="bf16",
                       impl="math", causal=True)
    assert [n for n, _ in causal.naive_stages()] == [
        "upcast", "prescale", "qk", "mask", "softmax", "pv", "downcast"]
    mask = dict(causal.naive_stages())["mask"]
    assert float(mask.cost().bytes_min) == 8 * 64 * 64 * (4 + 4)
    fp32 = Attention(batch=2, heads=4, seq_q=64, head_dim=32, dtype="fp32", impl="math")
    assert [n for n, _ in fp32.naive_stages()] == ["prescale", "qk", "softmax", "pv"]


def test_math_is_slower_than_naive_where_fp32_is_slower() -> None:
    import perfmodel as pm

    def op(impl: str) -> Attention:
        return Attention(batch=8, heads=32, seq_q=512, head_dim=128, dtype="bf16", impl=impl)

    naive = pm.predict(op("naive"), "h100-sxm")
    math_ = pm.predict(op("math"), "h100-sxm")
    assert math_.details["impl"] == "math"
    # fp32 GEMMs on CUDA cores (67 of 989 TFLOP/s) and 4-byte scores: several times slower
    assert math_.latency_s > 3 * naive.latency_s


def test_rotated_inputs_widen_a_warm_attention_footprint_only_when_they_rotate() -> None:
    """A harness rotating ``copies`` KV caches and outputs reads the queries from one buffer
    unless ``input_copies`` says they rotate too, as for a GEMM's inputs (the queries were
    always multiplied: input_copies changed nothing for attention)."""
    from perfmodel.timing import RunContext, predict

    op = Attention(batch=1, heads=32, kv_heads=8, seq_q=512, seq_kv=512, head_dim=128,
                      causal=True)
    shared = RunContext(l2="warm", copies=4.0)
    rotated = RunContext(l2="warm", copies=4.0, input_copies=True)
    one = RunContext(l2="warm", copies=1.0)
    m_shared, m_rotated, m_one = (float(predict(op, "h100-sxm", context=c).memory_s)
                                  for c in (shared, rotated, one))
    assert m_one < m_shared < m_rotated
