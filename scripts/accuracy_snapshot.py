"""Record every validation group's error today, for the regression test that fails when a
group gets worse (tests/test_accuracy_snapshot.py).

    python scripts/accuracy_snapshot.py [--data ../shared/data/measurements]

Validates the public measurements (``*.csv``, ``aic/*.csv`` and ``aic/comm/*.csv``) with
the bundled constants and writes tests/fixtures/accuracy_snapshot.json: per group, rows,
median and p90 APE.
Rerun it when a change is meant to move the figures, and say so in the commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel.cli.validate import run_validation  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "accuracy_snapshot.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "measurements")
    args = ap.parse_args(argv)
    paths = (sorted(args.data.glob("*.csv")) + sorted(args.data.glob("aic/*.csv"))
             + sorted(args.data.glob("aic/comm/*.csv")))
    result = run_validation(paths)
    groups = {g.label: {"n": g.ours.n, "median_ape": round(g.ours.median_ape, 4),
                        "p90_ape": round(g.ours.p90_ape, 4)} for g in result.groups}
    SNAPSHOT.write_text(json.dumps({"files": [p.name for p in paths], "groups": groups},
                                   indent=1) + "\n", encoding="utf-8")
    print(f"{len(groups)} groups -> {SNAPSHOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
