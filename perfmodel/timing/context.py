"""How kernels run and are timed: what a fair prediction of one call includes.

The same kernel costs different amounts depending on how it is launched and measured:

- ``launch``: ``stream`` (kernels enqueued back to back and timed by their own duration, as
  a profiler or tracer reports them: each kernel pays the spec's ``kernel_overhead``),
  ``graph`` (replayed from a CUDA graph, launch gaps removed: each kernel pays the smaller
  graph floor :data:`GRAPH_KERNEL_S`) or ``eager`` (dispatched from Python one call at a
  time: the call takes at least the host's dispatch time ``host_s``, which defaults to the
  engine's constant and to 0 without an engine);
- ``l2``: ``cold`` (operands come from device memory: an L2 flush between samples, or
  other work in between, as for the weights of a real forward pass) or ``warm`` (the same
  call repeated with nothing in between: operands whose footprint fits the L2 are read
  from it);
- ``copies``: a harness that rotates ``copies`` distinct sets of an op's weights between
  repeats (to defeat L2 residency) multiplies the warm footprint by that many; with
  ``input_copies`` the inputs rotate too;
- ``floor_s``: a fixed time the timing method adds once per call (host gap of one eager
  call, a host clock around call + synchronize);
- ``engine``: the inference engine making the call (``trtllm``, ``vllm``, ``sglang``; empty
  for a bare kernel): its calls run small bookkeeping kernels of their own around the
  main ones (:mod:`perfmodel.timing.engine_costs`).

A prediction of real inference uses the default: stream launches, cold L2, no floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError

__all__ = ["DEFAULT_CONTEXT", "L2State", "Launch", "RunContext"]

Launch = Literal["stream", "graph", "eager"]
L2State = Literal["cold", "warm"]


@dataclass(frozen=True)
class RunContext:
    """Launch mode, cache state and timing-method floor of one op call (see module doc)."""

    launch: Launch = "stream"
    l2: L2State = "cold"
    copies: Any = 1.0
    """A number, or an array broadcasting with the op's shape fields."""
    input_copies: bool = False
    floor_s: float = 0.0
    host_s: float | None = None
    """Host dispatch time of an eager call, s; None: the engine's constant
    (``host.<engine>.eager_s``) for eager launches, 0 otherwise."""
    engine: str = ""

    def __post_init__(self) -> None:
        if self.launch not in ("stream", "graph", "eager"):
            raise PerfmodelError("context.launch", f"unknown launch mode {self.launch!r}",
                                 "use 'stream', 'graph' or 'eager'")
        if self.l2 not in ("cold", "warm"):
            raise PerfmodelError("context.l2", f"unknown L2 state {self.l2!r}",
                                 "use 'cold' or 'warm'")
        for name in ("copies", "floor_s", "host_s"):
            if getattr(self, name) is None:
                continue
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(value)) or np.any(value < (1.0 if name == "copies"
                                                                else 0.0)):
                raise PerfmodelError(f"context.{name}", f"got {getattr(self, name)!r}",
                                     "copies ≥ 1; floor_s and host_s ≥ 0 seconds")


DEFAULT_CONTEXT = RunContext()
