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
  themselves, with the kernel width h chosen by leave-one-out over a grid and w0 = 0.1.

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
from perfmodel.calibrate.data import Dataset
from perfmodel.hardware.spec import Calibration, HardwareSpec
from perfmodel.ops.cost import Array
from perfmodel.timing.knobs import knobs_for
from perfmodel.timing.residual import SHAPE_SUFFIX, residual_keys, shape_coordinates

__all__ = [
    "PARAMETERS",
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
    "residual_mode",
    "residual_table",
    "shape_table",
]

#: Parameters per family in order of importance: with few rows only the first ones are
#: fitted (at least three rows per parameter).
PARAMETERS: dict[str, tuple[str, ...]] = {
    "gemm": ("compute_fraction", "overhead_s", "memory_fraction", "overlap_p"),
    "attention": ("attention_efficiency", "overhead_s", "memory_fraction", "overlap_p"),
    "stream": ("memory_fraction", "overhead_s"),
}

_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_fraction": (0.01, 1.5), "memory_fraction": (0.01, 1.5),
    "overhead_s": (1e-8, 1e-2), "overlap_p": (0.0, 2.0 / 3.0),
    "attention_efficiency": (0.05, 2.0),
}
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
    """Parameters left at their default (too few rows to fit them)."""


@dataclass(frozen=True)
class FitResult:
    """All fitted keys plus in-sample errors before and after (fractions, 0.05 = 5 %)."""

    keys: tuple[KeyFit, ...]
    n: int
    error_before: dict[str, float]
    error_after: dict[str, float]
    skipped: tuple[tuple[str, str], ...] = ()
    residuals: dict[str, list[list[float]]] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, dict[str, float]]:
        return {k.key: dict(k.params) for k in self.keys}

    def calibration(self, device: str, environment: dict[str, str] | None = None,
                    date: str = "") -> Calibration:
        return Calibration(date=date, device=device, environment=dict(environment or {}),
                           points=self.n, params=self.params, error_before=self.error_before,
                           error_after=self.error_after, residuals=self.residuals)


def apply_params(hw: HardwareSpec, params: dict[str, dict[str, float]],
                 residuals: dict[str, list[list[float]]] | None = None) -> HardwareSpec:
    """``hw`` with a calibration block holding ``params``: each key given replaces that
    key's parameters (an absent ``overlap_p`` means the hard max); other keys are kept."""
    old = hw.calibration
    merged = {k: dict(v) for k, v in (old.params if old else {}).items()}
    merged.update({k: dict(v) for k, v in params.items()})
    res = dict(old.residuals) if old else {}
    res.update(residuals or {})
    cal = Calibration.model_construct(
        date=old.date if old else "", device=old.device if old else hw.id,
        environment=dict(old.environment) if old else {}, points=old.points if old else 0,
        params=merged, error_before=dict(old.error_before) if old else {},
        error_after=dict(old.error_after) if old else {}, residuals=res)
    return hw.model_copy(update={"calibration": cal})


def _defaults(hw: HardwareSpec, family: str, dtype: str) -> dict[str, float]:
    """The values ``hw`` gives the parameters of ``family/dtype`` now."""
    k = knobs_for(hw, family, dtype)  # type: ignore[arg-type]
    return {
        "compute_fraction": _fraction_of(hw, family, dtype),
        "memory_fraction": k.achievable_bandwidth / k.bandwidth,
        "overhead_s": max(k.overhead_s, 2e-8),
        "overlap_p": k.overlap_p,
        "attention_efficiency": k.attention_efficiency,
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
    return math.log(value)


def _from_u(name: str, u: float) -> float:
    if name == "overlap_p":
        return math.inf if u < _HARD_MAX_Q else 1.0 / u
    return math.exp(u)


def _u_bounds(name: str) -> tuple[float, float]:
    lo, hi = _BOUNDS[name]
    if name == "overlap_p":
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


def fit_family(hw: HardwareSpec, data: Dataset, family: str, dtype: str, *,
               f_scale: float = 0.1, prior: float = 0.02, max_nfev: int = 300) -> KeyFit:
    """Fit the parameters of ``family/dtype`` on ``data`` (rows of that key only)."""
    if family not in PARAMETERS:
        raise PerfmodelError("family", f"no fitted parameters for {family!r}",
                             f"use one of {', '.join(PARAMETERS)}")
    if len(data) == 0:
        raise PerfmodelError("measurements", f"no rows for {family}/{dtype}",
                             "measure that family first")
    key = f"{family}/{dtype}"
    defaults = _defaults(hw, family, dtype)
    n_free = max(1, min(len(PARAMETERS[family]), len(data) // _ROWS_PER_PARAM))
    names = PARAMETERS[family][:n_free]
    fixed = PARAMETERS[family][n_free:]
    u0 = np.asarray([_to_u(n, defaults[n]) for n in names])
    lo = np.asarray([_u_bounds(n)[0] for n in names])
    hi = np.asarray([_u_bounds(n)[1] for n in names])
    u0 = np.clip(u0, lo + 1e-9, hi - 1e-9)
    log_t = np.log(data.measured_s)
    w = data.weight

    def residual(u: Array) -> Array:
        spec = apply_params(hw, {key: _as_params(names, u)})
        pred = data.predict(spec)
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
    params = _as_params(names, best.x)
    shown_defaults = {n: defaults[n] for n in PARAMETERS[family]}
    return KeyFit(key=key, params=params, defaults=shown_defaults, n=len(data),
                  cost=float(best.cost), nfev=int(best.nfev), success=bool(best.success),
                  message=str(best.message), fixed=tuple(fixed))


def _stats(pred: Array, meas: Array) -> tuple[float, float]:
    if pred.size == 0:
        return math.nan, math.nan
    ape = np.abs(pred - meas) / meas
    return float(np.median(ape)), float(np.percentile(ape, 90))


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


#: Residual correction modes: none, 1-D tables over log size, kernel tables over log shape.
RESIDUAL_MODES: tuple[str, ...] = ("off", "size", "shape")
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


def shape_table(x: Array, e: Array, w0: float = _SHAPE_W0) -> list[list[float]]:
    """A shape table: [h, w0] then [x_1 … x_d, e] per point, h chosen by leave-one-out
    (mean |error| of each point predicted from the others) over a grid of widths."""
    xs = np.asarray(x, dtype=np.float64)
    es = np.asarray(e, dtype=np.float64)
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


def fit_residuals(data: Dataset, hw: HardwareSpec, min_rows: int = 4,
                  mode: str = "size") -> dict[str, list[list[float]]]:
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
        use_shape = mode == "shape" and family != "stream"
        points: dict[str, tuple[list[Any], list[float]]] = {}
        for idx, op, p in data.predictions_with_ops(spec):
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
            if use_shape:
                new[key + SHAPE_SUFFIX] = shape_table(np.asarray(xs), np.asarray(es))
            else:
                new[key] = residual_table(np.asarray(xs), np.asarray(es))
        tables.update(new)
        spec = apply_params(spec, {}, new)
    return tables


def fit(data: Dataset, hw: HardwareSpec, *, f_scale: float = 0.1, prior: float = 0.02,
        families: Sequence[str] | None = None, residual: bool | str = False) -> FitResult:
    """Fit every (family, dtype) key present in ``data`` and report in-sample errors.

    Keys with no parameters of their own (unfused attention) are predicted with the
    fitted gemm and stream parameters. ``families`` restricts which keys are fitted;
    ``residual`` adds residual correction tables (``"size"`` or ``True``, ``"shape"``).
    """
    if len(data) == 0:
        raise PerfmodelError("measurements", "no rows to fit", "measure some kernels first")
    keys: list[KeyFit] = []
    skipped: list[tuple[str, str]] = []
    wanted = set(families or PARAMETERS)
    pairs = sorted({(r.family, r.dtype) for r in data.rows})
    base = hw.model_copy(update={"calibration": None}) if hw.calibration else hw
    spec = base
    for family, dtype in pairs:
        if family not in PARAMETERS:
            continue
        if family not in wanted:
            skipped.append((f"{family}/{dtype}", "not asked for"))
            continue
        sub = data.where(data.family_mask(family, dtype))
        try:
            kf = fit_family(spec, sub, family, dtype, f_scale=f_scale, prior=prior)
        except PerfmodelError as exc:
            skipped.append((f"{family}/{dtype}", str(exc)))
            continue
        keys.append(kf)
        spec = apply_params(spec, {kf.key: kf.params})
    tables = fit_residuals(data, spec, mode=residual_mode(residual))
    spec = apply_params(spec, {}, tables)
    before = data.predict(base)
    after = data.predict(spec)
    err_b: dict[str, float] = {}
    err_a: dict[str, float] = {}
    groups = {"all": np.ones(len(data), dtype=bool)}
    for family, dtype in pairs:
        groups[f"{family}/{dtype}"] = data.family_mask(family, dtype)
    for name, mask in groups.items():
        mb, pb = _stats(before[mask], data.measured_s[mask])
        ma, pa = _stats(after[mask], data.measured_s[mask])
        err_b[f"{name}.median_ape"], err_b[f"{name}.p90_ape"] = mb, pb
        err_a[f"{name}.median_ape"], err_a[f"{name}.p90_ape"] = ma, pa
    return FitResult(keys=tuple(keys), n=len(data), error_before=err_b, error_after=err_a,
                     skipped=tuple(skipped), residuals=tables)


@dataclass(frozen=True)
class Selection:
    """Options chosen by :func:`fit_auto` and the inner cross-validation scores."""

    prior: float
    residual: str
    scores: dict[str, float]
    """Mean |log(predicted/measured)| on held-out shapes per option ``prior=...,residual=...``."""


PRIOR_GRID: tuple[float, ...] = (0.01, 0.1, 0.5, 2.0)


def _folds_by_shape(data: Dataset, folds: int, seed: int = 1) -> Array:
    keys: dict[tuple[Any, ...], int] = {}
    ids = np.asarray([keys.setdefault(r.shape_key, len(keys)) for r in data.rows])
    perm = np.random.default_rng(seed).permutation(len(keys))
    return np.asarray(perm[ids] % folds)


def fit_auto(data: Dataset, hw: HardwareSpec, *, residual: bool | str | None = None,
             prior: float | None = None, folds: int | None = None, f_scale: float = 0.1,
             families: Sequence[str] | None = None) -> tuple[FitResult, Selection]:
    """:func:`fit` with the prior weight λ and the residual correction chosen by k-fold
    cross-validation over shapes inside ``data`` (None = choose; a value = use it).

    The score of an option is the mean |log(t̂/t)| on held-out shapes: it weighs the
    tail of the errors, which is where a loose fit on few points goes wrong. With the
    data too small for ``folds`` folds, the defaults (λ = 0.1, no residual) are used.
    ``residual`` is a mode of :data:`RESIDUAL_MODES` (or a bool); None tries them all.
    """
    priors = PRIOR_GRID if prior is None else (prior,)
    residuals = RESIDUAL_MODES if residual is None else (residual_mode(residual),)
    options = [(p, r) for p in priors for r in residuals]
    n_shapes = len({r.shape_key for r in data.rows})
    if folds is None:  # few points: more folds, so each fit sees most of them
        folds = 10 if n_shapes <= 60 else 5 if n_shapes <= 300 else 3
    scores: dict[str, float] = {}
    if len(options) > 1 and n_shapes >= 2 * folds:
        fold = _folds_by_shape(data, folds)
        base = hw.model_copy(update={"calibration": None}) if hw.calibration else hw
        for p, r in options:
            errs: list[Array] = []
            for f in range(folds):
                train, test = data.where(fold != f), np.flatnonzero(fold == f)
                try:
                    res = fit(train, base, f_scale=f_scale, prior=p, families=families,
                              residual=r)
                except PerfmodelError:
                    continue
                spec = apply_params(base, res.params, res.residuals)
                held = data.subset(test)
                errs.append(np.abs(np.log(held.predict(spec) / held.measured_s)))
            scores[f"prior={p:g},residual={r}"] = (float(np.mean(np.concatenate(errs)))
                                                  if errs else math.inf)
        best = min(options, key=lambda o: scores[f"prior={o[0]:g},residual={o[1]}"])
    else:
        best = (prior if prior is not None else 0.1, residual_mode(residual))
    result = fit(data, hw, f_scale=f_scale, prior=best[0], families=families,
                 residual=best[1])
    return result, Selection(prior=best[0], residual=best[1], scores=scores)
