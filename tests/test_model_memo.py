"""predict_model's memo of scalar-input predictions (perfmodel.models.memo, issue 11).

A repeated call is answered from a bounded table keyed by value. These tests pin that it
changes no figure, that any change of an input (the spec, even edited in place; the
config; a number; a type the call treats differently) is predicted afresh, that a hit
still warns as a fresh call does, and that a shared prediction cannot be changed.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.models import predict as predict_mod
from perfmodel.models.memo import Memo, spec_token

KW: dict[str, Any] = {"phase": "generate", "prompt_len": 1500, "gen_len": 200, "batch": 2}


def _figures(r: pm.ModelPrediction) -> list[Any]:
    rows = [dataclasses.astuple(row) for row in r.ops]
    phases = [None if ph is None else (dataclasses.astuple(ph)) for ph in (r.prefill, r.decode)]
    return [r.latency_s, r.ttft_s, r.tpot_s, r.e2e_s, r.tokens_per_s, r.assumptions,
            dataclasses.astuple(r.memory), rows, phases]


def test_a_hit_is_the_prediction_a_fresh_call_makes() -> None:
    hw = pm.load_hardware("h100-sxm")
    first = pm.predict_model("llama-3.1-8b", hw, **KW)
    again = pm.predict_model("llama-3.1-8b", hw, **KW)
    assert again is first  # answered from the memo
    predict_mod.MEMO.clear()
    fresh = pm.predict_model("llama-3.1-8b", hw, **KW)
    assert fresh is not first
    assert _figures(fresh) == _figures(first)


def test_a_scalar_prediction_holds_nothing_mutable() -> None:
    """What the memo shares between callers: floats, strings, bools and tuples only."""
    r = pm.predict_model("mixtral-8x7b", "a100-80gb-sxm", engine="vllm", **KW)

    def check(x: Any) -> None:
        if dataclasses.is_dataclass(x):
            for f in dataclasses.fields(x):
                check(getattr(x, f.name))
        elif isinstance(x, tuple):
            for v in x:
                check(v)
        else:
            assert type(x) in (float, int, str, bool, type(None)), type(x)

    check(r)
    check(r.ops)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.latency_s = 0.0  # type: ignore[misc]


def test_a_changed_spec_is_predicted_afresh() -> None:
    hw = pm.load_hardware("a100-80gb-sxm")
    base = pm.predict_model("llama-2-7b", hw, **KW).latency_s
    slower = hw.model_copy(update={"memory": hw.memory.model_copy(
        update={"bandwidth": hw.memory.bandwidth / 2.0})})
    assert pm.predict_model("llama-2-7b", slower, **KW).latency_s > base
    # an equal spec (another object) shares the entry
    assert pm.predict_model("llama-2-7b", hw.model_copy(deep=True), **KW).latency_s == base
    # a spec edited in place (its peak table is a dict) is a new value too
    edited = hw.model_copy(deep=True)
    assert pm.predict_model("llama-2-7b", edited, **KW).latency_s == base
    bf16 = edited.peaks["bf16"]
    edited.peaks["bf16"] = bf16.model_copy(update={"peak": bf16.peak / 4.0})
    assert pm.predict_model("llama-2-7b", edited, **KW).ttft_s > pm.predict_model(
        "llama-2-7b", hw, **KW).ttft_s
    assert spec_token(edited) != spec_token(hw)


def test_a_changed_config_or_number_is_predicted_afresh() -> None:
    cfg = pm.load_model("llama-2-7b")
    base = pm.predict_model(cfg, "h100-sxm", **KW)
    deeper = cfg.model_copy(update={"num_layers": cfg.num_layers + 8})
    assert pm.predict_model(deeper, "h100-sxm", **KW).latency_s > base.latency_s
    assert pm.predict_model(cfg, "h100-sxm", **{**KW, "prompt_len": 1501}).ttft_s > base.ttft_s
    # 1500 and 1500.0 are the same input, predicted alike
    same = pm.predict_model(cfg, "h100-sxm", **{**KW, "prompt_len": 1500.0})
    assert _figures(same) == _figures(base)


def test_a_bool_never_hits_the_entry_of_its_number() -> None:
    pm.predict_model("llama-2-7b", "h100-sxm", phase="prefill", prompt_len=64, batch=1)
    with pytest.raises(pm.PerfmodelError) as err:
        pm.predict_model("llama-2-7b", "h100-sxm", phase="prefill", prompt_len=64,
                         batch=True)
    assert err.value.field == "batch"


def test_a_hit_warns_and_refuses_as_a_fresh_call_does() -> None:
    kw: dict[str, Any] = {"phase": "generate", "prompt_len": 4000, "gen_len": 500}
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = pm.predict_model("llama-2-7b", "h100-sxm", **kw)
        assert [w for w in caught if issubclass(w.category, pm.PerfmodelWarning)]
        assert caught[0].filename == __file__  # pointed at the caller
        assert any("window" in a for a in r.assumptions)
    with pytest.raises(pm.PerfmodelError):
        pm.predict_model("llama-2-7b", "h100-sxm", strict=True, **kw)


def test_array_inputs_are_not_memoised() -> None:
    predict_mod.MEMO.clear()
    prompts = np.array([128.0, 256.0])
    r = pm.predict_model("llama-2-7b", "h100-sxm", phase="prefill", prompt_len=prompts)
    assert len(predict_mod.MEMO) == 0
    prompts[0] = 4096.0  # the caller's array changing later changes nothing kept
    again = pm.predict_model("llama-2-7b", "h100-sxm", phase="prefill",
                             prompt_len=np.array([128.0, 256.0]))
    np.testing.assert_array_equal(again.latency_s, r.latency_s)


def test_memo_is_bounded_oldest_out_first() -> None:
    memo: Memo[int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("c", 3)
    assert len(memo) == 2
    assert memo.get("a") is None
    assert (memo.get("b"), memo.get("c")) == (2, 3)
    with pytest.raises(ValueError, match="at least one"):
        Memo(0)
    assert predict_mod.MEMO.size <= 4096


def test_tp_sweep_under_an_engine_predicts() -> None:
    """A tp array with an engine used to raise a bare ValueError (the truth value of the
    per-tp KV-head array); each point equals its scalar prediction."""
    tps = np.array([1.0, 2.0, 4.0])
    r = pm.predict_model("llama-3.1-70b", "h100-sxm", phase="prefill", prompt_len=1024,
                         tp=tps, engine="trtllm")
    for i, t in enumerate(tps):
        one = pm.predict_model("llama-3.1-70b", "h100-sxm", phase="prefill",
                               prompt_len=1024, tp=float(t), engine="trtllm")
        np.testing.assert_allclose(np.asarray(r.latency_s)[i], one.latency_s, rtol=1e-12)


# ------------------------------------------------------------------ per-op memo
def _fresh(*args: Any, **kw: Any) -> pm.ModelPrediction:
    predict_mod.MEMO.clear()
    return pm.predict_model(*args, **kw)


@pytest.mark.parametrize(("model", "gpu", "engine"), [
    ("llama-3.1-8b", "h100-sxm", "none"), ("mixtral-8x7b", "a100-80gb-sxm", "vllm"),
    ("gpt-oss-20b", "l40s", "sglang"), ("llama-3.1-70b", "b200", "trtllm")])
def test_op_memo_changes_no_figure(model: str, gpu: str, engine: str) -> None:
    """A whole model predicted with the per-op memo warm (another prompt length's decode
    ops already in it) equals the same prediction made with the memo empty."""
    from perfmodel.models.evaluate import OP_MEMO

    kw = {**KW, "engine": engine}
    OP_MEMO.clear()
    cold = _fresh(model, gpu, **kw)
    _fresh(model, gpu, **{**kw, "prompt_len": 777})
    warm = _fresh(model, gpu, **kw)
    assert _figures(warm) == _figures(cold)


def test_op_memo_answers_the_ops_another_prompt_length_shares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another prompt length repeats every decode-step op but attention: those come from
    the per-op memo, so fewer predictions are made; an edited spec (its bandwidth) gets
    its own entries and its own figures."""
    from perfmodel.models import evaluate
    from perfmodel.models.evaluate import OP_MEMO

    calls: list[str] = []
    real = evaluate.predict  # type: ignore[attr-defined]

    def counting(op: Any, hw: Any, **kw: Any) -> Any:
        calls.append(op.name)
        return real(op, hw, **kw)

    monkeypatch.setattr(evaluate, "predict", counting)
    OP_MEMO.clear()
    hw = pm.load_hardware("a100-80gb-sxm")
    _fresh("llama-2-7b", hw, phase="generate", batch=1, prompt_len=2049, gen_len=256)
    first = len(calls)
    calls.clear()
    a = _fresh("llama-2-7b", hw, phase="generate", batch=1, prompt_len=2050, gen_len=256)
    assert 0 < len(calls) < first
    slower = hw.model_copy(update={"memory": hw.memory.model_copy(
        update={"bandwidth": hw.memory.bandwidth / 2})})
    calls.clear()
    b = _fresh("llama-2-7b", slower, phase="generate", batch=1, prompt_len=2050, gen_len=256)
    assert len(calls) == first  # nothing shared with the other spec's entries
    assert b.tpot_s > 1.5 * a.tpot_s
