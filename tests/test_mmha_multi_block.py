"""TensorRT-LLM's masked-MHA decode kernel (its decode path for one query head per KV head,
and for grouped heads under XQA's dispatch bound) splits a sequence's keys in multi-block
mode by the library's own launch rule (decoderMaskedMultiheadAttentionLaunch.h
``multi_block_grid_setup``; the attention op's ``getMaxNumSeqLenTile`` and
``estimate_min_multi_block_count``):

- CTA threads 256·min(⌈4·SMs/(B·H)⌉, 4), launched as 256 / 512 / 1024;
- keys per loop ⌈threads / v⌉·8, v = D'·2/16 (D' the head dim rounded up to a power of 2);
- blocks = max(m₀, min(⌈S/keys per loop⌉, ⌈SMs/(B·H)⌉)), m₀ the blocks whose logits fit
  the shared memory: ⌈⌈S/4⌉ / ⌊(smem − 1 KiB reserved − 2 KiB kept)/24⌋⌉;
- the last block merges the partial results inside the kernel: one launch.

The counts below are worked by hand from those lines, the datasheet SM counts (H100 SXM
132, L40S 142) and shared memory per SM (228 KiB, 100 KiB)."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._xp import SCALAR, VECTOR
from perfmodel.timing import RunContext, predict
from perfmodel.timing.attention import trtllm_mmha_blocks

H100 = (132, 228 * 1024.0)
L40S = (142, 100 * 1024.0)
# (B·H, keys, head dim, (SMs, smem), blocks), by hand
CASES = [
    # 1024 threads (⌈528/32⌉ > 4), v = 16 → 512 keys a loop: ⌈4096/512⌉ = 8 > ⌈132/32⌉ = 5
    (32, 4096, 128, H100, 5),
    (32, 1024, 128, H100, 2),      # ⌈1024/512⌉ = 2 < 5
    (32, 100, 128, H100, 1),       # one loop holds every key
    (256, 4096, 128, H100, 1),     # ⌈132/256⌉ = 1: no split with B·H ≥ SMs
    # head dim 64: v = 8 → 1024 keys a loop; ⌈132/4⌉ = 33 does not bind
    (4, 2048, 64, H100, 2),
    (4, 2048, 80, H100, 4),        # 80 rounds up to 128: 512 keys a loop
    # L40S: ⌊(102400 − 3072)/24⌋ = 4138 groups of 4 keys; 131072 keys need ⌈32768/4138⌉ = 8
    (1024, 131072, 128, L40S, 8),
    (1, 131072, 128, L40S, 142),   # ⌈131072/512⌉ = 256 > ⌈142/1⌉ = 142 ≥ 8
    (200, 65536, 128, L40S, 4),    # ⌈142/200⌉ = 1 < m₀ = ⌈16384/4138⌉ = 4
]


@pytest.mark.parametrize(("bh", "keys", "d", "device", "blocks"), CASES)
def test_multi_block_count(bh: int, keys: int, d: int, device: tuple[int, float],
                           blocks: int) -> None:
    units, smem = device
    assert trtllm_mmha_blocks(float(bh), float(keys), float(d), units, smem, SCALAR) == blocks
    vec = trtllm_mmha_blocks(np.array([float(bh)]), np.array([float(keys)]),
                             np.array([float(d)]), units, smem, VECTOR)
    assert vec.tolist() == [float(blocks)]


@pytest.mark.parametrize(("gpu", "batch", "keys", "splits"), [
    ("h100-sxm", 1, 4096, 5),       # B·H = 32: as the first case
    ("h100-sxm", 8, 4096, 1),       # B·H = 256
    ("l40s", 1, 131072, 8),         # ⌈142/32⌉ = 5 blocks, raised to m₀ = 8 (above)
])
def test_a_masked_mha_decode_splits_by_the_rule(gpu: str, batch: int, keys: int,
                                                splits: int) -> None:
    op = pm.Attention(batch=batch, heads=32, kv_heads=32, seq_q=1, seq_kv=keys,
                      head_dim=128, impl="mmha", kv_write=True)
    p = predict(op, gpu, context=RunContext(launch="graph"))
    assert float(p.details["splits"]) == splits
    assert float(p.details["ctas"]) == batch * 32 * splits
    # merged in the kernel: the attention stage is one kernel, split or not (an XQA split
    # adds a combine kernel)
    fused = dict(p.stages)["attention"]
    assert float(fused.details["kernels"]) == 1.0


def test_an_xqa_split_keeps_its_combine_kernel() -> None:
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                      impl="xqa", kv_write=True)
    fused = dict(predict(op, "l40s", context=RunContext(launch="graph")).stages)["attention"]
    assert float(fused.details["splits"]) == 16.0
    assert float(fused.details["kernels"]) == 2.0


def test_a_split_pays_the_last_blocks_merge_as_one_more_tile_step() -> None:
    """The last block of a split (sequence, head) reads the others' partials after they
    finish and writes the output: one more serial step, a decode tile's time (here one
    wave either way: 16 or 64 CTAs on 132 SMs)."""
    from perfmodel.timing.constants import bundled_constants
    from perfmodel.timing.kernels import attn_constant, decode_rows_scale, tile_time_scale

    def overhead(splits: int) -> float:
        op = pm.Attention(batch=1, heads=16, kv_heads=16, seq_q=1, seq_kv=4096,
                          head_dim=128, impl="mmha", num_splits=splits)
        p = predict(op, "h100-sxm", context=RunContext(launch="graph", engine="trtllm"))
        assert float(p.details["splits"]) == splits
        return float(p.overhead_s)

    c = bundled_constants()
    tile = attn_constant("mmha", "decode_tile_s", "hopper", c, "trtllm") \
        * decode_rows_scale(1.0, c) * tile_time_scale(128.0, 128.0, c)
    assert overhead(4) - overhead(1) == pytest.approx(tile, rel=1e-9)
