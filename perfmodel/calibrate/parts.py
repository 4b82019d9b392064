"""What a calibration is made of: properties of the device, properties of the kernel family
or architecture, and local corrections — and the fit of the family part (model constants)
to one device's measurements.

A calibrated profile (:mod:`perfmodel.calibrate.profile`) holds three kinds of values:

- **device** (:data:`DEVICE_PARAMS`, :func:`is_device_constant`): the achievable fractions
  of the datasheet compute peak and bandwidth (``compute_fraction``, ``memory_fraction``)
  and the host's dispatch time of eager calls (``host.*`` constants: the CPU that hosts
  the GPU sets it). They belong to one card in one machine;
- **family** (:data:`FAMILY_PARAMS` and every other model constant of
  :mod:`perfmodel.timing.constants`): how a kernel family runs on an architecture — GEMM
  tile efficiencies and fill, per-CTA bandwidth, softmax overlap, the kernel families'
  rates relative to the device's achievable rate, their per-tile and fixed costs, the
  graph floor of a kernel, engines' bookkeeping kernels. Relative figures (rates as a
  multiple of the device's achievable rate, bandwidth as a multiple of the fair share)
  are what make them portable;
- **local** corrections (residual tables over log shape): what neither explains.

``calibrate transfer`` (:mod:`perfmodel.calibrate.transfer`) carries the family part to
another spec and leaves the device part at that spec's values.

:func:`fit_family_constants` fits the model constants that move a device's rows, starting
from the bundled table (or another), by block coordinate descent
(:func:`perfmodel.calibrate.constants.fit_blocks`). Only the most specific constant of
each chain of refinements moves a row set (``attn.flash3.efficiency.hopper.vllm`` rather
than its parents), so a device's calibration never rewrites what other architectures or
engines inherit; constants the rows do not move are left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.data import Dataset
from perfmodel.calibrate.fit import (
    PARAMETERS,
    FitResult,
    KeyFit,
    apply_params,
    errors_before_after,
    fit_family,
    fit_residuals,
    residual_mode,
    uncalibrated,
)
from perfmodel.engines import ENGINES, normalize_engine
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.attention import Attention
from perfmodel.ops.gemm import Gemm
from perfmodel.timing.constants import ARCH_FAMILIES, PARAMS, Constants, bundled_constants
from perfmodel.validation import Prepared

__all__ = ["DEVICE_PARAMS", "FAMILY_PARAMS", "NEVER_FITTED", "anchor_mask", "base_constants",
           "candidate_constants", "fit_family_constants", "fit_parts", "is_device_constant",
           "specific_constants", "without_constants"]

#: Calibration knobs (:mod:`perfmodel.timing.knobs`) that are properties of the device.
DEVICE_PARAMS: tuple[str, ...] = ("compute_fraction", "memory_fraction")
#: Knobs that are properties of the kernel family on the architecture: fixed cost per
#: kernel, overlap sharpness, the fused-attention rate relative to the GEMM rate, tile
#: fill, per-CTA bandwidth, tile efficiencies, softmax overlap, the paged prefill rate.
FAMILY_PARAMS: tuple[str, ...] = ("overhead_s", "overlap_p", "attention_efficiency",
                                  "fill_waves", "cta_bandwidth", "tile_efficiency_exponent",
                                  "softmax_overlap", "fa2_softmax_overlap",
                                  "fa3_softmax_overlap", "paged_prefill_efficiency")
#: Constants no calibration fits: the plain GEMM library's rate is the device's achievable
#: fraction itself (fitted as ``compute_fraction``, a device figure), so a family rate of
#: its own would make the two indistinguishable.
NEVER_FITTED: frozenset[str] = frozenset({"gemm.auto.none.efficiency"})


def is_device_constant(name: str) -> bool:
    """Whether model constant ``name`` is a property of the measured machine rather than
    of a kernel family: the host dispatch time of eager calls (``host.*``)."""
    return name.startswith("host.")


def base_constants(hw: HardwareSpec, base: Constants | None = None) -> Constants:
    """The constants ``hw``'s predictions use: ``base`` (default: the bundled table) with
    the model constants of ``hw``'s calibration, if any."""
    consts = base if base is not None else bundled_constants()
    if hw.calibration is not None and hw.calibration.constants:
        consts = consts.with_values(hw.calibration.constants, "calibrated profile")
    return consts


def without_constants(hw: HardwareSpec) -> HardwareSpec:
    """``hw`` with no calibrated model constants (its other calibrated values kept)."""
    if hw.calibration is None or not hw.calibration.constants:
        return hw
    cal = hw.calibration.model_copy(update={"constants": {}})
    return hw.model_copy(update={"calibration": cal})


def _segments(name: str) -> list[str]:
    return name.split(".")


def candidate_constants(archs: Iterable[str], engines: Iterable[str],
                        ops: Iterable[str] | None = None) -> list[str]:
    """Declared constants that can move rows of architectures ``archs``, engines
    ``engines`` and (if given) ops ``ops`` (``gemm``, ``attention``...): names that refine
    another architecture, engine or op are left out, as are :data:`NEVER_FITTED`."""
    archs, engines = set(archs), set(engines)
    op_set = None if ops is None else set(ops)
    other_archs = set(ARCH_FAMILIES) - archs
    known_engines = set(ENGINES)
    out = []
    for name in PARAMS:
        if name in NEVER_FITTED:
            continue
        seg = _segments(name)
        if other_archs & set(seg):
            continue
        if seg[0] in ("call", "row", "host") and seg[1] not in engines:
            continue
        if seg[0] == "attn" and seg[-1] in known_engines and seg[-1] not in engines:
            continue
        if op_set is not None:
            kind = seg[2].split("-")[0] if seg[0] in ("call", "row") else seg[0]
            if kind in ("gemm", "attn", "attention") and \
                    {"gemm": "gemm", "attn": "attention"}.get(kind, kind) not in op_set:
                continue
        out.append(name)
    return out


def _kernels_filter(names: list[str], prep: Prepared) -> list[str]:
    """``names`` less the GEMM constants of kernel families and schemes no row runs, and
    the attention constants of families no row runs (when every family is known)."""
    gemms = {(b.op.impl, b.op.quant) for b in prep.batches if isinstance(b.op, Gemm)}
    attns = {str(b.op.impl) for b in prep.batches if isinstance(b.op, Attention)}
    quants = {q for _, q in gemms}
    keep = []
    for name in names:
        seg = _segments(name)
        if seg[0] == "gemm" and len(seg) == 4 and (seg[1], seg[2]) not in gemms:
            continue
        if seg[0] in ("call", "row") and seg[2].startswith("gemm-") and \
                seg[2][len("gemm-"):].removesuffix("_s") not in quants:
            continue
        if seg[0] == "attn" and "flash" not in attns and \
                seg[1] not in attns | {"persistent", "resident"}:
            continue
        keep.append(name)
    return keep


def _ancestors(name: str) -> set[str]:
    out: set[str] = set()
    parent = PARAMS[name].parent
    while parent is not None and parent not in out:
        out.add(parent)
        parent = PARAMS[parent].parent
    return out


def specific_constants(moved: dict[str, npt.NDArray[np.bool_]]) -> list[str]:
    """Of constants that move rows (name -> rows moved), the most specific of each chain
    of refinements: a constant is dropped when a refinement of it moves the same rows."""
    keep = []
    for name, rows in moved.items():
        shadowed = any(name in _ancestors(other) and np.array_equal(rows, other_rows)
                       for other, other_rows in moved.items() if other != name)
        if not shadowed:
            keep.append(name)
    return sorted(keep)


def fit_family_constants(data: Dataset | Prepared, hw: HardwareSpec,
                         base: Constants | None = None, *, cycles: int = 2,
                         names: Iterable[str] | None = None,
                         progress: Callable[[str], None] | None = None
                         ) -> dict[str, float]:
    """Fit the model constants that move the rows of ``data`` on ``hw`` (the most specific
    of each chain, :func:`specific_constants`), starting from ``base`` (default: the
    bundled table with ``hw``'s calibrated constants). Returns {name: fitted value}; empty
    when no constant moves a row."""
    from perfmodel.calibrate.constants import fit_blocks, sensitive_constants

    prep = data.prepared(hw)[0] if isinstance(data, Dataset) else data
    if not prep.rows:
        return {}
    start = base_constants(hw, base)
    # predicted with hw's other calibrated values; its constants are the starting point
    # (left in the spec, they would override every trial value)
    plain = without_constants(hw)
    prep = dataclasses.replace(prep, batches=tuple(dataclasses.replace(b, spec=plain)
                                                   for b in prep.batches))
    if names is None:
        # a row without an engine is a direct kernel call: the ``none`` configuration
        engines = {normalize_engine(r.engine) for r in prep.rows}
        names = _kernels_filter(candidate_constants({hw.arch}, engines,
                                                    {r.op for r in prep.rows}), prep)
    moved = sensitive_constants(prep, list(names), start)
    fit_names = specific_constants(moved)
    if not fit_names:
        return {}
    result = fit_blocks(prep, fit_names, start, f"fitted: {hw.id} measurements", cycles,
                        progress)
    return {n: float(result.constants[n]) for n in fit_names}


def anchor_mask(data: Dataset, hw: HardwareSpec) -> npt.NDArray[np.bool_]:
    """Rows that measure the device itself: GEMMs of the plain library path (``impl``
    auto, no quantization: their rate is the device's achievable fraction, no family
    constant of their own) and streaming ops (bandwidth). Device figures are fitted on
    these alone, so that kernel families' constants stay relative to them."""
    prep, where = data.prepared(hw)
    mask = np.zeros(len(data), dtype=bool)
    for b in prep.batches:
        op = b.op
        plain_gemm = isinstance(op, Gemm) and op.impl == "auto" and op.quant == "none"
        if plain_gemm or not isinstance(op, (Gemm, Attention)):
            mask[where[b.index]] = True
    return mask


def fit_parts(data: Dataset, hw: HardwareSpec, *, base: Constants | None = None,
              residual: str = "gp", cycles: int = 2, prior: float = 0.1,
              progress: Callable[[str], None] | None = None) -> FitResult:
    """A calibration of ``hw`` from ``data`` in its three parts (module docstring):

    1. device figures: the basic parameters (:data:`perfmodel.calibrate.fit.PARAMETERS`:
       compute and memory fractions, with the fixed cost and overlap of those kernels)
       of each (family, dtype) of the anchor rows (:func:`anchor_mask`), robust least
       squares with prior weight ``prior``;
    2. family constants: :func:`fit_family_constants` on every row, with 1 applied;
    3. local corrections: residual tables of mode ``residual`` (``"off"`` for none) on
       what 1 and 2 leave.

    ``base`` replaces the bundled model constants (e.g. a table fitted without this
    device). Returns a :class:`~perfmodel.calibrate.fit.FitResult` whose ``constants``
    are the fitted family constants and ``provenance`` says what was fitted on what.
    """
    if len(data) == 0:
        raise PerfmodelError("measurements", "no rows to fit", "measure some kernels first")
    plain = without_constants(uncalibrated(hw))
    spec = plain
    keys: list[KeyFit] = []
    skipped: list[tuple[str, str]] = []
    provenance: dict[str, str] = {}
    anchors = anchor_mask(data, plain)
    anchor_data = data.where(anchors)
    for family, dtype in sorted({(r.family, r.dtype) for r in anchor_data.rows}):
        if family not in PARAMETERS:
            continue
        sub = anchor_data.where(anchor_data.family_mask(family, dtype))
        try:
            kf = fit_family(spec, sub, family, dtype, prior=prior, constants=base)
        except PerfmodelError as exc:
            skipped.append((f"{family}/{dtype}", str(exc)))
            continue
        keys.append(kf)
        spec = apply_params(spec, {kf.key: kf.params})
        for name in kf.params:
            provenance[f"params.{kf.key}.{name}"] = (
                f"fitted: {len(sub)} {family} rows of the plain path (device anchors)")
    # the device figures hold for every op family: the compute fraction of each dtype
    # from the plain GEMMs, the bandwidth fraction from the streams (else the GEMMs)
    compute = {k.key.split("/")[1]: k.params["compute_fraction"] for k in keys
               if k.key.startswith("gemm/") and "compute_fraction" in k.params}
    memory = [k.params["memory_fraction"] for k in keys
              if k.key.startswith("stream/") and "memory_fraction" in k.params] or [
              k.params["memory_fraction"] for k in keys
              if k.key.startswith("gemm/") and "memory_fraction" in k.params]
    device: dict[str, dict[str, float]] = {}
    for family, dtype in sorted({(r.family.split("-")[0], r.dtype) for r in data.rows}):
        figures = {"compute_fraction": compute[dtype]} if dtype in compute else {}
        if memory:
            figures["memory_fraction"] = float(np.exp(np.mean(np.log(memory))))
        if figures:
            have = spec.calibration.params.get(f"{family}/{dtype}", {}) \
                if spec.calibration else {}
            device[f"{family}/{dtype}"] = {**have, **figures}
            for name in figures:
                provenance.setdefault(f"params.{family}/{dtype}.{name}",
                                      "fitted: the device's figure (plain GEMM and stream "
                                      "rows), shared by every op family")
    spec = apply_params(spec, device)
    fitted = {k.key: k for k in keys}
    keys = [dataclasses.replace(fitted[key], params=params) if key in fitted else
            KeyFit(key=key, params=params, defaults={}, n=0, cost=0.0, nfev=0, success=True,
                   message="device figures of the plain GEMM and stream rows")
            for key, params in sorted(device.items())] + [
            k for key, k in fitted.items() if key not in device]
    if progress:
        progress(f"device figures from {int(anchors.sum())} anchor rows: "
                 f"{', '.join(k.key for k in keys) or 'none (spec values kept)'}")
    consts = fit_family_constants(data, spec, base, cycles=cycles, progress=progress)
    spec = apply_params(spec, {}, constants=consts)
    sources = ", ".join(sorted({r.source for r in data.rows if r.source})) or "measurements"
    for name in consts:
        provenance[f"constants.{name}"] = f"fitted: {len(data)} rows ({sources})"
    tables = fit_residuals(data, spec, mode=residual_mode(residual), constants=base)
    spec = apply_params(spec, {}, tables)
    err_b, err_a = errors_before_after(data, data.predict(plain, base),
                                       data.predict(spec, base))
    return FitResult(keys=tuple(keys), n=len(data), error_before=err_b, error_after=err_a,
                     skipped=tuple(skipped), residuals=tables, constants=consts,
                     provenance=provenance)
