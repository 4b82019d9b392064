"""Transfer of a calibration between the GPUs of AIConfigurator's database: the table of
issue 12's transfer target.

    python scripts/calibration_transfer.py [--data ../shared/data/measurements] [--json]

For every ordered pair (A, B) of A100, H100, B200 and L40S: fit A on at most 300 designed
shapes per group, carry the kernel-family part to B's spec, and compare B's median APE
with B's spec-only one (:mod:`perfmodel.calibrate.transfer_eval`), under three tables of
model constants: the bundled one (fitted on all four GPUs: spec-only is in-sample for B),
one refitted without B's rows (the honest baseline; these refits are cached under
``--cache``, 5-20 minutes each on two busy cores the first time), and the priors alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel.calibrate.data import read_rows  # noqa: E402
from perfmodel.calibrate.transfer_eval import (  # noqa: E402
    PairResult,
    evaluate_pairs,
    leave_out_constants,
)
from perfmodel.measurements import read_measurements  # noqa: E402

#: The rows the bundled constants were fitted on (scripts/fit_constants.py).
FIT_FILES = ("aic/*.csv", "a30_flashattn_nvbench.csv", "vidur_attention_a100.csv")


def _table(results: list[PairResult]) -> list[str]:
    lines = ["| A → B | in reach | base constants | B rows | B spec-only median / p90 | "
             "transferred median / p90 | lower by | target (≥ 30 %) |",
             "|---|:-:|---|---:|---:|---:|---:|:-:|"]
    for r in results:
        mark = ("✓" if r.meets() else "") if r.within_reach else "(not in reach)"
        lines.append(f"| {r.source} → {r.target} | {'yes' if r.within_reach else 'no'} | "
                     f"{r.base} | {r.n} | {r.spec_median:.1%} / {r.spec_p90:.1%} | "
                     f"{r.transfer_median:.1%} / {r.transfer_p90:.1%} | {r.gain:.0%} | {mark} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "measurements")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "transfer_cache",
                    help="folder for the constants refitted without each GPU")
    ap.add_argument("--max-fit-rows", type=int, default=300)
    ap.add_argument("--bundled-only", action="store_true",
                    help="only the bundled table (no refits without each GPU, no priors)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = sorted((args.data / "aic").glob("*.csv"))
    if not files:
        print(f"no AIConfigurator CSVs under {args.data / 'aic'}", file=sys.stderr)
        return 2
    start = time.time()

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    rows = [r for f in files for r in read_rows(f, strict=False)[0]]
    devices = sorted({r.spec for r in rows})
    bases = {}
    if not args.bundled_only:
        measured = [m for pattern in FIT_FILES for f in sorted(args.data.glob(pattern))
                    for m in read_measurements(f).rows]
        for dev in devices:
            t0 = time.time()
            bases[dev] = leave_out_constants(measured, dev, args.cache / f"without-{dev}.json",
                                             progress=say)
            print(f"constants without {dev}: {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    results = evaluate_pairs(rows, max_fit_rows=args.max_fit_rows, bases=bases,
                             priors=not args.bundled_only, progress=say)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
        return 0
    for line in _table(results):
        print(line)
    for base in sorted({r.base for r in results}):
        inreach = [r for r in results if r.base == base and r.within_reach]
        print(f"\n{base}: {sum(r.meets() for r in inreach)} of {len(inreach)} in-reach pairs "
              "have a transferred median at least 30 % below spec-only")
    print(f"\n{time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
