"""Human units at the edges, SI floats inside.

``parse_quantity("3.35 TB/s", "bandwidth")`` returns ``3.35e12`` (bytes per second).
Decimal prefixes (k, M, G, T, P, E) are powers of 1000; binary prefixes (Ki, Mi, Gi, Ti,
Pi, Ei) are powers of 1024. "KB" is rejected as ambiguous (write kB or KiB). A quantity
whose unit belongs to another kind ("3.35 TB" for a bandwidth) or a misspelt unit
("TFLOPS/s") raises :class:`UnitError` naming the field and the accepted forms.
A plain number (int, float or a numeric string) is taken as already SI.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from perfmodel._errors import UnitError

__all__ = ["KINDS", "Kind", "format_quantity", "parse_quantity"]

Kind = Literal["flops", "bandwidth", "bytes", "frequency", "power", "time", "ratio"]
KINDS: tuple[Kind, ...] = ("flops", "bandwidth", "bytes", "frequency", "power", "time", "ratio")

_DECIMAL = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_TIME_PREFIX = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "μ": 1e-6, "n": 1e-9}

# Base unit spellings per kind (after the prefix). Value: multiplier to SI.
_BASES: dict[Kind, dict[str, float]] = {
    "flops": {"FLOP/s": 1.0, "FLOPS": 1.0, "OP/s": 1.0, "OPS": 1.0, "IOPS": 1.0},
    "bandwidth": {"B/s": 1.0, "Bps": 1.0, "b/s": 0.125, "bps": 0.125},
    "bytes": {"B": 1.0, "byte": 1.0, "bytes": 1.0},
    "frequency": {"Hz": 1.0},
    "power": {"W": 1.0},
    "time": {"s": 1.0},
    "ratio": {"%": 0.01},
}

_EXAMPLES: dict[Kind, str] = {
    "flops": "'989 TFLOP/s', '989 TFLOPS', '1979 TOPS', or a plain number in FLOP/s",
    "bandwidth": "'3.35 TB/s', '900 GB/s', '64 GiB/s', '100 Gb/s', or a plain number in B/s",
    "bytes": "'80 GB', '80 GiB', '50 MiB', '228 KiB', or a plain number of bytes",
    "frequency": "'1.98 GHz', '1830 MHz', or a plain number in Hz",
    "power": "'700 W', '1 kW', or a plain number in W",
    "time": "'5 us', '5 µs', '1.2 ms', or a plain number of seconds",
    "ratio": "'85 %' or a plain fraction such as 0.85",
}

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY_RE = re.compile(rf"^\s*({_NUMBER})\s*(\S*)\s*$")


def _unit_table(kind: Kind) -> dict[str, float]:
    """All accepted unit spellings of ``kind`` with their SI multipliers."""
    table: dict[str, float] = {}
    for base, mult in _BASES[kind].items():
        if kind == "time":
            for prefix, scale in _TIME_PREFIX.items():
                table[prefix + base] = scale * mult
            continue
        if kind in ("frequency", "power", "ratio"):
            prefixes = {p: s for p, s in _DECIMAL.items() if p in ("", "k", "M", "G")}
            if kind == "ratio":
                prefixes = {"": 1.0}
            for prefix, scale in prefixes.items():
                table[prefix + base] = scale * mult
            continue
        for prefix, scale in _DECIMAL.items():
            table[prefix + base] = scale * mult
        if kind in ("bytes", "bandwidth") and base in ("B", "B/s"):
            for prefix, scale in _BINARY.items():
                table[prefix + base] = scale * mult
    return table


_TABLES: dict[Kind, dict[str, float]] = {k: _unit_table(k) for k in KINDS}


def _kind_of_unit(unit: str) -> Kind | None:
    for kind, table in _TABLES.items():
        if unit in table:
            return kind
    return None


def parse_quantity(value: object, kind: Kind, field: str = "value") -> float:
    """Parse ``value`` as a quantity of ``kind`` and return it in SI units.

    Parameters
    ----------
    value:
        A number (taken as SI already) or a string such as ``"3.35 TB/s"``.
    kind:
        One of :data:`KINDS`; decides which units are accepted.
    field:
        Name used in error messages (e.g. ``"memory.bandwidth"``).

    Raises
    ------
    UnitError
        If the string is malformed, the unit belongs to another kind, the unit is
        ambiguous ("KB"), or the result is not finite.
    """
    if isinstance(value, bool):
        raise UnitError(field, f"{value!r} is a boolean, not a quantity", f"write {_EXAMPLES[kind]}")
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            raise UnitError(field, f"{value!r} is not a finite number", f"write {_EXAMPLES[kind]}")
        return number
    if not isinstance(value, str):
        raise UnitError(
            field, f"expected a number or a string with a unit, got {type(value).__name__}",
            f"write {_EXAMPLES[kind]}",
        )
    match = _QUANTITY_RE.match(value)
    if match is None:
        raise UnitError(field, f"cannot read {value!r} as a quantity", f"write {_EXAMPLES[kind]}")
    number = float(match.group(1))
    unit = match.group(2)
    if not math.isfinite(number):
        raise UnitError(field, f"{value!r} is not finite", f"write {_EXAMPLES[kind]}")
    table = _TABLES[kind]
    if unit in table:
        return number * table[unit]
    if unit == "" and kind != "ratio":
        return number
    if unit in ("KB", "KB/s", "Kbytes"):
        raise UnitError(
            field, f"{value!r}: 'K' is ambiguous (1000 or 1024)",
            "write 'kB' for 1000 bytes or 'KiB' for 1024 bytes",
        )
    other = _kind_of_unit(unit)
    if other is not None:
        raise UnitError(
            field, f"{value!r} is a {other} quantity, but a {kind} quantity is expected",
            f"write {_EXAMPLES[kind]}",
        )
    raise UnitError(field, f"unknown unit {unit!r} in {value!r}", f"write {_EXAMPLES[kind]}")


_DISPLAY: dict[Kind, tuple[str, tuple[tuple[float, str], ...]]] = {
    "flops": ("FLOP/s", ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1.0, ""))),
    "bandwidth": ("B/s", ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))),
    "bytes": ("B", ((2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki"), (1.0, ""))),
    "frequency": ("Hz", ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))),
    "power": ("W", ((1e3, "k"), (1.0, ""))),
    "time": ("s", ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))),
    "ratio": ("%", ((0.01, ""),)),
}


def format_quantity(value: float, kind: Kind, digits: int = 4) -> str:
    """Format an SI value for display, e.g. ``format_quantity(3.35e12, "bandwidth")``
    -> ``"3.35 TB/s"``. Byte sizes use binary prefixes (display only)."""
    base, scales = _DISPLAY[kind]
    if kind == "ratio":
        return f"{value * 100:.{max(digits - 2, 1)}g} %"
    magnitude = abs(value)
    for scale, prefix in scales:
        if magnitude >= scale:
            return f"{value / scale:.{digits}g} {prefix}{base}"
    scale, prefix = scales[-1]
    return f"{value / scale:.{digits}g} {prefix}{base}"
