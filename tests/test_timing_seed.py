"""The seed cases of DESIGN.md section 3, and bad input rejected with the argument named.

- a large square GEMM runs near the roofline (compute-bound, > 70 % of dense peak);
- a 128^3 GEMM reaches a few percent of peak and is latency-bound;
- unfused attention at 32k tokens is dominated by moving the S x S score matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import PerfmodelError


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "h100-sxm"])
def test_large_gemm_is_compute_bound_near_peak(gpu: str) -> None:
    p = pm.predict(pm.Gemm(m=4096, n=4096, k=4096, dtype="fp16"), gpu)
    assert p.bottleneck == "compute"
    assert p.compute_util > 0.7
    assert p.compute_util < 1.0  # never above the datasheet
    # compute_util is flops / (latency * dense peak): 2*4096^3 FLOPs
    hw = pm.load_hardware(gpu)
    assert p.compute_util == pytest.approx(2 * 4096**3 / (p.latency_s * hw.peak("fp16")))


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "h100-sxm"])
def test_tiny_gemm_is_latency_bound(gpu: str) -> None:
    p = pm.predict(pm.Gemm(m=128, n=128, k=128, dtype="fp16"), gpu)
    assert p.bottleneck == "latency"
    assert p.compute_util < 0.15
    # a kernel takes at least a few microseconds
    assert p.latency_s > 1e-6


def test_unfused_attention_at_32k_is_memory_bound() -> None:
    op = pm.Attention(batch=1, heads=32, seq_q=32768, head_dim=128, causal=True, dtype="fp16",
                      impl="naive")
    p = pm.predict(op, "a100-80gb-sxm")
    assert p.bottleneck == "memory"
    assert p.memory_s >= 0.7 * p.latency_s
    assert [name for name, _ in p.stages] == ["qk", "scale_mask", "softmax", "pv"]
    # the fused kernel, which never writes S x S, is several times faster
    fused = pm.predict(pm.Attention(batch=1, heads=32, seq_q=32768, head_dim=128, causal=True,
                                    dtype="fp16"), "a100-80gb-sxm")
    assert fused.latency_s * 3 < p.latency_s
    # 32 heads x 32768^2 scores x 2 B = 64 GiB per pass over S; the stages make >= 6 passes
    assert p.bytes >= 6 * 32 * 32768**2 * 2


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"m": -1, "n": 64, "k": 64}, "m"),
        ({"m": 64, "n": 0, "k": 64}, "n"),
        ({"m": 64, "n": 64, "k": 2.5}, "k"),
        ({"m": 64, "n": 64, "k": float("nan")}, "k"),
        ({"m": 64, "n": 64, "k": 64, "batch": 0}, "batch"),
        ({"m": 64, "n": 64, "k": 64, "dtype": "fp7"}, "dtype"),
        ({"m": 64, "n": 64, "k": 64, "out_dtype": "float99"}, "out_dtype"),
        ({"m": "64", "n": 64, "k": 64}, "m"),
    ],
)
def test_gemm_rejects_bad_sizes_naming_the_argument(kwargs: dict[str, object],
                                                    field: str) -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.Gemm(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(field)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"heads": 32, "kv_heads": 5}, "kv_heads"),
        ({"heads": 8, "kv_heads": 32}, "kv_heads"),
        ({"seq_q": 0}, "seq_q"),
        ({"seq_kv": -4}, "seq_kv"),
        ({"head_dim": float("nan")}, "head_dim"),
        ({"impl": "magic"}, "impl"),
        ({"num_splits": 0}, "num_splits"),
        ({"kv_dtype": "fp5"}, "kv_dtype"),
    ],
)
def test_attention_rejects_bad_input_naming_the_argument(kwargs: dict[str, object],
                                                         field: str) -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.Attention(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_dtype_the_gpu_lacks_names_the_dtype() -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.predict(pm.Gemm(m=64, n=64, k=64, dtype="fp8"), "a100-80gb-sxm")
    assert info.value.field == "dtype"
    assert "fp8" in str(info.value)
    with pytest.raises(PerfmodelError) as info:
        pm.predict(pm.Attention(seq_q=64, dtype="bf16", kv_dtype="fp8"), "a100-80gb-sxm")
    assert info.value.field == "kv_dtype"


def test_wrong_length_arrays_are_rejected() -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.Gemm(m=np.array([64, 128, 256]), n=np.array([64, 128]), k=64)
    assert info.value.field == "shape"
    assert "m(3,)" in str(info.value)
    assert "n(2,)" in str(info.value)
    with pytest.raises(PerfmodelError):
        pm.Attention(seq_q=np.array([1, 2, 3]), seq_kv=np.array([4, 5]))


def test_nan_in_an_array_is_rejected() -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.Gemm(m=np.array([64.0, np.nan]), n=64, k=64)
    assert info.value.field == "m"


def test_negative_timing_floor_is_rejected() -> None:
    with pytest.raises(PerfmodelError) as info:
        pm.predict(pm.Gemm(m=64, n=64, k=64), "h100-sxm", extra_overhead_s=-1e-6)
    assert info.value.field == "extra_overhead_s"


def test_flash3_on_a_pre_ampere_gpu_names_the_impl() -> None:
    """FlashAttention-3 builds for SM80 and later (its SM8x path before Hopper), not for
    Volta or Turing."""
    op = pm.Attention(batch=1, heads=8, seq_q=1024, head_dim=128, dtype="fp16", impl="flash3")
    with pytest.raises(PerfmodelError) as info:
        pm.predict(op, "v100-sxm2-32gb")
    assert info.value.field == "impl"
    assert pm.predict(op, "h100-sxm").latency_s > 0
    assert pm.predict(op, "a100-80gb-sxm").latency_s > 0


def _assert_refused(op: Any, hw: pm.HardwareSpec, impl: str, runs: dict[str, bool]) -> None:
    """``op`` (kernel family ``impl``) is refused on ``hw`` with an error naming the impl,
    whose fix names only kernel families that run there (``runs``)."""
    with pytest.raises(PerfmodelError) as info:
        pm.predict(op, hw)
    assert info.value.field == "impl"
    assert impl in str(info.value)
    named = [k for k in runs if f"'{k}'" in info.value.fix]
    assert named, info.value.fix
    assert all(runs[k] for k in named), (impl, info.value.fix)


@pytest.mark.parametrize("gpu", ["p100-pcie-16gb", "v100-sxm2-32gb", "t4", "a100-80gb-sxm",
                                 "mi300x"])
def test_a_named_kernel_family_runs_only_where_it_is_built(gpu: str) -> None:
    """A kernel family asked for by name is predicted only on GPUs it has a build for:
    FlashAttention-2 (and its paged kernel) from Ampere on (its README: Ampere, Ada,
    Hopper), FlashInfer on NVIDIA GPUs from Turing on (SM75), Triton from Volta on
    (compute capability 7.0), TensorRT-LLM's fmha_v2, XQA and masked-MHA
    kernels on NVIDIA GPUs from Ampere on (its supported-hardware page); elsewhere the
    error names the impl and a fix whose kernels do run there. All were predicted on a
    V100 and P100, and the TensorRT-LLM ones on AMD GPUs too."""
    from perfmodel.timing import attention_runs_on

    hw = pm.load_hardware(gpu)
    nvidia = hw.vendor == "nvidia"
    old = hw.arch in ("pascal", "volta", "turing")
    runs = {"flash2": not old, "paged": not old,
            "flashinfer": nvidia and hw.arch not in ("pascal", "volta"),
            "fmha-v2": nvidia and not old, "xqa": nvidia and not old,
            "mmha": nvidia and not old, "mem-efficient": True, "triton": hw.arch != "pascal",
            "flash": True}
    for impl, expected in runs.items():
        op = pm.Attention(batch=1, heads=8, kv_heads=2, seq_q=1 if impl in ("xqa", "mmha")
                          else 1024, seq_kv=1024, head_dim=128, dtype="fp16", impl=impl)
        assert attention_runs_on(impl, hw.arch) == expected, impl
        if expected:
            assert pm.predict(op, hw).latency_s > 0, impl
            continue
        _assert_refused(op, hw, impl, runs)


@pytest.mark.parametrize("gpu", ["p100-pcie-16gb", "l40s", "h100-sxm", "b200", "rtx-5090",
                                 "mi300x"])
def test_a_named_gemm_family_runs_only_where_it_is_built(gpu: str) -> None:
    """GEMM kernel families named explicitly are held to their builds as the attention
    ones are: DeepGEMM and the engines' CuTe-DSL GEMMs on SM90/SM100 only (not Ada, not
    SM120), cuBLAS, CUTLASS and FlashInfer on NVIDIA GPUs (FlashInfer from SM75), Triton
    from compute capability 7.0 (and on AMD GPUs); each was predicted everywhere. The fix
    names only families that run there."""
    hw = pm.load_hardware(gpu)
    arch, nvidia = hw.arch, hw.vendor == "nvidia"
    dtype, quant = ("fp8", "block") if "fp8" in hw.peaks else ("fp16", "none")
    runs = {"auto": True, "cublas": nvidia, "cutlass": nvidia,
            "deepgemm": arch in ("hopper", "blackwell"), "cutedsl": arch in ("hopper", "blackwell"),
            "flashinfer": nvidia and arch not in ("pascal", "volta"), "triton": arch != "pascal"}
    for impl, expected in runs.items():
        op = pm.Gemm(m=512, n=4096, k=4096, dtype=dtype, quant=quant, impl=impl)
        if expected:
            assert pm.predict(op, hw).latency_s > 0, impl
            continue
        _assert_refused(op, hw, impl, runs)


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "h100-sxm", "b200"])
def test_the_native_kernel_for_heads_wider_than_flashattention_has(gpu: str) -> None:
    """``flash`` is the architecture's native fused kernel; where that is FlashAttention-2
    or -3, whose kernels stop at head dim 256, a wider head runs PyTorch's memory-efficient
    kernel (as its SDPA dispatch does), on Blackwell FA4's kernel still; a call mixing the
    two widths is an error that says why (they ran FA2/FA3 at head dim 512)."""
    hw = pm.load_hardware(gpu)
    native = {"ampere": "flash2", "ada": "flash2", "hopper": "flash3",
              "blackwell": "flash4"}[hw.arch]

    def impl(head_dim: float, value_dim: float | None = None) -> str:
        op = pm.Attention(batch=2, heads=16, kv_heads=4, seq_q=1024, seq_kv=1024,
                          head_dim=head_dim, value_dim=value_dim, causal=True, dtype="fp16")
        return str(pm.predict(op, hw).details["impl"])

    assert impl(256) == native
    wide = native if native == "flash4" else "mem-efficient"
    assert impl(512) == wide
    assert impl(128, value_dim=512) == wide  # the value head counts too
    if wide != native:
        with pytest.raises(PerfmodelError) as info:
            impl(np.array([128.0, 512.0]))  # type: ignore[arg-type]
        assert info.value.field == "head_dim"
        assert "separate calls" in info.value.fix
