"""Provenance of a spec's efficiency figures: where each number came from.

A spec states, under ``efficiency.provenance``, one text per figure
(:meth:`~perfmodel.hardware.spec.HardwareSpec.efficiency_figures`: ``compute.<key>``,
``memory``, ``kernel_overhead``, and ``sustained_clock`` where the spec sets
``compute.sustained_clock``). Each text starts with its kind:

- ``datasheet``: a vendor figure;
- ``cited: <source>``: a published measurement, ``[S#]`` tags resolving in
  ``hardware_specs/SOURCES.md``;
- ``family: <id>``: the value of the sibling spec ``<id>`` (same value; a spec that
  ``extends`` another gets this for every figure it does not set again);
- ``fitted: <dataset file> (<script>)``: recomputed from public measurement rows by a
  script in the repository (``scripts/fit_spec_figures.py``); predictions scored on rows of
  that dataset are then *in-sample* for this device;
- ``assumed: <reason>``: a planning value with no measurement behind it.

Dataset files and the ``source`` column of their rows (:data:`DATASET_SOURCES`), as in
``data/measurements/README.md`` of the project's shared data:

=============================  ===============
file                           ``source``
=============================  ===============
neusight_fp32_gemm.csv         neusight
vidur_gemm.csv                 vidur
vidur_attention_a100.csv       vidur
xla_matmul_perf_table.csv      xla_ptable
llmcompass_gemm.csv            llmcompass
a30_flashattn_nvbench.csv      a30_nvbench
=============================  ===============

A file not in the table (a user's own measurements) is its own source name, the file name
without folder and ``.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import PurePosixPath

from perfmodel.hardware.spec import HardwareSpec

__all__ = [
    "DATASET_SOURCES",
    "OWN_KINDS",
    "describe",
    "family_of",
    "family_problems",
    "figure_value",
    "fitted_datasets",
    "fitted_figures",
    "fitted_sources",
    "missing_provenance",
    "provenance_kind",
]

#: Measurement file name -> the ``source`` column value of its rows.
DATASET_SOURCES: dict[str, str] = {
    "neusight_fp32_gemm.csv": "neusight",
    "vidur_gemm.csv": "vidur",
    "vidur_attention_a100.csv": "vidur",
    "xla_matmul_perf_table.csv": "xla_ptable",
    "llmcompass_gemm.csv": "llmcompass",
    "a30_flashattn_nvbench.csv": "a30_nvbench",
}

#: Kinds that state a figure's own evidence (a sibling's copy is ``family``).
OWN_KINDS = ("datasheet", "cited", "fitted")


def provenance_kind(text: str) -> str:
    """The kind of a provenance text (``"fitted"`` for ``"fitted: x.csv (script)"``)."""
    return text.partition(":")[0].strip()


def _detail(text: str) -> str:
    return text.partition(":")[2].strip()


def missing_provenance(spec: HardwareSpec) -> list[str]:
    """Figures of ``spec`` with no provenance, by provenance key."""
    return [key for key in spec.efficiency_figures() if key not in spec.efficiency.provenance]


def fitted_datasets(spec: HardwareSpec) -> frozenset[str]:
    """Dataset files (names without folder) that any ``fitted:`` figure of ``spec`` names.

    The detail of a ``fitted:`` text is ``<file>[, <file> ...] (<script>)``.
    """
    files: set[str] = set()
    for text in spec.efficiency.provenance.values():
        if provenance_kind(text) != "fitted":
            continue
        names = _detail(text).split("(", 1)[0]
        for name in names.replace(";", ",").split(","):
            if name.strip():
                files.add(PurePosixPath(name.strip()).name)
    return frozenset(files)


def fitted_figures(spec: HardwareSpec) -> dict[str, str]:
    """Each of ``spec``'s own fitted figures -> the source (``source`` column value) of the
    dataset it was fitted on (the first, where a text names several), for a finer in-sample
    rule than :func:`fitted_sources` (e.g. only groups whose dtype uses the figure)."""
    out: dict[str, str] = {}
    for figure, text in spec.efficiency.provenance.items():
        if provenance_kind(text) != "fitted":
            continue
        one = spec.model_copy(update={"efficiency": spec.efficiency.model_copy(
            update={"provenance": {figure: text}})})
        names = sorted(fitted_sources(one))
        if names:
            out[figure] = names[0]
    return out


def fitted_sources(spec: HardwareSpec) -> frozenset[str]:
    """The measurement sources (``source`` column values: ``neusight``, ``vidur``,
    ``xla_ptable``...) that any of ``spec``'s own figures were fitted on.

    A group of rows of this device from one of these sources is *in-sample*: a figure of the
    spec was chosen to fit rows of that source. Figures taken from a sibling
    (``family: <id>``) count for the sibling, not here: their rows were another device's.
    """
    out: set[str] = set()
    for name in fitted_datasets(spec):
        out.add(DATASET_SOURCES.get(name, name.removesuffix(".csv")))
    return frozenset(out)


def figure_value(spec: HardwareSpec, figure: str) -> float | None:
    """The value ``spec`` uses for ``figure`` (a provenance key): for ``compute.<key>`` its
    entry, or what the lookup falls back to (dtype -> unit -> default); None if it has none."""
    figures = spec.efficiency_figures()
    if figure in figures:
        return figures[figure]
    if figure in ("sustained_clock",):
        return None
    if not figure.startswith("compute."):
        return None
    key = figure.removeprefix("compute.")
    compute = spec.efficiency.compute
    if key in spec.peaks:
        unit = spec.peaks[key].unit
        return spec.efficiency.compute_fraction(key, unit)
    return compute.get(key, compute.get("default", 0.8))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def family_of(spec: HardwareSpec, figure: str) -> str:
    """The family in which siblings should agree on ``figure``: the architecture, and for
    ``memory`` the architecture and memory technology (HBM and GDDR stream differently)."""
    if figure != "memory":
        return spec.arch
    kind = spec.memory.type.strip().upper()
    for tech in ("HBM", "GDDR", "LPDDR", "DDR"):
        if kind.startswith(tech):
            return f"{spec.arch}/{tech}"
    return f"{spec.arch}/{kind}"


def family_problems(specs: Mapping[str, HardwareSpec]) -> list[str]:
    """Inconsistencies between siblings in a catalogue (``specs`` by id).

    1. ``family: <id>`` must name a spec of the catalogue with the same value for the figure
       (:func:`figure_value`), and following ``family`` links must end at a figure with a
       provenance of its own (no cycle).
    2. No two specs of one family (:func:`family_of`) give a figure different values unless
       each value has its own evidence: its provenance, followed through ``family`` links, is
       ``datasheet``, ``cited`` or ``fitted``. An ``assumed`` value (or none) is only
       allowed where the whole family agrees on the figure.
    """
    problems: list[str] = []

    def root(spec_id: str, figure: str, seen: tuple[str, ...] = ()) -> str | None:
        text = specs[spec_id].efficiency.provenance.get(figure)
        if text is None or provenance_kind(text) != "family":
            return text
        target = _detail(text)
        if target in seen or target not in specs:
            return None
        return root(target, figure, (*seen, spec_id))

    for spec_id, spec in sorted(specs.items()):
        for figure, text in sorted(spec.efficiency.provenance.items()):
            if provenance_kind(text) != "family":
                continue
            target = _detail(text)
            where = f"{spec_id}: efficiency.provenance.{figure} ({text!r})"
            if target not in specs:
                problems.append(f"{where}: no spec '{target}' in the catalogue")
                continue
            mine, theirs = figure_value(spec, figure), figure_value(specs[target], figure)
            if mine is None or theirs is None or not _close(mine, theirs):
                problems.append(f"{where}: value {_g(mine)} differs from {target}'s "
                                f"{_g(theirs)}; take {target}'s value or state this "
                                "figure's own source")
            if root(spec_id, figure) is None:
                problems.append(f"{where}: the family links of this figure form a cycle or "
                                "end at a spec without a provenance")

    groups: dict[tuple[str, str], list[tuple[str, float, str]]] = {}
    for spec_id, spec in specs.items():
        for figure, value in spec.efficiency_figures().items():
            kind = provenance_kind(root(spec_id, figure) or "")
            groups.setdefault((family_of(spec, figure), figure), []).append(
                (spec_id, value, kind))
    for (fam, figure), members in sorted(groups.items()):
        if len({round(v, 12) for _, v, _ in members}) < 2:
            continue
        for spec_id, value, kind in sorted(members):
            if kind in OWN_KINDS:
                continue
            others = ", ".join(sorted(f"{i} {v:g}" for i, v, _ in members if i != spec_id))
            problems.append(
                f"{spec_id}: {figure} = {value:g} ({kind or 'no provenance'}) differs within "
                f"family {fam} ({others}) without its own cited or fitted source; take one "
                "sibling's value ('family: <id>') or cite the figure")
    return problems


def _g(value: float | None) -> str:
    return "none" if value is None else format(value, "g")


def describe(spec: HardwareSpec) -> list[tuple[str, float, str]]:
    """(figure, value, provenance) for every figure of ``spec``; ``""`` where none is
    stated."""
    prov = spec.efficiency.provenance
    return [(key, value, prov.get(key, "")) for key, value in spec.efficiency_figures().items()]
