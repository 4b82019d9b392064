"""Collectives between GPUs: all-reduce and the algorithms that run it.

Counts per GPU, for a buffer of B bytes on n GPUs (no hardware knowledge here; the timing
layer decides which algorithm a GPU and an engine use):

- ``ring`` (NCCL's ring, also what ``nccl`` counts): n−1 reduce-scatter steps then n−1
  all-gather steps, each moving B/n: each GPU sends 2·(n−1)/n·B over its link in
  2·(n−1) sequential transfers; (n−1)/n·numel additions.
- ``one_shot`` (engines' custom all-reduce for small buffers): every GPU reads the whole
  buffer of every peer over the link and reduces it locally: (n−1)·B received per GPU,
  one exchange, (n−1)·numel additions.
- ``two_shot``: a reduce-scatter and an all-gather by direct peer access: 2·(n−1)/n·B per
  GPU in two exchanges, like a ring's traffic with two synchronisations instead of
  2·(n−1).
- ``nvls`` (NVLink SHARP: the NVSwitch reduces and multicasts): each GPU sends B and
  receives B, in two exchanges; the switch does the additions.

``fused_residual_norm`` adds the work engines fuse into the all-reduce kernel (TensorRT-LLM's
all-reduce + residual add + RMSNorm): the residual read and written and the normed output
written, 3·B more device-memory bytes and 3·numel vector FLOPs, no extra launch.
With ``gpus = 1`` it is free (no launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields

__all__ = ["ALGORITHMS", "Algorithm", "AllReduce"]

Algorithm = Literal["auto", "nccl", "ring", "one_shot", "two_shot", "nvls"]
#: ``auto``: what an inference engine runs on this GPU (timing layer); ``nccl``: NCCL's own
#: choice of protocol and algorithm; the others force one algorithm.
ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)


@dataclass(frozen=True, init=False)
class AllReduce:
    """All-reduce of ``numel`` elements across ``gpus`` GPUs (see the module docstring for
    the algorithms). :meth:`cost` counts a ring (``auto`` and ``nccl`` too: the timing layer
    compares the candidates with :meth:`cost_of`)."""

    numel: Array
    gpus: Array
    dtype: DType
    algorithm: Algorithm
    fused_residual_norm: bool

    def __init__(self, numel: Any, gpus: Any = 2, dtype: str = "bf16",
                 algorithm: str = "auto", fused_residual_norm: bool = False) -> None:
        set_ = object.__setattr__
        set_(self, "numel", as_size(numel, "numel"))
        set_(self, "gpus", as_size(gpus, "gpus"))
        set_(self, "dtype", normalize_dtype(dtype))
        if algorithm not in ALGORITHMS:
            raise PerfmodelError("algorithm", f"unknown all-reduce algorithm {algorithm!r}",
                                 f"use one of {', '.join(ALGORITHMS)}")
        set_(self, "algorithm", algorithm)
        set_(self, "fused_residual_norm", bool(fused_residual_norm))
        broadcast_fields(numel=self.numel, gpus=self.gpus)

    @property
    def name(self) -> str:
        return "allreduce"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(numel=self.numel, gpus=self.gpus)

    def cost(self) -> Cost:
        """Cost of the ring (for ``auto``/``nccl``) or of the forced algorithm."""
        algo = "ring" if self.algorithm in ("auto", "nccl") else self.algorithm
        return self.cost_of(algo)

    def cost_of(self, algorithm: str) -> Cost:
        """Cost of running this all-reduce with ``algorithm`` (ring, one_shot, two_shot,
        nvls)."""
        n = self.gpus
        data = self.numel * bytes_per_element(self.dtype)
        frac = (n - 1.0) / n
        multi = n > 1
        if algorithm == "ring":
            link, steps, adds = 2.0 * frac * data, 2.0 * (n - 1.0), frac * self.numel
            hbm = 3.0 * frac * data
        elif algorithm == "one_shot":
            link, steps, adds = (n - 1.0) * data, np.where(multi, 1.0, 0.0), \
                (n - 1.0) * self.numel
            hbm = n * data + data
        elif algorithm == "two_shot":
            link, steps, adds = 2.0 * frac * data, np.where(multi, 2.0, 0.0), \
                frac * self.numel
            hbm = 3.0 * frac * data + data
        elif algorithm == "nvls":
            link, steps, adds = np.where(multi, data, 0.0), np.where(multi, 2.0, 0.0), \
                0.0 * self.numel
            hbm = 2.0 * data
        else:
            raise PerfmodelError("algorithm", f"no cost for {algorithm!r}",
                                 "use ring, one_shot, two_shot or nvls")
        hbm = np.where(multi, hbm, 0.0)
        flops = np.where(multi, adds, 0.0)
        if self.fused_residual_norm:
            hbm = hbm + np.where(multi, 3.0 * data, 0.0)
            flops = flops + np.where(multi, 3.0 * self.numel, 0.0)
        return Cost(
            vector_flops=np.asarray(flops, dtype=np.float64),
            bytes_min=np.asarray(hbm, dtype=np.float64),
            bytes_hbm=np.asarray(hbm, dtype=np.float64),
            launches=np.where(multi, 1.0, 0.0),
            work_units=np.where(multi, np.ceil(self.numel / 65536.0), 0.0),
            link_bytes=np.asarray(np.where(multi, link, 0.0), dtype=np.float64),
            link_steps=np.asarray(np.where(multi, steps, 0.0), dtype=np.float64),
        )
