"""Streaming kernels (elementwise, norm, activation, softmax, rotary): more elements never
take less time, the CTA-limited bandwidth included."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.ops.elementwise import stream_ctas


def test_stream_ctas_share_bandwidth_by_elements() -> None:
    # a full CTA holds 4,096 elements; a last partial CTA adds only its share
    assert float(stream_ctas(1.0)) == 1.0
    assert float(stream_ctas(4096.0)) == 1.0
    assert float(stream_ctas(4158.0)) == pytest.approx(4158.0 / 4096.0)
    assert float(stream_ctas(3 * 4096.0)) == 3.0


@pytest.mark.parametrize("gpu", ["l4", "h100-sxm", "mi300x", "t4", "b200"])
def test_more_elements_never_take_less_time(gpu: str) -> None:
    # on an L4, Elementwise(4096 fp32, 2 reads + 1 write) took 11.05 µs and 4,158 elements
    # 7.38 µs: one more CTA with 62 elements doubled the kernel's bandwidth share
    numel = np.arange(1.0, 400_000.0, 61.0)
    width = np.arange(1.0, 20_000.0, 7.0)
    ops: list[pm.Elementwise | pm.Norm | pm.Softmax] = [
        pm.Elementwise(numel=numel, reads=2, writes=1, dtype="fp32"),
        pm.Norm(tokens=8, hidden=width, kind="layer", dtype="fp32"),
        pm.Softmax(rows=64, cols=width, dtype="fp32")]
    for op in ops:
        lat = np.asarray(pm.predict(op, gpu).latency_s)
        assert np.all(np.diff(lat) >= -1e-12 * lat[1:]), type(op).__name__


def test_array_calls_give_arrays_for_every_figure() -> None:
    # an embedding's time does not depend on the vocabulary: an array of vocab sizes gave
    # one scalar; a stream op's overhead was a scalar beside array latencies
    vocab = np.array([32_000.0, 128_000.0])
    p = pm.predict(pm.Embedding(tokens=128, hidden=4096, vocab=vocab), "h100-sxm")
    for f in ("latency_s", "compute_s", "memory_s", "overhead_s", "bytes", "flops"):
        assert np.shape(getattr(p, f)) == (2,), f
    e = pm.predict(pm.Elementwise(numel=np.array([1e3, 1e6]), reads=1, writes=1), "h100-sxm")
    assert np.shape(e.overhead_s) == (2,)


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb-sxm", "l4", "mi300x"])
def test_more_norm_rows_never_take_less_time(gpu: str) -> None:
    """Each CTA reads the norm weights of the columns it covers itself, so more rows never
    spread them thinner (on an H100, a 3,584-wide RMSNorm took 4.24 µs for one token and
    4.10 µs for 16)."""
    tokens = np.arange(1.0, 5000.0)
    for hidden in (896.0, 3584.0, 8192.0):
        for kind in ("rms", "layer"):
            lat = np.asarray(pm.predict(pm.Norm(tokens=tokens, hidden=hidden, kind=kind),
                                        gpu).latency_s)
            assert np.all(np.diff(lat) >= -1e-9 * lat[:-1]), (hidden, kind)
