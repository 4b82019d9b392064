"""Error reports: before vs after calibration, by op family and bottleneck regime, with
the "after" error measured on shapes the fit never saw.

Cross-validation is leave-shape-out k-fold: the distinct shapes (op, path, dtype, sizes)
are dealt into k folds at random (fixed seed); each fold is predicted by a fit on the
other k − 1, so repeated measurements of one shape never sit on both sides. "Before" is
the spec without calibration (nothing fitted, so every row is out of sample).

APE = |predicted − measured| / measured; tables give the median and 90th percentile.
The regime of a row is the bottleneck label of the calibrated prediction (compute,
memory or latency).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.data import Dataset
from perfmodel.calibrate.fit import FitResult, apply_params, fit, residual_mode, uncalibrated
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.ops.cost import Array

__all__ = [
    "CrossValidation", "cross_validate", "format_table", "group_table", "scatter_plot",
    "split_extrapolation",
]


@dataclass(frozen=True)
class CrossValidation:
    """Aligned per-row arrays: measured, before (uncalibrated), held-out after, in-sample
    after (fit on everything), and the regime label of each row."""

    data: Dataset
    before_s: Array
    heldout_s: Array
    insample_s: Array
    regime: tuple[str, ...]
    folds: int
    residual: str
    full_fit: FitResult

    def groups(self) -> dict[tuple[str, str], Array]:
        """(family, regime) -> boolean mask, plus (family, "all") and ("all", "all")."""
        fam = np.asarray([r.family + "/" + r.dtype for r in self.data.rows])
        reg = np.asarray(self.regime)
        out: dict[tuple[str, str], Array] = {}
        for f in sorted(set(fam.tolist())):
            for g in ("compute", "memory", "latency"):
                mask = (fam == f) & (reg == g)
                if mask.any():
                    out[(f, g)] = mask
            out[(f, "all")] = fam == f
        out[("all", "all")] = np.ones(len(fam), dtype=bool)
        return out

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for (family, regime), mask in self.groups().items():
            rows.append({"family": family, "regime": regime, "n": int(mask.sum()),
                         "before": _stats(self.before_s[mask], self.data.measured_s[mask]),
                         "after_heldout": _stats(self.heldout_s[mask],
                                                 self.data.measured_s[mask]),
                         "after_insample": _stats(self.insample_s[mask],
                                                  self.data.measured_s[mask])})
        return {"folds": self.folds, "scheme": "leave-shape-out k-fold",
                "residual": self.residual, "groups": rows}


def _stats(pred: Array, meas: Array) -> dict[str, float]:
    if pred.size == 0:
        return {"median_ape": math.nan, "p90_ape": math.nan, "mape": math.nan}
    ape = np.abs(pred - meas) / meas
    return {"median_ape": float(np.median(ape)), "p90_ape": float(np.percentile(ape, 90)),
            "mape": float(np.mean(ape))}


def _shape_folds(data: Dataset, folds: int, seed: int) -> Array:
    keys: dict[tuple[Any, ...], int] = {}
    ids = np.asarray([keys.setdefault(r.shape_key, len(keys)) for r in data.rows])
    perm = np.random.default_rng(seed).permutation(len(keys))
    return np.asarray(perm[ids] % folds)


def cross_validate(data: Dataset, hw: HardwareSpec, *, folds: int = 5,
                   residual: bool | str = False,
                   seed: int = 0, fitter: Callable[..., FitResult] | None = None,
                   **fit_kwargs: Any) -> CrossValidation:
    """Leave-shape-out k-fold cross-validation of :func:`perfmodel.calibrate.fit.fit`."""
    if folds < 2:
        raise PerfmodelError("folds", f"must be ≥ 2, got {folds}", "use e.g. --folds 5")
    fitter = fitter or fit
    base = uncalibrated(hw)
    fold = _shape_folds(data, folds, seed)
    if len(set(fold.tolist())) < 2:
        raise PerfmodelError("measurements", f"only {len(data)} distinct shape(s): too few "
                             "for cross-validation", "measure more shapes (a larger budget)")
    heldout = np.full(len(data), np.nan)
    for f in range(folds):
        test = np.flatnonzero(fold == f)
        if test.size == 0:
            continue
        train = data.where(fold != f)
        result = fitter(train, base, residual=residual, **fit_kwargs)
        spec = apply_params(base, result.params, result.residuals, constants=result.constants)
        heldout[test] = data.subset(test).predict(spec)
    full = fitter(data, base, residual=residual, **fit_kwargs)
    calibrated = apply_params(base, full.params, full.residuals, constants=full.constants)
    insample = data.predict(calibrated)
    regime = np.empty(len(data), dtype=object)
    for idx, p in data.predictions(calibrated):
        regime[idx] = np.atleast_1d(np.asarray(p.bottleneck))
    return CrossValidation(data=data, before_s=data.predict(base), heldout_s=heldout,
                           insample_s=insample, regime=tuple(str(r) for r in regime),
                           folds=folds, residual=residual_mode(residual), full_fit=full)


def _pct(x: float) -> str:
    return "   -  " if not math.isfinite(x) else f"{100 * x:5.1f}%"


def format_table(cv: CrossValidation) -> list[str]:
    """Lines of a fixed-width table: before vs held-out after by family and regime."""
    head = (f"{'family/dtype':22s} {'regime':8s} {'n':>5s}  {'before med':>10s} {'p90':>7s}"
            f"  {'after med':>9s} {'p90':>7s}  {'in-sample med':>13s}")
    lines = [head, "-" * len(head)]
    for (family, regime), mask in cv.groups().items():
        b = _stats(cv.before_s[mask], cv.data.measured_s[mask])
        a = _stats(cv.heldout_s[mask], cv.data.measured_s[mask])
        s = _stats(cv.insample_s[mask], cv.data.measured_s[mask])
        lines.append(f"{family:22s} {regime:8s} {int(mask.sum()):5d}  {_pct(b['median_ape']):>10s}"
                     f" {_pct(b['p90_ape']):>7s}  {_pct(a['median_ape']):>9s}"
                     f" {_pct(a['p90_ape']):>7s}  {_pct(s['median_ape']):>13s}")
    return lines


def group_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> list[str]:
    """A plain fixed-width table of dict rows; ``columns`` = (key, header)."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return _pct(v).strip() if abs(v) < 100 else f"{v:.3g}"
        return str(v)

    cells = [[cell(r.get(k, "")) for k, _ in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (_, h) in enumerate(columns)]
    out = ["  ".join(h.ljust(w) for (_, h), w in zip(columns, widths, strict=False))]
    out.append("-" * len(out[0]))
    out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in cells)
    return out


def split_extrapolation(data: Dataset, fit_max: int = 4096, test_min: int = 8192,
                        test_max: int = 32768) -> tuple[Array, Array]:
    """Masks for sequence-length extrapolation: attention rows with S ≤ ``fit_max`` (and
    every non-attention row) to fit on; attention rows with ``test_min`` ≤ S ≤
    ``test_max`` to predict. S is the longer of seq_q and seq_kv."""
    fit_mask = np.zeros(len(data), dtype=bool)
    test_mask = np.zeros(len(data), dtype=bool)
    for i, r in enumerate(data.rows):
        if r.op != "attention":
            fit_mask[i] = True
            continue
        s = max(r.sizes[3], r.sizes[4])
        fit_mask[i] = s <= fit_max
        test_mask[i] = test_min <= s <= test_max
    return fit_mask, test_mask


def scatter_plot(cv: CrossValidation, path: str | Path, title: str = "") -> Path | None:
    """Predicted vs measured, log-log, before and after (held-out), with ±10 % bands.
    Returns the path written, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    meas = cv.data.measured_s * 1e6
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharex=True, sharey=True)
    fams = sorted({r.family for r in cv.data.rows})
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    colors = {f: palette[i % len(palette)] for i, f in enumerate(fams)}
    fam = np.asarray([r.family for r in cv.data.rows])
    lo, hi = float(np.min(meas)) * 0.5, float(np.max(meas)) * 2.0
    for ax, pred, label in ((axes[0], cv.before_s, "before (spec defaults)"),
                            (axes[1], cv.heldout_s, f"after, held out ({cv.folds}-fold)")):
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, color="black", lw=1)
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="grey", alpha=0.25, label="±10 %")
        for f in fams:
            m = fam == f
            ax.scatter(meas[m], pred[m] * 1e6, s=8, alpha=0.7, color=colors.get(f, "k"),
                       label=f)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (µs)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.2)
    axes[0].set_ylabel("predicted (µs)")
    axes[1].legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
