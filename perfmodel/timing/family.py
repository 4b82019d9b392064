"""Per-architecture-family constants of the timing model.

These are few and physical: GEMM tile menus with the relative efficiency of each tile
shape, special-function throughput, memory latency, how much bandwidth one CTA can pull,
and the attention kernel path native to the family. Device-specific figures (peaks,
bandwidth, achievable fractions, fixed overhead) live in the YAML specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["FAMILIES", "FamilyParams", "family_params"]

Tile = tuple[float, float, float]  # (tile_m, tile_n, efficiency relative to the best tile)


@dataclass(frozen=True)
class FamilyParams:
    """Constants shared by every device of one architecture family.

    Attributes
    ----------
    tensor_tiles, vector_tiles:
        GEMM output-tile menus (t_m, t_n, relative efficiency) for tensor-core and
        vector (SIMT/FP32) kernels; the library is modelled as picking the fastest.
    tiles_per_unit:
        Resident output tiles per SM/CU (occupancy of a GEMM kernel).
    split_k:
        Split-K factors the library may use when tiles are too few to fill the device
        (each split keeps at least 128 of k).
    sfu_per_clock:
        Special-function (exp) results per clock per SM/CU.
    memory_latency_s:
        Loaded device-memory latency; a transfer costs latency + bytes / bandwidth.
    cta_bandwidth:
        Bandwidth one CTA can pull, as a multiple of the fair share BW/units: with few CTAs
        the achievable bandwidth is min(1, CTAs·cta_bandwidth/units) of the full figure
        (streaming kernels).
    gemm_cta_bandwidth:
        The same for a GEMM CTA's own tile; None (GPU families): the fitted model constant
        ``gemm_cta_bandwidth`` (:func:`perfmodel.timing.kernels.gemm_cta_bandwidth`).
    flash_impl:
        What ``impl="flash"`` means on this family (``flash2``, ``flash3``, or on
        Blackwell ``flash4``: FlashAttention-3 has no Blackwell build; before Ampere
        ``mem-efficient``, PyTorch's fused backend there: FlashAttention-2 needs SM80).
    flash_efficiency:
        Tensor efficiency of the fused attention kernel relative to the GEMM fraction.
    softmax_overlap:
        Overlap of softmax (exp + vector ops) with the matrix work in FA2-class kernels:
        0 = serialised, 1 = fully hidden (other warps' MMAs run meanwhile).
    fa3_softmax_overlap:
        The same for FA3-class kernels (warp-specialised ping-pong scheduling).
    softmax_vector_ops:
        Vector operations per scored pair in the fused kernel's online softmax.
    paged_prefill_efficiency:
        Rate of the paged-KV kernel in prefill relative to the dense fused kernel
        (it computes the whole S_q×S_kv rectangle; see ``timing.attention``).
    fill_waves:
        How many times a GEMM pays one wave's non-overlapped tile fill/drain (first load,
        last store): it multiplies that fill time.
    sync_mma_fraction:
        Rate of the synchronous (warp-level ``mma.sync``) tensor-core path as a share of the
        dense peak, which on Hopper and Blackwell is reached only through the asynchronous
        warpgroup (``wgmma``) or ``tcgen05`` instructions. Kernels written for Ampere
        (FlashAttention-2, Triton kernels with query blocks too small for a warpgroup
        MMA) run at this share. 1 where the synchronous path is the only one (Volta to
        Ada, consumer Blackwell, AMD, Intel, CPU).
    l2_bytes_per_clock:
        L2 read bandwidth per SM/CU per clock, bytes, when the spec gives no
        ``memory.l2_bandwidth``: the L2 bandwidth is units × clock × this. NVIDIA states
        5120 B/clk for the 108-SM A100 (47 per SM, A100 whitepaper); used for later
        NVIDIA families too (an assumption: no per-SM figure is published for them).
    """

    tensor_tiles: tuple[Tile, ...]
    vector_tiles: tuple[Tile, ...]
    tiles_per_unit: float = 1.0
    split_k: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
    sfu_per_clock: float = 16.0
    memory_latency_s: float = 0.6e-6
    cta_bandwidth: float = 1.5
    gemm_cta_bandwidth: float | None = None
    flash_impl: str = "flash2"
    flash_efficiency: float = 0.85
    softmax_overlap: float = 0.5
    fa3_softmax_overlap: float = 0.8
    softmax_vector_ops: float = 5.0
    paged_prefill_efficiency: float = 0.65
    fill_waves: float = 1.0
    sync_mma_fraction: float = 1.0
    l2_bytes_per_clock: float = 47.4


# Tile menus: large tiles reach the full achievable rate, smaller ones lose operand reuse.
_AMPERE_TILES: tuple[Tile, ...] = (
    (256.0, 128.0, 1.0), (128.0, 256.0, 1.0), (128.0, 128.0, 0.95),
    (128.0, 64.0, 0.85), (64.0, 128.0, 0.85), (64.0, 64.0, 0.65),
    (64.0, 32.0, 0.45), (32.0, 64.0, 0.45),
)
_HOPPER_TILES: tuple[Tile, ...] = (
    (128.0, 256.0, 1.0), (256.0, 128.0, 1.0), (128.0, 128.0, 0.92),
    (128.0, 64.0, 0.8), (64.0, 128.0, 0.8), (64.0, 64.0, 0.55),
    (64.0, 32.0, 0.4), (32.0, 64.0, 0.4),
)
_SIMT_TILES: tuple[Tile, ...] = (
    (128.0, 128.0, 1.0), (128.0, 64.0, 0.95), (64.0, 64.0, 0.85), (32.0, 32.0, 0.5),
)
_CDNA_TILES: tuple[Tile, ...] = (
    (256.0, 256.0, 1.0), (256.0, 128.0, 0.97), (128.0, 128.0, 0.9),
    (128.0, 64.0, 0.75), (64.0, 64.0, 0.55),
)
# CDNA4 doubles the matrix rate per CU over CDNA3: small tiles lose more of it to operand
# loads, so the relative efficiency of smaller tiles drops further.
_CDNA4_TILES: tuple[Tile, ...] = (
    (256.0, 256.0, 1.0), (256.0, 128.0, 0.9), (128.0, 128.0, 0.75),
    (128.0, 64.0, 0.55), (64.0, 64.0, 0.38),
)

# Xe2 (Battlemage) XMX engines, 8 per Xe-core. No per-tile efficiency has been published for
# Xe2: the menu takes the CDNA shape (large square work-group tiles first; a matrix unit fed
# from shared local memory loses most on small tiles) with one smaller 32x64 step. An
# assumption, not a measurement: a calibration run on the device should refit it.
_XE2_TILES: tuple[Tile, ...] = (
    (256.0, 256.0, 1.0), (256.0, 128.0, 0.97), (128.0, 128.0, 0.9),
    (128.0, 64.0, 0.75), (64.0, 64.0, 0.55), (32.0, 64.0, 0.4),
)
# Xe2 vector engines: 8 per Xe-core, SIMD16 FP32 each (128 FP32 lanes per Xe-core, as an SM).
_XE2_VECTOR_TILES: tuple[Tile, ...] = _SIMT_TILES

_CPU_TILES: tuple[Tile, ...] = (
    (64.0, 64.0, 1.0), (16.0, 64.0, 0.9), (4.0, 64.0, 0.5), (1.0, 64.0, 0.25),
)

# The synchronous MMA path on Hopper: FlashAttention-2 reaches 73 % of the A100's dense
# peak (Dao 2023, abstract: "50-73 % of the theoretical maximum FLOPs/s on A100") and 35 % of
# the H100's (Shah et al. 2024, FlashAttention-3 abstract: "FlashAttention-2 achieving only
# 35 % utilization on the H100 GPU"): 0.35 / 0.73 = 0.48, i.e. the mma.sync path runs at
# ~2048 dense bf16 FLOP/clock/SM as on Ampere, half the 4096 of wgmma (989 TFLOP/s = 132 SMs
# × 1.83 GHz × 4096). Blackwell doubles the dense rate per SM again (B200 2.25 PFLOP/s =
# 148 SMs × ~1.86 GHz × 8192) through tcgen05 only; no figure for its mma.sync path is
# published, so the Hopper rate per SM per clock is assumed, a quarter of the peak.
_HOPPER_SYNC_MMA = 0.5
_BLACKWELL_SYNC_MMA = 0.25

#: The families by ``arch`` name: read-only (a calibrated device changes its own knobs,
#: never the family table).
FAMILIES: Mapping[str, FamilyParams] = MappingProxyType({
    # before Ampere the fused attention PyTorch runs is its memory-efficient backend (the
    # CUTLASS kernel from xformers, built for SM50 on): FlashAttention-2 needs SM80
    "pascal": FamilyParams(tensor_tiles=_SIMT_TILES, vector_tiles=_SIMT_TILES,
                           memory_latency_s=0.7e-6, flash_impl="mem-efficient"),
    "volta": FamilyParams(tensor_tiles=_AMPERE_TILES, vector_tiles=_SIMT_TILES,
                          flash_impl="mem-efficient"),
    "turing": FamilyParams(tensor_tiles=_AMPERE_TILES, vector_tiles=_SIMT_TILES,
                           flash_impl="mem-efficient"),
    "ampere": FamilyParams(tensor_tiles=_AMPERE_TILES, vector_tiles=_SIMT_TILES),
    "ada": FamilyParams(tensor_tiles=_AMPERE_TILES, vector_tiles=_SIMT_TILES),
    "hopper": FamilyParams(tensor_tiles=_HOPPER_TILES, vector_tiles=_SIMT_TILES,
                           flash_impl="flash3", flash_efficiency=0.85,
                           sync_mma_fraction=_HOPPER_SYNC_MMA),
    "blackwell": FamilyParams(tensor_tiles=_HOPPER_TILES, vector_tiles=_SIMT_TILES,
                              flash_impl="flash4", flash_efficiency=0.85,
                              sync_mma_fraction=_BLACKWELL_SYNC_MMA),
    "blackwell-consumer": FamilyParams(tensor_tiles=_AMPERE_TILES, vector_tiles=_SIMT_TILES),
    "cdna1": FamilyParams(tensor_tiles=_CDNA_TILES, vector_tiles=_CDNA_TILES,
                          memory_latency_s=0.8e-6),
    "cdna2": FamilyParams(tensor_tiles=_CDNA_TILES, vector_tiles=_CDNA_TILES,
                          memory_latency_s=0.8e-6),
    "cdna3": FamilyParams(tensor_tiles=_CDNA_TILES, vector_tiles=_CDNA_TILES,
                          memory_latency_s=0.8e-6),
    "cdna4": FamilyParams(tensor_tiles=_CDNA4_TILES, vector_tiles=_CDNA4_TILES,
                          memory_latency_s=0.8e-6),
    # Intel Xe2 (Battlemage: Arc B580, Arc Pro B60). Units are Xe-cores; the matrix unit is
    # the XMX engine (8 per Xe-core). sfu_per_clock: Intel publishes no extended-math rate for
    # Xe2; an Xe-core has 128 FP32 lanes like an NVIDIA SM, so the SM's 16 per clock is assumed.
    # memory_latency_s: GDDR6 behind a last-level cache, no published loaded latency; the
    # CDNA (GPU behind a memory-side cache) figure is used. flash2: Intel's fused attention
    # kernels (IPEX / vLLM-XPU SYCL kernels) are FA2-class, without warp-specialised pipelines.
    # All of these are assumptions, not measurements.
    "xe2": FamilyParams(tensor_tiles=_XE2_TILES, vector_tiles=_XE2_VECTOR_TILES,
                        memory_latency_s=0.8e-6, flash_impl="flash2"),
    # CPU BLAS register-blocks a few rows at a time: skinny tiles keep a matrix-vector
    # product from being padded to 64 rows (it is memory-bound at any of these rates).
    "cpu": FamilyParams(tensor_tiles=_CPU_TILES, vector_tiles=_CPU_TILES,
                        split_k=(1.0,), memory_latency_s=0.1e-6, cta_bandwidth=1.0,
                        gemm_cta_bandwidth=1.0),
})


def family_params(arch: str) -> FamilyParams:
    """Constants of the family ``arch`` (a :class:`HardwareSpec` ``arch`` value)."""
    return FAMILIES[arch]
