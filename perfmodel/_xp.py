"""Elementwise math that works on Python floats (fast scalar path) and numpy arrays.

The timing formulas are written once against this small namespace: ``SCALAR`` runs them
on floats with the ``math`` module (a few µs per prediction), ``VECTOR`` on numpy arrays
(millions of shapes per call). Both give the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["SCALAR", "VECTOR", "Ops"]


class Ops:
    """Interface: ceil, floor, round, sqrt, minimum, maximum, clip, where."""

    @staticmethod
    def ceil(x: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def floor(x: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def round(x: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def sqrt(x: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def clip(x: Any, lo: Any, hi: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError


class _Scalar(Ops):
    @staticmethod
    def ceil(x: Any) -> Any:
        return float(math.ceil(x))

    @staticmethod
    def floor(x: Any) -> Any:
        return float(math.floor(x))

    @staticmethod
    def round(x: Any) -> Any:
        # numpy rounds half to even, as Python's round does
        return float(round(x))

    @staticmethod
    def sqrt(x: Any) -> Any:
        return math.sqrt(x)

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return a if a < b else b

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return a if a > b else b

    @staticmethod
    def clip(x: Any, lo: Any, hi: Any) -> Any:
        y = lo if x < lo else x
        return hi if y > hi else y

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return a if cond else b


class _Vector(Ops):
    @staticmethod
    def ceil(x: Any) -> Any:
        return np.ceil(x)

    @staticmethod
    def floor(x: Any) -> Any:
        return np.floor(x)

    @staticmethod
    def round(x: Any) -> Any:
        return np.round(x)

    @staticmethod
    def sqrt(x: Any) -> Any:
        return np.sqrt(x)

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return np.minimum(a, b)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return np.maximum(a, b)

    @staticmethod
    def clip(x: Any, lo: Any, hi: Any) -> Any:
        return np.minimum(np.maximum(x, lo), hi)

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)


SCALAR: Ops = _Scalar()
VECTOR: Ops = _Vector()
