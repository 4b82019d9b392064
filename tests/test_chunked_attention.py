"""Chunked local attention (Llama 4): a token at position q of a chunked layer attends to
the positions ⌊q/C⌋·C … q of its own chunk of C, not to the last C positions. Expected
pair counts and key lengths are counted here position by position."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.models.config import TransformerConfig, load_model
from perfmodel.models.graph import GraphOp, decode_graph, prefill_graph
from perfmodel.ops import Attention

MAVERICK = load_model("llama-4-maverick")  # 48 layers: 36 chunked (C = 8192), 12 global
C = 8192


def _chunked(graph: list[GraphOp], name: str = "attention_chunked"
             ) -> list[tuple[float, Attention]]:
    """(layer count, op) of the graph's attention ops called ``name``."""
    return [(float(g.count), g.op) for g in graph
            if g.name == name and isinstance(g.op, Attention)]


def test_llama4_reads_as_chunked_local_attention() -> None:
    assert MAVERICK.chunked_attention
    assert (MAVERICK.num_sliding_layers, MAVERICK.sliding_window) == (36, C)
    assert not load_model("mistral-7b").chunked_attention  # a sliding window stays one


@pytest.mark.parametrize("ctx", [1, 100, C, C + 1, C + 808, 2 * C, 2 * C + 1, 5 * C - 3])
def test_a_decoding_token_sees_its_chunk_so_far(ctx: int) -> None:
    ((count, op),) = _chunked(decode_graph(MAVERICK, 1, float(ctx)))
    new = ctx - 1  # the new token's position
    assert count == 36
    assert float(op.seq_kv) == new - (new // C) * C + 1


@pytest.mark.parametrize(("cached", "prompt"), [(0, 100), (0, C), (0, 3 * C + 424),
                                                (5000, 20000), (C, C), (C - 1, 2),
                                                (3000, 100)])
def test_prefill_pairs_are_counted_position_by_position(cached: int, prompt: int) -> None:
    q = np.arange(cached, cached + prompt)
    expected = 36 * float(np.sum(q - (q // C) * C + 1))  # keys each query sees
    graph = prefill_graph(MAVERICK, 1, float(prompt), float(cached))
    got = sum(count * float(op.batch) * float(op.pairs()) for count, op in _chunked(graph))
    assert got == expected
    # the global layers still see every key before them
    full = _chunked(graph, "attention")
    assert sum(count * float(op.pairs()) for count, op in full) == 12 * float(np.sum(q + 1))


def test_chunked_is_cheaper_than_a_window_past_the_first_chunk() -> None:
    window = MAVERICK.model_copy(update={"chunked_attention": False})
    one_chunk = [pm.predict_model(m, "b200", phase="prefill", batch=1, prompt_len=C,
                                  weight_dtype="fp8").latency_s for m in (MAVERICK, window)]
    assert float(one_chunk[0]) == pytest.approx(float(one_chunk[1]), rel=1e-12)
    long = [pm.predict_model(m, "b200", phase="prefill", batch=1, prompt_len=4 * C,
                             weight_dtype="fp8").latency_s for m in (MAVERICK, window)]
    assert float(long[0]) < float(long[1])


def test_chunked_attention_needs_local_layers() -> None:
    fields = {**MAVERICK.model_dump(), "num_sliding_layers": 0, "sliding_window": None}
    with pytest.raises(ValueError, match="chunked_attention needs num_sliding_layers"):
        TransformerConfig.model_validate(fields)


def test_the_serving_tables_keep_the_chunk_boundary() -> None:
    """Decode attention drops back to one chunk key after each boundary: the step tables
    hold both sides, so a context just past a boundary costs less than one just before it,
    and each side matches the graph evaluated there."""
    from perfmodel.serving import closed_loop, prepare
    wl = closed_loop(4, 4, 2 * C + 100, 16)
    *_, model = prepare(MAVERICK, "b200", wl, tp=4, parallel="dep", engine="trtllm",
                        weight_dtype="fp4", kv_dtype="fp8", chunked_prefill=True)
    before, after = model.decode_attn_s(4, float(C)), model.decode_attn_s(4, float(C + 1))
    assert after < before
    # one key per chunked layer just past the boundary: less than 1,000 keys before it
    # sees (interpolating across the boundary would put it near the boundary's value)
    assert after < model.decode_attn_s(4, float(C - 1000))
    assert after == pytest.approx(model.decode_attn_s(4, float(C + 2)), rel=1e-2)
    # a run across the boundary integrates the sawtooth: C − 10 … C + 10
    run = model.decode_attn_sum_s(4, C - 10.5, C + 9.5)
    steps = sum(model.decode_attn_s(4, float(x)) for x in range(C - 10, C + 10))
    assert run == pytest.approx(steps, rel=1e-3)
