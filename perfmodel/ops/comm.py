"""Collectives between GPUs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields

__all__ = ["AllReduce"]


@dataclass(frozen=True, init=False)
class AllReduce:
    """Ring all-reduce of ``numel`` elements across ``gpus`` GPUs.

    Each GPU sends (and receives) 2·(n−1)/n·bytes over its link: n−1 reduce-scatter steps
    then n−1 all-gather steps, each a transfer of bytes/n paying the link latency once, so
    t = 2·(n−1)/n·bytes / link_bw + 2·(n−1)·latency. The (n−1)/n·numel additions run on
    vector lanes; each step also reads and writes its chunk in device memory.
    With ``gpus = 1`` it is free (no launch).
    """

    numel: Array
    gpus: Array
    dtype: DType

    def __init__(self, numel: Any, gpus: Any = 2, dtype: str = "bf16") -> None:
        set_ = object.__setattr__
        set_(self, "numel", as_size(numel, "numel"))
        set_(self, "gpus", as_size(gpus, "gpus"))
        set_(self, "dtype", normalize_dtype(dtype))
        broadcast_fields(numel=self.numel, gpus=self.gpus)

    @property
    def name(self) -> str:
        return "allreduce"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(numel=self.numel, gpus=self.gpus)

    def cost(self) -> Cost:
        n = self.gpus
        data = self.numel * bytes_per_element(self.dtype)
        frac = (n - 1.0) / n
        multi = n > 1
        return Cost(
            vector_flops=frac * self.numel,
            bytes_min=np.asarray(3.0 * frac * data, dtype=np.float64),
            bytes_hbm=np.asarray(3.0 * frac * data, dtype=np.float64),
            launches=np.where(multi, 1.0, 0.0),
            work_units=np.where(multi, np.ceil(self.numel / 65536.0), 0.0),
            link_bytes=2.0 * frac * data,
            link_steps=2.0 * (n - 1.0),
        )
