"""Kernel families: what distinguishes the kernels inference engines dispatch, written once.

A GEMM or attention op names its kernel family (``impl``). Each family's structural traits
(how it tiles, schedules CTAs, splits KV, handles GQA and fp8) are stated here with their
source; the few rate figures that no datasheet gives (how close a family gets to the
device's achievable rate) are model constants (:mod:`perfmodel.timing.constants`) with a
prior of 1 (the device's own achievable fraction) and, where public measurements exist, a
fitted value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from perfmodel._xp import VECTOR, Ops
from perfmodel.engines import ENGINES, NVIDIA_ARCHS
from perfmodel.ops.gemm import GEMM_IMPLS, QUANT_SCHEMES, Gemm
from perfmodel.timing.constants import (
    ARCH_FAMILIES,
    Constants,
    Param,
    arch_name,
    register,
    register_kin,
)

if TYPE_CHECKING:
    from perfmodel.timing.knobs import Knobs

__all__ = ["ATTENTION_CLASSES", "ATTENTION_FAMILIES", "CAUSAL_ORDERS", "GEMM_CTA_BANDWIDTH",
           "GEMM_UNSPLIT", "OVERLAPPED_SOFTMAX", "QUANTIZED_GEMM", "UNSPLIT_CTA_INFLIGHT",
           "AttentionFamily", "attention_class", "attention_family", "attn_constant",
           "attn_name", "cta_inflight_name", "decode_rows_scale", "gemm_cta_bandwidth",
           "gemm_efficiency", "gemm_efficiency_name", "gemm_splits_k", "tile_efficiency",
           "tile_time_scale"]


def gemm_efficiency_name(impl: str, quant: str) -> str:
    """Constant name of the rate of GEMM family ``impl`` with scheme ``quant``."""
    return f"gemm.{impl}.{quant}.efficiency"


#: Class-level constant every quantized GEMM family refines: what a family never measured
#: inherits from those that were.
QUANTIZED_GEMM = "gemm.quantized.efficiency"
register(Param(QUANTIZED_GEMM, 1.0, 0.2, 1.5, "× achievable rate",
               "rate of quantized (fp8/fp4) GEMM kernels relative to the device's achievable "
               "fraction of the dtype's dense peak. Prior: 1 (the spec's fraction).",
               "linear"))
register(*(
    Param(gemm_efficiency_name(impl, quant), 1.0, 0.2, 1.5, "× achievable rate",
          f"rate of {impl} GEMM kernels with {quant} inputs relative to the device's "
          "achievable fraction of the dtype's dense peak (efficiency.compute in the spec). "
          "Prior: 1 (the spec's fraction); quantized schemes: as gemm.quantized.",
          "linear", parent=None if quant == "none" else QUANTIZED_GEMM)
    for impl in GEMM_IMPLS for quant in QUANT_SCHEMES
))
#: The same quantized-GEMM source builds a different kernel per architecture (mma.sync
#: fp8 on Ada, warpgroup MMA on Hopper, tcgen05 on Blackwell): each scheme's rate is
#: refined per architecture; an architecture nobody measured takes its predecessor's
#: (:data:`perfmodel.timing.constants.ARCH_PREDECESSOR`) where that was measured, else the
#: family's (the mean of its fitted architectures).
register(*(
    Param(arch_name(gemm_efficiency_name(impl, quant), a), 1.0, 0.2, 1.5, "× achievable rate",
          f"{gemm_efficiency_name(impl, quant)} on {a} GPUs.", "linear",
          parent=gemm_efficiency_name(impl, quant))
    for impl in GEMM_IMPLS for quant in QUANT_SCHEMES if quant != "none"
    for a in ARCH_FAMILIES
))

#: ``auto`` is the vendor library (cuBLAS, hipBLASLt). Its per-tensor fp8 GEMM is measured
#: only as TensorRT-LLM calls it (``cublas``: cuBLASLt), so until measured itself (an
#: engine's fp8 call on an AMD GPU, a ``Gemm(quant="per-tensor")`` left at ``auto``) it takes
#: that rate, not the mean of the engines' own kernels (CUTLASS, DeepGEMM, CuTe-DSL): a
#: vendor library's quantized GEMM is nearest in design to the other vendor library's.
register_kin(gemm_efficiency_name("auto", "per-tensor").removesuffix("efficiency"),
             gemm_efficiency_name("cublas", "per-tensor").removesuffix("efficiency"))


#: GEMM kernel families that never split K: the engines' quantized-GEMM kernels run one
#: CTA per output tile (vLLM's and SGLang's CUTLASS scaled-mm dispatch picks tile shapes by
#: m, DeepGEMM sizes its blocks to fill the SMs, FlashInfer's groupwise and CuTe-DSL GEMMs
#: and vLLM's Triton block-fp8 kernel launch one program per output tile, TensorRT-LLM's
#: CUTLASS fp8-block and nvfp4 GEMMs likewise), so a call with few output tiles keeps few
#: SMs busy and streams its weights at their share of the bandwidth. Observed in
#: AIConfigurator's rows: at m ≤ 16 with ≤ 16 output tiles of 128 columns these kernels
#: pull 0.2-1.1 TB/s on B200 and 0.7-0.9 TB/s on H100 where cuBLAS (bf16, TRT-LLM's fp8
#: per-tensor) pulls 4.8-6.2 and 2.8 TB/s; on L40S TRT-LLM's fp8-block GEMM of one output
#: tile (m = 17, n = 128, k = 51,200) takes 160 µs, 41 GB/s. The vendor library (``auto``,
#: ``cublas``) splits K.
GEMM_UNSPLIT: frozenset[str] = frozenset({"cutlass", "deepgemm", "cutedsl", "triton",
                                          "flashinfer"})


def gemm_splits_k(impl: str) -> bool:
    """Whether GEMM family ``impl`` may split K over extra CTAs (``GEMM_UNSPLIT``)."""
    return impl not in GEMM_UNSPLIT


#: Per-CTA bandwidth of GEMM kernels (:mod:`perfmodel.timing.gemm`), refined per
#: architecture; fitted in the plain-GEMM stage of ``scripts/fit_constants.py``.
GEMM_CTA_BANDWIDTH = "gemm_cta_bandwidth"
register(
    Param(GEMM_CTA_BANDWIDTH, 1.5, 0.3, 20.0, "× fair share",
          "device-memory bandwidth one GEMM CTA pulls for its own tile (its A rows, B "
          "columns and output), as a multiple of the fair share BW/SMs: how many loads its "
          "pipeline keeps in flight. Every CTA moves its own tile's bytes, shared panels "
          "included (CTAs that start together wait on the same misses), so a kernel of few "
          "CTAs takes at least own bytes / (this·BW/SMs). Prior: 1.5."),
    *(Param(arch_name(GEMM_CTA_BANDWIDTH, a), 1.5, 0.3, 20.0, "× fair share",
            f"{GEMM_CTA_BANDWIDTH} on {a} GPUs (load pipelines differ by architecture: "
            "cp.async, TMA).", parent=GEMM_CTA_BANDWIDTH) for a in ARCH_FAMILIES),
)


#: In-flight share of an unsplit GEMM family's CTA (:data:`GEMM_UNSPLIT`), refined per
#: family and scheme and per architecture; fitted in the quantized-GEMM stage.
UNSPLIT_CTA_INFLIGHT = "gemm.unsplit.cta_inflight"


def cta_inflight_name(impl: str, quant: str) -> str:
    """Constant name of the in-flight share of unsplit GEMM family ``impl`` with ``quant``."""
    return f"gemm.{impl}.{quant}.cta_inflight"


register(
    Param(UNSPLIT_CTA_INFLIGHT, 0.5, 0.03, 3.0, "× shared memory per SM",
          "bytes one CTA of an unsplit GEMM kernel (GEMM_UNSPLIT: the engines' own kernels, "
          "one CTA per output tile) keeps in flight, as a share f of the SM's shared memory: "
          "by Little's law the CTA pulls f·smem_per_SM / memory latency for its own tile, a "
          "rate set by its pipeline on the SM, not by the device's bandwidth (in "
          "AIConfigurator's rows of at most 16 rows, 16 output tiles of 128 columns and k "
          "of 16,384 or more, a CTA of DeepGEMM, CUTLASS scaled-mm or SGLang's per-channel "
          "kernel streams 0.11-0.16 TB/s on both H100 and B200, whose bandwidths differ "
          "2.4x). Prior: 0.5 (a multi-stage pipeline keeps about half its stages loading: "
          "an assumption)."),
    *(Param(cta_inflight_name(impl, quant), 0.5, 0.03, 3.0, "× shared memory per SM",
            f"{UNSPLIT_CTA_INFLIGHT} of {impl} GEMM kernels with {quant} inputs.",
            parent=UNSPLIT_CTA_INFLIGHT)
      for impl in sorted(GEMM_UNSPLIT) for quant in QUANT_SCHEMES),
    *(Param(arch_name(cta_inflight_name(impl, quant), a), 0.5, 0.03, 3.0,
            "× shared memory per SM", f"{cta_inflight_name(impl, quant)} on {a} GPUs.",
            parent=cta_inflight_name(impl, quant))
      for impl in sorted(GEMM_UNSPLIT) for quant in QUANT_SCHEMES for a in ARCH_FAMILIES),
)


def gemm_cta_bandwidth(k: Knobs, consts: Constants, op: Gemm | None = None) -> float:
    """Per-CTA bandwidth multiple of a GEMM kernel with knobs ``k``: a calibrated value
    first, then the device family's own (``FamilyParams.gemm_cta_bandwidth``: the CPU's);
    for an unsplit family's ``op`` (:data:`GEMM_UNSPLIT`) its pipeline's rate
    f·smem_per_SM / memory latency as a multiple of the fair share BW/SMs,
    c = f·smem·SMs / (latency·BW), f the most specific of gemm.<impl>.<quant>.cta_inflight;
    else the model constant (most specific of gemm_cta_bandwidth.<arch>)."""
    if k.calibrated_cta_bandwidth is not None:
        return k.calibrated_cta_bandwidth
    if k.family.gemm_cta_bandwidth is not None:
        return k.family.gemm_cta_bandwidth
    if op is not None and op.impl in GEMM_UNSPLIT:
        f = consts[arch_name(cta_inflight_name(op.impl, op.quant), k.arch)]
        return f * k.smem_per_unit * k.units / (k.memory_latency_s * k.achievable_bandwidth)
    return consts[arch_name(GEMM_CTA_BANDWIDTH, k.arch)]


def gemm_efficiency(op: Gemm, consts: Constants, arch: str = "") -> float:
    """Rate multiplier of ``op``'s kernel family and scheme on ``arch`` (constant, prior
    1; quantized schemes refined per architecture)."""
    name = gemm_efficiency_name(op.impl, op.quant)
    return consts[name if op.quant == "none" else arch_name(name, arch)]


# ----------------------------------------------------------------------------- attention
#: Orders in which a family's causal prefill tiles start (:attr:`AttentionFamily.causal_order`).
CAUSAL_ORDERS: tuple[str, ...] = ("longest_first", "in_order")
TileRule = tuple[tuple[str, ...], float, float, float]
"""(architectures (empty: any), largest head dim, query rows, keys) of a tile choice."""


@dataclass(frozen=True)
class AttentionFamily:
    """Structural traits of a fused-attention kernel family.

    Attributes
    ----------
    name:
        Family name (an ``Attention.impl``).
    persistent:
        Warp-specialised kernels whose one CTA per SM saturates it (TMA producer warps,
        ping-pong MMA warpgroups): the SM count is the number of slots. Otherwise CTAs
        are resident 1–2 per SM as shared memory allows, and a single CTA reaches only its
        share of the SM.
    tiles:
        Tile choices, first match wins: (architectures, head dim ≤, query rows, keys). The
        default when none matches is 128×128, halved in rows when shared memory cannot hold
        Q and two K/V tiles.
    fp8_tiles:
        The kernel's own tile choices when it computes in fp8 (one-byte elements: more
        keys fit a tile's shared memory), tried before :attr:`tiles`; empty: the same as
        the 16-bit kernel's.
    pack_gqa:
        When the G query heads sharing a KV head are packed into one tile's rows:
        ``decode`` (one query token), ``always`` (prefill too: the rows of a tile are
        (query, head) pairs of one KV head), ``short`` (whenever S_q·G fits one tile),
        ``efficiency`` (FA3's rule: when packing fills the row tiles better, see
        :func:`perfmodel.timing.attention._pack_pays`), ``never``.
    split_kv:
        ``auto``: split the keys over extra CTAs when the tiles do not fill the device (a
        combine kernel merges the partial results); ``trtllm``: TensorRT-LLM's multi-block
        rule, whatever the fill (:func:`perfmodel.timing.attention.trtllm_multi_block`);
        ``mmha``: TensorRT-LLM's masked-MHA multi-block rule
        (:func:`perfmodel.timing.attention.trtllm_mmha_blocks`); ``none``.
    max_splits:
        Most splits of one (sequence, head) the kernel uses.
    max_group:
        Most query heads per KV head the kernel packs; a larger group falls back to one
        unsplit CTA per query head.
    fp8_unsplit:
        Architectures on which the kernel does not split the keys of an fp8 KV cache.
    cuda_core_decode:
        Whether the family also has a decode kernel that computes on the CUDA cores (no
        tensor cores), which a caller may choose for one-token queries over a 16-bit cache
        (:attr:`perfmodel.ops.attention.Attention.tensor_core_min_group`).
    sync_mma:
        Whether its matrix work issues the synchronous warp-level MMA (kernels written for
        Ampere): on Hopper and Blackwell it then runs at the architecture's
        ``sync_mma_fraction`` of the dense rate (:mod:`perfmodel.timing.family`).
    prefill_packs:
        Whether a prefill call packs heads by the rule above. False where the family's
        context (prefill) kernel is not its decode kernel and runs one tile per (sequence,
        query head, query tile) even for a one-token prompt (whose tiles then also take
        ``tile_s``, not ``decode_tile_s``).
    kin:
        Families of the nearest design, nearest first: while this family has no fitted
        constants (a kernel nobody measured), each of its constants is its first measured
        kin's (:data:`perfmodel.timing.constants.KIN`) rather than its class's mean.
    kin_excludes:
        Constants (``cta_bandwidth``, ``decode_tile_s``...) the kin do not stand in for,
        where the two designs differ: these follow the family's own parents (its class's
        value; a decode tile time its own prefill tile time).
    fp8_builds:
        The separately compiled fp8 kernels the family dispatches by head dim, first match
        wins: (architectures, head dim ≤, build). Each build has its own fp8 rate,
        ``fp8_efficiency.<arch>.<engine>.<build>``, which falls back to the engine's value
        until fitted; empty: one fp8 rate for every head dim.
    built_as:
        (architecture, family) pairs: on that architecture the kernels this name stands for
        are a different design, modelled as that family (TensorRT-LLM's ``fmha-v2`` on
        Hopper: ``fmha-v2-sm90``).
    split_slots:
        CTA slots per SM that the split-KV heuristic counts (FlashAttention-2 passes twice
        the SM count: "128 threads per block", two resident CTAs per SM).
    split_block:
        Keys per KV block the split heuristic counts, by head dim ≤: ((64, 256), (128, 128),
        (1e9, 64)) for FlashAttention-2's ``block_n``; empty: 256.
    min_rows:
        Query rows a CTA computes at least, whatever the rows it holds: the MMA granularity
        (16) unless the kernel's smallest query tile is larger (FlashAttention-2's split-KV
        kernel fixes 64 rows for every head dim, so a decode tile of a few packed query
        heads costs 64 rows of MMA work).
    whole_kv_tiles:
        Whether its decode (one-token) kernel loads whole KV tiles: each (sequence, KV
        head, split) moves k_pad = kv_t·⌈keys/kv_t⌉ keys of K and V, so a sequence shorter
        than a tile costs the whole tile's bytes (:func:`perfmodel.timing.attention._flash`
        adds the padded keys to the traffic). False: the keys the sequence has.
    causal_order:
        The order its causal prefill tiles start in, which sets when the call ends once
        there are more tiles than slots (the query tiles of a causal call differ in
        length: the last of a sequence visits every key, the first few):
        ``longest_first`` (a scheduler that starts the longest tiles first, over the heads:
        FlashAttention-3's and -4's causal schedulers; ends with the work spread evenly,
        or with the longest tile; the default) or ``in_order`` (tiles start in launch
        order, each sequence's query tiles from the shortest, on whichever slot frees
        first: the last to start is a long one, see
        :func:`perfmodel.timing.attention._flash`). FlashAttention-2 launches in that
        order too (grid (num_m_block, b, h), m_block = blockIdx.x:
        flash_fwd_launch_template.h @01afd16), but keeps the default: refitted with the
        in-order rule, its few-wave causal calls on AIConfigurator's A100 and L40S rows
        came out at 1.08-1.09 of their measured time, against 0.94-0.97 with the work
        spread evenly (something shortens its tail that this model does not hold).
    pools_into_class:
        Whether its fitted constants count towards its class's (the values a family nobody
        measured inherits). False for kernels a compiler generates from a high-level
        language (Triton): their rates and conversion costs are that compiler's code
        generation, not what the class's hand-written CUDA kernels of that design run at.
    kv_stages:
        K/V tiles its shared memory holds at once, which with the query tile sets how many
        CTAs are resident per SM and whether an architecture-agnostic tile rule halves its
        rows: 1 for FlashAttention-2 (flash-attn ``kernel_traits.h``: its shared memory is
        the Q tile plus one K tile and one V tile, ``kSmemKVSize = size(SmemLayoutKV) · 2 ·
        sizeof(Element)``; ``flash_fwd_launch_template.h``: "128 x 32 (48 KB smem) ... we
        get 2 CTAs per SM" at head dim 128), FlashAttention-3's SM8x build (its
        ``tile_size_fwd_sm8x``: kStages 1) and FlashInfer's templates (``prefill.cuh``: one
        q_smem, k_smem and v_smem tile); 2, double-buffered, where the allocation is not
        read (the default).
    residency_keys:
        Keys of K and V per CTA that the launch's residency test counts, where the kernel
        sizes its KV tile after choosing how many CTAs share an SM: FlashInfer's prefill
        launchers (``prefill.cuh``: two CTAs per SM when twice (the query tile + one 16-key
        K/V slice per KV warp) fits the SM's shared memory, the KV tile then from the half
        left) count 16. 0: :attr:`kv_stages` whole K/V tiles of the chosen size.
    paged_tiles:
        The tile choices of the kernel that runs when the call reads its keys through a
        paged KV cache's block table (an engine call, ``Attention.kv_write``, or the
        ``paged`` family), tried instead of :attr:`tiles`; empty: the same kernel.
        FlashAttention-2 runs its split-KV kernel then, whatever the split count
        (flash-attn ``flash_api.cpp``: ``run_mha_fwd(params, stream,
        /*force_split_kernel=*/paged_KV)`` in its varlen entry point, which vLLM calls with
        the block table), 64 query rows for every head dim and 256 / 128 / 64 keys to head
        dim 64 / 128 / above (``run_mha_fwd_splitkv_dispatch``).
    resident:
        CTAs of the kernel's base size resident per SM where its launch, not its shared
        memory, sets residency (TensorRT-LLM's masked-MHA kernel: 256-thread CTAs, 32 warps
        per SM by its registers, so 4; with fewer CTAs than 4 per SM it launches larger
        ones, up to 1024 threads, keeping the 32 warps); 0: 1-2 as shared memory allows
        (non-persistent families).
    source:
        Where the traits come from.
    """

    name: str
    persistent: bool
    tiles: tuple[TileRule, ...] = ()
    pack_gqa: str = "decode"
    split_kv: str = "auto"
    source: str = ""
    max_splits: float = 64.0
    max_group: float = 1e9
    fp8_unsplit: tuple[str, ...] = ()
    prefill_packs: bool = True
    sync_mma: bool = False
    cuda_core_decode: bool = False
    kin: tuple[str, ...] = ()
    kin_excludes: tuple[str, ...] = ()
    built_as: tuple[tuple[str, str], ...] = ()
    min_rows: float = 16.0
    split_slots: float = 1.0
    resident: float = 0.0
    pools_into_class: bool = True
    split_block: tuple[tuple[float, float], ...] = ()
    fp8_tiles: tuple[TileRule, ...] = ()
    fp8_builds: tuple[tuple[tuple[str, ...], float, str], ...] = ()
    whole_kv_tiles: bool = False
    causal_order: str = "longest_first"
    kv_stages: float = 2.0
    residency_keys: float = 0.0
    paged_tiles: tuple[TileRule, ...] = ()

    def __post_init__(self) -> None:
        if self.causal_order not in CAUSAL_ORDERS:
            raise ValueError(f"{self.name}: causal_order {self.causal_order!r} is not one of "
                             f"{', '.join(CAUSAL_ORDERS)}")

    @property
    def arch_tiles(self) -> bool:
        """Whether the tile rules name architectures (sized for each one already)."""
        return any(archs for archs, _, _, _ in self.tiles + self.fp8_tiles)

    def tile(self, arch: str, head_dim: float, element_size: float = 2.0,
             paged: bool = False) -> tuple[float, float] | None:
        """(query rows, keys) of the tile for ``arch`` and ``head_dim`` (and the kernel's
        element size in bytes: one selects :attr:`fp8_tiles` first; ``paged``: a call
        through a paged KV cache, :attr:`paged_tiles` where the family has them); None:
        the default rule."""
        if paged and self.paged_tiles:
            rules = self.paged_tiles
        elif element_size == 1.0:
            rules = self.fp8_tiles + self.tiles
        else:
            rules = self.tiles
        for archs, max_d, q, kv in rules:
            if (not archs or arch in archs) and head_dim <= max_d:
                return q, kv
        return None

    def fp8_build(self, arch: str, head_dim: float) -> str:
        """The :attr:`fp8_builds` build an fp8 call of ``head_dim`` runs on ``arch``; ""
        where the family has one fp8 rate there."""
        for archs, max_d, build in self.fp8_builds:
            if arch in archs and head_dim <= max_d:
                return build
        return ""

    def split_keys(self, head_dim: Any, ops: Ops = VECTOR) -> Any:
        """Keys per KV block the split-KV heuristic counts for ``head_dim`` (a float or an
        array): the first :attr:`split_block` rule whose head dim fits, else 256."""
        block: Any = 256.0
        for max_d, keys in reversed(self.split_block):  # the first rule wins: applied last
            block = ops.where(head_dim <= max_d, keys, block)
        return block


_FA2 = "FlashAttention-2 paper (Dao 2023) and flash-attn source: 128×128 tiles for d ≤ 64, " \
       "128×64 above, one CTA per (batch, head, query tile); the KV-cache path packs GQA " \
       "heads for decode"
_FA3 = "FlashAttention-3 paper (Shah et al. 2024) and source (tile_size_fwd_sm90): " \
       "warp-specialised TMA producer/consumer warpgroups, ping-pong scheduling, persistent " \
       "tile scheduler, 192×128 tiles for d ≤ 64, 128×128 to d 128, 128×80 to d 256; " \
       "in fp8 (tile_size_fwd_sm90's element_size 1, over a paged KV cache without TMA, " \
       "as the engines call it) 192×160 for d ≤ 64, 192×128 to d 96, 128×160 to d 192, " \
       "128×128 to d 256; " \
       "pack_gqa when it fills the query tiles better (heuristics.h should_pack_gqa: unpacked " \
       "fill < 0.9 × packed fill). No Blackwell build (its warpgroup MMA is SM90-only; " \
       "FA3 runs on Ampere, Ada and Hopper: Dao-AILab/flash-attention issue 1049; for " \
       "Blackwell its authors pointed to cuDNN and CUTLASS's FMHA, issue 1464, then FA4): " \
       "there ``flash3`` and its alias ``cudnn`` mean the FA3/cuDNN-class kernel Blackwell " \
       "has, modelled as FA4's"
_TRITON = "SGLang triton_ops/extend_attention.py block sizes (BLOCK_M×BLOCK_N): sm100 64×64 " \
          "(d ≤ 256) / 16×64; sm90 128×64 / 32×64; sm89 64×128 (d ≤ 128) / 64×64 / 32×32; " \
          "sm80 128×128 / 64×64 / 32×64; one program per (sequence, head, query block)"
_FA2_ROWS = "; at least 64 query rows per CTA (flash_fwd_launch_template.h: the split-KV " \
            "kernel's kBlockM = 64 for every head dim, the forward kernels' 64 or 128); " \
            "splits by flash_api.cpp's num_splits_heuristic over 2 x SMs slots, KV blocks of " \
            "256 / 128 / 64 keys for head dims to 64 / 128 / above, at most 128 splits"
_ANY: tuple[str, ...] = ()
#: The traits FlashAttention-2's two entry points share (its split-KV kernel and heuristic).
_FA2_SPLIT: dict[str, Any] = {
    "min_rows": 64.0, "split_slots": 2.0, "max_splits": 128.0,
    "split_block": ((64.0, 256.0), (128.0, 128.0), (1e9, 64.0)), "kv_stages": 1.0,
    "paged_tiles": ((_ANY, 64, 64, 256), (_ANY, 128, 64, 128), (_ANY, 1e9, 64, 64)),
}
_SYNC = "; synchronous MMA (mma.sync): on Hopper and Blackwell at the architecture's " \
        "sync_mma_fraction of the dense rate"


def _order_measured(before: str, after: str) -> str:
    """Source text of a family whose causal tiles AIConfigurator's rows show starting in
    launch order (``before``/``after``: that GPU's few-wave causal prefill rows, predicted
    over measured, with the tiles' work spread evenly and with an in-order dispatch)."""
    return ("; causal query tiles start in launch order, each sequence's shortest first "
            "(read from AIConfigurator's rows, not from the kernels' source: causal prefill "
            f"calls of 1-4 waves of tiles were predicted at {before} of their measured time "
            f"with the tiles' work spread evenly, {after} with a greedy in-order dispatch)")


_BIG_D = "head dims above 256 take 64-row tiles: a 128-row fp32 output accumulator of " \
         "d 512 is 256 KiB, all of a Blackwell SM's tensor memory (or a Hopper SM's " \
         "register file)"

ATTENTION_FAMILIES: Mapping[str, AttentionFamily] = MappingProxyType({f.name: f for f in (
    AttentionFamily("flash2", False, ((_ANY, 64, 128, 128), (_ANY, 1e9, 128, 64)), "decode",
                    "auto", _FA2 + _FA2_ROWS + _SYNC, sync_mma=True, **_FA2_SPLIT),
    AttentionFamily("paged", False, ((_ANY, 64, 128, 128), (_ANY, 1e9, 128, 64)), "decode",
                    "auto", _FA2 + "; paged-KV entry point (flash_attn_with_kvcache)"
                    + _FA2_ROWS + _SYNC, sync_mma=True, kin=("flash2",), **_FA2_SPLIT),
    AttentionFamily("flash3", True, ((_ANY, 64, 192, 128), (_ANY, 128, 128, 128),
                                     (_ANY, 256, 128, 80)), "efficiency", "auto", _FA3,
                    built_as=(("ampere", "flash3-sm8x"), ("ada", "flash3-sm8x"),
                              ("blackwell", "flash4")),
                    fp8_tiles=((_ANY, 64, 192, 160), (_ANY, 96, 192, 128),
                               (_ANY, 192, 128, 160), (_ANY, 256, 128, 128))),
    AttentionFamily("flash3-sm8x", False, ((_ANY, 64, 128, 128), (_ANY, 1e9, 128, 64)),
                    "always", "auto",
                    "FlashAttention-3's source built for SM80/SM86/SM89 (its hopper/ folder "
                    "has an SM8x path since 2025: Dao-AILab/flash-attention issues 1481 and "
                    "1049; sgl-kernel builds it for sm80/sm86/sm89, which is what SGLang's "
                    "FlashAttention backend runs on an A100: sgl-project/sglang issue 5911), "
                    "a family of its own, which ``flash3`` resolves to on Ampere and Ada: the "
                    "synchronous MMA and cp.async loads of FlashAttention-2 (its kin: rates, "
                    "tile times, per-CTA bandwidth until fitted), with FA3's scheduling "
                    "heuristics: packed GQA always on SM8x (get_pack_gqa), split-KV by "
                    "num_splits_heuristic over the SM count (not twice it) for any group "
                    "size, at most 128 splits, and 128-row query tiles (tile_size_fwd_sm8x), "
                    "so a decode tile of G packed query heads costs 128 rows of MMA work. "
                    "Tile shapes otherwise FlashAttention-2's (an assumption); one K/V stage "
                    "(tile_size_fwd_sm8x returns kStages 1 to head dim 128 and above 192, 2 "
                    "for 129-192 on SM80 only; with 4 warps, 128 threads, its kernel asks "
                    "for two CTAs per SM: MinBlocksPerMultiprocessor)" + _SYNC,
                    sync_mma=True, kin=("flash2",), max_splits=128.0, min_rows=128.0,
                    kv_stages=1.0),
    AttentionFamily("flash4", True, ((_ANY, 256, 128, 128), (_ANY, 1e9, 64, 128)), "short",
                    "auto", "FlashAttention-4 (CuTe DSL, Blackwell-first): persistent, "
                    "warp-specialised, its matrix work on tcgen05 into tensor memory "
                    "(flash_attn/cute/flash_fwd_sm100.py); on Hopper the same interface runs "
                    "another kernel, flash_fwd_sm90.py (warpgroup MMA, FA3's design), which "
                    "``flash4`` resolves to there (``flash4-sm90``), so that Hopper's rows do "
                    "not become the Blackwell kernel's constants; its kin while it has no "
                    "measurements: TensorRT-LLM's trtllm-gen kernels, Blackwell's other "
                    "persistent tcgen05 attention, then FA3; " + _BIG_D,
                    kin=("trtllm-gen", "flash3"), built_as=(("hopper", "flash4-sm90"),)),
    AttentionFamily("flash4-sm90", True, ((_ANY, 256, 128, 128), (_ANY, 1e9, 64, 128)),
                    "short", "auto",
                    "FlashAttention-4's Hopper kernel (Dao-AILab/flash-attention "
                    "flash_attn/cute/flash_fwd_sm90.py, beside flash_fwd_sm100.py and "
                    "flash_fwd_sm120.py: one kernel per architecture behind one interface): "
                    "warpgroup MMA and TMA loads, persistent and warp-specialised like FA3 "
                    "(its kin); a family of its own, which ``flash4`` resolves to on Hopper "
                    "(vLLM's head-dim-512 rows on AIConfigurator's H100); " + _BIG_D,
                    kin=("flash3",)),
    AttentionFamily("fmha-v2", False, (), "never", "none",
                    "TensorRT-LLM fmha_v2 context kernels: one CTA per (sequence, head, "
                    "query tile); fp8 context FMHA when the KV cache is fp8 (SM89+). On "
                    "SM89 each fp8 (e4m3) head size is its own non-tiled flash kernel "
                    "(cpp/kernels/fmha_v2/setup.py @010669f8 enumerate_qmma_flash_kernels: "
                    "query × key tile 128×128 for head sizes 32-64, 64×32 for 72-256; "
                    "fmhaRunner.cpp @00dbe288: 'so far Ada QMMA only supports non-tiled "
                    "kernels'; the shipped cubins, fmha_cubin.h @03cdd5a6, take 24 KB of "
                    "shared memory to head size 64, 32 KB to 128, 64 KB to 256), three "
                    "builds whose rates differ: on AIConfigurator's L40S, at long prompts, "
                    "~100, ~210 and ~70 TFLOP/s at head dims 64, 128 and 256, against "
                    "~127 for the bf16 kernels at all three. Each build's fp8 rate is "
                    "fitted on its own (fitted: AIConfigurator L40S, the only SM89 GPU of "
                    "the data); another SM89 GPU runs the same cubins",
                    built_as=(("hopper", "fmha-v2-sm90"),),
                    fp8_builds=((("ada",), 64, "e4m3-d32-64"),
                                (("ada",), 128, "e4m3-d72-128"),
                                (("ada",), 256, "e4m3-d160-256"))),
    AttentionFamily("fmha-v2-sm90", True, ((_ANY, 64, 128, 256), (_ANY, 128, 128, 128),
                                           (_ANY, 1e9, 128, 64)), "never", "none",
                    "TensorRT-LLM fmha_v2 context kernels as built for Hopper: on SM90 its "
                    "setup.py generates only warp-specialised flash kernels "
                    "(enumerate_hgmma_flash_warpspec_kernels, enumerate_qgmma_flash_warpspec_"
                    "kernels: TMA loads, wgmma, two 64-row consumer warpgroups, KV step 256 / "
                    "128 / 64 for head dims to 64 / 128 / 256, a tile scheduler, "
                    "SCHEDULING_MODE 1 by default), the design of FlashAttention-3, not the "
                    "SM80/SM89 fmha_v2 kernels: a family of its own (scheduled as persistent, "
                    "one CTA per SM: an assumption from that design), which ``fmha-v2`` "
                    "resolves to on Hopper; its kin is FA3. Pooled with the SM89 kernels, an "
                    "H100 left out of the fit inherited Ada's fp8 FMHA rate (~39 % of the fp8 "
                    "peak) and was predicted 2.4x too slow on long fp8 prompts"
                    + _order_measured("0.74-0.94 (H100)", "1.05-1.09"),
                    kin=("flash3",), causal_order="in_order"),
    AttentionFamily("xqa", False, ((_ANY, 1e9, 64, 64),), "decode", "trtllm",
                    "TensorRT-LLM XQA decode kernels: the query heads of a KV group share "
                    "one CTA (cross-query), multi-block mode splits long KV by TensorRT-LLM's "
                    "own rule (computeMultiBlockCount: a block per 128 keys of history, at "
                    "most round(sqrt(8n)) of them, cut to 8 waves of CTAs). Observed in "
                    "AIConfigurator's database (TRT-LLM 1.0-1.3): groups of more than 32 query "
                    "heads per KV head run the masked-MHA fallback at 20-80 GB/s on every GPU, "
                    "and on SM89 an fp8 cache with grouped heads is read by one CTA per "
                    "(sequence, KV head)", max_group=32.0, fp8_unsplit=("ada",)),
    AttentionFamily("mmha", False, ((_ANY, 1e9, 16, 64),), "never", "mmha",
                    "TensorRT-LLM masked multi-head attention decode kernel "
                    "(decoderMaskedMultiheadAttention): one CTA per (sequence, query head), "
                    "the dot products on CUDA cores, multi-block mode splits long KV; TRT-LLM "
                    "dispatches it instead of XQA when a KV head has a single query head "
                    "(its XQA kernels are built for grouped heads). On AIConfigurator's "
                    "H100 rows it reads an fp8 cache at ~2.5 TB/s where XQA reaches ~3.0. "
                    "Launch (decoderMaskedMultiheadAttentionLaunch.h): 256-thread CTAs when "
                    "sequences x heads >= 4x the SMs, 'the max number of warps we can launch "
                    "per SM is 32 limited by registers': 4 resident per SM; fewer, larger "
                    "CTAs (same 32 warps) with multi-block splits below that, as many as "
                    "one wave of them holds and the keys fill whole loops "
                    "(perfmodel.timing.attention.trtllm_mmha_blocks), merged in the kernel",
                    resident=4.0),
    AttentionFamily("trtllm-gen", True, ((_ANY, 256, 128, 128), (_ANY, 1e9, 64, 128)),
                    "short", "auto",
                    "TensorRT-LLM trtllm-gen kernels (Blackwell): persistent, "
                    "warp-specialised, multi-CTA decode; also reached through FlashInfer; "
                    "the generation kernels pack a KV head's query heads, the context "
                    "kernels run one tile per (sequence, query head, query tile) (on "
                    "AIConfigurator's B200 rows one-token prompts cost ~21 ns per (sequence, "
                    "query head) whatever the KV heads: 341 µs at 256 × 64 heads, one KV head "
                    "or four); its generation kernels replace XQA, TensorRT-LLM's decode "
                    "kernels before Blackwell (the same packing of a KV head's query heads, "
                    "the same multi-block split), whose non-overlapped decode tile time is "
                    "the one they take until measured (their rates, prefill tiles and "
                    "bandwidth follow the persistent class). Its decode kernels load whole "
                    "KV tiles (128 keys): on AIConfigurator's B200 rows, through all three "
                    "engines, with many (sequence, KV head) units a unit's time is flat from "
                    "2 to 128 keys and then grows with each further 128 (bf16, head dim "
                    "128: ~11.5 ns at 2-128 keys, 19 at 256, 37 at 512), and at up to 16 "
                    "keys it follows the tile's bytes, head dim × element size, not the head "
                    "dim: 9.4 ns at head dim 64 in bf16 and 9.6 at 128 in fp8, 11.7 at 128 in "
                    "bf16 and 11.8 at 256 in fp8 (TensorRT-LLM; the kernels ship as cubins, "
                    "so this is measured, not read from source; the launcher splits a "
                    "sequence's keys in whole steps, at most ceil(S_kv / stepKv) CTAs, "
                    "fmhaKernels.h @01c84c67 computeNumCtas, and a later version's tile "
                    "heuristic costs a CTA's keys rounded up to stepKv); " + _BIG_D
                    + _order_measured("0.70-0.91 (B200, all three engines)", "0.89-1.05"),
                    prefill_packs=False, whole_kv_tiles=True, causal_order="in_order",
                    kin=("xqa",), kin_excludes=("efficiency", "fp8_efficiency", "tile_s",
                                                "dequant_ops", "tile_overlap",
                                                "decode_tile_overlap",
                                                "cta_bandwidth")),
    AttentionFamily("flashinfer", False, ((_ANY, 128, 128, 64), (_ANY, 1e9, 128, 32)),
                    "always", "auto",
                    "FlashInfer FA2-template prefill (CTA tile 128 query rows, KV tile 64, 32 "
                    "above d 128) and its decode kernel (split-KV); both pack the G query heads "
                    "of a KV head into a tile's rows (its scheduler plans by packed_qo_len = "
                    "qo_len·G and picks the query tile from it: scheduler.cuh, utils.cuh "
                    "FA2DetermineCtaTileQ); on "
                    "Hopper and Blackwell FlashInfer dispatches its own native backends (FA3 "
                    "template, SM100 kernels: SGLang's FlashInfer prefill rows on B200 reach "
                    "1.1 PFLOP/s, half the dense peak), so no synchronous-MMA share applies. "
                    "Its decode wrapper also has a CUDA-core kernel (use_tensor_cores=False: "
                    "one CTA of ≥ 128 threads per (sequence, KV head), dot products on the "
                    "fp32 units, shared memory 2 stages × K and V × t·G·b_z keys × D: "
                    "flashinfer decode.py / decode.cuh); its prefill templates are "
                    "FlashAttention-2's algorithm and tiling on the synchronous MMA, so a "
                    "FlashInfer nobody measured takes FlashAttention-2's rates and tile "
                    "times, but not its per-CTA bandwidth nor its decode tile time: "
                    "FlashInfer loads a paged KV cache through its own page-table "
                    "iterator and pipeline (prefill.cuh, page.cuh) and decodes in kernels "
                    "of its own, which FA2's do not describe (held out, L40S's FlashInfer "
                    "rows predicted with FA2's Ampere per-CTA bandwidth were 1.2-1.45x slow on "
                    "caches above 0.1 GB)",
                    cuda_core_decode=True, kin=("flash2",), kv_stages=1.0,
                    residency_keys=16.0, kin_excludes=("cta_bandwidth", "decode_tile_s")),
    AttentionFamily("flashinfer-sm100", True, ((_ANY, 256, 128, 128), (_ANY, 1e9, 64, 128)),
                    "short", "auto",
                    "FlashInfer's Blackwell (SM100) attention backends, which SGLang's "
                    "FlashInfer path dispatches on B200: persistent, warp-specialised like "
                    "the trtllm-gen kernels whose traits it takes (its prefill rows on "
                    "AIConfigurator's B200 reach 0.72-1.14 PFLOP/s at 2-16k tokens, up to "
                    "half the dense peak, which no FA2-template kernel reaches there); a "
                    "family of its own so that its constants are not pooled with FlashInfer's "
                    "FA2 templates (Ampere, Ada) nor with TensorRT-LLM's own trtllm-gen calls "
                    "(its kin while it has no measurements); " + _BIG_D, prefill_packs=False,
                    kin=("trtllm-gen",)),
    AttentionFamily("triton", False, (
        (("blackwell",), 256, 64, 64), (("blackwell",), 1e9, 16, 64),
        (("hopper",), 256, 128, 64), (("hopper",), 1e9, 32, 64),
        (("ada",), 128, 64, 128), (("ada",), 256, 64, 64), (("ada",), 1e9, 32, 32),
        (_ANY, 128, 128, 128), (_ANY, 256, 64, 64), (_ANY, 1e9, 32, 64)),
        "decode", "auto", _TRITON + "; decode_attention.py splits the keys of a sequence "
        "into at most max_kv_splits = 8 programs and its grouped kernel packs a KV head's "
        "query heads; the extend (prefill) kernel does not. Its tl.dot runs the "
        "synchronous MMA (a warpgroup MMA needs 64 rows per warpgroup, triton-lang/triton "
        "issue 4758; SGLang's blocks on Hopper/Blackwell at the head dims it uses Triton "
        "for are 16-64 rows): fitted to AIConfigurator's rows with that share, the "
        "family's bf16 rate is 0.81 (Ada), 0.79 (Blackwell), 0.49 (Hopper, head dim 512) "
        "of the achievable one, against 0.82 / 0.20 / 0.26 without it" + _SYNC,
        max_splits=8.0,
        prefill_packs=False, sync_mma=True, pools_into_class=False),
    AttentionFamily("mla", True, ((("blackwell",), 1e9, 128, 128), (_ANY, 1e9, 64, 64)),
                    "always", "auto",
                    "The engines' absorbed multi-head latent attention decode kernels "
                    "(DeepSeek-V2/V3 MLA over a latent cache of 576 elements per token: "
                    "Attention.shared_kv): every query head of a sequence shares the one "
                    "latent KV head, so the heads are packed into the rows of a tile and the "
                    "cache is read once per 64 heads. FlashMLA on Hopper (deepseek-ai/"
                    "FlashMLA README and csrc: 64 query heads per CTA tile, 64-key paged "
                    "blocks, split-KV over the SMs by its tile-scheduler metadata, "
                    "warp-specialised warpgroups; 'up to 3000 GB/s memory-bound and 580 "
                    "TFLOPS compute-bound on H800 SXM5'); TensorRT-LLM's trtllm-gen and "
                    "FlashInfer's CUTLASS MLA kernels on Blackwell (128-row tiles, two SMs' "
                    "tensor memory). Persistent. On Ampere and Ada the engines run "
                    "FlashInfer's MLA decode (its FA2-template kernels, ``flashinfer`` "
                    "there), before Ampere Triton's (vLLM's TritonMLA). No rate of these "
                    "kernels is fitted (no public per-kernel measurements in the project's "
                    "data): its constants are FA3's, then trtllm-gen's (its kin)",
                    kin=("flash3", "trtllm-gen"),
                    built_as=(("ampere", "flashinfer"), ("ada", "flashinfer"),
                              ("blackwell-consumer", "flashinfer"), ("turing", "triton"),
                              ("volta", "triton"))),
    # rules naming the NVIDIA architectures are the kernels' own sizes (not halved for
    # shared memory, as an architecture-agnostic rule is)
    AttentionFamily("mem-efficient", False, ((NVIDIA_ARCHS, 64, 64, 64),
                                             (NVIDIA_ARCHS, 128, 64, 128),
                                             (NVIDIA_ARCHS, 1e9, 32, 128)), "never", "none",
                    "PyTorch's memory-efficient SDPA backend, the CUTLASS kernel from "
                    "xformers (aten/src/ATen/native/transformers/cuda/mem_eff_attention/"
                    "kernel_forward.h): one CTA per (query block, head, sequence) "
                    "(getBlocksGrid), no split of the keys, query × key blocks 64×64 to "
                    "head dim 64, 64×128 to 128, 32×128 above (its fmha_cutlassF_*_64x64_rf, "
                    "_64x128_rf, _32x128_gmem kernels, the last streaming its output "
                    "through global memory: no shared-memory halving), a whole query block "
                    "computed for a "
                    "one-token query; the kernels built for SM80 run on Hopper and later "
                    "(synchronous MMA); no grouped-query support (torch: \"both fused kernels "
                    "require query, key and value to have the same num_heads\"), so a GQA "
                    "call reads each KV head once per query head, as with the K/V a caller "
                    "repeats for it. Its kin is FlashAttention-2 (the same synchronous-MMA, "
                    "online-softmax design) until it is measured" + _SYNC,
                    sync_mma=True, kin=("flash2",), max_group=1.0, min_rows=64.0),
)})


def tile_efficiency(q_tile: Any, kv_tile: Any, ops: Ops = VECTOR) -> Any:
    """Relative MMA rate of a q×kv tile: operand reuse I = q·kv/(q + kv) per loaded element,
    rate ∝ (I / I₁₂₈ₓ₁₂₈)^0.6, at most 1 — the exponent that reproduces the relative
    efficiencies of the Hopper GEMM tile menu (:mod:`perfmodel.timing.family`: 128×64 0.8,
    64×64 0.55, 64×32 0.4)."""
    reuse = q_tile * kv_tile / (q_tile + kv_tile)
    return ops.minimum((reuse / 64.0) ** 0.6, 1.0)


#: The kernel families whose softmax overlaps the matrix work (FA3-class scheduling).
OVERLAPPED_SOFTMAX = ("flash3", "flash4", "flash4-sm90", "trtllm-gen", "flashinfer-sm100",
                      "mla")


def attention_family(impl: str) -> AttentionFamily:
    """Traits of kernel family ``impl`` (``flash`` must be resolved first)."""
    return ATTENTION_FAMILIES[impl]


def attn_name(impl: str, what: str) -> str:
    """Constant name of attention family ``impl``'s ``what`` (efficiency, tile_s, ...)."""
    return f"attn.{impl}.{what}"


_ATTN_CONSTANTS = {
    "efficiency": (1.0, 0.05, 2.0, "× achievable rate",
                   "tensor rate of its bf16/fp16 matrix work relative to the device's "
                   "achievable GEMM rate × the spec's attention efficiency (after the tile "
                   "shape's own efficiency). Prior: 1."),
    "fp8_efficiency": (1.0, 0.05, 2.0, "× achievable rate",
                       "the same for fp8 compute, relative to the fp8 rate. Prior: as the "
                       "bf16 efficiency."),
    "tile_s": (1.0e-6, 1e-8, 2e-5, "s",
               "time one work tile (a query tile of one head) spends that does not overlap "
               "its matrix and memory work: the dependent first loads, the softmax rescale "
               "tail, the output store. Prior: ~1 µs, two memory round trips."),
    "decode_tile_s": (1.0e-6, 1e-8, 2e-5, "s",
                      "tile_s of its decode kernels (one query token: a work tile is one "
                      "(sequence, KV head) group or one split of it). Prior: as tile_s."),
    "dequant_ops": (2.0, 0.1, 50.0, "ops/element",
                    "vector operations per fp8 K/V element converted to bf16 in the kernel "
                    "(convert, scale). Prior: 2."),
    "tile_overlap": (0.0, 0.0, 0.95, "fraction",
                     "share of tile_s hidden for each tile an SM runs after its first "
                     "(persistent families only): a warp-specialised kernel's producer "
                     "warps load the next tile while the consumers finish the current one, "
                     "so only the first tile per SM pays the whole dependent-load latency. "
                     "Prior: 0 (every tile pays it)."),
    "decode_tile_overlap": (0.0, 0.0, 0.95, "fraction",
                            "the same share of decode_tile_s for its decode kernels, which "
                            "are kernels of their own (a decode tile is one (sequence, KV "
                            "head) group: its serial part is the query rows' load, the "
                            "output store and the scheduler's next fetch, not a context "
                            "tile's softmax tail). Prior: the class's tile_overlap; a "
                            "family not measured in decode takes its class's decode share "
                            "(the mean of the families fitted), not its own context one."),
    "cta_bandwidth": (1.5, 0.3, 20.0, "× fair share",
                      "device-memory bandwidth one of its CTAs pulls, as a multiple of the "
                      "fair share BW/SMs (how many loads it keeps in flight). Prior: 1.5, the "
                      "family default of the GEMM model."),
}
#: The share of a tile's non-overlapped time that grows with the head dims, as every
#: family's tile times are fitted at D = D_v = 128 (see :func:`tile_time_scale`).
register(Param("attn.tile_dim_share", 0.0, 0.0, 1.0, "fraction",
               "share w of an attention tile's non-overlapped time (tile_s, decode_tile_s) "
               "that is proportional to the head dims: the Q tile's load, the rescale and "
               "normalisation of the D_v-wide output accumulator, its conversion and store "
               "are per-element work of a tile whatever its keys; the rest (dependent "
               "first loads, scheduling) is not. t_tile(D, D_v) = tile_s·(1 − w + "
               "w·(D + D_v)/256). Prior: 0 (tile time independent of the head dims).",
               "linear"))


#: How fast a CTA runs alone on an SM, for a kernel whose shared memory lets two share one.
register(Param("attn.lone_cta_share", 0.75, 0.5, 1.0, "fraction of the SM",
               "share c of an SM's attention rate that one CTA of a resident (not "
               "persistent) kernel reaches when it has the SM to itself, for a kernel whose "
               "shared memory fits two CTAs per SM: a 4-warp FlashAttention-2 CTA holds one "
               "warp per SM sub-partition, which cannot hide its own MMA and shared-memory "
               "latencies as two CTAs' warps hide each other's. A call with no more tiles "
               "than SMs runs its tiles at c of the SM's rate, not the 1/2 each gets when "
               "two share it. Prior: 0.75, halfway between a CTA's share with two per SM "
               "(0.5) and the whole SM (1): from 0.5, the old rule's value, the fit stayed "
               "at 0.55 where its rows score best near 0.75.", "linear"))
register(Param("attn.lone_decode_share", 0.75, 0.5, 1.0, "fraction of the SM",
               "attn.lone_cta_share for a decode tile (one query token): the share c of an "
               "SM's attention rate that a lone CTA of a resident kernel reaches on a "
               "one-token query, whose tile holds the G query heads of a KV head padded to "
               "the MMA rows and streams its keys with little matrix work per key, so its "
               "latency hiding need not be a prefill tile's. Prior: 0.75, as "
               "attn.lone_cta_share's.", "linear"))


#: The share of a decode tile's non-overlapped time that grows with the query rows it
#: holds (see :func:`decode_rows_scale`). One value for every family, as the head-dim
#: share is: fitted per family (the same constants under each family's class), the two
#: shares scored better in sample (median 9.52 % against 9.6 %) and worse for a GPU left
#: out of the fit (B200 16.0 → 16.5 %, L40S 17.2 → 17.9 %), since most families run on
#: one GPU of the data and a GPU left out then inherits another design's shares.
register(Param("attn.decode_row_share", 0.0, 0.0, 1.0, "fraction",
               "share u of a decode tile's non-overlapped time (decode_tile_s) that is "
               "proportional to the query rows r the tile holds (the G query heads of a "
               "KV head packed into its rows, 1 unpacked): the query rows' load and the "
               "rescale, normalisation, conversion and store of their output rows are "
               "work per row; the rest (dependent first loads of the keys, scheduling) is "
               "not. Factor 1 − u + u·r/8 (decode_tile_s is the time of a tile of 8 rows). "
               "Prior: 0 (decode tile time independent of the rows).", "linear"))
#: Query rows of the decode tile every family's decode_tile_s stands for.
DECODE_REF_ROWS = 8.0


def tile_time_scale(head_dim: Any, value_dim: Any, consts: Constants) -> Any:
    """Factor of a family's tile time (fitted at D = D_v = 128) at head dims D, D_v:
    1 − w + w·(D + D_v)/256, w = ``attn.tile_dim_share``."""
    w = consts["attn.tile_dim_share"]
    return 1.0 - w + w * (head_dim + value_dim) / 256.0


def decode_rows_scale(rows: Any, consts: Constants) -> Any:
    """Factor of a decode tile's time (fitted for 8 query rows) at ``rows`` rows:
    1 − u + u·rows/8, u = ``attn.decode_row_share``."""
    u = consts["attn.decode_row_share"]
    return 1.0 - u + u * rows / DECODE_REF_ROWS


#: Attention constants fitted on a linear scale (the rest in log space).
_LINEAR = frozenset({"tile_overlap", "decode_tile_overlap"})
#: Kernel classes: a family's constants default to its class's (what a family never
#: measured inherits): ``persistent`` (warp-specialised, one CTA per SM) or ``resident``.
ATTENTION_CLASSES = ("persistent", "resident")


def attention_class(fam: AttentionFamily) -> str:
    """The class of kernel family ``fam``."""
    return "persistent" if fam.persistent else "resident"


for _c in ATTENTION_CLASSES:
    for _what, (_d, _lo, _hi, _unit, _doc) in _ATTN_CONSTANTS.items():
        _parent = {"fp8_efficiency": attn_name(_c, "efficiency"),
                   "decode_tile_s": attn_name(_c, "tile_s"),
                   "decode_tile_overlap": attn_name(_c, "tile_overlap")}.get(_what)
        register(Param(attn_name(_c, _what), _d, _lo, _hi, _unit,
                       f"{_c} kernel families: {_doc}",
                       "linear" if _what in _LINEAR else "log", parent=_parent, pooled=False))
for _f in ATTENTION_FAMILIES.values():
    _unknown = sorted(set(_f.kin_excludes) - set(_ATTN_CONSTANTS))
    if _unknown:
        raise ValueError(f"{_f.name}: kin_excludes names no attention constant: {_unknown}")
    if _f.kin:
        register_kin(attn_name(_f.name, ""), *(attn_name(k, "") for k in _f.kin),
                     exclude=_f.kin_excludes)
    for _what, (_d, _lo, _hi, _unit, _doc) in _ATTN_CONSTANTS.items():
        # a family's fp8 rate and decode tile time default to its own bf16 rate and tile
        # time; its other constants to its class's
        _parent = {"fp8_efficiency": attn_name(_f.name, "efficiency"),
                   "decode_tile_s": attn_name(_f.name, "tile_s")}.get(
            _what, attn_name(attention_class(_f), _what))
        register(Param(attn_name(_f.name, _what), _d, _lo, _hi, _unit,
                       f"{_f.name}: {_doc} Until fitted: as its class "
                       f"({attention_class(_f)}).",
                       "linear" if _what in _LINEAR else "log", parent=_parent,
                       pooled=_f.pools_into_class
                       and _what not in ("fp8_efficiency", "decode_tile_s")))
        register(*(Param(arch_name(attn_name(_f.name, _what), a), _d, _lo, _hi, _unit,
                         f"{attn_name(_f.name, _what)} on {a} GPUs.",
                         "linear" if _what in _LINEAR else "log",
                         parent=attn_name(_f.name, _what)) for a in ARCH_FAMILIES))


#: The constants an engine's configuration of a family refines (engines build the same
#: family with their own tile configurations and schedulers).
ENGINE_REFINED = ("efficiency", "fp8_efficiency", "tile_s", "decode_tile_s")
#: Refined for every engine of :data:`perfmodel.engines.ENGINES`, ``none`` included: a call
#: made without an engine (the kernel library called directly, as the FlashAttention-2
#: benchmarks of A30 and vidur's A100 rows were) is a case of its own, so that the
#: architecture's value stays the mean of the measured configurations (what an unknown
#: engine inherits) and is never the fit of one of them overwritten by that mean.
register(*(
    Param(f"{arch_name(attn_name(f.name, what), a)}.{e}",
          *_ATTN_CONSTANTS[what][:4],
          f"{arch_name(attn_name(f.name, what), a)} as {e} builds and calls it.",
          parent=arch_name(attn_name(f.name, what), a))
    for f in ATTENTION_FAMILIES.values() for what in ENGINE_REFINED for a in ARCH_FAMILIES
    for e in ENGINES
))


#: Per-build refinements (:attr:`AttentionFamily.fp8_builds`): the fp8 rate of each build
#: of a family on an architecture, under every engine.
register(*(
    Param(f"{arch_name(attn_name(f.name, 'fp8_efficiency'), a)}.{e}.{build}",
          *_ATTN_CONSTANTS["fp8_efficiency"][:4],
          f"{arch_name(attn_name(f.name, 'fp8_efficiency'), a)}.{e} for its {build} build "
          "(the kernel compiled for those head sizes).",
          parent=f"{arch_name(attn_name(f.name, 'fp8_efficiency'), a)}.{e}")
    for f in ATTENTION_FAMILIES.values() for archs, _, build in f.fp8_builds
    for a in archs for e in ENGINES
))


def attn_constant(impl: str, what: str, arch: str, consts: Constants,
                  engine: str = "", build: str = "") -> float:
    """Family ``impl``'s constant ``what`` on ``arch`` as ``engine`` runs it: the most
    specific value of attn.<impl>.<what>.<arch>.<engine>[.<build>] → .<arch> → the
    family's → its class's. An empty ``engine`` is ``none``; ``build`` (an fp8 kernel
    build, :meth:`AttentionFamily.fp8_build`) refines ``fp8_efficiency`` only."""
    name = arch_name(attn_name(impl, what), arch)
    engine = engine or "none"
    if engine in ENGINES and what in ENGINE_REFINED and name != attn_name(impl, what):
        if build and what == "fp8_efficiency":
            return consts[f"{name}.{engine}.{build}"]
        return consts[f"{name}.{engine}"]
    return consts[name]
