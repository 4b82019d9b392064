"""No validation group may silently get worse: each group's median and p90 APE on the
public measurements stay within a small margin of the snapshot recorded by
``scripts/accuracy_snapshot.py`` (rerun it, and say so, when a change is meant to move
them). Skipped where the public data set (``../shared``) is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli.validate import run_validation

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "measurements"
SNAPSHOT = Path(__file__).resolve().parent / "fixtures" / "accuracy_snapshot.json"
#: Allowed worsening, absolute: median, p90 (APE fractions).
MARGIN = (0.02, 0.05)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the public data set (../shared) is absent")
def test_no_group_gets_worse_than_the_snapshot() -> None:
    snap = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    paths = (sorted(SHARED.glob("*.csv")) + sorted(SHARED.glob("aic/*.csv"))
             + sorted(SHARED.glob("aic/comm/*.csv")))
    assert [p.name for p in paths] == snap["files"]
    result = run_validation(paths)
    now = {g.label: g for g in result.groups}
    worse = []
    for label, ref in snap["groups"].items():
        g = now.get(label)
        if g is None:
            worse.append(f"{label}: no longer validated")
            continue
        if g.ours.median_ape > ref["median_ape"] + MARGIN[0]:
            worse.append(f"{label}: median {g.ours.median_ape:.1%} (was {ref['median_ape']:.1%})")
        if g.ours.p90_ape > ref["p90_ape"] + MARGIN[1]:
            worse.append(f"{label}: p90 {g.ours.p90_ape:.1%} (was {ref['p90_ape']:.1%})")
    assert not worse, "\n".join(worse)
    assert set(now) == set(snap["groups"]), "groups appeared: rerun scripts/accuracy_snapshot.py"
