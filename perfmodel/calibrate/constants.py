"""Fit the model constants (:mod:`perfmodel.timing.constants`) to public measurements.

The constants no datasheet gives (the graph kernel floor, L2 residency, kernel-family
rates, engine bookkeeping) are fitted by robust least squares on log latency:

    minimise Σ_g Σ_{i∈g} ρ(log(t̂_i / t_i)) / (n_g·G) + 10⁻³·Σ_j ((θ_j − θ0_j) / σ)²,

rows i in G groups (device, source, op, phase, dtype, kv dtype, scheme, kernel) so that
every group weighs the same whatever its row count, ρ the soft-L1 loss (scale 0.1, i.e.
errors beyond ~10 % count linearly), θ in log space for log-scaled constants, and a weak
pull (σ = 1 in log units; a quarter of the range for linear ones) towards each
constant's prior so that a constant the rows barely inform stays near its prior. Only
constants that change at least one prediction are fitted; the Jacobian's sparsity (which
rows each constant moves) is found by perturbing each once.

Many constants over a piecewise-smooth model (tile and split choices are discrete) stall
one joint trust-region fit, so :func:`fit_blocks` fits them by blocks (the constants that
move the same groups of rows), cycling over the blocks; :func:`fit_public` runs the
stages of :data:`FIT_STAGES` that way. ``scripts/fit_constants.py`` writes the bundled
table, and :func:`leave_one_out` refits without each device in turn.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perfmodel.measurements import Measurement
from perfmodel.timing.constants import PARAMS, Constants
from perfmodel.validation import Prepared, group_key

__all__ = ["FIT_STAGES", "FitResult", "Stage", "fit_blocks", "fit_constants", "fit_public",
           "leave_one_out", "pool_parents", "sensitive_constants"]

_LOSS_SCALE = 0.1
_PRIOR_SIGMA = 1.0
#: Weight of the pull towards the priors relative to the data term (whose weights sum
#: to 1 over all groups): moving a constant by one σ costs as much as raising every
#: group's mean squared log error by 0.001.
_PRIOR_WEIGHT = 1e-3
#: Up to this many constants the Jacobian is estimated densely (exact trust-region steps);
#: beyond it, column by column groups of its sparsity pattern.
_DENSE_MAX = 80


@dataclass(frozen=True)
class FitResult:
    """Fitted constants, the names fitted, rows used and the loss before and after."""

    constants: Constants
    names: tuple[str, ...]
    rows: int
    cost_before: float
    cost_after: float
    median_ape_before: float
    median_ape_after: float


def _to_x(name: str, value: float) -> float:
    """Fit coordinate of a constant: log for log-scaled ones, else the value in units of
    its range (so that steps and the prior's σ are alike across constants)."""
    p = PARAMS[name]
    return math.log(value) if p.scale == "log" else value / (p.hi - p.lo)


def _from_x(name: str, x: float) -> float:
    p = PARAMS[name]
    return math.exp(x) if p.scale == "log" else x * (p.hi - p.lo)


def _bounds(name: str) -> tuple[float, float]:
    p = PARAMS[name]
    return _to_x(name, p.lo), _to_x(name, p.hi)


def _prior(name: str, base: Constants) -> float:
    """A constant's prior: its default, or its parent's value in ``base``."""
    parent = PARAMS[name].parent
    return base[parent] if parent is not None else PARAMS[name].default


def _sigma(name: str) -> float:
    """σ of the prior in fit coordinates: 1 log unit, or a quarter of the range."""
    return _PRIOR_SIGMA if PARAMS[name].scale == "log" else 0.25


def sensitive_constants(prep: Prepared, names: Iterable[str], base: Constants
                        ) -> dict[str, npt.NDArray[np.bool_]]:
    """For each constant in ``names``, which rows' predictions move when it is perturbed
    (constants that move none are left out)."""
    ref = prep.predict(base)
    out: dict[str, npt.NDArray[np.bool_]] = {}
    for name in names:
        p = PARAMS[name]
        v = base[name]
        step = v * 1.2 if p.scale == "log" else v + 0.1 * max(abs(v), (p.hi - p.lo) / 10.0)
        if step > p.hi:
            step = v / 1.2 if p.scale == "log" else v - 0.1 * max(abs(v), (p.hi - p.lo) / 10.0)
        moved = np.abs(prep.predict(base.with_values({name: step}, "probe")) - ref) > 1e-12 * ref
        if moved.any():
            out[name] = moved
    return out


def _weights(prep: Prepared) -> npt.NDArray[np.float64]:
    keys = [group_key(r, s) for r, s in zip(prep.rows, prep.spec_ids, strict=True)]
    counts: dict[tuple[str, ...], int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return np.asarray([1.0 / math.sqrt(counts[k]) for k in keys])


def fit_constants(prep: Prepared, names: Sequence[str], base: Constants | None = None,
                  source: str = "fitted", progress: Callable[[str], None] | None = None
                  ) -> FitResult:
    """Fit ``names`` (declared constants) to the rows of ``prep``; the others keep their
    values in ``base`` (default: priors). Returns the fitted table, labelled ``source``."""
    from scipy.optimize import least_squares
    from scipy.sparse import lil_matrix

    base = base if base is not None else Constants()
    measured = prep.measured_s
    w = _weights(prep)
    moved = sensitive_constants(prep, names, base)
    fit_names = [n for n in names if n in moved]
    if progress:
        progress(f"fitting {len(fit_names)} constants on {len(measured)} rows")

    if not fit_names:
        med = float(np.median(np.abs(prep.predict(base) / measured - 1.0)))
        return FitResult(base, (), len(measured), float("nan"), float("nan"), med, med)

    def consts_of(x: npt.NDArray[np.float64]) -> Constants:
        return base.with_values({n: _from_x(n, float(v)) for n, v in zip(fit_names, x,
                                                                          strict=True)},
                                source)

    x0 = np.asarray([_to_x(n, base[n]) for n in fit_names])
    prior = np.asarray([_to_x(n, _prior(n, base)) for n in fit_names])
    sig = np.asarray([_sigma(n) for n in fit_names])
    lo, hi = (np.asarray(b) for b in zip(*(_bounds(n) for n in fit_names), strict=True))
    x0 = np.clip(x0, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    n_rows = len(measured)
    scale_rows = 1.0 / math.sqrt(len({group_key(r, s) for r, s in
                                      zip(prep.rows, prep.spec_ids, strict=True)}))

    def residuals(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        pred = prep.predict(consts_of(x))
        r = np.log(np.maximum(pred, 1e-15) / measured)
        # soft-L1 in-place (rho(z) = 2(sqrt(1+z)-1) with z = (r/c)^2), expressed as a
        # residual whose square is the loss
        z = (r / _LOSS_SCALE) ** 2
        rr = np.sign(r) * _LOSS_SCALE * np.sqrt(2.0 * (np.sqrt(1.0 + z) - 1.0))
        return np.concatenate([rr * w * scale_rows,
                               math.sqrt(_PRIOR_WEIGHT) * (x - prior) / sig])

    sparsity = lil_matrix((n_rows + len(fit_names), len(fit_names)), dtype=int)
    for j, n in enumerate(fit_names):
        sparsity[np.flatnonzero(moved[n]), j] = 1
        sparsity[n_rows + j, j] = 1
    r0 = residuals(x0)
    before = float(np.median(np.abs(prep.predict(consts_of(x0)) / measured - 1.0)))
    dense = len(fit_names) <= _DENSE_MAX
    sol = least_squares(residuals, x0, bounds=(lo, hi),
                        jac_sparsity=None if dense else sparsity,
                        max_nfev=200,
                        xtol=1e-10, ftol=1e-10, diff_step=1e-3, x_scale=1.0)
    fitted = consts_of(sol.x)
    after = float(np.median(np.abs(prep.predict(fitted) / measured - 1.0)))
    if progress:
        progress(f"median APE {before:.1%} -> {after:.1%} ({sol.nfev} evaluations: "
                 f"{sol.message})")
    return FitResult(fitted, tuple(fit_names), n_rows, float(r0 @ r0), float(2 * sol.cost),
                     before, after)


def fit_blocks(prep: Prepared, names: Sequence[str], base: Constants | None = None,
               source: str = "fitted", cycles: int = 3,
               progress: Callable[[str], None] | None = None) -> FitResult:
    """:func:`fit_constants` by blocks: constants that move the same groups of rows form a
    block, fitted on those rows with the rest held; the blocks are cycled ``cycles`` times
    (block coordinate descent converges where one joint trust-region fit of many constants
    over a piecewise-smooth model stalls)."""
    base = base if base is not None else Constants()
    measured = prep.measured_s
    moved = sensitive_constants(prep, names, base)
    keys = np.asarray([hash(group_key(r, s)) for r, s in zip(prep.rows, prep.spec_ids,
                                                               strict=True)])
    blocks: dict[frozenset[int], list[str]] = {}
    for n, rows in moved.items():
        blocks.setdefault(frozenset(np.unique(keys[rows]).tolist()), []).append(n)
    before = float(np.median(np.abs(prep.predict(base) / measured - 1.0)))
    current = base
    order = sorted(blocks.items(), key=lambda kv: -len(kv[0]))  # broad constants first
    for cycle in range(cycles):
        for groups, block in order:
            rows = np.isin(keys, list(groups))
            fit = fit_constants(prep.subset(rows), block, current, source)
            current = fit.constants
        if progress:
            med = float(np.median(np.abs(prep.predict(current) / measured - 1.0)))
            progress(f"cycle {cycle + 1}: {len(order)} blocks, median APE {med:.1%}")
    after = float(np.median(np.abs(prep.predict(current) / measured - 1.0)))
    return FitResult(current, tuple(moved), len(measured), float("nan"), float("nan"),
                     before, after)


def leave_one_out(prep: Prepared, devices: Sequence[str] | None = None,
                  progress: Callable[[str], None] | None = None
                  ) -> dict[str, tuple[Constants, npt.NDArray[np.float64]]]:
    """For each device (default: every device in ``prep``): refit the constants from their
    priors on the other devices' rows (:func:`fit_public`) and predict that device's rows
    with the result. Returns {device: (constants, predictions of its rows)}."""
    out: dict[str, tuple[Constants, npt.NDArray[np.float64]]] = {}
    specs = np.asarray(prep.spec_ids)
    for dev in devices if devices is not None else sorted(set(prep.spec_ids)):
        if progress:
            progress(f"leaving out {dev}")
        held = specs == dev
        fitted = fit_public(prep.subset(~held), source=f"fitted without {dev}",
                            progress=progress)
        out[dev] = (fitted, prep.subset(held).predict(fitted))
    return out


# ----------------------------------------------------------------- the public-data fit
@dataclass(frozen=True)
class Stage:
    """One stage of the public-data fit: the rows it uses and the constants it fits
    (fnmatch patterns); stages run in order, each holding the earlier ones' values."""

    name: str
    rows: Callable[[Measurement], bool]
    patterns: tuple[str, ...]

    def names(self) -> list[str]:
        return sorted(n for n in PARAMS if any(fnmatch.fnmatch(n, p) for p in self.patterns)
                      and n not in _NEVER_FITTED)


#: Constants left at their prior even though rows move them: the GEMM library's own rate
#: is the spec's cited achievable fraction.
_NEVER_FITTED = frozenset({"gemm.auto.none.efficiency"})


def _graph(r: Measurement) -> bool:
    return r.timing.startswith("aic_")


#: The stages of ``scripts/fit_constants.py``: first what plain bf16 GEMMs replayed from a
#: CUDA graph determine (the graph kernel floor, L2 residency), then the quantized GEMM
#: paths, then attention, decode and prefill together since they share kernel-family
#: constants (with the older public attention sets, which inform the FlashAttention-2
#: families).
FIT_STAGES: tuple[Stage, ...] = (
    Stage("gemm-bf16", lambda r: r.op == "gemm" and _graph(r) and r.quant in ("", "none"),
          ("graph_kernel_s*", "l2_*", "gemm_cta_bandwidth*", "gemm_split_reduce*")),
    Stage("gemm-quantized", lambda r: r.op == "gemm" and _graph(r)
          and r.quant not in ("", "none"),
          ("gemm.*", "call.*.gemm-*", "row.*.gemm-*", "host.*")),
    Stage("attention", lambda r: r.op == "attention",
          ("attn.*", "call.*.attention-*", "row.*.attention-*")),
)


def pool_parents(consts: Constants, source: str) -> Constants:
    """Set each parent constant with fitted ``pooled`` children to their mean (geometric
    for log-scaled constants), deepest first: the value an architecture, family or kernel
    nobody measured inherits. Rows whose own constants are fitted do not change."""
    current = consts
    for _ in range(4):  # arch -> family -> class, engine kind...: at most a few levels
        children: dict[str, list[float]] = {}
        for name, value in current.fitted.items():
            p = PARAMS.get(name)
            if p is not None and p.parent is not None and p.pooled:
                children.setdefault(p.parent, []).append(value)
        pooled = {}
        for parent, values in children.items():
            arr = np.asarray(values, dtype=np.float64)
            mean = float(np.exp(np.mean(np.log(np.maximum(arr, 1e-300))))
                         if PARAMS[parent].scale == "log" else np.mean(arr))
            lo, hi = PARAMS[parent].lo, PARAMS[parent].hi
            pooled[parent] = min(max(mean, lo), hi)
        if all(current.fitted.get(k) == v for k, v in pooled.items()):
            break
        current = current.with_values(pooled, source + " (mean of its fitted cases)")
    return current


def fit_public(prep: Prepared, base: Constants | None = None, source: str = "fitted",
               stages: Sequence[Stage] = FIT_STAGES, cycles: int = 3,
               progress: Callable[[str], None] | None = None) -> Constants:
    """Run the fit stages on ``prep`` (block coordinate descent in each), then pool each
    parent constant from its fitted children (:func:`pool_parents`); returns the fitted
    table labelled ``source``.

    While it runs, a kernel family without fitted values does not take its kin's
    (``Constants.kin`` off), so that no family's rows move another's constants; the table
    it returns has ``base``'s setting again (on by default: what a family that had no rows
    in ``prep`` then gets)."""
    base = base if base is not None else Constants()
    current = dataclasses.replace(base, kin=False)
    for stage in stages:
        keep = np.asarray([stage.rows(r) for r in prep.rows], dtype=bool)
        if not keep.any():
            continue
        if progress:
            progress(f"stage {stage.name}: {int(keep.sum())} rows")
        current = fit_blocks(prep.subset(keep), stage.names(), current, source, cycles,
                             progress).constants
    return dataclasses.replace(pool_parents(current, source), kin=base.kin)
