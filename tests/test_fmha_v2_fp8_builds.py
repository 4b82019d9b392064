"""TensorRT-LLM's fmha_v2 fp8 context kernels on SM89 are three builds by head size
(cpp/kernels/fmha_v2/setup.py enumerate_qmma_flash_kernels: 128×128 tiles to head size
64, 64×32 from 72; the shipped cubins take 24 KB of shared memory to 64, 32 KB to 128 and
64 KB to 256), each with its own fp8 rate. The head-size ranges below are that table's,
restated here."""

from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import Constants
from perfmodel.timing.kernels import attention_family

PRIORS = Constants()
ENGINE = "attn.fmha-v2.fp8_efficiency.ada.trtllm"
BUILDS = {32: "e4m3-d32-64", 64: "e4m3-d32-64", 72: "e4m3-d72-128", 128: "e4m3-d72-128",
          160: "e4m3-d160-256", 256: "e4m3-d160-256"}


@pytest.mark.parametrize(("head_dim", "build"), sorted(BUILDS.items()))
def test_ada_fp8_calls_run_the_build_of_their_head_size(head_dim: int, build: str) -> None:
    assert attention_family("fmha-v2").fp8_build("ada", head_dim) == build


@pytest.mark.parametrize("arch", ["ampere", "hopper", "blackwell"])
def test_other_architectures_have_one_fp8_rate(arch: str) -> None:
    assert attention_family("fmha-v2").fp8_build(arch, 128) == ""
    assert attention_family("flash2").fp8_build("ada", 128) == ""


def _compute(head_dim: float | np.ndarray, dtype: str, consts: Constants) -> np.ndarray:
    """Compute part of a long fp8 (or bf16) TensorRT-LLM context call on L40S."""
    op = pm.Attention(batch=4, heads=32, kv_heads=8, seq_q=8192, seq_kv=8192,
                      head_dim=head_dim, causal=True, dtype=dtype, kv_dtype=dtype,
                      impl="fmha-v2")
    p = predict(op, "l40s", context=RunContext(launch="graph", engine="trtllm"),
                constants=consts)
    return np.asarray(p.compute_s, dtype=np.float64)


def test_a_builds_rate_sets_its_head_sizes_only() -> None:
    """The d72-128 build at rate 0.2 times head dim 128 as the engine-wide rate 0.2 would,
    and leaves head dims 64 and 256 (the other builds) at the engine-wide 0.4."""
    base = PRIORS.with_values({ENGINE: 0.4}, "test")
    build = base.with_values({f"{ENGINE}.e4m3-d72-128": 0.2}, "test")
    slow = PRIORS.with_values({ENGINE: 0.2}, "test")
    assert float(_compute(128.0, "fp8", build)) == float(_compute(128.0, "fp8", slow))
    assert float(_compute(128.0, "fp8", build)) > 1.5 * float(_compute(128.0, "fp8", base))
    for d in (64.0, 256.0):
        assert float(_compute(d, "fp8", build)) == float(_compute(d, "fp8", base))


def test_an_unfitted_build_takes_its_engines_rate() -> None:
    one = PRIORS.with_values({ENGINE: 0.4}, "test")
    same = one.with_values({f"{ENGINE}.{b}": 0.4 for b in set(BUILDS.values())}, "test")
    for d in (64.0, 128.0, 256.0):
        assert float(_compute(d, "fp8", one)) == float(_compute(d, "fp8", same))


def test_bf16_calls_ignore_the_fp8_builds() -> None:
    slow = PRIORS.with_values({f"{ENGINE}.e4m3-d72-128": 0.1}, "test")
    assert float(_compute(128.0, "bf16", slow)) == float(_compute(128.0, "bf16", PRIORS))


def test_the_vector_path_picks_each_head_dims_build() -> None:
    consts = PRIORS.with_values({f"{ENGINE}.e4m3-d32-64": 0.3,
                                 f"{ENGINE}.e4m3-d72-128": 0.6,
                                 f"{ENGINE}.e4m3-d160-256": 0.2}, "test")
    dims = np.array([64.0, 128.0, 256.0, 128.0])
    vec = _compute(dims, "fp8", consts)
    one = [float(_compute(float(d), "fp8", consts)) for d in dims]
    assert vec == pytest.approx(one, rel=1e-12)


def _details(head_dim: float | np.ndarray, dtype: str) -> dict[str, object]:
    op = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=2048, head_dim=head_dim,
                      causal=True, dtype=dtype, kv_dtype=dtype, impl="fmha-v2")
    return dict(predict(op, "l40s", context=RunContext(engine="trtllm")).details)


def test_predictions_name_the_build_they_ran() -> None:
    """An fp8 call says which build it ran (a vector of head dims, each build once, in
    head-dim order); a bf16 call and an fp8 call of a family with one rate say nothing."""
    assert _details(128.0, "fp8")["fp8_build"] == "e4m3-d72-128"
    assert _details(np.array([256.0, 64.0, 256.0]), "fp8")["fp8_build"] == \
        "e4m3-d32-64,e4m3-d160-256"
    assert "fp8_build" not in _details(128.0, "bf16")
    flash3 = pm.Attention(batch=2, heads=32, kv_heads=8, seq_q=2048, head_dim=128,
                          causal=True, dtype="fp8", kv_dtype="fp8", impl="flash3")
    assert "fp8_build" not in predict(flash3, "h100-sxm").details
