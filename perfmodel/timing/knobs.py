"""Effective model parameters for one (device, op family, dtype): spec defaults, then any
calibrated values from the spec's ``calibration`` block.

Calibration parameter names (all optional, per key ``"<family>/<dtype>"`` or ``"<family>"``):

- ``compute_fraction``: achievable fraction of dense peak (replaces the spec default);
- ``memory_fraction``: achievable fraction of peak bandwidth;
- ``overhead_s``: fixed cost per kernel, s;
- ``overlap_p``: p of the smooth maximum (t_c^p + t_m^p)^(1/p); absent = hard max;
- ``attention_efficiency``: fused-attention tensor efficiency relative to compute_fraction;
- ``fill_waves``: how many times a GEMM pays its wave's non-overlapped tile fill/drain
  (multiplies it; family default 1);
- ``cta_bandwidth``: bandwidth one CTA can pull, a multiple of the fair share BW/units;
- ``tile_efficiency_exponent``: a, GEMM tile efficiencies e of the family menu become e^a
  (a > 1: small tiles lose more of the rate; default 1);
- ``fa2_softmax_overlap``, ``fa3_softmax_overlap``: overlap of softmax with the matrix
  work in fused attention, 0–1, of the FA2-class kernels (softmax serialised with the MMAs)
  and of the FA3-class ones (overlapped) apart; ``softmax_overlap`` (profiles written
  before the split) sets both;
- ``paged_prefill_efficiency``: rate of the paged-KV kernel in prefill relative to the
  dense fused kernel.

Absent parameters keep the family defaults (:mod:`perfmodel.timing.family`), so an
uncalibrated spec predicts exactly as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.dtypes import DType
from perfmodel.hardware.spec import HardwareSpec, content_key
from perfmodel.timing.constants import REFERENCE_CLOCK_HZ
from perfmodel.timing.family import FamilyParams, family_params

__all__ = ["Knobs", "clock_scale", "knobs_for"]

OpFamily = str  # "gemm", "attention", "stream", "comm"


@dataclass(frozen=True)
class Knobs:
    """Numbers the timing formulas use for one device, op family and dtype."""

    peak: float
    """Dense datasheet peak of the dtype, FLOP/s."""
    rate: float
    """Achievable matrix rate = peak × clock ratio × compute fraction, FLOP/s."""
    unit: str
    """Execution unit of the dtype (tensor or vector)."""
    bandwidth: float
    """Datasheet memory bandwidth, B/s."""
    achievable_bandwidth: float
    """Bandwidth × memory fraction, B/s."""
    overhead_s: float
    vector_op_rate: float
    """Vector (non-FMA) operations per second: fp32 peak / 2."""
    sfu_rate: float
    """Special-function results per second."""
    units: int
    l2_bytes: float
    l2_partitions: float
    """SM-side L2 partitions that may each hold a copy of shared data (spec, default 1)."""
    l2_bandwidth: float
    """Peak L2 read bandwidth, B/s (spec figure, or units × clock × the family's bytes per
    clock per unit)."""
    smem_per_unit: float
    overlap_p: float
    attention_efficiency: float
    family: FamilyParams
    arch: str = ""
    """Architecture family of the device (picks per-architecture constants)."""
    fill_waves: float = 1.0
    """Tile fill/drain paid per this many waves (family default or calibrated)."""
    cta_bandwidth: float = 1.5
    """Per-CTA bandwidth, multiple of the fair share BW/units."""
    calibrated_cta_bandwidth: float | None = None
    """``cta_bandwidth`` where the spec's calibration sets it (None: not calibrated; a
    GEMM then takes the model constant, :func:`perfmodel.timing.kernels.gemm_cta_bandwidth`)."""
    tile_exponent: float = 1.0
    """Exponent applied to the relative efficiencies of the GEMM tile menu."""
    softmax_overlap: float = 0.5
    """Softmax/MMA overlap of FA2-class kernels."""
    fa3_softmax_overlap: float = 0.8
    """Softmax/MMA overlap of FA3-class kernels."""
    paged_prefill_efficiency: float = 0.65
    """Paged-KV prefill rate relative to the dense fused kernel."""
    memory_latency_s: float = 0.6e-6
    """Loaded device-memory latency, s: the size-independent term of a transfer
    (``memory.latency`` of the spec where it gives one, else the family's)."""
    clock_scale: float = 1.0
    """Reference SM clock / the device's (:func:`clock_scale`): the factor from the model's
    fixed times, stated at the reference clock, to this device's."""
    tensor_share: float = 1.0
    """Share of its SM design's tensor rate the device runs the dtype at
    (:meth:`perfmodel.hardware.spec.HardwareSpec.tensor_share`; 1 for the design itself)."""


def _clock_ratio(hw: HardwareSpec, unit: str) -> float:
    quoted = hw.compute.tensor_clock or hw.compute.boost_clock
    if unit != "tensor":
        quoted = hw.compute.boost_clock
    sustained = hw.compute.sustained_clock
    return min(1.0, sustained / quoted) if sustained else 1.0


def clock_scale(hw: HardwareSpec) -> float:
    """REFERENCE_CLOCK_HZ / the SM clock of ``hw`` (boost clock, or the sustained clock
    where the spec gives a lower one): fixed times stated at the reference clock take
    this factor on ``hw``."""
    return REFERENCE_CLOCK_HZ / (hw.compute.boost_clock * _clock_ratio(hw, "vector"))


#: Resolved knobs by (spec content, op family, dtype): specs are frozen, so equal content
#: gives equal knobs whatever object it is; bounded (cleared past 1,024 entries).
_CACHE: dict[tuple[str, str, str], Knobs] = {}
_CACHE_MAX = 1024


def knobs_for(hw: HardwareSpec, op_family: OpFamily, dtype: DType) -> Knobs:
    """Resolve the effective parameters; raises if ``dtype`` is unsupported on ``hw``.

    Results are memoised by the spec's content (:func:`perfmodel.hardware.spec.content_key`).
    """
    key = (content_key(hw), op_family, dtype)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    knobs = _resolve(hw, op_family, dtype)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = knobs
    return knobs


def _resolve(hw: HardwareSpec, op_family: OpFamily, dtype: DType) -> Knobs:
    fam = family_params(hw.arch)
    peak = hw.peak(dtype)
    spec_peak = hw.peaks[dtype]
    unit = spec_peak.unit
    fraction = hw.efficiency.compute_fraction(dtype, unit)
    mem_fraction = hw.efficiency.memory
    overhead = hw.efficiency.kernel_overhead
    overlap_p = math.inf
    attn_eff = fam.flash_efficiency
    fill_waves, cta_bw, tile_exp = fam.fill_waves, fam.cta_bandwidth, 1.0
    cta_cal: float | None = None
    soft_ov, fa3_ov = fam.softmax_overlap, fam.fa3_softmax_overlap
    paged = fam.paged_prefill_efficiency
    cal = hw.calibration
    if cal is not None:
        for key in (op_family, f"{op_family}/{dtype}"):
            params = cal.params.get(key, {})
            fraction = params.get("compute_fraction", fraction)
            mem_fraction = params.get("memory_fraction", mem_fraction)
            overhead = params.get("overhead_s", overhead)
            overlap_p = params.get("overlap_p", overlap_p)
            attn_eff = params.get("attention_efficiency", attn_eff)
            fill_waves = params.get("fill_waves", fill_waves)
            cta_cal = params.get("cta_bandwidth", cta_cal)
            tile_exp = params.get("tile_efficiency_exponent", tile_exp)
            if "softmax_overlap" in params:
                soft_ov = fa3_ov = params["softmax_overlap"]
            soft_ov = params.get("fa2_softmax_overlap", soft_ov)
            fa3_ov = params.get("fa3_softmax_overlap", fa3_ov)
            paged = params.get("paged_prefill_efficiency", paged)
    cta_bw = cta_bw if cta_cal is None else cta_cal
    clock = _clock_ratio(hw, unit)
    if "fp32" in hw.peaks and hw.peaks["fp32"].unit == "vector":
        vec_peak = hw.peaks["fp32"].peak
    else:
        vec_peak = hw.compute.units * hw.compute.boost_clock * 128.0
    sfu = hw.compute.special_function_rate or (
        hw.compute.units * hw.compute.boost_clock * fam.sfu_per_clock)
    return Knobs(
        peak=peak, rate=peak * clock * fraction, unit=unit, bandwidth=hw.memory.bandwidth,
        achievable_bandwidth=hw.memory.bandwidth * mem_fraction, overhead_s=overhead,
        vector_op_rate=vec_peak * _clock_ratio(hw, "vector") * 0.5,
        sfu_rate=sfu * _clock_ratio(hw, "vector"), units=hw.compute.units,
        l2_bytes=hw.memory.l2 or 0.0, l2_partitions=float(hw.memory.l2_partitions),
        l2_bandwidth=hw.memory.l2_bandwidth or (hw.compute.units * hw.compute.boost_clock
                                                * fam.l2_bytes_per_clock),
        smem_per_unit=hw.memory.smem_per_unit or 64 * 1024.0,
        overlap_p=overlap_p, attention_efficiency=attn_eff, family=fam, arch=hw.arch,
        fill_waves=fill_waves, cta_bandwidth=cta_bw, calibrated_cta_bandwidth=cta_cal,
        tile_exponent=tile_exp,
        softmax_overlap=soft_ov, fa3_softmax_overlap=fa3_ov, paged_prefill_efficiency=paged,
        memory_latency_s=(hw.memory.latency if hw.memory.latency is not None
                          else fam.memory_latency_s),
        clock_scale=clock_scale(hw),
        tensor_share=hw.tensor_share(dtype),  # 1 for a vector peak (spec-checked)
    )
