"""The scalar fast path of one op (issue 11) computes what the general code computes.

- A prediction built from floats (``_build_floats``) equals the general builder's.
- Op construction's fast paths normalise and refuse what the general checks do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._xp import SCALAR
from perfmodel.timing.prediction import _build, _build_floats


def test_a_float_prediction_is_the_general_builders() -> None:
    rng = np.random.default_rng(3)
    values = [0.0, 1e-6, 2e-6, 1e-3, 5e-5]
    for _ in range(400):
        # parts drawn from a few values (ties), or at random
        c, m, o = (float(rng.choice(values)) if rng.random() < 0.4
                   else float(rng.lognormal(-11.0, 2.0)) for _ in range(3))
        lat = max(c, m) + o
        f, b = float(rng.lognormal(25.0, 4.0)), float(rng.lognormal(18.0, 3.0))
        args = ("gemm", "h100-sxm", "bf16", c, m, o, lat, f, b, b * 0.9, 989e12, 3.35e12,
                295.0, (), {"tile_m": 128.0})
        fast = _build_floats(*args)
        general = _build(*args, SCALAR)
        assert fast.to_dict() == general.to_dict()
        assert type(fast.bottleneck) is str
        assert type(fast.compute_util) is float


@pytest.mark.parametrize(("kwargs", "field", "value"), [
    ({"quant": " None "}, "quant", "none"), ({"impl": " CUBLAS"}, "impl", "cublas"),
    ({"out_dtype": ""}, "out_dtype", "bf16"), ({"out_dtype": "BF16"}, "out_dtype", "bf16"),
    ({"dtype": "fp4"}, "quant", "none")])
def test_gemm_construction_still_normalises(kwargs: dict[str, Any], field: str,
                                            value: str) -> None:
    assert getattr(pm.Gemm(m=8, n=16, k=32, **kwargs), field) == value


@pytest.mark.parametrize(("make", "field"), [
    (lambda: pm.Gemm(m=np.ones(3), n=np.ones(4), k=8), "shape"),
    (lambda: pm.Gemm(m=8, n=8, k=8, impl="magic"), "impl"),
    (lambda: pm.Attention(heads=32, kv_heads=5), "kv_heads"),
    (lambda: pm.Attention(heads=np.asarray([32.0, 8.0]), kv_heads=np.asarray([8.0, 3.0])),
     "kv_heads"),
    (lambda: pm.Attention(batch=np.ones(3), seq_q=np.ones(2)), "shape"),
    (lambda: pm.Attention(impl="magic"), "impl")])
def test_op_construction_still_refuses_bad_input(make: Any, field: str) -> None:
    with pytest.raises(pm.PerfmodelError) as err:
        make()
    assert err.value.field == field


def test_attention_construction_still_normalises() -> None:
    op = pm.Attention(heads=32, kv_heads=8, impl="FA3", kv_dtype="", dtype="fp16")
    assert (op.impl, op.kv_dtype, op.shape) == ("flash3", "fp16", ())
    many = pm.Attention(heads=32, kv_heads=8, seq_q=np.asarray([1.0, 2.0, 3.0]))
    assert many.shape == (3,)


@pytest.mark.parametrize(("model", "gpu", "engine", "dtypes"), [
    ("llama-2-7b", "a100-80gb-sxm", "none", {}),
    # fp8 weights on a GPU without fp8 matmul: the weight-only stand-in and its traffic ratio
    ("llama-3.1-8b", "a100-80gb-sxm", "none", {"weight": "fp8", "kv": "fp8"}),
    ("llama-3.1-8b", "h100-sxm", "trtllm", {"weight": "fp8", "kv": "fp8"}),
    ("mixtral-8x7b", "b200", "vllm", {}),
])
def test_small_op_groups_shape_by_shape_equal_one_vectorised_call(
        model: str, gpu: str, engine: str, dtypes: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # evaluate_graphs predicts a group of a few instances shape by shape on floats; with
    # the threshold at 0 every group takes the vectorised call: both must agree
    from perfmodel.models import evaluate
    from perfmodel.models.graph import Dtypes, decode_graph, prefill_graph

    cfg, hw = pm.load_model(model), pm.load_hardware(gpu)
    dt = Dtypes(**dtypes)  # type: ignore[arg-type]
    ctx = np.array([[1025.0, 1600.0, 2300.0]])
    graphs = [(prefill_graph(cfg, np.asarray(2.0), np.asarray(1024.0), 0, 1, dt), ()),
              (decode_graph(cfg, np.asarray([[1.0], [8.0]]), ctx, 1, dt), (2, 3))]
    calls: list[type] = []
    shape_by_shape = evaluate._group_scalar

    def spy(cls: type, *args: Any) -> None:
        calls.append(cls)
        shape_by_shape(cls, *args)

    monkeypatch.setattr(evaluate, "_group_scalar", spy)
    scalar, notes = evaluate.evaluate_graphs(graphs, hw, engine)
    assert pm.Gemm in calls
    assert pm.Attention in calls
    monkeypatch.setattr(evaluate, "_SCALAR_MAX", 0)
    vector, vector_notes = evaluate.evaluate_graphs(graphs, hw, engine)
    assert notes == vector_notes
    for a, b in zip(scalar, vector, strict=True):
        assert a.kinds == b.kinds
        np.testing.assert_array_equal(a.bottleneck, b.bottleneck)
        for field in evaluate.FIELDS:
            np.testing.assert_allclose(a.values[field], b.values[field], rtol=1e-12, atol=0)
