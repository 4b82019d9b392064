"""Relations every prediction must satisfy, whatever the constants (hypothesis).

- latency covers each of its parts (compute, memory, overhead), is finite and positive;
- a vectorised call equals the scalar calls, element by element;
- more work never takes less time: doubling k of a GEMM; growing m or n across whole-tile
  multiples; longer KV caches in decode (at a fixed split count);
- a causal mask never makes attention slower than the full rectangle.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.hardware.spec import HardwareSpec

GPUS = ("a100-80gb-sxm", "h100-sxm", "l4")
#: Relative slack for float rounding in "a >= b" checks.
EPS = 1e-9
#: Whole-tile multiples of m (or n) never take less time: each CTA moves its own tile's bytes
#: at the per-CTA bandwidth, so more CTAs bring no bandwidth their own bytes do not cost (it
#: was 5 %: dividing the shared traffic among more CTAs made bigger GEMMs faster).
SAWTOOTH = 1e-9

FEW = settings(max_examples=40, deadline=None)


@functools.cache
def hw(gpu: str) -> HardwareSpec:
    return pm.load_hardware(gpu)


gpus = st.sampled_from(GPUS)


def usable(impl: str, gpu: str) -> str:
    """FA3-class kernels exist from Hopper on: elsewhere the same test runs FA2."""
    return "flash2" if impl == "flash3" and hw(gpu).arch not in ("hopper", "blackwell") \
        else impl
dims = st.integers(1, 16384)
gemm_dtypes = st.sampled_from(["bf16", "fp16", "fp32"])


def _check_parts(p: pm.Prediction) -> None:
    lat = np.asarray(p.latency_s)
    assert np.all(np.isfinite(lat))
    assert np.all(lat > 0)
    for part in (p.compute_s, p.memory_s, p.overhead_s):
        arr = np.asarray(part)
        assert np.all(np.isfinite(arr))
        assert np.all(arr >= 0)
        assert np.all(lat >= arr * (1 - EPS))
    for field in (p.compute_util, p.memory_util, p.arithmetic_intensity, p.bottleneck_ratio):
        assert np.all(np.isfinite(np.asarray(field)))
    assert np.all(np.asarray(p.bottleneck_ratio) >= 1.0)


@FEW
@given(gpu=gpus, m=dims, n=dims, k=dims, batch=st.integers(1, 8), dtype=gemm_dtypes)
def test_gemm_latency_covers_its_parts(gpu: str, m: int, n: int, k: int, batch: int,
                                       dtype: str) -> None:
    _check_parts(pm.predict(pm.Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype), hw(gpu)))


attn_impls = st.sampled_from(["flash", "flash2", "flash3", "paged", "naive"])


@FEW
@given(gpu=gpus, batch=st.integers(1, 16), group=st.sampled_from([1, 4, 8]),
       kv_heads=st.sampled_from([1, 4, 8]), seq_q=st.integers(1, 8192),
       extra=st.integers(0, 8192), head_dim=st.sampled_from([64, 128]), causal=st.booleans(),
       impl=attn_impls)
def test_attention_latency_covers_its_parts(gpu: str, batch: int, group: int, kv_heads: int,
                                            seq_q: int, extra: int, head_dim: int,
                                            causal: bool, impl: str) -> None:
    impl = usable(impl, gpu)
    op = pm.Attention(batch=batch, heads=group * kv_heads, kv_heads=kv_heads, seq_q=seq_q,
                      seq_kv=seq_q + extra, head_dim=head_dim, causal=causal, dtype="fp16",
                      impl=impl)
    p = pm.predict(op, hw(gpu))
    _check_parts(p)
    for _, stage in p.stages:
        _check_parts(stage)


small_ops = st.one_of(
    st.builds(pm.Norm, tokens=dims, hidden=dims, kind=st.sampled_from(["rms", "layer"])),
    st.builds(pm.Activation, tokens=dims, width=dims,
              kind=st.sampled_from(["silu_mul", "gelu_mul", "gelu", "silu", "relu"])),
    st.builds(pm.Rotary, tokens=dims, heads=st.integers(1, 64), kv_heads=st.integers(1, 64),
              head_dim=st.sampled_from([64, 128])),
    st.builds(pm.Softmax, rows=dims, cols=dims),
    st.builds(pm.Embedding, tokens=dims, hidden=dims),
    st.builds(pm.Elementwise, numel=st.integers(1, 1 << 30)),
    st.builds(pm.AllReduce, numel=st.integers(1, 1 << 30), gpus=st.integers(2, 72)),
)


@FEW
@given(gpu=gpus, op=small_ops)
def test_small_op_latency_covers_its_parts(gpu: str, op: pm.Norm) -> None:
    _check_parts(pm.predict(op, hw(gpu)))


@FEW
@given(gpu=gpus, ms=st.lists(dims, min_size=1, max_size=6), n=dims, k=dims,
       batch=st.integers(1, 4), dtype=gemm_dtypes)
def test_gemm_array_call_equals_scalar_calls(gpu: str, ms: list[int], n: int, k: int,
                                             batch: int, dtype: str) -> None:
    p = pm.predict(pm.Gemm(m=np.asarray(ms), n=n, k=k, batch=batch, dtype=dtype), hw(gpu))
    for i, m in enumerate(ms):
        one = pm.predict(pm.Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype), hw(gpu))
        for field in ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes"):
            assert np.asarray(getattr(p, field))[i] == pytest.approx(getattr(one, field),
                                                                    rel=1e-12)
        assert np.asarray(p.bottleneck)[i] == one.bottleneck


@FEW
@given(gpu=gpus, seqs=st.lists(st.integers(1, 32768), min_size=1, max_size=5),
       batch=st.integers(1, 8), causal=st.booleans(), impl=attn_impls)
def test_attention_array_call_equals_scalar_calls(gpu: str, seqs: list[int], batch: int,
                                                  causal: bool, impl: str) -> None:
    impl = usable(impl, gpu)
    s = np.asarray(seqs)
    op = pm.Attention(batch=np.full(s.shape, batch), heads=32, kv_heads=8, seq_q=s,
                      head_dim=128, causal=causal, dtype="fp16", impl=impl)
    p = pm.predict(op, hw(gpu))
    for i, seq in enumerate(seqs):
        one = pm.predict(pm.Attention(batch=batch, heads=32, kv_heads=8, seq_q=seq,
                                      head_dim=128, causal=causal, dtype="fp16", impl=impl),
                         hw(gpu))
        assert np.asarray(p.latency_s)[i] == pytest.approx(one.latency_s, rel=1e-12)
        assert np.asarray(p.bytes)[i] == pytest.approx(one.bytes, rel=1e-12)


def test_decode_with_only_seq_kv_as_array() -> None:
    op = pm.Attention(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=np.array([512, 4096]),
                      head_dim=128, dtype="bf16")
    p = pm.predict(op, hw("h100-sxm"))
    assert np.shape(p.latency_s) == (2,)


@FEW
@given(gpu=gpus, m=dims, n=dims, k=st.integers(1, 65536), batch=st.integers(1, 8),
       dtype=gemm_dtypes)
def test_doubling_k_never_reduces_gemm_latency(gpu: str, m: int, n: int, k: int, batch: int,
                                               dtype: str) -> None:
    one = pm.predict(pm.Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype), hw(gpu))
    two = pm.predict(pm.Gemm(m=m, n=n, k=2 * k, batch=batch, dtype=dtype), hw(gpu))
    assert two.latency_s >= one.latency_s * (1 - EPS)


@FEW
@given(gpu=gpus, other=dims, k=dims, batch=st.integers(1, 4), dtype=gemm_dtypes,
       along_n=st.booleans())
def test_gemm_latency_grows_across_whole_tiles(gpu: str, other: int, k: int, batch: int,
                                               dtype: str, along_n: bool) -> None:
    # 256 is a multiple of every tile edge in the menus, so these sizes add whole tiles only
    sizes = np.arange(256, 256 * 65, 256)
    m, n = (other, sizes) if along_n else (sizes, other)
    lat = np.asarray(pm.predict(pm.Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype),
                                hw(gpu)).latency_s)
    running_max = np.maximum.accumulate(lat)
    assert np.all(lat >= running_max * (1 - SAWTOOTH))


@FEW
@given(gpu=gpus, batch=st.integers(1, 64), group=st.sampled_from([1, 4, 8]),
       kv_heads=st.sampled_from([1, 8]), head_dim=st.sampled_from([64, 128, 256]),
       impl=st.sampled_from(["flash", "flash2", "flash3", "paged"]),
       splits=st.sampled_from([1, 4]))
def test_longer_kv_cache_never_faster_in_decode(gpu: str, batch: int, group: int,
                                                kv_heads: int, head_dim: int, impl: str,
                                                splits: int) -> None:
    impl = usable(impl, gpu)
    # fixed split-KV factor: ``auto`` changes the kernel configuration with the length
    seq_kv = np.arange(256, 32768, 97)
    op = pm.Attention(batch=np.full(seq_kv.shape, batch), heads=group * kv_heads,
                      kv_heads=kv_heads, seq_q=1, seq_kv=seq_kv, head_dim=head_dim,
                      causal=True, dtype="fp16", impl=impl, num_splits=splits)
    lat = np.asarray(pm.predict(op, hw(gpu)).latency_s)
    assert np.all(np.diff(lat) >= -EPS * lat[:-1])


def test_longer_kv_cache_faster_only_where_split_kv_switches() -> None:
    """A real sawtooth: with num_splits='auto', FlashAttention splits the KV cache once it
    spans more than one KV block, and the extra CTAs make a slightly longer cache faster.
    Every drop in latency must coincide with a change of the split count; between
    switches, more keys never take less time."""
    seq_kv = np.arange(200, 1200)
    op = pm.Attention(batch=np.ones(seq_kv.shape), heads=32, kv_heads=8, seq_q=1,
                      seq_kv=seq_kv, head_dim=256, causal=True, dtype="fp16")
    p = pm.predict(op, hw("l4"))
    lat = np.asarray(p.latency_s)
    splits = np.asarray(p.details["splits"])
    drops = np.diff(lat) < -EPS * lat[:-1]
    assert np.all(np.diff(splits)[drops] != 0)


@FEW
@given(gpu=gpus, batch=st.integers(1, 8), group=st.sampled_from([1, 4]),
       kv_heads=st.sampled_from([1, 8]), seq_q=st.integers(1, 16384),
       extra=st.integers(0, 16384), head_dim=st.sampled_from([64, 128]), impl=attn_impls)
def test_causal_never_slower_than_full(gpu: str, batch: int, group: int, kv_heads: int,
                                       seq_q: int, extra: int, head_dim: int,
                                       impl: str) -> None:
    impl = usable(impl, gpu)
    kwargs: dict[str, Any] = {
        "batch": batch, "heads": group * kv_heads, "kv_heads": kv_heads, "seq_q": seq_q,
        "seq_kv": seq_q + extra, "head_dim": head_dim, "dtype": "fp16", "impl": impl}
    causal_op = pm.Attention(causal=True, **kwargs)
    full_op = pm.Attention(causal=False, **kwargs)
    causal = pm.predict(causal_op, hw(gpu))
    full = pm.predict(full_op, hw(gpu))
    assert causal.latency_s <= full.latency_s * (1 + EPS)
    # useful work (the naive path's mask kernel itself does one more FLOP per score)
    assert float(causal_op.flops()) <= float(full_op.flops())
