"""The fused all-reduce + residual add + RMSNorm graph variant (TensorRT-LLM's fusion)."""

from __future__ import annotations

import numpy as np

import perfmodel as pm
from perfmodel.models.graph import decode_graph


def _counts(graph: list, name: str) -> np.ndarray:  # type: ignore[type-arg]
    return np.asarray([np.asarray(g.count) for g in graph if g.name == name])


def test_fused_graph_drops_the_residual_adds_and_norms_where_tp_is_above_one() -> None:
    cfg = pm.load_model("llama-3.1-8b")
    tp = np.asarray([1.0, 4.0])
    plain = decode_graph(cfg, 8, 1024, tp)
    fused = decode_graph(cfg, 8, 1024, tp, fuse_allreduce=True)
    layers = cfg.num_layers
    assert _counts(plain, "residual_add").tolist() == [2.0 * layers]
    assert _counts(fused, "residual_add")[0].tolist() == [2.0 * layers, 0.0]
    assert _counts(fused, "post_attn_norm")[0].tolist() == [layers, 0.0]
    assert _counts(fused, "input_norm")[0].tolist() == [layers, 1.0]  # the first layer's
    ar = [g for g in fused if g.name.endswith("allreduce") and g.layer]
    assert {g.name for g in ar} == {"attn_allreduce", "mlp_allreduce"}
    assert all(g.args["fused_residual_norm"] for g in ar)


def test_fusion_saves_time_at_tp_above_one_only() -> None:
    from perfmodel.models.evaluate import evaluate_graphs
    from perfmodel.models.rows import aggregate

    cfg = pm.load_model("llama-3.1-70b")
    hw = pm.load_hardware("h200-sxm")

    def step(tp: int, fuse: bool) -> float:
        t, _ = evaluate_graphs([(decode_graph(cfg, 64, 2048, tp, fuse_allreduce=fuse), ())], hw)
        return float(aggregate(t[0], "decode").latency_s)

    assert step(8, True) < step(8, False)
    assert step(1, True) == step(1, False)
