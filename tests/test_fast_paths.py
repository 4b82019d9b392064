"""The fast paths give the numbers of the general ones (issue 11).

- One shape predicted alone (plain floats, perfmodel._xp.SCALAR) and the same shape as one
  row of an array call (numpy) agree to 1e-12 for every op class.
- Whole-model evaluation that predicts each distinct shape once gives the per-instance
  figures of the evaluation that predicts every instance.
- The op registry covers every op class and every measurement op name, and each entry
  builds an op that predicts.
- MemorySpec.latency acts: it is the size-independent term of a transfer.
- A spec file is parsed again only when it (or a file it extends) changed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.hardware.catalog import load_hardware
from perfmodel.models import evaluate
from perfmodel.ops import (
    Activation,
    AllReduce,
    Attention,
    Elementwise,
    Embedding,
    Gemm,
    Norm,
    Rotary,
    Softmax,
)
from perfmodel.ops.registry import OP_CLASSES, ROW_OPS, op_class
from perfmodel.timing import RunContext, attention_runs_on
from perfmodel.timing.family import family_params

RTOL = 1e-12
FIELDS = ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes", "bytes_min")
GPUS = ("h100-sxm", "a100-80gb-sxm", "mi300x", "l4")
CONTEXTS = (RunContext(), RunContext(l2="warm", copies=3.0),
            RunContext(launch="graph", engine="vllm"))

size = st.integers(1, 1 << 16)
small = st.integers(1, 256)


def _row_agrees(make: Any, shapes: list[dict[str, int]], static: dict[str, Any],
                hw: pm.HardwareSpec, ctx: RunContext) -> None:
    """Each shape alone equals its row of one vectorised call."""
    arrays = {k: np.asarray([s[k] for s in shapes], dtype=np.float64) for k in shapes[0]}
    many = pm.predict(make(**arrays, **static), hw, context=ctx)
    n = len(shapes)

    def row(x: Any, i: int) -> Any:
        return np.broadcast_to(np.asarray(x), (n,))[i]

    for i, shape in enumerate(shapes):
        one = pm.predict(make(**shape, **static), hw, context=ctx)
        for f in FIELDS:
            np.testing.assert_allclose(getattr(one, f), row(getattr(many, f), i),
                                       rtol=RTOL, atol=0.0, err_msg=f"{make.__name__} {f}")
        assert str(one.bottleneck) == str(row(many.bottleneck, i))


@settings(max_examples=15, deadline=None)
@given(shapes=st.lists(st.fixed_dictionaries({"m": size, "n": size, "k": size,
                                              "batch": st.integers(1, 8)}),
                       min_size=1, max_size=6),
       dtype=st.sampled_from(["bf16", "fp8", "fp32"]),
       quant=st.sampled_from(["none", "block"]), gpu=st.sampled_from(GPUS),
       ctx=st.sampled_from(CONTEXTS))
def test_gemm_scalar_and_vector_agree(shapes: list[dict[str, int]], dtype: str, quant: str,
                                      gpu: str, ctx: RunContext) -> None:
    hw = pm.load_hardware(gpu)
    if dtype not in hw.peaks:
        dtype = "bf16"
    static: dict[str, Any] = {"dtype": dtype, "shared_b": True}
    if quant == "block" and dtype == "fp8":
        static.update(quant="block", out_dtype="bf16")
    _row_agrees(Gemm, shapes, static, hw, ctx)


@settings(max_examples=15, deadline=None)
@given(shapes=st.lists(st.fixed_dictionaries({
    "batch": st.integers(1, 16), "heads": st.sampled_from([8, 32, 64]),
    "seq_q": st.sampled_from([1, 1, 7, 128, 1000, 4096]), "seq_kv": size,
    "head_dim": st.sampled_from([64, 128, 192])}), min_size=1, max_size=5),
       group=st.sampled_from([1, 4, 8]), causal=st.booleans(),
       impl=st.sampled_from(["flash", "flash2", "paged", "flashinfer"]),
       gpu=st.sampled_from(GPUS), ctx=st.sampled_from(CONTEXTS))
def test_attention_scalar_and_vector_agree(shapes: list[dict[str, int]], group: int,
                                           causal: bool, impl: str, gpu: str,
                                           ctx: RunContext) -> None:
    hw = pm.load_hardware(gpu)
    if not attention_runs_on(impl, hw.arch):  # FlashInfer has no ROCm build: its error
        impl = "flash"
    rows = [{**s, "kv_heads": s["heads"] // group, "seq_kv": max(s["seq_kv"], s["seq_q"])}
            for s in shapes]
    _row_agrees(Attention, rows, {"causal": causal, "impl": impl}, hw, ctx)


@pytest.mark.parametrize(("make", "fields", "static"), [
    (Norm, ("tokens", "hidden"), {"kind": "rms"}),
    (Norm, ("tokens", "hidden"), {"kind": "layer"}),
    (Activation, ("tokens", "width"), {"kind": "silu_mul"}),
    (Rotary, ("tokens", "heads", "kv_heads", "head_dim"), {}),
    (Softmax, ("rows", "cols"), {}),
    (Embedding, ("tokens", "hidden", "vocab"), {}),
    (Elementwise, ("numel",), {"reads": 2.0, "writes": 1.0}),
])
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_streaming_scalar_and_vector_agree(make: Any, fields: tuple[str, ...],
                                           static: dict[str, Any], ctx: RunContext) -> None:
    rng = np.random.default_rng(5)
    shapes = [{f: int(rng.integers(1, 1 << 14)) for f in fields} for _ in range(6)]
    _row_agrees(make, shapes, static, pm.load_hardware("h100-sxm"), ctx)


def test_distinct_shapes_give_the_per_instance_figures(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A 300-point decode sweep predicted through distinct shapes (its GEMMs repeat at
    every point) equals the same sweep with every instance predicted."""
    ctx = np.arange(300.0) * 7.0 + 100.0

    def run() -> pm.ModelPrediction:
        return pm.predict_model("llama-2-7b", "h100-sxm", phase="decode", batch=8,
                                context_len=ctx)

    fast = run()
    monkeypatch.setattr(evaluate, "_DISTINCT_MIN", 10**12)
    full = run()
    assert fast.decode is not None
    assert full.decode is not None
    np.testing.assert_allclose(fast.latency_s, full.latency_s, rtol=RTOL, atol=0.0)
    for a, b in zip(fast.decode.ops, full.decode.ops, strict=True):
        assert a.name == b.name
        for f in ("latency_s", "compute_s", "memory_s", "overhead_s", "flops", "bytes"):
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=RTOL, atol=0.0)


def test_distinct_finds_repeated_columns() -> None:
    flat = {"m": np.array([1.0, 8.0, 1.0, 1.0]), "n": np.array([5.0, 5.0, 5.0, 6.0])}
    monkey = evaluate._DISTINCT_MIN
    try:
        evaluate._DISTINCT_MIN = 2
        out, ratio, inverse = evaluate._distinct(flat, None, 4)
    finally:
        evaluate._DISTINCT_MIN = monkey
    assert ratio is None
    assert inverse is not None
    assert np.asarray(out["m"]).size == 3  # (1, 5), (8, 5), (1, 6)
    np.testing.assert_array_equal(np.asarray(out["m"])[inverse], flat["m"])
    np.testing.assert_array_equal(np.asarray(out["n"])[inverse], flat["n"])


@pytest.mark.parametrize("varying", [0, 1, 2, 4])
def test_distinct_columns_of_random_groups(varying: int) -> None:
    """Groups with none, one or several fields varying (with repeats), and a traffic ratio:
    the distinct columns are those of a set of tuples, and indexing them with the inverse
    gives every instance back."""
    rng = np.random.default_rng(varying)
    total = 600
    flat = {f"f{i}": (rng.integers(1, 5, total).astype(float) * 64.0 if i < varying
                      else np.full(total, 128.0 * (i + 1))) for i in range(5)}
    ratio = rng.choice([1.0, 0.5], total) if varying else np.ones(total)
    out, new_ratio, inverse = evaluate._distinct(flat, ratio, total)
    names = sorted(flat)
    columns = set(zip(*(flat[n] for n in names), ratio, strict=True))
    if inverse is None:  # every column distinct
        assert len(columns) == total
        return
    for n in names:
        np.testing.assert_array_equal(np.atleast_1d(out[n])[inverse], flat[n])
    assert new_ratio is not None
    np.testing.assert_array_equal(np.atleast_1d(new_ratio)[inverse], ratio)
    assert np.atleast_1d(out[names[0]]).size == len(columns)


def test_registry_covers_every_op_class() -> None:
    classes = {Gemm, Attention, Elementwise, Norm, Activation, Rotary, Softmax, Embedding,
               AllReduce}
    assert {e.cls for e in OP_CLASSES.values()} == classes
    for cls in classes:
        entry = op_class(cls)
        assert OP_CLASSES[entry.name] is entry
        assert entry.family in ("gemm", "attention", "stream", "comm")
    with pytest.raises(pm.PerfmodelError, match="cannot predict"):
        op_class(int)


@pytest.mark.parametrize("name", list(ROW_OPS))
def test_each_measurement_op_builds_an_op_that_predicts(name: str) -> None:
    row = ROW_OPS[name]
    sizes = {"m": 512, "n": 2, "k": 256, "heads": 8, "seq_q": 16, "seq_kv": 64,
             "head_dim": 64}
    op = row.build("bf16", {c: sizes[c] for c in row.columns})
    assert isinstance(op, row.op_class.cls)
    p = pm.predict(op, "h100-sxm")
    assert float(p.latency_s) > 0.0
    with pytest.raises(pm.PerfmodelError, match=row.columns[0]):
        row.build("bf16", {})


def test_memory_latency_of_the_spec_is_the_fixed_term_of_a_transfer() -> None:
    """A copy's memory time is bytes / bandwidth + latency: the spec's memory.latency
    replaces the family's latency one for one."""
    hw = pm.load_hardware("h100-sxm")
    slow = hw.model_copy(update={"memory": hw.memory.model_copy(update={"latency": 50e-6})})
    op = Elementwise(4096, reads=1, writes=1, flops_per_element=0)
    base = pm.predict(op, hw).memory_s
    with_latency = pm.predict(op, slow).memory_s
    expected = 50e-6 - family_params(hw.arch).memory_latency_s
    assert float(with_latency) - float(base) == pytest.approx(expected, rel=1e-9)
    assert float(pm.predict(op, hw).memory_s) == float(base)  # the cache kept them apart


def _write(path: Path, text: str, age_s: float) -> None:
    path.write_text(text, encoding="utf-8")
    past = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(past, past))


def test_spec_files_are_parsed_again_only_when_they_change(tmp_path: Path) -> None:
    base, child = tmp_path / "base.yaml", tmp_path / "child.yaml"
    _write(base, "extends: h100-sxm\nid: my-gpu\n", 60.0)
    _write(child, "extends: base.yaml\nname: Child GPU\n", 60.0)
    first = load_hardware(child)
    assert first.id == "my-gpu"
    assert first.name == "Child GPU"
    assert load_hardware(str(child)) is first  # cached: same object
    # the parent changes (another size, another time): the child is read again
    _write(base, "extends: h100-sxm\nid: my-gpu-2\n", 30.0)
    again = load_hardware(child)
    assert again.id == "my-gpu-2"
    assert again.name == "Child GPU"


def test_a_spec_file_just_written_is_not_kept(tmp_path: Path) -> None:
    spec = tmp_path / "fresh.yaml"
    spec.write_text("extends: h100-sxm\nid: fresh-gpu\n", encoding="utf-8")
    a, b = load_hardware(spec), load_hardware(spec)
    assert a == b
    assert a is not b  # modified just now: could change again within one clock tick


@pytest.mark.parametrize(("field", "value"), [("register_file_per_unit", 1.0),
                                              ("infinity_cache", 1e12)])
def test_reference_only_memory_fields_change_no_prediction(field: str, value: float) -> None:
    """MemorySpec documents register_file_per_unit and infinity_cache as reference only."""
    hw = pm.load_hardware("mi300x")
    other = hw.model_copy(update={"memory": hw.memory.model_copy(update={field: value})})
    ops: list[Gemm | Attention | Norm] = [Gemm(m=8, n=4096, k=4096), Attention(
        batch=4, seq_q=1, seq_kv=8192, causal=True), Norm(4096, 8192)]
    for op in ops:
        for ctx in CONTEXTS:
            a, b = pm.predict(op, hw, context=ctx), pm.predict(op, other, context=ctx)
            assert float(a.latency_s) == float(b.latency_s)


@pytest.mark.parametrize("gpu", ["h100-sxm", "mi300x", "l4"])
@pytest.mark.parametrize("ctx", CONTEXTS[:2])
def test_pruned_gemm_search_chooses_as_the_full_search(gpu: str, ctx: RunContext,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Many shapes (the pruned search) and few (every candidate on every shape) pick the
    same candidate with the same figures, small shapes (split-K) included."""
    from perfmodel.timing import gemm as timing_gemm

    rng = np.random.default_rng(7)
    m, n, k = (np.round(np.exp(rng.uniform(0.0, np.log(16384.0), 300))) for _ in range(3))
    op = Gemm(m=m, n=n, k=k, dtype="bf16", batch=rng.integers(1, 4, 300))
    hw = pm.load_hardware(gpu)
    monkeypatch.setattr(timing_gemm, "_FEW", 0)
    pruned = pm.predict(op, hw, context=ctx)
    monkeypatch.setattr(timing_gemm, "_FEW", 10**9)
    full = pm.predict(op, hw, context=ctx)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(pruned, f), getattr(full, f), err_msg=f)
    for d in ("tile_m", "tile_n", "split_k", "kernels"):
        np.testing.assert_array_equal(pruned.details[d], full.details[d], err_msg=d)
    assert np.any(np.asarray(full.details["split_k"]) > 1)  # split-K was in play


@pytest.mark.parametrize("value", [np.float64(7.0), np.asarray(7.0), 7, 7.0])
def test_a_single_size_is_taken_alike_whatever_its_type(value: Any) -> None:
    """as_size's float path for numpy scalars and 0-d arrays (what model graphs pass)
    returns the number the array path does."""
    from perfmodel.ops.cost import as_size
    out = as_size(value, "m")
    assert out.shape == ()
    assert float(out) == 7.0


@pytest.mark.parametrize(("value", "words"), [
    (np.float64("nan"), "NaN"), (np.asarray(np.inf), "infinity"),
    (np.asarray(0.0), "≥ 1"), (np.float64(2.5), "whole number"),
    (np.asarray(2.0**60), "cap")])
def test_a_bad_single_size_is_refused_naming_the_field(value: Any, words: str) -> None:
    from perfmodel.ops.cost import as_size
    with pytest.raises(pm.PerfmodelError, match=words) as err:
        as_size(value, "m")
    assert err.value.field == "m"


@pytest.mark.parametrize(("bad", "words"), [
    (np.nan, "NaN"), (np.inf, "infinity"), (-np.inf, "infinity"), (0.0, "≥ 1"),
    (2.5, "whole number"), (2.0**60, "cap")])
def test_a_bad_element_of_a_size_array_is_refused_naming_the_field(bad: float,
                                                                   words: str) -> None:
    """as_size's two-reduction check of a good array lets no bad element through."""
    from perfmodel.ops.cost import as_size
    arr = np.array([4.0, 8.0, bad, 16.0])
    with pytest.raises(pm.PerfmodelError, match=words) as err:
        as_size(arr, "k")
    assert err.value.field == "k"
    np.testing.assert_array_equal(as_size(np.array([4.0, 8.0, 16.0]), "k"), [4.0, 8.0, 16.0])
    assert float(as_size(np.array([0.5, 2.5]), "r", minimum=0.0, integer=False)[1]) == 2.5
