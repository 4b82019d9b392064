"""Spec-only accuracy on published real-GPU measurements, failing past the targets.

The targets are those of the prediction issue: kernel-timed GEMM sources median APE ≤ 15 %
and p90 ≤ 35 % per source and GPU; eager-timed sources median ≤ 20 % per GPU; attention
median ≤ 15 % and p90 ≤ 35 %; the mean of the group medians ≤ 12 %. They are checked on the
full public data set when ``../shared/data/measurements`` is present (it is in CI) and,
with the medians only, on the cited subset bundled in the package.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from perfmodel.data import bundled_measurements
from perfmodel.data._subset import AIC_FILE
from perfmodel.measurements import Measurement, MeasurementSet, read_measurements
from perfmodel.validation import GroupResult, ValidationReport, error_stats, validate

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "measurements"

KERNEL_TIMED_GEMM = {
    ("a100-80gb-sxm", "vidur"), ("h100-sxm", "vidur"), ("a40", "vidur"),
    ("h100-sxm", "xla_ptable", "bf16"), ("b200", "xla_ptable", "bf16"),
    ("mi300x", "xla_ptable", "bf16"),
}
EAGER_SOURCES = {"neusight", "llmcompass"}


def _report(paths: list[Path]) -> ValidationReport:
    rows: list[Measurement] = []
    for path in paths:
        rows.extend(read_measurements(path).rows)
    return validate(MeasurementSet(tuple(rows)))


def _kernel_timed(g: GroupResult) -> bool:
    return g.op == "gemm" and ((g.spec, g.source) in KERNEL_TIMED_GEMM
                               or (g.spec, g.source, g.dtype) in KERNEL_TIMED_GEMM)


def _pooled(report: ValidationReport) -> list[GroupResult]:
    """The groups these targets were set on: (spec, source, op, dtype), whatever the
    phase or kernel (validate itself now splits them further)."""
    index: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, (r, spec) in enumerate(zip(report.rows, report.spec_ids, strict=True)):
        index[(spec, r.source, r.op, r.dtype)].append(i)
    measured = np.asarray([r.measured_s for r in report.rows])
    out = []
    for (spec, source, op, dtype), idx in sorted(index.items()):
        sel = np.asarray(idx)
        out.append(GroupResult(spec=spec, source=source, op=op, dtype=dtype,
                               ours=error_stats(report.predicted_s[sel], measured[sel]),
                               baseline=error_stats(report.baseline_s[sel], measured[sel]),
                               timing=report.rows[idx[0]].timing, floor_s=0.0, floor_rule=""))
    return out


def _check(report: ValidationReport, *, p90: bool) -> None:
    failures = []
    groups = _pooled(report)
    for g in groups:
        name = f"{g.spec}/{g.source}/{g.op}/{g.dtype}"
        med, q90 = g.ours.median_ape, g.ours.p90_ape
        if _kernel_timed(g) and (med > 0.15 or (p90 and q90 > 0.35)):
            failures.append(f"{name}: median {med:.1%}, p90 {q90:.1%}")
        if g.op == "gemm" and g.source in EAGER_SOURCES and med > 0.20:
            failures.append(f"{name}: median {med:.1%} > 20 %")
        if g.op == "attention" and (med > 0.15 or (p90 and q90 > 0.35)):
            failures.append(f"{name}: median {med:.1%}, p90 {q90:.1%}")
        # spec-only predictions must beat the bare roofline on every group with real data
        if g.ours.n >= 100 and med >= g.baseline.median_ape:
            failures.append(f"{name}: {med:.1%} not better than the roofline's "
                            f"{g.baseline.median_ape:.1%}")
    mean_median = float(np.mean([g.ours.median_ape for g in groups]))
    if mean_median > 0.12:
        failures.append(f"mean of group medians {mean_median:.1%} > 12 %")
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the public data set (../shared) is absent")
def test_targets_on_the_public_measurements() -> None:
    report = _report(sorted(SHARED.glob("*.csv")))
    assert report.overall.n > 30000
    _check(report, p90=True)


def test_medians_on_the_bundled_subset() -> None:
    report = _report([p for p in bundled_measurements() if p.name != AIC_FILE])
    assert report.overall.n > 2000
    _check(report, p90=False)


def test_engine_kernels_on_the_bundled_subset() -> None:
    """The engine-kernel issue's target for all rows together (median APE ≤ 10 %) on the
    bundled AIConfigurator subset: a fresh install sees the picture the full tables give.
    Its per-group targets need ≥ 300 rows a group (the subset keeps 16) and its p90 is
    not checked here: the subset keeps each group's smallest and largest shapes, the
    tails, in a sixteenth of the rows."""
    report = _report([p for p in bundled_measurements() if p.name == AIC_FILE])
    assert report.overall.n > 2000
    assert {r.source.split("_")[1] for r in report.rows} >= {"trtllm", "vllm", "sglang", "nccl"}
    assert report.overall.median_ape <= 0.10, f"median {report.overall.median_ape:.1%}"
