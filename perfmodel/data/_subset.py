"""How the bundled measurement subset was drawn (rerun to reproduce it byte for byte).

Rule: rows are grouped by (spec, source, op, dtype) and ordered by the work they do
(GEMM 2·b·m·n·k; attention b·heads·seq_q·seq_kv·head_dim), ties in file order. From a group
of n rows, the rows at positions round(i·(n − 1)/(t − 1)), i = 0 … t − 1, are kept
(t = min(n, per_group)): evenly spaced quantiles of work, smallest and largest included.
Kept rows are written unchanged, in their original order.

    python -m perfmodel.data._subset SRC_DIR DST_DIR [PER_GROUP]
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PER_GROUP", "SOURCE_FILES", "subset_file", "work"]

#: Rows kept per (spec, source, op, dtype) group.
PER_GROUP = 100
#: Source files whose licence allows redistribution (see measurements/README.md).
SOURCE_FILES = ("llmcompass_gemm.csv", "neusight_fp32_gemm.csv", "vidur_attention_a100.csv",
                "vidur_gemm.csv", "xla_matmul_perf_table.csv")


def _num(text: str | None) -> float:
    try:
        return float(text or 1)
    except ValueError:
        return 1.0


def work(row: dict[str, str]) -> float:
    """The ordering key: FLOP-like work of the row's shape."""
    if row.get("op") == "attention":
        return (_num(row.get("batch")) * _num(row.get("heads")) * _num(row.get("seq_q"))
                * _num(row.get("seq_kv")) * _num(row.get("head_dim")))
    return 2.0 * _num(row.get("batch")) * _num(row.get("m")) * _num(row.get("n")) \
        * _num(row.get("k"))


def subset_file(src: Path, dst: Path, per_group: int = PER_GROUP) -> int:
    """Write the subset of ``src`` to ``dst``; returns the number of rows kept."""
    with src.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[(row["spec"], row["source"], row["op"], row["dtype"])].append(i)
    keep: set[int] = set()
    for members in groups.values():
        ordered = sorted(members, key=lambda i: (work(rows[i]), i))
        n = len(ordered)
        t = min(n, per_group)
        if t == 1:
            keep.add(ordered[0])
            continue
        keep.update(ordered[round(j * (n - 1) / (t - 1))] for j in range(t))
    with dst.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows[i] for i in sorted(keep))
    return len(keep)


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    src_dir, dst_dir = Path(argv[0]), Path(argv[1])
    per_group = int(argv[2]) if len(argv) == 3 else PER_GROUP
    for name in SOURCE_FILES:
        kept = subset_file(src_dir / name, dst_dir / name, per_group)
        print(f"{name}: {kept} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
