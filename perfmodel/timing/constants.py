"""Model constants that are not datasheet figures, each with its provenance.

Every constant the timing model uses beyond a spec's own figures is declared here once
(:data:`PARAMS`): its meaning, unit, bounds and a physically argued default (the *prior*).
Some are fitted to public measurements by ``scripts/fit_constants.py``, which writes
``perfmodel/data/fitted_constants.json``: value, dataset, rows used and the command. A
prediction reads the bundled table (:func:`bundled_constants`) unless it is handed another
one — ``perfmodel validate --leave-gpu-out`` refits it without one GPU's rows and predicts
that GPU with the result.

Provenance strings say where a value came from: ``prior: <reason>`` (the default, not fitted),
``fitted: <dataset> (<script>)``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from perfmodel._errors import PerfmodelError

__all__ = ["ARCH_FAMILIES", "ARCH_PREDECESSOR", "KIN", "KIN_EXCLUDED", "PARAMS",
           "PREDECESSOR_PREFIXES", "REFERENCE_CLOCK_HZ", "Constants", "Param", "arch_name",
           "bundled_constants", "fitted_path", "register", "register_kin"]


@dataclass(frozen=True)
class Param:
    """One model constant: default (prior), bounds for a fit, unit and meaning."""

    name: str
    default: float
    lo: float
    hi: float
    unit: str
    doc: str
    scale: Literal["log", "linear"] = "log"
    parent: str | None = None
    """A more general constant this one refines (e.g. a per-architecture value of a
    global one): until it has a value of its own it takes the parent's."""
    pooled: bool = True
    """Whether this constant is the parent's quantity for a narrower case (an
    architecture, a kernel family of a class): a fit then sets the parent to the mean of
    its fitted children, the value a case nobody measured inherits. False where the
    parent is another quantity used as a default (fp8 rate from the bf16 rate)."""

    def __post_init__(self) -> None:
        if not (self.lo <= self.default <= self.hi):
            raise ValueError(f"{self.name}: default {self.default} outside [{self.lo}, "
                             f"{self.hi}]")
        if self.scale == "log" and self.lo <= 0:
            raise ValueError(f"{self.name}: a log-scaled constant needs lo > 0")


#: Every declared constant, by name. Filled by :func:`register` at import of the modules
#: that use them (timing.kernels, timing.engines).
PARAMS: dict[str, Param] = {}


def register(*params: Param) -> None:
    """Declare constants (a name may be declared once)."""
    for p in params:
        if p.name in PARAMS and PARAMS[p.name] != p:
            raise ValueError(f"constant {p.name!r} declared twice with different values")
        PARAMS[p.name] = p


#: Reference SM clock of the model's fixed kernel times, Hz. The fitted times of kernels'
#: fixed work (the graph kernel floor; an engine's bookkeeping kernels, per call and per
#: row) are what a device whose SM runs at this clock spends; a device spends them × this /
#: its boost clock (its sustained clock where the spec gives one): block scheduling,
#: prologues, index arithmetic and epilogues are SM instructions, counted in cycles.
#: Pooled over architectures in cycles rather than seconds they are what a GPU nobody
#: measured inherits: fitted per architecture on AIConfigurator's rows the graph kernel
#: floor spans 0.84-2.3 µs (2.7x) but 1,860-3,250 cycles (1.7x). An attention tile's
#: non-overlapped time (``attn.*.tile_s``) stays in seconds: it is dependent memory round
#: trips, whose latency is nanoseconds, not cycles (scaling it with the clock too made
#: the held-out A100 decode rows worse: 20 -> 31 % for vLLM).
REFERENCE_CLOCK_HZ = 1.5e9

#: Architecture families with their own value of the per-architecture constants.
ARCH_FAMILIES: tuple[str, ...] = ("ampere", "ada", "hopper", "blackwell", "blackwell-consumer")
#: The predecessor of the same SM design: Ada of Ampere (SM 8.x: synchronous warp-level MMA,
#: cp.async loads), Blackwell of Hopper (TMA loads, asynchronous MMA, warp-specialised
#: persistent kernels, 228 KiB of shared memory per SM), and the RTX Blackwell GPUs (SM120,
#: ``blackwell-consumer``) of Ada: SM120 has neither Hopper's warpgroup MMA nor SM100's
#: tcgen05 and tensor memory, so its kernels are built on the synchronous warp-level MMA
#: (CUTLASS's SM120 MMA atoms are ``mma.sync``, cute/arch/mma_sm120.hpp, its fp8/fp6/fp4
#: ones m16n8k32; FlashAttention-4's flash_fwd_sm120.py subclasses its SM80 kernel, "the same
#: SM80-era MMA instructions"; TensorRT-LLM's fmha_v2 generates its SM120 fp8 kernels with the
#: SM89 ones' function and tile table, setup.py ``enumerate_qmma_flash_kernels``), and its
#: shared memory per SM is Ada's (100 KB for compute capability 12.0 as for 8.9), not 228 KiB.
ARCH_PREDECESSOR: Mapping[str, str] = MappingProxyType({"ada": "ampere",
                                                        "blackwell": "hopper",
                                                        "blackwell-consumer": "ada"})
#: Name prefixes of the constants that describe a kernel's design on an SM (attention
#: kernel families' rates, tile times, overlap and per-CTA bandwidth; GEMM families' rates,
#: the GEMM per-CTA bandwidth and the library's split-K reduce kernel). One of these with
#: no value fitted for its own architecture takes its predecessor's
#: (:data:`ARCH_PREDECESSOR`), where that was fitted, before the mean over every
#: architecture (its parent): kernels move forward, a new architecture first running its
#: predecessor's kernel designs built for it, so its costs are nearer the predecessor's
#: than that mean. Not backwards: an older architecture cannot run what the newer designs
#: are built on (fp8 MMA on Ada; tcgen05 and tensor memory on Blackwell), so it keeps the
#: mean; and the device's and the host's constants (the graph kernel floor, engines'
#: per-call costs) keep the mean too.
PREDECESSOR_PREFIXES: tuple[str, ...] = ("attn.", "gemm.", "gemm_cta_bandwidth",
                                          "gemm_split_reduce")


def arch_name(name: str, arch: str) -> str:
    """The per-architecture refinement of constant ``name`` (falls back to ``name``)."""
    return f"{name}.{arch}" if arch in ARCH_FAMILIES else name


#: Kin of a group of constants (a kernel family's, by name prefix such as
#: ``attn.flashinfer.``): the prefixes of its nearest relatives, nearest first. A group
#: with no fitted value at all (a kernel nobody measured) takes, name for name, the first
#: relative's that has fitted values, before its class's mean. Filled by
#: :func:`register_kin` where the groups are declared (timing.kernels).
KIN: dict[str, tuple[str, ...]] = {}
#: Constants of a group that its kin do not stand in for (the first name component after
#: the prefix, e.g. ``cta_bandwidth``): what the two designs do not share. Those follow
#: the group's own chain of parents instead.
KIN_EXCLUDED: dict[str, frozenset[str]] = {}


def register_kin(prefix: str, *kin: str, exclude: tuple[str, ...] = ()) -> None:
    """Declare the relatives ``kin`` (name prefixes, nearest first) of the constants whose
    names start with ``prefix``, except those named in ``exclude``."""
    if (prefix in KIN and KIN[prefix] != kin) or \
            (prefix in KIN_EXCLUDED and KIN_EXCLUDED[prefix] != frozenset(exclude)):
        raise ValueError(f"kin of {prefix!r} declared twice with different values")
    KIN[prefix] = kin
    KIN_EXCLUDED[prefix] = frozenset(exclude)


register(
    Param("graph_kernel_s", 2.0e-6, 0.5e-6, 6e-6, "s at 1.5 GHz",
          "fixed cost of one kernel replayed from a CUDA graph (block scheduling, prologue, "
          "tail; launch gaps removed), at the reference SM clock (REFERENCE_CLOCK_HZ). "
          "Prior: the shortest graph-replayed kernels take ~1.5-2.5 µs."),
    *(Param(f"graph_kernel_s.{a}", 2.0e-6, 0.5e-6, 6e-6, "s at 1.5 GHz",
            f"graph_kernel_s on {a} GPUs (kernel start-up differs by architecture).",
            parent="graph_kernel_s") for a in ARCH_FAMILIES),
    Param("gemm_split_reduce", 1.0, 0.25, 4.0, "kernel floors",
          "fixed cost of the reduce kernel that sums a split-K GEMM's fp32 partials, in "
          "units of graph_kernel_s, under CUDA-graph replay: it starts only once the GEMM "
          "kernel's last CTA has drained. Prior: 1 (a kernel like any other).", "linear"),
    *(Param(f"gemm_split_reduce.{a}", 1.0, 0.25, 4.0, "kernel floors",
            f"gemm_split_reduce on {a} GPUs (the vendor library's split-K path there).",
            "linear", parent="gemm_split_reduce") for a in ARCH_FAMILIES),
    Param("l2_capacity_fraction", 0.7, 0.3, 1.0, "fraction",
          "share of the L2 a repeated call's footprint may use and still hit in L2 "
          "(set-associativity, other lines), of one SM-side partition where the spec "
          "splits the L2 (memory.l2_partitions). Prior: 0.7."),
    Param("l2_bandwidth_fraction", 0.7, 0.2, 1.0, "fraction",
          "achievable fraction of the L2 bandwidth (spec l2_bandwidth, or the family's "
          "bytes per clock per SM) for streams served from L2. Prior: 0.7, as for DRAM.",
          "linear"),
)


def fitted_path() -> Path:
    """The bundled fitted-constant table (JSON), shipped in the package."""
    return Path(__file__).resolve().parent.parent / "data" / "fitted_constants.json"


@dataclass(frozen=True)
class Constants:
    """Values of the declared constants: fitted ones from a table (``fitted``), the rest at
    their defaults (or their parent's value). Immutable; :meth:`with_values` returns a
    changed copy."""

    fitted: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    datasets: frozenset[str] = frozenset()
    """The measurement sources (``source`` column values) the fitted values were fitted
    on: predictions of those rows are in-sample."""

    kin: bool = True
    """Whether the stand-ins are on: the constants of a kernel family with no fitted value
    at all are its kin's (:data:`KIN`) before its class's, and a kernel-design constant
    with no fitted value for its architecture is its predecessor architecture's
    (:data:`ARCH_PREDECESSOR`) before the mean. Fits turn them off while they run, so that no
    family's or architecture's rows move another's constants during a fit; the tables
    they return have them on."""

    def __post_init__(self) -> None:
        # values resolved through the parent chain, memoised: the table is immutable, so an
        # entry never goes stale (a race at worst resolves a name twice)
        object.__setattr__(self, "_resolved", {})
        object.__setattr__(self, "_prefixes", {})  # name prefix -> any fitted name has it
        object.__setattr__(self, "_hash", hash((tuple(sorted(self.fitted.items())), self.kin)))

    def __getitem__(self, name: str) -> float:
        value: float | None = self._resolved.get(name)  # type: ignore[attr-defined]
        if value is None:
            value = self._resolve(name)
            self._resolved[name] = value  # type: ignore[attr-defined]
        return value

    def _resolve(self, name: str) -> float:
        if name in self.fitted:
            return self.fitted[name]
        try:
            p = PARAMS[name]
        except KeyError:
            raise PerfmodelError("constant", f"unknown model constant {name!r}",
                                 "see perfmodel.timing.constants.PARAMS") from None
        earlier = self._predecessor(name)
        if earlier is not None:
            return self.fitted[earlier]
        kin = self._kin(name)
        if kin is not None:
            return self[kin]
        return self[p.parent] if p.parent is not None else p.default

    def _predecessor(self, name: str) -> str | None:
        """The same constant for the nearest predecessor architecture (:data:`ARCH_PREDECESSOR`,
        followed back: SM120 → Ada → Ampere) whose value was fitted, where ``name`` is a
        kernel-design constant (:data:`PREDECESSOR_PREFIXES`) refined for an architecture
        (else None; None too while a fit runs, ``kin`` off)."""
        if not self.kin or not name.startswith(PREDECESSOR_PREFIXES):
            return None
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part not in ARCH_FAMILIES:
                continue
            other = ARCH_PREDECESSOR.get(part)
            while other is not None:
                cand = ".".join([*parts[:i], other, *parts[i + 1:]])
                if cand in self.fitted:
                    return cand
                other = ARCH_PREDECESSOR.get(other)
            return None
        return None

    def _has_fitted(self, prefix: str) -> bool:
        """Whether any fitted name starts with ``prefix`` (memoised)."""
        hit: bool | None = self._prefixes.get(prefix)  # type: ignore[attr-defined]
        if hit is None:
            hit = any(n.startswith(prefix) for n in self.fitted)
            self._prefixes[prefix] = hit  # type: ignore[attr-defined]
        return hit

    def _kin(self, name: str) -> str | None:
        """The same constant of the nearest kin with fitted values (:data:`KIN`) when
        ``name``'s group has none (else None)."""
        if not self.kin:
            return None
        for prefix, kin in KIN.items():
            if name.startswith(prefix) and not self._has_fitted(prefix):
                if name[len(prefix):].split(".", 1)[0] in KIN_EXCLUDED.get(prefix, ()):
                    return None
                for other in kin:
                    cand = other + name[len(prefix):]
                    if cand in PARAMS and self._has_fitted(other):
                        return cand
        return None

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def provenance(self, name: str) -> str:
        """Where the value of ``name`` comes from."""
        if name in self.fitted:
            return self.sources.get(name, "fitted")
        earlier = self._predecessor(name)
        if earlier is not None:
            return f"as {earlier} (its predecessor architecture of the same SM design, " \
                "measured where this one was not): " + self.provenance(earlier)
        kin = self._kin(name)
        if kin is not None:
            return f"as {kin} (its kin kernel family, measured where it was not): " + \
                self.provenance(kin)
        parent = PARAMS[name].parent
        if parent is not None:
            return f"as {parent}: " + self.provenance(parent)
        return "prior: " + PARAMS[name].doc.split("Prior:")[-1].strip()

    def with_values(self, values: Mapping[str, float], source: str) -> Constants:
        """A copy with ``values`` set (each must be a declared constant) and labelled
        ``source``."""
        for name, v in values.items():
            if name not in PARAMS:
                raise PerfmodelError("constant", f"unknown model constant {name!r}",
                                     "see perfmodel.timing.constants.PARAMS")
            if not math.isfinite(v):
                raise PerfmodelError(name, f"not a finite number: {v!r}", "pass a number")
        return Constants({**self.fitted, **values},
                         {**self.sources, **dict.fromkeys(values, source)}, kin=self.kin)

    def without(self, names: set[str] | frozenset[str]) -> Constants:
        """A copy with ``names`` back at their defaults."""
        return Constants({k: v for k, v in self.fitted.items() if k not in names},
                         {k: v for k, v in self.sources.items() if k not in names},
                         self.datasets, self.kin)


def _load(path: Path) -> Constants:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Constants()
    except (OSError, ValueError) as exc:
        raise PerfmodelError(str(path), f"cannot read the fitted constants ({exc})",
                             "rerun scripts/fit_constants.py") from None
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    label = f"fitted: {doc.get('dataset', '?')} ({doc.get('script', '?')})"
    for name, value in doc.get("values", {}).items():
        values[str(name)] = float(value)
        sources[str(name)] = label
    return Constants(values, sources, frozenset(str(s) for s in doc.get("sources", ())))


@functools.cache
def bundled_constants() -> Constants:
    """The fitted-constant table shipped with perfmodel (defaults where it has none)."""
    return _load(fitted_path())
