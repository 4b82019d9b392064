"""``scripts/serving_accuracy.py``'s steady-state accounting (``--explain``) and its
decode-attention diagnostic: hand-derived figures, and the balance identity checked
against the simulator (an independent path: it steps through time, the identity is
arithmetic)."""

from __future__ import annotations

import csv
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from _scripts import load_script

from perfmodel.serving import closed_loop, prepare, run_prepared


def _script() -> ModuleType:
    return load_script("serving_accuracy")


def test_littles_running_by_hand() -> None:
    # 1000 tok/s of 500-token outputs = 2 requests/s, each running 0.5 s + 499 × 0.1 s
    # = 50.4 s: 2 × 50.4 = 100.8 sequences
    assert _script().littles_running(1000.0, 500, 0.1, 0.5) == pytest.approx(100.8)


def test_step_balance_by_hand() -> None:
    # TPOT 0.1 s = 10 steps/s; 2 requests/s. A 20 ms decode step leaves 1 − 10 × 0.02
    # = 0.8 s/s for 2 prefills: 0.4 s each; a 0.4 s prefill leaves 0.2 s/s for 10 steps
    dec, extra = _script().step_balance(0.1, 1000.0, 500, 0.02, 0.4)
    assert dec == pytest.approx(0.02)
    assert extra == pytest.approx(0.4)
    dec, extra = _script().step_balance(0.1, 1000.0, 500, 0.05, 0.3)
    assert dec == pytest.approx(0.1 * (1 - 2 * 0.3))     # 0.04
    assert extra == pytest.approx((1 - 0.5) / 2)          # 0.25


def test_mean_decoding_is_time_weighted() -> None:
    t = [0.0, 1.0, 3.0, 4.0]
    d = [2.0, 4.0, 6.0, 8.0]
    # each record holds until the next ends: 2 for 1 s, 4 for 2 s, 6 for 1 s
    assert _script().mean_decoding(t, d, 0.5) == pytest.approx((2 + 8 + 6) / 4)
    assert _script().mean_decoding(t, d, 1.0) == pytest.approx((8 + 6) / 3)


def test_the_balance_holds_in_a_simulated_closed_loop() -> None:
    # every step advances each decoder by one token and each prompt adds its prefill
    # extra once: steps/s × decode step + requests/s × extra = 1 s/s, so the decode step
    # the simulated TPOT and throughput imply must be the one the step model gives
    s = _script()
    conc = 16
    # lengths spread over [0.5 L, L] so that the clients do not run in lock-step
    wl = closed_loop(conc, 40 * conc, 1024, 128, spread=0.5)
    prompt, output = float(np.mean(wl.prompt)), float(np.mean(wl.output))
    no_host: dict[str, Any] = {"step_overhead_s": 0.0, "step_overhead_per_seq_s": 0.0,
                               "request_overhead_s": 0.0}
    cfg, spec, eng, pool, model = prepare("llama-3.1-8b", "h100-sxm", wl, engine="trtllm",
                                          **no_host)
    r = run_prepared(cfg, spec, eng, pool, model, wl, tp=1)
    end = float(r.timeline["t_s"][-1])
    lo, hi = 0.3 * end, 0.7 * end          # steady state: no start-up burst, no tail
    done = (r.finish_s > lo) & (r.finish_s <= hi)
    throughput = float(np.sum(r.output[done])) / (hi - lo)
    tpot = float(np.nanmean(r.tpot_s[done]))
    t, dec_n = r.timeline["t_s"], r.timeline["decoding"]
    inside = t <= hi
    d = s.mean_decoding(t[inside], dec_n[inside], lo)
    ctx = prompt + 0.5 * output
    di = round(d)
    dec = model.step_s(di, di * ctx, [], di)
    extra = model.step_s(di, di * ctx, [(round(prompt), 0)], di + 1) - dec
    implied_dec, _ = s.step_balance(tpot, throughput, output, dec, extra)
    assert implied_dec == pytest.approx(dec, rel=0.05)


def test_neutral_decode_attention_swaps_only_that_table(tmp_path: Path) -> None:
    s = _script()
    with s.CSV.open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["mode"] == "closed"][:1]
    path = tmp_path / "one.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    engine = s.load_cases(path)[0].model
    neutral = s.load_cases(path, "none")[0].model
    mixed = s.load_cases(path, None, True)[0].model
    assert mixed.dec_attn == neutral.dec_attn
    assert mixed.dec_attn != engine.dec_attn
    assert mixed.dense == engine.dense
    assert mixed.pre_attn == engine.pre_attn


def test_trtllm_bench_heuristic_reads_a_mixed_dtype_checkpoint() -> None:
    # gpt-oss keeps bf16 attention beside MXFP4 experts: with no weight dtype given the
    # heuristic sizes the engine from the checkpoint's own dtypes, so its batch lies
    # between that of all-fp4 and all-bf16 weights (lighter weights, more room for KV)
    s = _script()
    bs = {w: s.trtllm_bench_settings("gpt-oss-120b", "h200-sxm", 1, w, "", 1024, 1024)[0]
          for w in ("fp4", "", "bf16")}
    assert bs["fp4"] >= bs[""] >= bs["bf16"]
    assert bs["fp4"] > bs["bf16"]


def test_trtllm_bench_heuristic_under_dep_is_per_rank() -> None:
    # with attention data parallelism a rank is one GPU: its own KV, the experts spread
    # over the group, so eight GPUs leave each rank more room than four
    s = _script()
    four = s.trtllm_bench_settings("deepseek-v3", "b200", 4, "fp4", "fp8", 1024, 1024,
                                   parallel="dep")[0]
    eight = s.trtllm_bench_settings("deepseek-v3", "b200", 8, "fp4", "fp8", 1024, 1024,
                                    parallel="dep")[0]
    assert eight > four
