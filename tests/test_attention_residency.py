"""How many CTAs of a resident (non-persistent) attention kernel share an SM follows from
the shared memory one CTA holds: its query tile plus the K/V tiles its family allocates.
FlashAttention-2 holds one K tile and one V tile (flash-attn kernel_traits.h), and through a
paged KV cache runs its split-KV kernel (64 query rows; 256 / 128 / 64 keys to head dim
64 / 128 / above); FlashInfer's prefill launcher asks for two CTAs per SM whenever twice its
query tile plus a 16-key K/V slice fits. The expected sizes below are computed by hand from
those allocations and the datasheet shared memory per SM (A100 164 KiB, L40S 100 KiB)."""

from __future__ import annotations

import itertools

import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import Constants

CTX = RunContext(launch="graph")
KIB = 1024
SMEM = {"a100-80gb-sxm": 164 * KIB, "l40s": 100 * KIB}


def _details(impl: str, gpu: str, head_dim: int, *, kv_write: bool = False,
             seq: int = 2048) -> dict[str, float]:
    op = pm.Attention(batch=1, heads=8, kv_heads=8, seq_q=seq, seq_kv=seq, head_dim=head_dim,
                      dtype="bf16", impl=impl, num_splits=1, kv_write=kv_write)
    d = predict(op, gpu, context=CTX).details
    return {k: float(d[k]) for k in ("q_tile", "kv_tile", "resident")}


def _resident(gpu: str, q: int, kv_keys: int, d: int) -> int:
    """CTAs per SM: ⌊SM shared memory / ((q·D + keys·2D)·2 bytes)⌋, 1 to 2."""
    need = (q * d + kv_keys * 2 * d) * 2
    return max(1, min(2, SMEM[gpu] // need))


# (GPU, head dim, FA2's standard tile there: q rows, keys)
STANDARD = [("a100-80gb-sxm", 64, 128, 128), ("a100-80gb-sxm", 128, 128, 64),
            ("a100-80gb-sxm", 256, 128, 64), ("l40s", 256, 64, 64)]


@pytest.mark.parametrize(("gpu", "d", "q", "kv"), STANDARD)
def test_flash2_holds_one_k_and_one_v_tile(gpu: str, d: int, q: int, kv: int) -> None:
    got = _details("flash2", gpu, d)
    assert (got["q_tile"], got["kv_tile"]) == (q, kv)
    assert got["resident"] == _resident(gpu, q, kv, d)


def test_flash2_at_head_dim_128_fits_two_ctas_on_an_a100() -> None:
    # 128·128·2 B of Q + 2·64·128·2 B of K and V = 64 KiB, twice within 164 KiB (the
    # double-buffered count, 96 KiB, allowed one)
    assert _details("flash2", "a100-80gb-sxm", 128)["resident"] == 2


def test_head_dim_256_keeps_128_rows_where_one_stage_fits() -> None:
    # 128·256·2 + 2·64·256·2 = 128 KiB: within an A100's 164 KiB, above an L40S's 100 KiB
    assert _details("flash2", "a100-80gb-sxm", 256)["q_tile"] == 128
    assert _details("flash2", "l40s", 256)["q_tile"] == 64


# (GPU, head dim, split-KV kernel tile: 64 rows, keys by head dim)
PAGED = [("a100-80gb-sxm", 64, 64, 256), ("a100-80gb-sxm", 128, 64, 128),
         ("a100-80gb-sxm", 256, 64, 64), ("l40s", 128, 64, 128), ("l40s", 256, 64, 64)]


@pytest.mark.parametrize(("gpu", "d", "q", "kv"), PAGED)
def test_a_paged_call_runs_the_split_kernels_tiles(gpu: str, d: int, q: int, kv: int) -> None:
    for got in (_details("flash2", gpu, d, kv_write=True), _details("paged", gpu, d)):
        assert (got["q_tile"], got["kv_tile"]) == (q, kv)
        assert got["resident"] == _resident(gpu, q, kv, d)


@pytest.mark.parametrize(("d", "resident"), [(128, 2), (256, 1)])
def test_flashinfer_counts_a_16_key_slice(d: int, resident: int) -> None:
    # L40S: 2·(128·d·2 + 16·2d·2) bytes is 80 KiB at d 128 (fits 100 KiB), 160 KiB at 256
    assert _resident("l40s", 128, 16, d) == resident
    assert _details("flashinfer", "l40s", d)["resident"] == resident


def _compute(heads: int, consts: Constants, impl: str = "flash2", d: int = 128,
             seq_q: int = 64, seq_kv: int = 4096) -> float:
    """Compute part of a one-query-tile call (64 rows over 4,096 keys per head, or a
    one-token decode: ``seq_q`` 1), unsplit, through the paged cache: one CTA per head
    (64-row split-kernel tiles at head dim 128, two per SM on an A100)."""
    op = pm.Attention(batch=1, heads=heads, kv_heads=heads, seq_q=seq_q, seq_kv=seq_kv,
                      head_dim=d, dtype="bf16", impl=impl, num_splits=1, kv_write=True)
    return float(predict(op, "a100-80gb-sxm", context=CTX, constants=consts).compute_s)


@pytest.mark.parametrize("share", [0.5, 0.8, 1.0])
def test_tiles_alone_on_their_sms_run_at_the_lone_share(share: float) -> None:
    consts = Constants().with_values({"attn.lone_cta_share": share}, "test")
    units = pm.load_hardware("a100-80gb-sxm").compute.units
    # 2·SMs tiles: two per SM, each at half the SM's rate; SMs tiles: one per SM, at
    # `share` of it: the same tile takes 1/(2·share) of the time
    shared = _compute(2 * units, consts)
    alone = _compute(units, consts)
    assert alone / shared == pytest.approx(1.0 / (2.0 * share), rel=1e-9)
    # one tile more than SMs: an SM runs two, and the call ends with them
    assert _compute(units + 1, consts) == pytest.approx(shared, rel=1e-9)


def test_one_cta_per_sm_kernels_do_not_take_the_lone_share() -> None:
    # head dim 256 through the paged cache: 96 KiB per CTA, one per SM on an A100
    units = pm.load_hardware("a100-80gb-sxm").compute.units
    slow = Constants().with_values({"attn.lone_cta_share": 0.5}, "test")
    fast = Constants().with_values({"attn.lone_cta_share": 1.0}, "test")
    assert _compute(units, slow, d=256) == _compute(units, fast, d=256)


def test_more_heads_never_take_less_time_across_the_sm_count() -> None:
    units = pm.load_hardware("a100-80gb-sxm").compute.units
    consts = Constants().with_values({"attn.lone_cta_share": 0.9}, "test")
    times = [_compute(h, consts) for h in range(units - 4, units + 5)]
    assert all(b >= a * (1.0 - 1e-12) for a, b in itertools.pairwise(times))
    assert times[-1] > 1.5 * times[0]  # the step where SMs start to hold two


def _decode_compute(heads: int, consts: Constants) -> float:
    """:func:`_compute` of a one-token decode over 16,384 keys per head."""
    return _compute(heads, consts, seq_q=1, seq_kv=16384)


@pytest.mark.parametrize("share", [0.5, 0.85, 1.0])
def test_a_decode_tile_alone_takes_the_decode_share(share: float) -> None:
    units = pm.load_hardware("a100-80gb-sxm").compute.units
    consts = Constants().with_values({"attn.lone_decode_share": share,
                                      "attn.lone_cta_share": 0.6}, "test")
    alone = _decode_compute(units, consts)
    shared = _decode_compute(2 * units, consts)
    assert alone / shared == pytest.approx(1.0 / (2.0 * share), rel=1e-9)
    # the prefill share does not reach a decode tile, nor the decode share a prefill tile
    other = Constants().with_values({"attn.lone_decode_share": share,
                                     "attn.lone_cta_share": 0.9}, "test")
    assert _decode_compute(units, other) == alone
    assert _compute(units, other) != _compute(units, consts)
    assert _compute(units, consts) == _compute(
        units, Constants().with_values({"attn.lone_decode_share": 0.55,
                                        "attn.lone_cta_share": 0.6}, "test"))
