"""No attention kernel finishes before its longest CTA. Under a causal mask the last query
tile of a sequence visits every key, as each tile of the same call without the mask does;
so when all tiles run in one wave, the causal call's compute equals the unmasked call's
(the other tiles finish early and wait), however little the other tiles compute. With many
waves the mask's saving returns: about half the pairs."""

from __future__ import annotations

import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict

CTX = RunContext(launch="graph")
CASES = [("flash2", "a100-80gb-sxm"), ("flash3", "h100-sxm"), ("trtllm-gen", "b200"),
         ("flashinfer", "l40s"), ("fmha-v2", "l40s")]


def _compute(impl: str, gpu: str, *, batch: int, causal: bool, seq: int = 8192,
             seq_kv: int | None = None) -> float:
    # unsplit, so that the query tiles are the CTAs; the keys are the queries unless given
    op = pm.Attention(batch=batch, heads=1, kv_heads=1, seq_q=seq,
                      seq_kv=seq if seq_kv is None else seq_kv,
                      head_dim=128, causal=causal, dtype="bf16", impl=impl, num_splits=1)
    return float(predict(op, gpu, context=CTX).compute_s)


@pytest.mark.parametrize(("impl", "gpu"), CASES)
def test_one_wave_of_causal_tiles_takes_as_long_as_its_last_tile(impl: str, gpu: str) -> None:
    # one sequence, one head: at most 8,192 / 64 = 128 query tiles, one wave on these GPUs
    causal = _compute(impl, gpu, batch=1, causal=True)
    full = _compute(impl, gpu, batch=1, causal=False)
    assert causal == pytest.approx(full, rel=1e-9)


@pytest.mark.parametrize(("impl", "gpu"), CASES)
def test_many_waves_of_causal_tiles_save_about_half(impl: str, gpu: str) -> None:
    causal = _compute(impl, gpu, batch=64, causal=True)
    full = _compute(impl, gpu, batch=64, causal=False)
    assert 0.45 < causal / full < 0.6


@pytest.mark.parametrize(("impl", "gpu"), CASES)
def test_more_sequences_never_take_less_time(impl: str, gpu: str) -> None:
    times = [float(predict(pm.Attention(batch=b, heads=1, kv_heads=1, seq_q=4096,
                                        seq_kv=4096, head_dim=128, causal=True,
                                        dtype="bf16", impl=impl), gpu,
                           context=CTX).latency_s) for b in (1, 2, 4, 8, 16, 32, 64)]
    assert times == sorted(times)
