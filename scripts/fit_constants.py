"""Fit perfmodel's model constants to the public measurements and write the bundled table.

    python scripts/fit_constants.py [--data ../shared/data/measurements] [--check]

Reads AIConfigurator's database (``aic/*.csv``: the kernels TensorRT-LLM, vLLM and SGLang
run, timed by CUDA-graph replay) and the older public attention sets (FlashAttention-2 on
A30 and A100), fits the constants of :mod:`perfmodel.timing.constants` by the stages of
:data:`perfmodel.calibrate.constants.FIT_STAGES` starting from their priors, and writes
``perfmodel/data/fitted_constants.json`` with the dataset, rows and command. Every value in
that file is ``fitted: <dataset>``; constants it does not list stay at their priors.

``--check`` refits and reports how far the result is from the bundled table, writing
nothing. The fit takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel.calibrate.constants import fit_public  # noqa: E402
from perfmodel.measurements import MeasurementSet, read_measurements  # noqa: E402
from perfmodel.timing.constants import fitted_path  # noqa: E402
from perfmodel.validation import prepare  # noqa: E402

#: The files the constants are fitted on, relative to the data folder.
FILES = ("aic/*.csv", "a30_flashattn_nvbench.csv", "vidur_attention_a100.csv")
DATASET = ("AIConfigurator database (aic/*.csv) + a30_flashattn_nvbench + "
           "vidur_attention_a100")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "measurements",
                    help="the shared measurement folder (default: ../shared/data/measurements)")
    ap.add_argument("--out", type=Path, default=fitted_path(), help="table to write")
    ap.add_argument("--cycles", type=int, default=3, help="block-descent cycles per stage")
    ap.add_argument("--check", action="store_true", help="refit and compare; write nothing")
    args = ap.parse_args(argv)
    files = sorted(p for pattern in FILES for p in args.data.glob(pattern))
    if not files:
        print(f"no measurement files under {args.data}", file=sys.stderr)
        return 2
    rows = [r for f in files for r in read_measurements(f).rows]
    prep = prepare(MeasurementSet(tuple(rows)))
    start = time.time()
    fitted = fit_public(prep, source=f"fitted: {DATASET} (scripts/fit_constants.py)",
                        cycles=args.cycles, progress=lambda s: print(s, flush=True))
    values = {k: round(float(v), 12) for k, v in sorted(fitted.fitted.items())}
    sources = sorted({r.source for r in prep.rows})
    print(f"fitted {len(values)} constants on {len(prep.rows)} rows in "
          f"{time.time() - start:.0f} s")
    if args.check:
        old = json.loads(args.out.read_text(encoding="utf-8")).get("values", {})
        worst = max((abs(v / old[k] - 1.0), k) for k, v in values.items() if old.get(k))
        print(f"largest relative change vs {args.out.name}: {worst[0]:.1%} ({worst[1]})")
        return 0
    doc = {
        "dataset": DATASET,
        "files": [str(f.relative_to(args.data)) for f in files],
        "sources": sources,
        "rows": len(prep.rows),
        "script": "scripts/fit_constants.py",
        "command": "python scripts/fit_constants.py",
        "created": datetime.date.today().isoformat(),
        "values": values,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
