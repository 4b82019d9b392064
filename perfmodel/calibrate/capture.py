"""What a profiler capture holds once read: the device it ran on, the op calls it timed
(each mapped to a perfmodel op), and everything it timed that maps to no op.

Two readers fill it: :mod:`perfmodel.calibrate.trace` (a ``torch.profiler`` Chrome trace)
and :mod:`perfmodel.calibrate.ncu` (an Nsight Compute CSV export). Neither needs torch.

What identifies the device
--------------------------
- torch.profiler trace: Kineto writes ``deviceProperties`` (``name``, ``computeMajor``,
  ``computeMinor``...) for the GPUs it traced, and GPU activity events (``cat`` ``kernel``,
  ``gpu_memcpy``, ``gpu_memset``) whose ``args.device`` names the GPU they ran on. The
  trace's device is the ``deviceProperties`` entry of the GPU its kernels ran on. A trace
  with no GPU activity and an empty ``deviceProperties`` was recorded on the CPU: its ops
  ran on the host, and only a CPU spec (``vendor: cpu``) can predict them.
- Nsight Compute export: the ``device__attribute_display_name`` metric when collected,
  else the ``CC`` (compute capability) column.

:func:`check_device` compares that with the spec given by ``--gpu``: a device name that
resolves to a bundled id must be that spec (or the device a calibrated profile was fitted
on); an unknown name is checked by compute capability against the spec's architecture.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Literal

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.opmap import MappedOp
from perfmodel.hardware.catalog import resolve_id
from perfmodel.hardware.spec import HardwareSpec

__all__ = [
    "Capture", "Device", "Unit", "Unmatched", "arch_of_cc", "check_device", "resolve_device",
]

Format = Literal["torch-profiler", "nsight-compute"]


@dataclass(frozen=True)
class Device:
    """The device a capture ran on: ``kind`` cpu or gpu, its name and compute capability
    when recorded, and ``evidence``: what in the file said so."""

    kind: Literal["cpu", "gpu"]
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    evidence: str = ""

    def describe(self) -> str:
        if self.kind == "cpu":
            return "the CPU"
        cc = (f" (compute capability {self.compute_capability[0]}.{self.compute_capability[1]})"
              if self.compute_capability else "")
        return f"{self.name or 'an unnamed GPU'}{cc}"


@dataclass(frozen=True)
class Unit:
    """One timed call of one op: the perfmodel op it maps to, its measured time, s (the sum
    of its kernels on a GPU, the op's span on the host thread on a CPU), and the kernels
    that made it up. Nsight exports add the measured throughputs, % of peak (the
    duration-weighted mean over the call's kernels)."""

    op: MappedOp
    measured_s: float
    source_op: str
    kernels: tuple[str, ...] = ()
    sm_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None


@dataclass(frozen=True)
class Unmatched:
    """A kernel (GPU) or op (CPU) the capture timed that maps to no perfmodel op, and why.
    ``context`` names the enclosing op when there is one; Nsight exports add the measured
    throughputs, %."""

    name: str
    kind: Literal["kernel", "op"]
    reason: str
    measured_s: float
    context: str = ""
    sm_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None


@dataclass(frozen=True)
class Capture:
    """A profiler capture read: device, mapped op calls, unmatched work, timing code."""

    path: str
    format: Format
    device: Device
    units: tuple[Unit, ...]
    unmatched: tuple[Unmatched, ...]
    timing: str
    notes: tuple[str, ...] = field(default=())

    @property
    def measured_s(self) -> float:
        """Total time of mapped and unmatched work, s."""
        return sum(u.measured_s for u in self.units) + sum(u.measured_s for u in self.unmatched)


#: Compute capability (major, minor) -> architecture family of the specs. Minor None
#: matches any minor version of that major.
_CC_ARCH: tuple[tuple[int, int | None, str], ...] = (
    (6, None, "pascal"), (7, 0, "volta"), (7, 2, "volta"), (7, 5, "turing"),
    (8, 0, "ampere"), (8, 6, "ampere"), (8, 7, "ampere"), (8, 9, "ada"), (9, None, "hopper"),
    (10, None, "blackwell"), (12, None, "blackwell-consumer"),
)


def arch_of_cc(cc: tuple[int, int]) -> str | None:
    """Architecture family of a CUDA compute capability (NVIDIA's CUDA C Programming
    Guide, compute capabilities table), or None when unknown."""
    for major, minor, arch in _CC_ARCH:
        if cc[0] == major and (minor is None or cc[1] == minor):
            return arch
    return None


def resolve_device(name: str) -> str:
    """The bundled spec id a recorded device name resolves to (``NVIDIA H100 80GB HBM3`` ->
    ``h100-sxm``), or '' when none does. Silent: the user did not type this name."""
    if not name:
        return ""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return resolve_id(name)
        except PerfmodelError:
            return ""


def _base_id(hw: HardwareSpec) -> str:
    return hw.calibration.device if hw.calibration is not None else hw.id


def check_device(capture: Capture, hw: HardwareSpec, allow_other: bool = False) -> list[str]:
    """Refuse a capture made on another device than ``hw``; returns notes on how the match
    was made. Raises :class:`PerfmodelError` naming the file, both devices and the fix."""
    dev = capture.device
    other = "" if allow_other else " (or --allow-other-gpu to predict it anyway)"
    if dev.kind == "cpu":
        if hw.vendor == "cpu":
            return []
        if allow_other:
            return [f"recorded on the CPU, predicted on {hw.id} as asked"]
        raise PerfmodelError(
            capture.path, f"recorded on the CPU ({dev.evidence}), but --gpu {hw.id} is a "
            f"GPU spec (vendor {hw.vendor})", "pass a CPU spec (--gpu cpu-local, or the one "
            "'perfmodel calibrate cpu-spec' writes), or record the GPU run with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]" + other)
    if hw.vendor == "cpu" and not allow_other:
        raise PerfmodelError(
            capture.path, f"recorded on {dev.describe()} ({dev.evidence}), but --gpu {hw.id} "
            "is a CPU spec", "pass --gpu with the spec of that GPU" + other)
    resolved = resolve_device(dev.name)
    if resolved:
        if resolved in (hw.id, _base_id(hw)):
            return []
        if allow_other:
            return [f"recorded on {dev.describe()} ({resolved}), predicted on {hw.id} as asked"]
        raise PerfmodelError(
            capture.path, f"recorded on {dev.describe()} (bundled spec {resolved}; "
            f"{dev.evidence}), but --gpu is {hw.id}",
            f"pass --gpu {resolved}, or --allow-other-gpu if {hw.id} describes that device")
    arch = arch_of_cc(dev.compute_capability) if dev.compute_capability else None
    if arch is not None and arch != hw.arch and not allow_other:
        raise PerfmodelError(
            capture.path, f"recorded on {dev.describe()}, a {arch} GPU ({dev.evidence}), but "
            f"--gpu {hw.id} is {hw.arch}", "pass --gpu with the spec of that GPU" + other)
    if arch is not None:
        who = f"{dev.name} is not a bundled spec" if dev.name else "the capture names no GPU"
        cc = dev.compute_capability or (0, 0)
        return [f"{who}; its compute capability {cc[0]}.{cc[1]} ({arch}) matches {hw.id}"
                + ("" if arch == hw.arch else " only because you asked")]
    return [f"the capture does not say which GPU ran it; taken to be {hw.id}"]
