#!/usr/bin/env python3
"""Recompute the spec efficiency figures that are fitted on public measurement rows.

Some figures of the bundled specs were chosen by looking at the measured rows that
``perfmodel validate`` scores them on. They are *fitted*, so they are made here, by a stated
rule anyone can rerun, and labelled ``fitted: <dataset file> (scripts/fit_spec_figures.py)``
in the spec's ``efficiency.provenance``.

Rule (every figure in :data:`FITS`): take the device's rows of the dataset that the figure
serves (the row dtype after validate's dtype rule; SUSPECT rows left out, as validate does)
in one size class, and of those every other row in file order, starting with the first:

- ``large`` rows, for compute fractions: measured time > 300 µs (NeuSight, vidur,
  LLMCompass), or work
  b·m·n·k >= 2048³ in the XLA table (its largest shapes: no XLA row is that slow);
- ``small`` rows, for ``kernel_overhead``: XLA shapes with b·m·n·k <= 512³.

The figure is the value at which perfmodel's median predicted/measured ratio over those rows
is 1 (bisection; the model, the run context of each row's timing code and the bundled model
constants are those of ``perfmodel validate``), rounded to 0.01 (fractions) or 0.1 µs
(overheads). Fractions are fitted first, then overheads with the new fractions, and the
round is repeated until no rounded value moves.

Usage (from the repository root):
  python scripts/fit_spec_figures.py                 print old vs recomputed values
  python scripts/fit_spec_figures.py --write         also edit the spec YAML files in place
  python scripts/fit_spec_figures.py --data DIR      measurement folder (default
                                                     ../shared/data/measurements)

``--write`` edits the YAML text (comments kept): the value, its provenance line, a comment
line stating the rule and result, and the same value in every spec whose provenance for the
figure is ``family: <that spec>``.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfmodel.hardware.catalog import bundled_path, list_hardware, load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import Measurement, is_suspect, read_measurements
from perfmodel.validation import dtype_rule, prepare

SCRIPT = "scripts/fit_spec_figures.py"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "measurements"

NEUSIGHT = "neusight_fp32_gemm.csv"
VIDUR = "vidur_gemm.csv"
XLA = "xla_matmul_perf_table.csv"
LLMCOMPASS = "llmcompass_gemm.csv"


@dataclass(frozen=True)
class Fit:
    """One fitted figure: which device, which figure, from which rows."""

    spec: str
    figure: str
    """Provenance key: ``compute.<key>`` or ``kernel_overhead``."""
    dataset: str
    dtypes: tuple[str, ...]
    """Row dtypes (after validate's dtype rule) the figure serves; () = every dtype."""
    size: str
    """``large`` or ``small`` (see the module docstring)."""


FITS: tuple[Fit, ...] = (
    *(Fit(s, "compute.fp32", NEUSIGHT, ("fp32",), "large") for s in (
        "p4", "p100-pcie-16gb", "t4", "v100-pcie-32gb", "a100-40gb-pcie", "a100-80gb-pcie",
        "l4", "h100-sxm", "mi100", "mi210")),
    # A40: the vidur rows are fp16; the fraction serves every tensor dtype of the card.
    Fit("a40", "compute.default", VIDUR, ("fp16",), "large"),
    # MI210: LLMCompass bf16 torch.matmul rows (host wall clock; validate adds its 15 us floor).
    Fit("mi210", "compute.default", LLMCOMPASS, ("bf16",), "large"),
    Fit("mi300x", "compute.fp8", XLA, ("fp8",), "large"),
    Fit("mi300x", "compute.tf32", XLA, ("tf32",), "large"),
    Fit("mi355x", "compute.default", XLA, ("bf16",), "large"),
    Fit("mi355x", "compute.fp8", XLA, ("fp8",), "large"),
    Fit("mi355x", "compute.fp32", XLA, ("fp32",), "large"),
    Fit("b200", "compute.tf32", XLA, ("tf32",), "large"),
    Fit("b200", "kernel_overhead", XLA, (), "small"),
    Fit("mi355x", "kernel_overhead", XLA, (), "small"),
)

_LARGE_US = 300.0
_LARGE_WORK = 2048**3
_SMALL_WORK = 512**3


def label(fit: Fit) -> str:
    """The provenance text of a fitted figure."""
    return f"fitted: {fit.dataset} ({SCRIPT})"


def rule_text(fit: Fit, rows: int) -> str:
    """One line saying how the figure was made (written above it in the spec)."""
    size = {
        ("large", XLA): "b*m*n*k >= 2048^3",
        ("large", NEUSIGHT): "measured > 300 us",
        ("large", VIDUR): "measured > 300 us",
        ("large", LLMCOMPASS): "measured > 300 us",
        ("small", XLA): "b*m*n*k <= 512^3",
    }[(fit.size, fit.dataset)]
    dtypes = "/".join(fit.dtypes) if fit.dtypes else "all"
    return (f"median predicted/measured = 1 on {rows} rows of {fit.dataset} ({dtypes}, "
            f"{size}, every other row)")


# ------------------------------------------------------------------------------ fitting
def _work(r: Measurement) -> int:
    return (r.batch or 1) * (r.m or 1) * (r.n or 1) * (r.k or 1)


def select_rows(rows: Sequence[Measurement], fit: Fit, hw: HardwareSpec) -> list[Measurement]:
    """The rows a figure is fitted on (see the module docstring)."""
    out: list[Measurement] = []
    for r in rows:
        if r.spec != fit.spec or is_suspect(r.notes):
            continue
        if fit.dtypes and dtype_rule(r.dtype, r.notes, hw)[0] not in fit.dtypes:
            continue
        if fit.size == "small":
            keep = _work(r) <= _SMALL_WORK
        elif fit.dataset == XLA:
            keep = _work(r) >= _LARGE_WORK
        else:
            keep = r.measured_s > _LARGE_US * 1e-6
        if keep:
            out.append(r)
    return out[::2]


def with_figure(hw: HardwareSpec, figure: str, value: float) -> HardwareSpec:
    """A copy of ``hw`` with one efficiency figure changed."""
    eff = hw.efficiency
    if figure.startswith("compute."):
        compute = {**eff.compute, figure.removeprefix("compute."): value}
        eff = eff.model_copy(update={"compute": compute})
    elif figure == "kernel_overhead":
        eff = eff.model_copy(update={"kernel_overhead": value})
    else:
        raise ValueError(f"cannot fit {figure!r}")
    return hw.model_copy(update={"efficiency": eff})


def median_ratio(rows: Sequence[Measurement], hw: HardwareSpec) -> float:
    """Median predicted/measured of ``rows`` predicted on ``hw`` as validate does."""
    prep = prepare(rows, hw)
    if not prep.rows:
        raise SystemExit(f"{hw.id}: none of the selected rows can be predicted")
    return float(statistics.median((prep.predict() / prep.measured_s).tolist()))


def _bisect(f: Callable[[float], float], lo: float, hi: float, log: bool) -> float:
    """x in [lo, hi] where the monotone f crosses 1."""
    f_lo, f_hi = f(lo) - 1.0, f(hi) - 1.0
    if (f_lo > 0) == (f_hi > 0):
        raise ValueError(f"the median ratio does not cross 1 between {lo:g} and {hi:g} "
                         f"({f_lo + 1:.3f}, {f_hi + 1:.3f}): the figure does not act on "
                         "these rows")
    for _ in range(24):
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        f_mid = f(mid) - 1.0
        if (f_mid > 0) == (f_lo > 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return math.sqrt(lo * hi) if log else (lo + hi) / 2


def fit_value(rows: Sequence[Measurement], fit: Fit, hw: HardwareSpec) -> float:
    """The figure at which the median predicted/measured over ``rows`` is 1, rounded."""
    def ratio(x: float) -> float:
        return median_ratio(rows, with_figure(hw, fit.figure, x))
    if fit.figure == "kernel_overhead":
        return round(_bisect(ratio, 0.0, 20e-6, log=False) * 1e7) / 1e7
    return round(_bisect(ratio, 0.02, 1.5, log=True), 2)


@dataclass(frozen=True)
class Result:
    fit: Fit
    old: float
    new: float
    rows: int


def run_fits(data: Path, fits: Sequence[Fit] = FITS, rounds: int = 6) -> list[Result]:
    """Fit every figure: fractions first, then overheads with the new fractions, and again
    until no rounded value changes (a fraction fitted on rows of ~100 µs moves with the
    overhead), at most ``rounds`` times."""
    specs: dict[str, HardwareSpec] = {}
    cache: dict[str, tuple[Measurement, ...]] = {}
    selected: dict[Fit, list[Measurement]] = {}
    old: dict[Fit, float] = {}
    ordered = sorted(fits, key=lambda f: f.figure == "kernel_overhead")
    for fit in ordered:
        hw = specs.setdefault(fit.spec, load_hardware(fit.spec))
        if fit.dataset not in cache:
            cache[fit.dataset] = read_measurements(data / fit.dataset).rows
        selected[fit] = select_rows(cache[fit.dataset], fit, hw)
        if not selected[fit]:
            raise SystemExit(f"{fit.spec} {fit.figure}: no rows selected in {fit.dataset}")
        old[fit] = hw.efficiency_figures()[fit.figure]
    for _ in range(rounds):
        moved = False
        for fit in ordered:
            hw = specs[fit.spec]
            new = fit_value(selected[fit], fit, hw)
            moved |= not math.isclose(new, hw.efficiency_figures()[fit.figure], abs_tol=1e-12)
            specs[fit.spec] = with_figure(hw, fit.figure, new)
        if not moved:
            break
    else:
        print(f"warning: the fits still move after {rounds} rounds", file=sys.stderr)
    return [Result(f, old[f], specs[f.spec].efficiency_figures()[f.figure], len(selected[f]))
            for f in ordered]


# ------------------------------------------------------------------------ YAML editing
def _block(lines: list[str], name: str) -> tuple[int, int]:
    """[start, end) line range of the top-level block ``name:``."""
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"{name}:")), None)
    if start is None:
        raise ValueError(f"no top-level '{name}:' block")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " #"):
        end += 1
    while lines[end - 1].lstrip().startswith("#") and lines[end - 1].startswith("#"):
        end -= 1
    return start, end


def format_value(figure: str, value: float) -> str:
    if figure == "kernel_overhead":
        return f"{value * 1e6:g} us"
    return f"{value:.2f}"


def set_figure_text(text: str, figure: str, value: float, provenance: str | None,
                    comment: str | None) -> str:
    """``text`` (one spec YAML) with ``figure`` set to ``value`` in its efficiency block,
    its provenance line set to ``provenance`` and a rule comment line, comments kept."""
    lines = text.splitlines()
    start, end = _block(lines, "efficiency")
    shown = format_value(figure, value)
    if figure.startswith("compute."):
        key = figure.removeprefix("compute.")
        i = next(i for i in range(start, end) if lines[i].startswith("  compute: {"))
        pattern = re.compile(rf"(?<=[{{ ]){re.escape(key)}: [0-9.]+")
        if pattern.search(lines[i]):
            lines[i] = pattern.sub(f"{key}: {shown}", lines[i], count=1)
        else:
            lines[i] = lines[i].replace("{", f"{{{key}: {shown}, ", 1)
    else:
        i = next(i for i in range(start, end) if lines[i].startswith(f"  {figure}:"))
        lines[i] = f"  {figure}: {shown}"
    if provenance is not None:
        p = next((i for i in range(start, end) if lines[i] == "  provenance:"), None)
        if p is None:
            raise ValueError("no 'provenance:' mapping in the efficiency block")
        entry = f'    {figure}: "{provenance}"'
        q = next((i for i in range(p + 1, end) if lines[i].startswith(f"    {figure}:")), None)
        if q is None:
            lines.insert(p + 1, entry)
            end += 1
        else:
            lines[q] = entry
    if comment is not None:
        tag = f"  # fitted {figure} "
        line = f"{tag}{shown}: {comment}"
        c = next((i for i in range(start, end) if lines[i].startswith(tag)), None)
        if c is None:
            p = next(i for i in range(start, end) if lines[i] == "  provenance:")
            lines.insert(p, line)
        else:
            lines[c] = line
    return "\n".join(lines) + "\n"


def _own_yaml_sets(path: Path, figure: str) -> bool:
    """True if the spec file writes ``figure`` itself (not only through ``extends``)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        start, end = _block(lines, "efficiency")
    except ValueError:
        return False
    if figure.startswith("compute."):
        key = figure.removeprefix("compute.")
        return any(ln.startswith("  compute: {") and re.search(rf"[{{ ]{re.escape(key)}: ", ln)
                   for ln in lines[start:end])
    return any(ln.startswith(f"  {figure}:") for ln in lines[start:end])


def write(results: Sequence[Result]) -> list[str]:
    """Edit the spec files; returns the files changed."""
    changed: list[str] = []
    catalogue = {i: load_hardware(i) for i in list_hardware()}

    def edit(spec_id: str, figure: str, value: float, prov: str | None,
             comment: str | None) -> None:
        path = bundled_path(spec_id)
        old = path.read_text(encoding="utf-8")
        new = set_figure_text(old, figure, value, prov, comment)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path.relative_to(REPO)))
        for sib_id, sib in catalogue.items():
            if sib.efficiency.provenance.get(figure) == f"family: {spec_id}" and \
                    _own_yaml_sets(bundled_path(sib_id), figure):
                edit(sib_id, figure, value, None, None)

    for res in results:
        edit(res.fit.spec, res.fit.figure, res.new, label(res.fit),
             rule_text(res.fit, res.rows))
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="folder of the measurement CSVs (default %(default)s)")
    parser.add_argument("--write", action="store_true", help="edit the spec YAML files")
    parser.add_argument("--only", metavar="SPEC", action="append",
                        help="fit only this spec's figures (repeatable)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"error: --data {args.data}: no such folder of measurement CSVs", file=sys.stderr)
        return 2
    fits = [f for f in FITS if not args.only or f.spec in args.only]
    results = run_fits(args.data, fits)
    print(f"{'spec':<16}{'figure':<18}{'rows':>6}{'old':>10}{'new':>10}  dataset")
    for r in results:
        flag = "" if math.isclose(r.old, r.new, abs_tol=1e-12) else "  *changed"
        print(f"{r.fit.spec:<16}{r.fit.figure:<18}{r.rows:>6}"
              f"{format_value(r.fit.figure, r.old):>10}{format_value(r.fit.figure, r.new):>10}"
              f"  {r.fit.dataset}{flag}")
    if args.write:
        for path in write(results):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
