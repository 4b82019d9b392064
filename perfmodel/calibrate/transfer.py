"""Transfer a calibration from the GPU it was measured on to another spec.

A calibrated profile (``calibrate fit``) holds device figures, kernel-family figures and
local corrections (:mod:`perfmodel.calibrate.parts`). :func:`transfer` builds the target
spec's profile from the family part alone:

- calibration parameters of :data:`~perfmodel.calibrate.parts.FAMILY_PARAMS` (fixed cost
  per kernel, overlap sharpness, fused-attention rate relative to the GEMM rate, tile
  fill and efficiencies, per-CTA bandwidth, softmax overlap, paged prefill rate) are
  carried per ``family/dtype`` key, for the dtypes the target supports;
- the calibration's model constants (kernel-family rates relative to the device's
  achievable rate, per-tile and fixed costs, graph floors, L2 residency...) are carried;
  a constant refined for the source's architecture (``attn.triton.efficiency.hopper``) is
  carried to the target's (``attn.triton.efficiency.blackwell``): the assumption that a
  kernel family behaves on the target's architecture as on the source's, which is why a
  transfer is meant for the same or a neighbouring architecture (:func:`within_reach`).
  Constants of the architecture itself rather than of a kernel family
  (:data:`ARCH_CONSTANTS`: the graph floor of a kernel, whose declaration says it differs
  by architecture, and the L2 residency fractions of the cache) are carried only to a GPU
  of the same architecture. The host dispatch time of eager calls (``host.*``) belongs to
  the measured machine and is not carried;
- device figures (``compute_fraction``, ``memory_fraction``) are not carried: the target
  keeps its spec's achievable fractions (``efficiency.compute``, ``efficiency.memory``);
- residual tables are not carried: they correct the source device's own shapes.

The new profile records, under ``calibration.provenance``, what was carried from where
and what is the target spec's value, and under ``calibration.environment`` the source
profile (path and SHA-256).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.parts import DEVICE_PARAMS, FAMILY_PARAMS, is_device_constant
from perfmodel.hardware.spec import Calibration, HardwareSpec
from perfmodel.timing.constants import ARCH_FAMILIES, PARAMS

__all__ = ["ARCH_CONSTANTS", "ARCH_ORDER", "Transfer", "rekey", "transfer", "within_reach"]

#: Model constants that describe an architecture's launch machinery and cache, not a
#: kernel family (name prefixes): carried only between GPUs of one architecture.
ARCH_CONSTANTS: tuple[str, ...] = ("graph_kernel_s", "l2_capacity_fraction",
                                   "l2_bandwidth_fraction")

#: NVIDIA architecture families in order; neighbours are one step apart, and Ampere and
#: Hopper (the two datacentre generations either side of Ada) count as neighbours too, as do
#: Ada and the RTX Blackwell GPUs (SM120, ``blackwell-consumer``), which are built on Ada's
#: SM design (:data:`perfmodel.timing.constants.ARCH_PREDECESSOR`).
ARCH_ORDER: tuple[str, ...] = ("ampere", "ada", "hopper", "blackwell")
_NEIGHBOURS = {frozenset(p) for p in (("ampere", "ada"), ("ada", "hopper"),
                                      ("hopper", "blackwell"), ("ampere", "hopper"),
                                      ("ada", "blackwell-consumer"))}


def within_reach(source_arch: str, target_arch: str) -> bool:
    """Whether a calibration made on ``source_arch`` is meant to transfer to
    ``target_arch``: the same architecture, or neighbouring ones (Ampere-Ada,
    Ada-Hopper, Ampere-Hopper, Hopper-Blackwell, Ada-SM120)."""
    return source_arch == target_arch or frozenset((source_arch, target_arch)) in _NEIGHBOURS


def rekey(name: str, source_arch: str, target_arch: str) -> str | None:
    """The name of constant ``name`` on the target: its source-architecture refinement
    renamed to the target's (dropped when the target's architecture has no refinements
    of its own); None when that name is not a declared constant."""
    seg = name.split(".")
    if source_arch != target_arch and source_arch in seg:
        i = seg.index(source_arch)
        if target_arch in ARCH_FAMILIES:
            seg[i] = target_arch
        else:
            del seg[i]
    new = ".".join(seg)
    return new if new in PARAMS else None


@dataclass(frozen=True)
class Transfer:
    """The result of :func:`transfer`: the target's profile and what happened to each
    part of the source calibration."""

    spec: HardwareSpec
    source: str
    target: str
    params: dict[str, dict[str, float]]
    constants: dict[str, tuple[str, float]]
    """Carried model constants: target name -> (source name, value)."""
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """(what, why) for every part not carried."""
    device: dict[str, str] = field(default_factory=dict)
    """Device figures left at the target's spec: figure -> value and its provenance."""
    within_reach: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target,
                "within_reach": self.within_reach, "params": self.params,
                "constants": {k: {"from": s, "value": v}
                              for k, (s, v) in sorted(self.constants.items())},
                "device_at_spec": self.device,
                "dropped": [{"what": w, "why": y} for w, y in self.dropped],
                "provenance": dict(self.spec.calibration.provenance
                                   if self.spec.calibration else {})}


def _device_figures(target: HardwareSpec, dtypes: set[str]) -> dict[str, str]:
    """The target's spec figures standing in for the device part, with provenance."""
    prov = target.efficiency.provenance
    out: dict[str, str] = {}
    for dtype in sorted(dtypes):
        if dtype not in target.peaks:
            continue
        unit = target.peaks[dtype].unit
        value = target.efficiency.compute_fraction(dtype, unit)
        key = next((k for k in (dtype, unit, "default") if k in target.efficiency.compute),
                   "default")
        where = prov.get(f"compute.{key}", "no provenance in the spec")
        out[f"compute_fraction.{dtype}"] = (f"spec: {target.id} efficiency.compute.{key} = "
                                            f"{value:g} ({where})")
    out["memory_fraction"] = (f"spec: {target.id} efficiency.memory = "
                              f"{target.efficiency.memory:g} "
                              f"({prov.get('memory', 'no provenance in the spec')})")
    return out


def transfer(profile: HardwareSpec, target: HardwareSpec, *,
             environment: dict[str, str] | None = None, date: str | None = None) -> Transfer:
    """The family part of ``profile``'s calibration carried to ``target`` (module
    docstring). ``target`` must be a plain spec (no calibration of its own) of the same
    vendor; ``environment`` is added to the new calibration's environment."""
    cal = profile.calibration
    if cal is None:
        raise PerfmodelError("calibration", f"{profile.id} is not a calibrated profile (it "
                             "has no calibration block)",
                             "pass a profile written by 'perfmodel calibrate fit'")
    if target.calibration is not None:
        raise PerfmodelError("--to", f"{target.id} is a calibrated profile already",
                             "pass a plain spec id or YAML as the target")
    if target.vendor != profile.vendor:
        raise PerfmodelError("--to", f"{target.id} is a {target.vendor} device and the "
                             f"calibration was made on {profile.vendor} hardware ({cal.device})",
                             "transfer between devices of one vendor: their kernel "
                             "families are not the same")
    source = cal.device or profile.id
    provenance: dict[str, str] = {}
    dropped: list[tuple[str, str]] = []
    params: dict[str, dict[str, float]] = {}
    dtypes: set[str] = set()
    for key, values in sorted(cal.params.items()):
        dtype = key.split("/")[-1] if "/" in key else ""
        if dtype:
            dtypes.add(dtype)
        if dtype and dtype not in target.peaks:
            dropped.append((f"params.{key}", f"{target.id} has no {dtype} peak"))
            continue
        for name, value in sorted(values.items()):
            if name in DEVICE_PARAMS:
                dropped.append((f"params.{key}.{name}", "a device figure: the target "
                                "keeps its spec's value"))
            elif name in FAMILY_PARAMS and math.isfinite(value):
                params.setdefault(key, {})[name] = value
                provenance[f"params.{key}.{name}"] = (
                    f"carried: {source} calibration ({cal.date or 'undated'}), "
                    f"{cal.provenance.get(f'params.{key}.{name}', 'fitted there')}")
            else:
                dropped.append((f"params.{key}.{name}", "not a known calibration knob"))
    constants: dict[str, tuple[str, float]] = {}
    for name, value in sorted(cal.constants.items()):
        if is_device_constant(name):
            dropped.append((f"constants.{name}", "host dispatch time: a property of the "
                            "measured machine"))
            continue
        if name.split(".")[0] in ARCH_CONSTANTS and profile.arch != target.arch:
            dropped.append((f"constants.{name}", f"a figure of the {profile.arch} "
                            "architecture (launch, cache), not of a kernel family: carried "
                            "only to the same architecture"))
            continue
        new = rekey(name, profile.arch, target.arch)
        if new is None:
            dropped.append((f"constants.{name}", f"no such constant for {target.arch} "
                            "devices"))
            continue
        constants[new] = (name, value)
        moved = "" if new == name else f" (as {name} on {profile.arch})"
        provenance[f"constants.{new}"] = f"carried: {source} calibration{moved}"
    for key in sorted(cal.residuals):
        dropped.append((f"residuals.{key}", f"a local correction of {source}'s own shapes"))
    for key in (*cal.error_before, *cal.error_after):  # "gemm/fp8.median_ape": rows' dtypes
        head = key.rsplit(".", 1)[0]
        if "/" in head:
            dtypes.add(head.split("/")[-1])
    device = _device_figures(target, dtypes or set(target.peaks))
    for figure, text in device.items():
        provenance[f"device.{figure}"] = text
    reach = within_reach(profile.arch, target.arch)
    env = {"transfer_from": source, "transfer_source_arch": profile.arch,
           "transfer_target_arch": target.arch,
           "transfer_within_reach": "yes" if reach else "no (architectures more than one "
                                                        "step apart)",
           **(environment or {})}
    when = date or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    new_cal = Calibration(date=when, device=target.id, environment=env, points=cal.points,
                          params=params, constants={k: v for k, (_, v) in constants.items()},
                          provenance=provenance)
    name = f"{target.name} (calibration transferred from {source})"
    spec = target.model_copy(update={"calibration": new_cal, "name": name})
    return Transfer(spec=spec, source=source, target=target.id, params=params,
                    constants=constants, dropped=dropped, device=device, within_reach=reach)
