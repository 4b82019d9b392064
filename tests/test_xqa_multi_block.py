"""TensorRT-LLM's XQA decode kernels split a sequence's keys by the library's own rule
(decoderXQAImplCommon ``computeMultiBlockCount``, constants in decoderXQAConstants.h):
n₀ = ⌊history / 128⌋ blocks (at least 1), at most round(√(8·n₀)) of them, then cut so
that batch·KV heads·n CTAs make at most 8 waves of the SMs (n ← ⌊n / (waves/8)⌋), and at
most 6000 sub-sequences in its workspace (n ≤ ⌊6000 / batch⌋). The expected counts are
worked by hand below from those lines and the SM counts of the datasheets (L40S 142, H100
SXM 132)."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._xp import SCALAR, VECTOR
from perfmodel.timing import RunContext, predict
from perfmodel.timing.attention import trtllm_multi_block

# (CTAs of one block per (sequence, KV head), keys, batch, SMs, blocks), by hand:
CASES = [
    (64, 100, 8, 142, 1),       # ⌊100/128⌋ = 0 → at least one block
    (64, 210, 8, 142, 1),       # ⌊210/128⌋ = 1
    (64, 257, 8, 142, 2),       # ⌊257/128⌋ = 2; √16 = 4 does not cut it
    (64, 1024, 8, 142, 8),      # n₀ = 8 = √64; 64·8/142 = 3.6 waves
    (64, 4096, 8, 142, 16),     # n₀ = 32 → round(√256) = 16; 7.2 waves
    (64, 16384, 8, 142, 17),    # n₀ = 128 → round(√1024) = 32; 14.4 waves → ⌊32·8/14.42⌋
    (2048, 8192, 256, 142, 1),  # n₀ = 64 → round(√512 = 22.6) = 23; 332 waves → 0 → 1
    (1000, 1024, 1000, 100000, 6),  # 8 blocks, under a wave; the workspace: ⌊6000/1000⌋
]


@pytest.mark.parametrize(("base", "keys", "batch", "units", "blocks"), CASES)
def test_multi_block_count(base: int, keys: int, batch: int, units: int, blocks: int) -> None:
    assert trtllm_multi_block(float(base), float(keys), float(batch), units, SCALAR) == blocks
    vec = trtllm_multi_block(np.array([float(base)]), np.array([float(keys)]),
                             np.array([float(batch)]), units, VECTOR)
    assert vec.tolist() == [float(blocks)]


@pytest.mark.parametrize(("gpu", "keys", "splits"), [
    ("l40s", 210, 1), ("l40s", 4096, 16), ("l40s", 16384, 17),
    ("h100-sxm", 16384, 16),  # 64·32/132 = 15.5 waves → ⌊32·8/15.52⌋ = 16
])
def test_an_xqa_decode_splits_by_the_rule(gpu: str, keys: int, splits: int) -> None:
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=keys, head_dim=128,
                      impl="xqa", kv_write=True)
    p = predict(op, gpu, context=RunContext(launch="graph"))
    assert float(p.details["splits"]) == splits
    assert float(p.details["ctas"]) == 64 * splits


def test_an_fp8_cache_on_ada_stays_unsplit() -> None:
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=16384, head_dim=128,
                      impl="xqa", kv_write=True, kv_dtype="fp8")
    assert float(predict(op, "l40s").details["splits"]) == 1.0
