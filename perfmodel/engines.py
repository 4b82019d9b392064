"""Inference engines as data: which kernel each one dispatches for an op on an architecture.

An engine (TensorRT-LLM, vLLM, SGLang) is not a layer of the model but a choice of kernels
and fusions. This module maps (engine, architecture, op, phase, dtypes) to the kernel
family an op should name (``impl``) and to what one engine call contains (activation
quantization before a quantized GEMM; the pre-processing kernel before attention). The
choices follow the kernels NVIDIA AIConfigurator's collectors recorded for each engine
(``ks=`` labels in its database; "Kernels per GPU" in ``perfmodel/data/measurements/README.md``,
beside a cited subset of its rows) and the engines' documentation and default-selection
code; where a collector ran a backend the engine would not choose by default (SGLang's
FlashAttention backend on an A100), the profile takes the engine's default and the rows
keep their recorded kernel. Each choice names its source.

Where a measurement row records the kernel the engine dispatched (``kernel`` column),
:func:`attention_kernel_for_label` / :func:`gemm_kernel_for_label` map that label; for a
whole-model prediction :func:`attention_kernel` / :func:`gemm_kernel` choose it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel._errors import PerfmodelError

if TYPE_CHECKING:
    from perfmodel._xp import Ops

__all__ = [
    "BEFORE_TURING_ARCHS",
    "ENGINES",
    "FA_MAX_HEAD_DIM",
    "NVIDIA_ARCHS",
    "PRE_AMPERE_ARCHS",
    "REQUEST_OVERHEAD_S",
    "STEP_OVERHEAD_PER_SEQ_S",
    "STEP_OVERHEAD_S",
    "TRTLLM_MIN_KEYS_PER_BLOCK",
    "TRTLLM_XQA_MIN_BLOCK_FACTOR",
    "VLLM_HOPPER_FLASHINFER_ROWS",
    "AttentionChoice",
    "GemmChoice",
    "GemmDispatch",
    "attention_kernel",
    "attention_kernel_for_label",
    "default_quant",
    "engine_refusal",
    "engine_runs_on",
    "fused_quantize",
    "gemm_dispatch",
    "gemm_kernel",
    "gemm_kernel_for_label",
    "gemm_kernel_for_rows",
    "gemm_rows_bound",
    "normalize_engine",
    "step_overhead",
    "trtllm_history_blocks",
    "trtllm_xqa_pays",
]

#: Engines with a profile. ``none`` is engine-neutral: the architecture's native kernels,
#: one kernel per op, no pre-processing counted.
ENGINES: tuple[str, ...] = ("none", "trtllm", "vllm", "sglang")
_ALIASES = {"tensorrt-llm": "trtllm", "trt-llm": "trtllm", "tensorrt_llm": "trtllm",
            "": "none", "neutral": "none"}


#: Host time per engine step (scheduler, input preparation, sampling, output processing:
#: the time between one step's kernels and the next that the GPU sits idle), per step, per
#: running sequence, and per request (HTTP frontend, tokenisation). fitted:
#: benchmarks/serving (``scripts/serving_accuracy.py --fit --write`` chooses them by least
#: squares over the published serving runs; the README's Serving section gives the
#: held-out error). One table for every engine: the published runs do not separate them.
STEP_OVERHEAD_S = 0.002
STEP_OVERHEAD_PER_SEQ_S = 0
REQUEST_OVERHEAD_S = 0
#: Where the figures above come from (shown in assumptions).
STEP_OVERHEAD_SOURCE = "fitted: benchmarks/serving (scripts/serving_accuracy.py --fit)"


def step_overhead(engine: str, sequences: Any = 0.0) -> Any:
    """Host time of one engine step running ``sequences`` sequences (a number or an array),
    seconds:
    ``STEP_OVERHEAD_S + STEP_OVERHEAD_PER_SEQ_S · sequences``; 0 for ``none``
    (engine-neutral: kernels back to back)."""
    if normalize_engine(engine) == "none":
        return 0.0
    return STEP_OVERHEAD_S + STEP_OVERHEAD_PER_SEQ_S * sequences


def normalize_engine(name: str) -> str:
    """Canonical engine name (``trtllm``, ``vllm``, ``sglang`` or ``none``)."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ENGINES:
        raise PerfmodelError("engine", f"unknown engine {name!r}",
                             f"use one of {', '.join(ENGINES)}")
    return key


@dataclass(frozen=True)
class AttentionChoice:
    """The attention kernel of one engine call and what else the call runs.

    ``impl``: kernel family (:data:`perfmodel.ops.attention.IMPLS`); ``prologue``: the call
    writes the new keys/values into the paged KV cache in a kernel of its own (and, for
    TensorRT-LLM, applies RoPE to Q and K in that same kernel: ``rope``).
    """

    impl: str
    kv_write: bool = True
    rope: bool = False
    source: str = ""
    num_splits: int | str = "auto"
    """Split-KV as the engine calls the kernel: vLLM calls FlashAttention-2 through its
    varlen entry point, which splits the keys only for GQA decode (``gqa``)."""
    fp8_compute: bool = False
    """With an fp8 KV cache the call computes in fp8 (the query is quantized first), so the
    op's compute dtype is fp8, not the activations' dtype."""
    tensor_core_min_group: float = 0.0
    """FlashInfer decode: the fewest query heads per KV head for which the engine asks for
    the tensor-core kernel (:attr:`perfmodel.ops.attention.Attention.tensor_core_min_group`)."""

    def compute_dtype(self, dtype: str, peaks: Iterable[str]) -> str:
        """The dtype the call computes in, on a GPU with ``peaks``: fp8 where the kernel
        computes in fp8 (:attr:`fp8_compute`) and the GPU has an fp8 peak, else ``dtype``
        (the activations')."""
        return "fp8" if self.fp8_compute and "fp8" in peaks else dtype

    def op_fields(self, dtype: str, peaks: Iterable[str], *, kv_write: bool = False,
                  rope: bool = False, num_splits: Any = "auto") -> dict[str, Any]:
        """The :class:`~perfmodel.ops.attention.Attention` fields of this call for an op of
        ``dtype`` activations on a GPU with ``peaks``: the kernel family, the KV write and
        RoPE (this call's, or the op's own where it asks for them), the split-KV rule where
        the op leaves it ``auto``, the CUDA-core threshold and the compute dtype
        (:meth:`compute_dtype`)."""
        return {"impl": self.impl, "kv_write": kv_write or self.kv_write,
                "rope": rope or self.rope,
                "num_splits": self.num_splits if num_splits == "auto" else num_splits,
                "tensor_core_min_group": self.tensor_core_min_group,
                "dtype": self.compute_dtype(dtype, peaks)}


@dataclass(frozen=True)
class GemmChoice:
    """The GEMM kernel family of one engine call and whether the call quantizes its bf16
    activations first (dynamic or static scales: one kernel)."""

    impl: str
    quantize_input: bool
    source: str = ""


_AIC = "NVIDIA AIConfigurator collectors (kernel_source per GPU, its README table)"
#: Architectures of NVIDIA GPUs (the kernels chosen below are NVIDIA builds).
NVIDIA_ARCHS: tuple[str, ...] = ("pascal", "volta", "turing", "ampere", "ada", "hopper",
                                 "blackwell", "blackwell-consumer")
#: NVIDIA architectures before Ampere (SM80): no FlashAttention-2/3 build; the engines
#: that run there (vLLM, SGLang on Turing) take Triton.
PRE_AMPERE_ARCHS: frozenset[str] = frozenset({"pascal", "volta", "turing"})
#: NVIDIA architectures below compute capability 7.5 (Pascal, Volta): no vLLM, SGLang or
#: FlashInfer build.
BEFORE_TURING_ARCHS: frozenset[str] = frozenset({"pascal", "volta"})
#: Where TensorRT-LLM's hardware floor comes from: its supported-hardware page lists
#: Blackwell, Hopper, Ada Lovelace and Ampere GPUs, and its kernels (XQA, trtllm-gen, the
#: fmha_v2 flash kernels it ships) are built for SM80 and later.
_TRTLLM_HARDWARE = "its supported-hardware page, nvidia.github.io/TensorRT-LLM/" \
                   "supported-hardware.html: Blackwell, Hopper, Ada Lovelace, Ampere"
_NOT_NVIDIA = "ROCm / XPU build: the engine's kernels there (AITER, Composable Kernel, " \
              "Triton) are not modelled, so the call runs the architecture's native " \
              "kernels with the engine's host time"


def engine_runs_on(engine: str, arch: str) -> bool:
    """Whether ``engine`` runs on a GPU of architecture ``arch``: every engine (and
    ``none``) except where it has no build (TensorRT-LLM from Ampere on and on NVIDIA GPUs
    only; vLLM and SGLang from Turing on, vLLM's ROCm build from MI200 on, SGLang's on
    MI300X/MI325X/MI355X only: :data:`_ENGINE_FLOORS`); where this is False, the engine's
    kernel choices raise :func:`engine_refusal`'s error."""
    return engine_refusal(engine, arch) is None


def engine_refusal(engine: str, arch: str) -> PerfmodelError | None:
    """The error asking for ``engine`` on architecture ``arch`` raises (None where it
    runs): where the engine has no build (:data:`_ENGINE_FLOORS`; TensorRT-LLM off NVIDIA)
    it says so, with its source and the engines that do run there."""
    eng = normalize_engine(engine)
    why = _not_built(eng, arch)
    if why is None:
        return None
    runs = [e for e in ENGINES[1:] if _not_built(e, arch) is None]
    fix = f"use --engine {' or '.join(runs)}, or none" if runs else \
        "use --engine none (PyTorch's kernels: the architecture's native ones)"
    return PerfmodelError("engine", f"{why}, and this GPU's architecture is {arch}", fix)


def _not_built(engine: str, arch: str) -> str | None:
    """Why ``engine`` does not run on ``arch`` (its floor and source), or None."""
    for eng, archs, what, source in _ENGINE_FLOORS:
        if eng == engine and arch in archs:
            return f"{what} ({source})"
    if engine == "trtllm" and arch and arch not in NVIDIA_ARCHS:
        return "TensorRT-LLM runs on NVIDIA GPUs only"
    return None


def _nvidia(engine: str, arch: str) -> bool:
    """Whether ``arch`` is an NVIDIA architecture (an empty arch: not known, taken as
    one); an engine that does not run on ``arch`` (:func:`engine_refusal`) raises."""
    refusal = engine_refusal(engine, arch)
    if refusal is not None:
        raise refusal
    return not arch or arch in NVIDIA_ARCHS


#: flash_attn_varlen_func (the entry point vLLM's FA2 backend calls) splits the
#: keys of a decode step only when it swaps the G query heads of a KV group into the rows
#: (GQA); with one query head per KV head it runs one CTA per (sequence, head).
_VARLEN_SPLITS = "gqa"


# --------------------------------------------------------------------------- attention
def attention_kernel(engine: str, arch: str, phase: str, head_dim: float = 128.0,
                     kv_dtype: str = "bf16", group: float = 0.0,
                     sinks: bool = False, xqa_pays: bool = True) -> AttentionChoice:
    """The attention kernel ``engine`` runs on ``arch`` for ``phase`` (prefill/decode).

    TRT-LLM (Ampere and later only: an error before; vLLM and SGLang from Turing on,
    :data:`_ENGINE_FLOORS`): fmha_v2 context kernels and XQA
    decode before Blackwell (its masked-MHA kernel when ``group``, the query heads per KV
    head, is 1, or where XQA would not pay, ``xqa_pays`` False: :func:`trtllm_xqa_pays`,
    unless the cache is fp8), trtllm-gen on Blackwell; decode with more than 32 query heads
    per KV head runs masked MHA everywhere;
    vLLM: FlashAttention-2 on Ampere, Ada and SM120 (Triton on Turing), FA3 on Hopper
    (FA4 for head dim 512), FlashInfer's trtllm-gen kernels on Blackwell, FlashInfer with an
    fp8 cache where it would run FlashAttention-2;
    SGLang: FA3 on Hopper (Triton for head dim 512), trtllm-gen (``trtllm_mha``) on
    Blackwell, FlashInfer on Ampere and Ada (its default off Hopper) and on the RTX
    Blackwell GPUs (SM120, ``blackwell-consumer``: no trtllm-gen cubins, no FA3 build),
    Triton on Turing; for a model with attention sinks (``sinks``: gpt-oss) vLLM and SGLang
    run Triton wherever they would run FlashAttention-2 or FlashInfer's FA2 templates
    (:data:`_SINKS_TRITON`). Over an fp8 KV cache some of these compute in fp8
    (``fp8_compute``, see :func:`_fp8_compute`).
    """
    eng = normalize_engine(engine)
    decode = phase == "decode"
    if eng == "none":
        return AttentionChoice("flash", kv_write=False, source="engine-neutral default")
    if not _nvidia(eng, arch):
        return AttentionChoice("flash", source=_NOT_NVIDIA)
    choice = _attention_kernel(eng, arch, decode, head_dim, kv_dtype, group, xqa_pays)
    if sinks and eng in _SINKS_TRITON and choice.impl in ("flash2", "flashinfer"):
        choice = AttentionChoice("triton", source=_SINKS_TRITON[eng])
    if kv_dtype == "fp8" and _fp8_compute(eng, arch, decode, choice.impl):
        return dataclasses.replace(choice, fp8_compute=True)
    return choice


def _fp8_compute(engine: str, arch: str, decode: bool, impl: str) -> bool:
    """Whether ``engine``'s ``impl`` call computes in fp8 over an fp8 KV cache. Prefill
    (AIConfigurator's README and its rows' ``attn=`` labels): TensorRT-LLM's context
    FMHA on Hopper and Blackwell (0.71x the bf16 time on H100), SGLang's FA3 and
    trtllm-gen kernels, vLLM's trtllm-gen kernels on Blackwell (the query is quantized to
    fp8); vLLM's FA3 and the FlashAttention-2-class kernels compute in bf16. Decode: the
    same rows carry the cache dtype as the compute dtype and the decode constants were
    fitted that way, so a decode call over an fp8 cache is one (its time is the cache
    read; a bf16 kernel's per-element conversion cost was never fitted for it)."""
    if decode:
        return True
    if arch not in ("hopper", "blackwell"):
        return False
    if engine == "vllm":
        return impl == "trtllm-gen"
    return engine in ("trtllm", "sglang") and impl in ("fmha-v2", "flash3", "trtllm-gen")


def _attention_kernel(eng: str, arch: str, decode: bool, head_dim: float, kv_dtype: str,
                      group: float, xqa_pays: bool = True) -> AttentionChoice:
    """:func:`attention_kernel` of a named engine, before the compute dtype."""
    blackwell = arch in ("blackwell",)
    if eng == "trtllm":
        if decode and group > _TRTLLM_MAX_GROUP:
            return AttentionChoice("mmha", source=_AIC + "; more than 32 query heads per KV "
                                   "head: the masked-MHA fallback, on every architecture")
        if blackwell:
            return AttentionChoice("trtllm-gen", rope=not decode, source=_AIC)
        if decode and group == 1.0:  # one query head per KV head: the masked-MHA kernel
            return AttentionChoice("mmha", source=_AIC + "; XQA serves grouped heads only")
        if decode and not xqa_pays and kv_dtype != "fp8":
            return AttentionChoice("mmha", source=_XQA_GAIN)
        return AttentionChoice("xqa" if decode else "fmha-v2", rope=not decode, source=_AIC)
    if eng == "vllm":
        if blackwell:
            return AttentionChoice("trtllm-gen", source=_AIC)
        if arch == "hopper":
            return AttentionChoice("flash4" if head_dim > FA_MAX_HEAD_DIM else "flash3",
                                   source=_AIC)
        if arch in PRE_AMPERE_ARCHS:
            return AttentionChoice("triton", source=_VLLM_PRE_AMPERE)
        if kv_dtype == "fp8":
            # FA2 takes no fp8 cache (AIConfigurator measured Ada's choice)
            return AttentionChoice("flashinfer", source=_AIC if arch == "ada" else _VLLM_FP8_KV)
        if head_dim > FA_MAX_HEAD_DIM:  # FA2 has no kernel for it: FlashInfer is next
            return AttentionChoice("flashinfer", source=_VLLM_WIDE_HEADS)
        return AttentionChoice("flash2", source=_AIC, num_splits=_VARLEN_SPLITS)
    # sglang
    if blackwell:
        return AttentionChoice("trtllm-gen", source=_AIC)
    if arch == "hopper":
        return AttentionChoice("triton" if head_dim > FA_MAX_HEAD_DIM else "flash3",
                               source=_AIC)
    if arch == "ada":
        return AttentionChoice("flashinfer", source=_AIC,
                               tensor_core_min_group=_SGLANG_TENSOR_CORE_GROUP)
    if arch == "blackwell-consumer":
        return AttentionChoice("flashinfer", source=_SM120_ATTENTION,
                               tensor_core_min_group=_SGLANG_TENSOR_CORE_GROUP)
    if arch in PRE_AMPERE_ARCHS:
        return AttentionChoice("triton", source=_SGLANG_PRE_AMPERE)
    # Ampere: SGLang's own default, FlashInfer (:data:`_SGLANG_AMPERE`); AIConfigurator's
    # A100 rows ran its FlashAttention backend, which its collector chooses below SM100,
    # and are predicted with that recorded kernel (attention_kernel_for_label)
    return AttentionChoice("flashinfer", source=_SGLANG_AMPERE,
                           tensor_core_min_group=_SGLANG_TENSOR_CORE_GROUP)


#: SGLang's attention backend on Ampere: its default for MHA models is FA3 on Hopper,
#: trtllm_mha on SM100 (current versions) and otherwise FlashInfer where it is installed
#: (Triton if not): sgl-project/sglang ``model_runner`` / ``server_args``
#: (``is_hopper_with_cuda_12_3() ... "fa3"``, ``is_sm100_supported() ... "trtllm_mha"``, else
#: ``"flashinfer" if is_flashinfer_available() else "triton"``) and its attention-backend
#: page ("FlashInfer (Default for Non-Hopper Machines, e.g., A100, A40)"). AIConfigurator's
#: A100 rows are its FlashAttention backend because its collector builds that backend on
#: every GPU below SM100 (ai-dynamo/aiconfigurator collector/sglang/collect_attn.py), not
#: because SGLang would: those rows keep their recorded kernel (``flash_attention`` →
#: FA3's SM8x build, :func:`attention_kernel_for_label`).
_SGLANG_AMPERE = "SGLang's default attention backend off Hopper and Blackwell: FlashInfer " \
                 "(sgl-project/sglang model_runner; docs: 'Default for Non-Hopper Machines, " \
                 "e.g., A100, A40')"

#: The backend of a model with attention sinks (gpt-oss) where an engine would run
#: FlashAttention-2 or FlashInfer's FA2 templates: Triton, in both engines. SGLang's
#: default-backend rule picks FlashInfer only for models without sinks
#: (``is_flashinfer_available() and not model_config.has_attention_sinks``, else
#: ``"triton"``), and its gpt-oss adjustment sets trtllm_mha on SM100, FA3 on SM90 and
#: Triton elsewhere (sgl-project/sglang ``server_args``, ``_handle_gpt_oss_family``).
#: vLLM's FlashAttention takes sinks only in its Hopper FA3 build ("S aux only supported on
#: Hopper") and its gpt-oss recipe says "GPT-OSS works on Ampere devices by default, using
#: the TRITON_ATTN attention backend" (vllm-project/recipes OpenAI/GPT-OSS.md).
_SINKS_TRITON: dict[str, str] = {
    "sglang": "SGLang, a model with attention sinks off Hopper and Blackwell: Triton "
              "(sgl-project/sglang server_args: FlashInfer only without sinks; gpt-oss: "
              "trtllm_mha on SM100, fa3 on SM90, else triton)",
    "vllm": "vLLM, a model with attention sinks where its flash backend is FA2: Triton "
            "(vllm-project/recipes GPT-OSS: 'works on Ampere devices by default, using the "
            "TRITON_ATTN attention backend'; FA takes sinks on Hopper only)",
}

#: Why SGLang runs FlashInfer on SM120: trtllm-gen's kernels need SM100's tcgen05 (only
#: SM100/SM103 cubins exist) and sgl-kernel's FlashAttention-3 is built for SM80-SM90, so
#: SGLang routes SM120 to its FlashInfer backend (sgl-project/sglang PR 12325, "trtllm
#: backend don't support sm120, we need to use flashinfer backend instead"; PR 18758).
_SM120_ATTENTION = "SGLang on SM120: FlashInfer (sgl-project/sglang PRs 12325, 18758: " \
                   "no trtllm-gen or FA3 kernels for SM120)"

#: Why vLLM runs FlashInfer over an fp8 KV cache wherever its FlashAttention backend is
#: FlashAttention-2 (Ampere, Ada, SM120): that backend takes an fp8 cache only with FA3
#: (vllm-project/vllm issue 12543: "Cannot use FlashAttention-2 backend for FP8 KV cache.
#: Please use FlashInfer backend with FP8 KV Cache"), and FlashInfer is next in its
#: order (PR 7798: "Use FlashInfer backend for FP8 KV Cache when available");
#: AIConfigurator's L40S rows show it (FA2 over a bf16 cache, FlashInfer over fp8).
_VLLM_FP8_KV = "vLLM over an fp8 KV cache where its FlashAttention backend is FA2: " \
               "FlashInfer (FA2 takes no fp8 cache, vllm-project/vllm issue 12543; " \
               "AIConfigurator's L40S rows)"
#: vLLM's choice there: its Triton attention backend (vllm-project/vllm PR 14071, V1: "Cannot
#: use Flash Attention backend for Turing GPUs. Using Triton backend"; PR 45375 raised
#: FlashInfer's minimum to SM80, so that "SM75 auto-selects a supported attention backend
#: (e.g. TRITON_ATTN)").
_VLLM_PRE_AMPERE = "vLLM on Turing: its Triton attention backend (vllm-project/vllm " \
                   "PRs 14071 and 45375: no FlashAttention or FlashInfer below SM80)"
#: SGLang's choice there: its Triton backend ("sm75 -> Triton" in SGLang's default-backend
#: table, sgl-project/sglang issue 5064; sgl-kernel's FA3 needs SM80).
_SGLANG_PRE_AMPERE = "SGLang on Turing: its Triton attention backend " \
                     "(sgl-project/sglang issue 5064: sm75 -> Triton)"

#: Widest head FlashAttention-2 and -3 have kernels for (FA2's README: "All head dimensions
#: up to 256"; FA3's instantiations stop at 256 too). Wider heads (Gemma-4's 512) go to the
#: engine's next backend: FA4 in vLLM and Triton in SGLang on Hopper (AIConfigurator's
#: H100 rows), FlashInfer in vLLM where its flash backend is FA2 (next in its backend
#: order; FlashInfer has 512-wide kernels: AIConfigurator's L40S SGLang rows); SGLang off
#: Hopper runs FlashInfer at every head dim; the engine-neutral ``flash`` takes PyTorch's
#: memory-efficient kernel for them (perfmodel.timing.attention.resolve_impl).
FA_MAX_HEAD_DIM = 256.0
_VLLM_WIDE_HEADS = "vLLM, head dim over 256 where its flash backend is FA2: FlashInfer " \
                   "(FA2 has no kernel for it)"

#: Where each engine does not run: (engine, architectures, what the error says, its
#: source). TensorRT-LLM: Ampere and later (and NVIDIA only, :func:`_not_built`). vLLM:
#: "compute capability 7.5 or higher" on its GPU installation page from v0.21 (7.0
#: before; AIConfigurator's rows are v0.24), and its ROCm build lists MI200s (gfx90a),
#: MI300 (gfx942) and MI350 (gfx950), not MI100 (gfx908). SGLang: its model runner raises
#: "SGLang only supports sm75 and above" below SM75 (``maybe_downgrade_dtype_for_legacy_gpu``;
#: FlashInfer, its default, needs SM75 too), and sgl-kernel's ROCm build stops on any
#: architecture but gfx942 and gfx950 (sgl-kernel/setup_rocm.py: "Expected 'gfx942' or
#: 'gfx950'"), i.e. MI300X/MI325X and MI355X.
_ENGINE_FLOORS: tuple[tuple[str, frozenset[str], str, str], ...] = (
    ("trtllm", PRE_AMPERE_ARCHS, "TensorRT-LLM runs on NVIDIA GPUs from Ampere on",
     _TRTLLM_HARDWARE),
    ("vllm", BEFORE_TURING_ARCHS, "vLLM runs on NVIDIA GPUs from Turing (compute capability "
     "7.5) on", "its GPU installation page from v0.21: 'compute capability 7.5 or higher'"),
    ("vllm", frozenset({"cdna1"}), "vLLM's ROCm build runs on MI200 (gfx90a), MI300 "
     "(gfx942) and MI350 (gfx950) Instinct GPUs, not MI100 (gfx908)",
     "its GPU installation page"),
    ("sglang", BEFORE_TURING_ARCHS, "SGLang runs on NVIDIA GPUs from Turing (SM75) on",
     "its model runner: 'SGLang only supports sm75 and above'"),
    ("sglang", frozenset({"cdna1", "cdna2"}), "SGLang's ROCm build runs on gfx942 "
     "(MI300X, MI325X) and gfx950 (MI355X) only", "sgl-kernel/setup_rocm.py: "
     "'Expected gfx942 or gfx950'"),
)

#: Most query heads per KV head TensorRT-LLM's generation kernels (XQA before Blackwell,
#: trtllm-gen on it) take; larger groups run its masked-MHA kernel. Observed in
#: AIConfigurator's rows (TRT-LLM 1.0-1.3) on all four GPUs: beyond 32 the decode time
#: grows with query heads × sequences at 0.1-100 GB/s (B200: 2.07 ms for 2048 sequences ×
#: 96 query heads over 2 keys, against 0.17 ms with 4 KV heads, 24 per group).
_TRTLLM_MAX_GROUP = 32.0

#: TensorRT-LLM's XQA constants (decoderXQAConstants.h): keys of history per multi-block
#: block at least (``kMinHistoryTokensPerBlock``), and how many XQA blocks per SM a decode
#: call needs before XQA is expected to pay (``kEnableMinBlockFactor``).
TRTLLM_MIN_KEYS_PER_BLOCK = 128.0
TRTLLM_XQA_MIN_BLOCK_FACTOR = 4.0
_XQA_GAIN = "TensorRT-LLM's XQA dispatch (DecoderXQARunner::mayHavePerfGain, shouldUse): " \
    "masked MHA where KV heads x sequences x max(1, keys // 128) x 4 < SMs, over a 16-bit " \
    "cache (an fp8 cache always takes XQA)"


def trtllm_history_blocks(seq_kv: Any, ops: Ops) -> Any:
    """Multi-block blocks TensorRT-LLM's XQA counts for ``seq_kv`` keys of history before
    any cap, n₀ = max(⌊S_kv/128⌋, 1) (``kMinHistoryTokensPerBlock``): what its dispatch
    (:func:`trtllm_xqa_pays`) and its multi-block count
    (:func:`perfmodel.timing.attention.trtllm_multi_block`) both start from."""
    return ops.maximum(ops.floor(seq_kv / TRTLLM_MIN_KEYS_PER_BLOCK), 1.0)


def trtllm_xqa_pays(batch: Any, kv_heads: Any, seq_kv: Any, units: int) -> Any:
    """Whether TensorRT-LLM's XQA dispatch expects a gain for a decode call of ``batch``
    sequences of ``seq_kv`` keys over ``kv_heads`` KV heads on a GPU of ``units`` SMs
    (``DecoderXQARunner::mayHavePerfGain`` with multi-block mode on, its default):
    H_kv·B·max(1, ⌊S_kv/128⌋)·4 ≥ SMs. Arrays in, a bool array out; where it fails,
    :func:`attention_kernel` takes ``xqa_pays=False`` (masked MHA over a 16-bit cache)."""
    # `import perfmodel` does not load numpy: only when used
    import numpy as np

    from perfmodel._xp import VECTOR

    blocks = trtllm_history_blocks(np.asarray(seq_kv, dtype=np.float64), VECTOR)
    work = np.asarray(kv_heads, dtype=np.float64) * np.asarray(batch, dtype=np.float64) * blocks
    return work * TRTLLM_XQA_MIN_BLOCK_FACTOR >= float(units)

#: SGLang's FlashInfer backend asks for the tensor-core decode kernel over a 16-bit cache
#: only when a KV head has at least 4 query heads (flashinfer_backend.py
#: ``should_use_tensor_core``; always over an fp8 cache); vLLM's always uses it.
_SGLANG_TENSOR_CORE_GROUP = 4.0


#: The collectors' kernel labels (``ks=``) -> kernel family. TRT-LLM's own label
#: (``torch_flow``) depends on the architecture and phase: see :func:`attention_kernel`.
_ATTN_LABELS = {
    "flash_attention": "flash3", "vllm_flash_attn": "flash2", "vllm_flash_attn_fa2": "flash2",
    "fa3": "flash3", "vllm_flash_attn_fa3": "flash3", "vllm_flash_attn_fa4": "flash4",
    "triton": "triton", "flashinfer": "flashinfer", "vllm_flashinfer_fiprefill": "flashinfer",
    "vllm_flashinfer_fidecode": "flashinfer", "trtllm_mha": "trtllm-gen",
    "vllm_flashinfer_trtllmprefill": "trtllm-gen", "vllm_flashinfer_trtllmdecode": "trtllm-gen",
    "torch_flow_flashinfer": "trtllm-gen",
}


def attention_kernel_for_label(engine: str, label: str, arch: str, phase: str,
                               head_dim: float = 128.0, kv_dtype: str = "bf16",
                               group: float = 0.0, xqa_pays: bool = True) -> AttentionChoice:
    """The choice for a call whose dispatched kernel was recorded as ``label``; an empty
    or engine-generic label falls back to :func:`attention_kernel`."""
    base = attention_kernel(engine, arch, phase, head_dim, kv_dtype, group, xqa_pays=xqa_pays)
    impl = _ATTN_LABELS.get(label.strip().lower())
    if impl == "flashinfer" and arch == "blackwell":
        impl = "flashinfer-sm100"  # FlashInfer's Blackwell backends, not its FA2 templates
    if impl is None:
        return base
    splits = base.num_splits if impl == base.impl else (
        _VARLEN_SPLITS if impl == "flash2" and engine in ("vllm", "sglang") else "auto")
    tc_group = _SGLANG_TENSOR_CORE_GROUP if impl == "flashinfer" and \
        normalize_engine(engine) == "sglang" else 0.0
    return AttentionChoice(impl, kv_write=base.kv_write, rope=base.rope,
                           source=f"recorded kernel {label!r}", num_splits=splits,
                           tensor_core_min_group=tc_group)


# -------------------------------------------------------------------------------- GEMM
#: Rows below which vLLM's block-scaled fp8 linear layer on Hopper runs FlashInfer's
#: block-scale GEMM (its swapAB kernel) instead of DeepGEMM: vllm-project/vllm
#: ``FlashInferFp8DeepGEMMDynamicBlockScaledKernel`` ("Small batches (M < 32): FlashInfer's
#: swapAB trick ... Large batches (M >= 32): DeepGEMM", ``predicate``: ``A.shape[0] < 32``);
#: AIConfigurator's H100 vLLM rows: FlashInfer at m 1-17, DeepGEMM from m 32 (aligned
#: shapes). Its Blackwell rows run DeepGEMM at every m.
VLLM_HOPPER_FLASHINFER_ROWS = 32.0


def gemm_rows_bound(engine: str, arch: str, quant: str) -> float | None:
    """The rows (m) below which ``engine`` runs another GEMM kernel for ``quant`` on
    ``arch`` than :func:`gemm_kernel` names, or None where it picks one kernel for every m
    (vLLM's block-scaled fp8 on Hopper: :data:`VLLM_HOPPER_FLASHINFER_ROWS`)."""
    if normalize_engine(engine) == "vllm" and arch == "hopper" and quant == "block":
        return VLLM_HOPPER_FLASHINFER_ROWS
    return None


def gemm_kernel_for_rows(engine: str, arch: str, quant: str, rows: float) -> GemmChoice:
    """:func:`gemm_kernel` for a call of ``rows`` rows (m): the same, except below the
    bound where an engine picks another kernel by the rows (:func:`gemm_rows_bound`)."""
    base = gemm_kernel(engine, arch, quant)
    bound = gemm_rows_bound(engine, arch, quant)
    if bound is not None and rows < bound:
        return GemmChoice("flashinfer", base.quantize_input,
                          "vLLM FlashInferFp8DeepGEMMDynamicBlockScaledKernel: FlashInfer's "
                          "block-scale GEMM below 32 rows, DeepGEMM from 32")
    return base


def gemm_kernel(engine: str, arch: str, quant: str) -> GemmChoice:
    """The GEMM kernel family ``engine`` runs on ``arch`` for scheme ``quant``.

    bf16: the vendor library (cuBLAS) in every engine. fp8 per-tensor/per-channel:
    cuBLASLt in TRT-LLM, CUTLASS scaled-mm in vLLM and SGLang. fp8 block scales: DeepGEMM
    (vLLM, SGLang; TRT-LLM on Blackwell), CUTLASS in TRT-LLM on Hopper/Ada, Triton in vLLM
    on Ada. nvfp4 (Blackwell): CuTe-DSL kernels through FlashInfer in vLLM and SGLang,
    TRT-LLM's CUTLASS kernels. Quantized schemes quantize the bf16 activations in the call.
    On the RTX Blackwell GPUs (SM120, ``blackwell-consumer``) neither DeepGEMM nor the
    CuTe-DSL kernels run (both are built for SM90 / SM100's warpgroup and tensor-memory
    MMA): block-scaled fp8 and nvfp4 go to CUTLASS's SM120 kernels (:data:`_SM120_GEMM`).
    """
    eng = normalize_engine(engine)
    refusal = engine_refusal(eng, arch)
    if refusal is not None:  # the engine does not run here, whatever the GEMM's scheme
        raise refusal
    if quant == "none":
        return GemmChoice("auto", False, "vendor library (cuBLAS)")
    if eng == "none":
        return GemmChoice("auto", True, "engine-neutral default")
    if arch and arch not in NVIDIA_ARCHS:
        return GemmChoice("auto", True, _NOT_NVIDIA)
    if quant in ("per-tensor", "per-channel"):
        return GemmChoice("cublas" if eng == "trtllm" else "cutlass", True, _AIC)
    if arch == "blackwell-consumer":
        return GemmChoice("cutlass", True, _SM120_GEMM)
    if quant == "block":
        if eng == "trtllm":
            return GemmChoice("deepgemm" if arch == "blackwell" else "cutlass", True, _AIC)
        if arch == "ada":
            return GemmChoice("triton", True, _AIC)
        return GemmChoice("deepgemm", True, _AIC)
    return GemmChoice("cutlass" if eng == "trtllm" else "cutedsl", True, _AIC)


#: Where the SM120 choice comes from: DeepGEMM supports SM90 and SM100 only; vLLM selects
#: ``CutlassFp8BlockScaledMMKernel`` on SM120/SM121 (vllm-project/vllm PR 37970 tunes its
#: SM120 blockwise CUTLASS GEMM; issue 43367 shows it selected on a GB10), SGLang's
#: sgl-kernel has an SM120 CUTLASS blockwise fp8 GEMM (sgl-project/sglang PR 9969), and
#: CUTLASS ships SM120 nvfp4 GEMMs (its example 79, "blackwell_geforce_gemm").
_SM120_GEMM = "SM120 (RTX Blackwell): CUTLASS SM120 kernels; DeepGEMM and the CuTe-DSL " \
              "kernels are SM90/SM100-only"


#: One row of a GEMM dispatch table: (m ≤, n ≤, tile rows, tile columns); the first row
#: whose bounds hold for the call's (m, n) names the CTA tile the engine launches.
DispatchRow = tuple[float, float, float, float]
_INF = float("inf")


@dataclass(frozen=True)
class GemmDispatch:
    """A kernel whose CTA tile the engine picks from a fixed table by the call's shape,
    not by searching for the fastest: ``rows`` in order, first match wins."""

    rows: tuple[DispatchRow, ...]
    source: str

    def __post_init__(self) -> None:
        # the tables are written with whole numbers; every reader takes floats
        object.__setattr__(self, "rows", tuple(tuple(float(x) for x in row)
                                               for row in self.rows))

    def tile(self, m: float, n: float) -> tuple[float, float]:
        """(tile rows, tile columns) the table names for one call of ``m`` rows and ``n``
        columns."""
        for m_max, n_max, tm, tn in self.rows:
            if m <= m_max and n <= n_max:
                return tm, tn
        raise PerfmodelError("dispatch", f"no row for m={m}, n={n}",
                             "end a dispatch table with an unbounded row")


#: vLLM's SM89 fp8 CUTLASS scaled-mm (per-tensor and per-token/per-channel scales, one
#: kernel: ``cutlass_gemm_sm89_fp8_dispatch``): by M bucket (max(32, next_pow_2(m)), so
#: calls of at most 32 rows take the M32 configuration) and next_pow_2(n); written here
#: as bounds on m and n, which select the same rows. No split-K (CUTLASS 2.x GemmUniversal
#: in kGemm mode).
_VLLM_SM89_FP8 = GemmDispatch((
    (32, 8192, 32, 64), (32, 16384, 32, 128), (32, _INF, 32, 64),
    (64, 8192, 64, 64), (64, 16384, 64, 128), (64, _INF, 64, 64),
    (128, 8192, 64, 128), (128, 16384, 128, 128), (128, _INF, 128, 64),
    (256, 4096, 64, 128), (256, _INF, 128, 128),
    (_INF, 4096, 128, 128), (_INF, 8192, 256, 128), (_INF, _INF, 128, 128),
), "vllm-project/vllm csrc/quantization/cutlass_w8a8/scaled_mm_c2x_sm89_fp8_dispatch.cuh "
   "(commit 51cccd6)")
#: SGLang's sgl-kernel fp8_scaled_mm on SM89 (``sm89_fp8_dispatch_shape``): by m and n.
_SGLANG_SM89_FP8 = GemmDispatch((
    (1, 8192, 16, 64), (1, _INF, 32, 64),
    (16, 8192, 16, 64), (16, 16384, 32, 64), (16, _INF, 16, 64),
    (64, 16384, 32, 64), (64, _INF, 16, 64),
    (128, 16384, 64, 64), (128, _INF, 32, 64),
    (256, 8192, 128, 64), (256, 16384, 64, 128), (256, _INF, 128, 64),
    (_INF, _INF, 128, 128),
), "sgl-project/sglang sgl-kernel/csrc/gemm/fp8_gemm_kernel.cu (commit 04ec0bc)")
#: TensorRT-LLM's SM89 block-scaled fp8 GEMM (``gemm_dispatch_sm89``, its hand-written
#: ``ada_blockwise_gemm`` kernel: mma.sync e4m3 with the per-128-k scales applied in
#: registers) has one tile for every shape: 32×128 (×128 of k, 3 stages).
_TRTLLM_SM89_FP8_BLOCK = GemmDispatch(
    ((_INF, _INF, 32, 128),),
    "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp8_blockscale_gemm/"
    "fp8_blockscale_gemm_kernel.cuh gemm_dispatch_sm89 (commit eef8cda)")
_DISPATCH: dict[tuple[str, str, str, str], GemmDispatch] = {
    ("vllm", "ada", "cutlass", "per-tensor"): _VLLM_SM89_FP8,
    ("vllm", "ada", "cutlass", "per-channel"): _VLLM_SM89_FP8,
    ("sglang", "ada", "cutlass", "per-tensor"): _SGLANG_SM89_FP8,
    ("sglang", "ada", "cutlass", "per-channel"): _SGLANG_SM89_FP8,
    ("trtllm", "ada", "cutlass", "block"): _TRTLLM_SM89_FP8_BLOCK,
}


def gemm_dispatch(engine: str, arch: str, impl: str, quant: str) -> GemmDispatch | None:
    """The fixed tile table ``engine``'s GEMM kernel ``impl`` uses on ``arch`` for scheme
    ``quant``, or None where the kernel's tile is the fastest of the architecture's menu
    (the vendor library's heuristics, kernels that size their blocks to the call).

    Encoded: vLLM's and SGLang's SM89 (Ada) fp8 CUTLASS scaled-mm kernels (per-tensor and
    per-channel scales) and TensorRT-LLM's SM89 block-scaled fp8 GEMM (one tile). The
    Hopper and Blackwell builds of the scaled-mm kernels also pick tiles from tables (with
    cluster shapes), which are not encoded: there the menu's fastest tile stands in.
    """
    # canonical names only, as the engine-cost lookups take them: a name no engine has
    # (a RunContext's free-form field) means no engine here too
    return _DISPATCH.get((engine, arch, impl, quant))


def default_quant(engine: str, dtype: str) -> str:
    """The quantization scheme of a GEMM with ``dtype`` inputs when nobody names one: fp8
    with per-channel weight scales (and per-token activation scales) in SGLang, its only
    fp8 scaled-mm path (sgl-kernel ``fp8_scaled_mm``; AIConfigurator's SGLang rows), with
    per-tensor scales in the other engines and engine-neutral; fp4 in ``nvfp4``; anything
    else ``none``."""
    dt = str(dtype).strip().lower()
    if dt == "fp8":
        return "per-channel" if normalize_engine(engine) == "sglang" else "per-tensor"
    return "nvfp4" if dt == "fp4" else "none"


#: Schemes whose activation quantization an engine fuses into the kernel that produces the
#: activations when it runs a whole model (so the GEMM call takes them already quantized,
#: static scales from the checkpoint). TensorRT-LLM's Llama-family decoder layers emit fp8
#: or nvfp4 activations from the RMSNorm (and the gated activation) ahead of the linear
#: layers that take them (cited: TensorRT-LLM tensorrt_llm/_torch/models/modeling_llama.py,
#: fused RMSNorm + quantize). vLLM and SGLang are kept quantizing in the call: their fusion
#: depends on compilation settings, and SGLang's per-token fp8 runs its own quantize kernel.
#: A single op (what AIConfigurator timed) always quantizes in the call.
_FUSED_QUANT: dict[str, frozenset[str]] = {"trtllm": frozenset({"per-tensor", "nvfp4"})}


def fused_quantize(engine: str, quant: str) -> bool:
    """Whether ``engine``, running a whole model, feeds ``quant``-scheme GEMMs activations
    already quantized by the kernel before (see ``_FUSED_QUANT``)."""
    return quant in _FUSED_QUANT.get(normalize_engine(engine), frozenset())


_GEMM_LABELS = {
    "deepgemm": "deepgemm", "sglang_deepgemm_gemm_nt_f8f8bf16": "deepgemm",
    "deepgemmfp8blockscaledmmkernel": "deepgemm",
    "cutlassfp8scaledmmlinearkernel": "cutlass", "sglang_sgl_kernel_fp8_scaled_mm": "cutlass",
    "cutlassfp8blockscaledmmkernel": "cutlass",
    # vLLM's FlashInfer block-scale wrapper calls FlashInfer's own groupwise GEMM through a
    # thinner host path than its CUTLASS wrapper (fastest eager calls on AIConfigurator's
    # H100 rows: ~58 µs vs ~169 µs), so it is a family of its own
    "flashinferfp8blockscaledmmkernel": "flashinfer",
    "tritonfp8blockscaledmmkernel": "triton",
    "flashinfercutedslnvfp4linearkernel": "cutedsl", "sglang_flashinfer_cutedsl_nvfp4": "cutedsl",
}


def gemm_kernel_for_label(engine: str, label: str, arch: str, quant: str) -> GemmChoice:
    """The choice for a GEMM call whose dispatched kernel was recorded as ``label``."""
    base = gemm_kernel(engine, arch, quant)
    impl = _GEMM_LABELS.get(label.strip().lower())
    if impl is None or quant == "none":
        return base
    return GemmChoice(impl, base.quantize_input, f"recorded kernel {label!r}")
