"""How well a transferred calibration predicts another GPU, on public measurements.

For each ordered pair (A, B) of devices in a measurement set (AIConfigurator's database:
A100, H100, B200, L40S):

1. fit A: from each of A's groups (:func:`perfmodel.calibrate.public.group_label`), at
   most ``max_fit_rows`` shapes chosen by the maximin design
   (:func:`perfmodel.calibrate.public.design_fit_shapes`); one calibration of A from
   all of them (:func:`perfmodel.calibrate.parts.fit_parts`, no residual: residual tables
   are never carried);
2. transfer it to B's spec (:func:`perfmodel.calibrate.transfer.transfer`);
3. predict every row of B with the transferred profile and with B's spec alone
   ("spec-only"), and compare their APE.

Both start from a table of model constants, the *base*: the bundled table (fitted on every
device's rows, B's included: spec-only is then in-sample for B, a baseline a transfer can
hardly beat); a table refitted from the priors without B's rows
(:func:`perfmodel.calibrate.constants.fit_public` on the other devices' rows, as
``perfmodel validate --leave-gpu-out`` does): the honest baseline for a GPU nobody
measured; or the priors alone (no table: the model as datasheets and physical defaults
give it, before any public measurement). A's calibration is fitted from the same base, so
under the last two no number for B has seen B's rows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.calibrate.data import Row, as_run_on, dataset_from_rows
from perfmodel.calibrate.fit import apply_params
from perfmodel.calibrate.parts import fit_parts
from perfmodel.calibrate.public import design_fit_shapes, group_label
from perfmodel.calibrate.transfer import transfer, within_reach
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import Measurement, MeasurementSet, is_suspect
from perfmodel.timing.constants import Constants
from perfmodel.validation import implausible

__all__ = ["PairResult", "designed_rows", "evaluate_pairs", "leave_out_constants"]


@dataclass(frozen=True)
class PairResult:
    """Errors on device ``target`` of its spec alone and of ``source``'s calibration
    carried to it, under one base table of constants (fractions)."""

    source: str
    target: str
    base: str
    """``bundled``, ``without <target>`` or ``priors``."""
    n: int
    spec_median: float
    spec_p90: float
    transfer_median: float
    transfer_p90: float
    within_reach: bool
    constants: int
    """Model constants carried."""
    moved: int
    """Rows of the target whose prediction the transfer changed."""

    @property
    def gain(self) -> float:
        """1 − transferred median / spec-only median (0.3 = 30 % lower)."""
        return 1.0 - self.transfer_median / self.spec_median

    def meets(self, gain: float = 0.3) -> bool:
        return self.gain >= gain

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "source", "target", "base", "n", "spec_median", "spec_p90", "transfer_median",
            "transfer_p90", "within_reach", "constants", "moved")} | {"gain": self.gain}


def _groups(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[group_label(r)].append(r)
    return out


def designed_rows(rows: Sequence[Row], max_fit_rows: int = 300) -> list[Row]:
    """From each group of ``rows``, the rows of at most ``max_fit_rows`` shapes of the
    maximin design (one row per shape)."""
    out: list[Row] = []
    for _, group in sorted(_groups(rows).items()):
        data = dataset_from_rows(group, weight=np.ones(len(group)))
        out.extend(group[i] for i in design_fit_shapes(data, max_fit_rows))
    return out


def _ape(pred: Any, meas: Any) -> tuple[float, float]:
    a = np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)
    return float(np.median(a)), float(np.percentile(a, 90))


def leave_out_constants(measurements: Sequence[Measurement], device: str,
                        cache: Path | None = None,
                        progress: Callable[[str], None] | None = None) -> Constants:
    """The model constants refitted from their priors on every row not measured on
    ``device`` (:func:`perfmodel.calibrate.constants.fit_public`); read from / written to
    ``cache`` (a JSON file) when given."""
    from perfmodel.calibrate.constants import fit_public
    from perfmodel.validation import prepare

    if cache is not None and cache.is_file():
        doc = json.loads(cache.read_text(encoding="utf-8"))
        if doc.get("device") == device and doc.get("rows") == sum(
                1 for m in measurements if m.spec != device):
            return Constants({k: float(v) for k, v in doc["values"].items()},
                             dict.fromkeys(doc["values"], f"fitted without {device}"))
    kept = tuple(m for m in measurements if m.spec != device)
    prep = prepare(MeasurementSet(kept))
    fitted = fit_public(prep, source=f"fitted without {device}", progress=progress)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"device": device, "rows": len(kept),
                                     "values": dict(fitted.fitted)}, indent=1),
                         encoding="utf-8")
    return fitted


def _fit_source(rows: Sequence[Row], hw: HardwareSpec, base: Constants | None,
                max_fit_rows: int, progress: Callable[[str], None] | None) -> HardwareSpec:
    fit_rows, _ = as_run_on(designed_rows(rows, max_fit_rows), hw)
    data = dataset_from_rows(fit_rows, weight=np.ones(len(fit_rows)))
    if progress:
        progress(f"fitting {hw.id} on {len(data)} designed rows")
    result = fit_parts(data, hw, base=base, residual="off", progress=progress)
    return apply_params(hw, result.params, constants=result.constants)


def evaluate_pairs(rows: Sequence[Row], *, max_fit_rows: int = 300,
                   bases: Mapping[str, Constants | None] | None = None,
                   pairs: Sequence[tuple[str, str]] | None = None,
                   min_rows: int = 100, priors: bool = False,
                   progress: Callable[[str], None] | None = None) -> list[PairResult]:
    """Transfer results for ordered device pairs (default: every ordered pair of the
    devices in ``rows``). ``bases`` maps a target device to the constants to start from
    (None: bundled); results are computed under the bundled table, for each target in
    ``bases`` under that target's table, and (``priors``) under the priors alone. Rows
    whose notes say SUSPECT, rows faster than the datasheet figures allow
    (:func:`perfmodel.validation.implausible`) and groups with fewer than ``min_rows`` rows
    are left out."""
    by_device: dict[str, list[Row]] = defaultdict(list)
    plausible = [r for r in rows if not is_suspect(r.notes)]
    too_fast = implausible([r.measurement() for r in plausible])
    for i, r in enumerate(plausible):
        if i not in too_fast:
            by_device[r.spec].append(r)
    for dev in list(by_device):
        groups = _groups(by_device[dev])
        by_device[dev] = [r for g in groups.values() if len(g) >= min_rows for r in g]
    devices = sorted(by_device)
    todo = list(pairs) if pairs is not None else [(a, b) for a in devices for b in devices
                                                  if a != b]
    specs = {d: load_hardware(d) for d in devices}
    plans: list[tuple[str, Constants | None]] = [("bundled", None)]
    for dev, consts in (bases or {}).items():
        plans.append((f"without {dev}", consts))
    if priors:
        plans.append(("priors", Constants()))
    fitted: dict[tuple[str, str], HardwareSpec] = {}
    out: list[PairResult] = []
    for label, base in plans:
        for a, b in todo:
            if label.startswith("without ") and label != f"without {b}":
                continue
            key = (a, label)
            if key not in fitted:
                fitted[key] = _fit_source(by_device[a], specs[a], base, max_fit_rows,
                                          progress)
            moved_to = transfer(fitted[key], specs[b])
            target_rows, _ = as_run_on(by_device[b], specs[b])
            data = dataset_from_rows(target_rows, weight=np.ones(len(target_rows)))
            spec_only = data.predict(specs[b], base)
            carried = data.predict(moved_to.spec, base)
            s_med, s_p90 = _ape(spec_only, data.measured_s)
            t_med, t_p90 = _ape(carried, data.measured_s)
            moved = int(np.sum(np.abs(carried / spec_only - 1.0) > 1e-9))
            out.append(PairResult(source=a, target=b, base=label, n=len(data),
                                  spec_median=s_med, spec_p90=s_p90, transfer_median=t_med,
                                  transfer_p90=t_p90,
                                  within_reach=within_reach(specs[a].arch, specs[b].arch),
                                  constants=len(moved_to.constants), moved=moved))
            if progress:
                last = out[-1]
                progress(f"{a} -> {b} ({label}): spec-only {last.spec_median:.1%}, "
                         f"transferred {last.transfer_median:.1%}")
    return out
