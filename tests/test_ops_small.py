"""Small ops (norms, activations, rotary, softmax, embedding, elementwise) and the ring
all-reduce: bytes and FLOPs against hand arithmetic."""

from __future__ import annotations

import pytest

from perfmodel import PerfmodelError
from perfmodel.ops import Activation, AllReduce, Elementwise, Embedding, Norm, Rotary, Softmax


def test_rmsnorm_by_hand() -> None:
    # T=4, H=8, bf16: read x (32), write y (32), read the weight (8): (64 + 8) * 2 = 144 B
    c = Norm(tokens=4, hidden=8, kind="rms", dtype="bf16").cost()
    assert float(c.bytes_min) == 144.0
    assert float(c.bytes_hbm) == 144.0
    # 4 FLOPs per element (square, add, scale, weight): 4 * 32 = 128; one rsqrt per row: 4
    assert float(c.vector_flops) == 128.0
    assert float(c.sfu_ops) == 4.0
    assert float(c.launches) == 1.0


def test_layernorm_by_hand() -> None:
    # weight and bias: (64 + 16) * 2 = 160 B; 7 FLOPs per element: 224
    c = Norm(tokens=4, hidden=8, kind="layer", dtype="bf16").cost()
    assert float(c.bytes_min) == 160.0
    assert float(c.vector_flops) == 224.0


@pytest.mark.parametrize(
    ("kind", "bytes_", "flops", "sfu"),
    [
        # T=4, W=8 (32 outputs), bf16. Gated: read gate and up (64), write 32: 96 * 2 = 192 B
        ("silu_mul", 192.0, (4 + 1) * 32.0, 32.0),
        ("gelu_mul", 192.0, (8 + 1) * 32.0, 32.0),
        # plain: read 32, write 32: 64 * 2 = 128 B
        ("silu", 128.0, 4 * 32.0, 32.0),
        ("gelu", 128.0, 8 * 32.0, 32.0),
        ("relu", 128.0, 1 * 32.0, 0.0),
    ],
)
def test_activation_by_hand(kind: str, bytes_: float, flops: float, sfu: float) -> None:
    c = Activation(tokens=4, width=8, kind=kind, dtype="bf16").cost()
    assert float(c.bytes_min) == bytes_
    assert float(c.vector_flops) == flops
    assert float(c.sfu_ops) == sfu


def test_gated_activation_reads_half_again_as_much() -> None:
    gated = Activation(tokens=1000, width=11008, kind="silu_mul").cost()
    plain = Activation(tokens=1000, width=11008, kind="silu").cost()
    # (2 reads + 1 write) / (1 read + 1 write) = 3/2
    assert float(gated.bytes_min) / float(plain.bytes_min) == 1.5


def test_rotary_by_hand() -> None:
    # T=4, H=8, H_kv=2, D=16: rotated elements 4 * (8 + 2) * 16 = 640, read and written:
    # 1280 * 2 = 2560 B; cos and sin tables 2 * (4 * 16/2) = 64 elements = 128 B -> 2688 B
    c = Rotary(tokens=4, heads=8, kv_heads=2, head_dim=16, dtype="bf16").cost()
    assert float(c.bytes_min) == 2688.0
    # 3 FLOPs per element (two multiplies, one add): 1920
    assert float(c.vector_flops) == 1920.0
    assert float(c.sfu_ops) == 0.0


def test_softmax_by_hand() -> None:
    # rows=4, cols=8, fp32: read 32 + write 32 = 64 * 4 = 256 B; 4 FLOPs and 1 exp each
    c = Softmax(rows=4, cols=8, dtype="fp32").cost()
    assert float(c.bytes_min) == 256.0
    assert float(c.vector_flops) == 128.0
    assert float(c.sfu_ops) == 32.0


def test_embedding_by_hand() -> None:
    # T=4 rows of H=8 bf16 gathered and written: (32 + 32) * 2 = 128 B, plus 4 int64 ids = 32 B
    c = Embedding(tokens=4, hidden=8, vocab=50_000, dtype="bf16").cost()
    assert float(c.bytes_min) == 160.0
    assert float(c.flops) == 0.0
    # the table size does not change the traffic of a gather
    assert float(Embedding(tokens=4, hidden=8, vocab=10, dtype="bf16").cost().bytes_min) == 160.0


def test_elementwise_residual_add_by_hand() -> None:
    # 100 elements, read 2, write 1, bf16: 300 * 2 = 600 B, 100 FLOPs
    c = Elementwise(100, reads=2, writes=1, flops_per_element=1, dtype="bf16").cost()
    assert float(c.bytes_min) == 600.0
    assert float(c.vector_flops) == 100.0


def test_elementwise_rejects_negative_counts() -> None:
    with pytest.raises(PerfmodelError) as info:
        Elementwise(100, reads=-1)
    assert info.value.field == "reads"


def test_allreduce_ring_by_hand() -> None:
    # 1000 bf16 elements = 2000 B over 4 GPUs: each sends 2 * (4-1)/4 * 2000 = 3000 B over
    # its link in 2 * (4-1) = 6 steps; (4-1)/4 * 1000 = 750 additions
    c = AllReduce(numel=1000, gpus=4, dtype="bf16").cost()
    assert float(c.link_bytes) == 3000.0
    assert float(c.link_steps) == 6.0
    assert float(c.vector_flops) == 750.0


@pytest.mark.parametrize("gpus", [2, 3, 8, 72])
def test_allreduce_link_bytes_approach_twice_the_buffer(gpus: int) -> None:
    data = 2**20 * 4.0  # 1 Mi fp32 elements
    c = AllReduce(numel=2**20, gpus=gpus, dtype="fp32").cost()
    assert float(c.link_bytes) == pytest.approx(2 * (gpus - 1) / gpus * data, rel=1e-15)
    assert float(c.link_bytes) < 2 * data


def test_allreduce_on_one_gpu_is_free() -> None:
    c = AllReduce(numel=1000, gpus=1).cost()
    assert float(c.link_bytes) == 0.0
    assert float(c.launches) == 0.0
