"""How the bundled measurement subset was drawn (rerun to reproduce it byte for byte).

Rule: rows are grouped by (spec, source, op, dtype) and ordered by the work they do
(GEMM 2·b·m·n·k; attention b·heads·seq_q·seq_kv·head_dim), ties in file order. From a group
of n rows, the rows at positions round(i·(n − 1)/(t − 1)), i = 0 … t − 1, are kept
(t = min(n, per_group)): evenly spaced quantiles of work, smallest and largest included.
Kept rows are written unchanged, in their original order.

AIConfigurator's engine-kernel tables (``SRC_DIR/aic/*.csv`` and ``aic/comm/*.csv``, read
in name order) go into one file, :data:`AIC_FILE`, by the same rule with finer groups (the
kernel groups ``perfmodel validate`` reports): (spec, source, op, phase, dtype, GPUs of a
collective, and the ``notes`` labels of what the engine ran: attention and KV-cache dtypes,
quantization scheme, dispatched kernel), :data:`AIC_PER_GROUP` rows each.

    python -m perfmodel.data._subset SRC_DIR DST_DIR [PER_GROUP]
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["AIC_FILE", "AIC_PER_GROUP", "PER_GROUP", "SOURCE_FILES", "subset_aic",
           "subset_file", "work"]

#: Rows kept per (spec, source, op, dtype) group.
PER_GROUP = 100
#: Source files whose licence allows redistribution (see measurements/README.md).
SOURCE_FILES = ("llmcompass_gemm.csv", "neusight_fp32_gemm.csv", "vidur_attention_a100.csv",
                "vidur_gemm.csv", "xla_matmul_perf_table.csv")
#: The bundled file of AIConfigurator's engine-kernel rows (Apache-2.0, see the README).
AIC_FILE = "aic_engine_kernels.csv"
#: Rows kept per kernel group of the AIConfigurator tables.
AIC_PER_GROUP = 16
#: ``notes`` fields that say what an engine ran (part of an AIConfigurator group's key).
_AIC_LABELS = ("attn", "kv", "q", "ks")


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


def _read(src: Path) -> tuple[list[str], list[dict[str, str]]]:
    with src.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _aic_key(row: dict[str, str]) -> tuple[str, ...]:
    """An AIConfigurator row's group: the kernel group ``validate`` reports it in."""
    fields = dict(part.split("=", 1) for part in row.get("notes", "").split(";") if "=" in part)
    gpus = row.get("n", "") if row.get("op") == "allreduce" else ""
    return (row["spec"], row["source"], row["op"], row.get("phase", ""), row["dtype"], gpus,
            *(fields.get(k, "") for k in _AIC_LABELS))


def subset_file(src: Path, dst: Path, per_group: int = PER_GROUP) -> int:
    """Write the subset of ``src`` to ``dst``; returns the number of rows kept."""
    header, rows = _read(src)
    return _write_subset(header, rows, dst, per_group,
                         lambda row: (row["spec"], row["source"], row["op"], row["dtype"]))


def subset_aic(src_dir: Path, dst: Path, per_group: int = AIC_PER_GROUP) -> int:
    """Write the subset of the AIConfigurator tables under ``src_dir`` (``*.csv`` and
    ``comm/*.csv``, in name order, one header) to ``dst``; returns the rows kept."""
    paths = sorted(src_dir.glob("*.csv")) + sorted((src_dir / "comm").glob("*.csv"))
    header: list[str] = []
    rows: list[dict[str, str]] = []
    for path in paths:
        cols, part = _read(path)
        if header and cols != header:
            raise ValueError(f"{path}: columns differ from {paths[0].name}'s")
        header = cols
        rows.extend(part)
    return _write_subset(header, rows, dst, per_group, _aic_key)


def _write_subset(header: list[str], rows: list[dict[str, str]], dst: Path, per_group: int,
                  key: Callable[[dict[str, str]], tuple[str, ...]]) -> int:
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[key(row)].append(i)
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
    if (src_dir / "aic").is_dir():
        kept = subset_aic(src_dir / "aic", dst_dir / AIC_FILE)
        print(f"{AIC_FILE}: {kept} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
