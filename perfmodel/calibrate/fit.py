"""Fit a few physically meaningful timing-model parameters to measured kernel times.

For each op family f ∈ {gemm, attention, stream} and dtype d present in the data, the
parameters θ of the key ``"f/d"`` (see :mod:`perfmodel.timing.knobs`) minimise

    Σ_i ρ( w_i² · (log t̂_i(θ) − log t_i)² ) + Σ_j λ² · (u_j − u_j⁰)²

with scipy.optimize.least_squares (``loss="soft_l1"``, ρ(z) = 2·(√(1 + z/c²) − 1)·c²,
c = ``f_scale``, 0.1 ≈ 10 %): t_i the measured time of row i, t̂_i the model's prediction
with θ, w_i a row weight (unstable samples count less), u the parameters in their fitting
coordinates and u⁰ the spec's defaults (a weak prior, λ = ``prior``, that keeps a parameter
the data cannot see at its default instead of letting it wander).

Parameters and fitting coordinates:

=====================  =============================  ==========================
name                   meaning                        coordinate, bounds
=====================  =============================  ==========================
compute_fraction       achievable fraction of peak    log, [0.01, 1.5]
memory_fraction        achievable fraction of BW      log, [0.01, 1.5]
overhead_s             fixed cost per kernel, s       log, [1e-8, 1e-2]
overlap_p              p of (t_c^p + t_m^p)^(1/p)     q = 1/p ∈ [0, 2/3]; q < 0.01
                                                      is written as the hard max
attention_efficiency   fused-attention tensor rate    log, [0.05, 2]
                       relative to compute_fraction
=====================  =============================  ==========================

Extended parameters (``params="extended"``, :data:`EXTENDED`), fitted after those above:

========================  ==========================  ==========================
fill_waves                times the GEMM fill is paid log, [0.05, 20]
cta_bandwidth             per-CTA bandwidth multiple  log, [0.1, 20]
tile_efficiency_exponent  e → e^a of the tile menu    log, [0.2, 5]
fa2_softmax_overlap       softmax/MMA overlap, FA2    linear, [0, 1]
fa3_softmax_overlap       the same, FA3-class kernels linear, [0, 1]
paged_prefill_efficiency  paged prefill rate          log, [0.1, 2]
========================  ==========================  ==========================

Unfused (``naive``) attention has no parameters of its own: it is predicted from the
gemm and stream parameters of its stages.

Residual correction (optional; see :mod:`perfmodel.timing.residual` for how tables enter
predictions). After the parametric fit, for each table key (per family, kernel path or op
name, and dtype) with at least ``min_rows`` rows, on the log ratios e_i = log(t_i / t̂_i):

- ``"size"``: the rows are sorted by x_i = log10(FLOPs or bytes) and cut into
  K = min(12, n/3) bins of equal count; each bin gives a knot (median x, median e); the
  end values are repeated at the smallest and largest measured x, and r = 0 half a decade
  beyond them, so the correction fades to the parametric model outside the measured range;
- ``"shape"`` (gemm and attention; streams keep size tables): the points (log2 shape, e_i)
  themselves, with the kernel width h chosen by leave-one-out over a grid and w0 = 0.1;
- ``"gp"`` (gemm and attention; streams keep size tables): kernel ridge regression (the
  posterior mean of a zero-mean Gaussian process) on log2 shape and the prediction's
  regime (log2 latency and intensity, :func:`perfmodel.timing.residual.regime_features`),
  r = k(x)ᵀ(K + λI)⁻¹e with an RBF kernel of one length scale per coordinate; the scales
  and the ridge λ are chosen by closed-form leave-one-out (e_i − r_{−i} =
  α_i / [(K + λI)⁻¹]_ii): a grid, then a coordinate search (:func:`gp_table`). Far from
  every measured point r → 0;
- ``"scale"``: one constant per key, the median of e (a global rescaling of the key).

Prior λ = ∞ (``math.inf``) means no parametric fit: the spec's defaults are kept and only
the residual correction (if any) is fitted; with ``"off"`` this is "no calibration", which
:func:`fit_auto` always compares against.

A key with too few rows gives its points to the family-wide key (``stream/fp32``...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_TABLE_POINTS
from perfmodel.calibrate.data import Dataset
from perfmodel.hardware.spec import Calibration, HardwareSpec
from perfmodel.ops.cost import Array
from perfmodel.timing import spec_constants
from perfmodel.timing.constants import Constants
from perfmodel.timing.kernels import gemm_cta_bandwidth
from perfmodel.timing.knobs import knobs_for
from perfmodel.timing.residual import (
    GP_SUFFIX,
    SHAPE_SUFFIX,
    residual_keys,
    shape_coordinates,
    with_regime,
)

__all__ = [
    "AUTO_RESIDUAL_MODES",
    "EXTENDED",
    "PARAMETERS",
    "PARAM_SETS",
    "PRIOR_GRID",
    "RESIDUAL_MODES",
    "FitResult",
    "KeyFit",
    "Selection",
    "apply_params",
    "fit",
    "fit_auto",
    "fit_family",
    "fit_residuals",
    "gp_table",
    "residual_mode",
    "residual_table",
    "shape_table",
    "uncalibrated",
]

#: Parameters per family in order of importance: with few rows only the first ones are
#: fitted (at least three rows per parameter).
PARAMETERS: dict[str, tuple[str, ...]] = {
    "gemm": ("compute_fraction", "overhead_s", "memory_fraction", "overlap_p"),
    "attention": ("attention_efficiency", "overhead_s", "memory_fraction", "overlap_p"),
    "stream": ("memory_fraction", "overhead_s"),
}

#: More physical knobs per family (tile fill, per-CTA bandwidth, tile efficiencies,
#: softmax overlap, paged prefill rate): fitted only with ``params="extended"``.
EXTENDED: dict[str, tuple[str, ...]] = {
    "gemm": ("tile_efficiency_exponent", "fill_waves", "cta_bandwidth"),
    "attention": ("fa2_softmax_overlap", "fa3_softmax_overlap", "paged_prefill_efficiency",
                  "cta_bandwidth"),
    "stream": ("cta_bandwidth",),
}
#: Parameter sets :func:`fit_auto` chooses between.
PARAM_SETS: tuple[str, ...] = ("basic", "extended")

_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_fraction": (0.01, 1.5), "memory_fraction": (0.01, 1.5),
    "overhead_s": (1e-8, 1e-2), "overlap_p": (0.0, 2.0 / 3.0),
    "attention_efficiency": (0.05, 2.0), "fill_waves": (0.05, 20.0),
    "cta_bandwidth": (0.1, 20.0), "tile_efficiency_exponent": (0.2, 5.0),
    "fa2_softmax_overlap": (0.0, 1.0), "fa3_softmax_overlap": (0.0, 1.0),
    "paged_prefill_efficiency": (0.1, 2.0),
}
_LINEAR = ("fa2_softmax_overlap", "fa3_softmax_overlap")
_HARD_MAX_Q = 0.01
_ROWS_PER_PARAM = 3


@dataclass(frozen=True)
class KeyFit:
    """Fit of one ``family/dtype`` key."""

    key: str
    params: dict[str, float]
    """Fitted values, SI (``overlap_p`` absent = hard max)."""
    defaults: dict[str, float]
    """The spec's values before fitting (``overlap_p`` = inf for the hard max)."""
    n: int
    cost: float
    nfev: int
    success: bool
    message: str
    fixed: tuple[str, ...] = ()
    """Parameters left at their default and not written: too few rows to fit them, or an
    extended knob no row's prediction depends on."""


@dataclass(frozen=True)
class FitResult:
    """All fitted keys plus in-sample errors before and after (fractions, 0.05 = 5 %)."""

    keys: tuple[KeyFit, ...]
    n: int
    error_before: dict[str, float]
    error_after: dict[str, float]
    skipped: tuple[tuple[str, str], ...] = ()
    residuals: dict[str, list[list[float]]] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)
    """Model constants fitted to the rows (:mod:`perfmodel.calibrate.parts`), or carried
    by the spec the fit started from."""
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, dict[str, float]]:
        return {k.key: dict(k.params) for k in self.keys}

    def calibration(self, device: str, environment: dict[str, str] | None = None,
                    date: str = "") -> Calibration:
        return Calibration(date=date, device=device, environment=dict(environment or {}),
                           points=self.n, params=self.params, error_before=self.error_before,
                           error_after=self.error_after, residuals=self.residuals,
                           constants=dict(self.constants), provenance=dict(self.provenance))


def uncalibrated(hw: HardwareSpec) -> HardwareSpec:
    """``hw`` without its calibrated parameters and residual tables: the starting point of
    a fit. Calibrated model constants (:mod:`perfmodel.calibrate.parts`) are kept: the
    parameters are fitted on top of them."""
    cal = hw.calibration
    if cal is None:
        return hw
    if not cal.constants:
        return hw.model_copy(update={"calibration": None})
    return apply_params(hw.model_copy(update={"calibration": None}), {},
                        constants=dict(cal.constants))


def apply_params(hw: HardwareSpec, params: dict[str, dict[str, float]],
                 residuals: dict[str, list[list[float]]] | None = None,
                 constants: dict[str, float] | None = None) -> HardwareSpec:
    """``hw`` with a calibration block holding ``params``: each key given replaces that
    key's parameters (an absent ``overlap_p`` means the hard max); other keys are kept.
    ``residuals`` and model ``constants`` are merged into the block's likewise."""
    old = hw.calibration
    merged = {k: dict(v) for k, v in (old.params if old else {}).items()}
    merged.update({k: dict(v) for k, v in params.items()})
    res = dict(old.residuals) if old else {}
    res.update(residuals or {})
    cal = Calibration.model_construct(
        date=old.date if old else "", device=old.device if old else hw.id,
        environment=dict(old.environment) if old else {}, points=old.points if old else 0,
        params=merged, error_before=dict(old.error_before) if old else {},
        error_after=dict(old.error_after) if old else {}, residuals=res,
        constants={**(old.constants if old else {}), **(constants or {})},
        provenance=dict(old.provenance) if old else {})
    return hw.model_copy(update={"calibration": cal})


def _defaults(hw: HardwareSpec, family: str, dtype: str,
              constants: Constants | None = None) -> dict[str, float]:
    """The values ``hw`` gives the parameters of ``family/dtype`` now."""
    k = knobs_for(hw, family, dtype)  # type: ignore[arg-type]
    return {
        "compute_fraction": _fraction_of(hw, family, dtype),
        "memory_fraction": k.achievable_bandwidth / k.bandwidth,
        "overhead_s": max(k.overhead_s, 2e-8),
        "overlap_p": k.overlap_p,
        "attention_efficiency": k.attention_efficiency,
        "fill_waves": k.fill_waves,
        "cta_bandwidth": (gemm_cta_bandwidth(k, spec_constants(hw, constants))
                          if family == "gemm" else k.cta_bandwidth),
        "tile_efficiency_exponent": k.tile_exponent,
        "fa2_softmax_overlap": k.softmax_overlap,
        "fa3_softmax_overlap": k.fa3_softmax_overlap,
        "paged_prefill_efficiency": k.paged_prefill_efficiency,
    }


def _fraction_of(hw: HardwareSpec, family: str, dtype: str) -> float:
    """The compute fraction knobs_for used (spec default, or calibrated)."""
    unit = hw.peaks[dtype].unit  # type: ignore[index]
    value = hw.efficiency.compute_fraction(dtype, unit)  # type: ignore[arg-type]
    if hw.calibration is not None:
        for key in (family, f"{family}/{dtype}"):
            value = hw.calibration.params.get(key, {}).get("compute_fraction", value)
    return value


def _to_u(name: str, value: float) -> float:
    if name == "overlap_p":
        return 0.0 if math.isinf(value) else min(1.0 / value, _BOUNDS[name][1])
    if name in _LINEAR:
        return value
    return math.log(value)


def _from_u(name: str, u: float) -> float:
    if name == "overlap_p":
        return math.inf if u < _HARD_MAX_Q else 1.0 / u
    if name in _LINEAR:
        return u
    return math.exp(u)


def _u_bounds(name: str) -> tuple[float, float]:
    lo, hi = _BOUNDS[name]
    if name == "overlap_p" or name in _LINEAR:
        return lo, hi
    return math.log(lo), math.log(hi)


def _as_params(names: Sequence[str], u: Array) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in zip(names, u, strict=False):
        v = _from_u(name, float(value))
        if name == "overlap_p" and math.isinf(v):
            continue
        out[name] = v
    return out


def _seen(hw: HardwareSpec, data: Dataset, family: str, key: str, names: Sequence[str],
          defaults: dict[str, float], constants: Constants | None) -> tuple[str, ...]:
    """``names`` less the extended knobs no row's prediction depends on: such a knob is
    left out of the fit and of the calibration, since written at its starting value it
    would replace what the uncalibrated kernels use (one attention ``cta_bandwidth``
    replaces every kernel family's constant; rows of FA3-class kernels alone cannot see the
    FA2-class overlap)."""
    extended = [n for n in names if n in EXTENDED[family]]
    if not extended:
        return tuple(names)
    start = {n: defaults[n] for n in names
             if not (n == "overlap_p" and math.isinf(defaults[n]))}
    base = data.predict(apply_params(hw, {key: start}), constants)
    keep = list(names)
    for n in extended:
        lo, hi = _BOUNDS[n]
        probe = min(max(defaults[n] * 1.5 if n not in _LINEAR else defaults[n] + 0.25, lo),
                    hi)
        if probe == defaults[n]:
            probe = lo
        moved = data.predict(apply_params(hw, {key: {**start, n: probe}}), constants)
        if np.all(np.abs(moved - base) <= 1e-12 * np.abs(base)):
            keep.remove(n)
    return tuple(keep)


def fit_family(hw: HardwareSpec, data: Dataset, family: str, dtype: str, *,
               f_scale: float = 0.1, prior: float = 0.02, max_nfev: int = 300,
               params: str = "basic", constants: Constants | None = None) -> KeyFit:
    """Fit the parameters of ``family/dtype`` on ``data`` (rows of that key only);
    ``params="extended"`` adds the family's :data:`EXTENDED` knobs. ``constants``
    replaces the bundled model constants in the predictions."""
    if family not in PARAMETERS:
        raise PerfmodelError("family", f"no fitted parameters for {family!r}",
                             f"use one of {', '.join(PARAMETERS)}")
    if len(data) == 0:
        raise PerfmodelError("measurements", f"no rows for {family}/{dtype}",
                             "measure that family first")
    key = f"{family}/{dtype}"
    defaults = _defaults(hw, family, dtype, constants)
    if params not in PARAM_SETS:
        raise PerfmodelError("params", f"unknown parameter set {params!r}",
                             f"use one of {', '.join(PARAM_SETS)}")
    every = PARAMETERS[family] + (EXTENDED[family] if params == "extended" else ())
    n_free = max(1, min(len(every), len(data) // _ROWS_PER_PARAM))
    names = _seen(hw, data, family, key, every[:n_free], defaults, constants)
    fixed = tuple(n for n in every if n not in names)
    u0 = np.asarray([_to_u(n, defaults[n]) for n in names])
    lo = np.asarray([_u_bounds(n)[0] for n in names])
    hi = np.asarray([_u_bounds(n)[1] for n in names])
    u0 = np.clip(u0, lo + 1e-9, hi - 1e-9)
    log_t = np.log(data.measured_s)
    w = data.weight

    def residual(u: Array) -> Array:
        spec = apply_params(hw, {key: _as_params(names, u)})
        pred = data.predict(spec, constants)
        r = (np.log(np.maximum(pred, 1e-15)) - log_t) * w
        return np.concatenate([r, prior * (u - u0)])

    starts = [u0]
    if "overlap_p" in names:
        alt = u0.copy()
        alt[names.index("overlap_p")] = 0.25
        starts.append(alt)
    best: Any = None
    for start in starts:
        sol = least_squares(residual, start, bounds=(lo, hi), loss="soft_l1",
                            f_scale=f_scale, diff_step=1e-3, max_nfev=max_nfev, x_scale=1.0)
        if best is None or sol.cost < best.cost:
            best = sol
    fitted = _as_params(names, best.x)
    shown_defaults = {n: defaults[n] for n in every}
    return KeyFit(key=key, params=fitted, defaults=shown_defaults, n=len(data),
                  cost=float(best.cost), nfev=int(best.nfev), success=bool(best.success),
                  message=str(best.message), fixed=tuple(fixed))


def _stats(pred: Array, meas: Array) -> tuple[float, float]:
    if pred.size == 0:
        return math.nan, math.nan
    ape = np.abs(pred - meas) / meas
    return float(np.median(ape)), float(np.percentile(ape, 90))


def errors_before_after(data: Dataset, before: Array, after: Array
                        ) -> tuple[dict[str, float], dict[str, float]]:
    """Median and p90 APE of ``before`` and ``after`` (predicted seconds per row) over all
    rows and per (family, dtype): keys ``<group>.median_ape`` / ``<group>.p90_ape``."""
    err_b: dict[str, float] = {}
    err_a: dict[str, float] = {}
    groups = {"all": np.ones(len(data), dtype=bool)}
    for family, dtype in sorted({(r.family, r.dtype) for r in data.rows}):
        groups[f"{family}/{dtype}"] = data.family_mask(family, dtype)
    for name, mask in groups.items():
        for errs, pred in ((err_b, before), (err_a, after)):
            errs[f"{name}.median_ape"], errs[f"{name}.p90_ape"] = _stats(
                pred[mask], data.measured_s[mask])
    return err_b, err_a


def residual_table(x: Array, e: Array, taper: float = 0.5,
                   max_knots: int = 12) -> list[list[float]]:
    """A residual table [[x, r], ...] from sizes ``x`` (log10) and log ratios ``e``
    (see the module docstring)."""
    order = np.argsort(x, kind="stable")
    xs, es = np.asarray(x)[order], np.asarray(e)[order]
    k = int(max(1, min(max_knots, xs.size // 3)))
    knots: list[list[float]] = []
    for part_x, part_e in zip(np.array_split(xs, k), np.array_split(es, k), strict=False):
        knots.append([float(np.median(part_x)), float(np.median(part_e))])
    lo, hi = float(xs[0]), float(xs[-1])
    rows = [[lo - taper, 0.0], [lo, knots[0][1]], *knots, [hi, knots[-1][1]], [hi + taper, 0.0]]
    table: list[list[float]] = []
    for row in rows:  # strictly increasing x (bins may share a median)
        if table and row[0] <= table[-1][0]:
            if row[0] == table[-1][0]:
                table[-1][1] = (table[-1][1] + row[1]) / 2.0
            continue
        table.append([round(row[0], 6), round(row[1], 6)])
    return table


_RESIDUAL_ORDER = {"stream": 0, "gemm": 1, "attention": 2}


def _general_key(key: str) -> str:
    """``stream/rmsnorm/fp32`` -> ``stream/fp32`` (the family-wide table)."""
    parts = key.split("/")
    return f"{parts[0]}/{parts[-1]}"


#: Residual correction modes: none, a constant per key, 1-D tables over log size, kernel
#: tables over log shape (Nadaraya-Watson and kernel ridge).
RESIDUAL_MODES: tuple[str, ...] = ("off", "scale", "size", "shape", "gp")
#: Modes :func:`fit_auto` chooses among. ``"size"`` is left to be asked for: it tends to win
#: cross-validation on few points spread evenly in time (neighbours in size are then
#: neighbours in the sample) without carrying over to shapes of other aspect ratios.
AUTO_RESIDUAL_MODES: tuple[str, ...] = ("off", "scale", "shape", "gp")
_SHAPE_WIDTHS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
_SHAPE_W0 = 0.1


def residual_mode(value: bool | str | None) -> str:
    """``True``/``"on"`` -> ``"size"``, ``False``/``None`` -> ``"off"``, else the mode."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "size"
    key = str(value).strip().lower()
    key = {"on": "size", "true": "size", "false": "off", "none": "off"}.get(key, key)
    if key not in RESIDUAL_MODES:
        raise PerfmodelError("residual", f"unknown residual correction {value!r}",
                             f"use one of {', '.join(RESIDUAL_MODES)}")
    return key


def thin_points(x: Array, e: Array, cap: int = MAX_TABLE_POINTS) -> tuple[Array, Array]:
    """At most ``cap`` points of a kernel table, so its n × n matrices stay bounded
    (600² doubles = 2.9 MB, inverted in well under a second) whatever the size of the
    measurement file.

    Rule: points at one shape (equal coordinates) become one, their mean error; if more
    than ``cap`` shapes remain, ``cap`` of them at evenly spaced ranks of the shapes
    sorted by their coordinates (first coordinate first) are kept.
    """
    xs = np.asarray(x, dtype=np.float64)
    es = np.asarray(e, dtype=np.float64)
    if xs.shape[0] <= cap:
        return xs, es
    uniq, inverse = np.unique(xs, axis=0, return_inverse=True)  # sorted lexicographically
    inverse = inverse.reshape(-1)
    mean_e = np.bincount(inverse, weights=es) / np.bincount(inverse)
    if uniq.shape[0] > cap:
        keep = np.unique(np.round(np.linspace(0, uniq.shape[0] - 1, cap)).astype(int))
        uniq, mean_e = uniq[keep], mean_e[keep]
    return uniq, mean_e


def shape_table(x: Array, e: Array, w0: float = _SHAPE_W0) -> list[list[float]]:
    """A shape table: [h, w0] then [x_1 … x_d, e] per point, h chosen by leave-one-out
    (mean |error| of each point predicted from the others) over a grid of widths. More
    than :data:`~perfmodel._limits.MAX_TABLE_POINTS` points are thinned first
    (:func:`thin_points`)."""
    xs, es = thin_points(x, e)
    d2 = ((xs[:, None, :] - xs[None, :, :]) ** 2).sum(axis=-1)
    best_h, best = _SHAPE_WIDTHS[0], math.inf
    for h in _SHAPE_WIDTHS:
        w = np.exp(-0.5 * d2 / h**2)
        np.fill_diagonal(w, 0.0)
        loo = float(np.mean(np.abs((w @ es) / (w.sum(axis=1) + w0) - es)))
        if loo < best:
            best_h, best = h, loo
    rows = [[best_h, w0]]
    rows.extend([*(round(float(v), 6) for v in xi), round(float(ei), 6)]
                for xi, ei in zip(xs, es, strict=True))
    return rows


_GP_WIDTHS = (0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: Length scales as multiples of each coordinate's spread over the points.
_GP_SCALED = (0.2, 0.3, 0.45, 0.7, 1.0, 1.5)
_GP_RIDGES = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
#: Steps of the coordinate search on one length scale (× h_j; ``None``: h_j = 1000, the
#: coordinate plays no part), and its passes over the coordinates.
_GP_STEPS: tuple[float | None, ...] = (0.5, 0.7, 1.4, 2.0, None)
_GP_PASSES = 2
#: A step is taken only if it lowers the leave-one-out error by more than this share.
_GP_GAIN = 1e-3
_GP_OFF = 1000.0
#: Points on which the length scales are searched: more (a table holds up to
#: MAX_TABLE_POINTS) are thinned for the search (:func:`thin_points`), and the final c, λ
#: and α come from every point, so a large table's search costs what a 300-point one does.
_GP_SEARCH_POINTS = 300


def _sq_dist(x: Array) -> Array:
    """Squared distances per coordinate between the points ``x`` (n, d): shape (d, n, n)."""
    out: Array = (x.T[:, :, None] - x.T[:, None, :]) ** 2
    return out


def _gp_loo(sq_dist: Array, h: Array, es: Array, offsets: Sequence[float]
            ) -> tuple[float, float, Array]:
    """The best (leave-one-out error, c, α) over ``offsets`` and :data:`_GP_RIDGES` for
    length scales ``h``, from one eigendecomposition of K (``sq_dist``: :func:`_sq_dist`
    of the points); (inf, 0, 0) if it fails."""
    kern = np.exp(-0.5 * np.tensordot(1.0 / h**2, sq_dist, axes=1))
    try:
        vals, vecs = np.linalg.eigh(kern)
    except np.linalg.LinAlgError:
        return math.inf, 0.0, np.zeros(es.size)
    vals = np.maximum(vals, 0.0)
    sq = vecs**2
    best: tuple[float, float, Array] = (math.inf, 0.0, np.zeros(es.size))
    for c in offsets:
        proj = vecs.T @ (es - c)
        for lam in _GP_RIDGES:
            inv_vals = 1.0 / (vals + lam)
            alpha = vecs @ (inv_vals * proj)
            loo = float(np.mean(np.abs(alpha / (sq @ inv_vals))))
            if loo < best[0]:
                best = (loo, c, alpha)
    return best


def gp_table(x: Array, e: Array) -> list[list[float]]:
    """A kernel-ridge table (see :mod:`perfmodel.timing.residual`): [h_1 … h_d, c] then
    [x_1 … x_d, α_i] per point, α = (K + λI)⁻¹(e − c).

    Choice of h, c and λ by closed-form leave-one-out (mean |e_i − r_{−i}| = mean
    |α_i / [(K + λI)⁻¹]_ii|, one eigendecomposition of K per set of length scales, every
    c and λ from it): first a grid, one length scale for every coordinate (log2 units,
    :data:`_GP_WIDTHS`) or h_j = s·σ_j, σ_j the spread of coordinate j over the points (a
    coordinate that does not vary gets h_j = 1000: it plays no part); then a coordinate
    search from the best of them, each h_j in turn tried at the steps of
    :data:`_GP_STEPS` (switching a coordinate off included), a step kept when it lowers
    the error by more than :data:`_GP_GAIN`, :data:`_GP_PASSES` passes (one scale per
    coordinate: the residual may vary fast along one coordinate and not at all along
    another). c = 0 (far from every point the correction fades to the parametric model)
    or c = median(e) (it fades to the points' typical correction). More than
    :data:`~perfmodel._limits.MAX_TABLE_POINTS` points are thinned first
    (:func:`thin_points`); the length scales are searched on at most
    :data:`_GP_SEARCH_POINTS` of them."""
    xs, es = thin_points(x, e)
    d = xs.shape[1]
    spread = xs.std(axis=0)
    sub_x, sub_e = thin_points(xs, es, _GP_SEARCH_POINTS)
    sq_dist = _sq_dist(sub_x)
    scales = [np.full(d, h) for h in _GP_WIDTHS]
    scales += [np.where(spread > 0, s * np.maximum(spread, 1e-9), _GP_OFF)
               for s in _GP_SCALED]
    offsets = (0.0, round(float(np.median(es)), 6))
    loo, c, alpha, h = math.inf, 0.0, np.zeros(sub_e.size), scales[0]
    for cand in scales:
        got = _gp_loo(sq_dist, cand, sub_e, offsets)
        if got[0] < loo:
            (loo, c, alpha), h = got, cand
    for _ in range(_GP_PASSES):
        moved = False
        for j in np.flatnonzero(spread > 0):
            for step in _GP_STEPS:
                if step is None and h[j] >= _GP_OFF:
                    continue
                cand = h.copy()
                cand[j] = _GP_OFF if step is None else h[j] * step
                got = _gp_loo(sq_dist, cand, sub_e, offsets)
                if got[0] < loo * (1.0 - _GP_GAIN):
                    (loo, c, alpha), h, moved = got, cand, True
        if not moved:
            break
    if sub_e.size < es.size:  # c, λ and α from every point, at the scales found
        _, c, alpha = _gp_loo(_sq_dist(xs), h, es, offsets)
    rows = [[*(float(v) for v in h), c]]
    rows.extend([*(round(float(v), 6) for v in xi), float(ai)]
                for xi, ai in zip(xs, alpha, strict=True))
    return rows


def _scale_table(e: Array) -> list[list[float]]:
    """A size table that is the constant median(e) over any size."""
    c = round(float(np.median(e)), 6)
    return [[-1000.0, c], [1000.0, c]]


def fit_residuals(data: Dataset, hw: HardwareSpec, min_rows: int = 4,
                  mode: str = "size", constants: Constants | None = None
                  ) -> dict[str, list[list[float]]]:
    """Residual tables of ``hw`` (already carrying the fitted parameters) for ``data``.

    Tables are fitted family by family (streams, then GEMMs, then attention), each on the
    predictions that include the tables already fitted, since unfused attention is made of
    GEMM and stream kernels.
    """
    mode = residual_mode(mode)
    tables: dict[str, list[list[float]]] = {}
    if mode == "off":
        return tables
    spec = hw
    for family in sorted(_RESIDUAL_ORDER, key=_RESIDUAL_ORDER.__getitem__):
        use_shape = mode in ("shape", "gp") and family != "stream"
        points: dict[str, tuple[list[Any], list[float]]] = {}
        for idx, op, p in data.predictions_with_ops(spec, constants):
            rows = [data.rows[i] for i in idx]
            if rows[0].family.split("-")[0] != family:
                continue
            causal = bool(rows[0].static[2]) if rows[0].op == "attention" else False
            keys = residual_keys(p, causal)
            if not keys:
                continue
            pred = np.atleast_1d(np.asarray(p.latency_s, dtype=np.float64))
            e = np.log(data.measured_s[idx] / pred)
            if use_shape:
                coords = shape_coordinates(op)
                if coords is not None and mode == "gp":
                    coords = with_regime(coords, p)
                x: list[Any] = [] if coords is None else list(coords)
            else:
                size = p.flops if p.op in ("gemm", "attention") else p.bytes_min
                sz = np.log10(np.maximum(np.atleast_1d(np.asarray(size, dtype=np.float64)), 1))
                x = list(np.broadcast_to(sz, (len(idx),)))
            if len(x) != len(idx):
                continue
            xs, es = points.setdefault(keys[0], ([], []))
            xs.extend(x)
            es.extend(float(v) for v in e)
        # a specific key with too few rows gives its points to the family-wide key
        pooled: dict[str, tuple[list[Any], list[float]]] = {}
        for key, (xs, es) in points.items():
            target = key if len(xs) >= min_rows else _general_key(key)
            pxs, pes = pooled.setdefault(target, ([], []))
            pxs.extend(xs)
            pes.extend(es)
        new: dict[str, list[list[float]]] = {}
        for key, (xs, es) in pooled.items():
            if len(xs) < min_rows:
                continue
            if mode == "scale":
                new[key] = _scale_table(np.asarray(es))
            elif use_shape and mode == "gp":
                new[key + GP_SUFFIX] = gp_table(np.asarray(xs), np.asarray(es))
            elif use_shape:
                new[key + SHAPE_SUFFIX] = shape_table(np.asarray(xs), np.asarray(es))
            else:
                new[key] = residual_table(np.asarray(xs), np.asarray(es))
        tables.update(new)
        spec = apply_params(spec, {}, new)
    return tables


def _fit_parameters(data: Dataset, hw: HardwareSpec, *, f_scale: float, prior: float,
                    families: Sequence[str] | None, params: str = "basic",
                    constants: Constants | None = None
                    ) -> tuple[list[KeyFit], list[tuple[str, str]], HardwareSpec]:
    """The parametric fit of every key: (fits, skipped keys, spec carrying them).

    ``prior`` = ∞ fits nothing (the spec's defaults are kept)."""
    keys: list[KeyFit] = []
    skipped: list[tuple[str, str]] = []
    wanted = set(families or PARAMETERS)
    pairs = sorted({(r.family, r.dtype) for r in data.rows})
    base = uncalibrated(hw)
    spec = base
    for family, dtype in pairs:
        if family not in PARAMETERS:
            continue
        if family not in wanted:
            skipped.append((f"{family}/{dtype}", "not asked for"))
            continue
        if math.isinf(prior):
            skipped.append((f"{family}/{dtype}", "defaults kept (prior = inf)"))
            continue
        sub = data.where(data.family_mask(family, dtype))
        try:
            kf = fit_family(spec, sub, family, dtype, f_scale=f_scale, prior=prior,
                            params=params, constants=constants)
        except PerfmodelError as exc:
            skipped.append((f"{family}/{dtype}", str(exc)))
            continue
        keys.append(kf)
        spec = apply_params(spec, {kf.key: kf.params})
    return keys, skipped, spec


def fit(data: Dataset, hw: HardwareSpec, *, f_scale: float = 0.1, prior: float = 0.02,
        families: Sequence[str] | None = None, residual: bool | str = False,
        params: str = "basic", constants: Constants | None = None) -> FitResult:
    """Fit every (family, dtype) key present in ``data`` and report in-sample errors.

    Keys with no parameters of their own (unfused attention) are predicted with the
    fitted gemm and stream parameters. ``families`` restricts which keys are fitted;
    ``residual`` adds residual correction tables (a mode of :data:`RESIDUAL_MODES`, or
    ``True`` for ``"size"``). ``prior`` = ∞ keeps the spec's parameters; ``params`` is a
    parameter set of :data:`PARAM_SETS`. ``constants`` replaces the bundled model constants
    (a calibrated profile's own model constants still apply on top).
    """
    if len(data) == 0:
        raise PerfmodelError("measurements", "no rows to fit", "measure some kernels first")
    keys, skipped, spec = _fit_parameters(data, hw, f_scale=f_scale, prior=prior,
                                          families=families, params=params,
                                          constants=constants)
    tables = fit_residuals(data, spec, mode=residual_mode(residual), constants=constants)
    spec = apply_params(spec, {}, tables)
    base = uncalibrated(hw)
    err_b, err_a = errors_before_after(data, data.predict(base, constants),
                                       data.predict(spec, constants))
    return FitResult(keys=tuple(keys), n=len(data), error_before=err_b, error_after=err_a,
                     skipped=tuple(skipped), residuals=tables,
                     constants=dict(spec.calibration.constants) if spec.calibration else {})


@dataclass(frozen=True)
class Selection:
    """Options chosen by :func:`fit_auto` and the inner cross-validation scores."""

    prior: float
    residual: str
    scores: dict[str, float]
    """Mean |log(predicted/measured)| on held-out shapes per option
    ``prior=...,residual=...,params=...``."""
    params: str = "basic"


#: Prior weights tried by :func:`fit_auto`; ∞ = the spec's parameters (no parametric fit).
PRIOR_GRID: tuple[float, ...] = (0.01, 0.1, 0.5, 2.0, math.inf)


def _folds_by_shape(data: Dataset, folds: int, seed: int = 1) -> Array:
    keys: dict[tuple[Any, ...], int] = {}
    ids = np.asarray([keys.setdefault(r.shape_key, len(keys)) for r in data.rows])
    perm = np.random.default_rng(seed).permutation(len(keys))
    return np.asarray(perm[ids] % folds)


Option = tuple[float, str, str]  # (prior, params, residual)


def _one_standard_error(options: Sequence[Option], sets: Sequence[str],
                        residuals: Sequence[str], scores: dict[str, float],
                        errors: dict[str, Array], se_rule: float) -> Option:
    """The simplest option (earlier residual mode, basic parameters, larger λ) whose
    held-out score is within ``se_rule`` standard errors of the best one: the standard
    error of the mean paired difference of their per-row errors. Small cross-validation
    sets score options noisily; this keeps a more flexible option from winning by noise."""
    order = sorted(options, key=lambda o: (residuals.index(o[2]), sets.index(o[1]), -o[0]))
    top = min(options, key=lambda o: scores[_name(o)])
    e_top = errors[_name(top)]
    for o in order:
        e = errors[_name(o)]
        if e.size != e_top.size or e.size == 0:
            continue
        d = e - e_top
        se = float(np.std(d, ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
        if float(np.mean(d)) <= se_rule * se + 1e-3 * scores[_name(top)] + 1e-12:
            return o
    return top


def _name(o: Option) -> str:
    return f"prior={o[0]:g},residual={o[2]},params={o[1]}"


def fit_auto(data: Dataset, hw: HardwareSpec, *, residual: bool | str | None = None,
             prior: float | None = None, folds: int | None = None, f_scale: float = 0.1,
             families: Sequence[str] | None = None, params: str | None = None,
             se_rule: float = 0.0, repeats: int = 1) -> tuple[FitResult, Selection]:
    """:func:`fit` with the prior weight λ, the parameter set and the residual correction
    chosen by k-fold cross-validation over shapes inside ``data`` (None = choose; a value
    = use it).

    The options include λ = ∞ with no residual, that is the uncalibrated spec, so a fit
    that does not beat the defaults on held-out shapes inside ``data`` is not used (and a
    constant rescaling, ``"scale"``, is the next simplest candidate). The score of an
    option is the mean |log(t̂/t)| on held-out shapes: it weighs the tail of the errors,
    which is where a loose fit on few points goes wrong. The simplest option within
    ``se_rule`` standard errors of the best score (0: the best, near-ties within 0.1 % going
    to the simpler; 1: the one-standard-error rule) is chosen, simpler meaning an earlier
    residual mode, then basic parameters, then a larger λ. ``repeats`` > 1 repeats the
    k-fold split with other shuffles and pools the scores (less noisy). With the data too
    small for ``folds`` folds, the defaults (λ = 0.1, basic, no residual) are used.
    ``residual`` is a mode of :data:`RESIDUAL_MODES` (or a bool); None tries those of
    :data:`AUTO_RESIDUAL_MODES`.
    """
    priors = PRIOR_GRID if prior is None else (prior,)
    sets = PARAM_SETS if params is None else (params,)
    residuals = AUTO_RESIDUAL_MODES if residual is None else (residual_mode(residual),)
    fits = [(p, s) for p in priors for s in (sets[:1] if math.isinf(p) else sets)]
    options: list[Option] = [(p, s, r) for p, s in fits for r in residuals]
    n_shapes = len({r.shape_key for r in data.rows})
    if folds is None:  # few points: more folds, so each fit sees most of them
        folds = 10 if n_shapes <= 60 else 5 if n_shapes <= 300 else 3
    scores: dict[str, float] = {}
    if len(options) > 1 and n_shapes >= 2 * folds:
        errs: dict[str, list[Array]] = {_name(o): [] for o in options}
        splits = [(rep, f) for rep in range(repeats) for f in range(folds)]
        for rep, f in splits:
            fold = _folds_by_shape(data, folds, seed=1 + rep)
            train, test = data.where(fold != f), np.flatnonzero(fold == f)
            held = data.subset(test)
            for p, s in fits:
                # the parameters do not depend on the residual mode: fit them once
                try:
                    _, _, spec = _fit_parameters(train, hw, f_scale=f_scale, prior=p,
                                                 families=families, params=s)
                except PerfmodelError:
                    continue
                for r in residuals:
                    tables = fit_residuals(train, spec, mode=r)
                    pred = held.predict(apply_params(spec, {}, tables))
                    errs[_name((p, s, r))].append(np.abs(np.log(pred / held.measured_s)))
        every: dict[str, Array] = {}
        for name, e in errs.items():
            complete = len(e) == len(splits)  # a failed fold leaves the option out
            every[name] = np.concatenate(e) if complete else np.zeros(0)
            scores[name] = float(np.mean(every[name])) if complete else math.inf
        best = _one_standard_error(options, sets, residuals, scores, every, se_rule)
    else:
        best = (prior if prior is not None else 0.1, sets[0], residual_mode(residual))
    result = fit(data, hw, f_scale=f_scale, prior=best[0], families=families,
                 residual=best[2], params=best[1])
    return result, Selection(prior=best[0], residual=best[2], scores=scores, params=best[1])
