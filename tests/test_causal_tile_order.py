"""When a causal call has more query tiles than slots, the order the tiles start in sets its
end. FlashAttention-3 and -4 start the longest tiles first: the work ends spread evenly
(or with the longest tile). TensorRT-LLM's Hopper context kernels and its trtllm-gen
kernels (as AIConfigurator's rows show) start them in launch order, each sequence's
shortest first, on whichever slot frees first: the last tile to start is a longest one, and
the call ends about when it does. These tests derive the expected compute time by hand from
the unmasked twin of each call (whose every tile visits every key) and check the rule
against an exact simulation of that dispatch."""

from __future__ import annotations

import dataclasses
import heapq
import math

import pytest
from test_causal_longest_cta import _compute

import perfmodel as pm
from perfmodel.timing.kernels import ATTENTION_FAMILIES

# (family, GPU, query rows and keys per tile at head dim 128, as the family's source states;
# "fmha-v2" on Hopper runs its warp-specialised SM90 build)
IN_ORDER = [("trtllm-gen", "b200", 128, 128), ("fmha-v2", "h100-sxm", 128, 128)]


def _units(gpu: str) -> int:
    return pm.load_hardware(gpu).compute.units


def _per_tile(impl: str, gpu: str, batch: int, seq: int, q_t: int, kv_t: int
              ) -> tuple[float, float, int]:
    """(longest tile's time, mean tile's time, tiles): the longest visits every key, as
    each tile of the unmasked call does, so its time is the unmasked call's over its
    waves; the mean tile visits the average keys of a row, whole diagonal tiles counted
    (S(S+1)/2 + n·q_t·kv_t/2 pairs over S rows), rounded up to whole key tiles."""
    n = math.ceil(seq / q_t)
    tiles = batch * n
    waves = math.ceil(tiles / _units(gpu))  # one CTA per SM: persistent kernels
    full = _compute(impl, gpu, batch=batch, seq=seq, causal=False) / waves
    keys = (seq * (seq + 1) / 2 + n * q_t * kv_t / 2) / seq
    mean = full * kv_t * math.ceil(keys / kv_t) / seq
    return full, mean, tiles


@pytest.mark.parametrize(("impl", "gpu", "q_t", "kv_t"), IN_ORDER)
@pytest.mark.parametrize("batch", [3, 4, 8])
def test_in_order_causal_tiles_end_with_the_last_long_one(impl: str, gpu: str, q_t: int,
                                                          kv_t: int, batch: int) -> None:
    seq = 8192
    longest, mean, tiles = _per_tile(impl, gpu, batch, seq, q_t, kv_t)
    slots = _units(gpu)
    assert tiles > slots  # the rule's case: more tiles than slots
    spread = tiles * mean / slots
    expected = max(math.ceil(tiles / slots) * mean, longest, spread + longest - mean / 2)
    assert _compute(impl, gpu, batch=batch, seq=seq, causal=True) == pytest.approx(expected,
                                                                              rel=1e-9)


def _greedy(durations: list[float], slots: int) -> float:
    """End of a greedy list schedule: each tile, in order, on the slot that frees first."""
    free = [0.0] * slots
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


@pytest.mark.parametrize(("impl", "gpu", "q_t", "kv_t"), IN_ORDER)
@pytest.mark.parametrize(("batch", "seq"), [(3, 8192), (5, 8192), (12, 4096), (40, 2048),
                                            (96, 1024)])
def test_rule_follows_a_simulated_in_order_dispatch(impl: str, gpu: str, q_t: int, kv_t: int,
                                                    batch: int, seq: int) -> None:
    longest, _, _ = _per_tile(impl, gpu, batch, seq, q_t, kv_t)
    n = math.ceil(seq / q_t)
    # query tile j visits the keys up to its last row, in whole key tiles
    per_seq = [longest * kv_t * math.ceil(min((j + 1) * q_t, seq) / kv_t) / seq
               for j in range(n)]
    simulated = _greedy(per_seq * batch, _units(gpu))
    predicted = _compute(impl, gpu, batch=batch, seq=seq, causal=True)
    # the rule sits 6-14 % above these simulations (the mean tile's keys are rounded up to
    # whole key tiles, and a greedy schedule can end before its bound); the tiles' work
    # spread evenly would sit 4-25 % below most of them
    assert 0.97 <= predicted / simulated <= 1.15


def test_longest_first_family_ends_with_the_work_spread_evenly() -> None:
    # FlashAttention-3 on an H100: 128-row, 128-key tiles at head dim 128, one CTA per SM
    batch, seq = 3, 8192
    longest, mean, tiles = _per_tile("flash3", "h100-sxm", batch, seq, 128, 128)
    expected = max(math.ceil(tiles / _units("h100-sxm")) * mean, longest)
    assert _compute("flash3", "h100-sxm", batch=batch, seq=seq, causal=True) == pytest.approx(
        expected, rel=1e-9)


@pytest.mark.parametrize(("impl", "gpu", "q_t", "kv_t"), IN_ORDER)
def test_one_query_tile_per_sequence_adds_no_tail(impl: str, gpu: str, q_t: int,
                                                  kv_t: int) -> None:
    # a 128-token chunk over an 8,192-token cache: every sequence's one tile visits every
    # key (the diagonal tile whole), so the tiles are equal and the causal call costs the
    # unmasked one, however many waves of them
    batch = 5 * _units(gpu) + 7
    causal = _compute(impl, gpu, batch=batch, seq=q_t, seq_kv=8192, causal=True)
    full = _compute(impl, gpu, batch=batch, seq=q_t, seq_kv=8192, causal=False)
    assert causal == pytest.approx(full, rel=1e-9)


def test_unknown_causal_order_is_refused() -> None:
    with pytest.raises(ValueError, match="causal_order"):
        dataclasses.replace(ATTENTION_FAMILIES["flash2"], causal_order="random")
