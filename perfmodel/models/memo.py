"""Bounded memo tables keyed by value, for whole-model predictions.

A prediction is a pure function of its model arguments and the GPU spec, so a result can be
kept and handed out again. Keys are values, never ``id()``:

- hashable arguments (strings, Python numbers, frozen dataclasses such as
  :class:`~perfmodel.models.config.TransformerConfig`) go into the key as they are;
- a :class:`~perfmodel.hardware.spec.HardwareSpec` is not hashable (its tables are dicts), so
  :func:`spec_token` stands for it: an integer issued once per distinct spec *value*. The
  token's deep copy of the spec must equal the spec given (``==``, field by field), so a
  changed spec, even one edited in place, gets a token of its own and misses.

Tables are bounded (the oldest entry goes first) and safe to share between threads: a race
at worst computes an entry twice.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from perfmodel.hardware.spec import HardwareSpec

__all__ = ["Memo", "spec_token"]

V = TypeVar("V")

#: Distinct spec values remembered per spec id (tokens of older ones are not reissued).
_SPECS_PER_ID = 4
_SPECS: dict[str, list[tuple[HardwareSpec, int]]] = {}
_TOKENS = itertools.count(1)
_LOCK = threading.Lock()


def spec_token(hw: HardwareSpec) -> int:
    """An integer standing for the value of ``hw``: equal specs get equal tokens, a spec
    differing in any field another one (never a token issued before)."""
    for snap, token in _SPECS.get(hw.id, ()):
        if snap == hw:
            return token
    with _LOCK:
        copies = _SPECS.setdefault(hw.id, [])
        token = next(_TOKENS)
        copies.append((hw.model_copy(deep=True), token))
        del copies[:-_SPECS_PER_ID]
        return token


class Memo(Generic[V]):
    """A dict of at most ``size`` entries; the oldest entry is dropped first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a memo holds at least one entry")
        self.size = size
        self._data: dict[Hashable, V] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        return self._data.get(key)

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.size:
                del self._data[next(iter(self._data))]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
