"""Hardware spec: a frozen pydantic model of one accelerator, read from YAML.

Every quantity is stored in SI units (FLOP/s, B/s, bytes, Hz, W, s). YAML may write
human units ("989 TFLOP/s", "3.35 TB/s", "50 MiB"); they are parsed once, here.
Peaks are **dense** figures; a sparse figure is only accepted under ``sparse_peak``.
"""

from __future__ import annotations

import difflib
import re
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from perfmodel._errors import PerfmodelError, UnitError
from perfmodel._units import Kind, parse_quantity
from perfmodel.dtypes import DTYPES, DType, bytes_per_element, normalize_dtype
from perfmodel.engines import NVIDIA_ARCHS

__all__ = [
    "PEAK_TOLERANCE",
    "PROVENANCE_KINDS",
    "Calibration",
    "ComputeSpec",
    "DTypePeak",
    "EfficiencySpec",
    "HardwareSpec",
    "InterconnectSpec",
    "LinkSpec",
    "MemorySpec",
    "PricingSpec",
    "content_key",
    "provenance_problems",
    "quantity_kind",
    "spec_fitted_sources",
]

Vendor = Literal["nvidia", "amd", "intel", "google", "cpu"]
Arch = Literal[
    "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "blackwell-consumer",
    "cdna1", "cdna2", "cdna3", "cdna4", "xe2", "cpu",
]
#: The architectures of each vendor (a spec's ``arch`` must be one of its ``vendor``'s);
#: read-only.
VENDOR_ARCHS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "nvidia": NVIDIA_ARCHS,
    "amd": ("cdna1", "cdna2", "cdna3", "cdna4"),
    "intel": ("xe2",),
    "cpu": ("cpu",),
})
ExecUnit = Literal["tensor", "vector"]

#: Tolerance for the cross-check peak ≈ units × clock × FLOPs/clock/unit.
PEAK_TOLERANCE = 0.06


class _QuantityParser:
    """Parses one kind of quantity for pydantic; ``kind`` is kept for :func:`quantity_kind`."""

    def __init__(self, kind: Kind) -> None:
        self.kind: Kind = kind

    def __call__(self, value: object) -> float:
        if isinstance(value, str) and "sparse" in value.lower():
            raise ValueError(
                f"{value!r} is a sparse figure; peaks must be dense "
                "(halve NVIDIA/AMD 'with sparsity' figures, or put the figure under sparse_peak)"
            )
        try:
            return parse_quantity(value, self.kind, field="")
        except UnitError as exc:
            raise ValueError(str(exc)) from None


def _quantity(kind: Kind) -> BeforeValidator:
    return BeforeValidator(_QuantityParser(kind))


def quantity_kind(annotation: object) -> Kind | None:
    """The unit kind of a spec field's annotation (``"bandwidth"`` for ``memory.bandwidth``),
    looking through ``Optional`` and containers; None for fields that are not quantities.

    Pass ``Model.model_fields[name]`` (a FieldInfo) or an annotation.
    """
    stack: list[object] = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, BeforeValidator) and isinstance(item.func, _QuantityParser):
            return item.func.kind
        stack.extend(getattr(item, "metadata", None) or ())
        stack.extend(getattr(item, "__metadata__", None) or ())
        stack.extend(getattr(item, "__args__", None) or ())
        field_annotation = getattr(item, "annotation", None)
        if field_annotation is not None and not isinstance(item, type):
            stack.append(field_annotation)
    return None


FlopRate = Annotated[float, _quantity("flops"), Field(gt=0)]
Bandwidth = Annotated[float, _quantity("bandwidth"), Field(gt=0)]
Bytes = Annotated[float, _quantity("bytes"), Field(gt=0)]
Frequency = Annotated[float, _quantity("frequency"), Field(gt=0)]
Power = Annotated[float, _quantity("power"), Field(gt=0)]
Seconds = Annotated[float, _quantity("time"), Field(ge=0)]
Fraction = Annotated[float, _quantity("ratio"), Field(gt=0, le=1.2)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DTypePeak(_Frozen):
    """Dense peak throughput of one dtype and the unit that runs it."""

    peak: FlopRate
    """Dense peak, FLOP/s (or OP/s for integer dtypes)."""
    unit: ExecUnit = "tensor"
    """Execution unit: ``tensor`` (tensor/matrix cores) or ``vector`` (CUDA cores / SIMD)."""
    flops_per_clock_per_unit: Annotated[float, Field(gt=0)] | None = None
    """Dense FLOPs per clock per SM/CU; when given, peak is cross-checked against it."""
    sparse_peak: FlopRate | None = None
    """2:4 structured-sparse figure, kept for reference only; never used in predictions."""
    full_rate_flops_per_clock_per_unit: Annotated[float, Field(gt=0)] | None = None
    """Dense FLOPs per clock per SM/CU at which the SM design runs this dtype, where this
    product runs it slower by product design (the H20's tensor limit on GH100's SM; GeForce
    cards' FP32-accumulate MMA at half the rate of the same SM in its pro part). The product
    keeps the share peak / (units × clock × this) of the design's tensor rate and all of
    the rest of the SM (operand feeds, softmax, issue): see :meth:`HardwareSpec.tensor_share`."""


class ComputeSpec(_Frozen):
    """Parallel compute units and clocks."""

    units: Annotated[int, Field(gt=0)]
    """SM (NVIDIA), CU (AMD), Xe-core (Intel) or core count."""
    unit_name: Literal["SM", "CU", "Xe-core", "core", "MME", "TensorCore"] = "SM"
    boost_clock: Frequency
    """Maximum boost clock, Hz (vector peaks are quoted at it)."""
    tensor_clock: Frequency | None = None
    """Clock the tensor peaks are quoted at, Hz (H100 SXM: 1.83 GHz); default boost_clock."""
    sustained_clock: Frequency | None = None
    """Clock sustained under a long load where a power cap pulls it lower (T4, L4), Hz."""
    special_function_rate: FlopRate | None = None
    """Special-function (exp) throughput of the whole device, operations/s."""


class MemorySpec(_Frozen):
    """Device memory and on-chip storage."""

    type: str
    capacity: Bytes
    """Device memory capacity, bytes (vendor 'GB' labels are often GiB: see the comment)."""
    bandwidth: Bandwidth
    """Peak device-memory bandwidth, B/s (decimal: 1 TB/s = 1e12 B/s)."""
    l2: Bytes | None = None
    """Last-level (L2) cache size, bytes."""
    l2_partitions: int = Field(default=1, ge=1, le=8)
    """SM-side partitions of the L2 that each cache what the SMs wired to them read (A100:
    two, per its whitepaper; H100 assumed alike, hardware_specs/SOURCES.md D34). Data
    that SMs of every partition read may be held once in each, so a repeated call's
    working set stays resident up to l2 / partitions (× ``l2_capacity_fraction``); 1 for a
    cache that holds each line once."""
    l2_bandwidth: Bandwidth | None = None
    """L2 read bandwidth, B/s, where a measurement or datasheet gives it (otherwise the
    timing model derives it from the SM count and clock: ``family.l2_bytes_per_clock``)."""
    smem_per_unit: Bytes | None = None
    """Maximum shared memory (LDS on AMD) per SM/CU, bytes."""
    register_file_per_unit: Bytes | None = None
    """Register file per SM/CU, bytes. Recorded for reference only: the timing model does
    not use it (tile menus and occupancy come from the architecture family,
    :mod:`perfmodel.timing.family`), so setting it changes no prediction."""
    infinity_cache: Bytes | None = None
    """Memory-side last-level cache (AMD Infinity Cache), bytes. Recorded for reference
    only: the timing model does not use it (warm-call reuse is modelled in ``l2`` alone),
    so setting it changes no prediction."""
    latency: Seconds | None = None
    """Loaded device-memory latency, s: the size-independent term of every device-memory
    transfer, t = bytes / achievable bandwidth + latency (what makes small transfers reach
    less than the achievable bandwidth). Absent: the architecture family's figure
    (``memory_latency_s`` in :mod:`perfmodel.timing.family`)."""


class LinkSpec(_Frozen):
    """One kind of link; bandwidths are per direction."""

    name: str
    bandwidth_per_direction: Bandwidth
    latency: Seconds | None = None
    peer_switch: bool = False
    """For a host (PCIe) link: the GPUs reach each other peer to peer through PCIe switches,
    each at its own link's rate (the switch boards of 8-GPU PCIe servers). False: their
    traffic shares the host's fabric, and each GPU's share shrinks as more GPUs take part
    (the law fitted on a measured 8 × L40S server, :mod:`perfmodel.timing.comm`)."""


class InterconnectSpec(_Frozen):
    gpu_link: LinkSpec | None = None
    """GPU-to-GPU link (NVLink, Infinity Fabric); absent on PCIe-only cards."""
    host_link: LinkSpec | None = None


class PricingSpec(_Frozen):
    """An editable assumption, not a fact: cloud price per GPU-hour."""

    usd_per_hour: Annotated[float, Field(gt=0)]
    assumption: str
    """Where the figure comes from and when; prices change, override freely."""


class EfficiencySpec(_Frozen):
    """Default achievable fractions and fixed costs (spec-only predictions use these).

    ``compute`` maps a dtype name, ``tensor``, ``vector`` or ``default`` to the fraction of
    dense peak a large, well-shaped kernel sustains; lookup order is dtype, unit, default.
    """

    compute: dict[str, Fraction] = Field(default_factory=lambda: {"default": 0.8})
    memory: Fraction = 0.85
    """Fraction of peak device-memory bandwidth a large streaming kernel sustains."""
    kernel_overhead: Seconds = 3e-6
    """Fixed cost of one kernel (launch, prologue, tail), s."""
    provenance: dict[str, str] = Field(default_factory=dict)
    """Where each figure came from, keyed by figure (``compute.fp32``, ``memory``,
    ``kernel_overhead``, ``sustained_clock`` for ``compute.sustained_clock``); each value
    starts with its kind: ``datasheet``, ``cited: <source>``, ``family: <sibling id>``,
    ``fitted: <dataset file> (<script>)`` or ``assumed: <reason>``
    (:mod:`perfmodel.hardware.provenance`)."""

    @model_validator(mode="after")
    def _check_keys(self) -> EfficiencySpec:
        allowed = {*DTYPES, "tensor", "vector", "default"}
        bad = sorted(set(self.compute) - allowed)
        if bad:
            raise ValueError(
                f"unknown key(s) {bad} in efficiency.compute; use dtype names, 'tensor', "
                "'vector' or 'default'"
            )
        return self

    def compute_fraction(self, dtype: DType, unit: ExecUnit) -> float:
        """Achievable fraction of dense peak for ``dtype`` on ``unit``."""
        for key in (dtype, unit, "default"):
            if key in self.compute:
                return self.compute[key]
        return 0.8


class Calibration(_Frozen):
    """Parameters fitted from measurements, with provenance (written by ``calibrate fit``)."""

    date: str
    device: str
    environment: dict[str, str] = Field(default_factory=dict)
    points: Annotated[int, Field(ge=0)]
    params: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Fitted parameters per op family key (e.g. ``gemm/bf16``)."""
    error_before: dict[str, float] = Field(default_factory=dict)
    error_after: dict[str, float] = Field(default_factory=dict)
    residuals: dict[str, list[list[float]]] = Field(default_factory=dict)
    """Optional residual correction tables per family: rows of (log-size, log-ratio)."""
    constants: dict[str, float] = Field(default_factory=dict)
    """Model constants (:mod:`perfmodel.timing.constants`: kernel-family rates, per-tile
    and fixed costs, per-CTA bandwidth...) fitted to this device's measurements; they
    replace the bundled values in this profile's predictions."""
    provenance: dict[str, str] = Field(default_factory=dict)
    """Where each calibrated value came from (``params.<key>.<name>``,
    ``constants.<name>``, ``device.<figure>``): fitted here, carried from another
    device's calibration by ``calibrate transfer``, or left at the spec's value."""


#: Kinds a provenance text may start with (``kind`` or ``kind: detail``).
PROVENANCE_KINDS = ("datasheet", "cited", "family", "fitted", "assumed")
_KINDS_NEEDING_DETAIL = ("cited", "family", "fitted", "assumed")
_SPEC_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


def provenance_problems(text: str) -> str | None:
    """What is wrong with one provenance text (None when it is well formed)."""
    kind, _, detail = text.partition(":")
    kind, detail = kind.strip(), detail.strip()
    if kind not in PROVENANCE_KINDS:
        close = difflib.get_close_matches(kind, PROVENANCE_KINDS, n=1)
        hint = f" (did you mean '{close[0]}:'?)" if close else ""
        kinds = ", ".join(f"'{k}:'" for k in PROVENANCE_KINDS)
        return f"{text!r} does not say its kind; start it with one of {kinds}{hint}"
    if kind in _KINDS_NEEDING_DETAIL and not detail:
        example = {"cited": "cited: [S1]", "family": "family: h100-sxm",
                   "fitted": "fitted: neusight_fp32_gemm.csv (scripts/fit_spec_figures.py)",
                   "assumed": "assumed: <why this value>"}[kind]
        return f"'{kind}' needs a detail, e.g. '{example}'"
    if kind == "family" and not _SPEC_ID.match(detail):
        return f"'family:' names a spec id (e.g. 'family: h100-sxm'), got {detail!r}"
    return None


_BLOCKS_NEEDING_SOURCES = ("peaks", "compute", "memory", "interconnect", "power", "efficiency")


class HardwareSpec(_Frozen):
    """One accelerator. Load with :func:`perfmodel.load_hardware`."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")]
    name: str
    vendor: Vendor
    arch: Arch
    """Architecture family; selects the family defaults of the timing model (tile menus...)."""
    form_factor: str = ""
    launch_year: Annotated[int, Field(ge=2000, le=2100)] | None = None
    compute: ComputeSpec
    peaks: dict[DType, DTypePeak]
    """Dense peak per dtype; a dtype absent here is unsupported on this device."""
    memory: MemorySpec
    interconnect: InterconnectSpec = Field(default_factory=InterconnectSpec)
    tdp: Power | None = None
    """Board power (TDP/TBP), W."""
    pricing: PricingSpec | None = None
    efficiency: EfficiencySpec = Field(default_factory=EfficiencySpec)
    sources: dict[str, str]
    """Citation per block (``peaks``, ``memory``...) or per dotted field (``memory.l2``)."""
    notes: str = ""
    calibration: Calibration | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalize_peak_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("peaks"), dict):
            peaks: dict[str, Any] = {}
            spelled: dict[str, object] = {}
            for key, value in data["peaks"].items():
                try:
                    dt = normalize_dtype(key, field=f"peaks.{key}")
                except ValueError:
                    raise ValueError(
                        f"peaks.{key}: unknown dtype {key!r}; use one of {', '.join(DTYPES)}"
                    ) from None
                if dt in peaks:
                    raise ValueError(
                        f"peaks.{key}: {key!r} and {spelled[dt]!r} are both {dt}; keep one"
                    )
                peaks[dt] = value
                spelled[dt] = key
            data = {**data, "peaks": peaks}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> HardwareSpec:
        problems: list[str] = []
        if not self.peaks:
            problems.append("peaks: at least one dtype peak is required")
        archs = VENDOR_ARCHS.get(self.vendor)
        if archs is not None and self.arch not in archs:
            problems.append(f"arch: {self.arch!r} is not an architecture of vendor "
                            f"{self.vendor!r} (the engines' and kernels' choices follow it); "
                            f"use one of {', '.join(archs)}, or fix vendor")
        for dt, pk in self.peaks.items():
            full = pk.full_rate_flops_per_clock_per_unit
            if full is not None and pk.unit != "tensor":
                problems.append(f"peaks.{dt}.full_rate_flops_per_clock_per_unit: only a "
                                "tensor peak can run below its SM design's rate (remove it)")
            elif full is not None and self._design_share(dt) > 1.0 + PEAK_TOLERANCE:
                problems.append(
                    f"peaks.{dt}.full_rate_flops_per_clock_per_unit: units x clock x "
                    f"{full:g} is below the peak ({pk.peak / 1e12:.1f} TFLOP/s); it is the "
                    "SM design's full rate, at least the product's own FLOPs per clock")
            if pk.sparse_peak is not None and abs(pk.sparse_peak / pk.peak - 1.0) \
                    <= PEAK_TOLERANCE:
                problems.append(
                    f"peaks.{dt}.peak: {pk.peak / 1e12:.1f} TFLOP/s is its own sparse_peak "
                    f"({pk.sparse_peak / 1e12:.1f}): it looks like the 2:4-sparse figure; give "
                    "the dense figure (half of it)")
            elif pk.sparse_peak is not None and pk.sparse_peak < pk.peak:
                problems.append(f"peaks.{dt}.sparse_peak: smaller than the dense peak")
            if pk.flops_per_clock_per_unit is None:
                continue
            expected = self.compute.units * self._peak_clock(pk) * pk.flops_per_clock_per_unit
            ratio = pk.peak / expected
            if abs(ratio - 2.0) <= 2 * PEAK_TOLERANCE:
                problems.append(
                    f"peaks.{dt}.peak: {pk.peak / 1e12:.1f} TFLOP/s is {ratio:.2f}x units x "
                    f"clock x FLOPs/clock ({expected / 1e12:.1f} TFLOP/s): it looks like a sparse "
                    "figure; give the dense figure (put the sparse one under sparse_peak)"
                )
            elif abs(ratio - 1.0) > PEAK_TOLERANCE:
                problems.append(
                    f"peaks.{dt}.peak: {pk.peak / 1e12:.1f} TFLOP/s disagrees with units x clock "
                    f"x FLOPs/clock = {expected / 1e12:.1f} TFLOP/s by "
                    f"{abs(ratio - 1) * 100:.0f}%; check the SM count, the clock the peak is "
                    "quoted at, or FLOPs/clock"
                )
        present = {"peaks", "compute", "memory"}
        if "efficiency" in self.model_fields_set:
            present.add("efficiency")
        if self.interconnect.gpu_link or self.interconnect.host_link:
            present.add("interconnect")
        if self.tdp is not None:
            present.add("power")
        cited = {key.split(".")[0] for key, text in self.sources.items() if text.strip()}
        known = {*type(self).model_fields, "power", "all"}
        for key in sorted(cited - known):
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = (f"did you mean '{close[0]}'?" if close
                    else f"use one of {', '.join(sorted(known))}")
            problems.append(f"sources.{key}: not a block of the spec; {hint}")
        problems.extend(self._provenance_problems())
        if "all" not in cited:
            missing = sorted(b for b in _BLOCKS_NEEDING_SOURCES if b in present and b not in cited)
            if missing:
                problems.append(
                    f"sources: no citation for {', '.join(missing)}; add e.g. "
                    f"'{missing[0]}: <datasheet or URL>' under sources"
                )
        if problems:
            # One problem per line; the catalogue's error formatter splits them again.
            raise ValueError("\n".join(problems))
        return self

    def _provenance_problems(self) -> list[str]:
        figures = self.efficiency_figures()
        problems: list[str] = []
        for key, text in self.efficiency.provenance.items():
            where = f"efficiency.provenance.{key}"
            if key not in figures:
                close = difflib.get_close_matches(key, sorted(figures), n=1)
                hint = (f"did you mean '{close[0]}'?" if close
                        else f"use one of {', '.join(sorted(figures))}")
                problems.append(f"{where}: names no figure of the spec; {hint}")
                continue
            problem = provenance_problems(text)
            if problem is not None:
                problems.append(f"{where}: {problem}")
        return problems

    def efficiency_figures(self) -> dict[str, float]:
        """The figures that need a provenance, by provenance key: ``compute.<key>`` for each
        entry of ``efficiency.compute``, ``memory``, ``kernel_overhead`` (s) and
        ``sustained_clock`` (Hz, ``compute.sustained_clock``) where it is set."""
        out = {f"compute.{key}": value for key, value in self.efficiency.compute.items()}
        out["memory"] = self.efficiency.memory
        out["kernel_overhead"] = self.efficiency.kernel_overhead
        if self.compute.sustained_clock is not None:
            out["sustained_clock"] = self.compute.sustained_clock
        return out

    # ----------------------------------------------------------------- derived values
    def supports(self, dtype: str) -> bool:
        """True if the device has a peak for ``dtype``."""
        return normalize_dtype(dtype) in self.peaks

    def peak(self, dtype: str) -> float:
        """Dense datasheet peak of ``dtype``, FLOP/s; raises if unsupported."""
        dt = normalize_dtype(dtype)
        if dt not in self.peaks:
            have = ", ".join(self.peaks)
            raise PerfmodelError(
                "dtype", f"{self.id} has no {dt} peak (unsupported on this device)",
                f"use one of {have}",
            )
        return self.peaks[dt].peak

    def _peak_clock(self, pk: DTypePeak) -> float:
        """The clock ``pk`` is quoted at: the tensor clock for a tensor peak where the spec
        gives one, else the boost clock."""
        if pk.unit == "tensor" and self.compute.tensor_clock is not None:
            return self.compute.tensor_clock
        return self.compute.boost_clock

    def _design_share(self, dt: DType) -> float:
        pk = self.peaks[dt]
        if pk.full_rate_flops_per_clock_per_unit is None:
            return 1.0
        return pk.peak / (self.compute.units * self._peak_clock(pk)
                          * pk.full_rate_flops_per_clock_per_unit)

    def tensor_share(self, dtype: str) -> float:
        """Share of its SM design's tensor rate this product runs ``dtype`` at:
        peak / (units × tensor clock × ``full_rate_flops_per_clock_per_unit``), at most 1;
        1 where the spec gives no full rate (the product is the design)."""
        self.peak(dtype)  # raises the unsupported-dtype error
        return min(1.0, self._design_share(normalize_dtype(dtype)))

    def ridge_point(self, dtype: str) -> float:
        """Datasheet ridge point of ``dtype``: dense peak / memory bandwidth, FLOP/byte."""
        return self.peak(dtype) / self.memory.bandwidth

    @staticmethod
    def bytes_per_element(dtype: str) -> float:
        """Bytes per element of ``dtype`` (fp4: 0.5)."""
        return bytes_per_element(dtype)

    @property
    def price_per_hour(self) -> float | None:
        """Assumed price per hour (USD) or None."""
        return self.pricing.usd_per_hour if self.pricing else None


def spec_fitted_sources(spec: HardwareSpec) -> frozenset[str]:
    """The measurement sources (``source`` column values) any of ``spec``'s own figures were
    fitted on, from its ``efficiency.provenance``
    (:func:`perfmodel.hardware.provenance.fitted_sources`)."""
    from perfmodel.hardware.provenance import fitted_sources  # imports this module

    return fitted_sources(spec)


#: id(spec) -> (weak reference to the spec, its content key): a spec object's key is
#: computed once; the weak reference proves the entry belongs to this object (an id may be
#: reused after the object is gone, and the entry is dropped when it goes).
_KEYS: dict[int, tuple[weakref.ref[HardwareSpec], str]] = {}


def content_key(spec: HardwareSpec) -> str:
    """A key equal for specs of equal content and different otherwise (the spec as JSON),
    for caches of values derived from a spec: specs are frozen, so two equal specs give
    equal derived values whatever object they are."""
    entry = _KEYS.get(id(spec))
    if entry is not None and entry[0]() is spec:
        return entry[1]
    key = spec.model_dump_json()
    ident = id(spec)
    _KEYS[ident] = (weakref.ref(spec, lambda _ref: _KEYS.pop(ident, None)), key)
    return key
