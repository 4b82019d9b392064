"""GEMM cost formulas, each checked against arithmetic done by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.ops import Gemm

MIB = 2**20


def test_flops_are_two_per_multiply_add() -> None:
    # 2 * b * m * n * k = 2 * 2 * 3 * 5 * 7 = 420 (not the 210 MACs)
    assert float(Gemm(m=3, n=5, k=7, batch=2).flops()) == 420.0
    # 4096^3: 2 * 4096^3 = 137,438,953,472
    assert float(Gemm(m=4096, n=4096, k=4096).flops()) == 137_438_953_472.0


def test_bytes_min_separate_b_per_batch() -> None:
    # bf16 (2 B), b=2, m=3, n=5, k=7:
    # A = 2*3*7 = 42 elements, B = 2*7*5 = 70, C = 2*3*5 = 30
    # (42 + 70) * 2 + 30 * 2 = 224 + 60 = 284 bytes
    assert float(Gemm(m=3, n=5, k=7, batch=2, dtype="bf16").bytes_min()) == 284.0


def test_bytes_min_shared_b() -> None:
    # one B of 7*5 = 35 elements for the whole batch: (42 + 35) * 2 + 60 = 214
    assert float(Gemm(m=3, n=5, k=7, batch=2, dtype="bf16", shared_b=True).bytes_min()) == 214.0


def test_bytes_min_out_dtype_differs() -> None:
    # fp32 output: (42 + 70) * 2 + 30 * 4 = 224 + 120 = 344
    g = Gemm(m=3, n=5, k=7, batch=2, dtype="bf16", out_dtype="fp32")
    assert float(g.bytes_min()) == 344.0
    # fp8 inputs, bf16 output: (42 + 70) * 1 + 30 * 2 = 172
    assert float(Gemm(m=3, n=5, k=7, batch=2, dtype="fp8", out_dtype="bf16").bytes_min()) == 172.0


def test_bytes_min_bias_reads_one_vector() -> None:
    # + n * s_out = 5 * 2 = 10 bytes, once (not per batch entry)
    plain = float(Gemm(m=3, n=5, k=7, batch=2, dtype="bf16").bytes_min())
    biased = float(Gemm(m=3, n=5, k=7, batch=2, dtype="bf16", bias=True).bytes_min())
    assert biased - plain == 10.0


def test_tiles_count() -> None:
    # ceil(300/128) = 3, ceil(200/128) = 2, batch 3: 3 * 3 * 2 = 18 tiles
    g = Gemm(m=300, n=200, k=64, batch=3)
    assert float(g.tiles(128, 128)) == 18.0
    # split-K 2 doubles the CTAs: 36
    assert float(g.tiles(128, 128, split_k=2)) == 36.0
    # exact multiples: 256/128 * 256/64 = 2 * 4 = 8
    assert float(Gemm(m=256, n=256, k=64).tiles(128, 64)) == 8.0


def test_bytes_tiled_by_hand_when_operands_miss_the_cache() -> None:
    # m = n = k = 1024 bf16: A = B = C = 1024*1024*2 = 2 MiB. Tiles 128x128: 8 x 8 tiles.
    # 4 tiles in flight form a 2 x 2 block: A is re-read once per column band of 2 tiles
    # (8/2 = 4 times), B once per row band (8/2 = 4 times); with no cache:
    # 4 * 2 MiB + 4 * 2 MiB + 2 MiB = 18 MiB.
    g = Gemm(m=1024, n=1024, k=1024, dtype="bf16")
    assert float(g.bytes_tiled(128, 128, concurrent_tiles=4, cache_bytes=0.0)) == 18 * MIB


def test_bytes_tiled_equals_minimum_when_operands_fit() -> None:
    g = Gemm(m=1024, n=1024, k=1024, dtype="bf16")
    # A + B = 4 MiB fit in a 40 MiB cache: every operand comes from HBM once
    assert float(g.bytes_tiled(128, 128, 4, cache_bytes=40 * MIB)) == float(g.bytes_min())
    gb = Gemm(m=1024, n=1024, k=1024, dtype="bf16", bias=True)
    assert float(gb.bytes_tiled(128, 128, 4, cache_bytes=40 * MIB)) == float(gb.bytes_min())


sizes = st.integers(min_value=1, max_value=20_000)


@settings(max_examples=150, deadline=None)
@given(m=sizes, n=sizes, k=sizes, batch=st.integers(1, 8),
       tile_m=st.sampled_from([32, 64, 128, 256]), tile_n=st.sampled_from([32, 64, 128, 256]),
       conc=st.integers(1, 400), cache_mib=st.sampled_from([0, 4, 40, 1 << 20]),
       shared_b=st.booleans(), bias=st.booleans(),
       dtype=st.sampled_from(["bf16", "fp8", "fp32"]))
def test_bytes_tiled_never_below_minimum(m: int, n: int, k: int, batch: int, tile_m: int,
                                         tile_n: int, conc: int, cache_mib: int,
                                         shared_b: bool, bias: bool, dtype: str) -> None:
    g = Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype, shared_b=shared_b, bias=bias)
    tiled = float(g.bytes_tiled(tile_m, tile_n, conc, cache_mib * MIB))
    minimum = float(g.bytes_min())
    assert tiled >= minimum * (1 - 1e-12)
    if cache_mib == 1 << 20:  # a 1 TiB cache holds any operand here
        assert tiled == pytest.approx(minimum, rel=1e-12)
    # and never more than every tile band re-reading its whole panel
    upper = (math.ceil(n / tile_n) + math.ceil(m / tile_m) + 2) * minimum
    assert tiled <= upper


def test_arrays_broadcast_like_scalars() -> None:
    m = np.array([1, 64, 4096])
    g = Gemm(m=m, n=128, k=256, batch=2, dtype="fp16")
    for i, mi in enumerate(m):
        one = Gemm(m=int(mi), n=128, k=256, batch=2, dtype="fp16")
        assert g.flops()[i] == float(one.flops())
        assert g.bytes_min()[i] == float(one.bytes_min())


@pytest.mark.parametrize(("gpu", "dtype"), [("p100-pcie-16gb", "fp16"), ("t4", "fp32"),
                                            ("v100-sxm2-32gb", "fp32")])
def test_vector_unit_gemv_pads_no_rows(gpu: str, dtype: str) -> None:
    # a SIMT GEMM of a few rows runs as a GEMV-style kernel: its FMA work is the rows it
    # has (m·n·k), not a 32-row tile's; before, m = 1..16 cost a padded 32x32 tile at half
    # the rate and decode on a P100 was compute-bound on padding
    import perfmodel as pm

    one = pm.predict(pm.Gemm(m=1, n=22016, k=4096, dtype=dtype), gpu)
    assert one.details["unit"] == "vector"
    eight = pm.predict(pm.Gemm(m=8, n=22016, k=4096, dtype=dtype), gpu)
    assert float(eight.compute_s) == pytest.approx(8.0 * float(one.compute_s), rel=1e-9)
    # the weight stream bounds it: 16 rows cost within 5 % of one
    sixteen = pm.predict(pm.Gemm(m=16, n=22016, k=4096, dtype=dtype), gpu)
    assert float(sixteen.latency_s) <= 1.05 * float(one.latency_s)
    assert float(one.memory_s) > float(one.compute_s)
    # more rows never take less time across the regime's edge
    ms = np.arange(1, 80)
    lat = np.asarray(pm.predict(pm.Gemm(m=ms, n=22016, k=4096, dtype=dtype), gpu).latency_s)
    assert np.all(np.diff(lat) >= -1e-12 * lat[1:])


def test_half_precision_decode_is_not_slower_than_fp32_on_a_p100() -> None:
    # P100 runs fp16 at twice its fp32 rate; decode reads half the bytes. Before, batch-4
    # decode predicted 71.6 ms per token in fp16 against 40.0 ms with fp32 activations
    import perfmodel as pm

    def tpot(dtype: str | None) -> float:
        return float(pm.predict_model("llama-3.1-8b", "p100-pcie-16gb", phase="generate",
                                      batch=4, prompt_len=512, gen_len=64,
                                      activation_dtype=dtype).tpot_s)
    assert tpot("fp16") <= tpot("fp32")


def test_split_k_takes_every_split_that_keeps_128_of_k() -> None:
    # each of 4 splits of k = 511 keeps ceil(511 / 4) = 128: split-K is allowed, as the
    # module doc says; the test was k < 128·s, so k = 511 could not split four ways and
    # took 42.1 µs against 25.4 µs at k = 512 (more work, less time)
    import perfmodel as pm

    p511 = pm.predict(pm.Gemm(m=1024, n=128, k=511, dtype="fp64"), "mi355x")
    p512 = pm.predict(pm.Gemm(m=1024, n=128, k=512, dtype="fp64"), "mi355x")
    assert p511.details["split_k"] == p512.details["split_k"] == 4.0
    assert float(p511.latency_s) <= float(p512.latency_s)
    # the vectorised search applies the same rule
    v = pm.predict(pm.Gemm(m=1024, n=128, k=np.array([511.0, 512.0]), dtype="fp64"), "mi355x")
    assert np.asarray(v.latency_s)[0] == pytest.approx(float(p511.latency_s), rel=1e-12)
