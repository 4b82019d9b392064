"""Cost: what one kernel (or op) does, counted without any hardware knowledge.

All fields are numpy arrays that broadcast over the op's shape fields (0-d for scalars).
Units: FLOPs (2 per multiply-add), operations for special functions, bytes, counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_SIZE

__all__ = ["Array", "Cost", "as_size", "broadcast_fields"]

Array = npt.NDArray[np.float64]


def _zero() -> Array:
    return np.zeros(())


@dataclass(frozen=True)
class Cost:
    """Hardware-independent work of a kernel.

    Attributes
    ----------
    tensor_flops:
        FLOPs on tensor/matrix units (2·m·n·k for a GEMM).
    vector_flops:
        FLOPs on vector (CUDA-core / SIMD) lanes.
    sfu_ops:
        Special-function operations (exp in softmax), one per element.
    bytes_min:
        Minimum device-memory traffic, bytes: every input read once, every output written once.
    bytes_hbm:
        Modelled device-memory traffic of the real kernel (tiled re-reads that miss L2), bytes.
    launches:
        Kernels launched.
    work_units:
        Parallel work units (CTAs / thread blocks) of the main kernel.
    link_bytes:
        Bytes each GPU sends over its GPU-GPU link (collectives).
    link_steps:
        Sequential link transfers, each paying the link latency (collectives).
    """

    tensor_flops: Array = field(default_factory=_zero)
    vector_flops: Array = field(default_factory=_zero)
    sfu_ops: Array = field(default_factory=_zero)
    bytes_min: Array = field(default_factory=_zero)
    bytes_hbm: Array = field(default_factory=_zero)
    launches: Array = field(default_factory=_zero)
    work_units: Array = field(default_factory=_zero)
    link_bytes: Array = field(default_factory=_zero)
    link_steps: Array = field(default_factory=_zero)

    @property
    def flops(self) -> Array:
        """All FLOPs (tensor + vector), the figure Nsight and rooflines count."""
        return self.tensor_flops + self.vector_flops

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            tensor_flops=self.tensor_flops + other.tensor_flops,
            vector_flops=self.vector_flops + other.vector_flops,
            sfu_ops=self.sfu_ops + other.sfu_ops,
            bytes_min=self.bytes_min + other.bytes_min,
            bytes_hbm=self.bytes_hbm + other.bytes_hbm,
            launches=self.launches + other.launches,
            work_units=np.maximum(self.work_units, other.work_units),
            link_bytes=self.link_bytes + other.link_bytes,
            link_steps=self.link_steps + other.link_steps,
        )

    def scale(self, factor: float | Array) -> Cost:
        """The cost of ``factor`` repetitions (launches and work units scale too)."""
        f = np.asarray(factor, dtype=np.float64)
        return Cost(
            tensor_flops=self.tensor_flops * f, vector_flops=self.vector_flops * f,
            sfu_ops=self.sfu_ops * f, bytes_min=self.bytes_min * f, bytes_hbm=self.bytes_hbm * f,
            launches=self.launches * f, work_units=self.work_units,
            link_bytes=self.link_bytes * f, link_steps=self.link_steps * f,
        )


def as_size(value: object, name: str, *, minimum: float = 1.0, integer: bool = True) -> Array:
    """Convert a shape field to a float64 array and check it.

    Raises :class:`PerfmodelError` naming ``name`` if any element is NaN, infinite, below
    ``minimum`` (sizes must be ≥ 1), above :data:`~perfmodel._limits.MAX_SIZE` or, with
    ``integer``, not a whole number.
    """
    plain = type(value) is int or type(value) is float
    if plain or type(value) is np.float64 or (type(value) is np.ndarray and value.ndim == 0
                                              and value.dtype == np.float64):
        # one number (plain, or a float64 as model graphs pass): checked as a float (NaN
        # and infinities fail the range test)
        v = float(value)  # type: ignore[arg-type]
        if minimum <= v <= MAX_SIZE and (not integer or v == round(v)):
            return np.asarray(v)
    if plain:  # one check failed: name it (a float64 goes through the array checks below)
        if not math.isfinite(v):
            raise PerfmodelError(name, "is NaN or infinite", "pass a finite value")
        if v < minimum:
            raise PerfmodelError(name, f"must be ≥ {minimum:g}, got {v:g}",
                                 "sizes are positive counts")
        if integer and v != round(v):
            raise PerfmodelError(name, f"must be a whole number, got {v:g}", "pass integers")
        if v > MAX_SIZE:
            _too_large(name, v)
        return np.asarray(v)
    if isinstance(value, (str, bytes)) or value is None:
        raise PerfmodelError(name, f"expected a number or an array, got {value!r}",
                             f"pass a positive {'integer' if integer else 'number'}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise PerfmodelError(name, f"cannot read {value!r} as numbers",
                             "pass a number or a numeric array") from None
    if arr.size == 0:
        raise PerfmodelError(name, "empty array", "pass at least one value")
    # every check in two reductions (NaN makes min and max NaN, which fails both
    # comparisons); a failure goes through the checks below, which name the problem
    if arr.min() >= minimum and arr.max() <= MAX_SIZE and (
            not integer or bool(np.all(arr == np.round(arr)))):
        return arr
    if not np.all(np.isfinite(arr)):
        raise PerfmodelError(name, "contains NaN or infinity", "pass finite values")
    if np.any(arr < minimum):
        bad = float(arr[arr < minimum].flat[0])
        raise PerfmodelError(name, f"must be ≥ {minimum:g}, got {bad:g}",
                             "sizes are positive counts")
    if integer and np.any(arr != np.round(arr)):
        bad = float(arr[arr != np.round(arr)].flat[0])
        raise PerfmodelError(name, f"must be a whole number, got {bad:g}", "pass integers")
    if np.any(arr > MAX_SIZE):
        _too_large(name, float(arr.max()))
    return arr


def _too_large(name: str, value: float) -> None:
    raise PerfmodelError(name, f"{value:.4g} is above the cap of {MAX_SIZE:.4g} (2^53, the "
                         "largest integer a float64 holds exactly)", "pass a realistic size")


def broadcast_fields(**arrays: Array) -> tuple[int, ...]:
    """Check that the named arrays broadcast together; return the common shape."""
    if all(a.ndim == 0 for a in arrays.values()):
        return ()
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in arrays.values())))
    except ValueError:
        shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in arrays.items() if v.ndim)
        raise PerfmodelError(
            "shape", f"array arguments do not broadcast together: {shapes}",
            "give arrays of the same length, or shapes numpy can broadcast",
        ) from None
