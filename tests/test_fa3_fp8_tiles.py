"""FlashAttention-3's tiles on Hopper in fp8: tile_size_fwd_sm90 (hopper/tile_size.h,
Dao-AILab/flash-attention) gives one-byte kernels more keys per tile than 16-bit ones, as
the engines call it over a paged KV cache without TMA. The expected tiles are that table's,
restated here; the 16-bit ones stay the family's."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm

FP8 = {64: (192, 160), 96: (192, 128), 128: (128, 160), 192: (128, 160), 256: (128, 128)}
BF16 = {64: (192, 128), 128: (128, 128), 256: (128, 80)}


def _tiles(dtype: str, head_dim: int, seq_q: int = 2048) -> tuple[float, float]:
    p = pm.predict(pm.Attention(batch=4, heads=32, kv_heads=8, seq_q=seq_q, seq_kv=4096,
                                head_dim=head_dim, causal=True, dtype=dtype, kv_dtype=dtype,
                                impl="flash3"), "h100-sxm")
    return float(p.details["q_tile"]), float(p.details["kv_tile"])


@pytest.mark.parametrize("head_dim", sorted(FP8))
def test_fp8_kernels_take_fa3s_one_byte_tiles(head_dim: int) -> None:
    assert _tiles("fp8", head_dim) == FP8[head_dim]


@pytest.mark.parametrize("head_dim", sorted(BF16))
def test_bf16_kernels_keep_the_16_bit_tiles(head_dim: int) -> None:
    assert _tiles("bf16", head_dim) == BF16[head_dim]


def test_the_vector_path_picks_the_same_tiles() -> None:
    batch = np.array([1.0, 8.0, 64.0])
    p = pm.predict(pm.Attention(batch=batch, heads=32, kv_heads=8, seq_q=1024, seq_kv=4096,
                                head_dim=128, causal=True, dtype="fp8", kv_dtype="fp8",
                                impl="flash3"), "h100-sxm")
    assert np.all(np.asarray(p.details["kv_tile"]) == 160.0)
