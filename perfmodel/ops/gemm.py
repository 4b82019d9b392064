"""GEMM: C[b, m, n] = A[b, m, k] · B[b, k, n] (a linear layer shares B across the batch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.ops.cost import Array, Cost, as_size, broadcast_fields

__all__ = ["Gemm"]


@dataclass(frozen=True, init=False)
class Gemm:
    """A (batched) matrix multiply.

    FLOPs = 2·b·m·n·k (multiply and add counted separately; never MACs).
    Minimum traffic = s_in·(b·m·k + k·n·(1 if shared_b else b)) + s_out·b·m·n
    (+ s_out·n for a bias vector). Shape fields accept numpy arrays and broadcast.

    Parameters
    ----------
    m, n, k:
        Rows of A/C, columns of B/C, reduction length.
    batch:
        Independent products (``torch.bmm`` batch, or heads).
    dtype:
        Input dtype; ``out_dtype`` defaults to it.
    shared_b:
        B is one matrix shared by every batch entry (a linear layer's weight).
    bias:
        An epilogue bias vector of length n is read.
    """

    m: Array
    n: Array
    k: Array
    batch: Array
    dtype: DType
    out_dtype: DType
    shared_b: bool
    bias: bool

    def __init__(self, m: Any, n: Any, k: Any, batch: Any = 1, dtype: str = "bf16",
                 out_dtype: str | None = None, shared_b: bool = False, bias: bool = False) -> None:
        set_ = object.__setattr__
        set_(self, "m", as_size(m, "m"))
        set_(self, "n", as_size(n, "n"))
        set_(self, "k", as_size(k, "k"))
        set_(self, "batch", as_size(batch, "batch"))
        set_(self, "dtype", normalize_dtype(dtype, "dtype"))
        set_(self, "out_dtype", normalize_dtype(out_dtype or dtype, "out_dtype"))
        set_(self, "shared_b", bool(shared_b))
        set_(self, "bias", bool(bias))
        broadcast_fields(m=self.m, n=self.n, k=self.k, batch=self.batch)

    @property
    def name(self) -> str:
        return "gemm"

    @property
    def shape(self) -> tuple[int, ...]:
        return broadcast_fields(m=self.m, n=self.n, k=self.k, batch=self.batch)

    def flops(self) -> Array:
        """2·b·m·n·k, FLOPs."""
        return 2.0 * self.batch * self.m * self.n * self.k

    def bytes_min(self) -> Array:
        """Every operand read once and C written once, bytes."""
        s_in = bytes_per_element(self.dtype)
        s_out = bytes_per_element(self.out_dtype)
        if self.shape == ():  # plain floats: the same formula without numpy's per-call cost
            b, m, n, k = float(self.batch), float(self.m), float(self.n), float(self.k)
            scalar = s_in * (b * m * k + (1.0 if self.shared_b else b) * k * n) + s_out * b * m * n
            return np.asarray(scalar + (s_out * n if self.bias else 0.0))
        b_mats = np.where(self.shared_b, 1.0, self.batch)
        total = s_in * (self.batch * self.m * self.k + b_mats * self.k * self.n)
        total = total + s_out * self.batch * self.m * self.n
        if self.bias:
            total = total + s_out * self.n
        return np.asarray(total, dtype=np.float64)

    def tiles(self, tile_m: float | Array, tile_n: float | Array,
              split_k: float | Array = 1.0) -> Array:
        """Output tiles (CTAs): b·⌈m/t_m⌉·⌈n/t_n⌉·split_k."""
        return self.batch * np.ceil(self.m / tile_m) * np.ceil(self.n / tile_n) * split_k

    def bytes_tiled(self, tile_m: float | Array, tile_n: float | Array,
                    concurrent_tiles: float | Array, cache_bytes: float) -> Array:
        """Device-memory traffic of a tiled kernel with L2 reuse inside a wave, bytes.

        Tiles of one wave (``concurrent_tiles`` of them, rasterised as a near-square block
        of g_m × g_n tiles) share A and B panels through L2. A is then re-read once per
        column band of g_n·t_n, B once per row band of g_m·t_m:
        traffic = s_in·(b·m·k·⌈n/(g_n·t_n)⌉ + k·n·b_B·⌈m/(g_m·t_m)⌉) + s_out·b·m·n.
        If both operands fit in ``cache_bytes`` together the minimum traffic applies.
        A bias vector (``bias``) is read once: + s_out·n.
        """
        s_in = bytes_per_element(self.dtype)
        s_out = bytes_per_element(self.out_dtype)
        b_mats = np.where(self.shared_b, 1.0, self.batch)
        a_bytes = s_in * self.batch * self.m * self.k
        b_bytes = s_in * b_mats * self.k * self.n
        tiles_m = np.ceil(self.m / tile_m)
        tiles_n = np.ceil(self.n / tile_n)
        g = np.sqrt(np.maximum(concurrent_tiles, 1.0))
        g_m = np.clip(np.round(g), 1.0, tiles_m)
        g_n = np.clip(np.floor(np.maximum(concurrent_tiles, 1.0) / g_m), 1.0, tiles_n)
        a_reads = np.ceil(tiles_n / g_n)
        b_reads = np.ceil(tiles_m / g_m)
        fits = (a_bytes / self.batch + b_bytes / b_mats) <= cache_bytes
        a_reads = np.where(fits, 1.0, a_reads)
        b_reads = np.where(fits, 1.0, b_reads)
        total = a_bytes * a_reads + b_bytes * b_reads + s_out * self.batch * self.m * self.n
        if self.bias:
            total = total + s_out * self.n
        return np.asarray(total, dtype=np.float64)

    def cost(self) -> Cost:
        """Hardware-free cost with the minimum traffic and 128×128 tiles as work units."""
        bmin = self.bytes_min()
        return Cost(
            tensor_flops=self.flops(), bytes_min=bmin, bytes_hbm=bmin,
            launches=np.ones(()), work_units=self.tiles(128.0, 128.0),
        )
