"""Caps on what a user may hand perfmodel, each with the reason it sits where it does.

Every cap is named in the error that enforces it, so a caller who meets one knows which
it was and why. The caps on sizes are far beyond any real workload: they exist so that an
absurd input (10⁹ layers, a 10³⁰-element GEMM, a sweep of 10⁹ points) is refused in
microseconds instead of printing 25-digit numbers, NaN, or allocating gigabytes.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from perfmodel._errors import PerfmodelError

__all__ = [
    "MAX_BATCH",
    "MAX_CSV_BYTES",
    "MAX_FIT_ROWS",
    "MAX_LAYERS",
    "MAX_MESSAGE_CHARS",
    "MAX_MODEL_DIM",
    "MAX_SIZE",
    "MAX_SPEC_BYTES",
    "MAX_SWEEP_POINTS",
    "MAX_TABLE_POINTS",
    "MAX_TOKENS",
    "MAX_TP",
    "MAX_VOCAB",
    "MAX_YAML_NODES",
    "check_count",
    "check_whole",
    "clip_message",
]

#: An op's shape field (m, n, k, batch, heads, sequence lengths, elements): the largest
#: integer a float64 holds exactly (2⁵³ ≈ 9.0 × 10¹⁵). Products of up to 19 such fields
#: stay finite, so no prediction overflows to infinity or NaN.
MAX_SIZE = float(2**53)
#: Tokens of one sequence (prompt, context, generated): 2³¹ ≈ 2.1 × 10⁹, 200× the longest
#: context window published (10 M tokens).
MAX_TOKENS = float(2**31)
#: Sequences of one batch: 2²⁴ ≈ 1.7 × 10⁷.
MAX_BATCH = float(2**24)
#: Tensor-parallel GPUs: 2¹⁶ = 65,536.
MAX_TP = float(2**16)
#: Transformer layers: 10⁵ (the deepest published decoders have ~130).
MAX_LAYERS = 100_000
#: Widths of a transformer (hidden, intermediate, head dim, heads, experts, window):
#: 2²⁴ ≈ 1.7 × 10⁷ (published models stay below 2¹⁸).
MAX_MODEL_DIM = 2**24
#: Vocabulary rows: 2²⁸ ≈ 2.7 × 10⁸ (published vocabularies stay below 2²⁰).
MAX_VOCAB = 2**28
#: Points of one sweep (``--points`` or a START:STOP:STEP range): 10⁵. A 10⁵-point model
#: sweep takes about a second; more is a typo, not a question.
MAX_SWEEP_POINTS = 100_000
#: Size of a spec YAML file: 16 MiB (a calibrated profile with residual tables is ~100 kB).
MAX_SPEC_BYTES = 16 * 2**20
#: YAML nodes after alias expansion: 10⁶. A spec has a few hundred; a "billion laughs"
#: file of nested aliases expands to billions and is refused before it is built.
MAX_YAML_NODES = 1_000_000
#: Size of a measurement CSV read at once: 1 GiB (about 10⁷ rows of the shared schema).
MAX_CSV_BYTES = 2**30
#: Points of one calibration residual table: 600. Kernel tables build n × n matrices and
#: invert them once per candidate width and ridge (35 times), in every cross-validation
#: fold, so their cost grows as n³; a key with more points is thinned by a stated rule
#: (:func:`perfmodel.calibrate.fit.thin_points`). A suite run gives a few hundred per key.
MAX_TABLE_POINTS = 600
#: Rows of one residual table read from a spec's calibration block: 2,000 (calibrate fit
#: writes at most MAX_TABLE_POINTS + 1). Predictions compare every shape with every row, in
#: chunks of 4,096 shapes: 2,000 rows keep that under 300 MB for 4-D shapes.
MAX_RESIDUAL_ROWS = 2_000
#: Rows one calibration fit uses: 5,000 (a suite run writes a few hundred; the public
#: evaluation fits at most 300 per group); more are thinned with a stated rule
#: (:func:`perfmodel.calibrate.data.thin_rows`).
MAX_FIT_ROWS = 5_000
#: Characters of one error message line: values echoed back are cut to fit.
MAX_MESSAGE_CHARS = 300


def clip_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with "… (N more characters)") on one line."""
    one = " ".join(str(text).split())
    if len(one) <= limit:
        return one
    return f"{one[:limit]}… ({len(one) - limit} more characters)"


def check_count(value: float | str, name: str, maximum: float, *, minimum: float = 1.0,
                integer: bool = True, what: str = "") -> float:
    """``value`` as a float if it is finite, ≥ ``minimum``, ≤ ``maximum`` and (with
    ``integer``) whole; otherwise :class:`PerfmodelError` naming ``name`` and the cap."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise PerfmodelError(name, f"expected a number, got {clip_message(repr(value), 60)}",
                             "pass a positive integer") from None
    if not math.isfinite(v):
        raise PerfmodelError(name, f"{v!r} is not a finite number", "pass a finite value")
    if v < minimum:
        raise PerfmodelError(name, f"must be ≥ {minimum:g}, got {v:g}",
                             "sizes are positive counts")
    if integer and v != round(v):
        raise PerfmodelError(name, f"must be a whole number, got {v:g}", "pass integers")
    if v > maximum:
        raise PerfmodelError(name, f"{v:.4g} is above the cap of {maximum:.4g}"
                             + (f" ({what})" if what else ""),
                             "pass a realistic size")
    return v


def check_whole(value: Any, name: str, fix: str) -> int:
    """``value`` as an int if it is a whole number ≥ 1 given as an integer (a bool, a float
    or anything else is refused); otherwise :class:`PerfmodelError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise PerfmodelError(name, f"must be a whole number ≥ 1, got {value!r}", fix)
    return int(value)
