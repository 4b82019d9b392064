"""Human units at the edges, SI floats inside.

``parse_quantity("3.35 TB/s", "bandwidth")`` returns ``3.35e12`` (bytes per second).
Decimal prefixes (k, M, G, T, P, E) are powers of 1000; binary prefixes (Ki, Mi, Gi, Ti,
Pi, Ei) are powers of 1024. "KB" is rejected as ambiguous (write kB or KiB). A quantity
whose unit belongs to another kind ("3.35 TB" for a bandwidth) or a misspelt unit
("TFLOPS/s") raises :class:`UnitError` naming the field and the accepted forms.
A plain number (int, float or a numeric string such as ``"1e15"``) is taken as already SI;
for a ratio that means a fraction (0.85), while ``"85 %"`` is a percentage.
"""

from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal
from typing import Literal

from perfmodel._errors import UnitError
from perfmodel._limits import clip_message

__all__ = ["KINDS", "Kind", "format_capacity", "format_quantity", "parse_quantity"]

Kind = Literal["flops", "bandwidth", "bytes", "frequency", "power", "time", "ratio"]
KINDS: tuple[Kind, ...] = ("flops", "bandwidth", "bytes", "frequency", "power", "time", "ratio")

# Multipliers are exact decimals: "66.9 TFLOP/s" parses to the double nearest 66.9e12
# (what the literal 66.9e12 gives), not to the product of two rounded doubles.
_ONE = Decimal(1)
_DECIMAL = {p: Decimal(10) ** (3 * i) for i, p in enumerate(("", "k", "M", "G", "T", "P", "E"))}
_BINARY = {p: Decimal(2) ** (10 * i) for i, p in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)}
_TIME_PREFIX = {"": _ONE, "m": Decimal("1e-3"), "u": Decimal("1e-6"), "µ": Decimal("1e-6"),
                "μ": Decimal("1e-6"), "n": Decimal("1e-9")}

# Base unit spellings per kind (after the prefix). Value: multiplier to SI.
_BASES: dict[Kind, dict[str, Decimal]] = {
    "flops": {"FLOP/s": _ONE, "FLOPS": _ONE, "OP/s": _ONE, "OPS": _ONE, "IOPS": _ONE},
    "bandwidth": {"B/s": _ONE, "Bps": _ONE, "b/s": Decimal("0.125"), "bps": Decimal("0.125")},
    "bytes": {"B": _ONE, "byte": _ONE, "bytes": _ONE},
    "frequency": {"Hz": _ONE},
    "power": {"W": _ONE},
    "time": {"s": _ONE},
    "ratio": {"%": Decimal("0.01")},
}

#: Enough digits that number x multiplier is exact before the one rounding to a double.
_EXACT = decimal.Context(prec=100, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)

_EXAMPLES: dict[Kind, str] = {
    "flops": "'989 TFLOP/s', '989 TFLOPS', '1979 TOPS', or a plain number in FLOP/s",
    "bandwidth": "'3.35 TB/s', '900 GB/s', '64 GiB/s', '100 Gb/s', or a plain number in B/s",
    "bytes": "'80 GB', '80 GiB', '50 MiB', '228 KiB', or a plain number of bytes",
    "frequency": "'1.98 GHz', '1830 MHz', or a plain number in Hz",
    "power": "'700 W', '1 kW', or a plain number in W",
    "time": "'5 us', '5 µs', '1.2 ms', or a plain number of seconds",
    "ratio": "'85 %' or a plain fraction such as 0.85",
}

#: Spellings with an upper-case K, which some write for 1000 and others for 1024.
_AMBIGUOUS_K = frozenset({"KB", "KB/s", "KBps", "Kb/s", "Kbps", "Kbyte", "Kbytes"})

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY_RE = re.compile(rf"^\s*({_NUMBER})\s*(\S*)\s*$")


def _unit_table(kind: Kind) -> dict[str, Decimal]:
    """All accepted unit spellings of ``kind`` with their SI multipliers."""
    table: dict[str, Decimal] = {}
    for base, mult in _BASES[kind].items():
        if kind == "time":
            for prefix, scale in _TIME_PREFIX.items():
                table[prefix + base] = scale * mult
            continue
        if kind in ("frequency", "power", "ratio"):
            prefixes = {p: s for p, s in _DECIMAL.items() if p in ("", "k", "M", "G")}
            if kind == "ratio":
                prefixes = {"": _ONE}
            for prefix, scale in prefixes.items():
                table[prefix + base] = scale * mult
            continue
        for prefix, scale in _DECIMAL.items():
            table[prefix + base] = scale * mult
        if kind in ("bytes", "bandwidth") and base in ("B", "B/s"):
            for prefix, scale in _BINARY.items():
                table[prefix + base] = scale * mult
    return table


_TABLES: dict[Kind, dict[str, Decimal]] = {k: _unit_table(k) for k in KINDS}


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
    if kind not in _EXAMPLES:
        raise UnitError("kind", f"unknown kind of quantity {kind!r}",
                        f"use one of {', '.join(KINDS)}")
    fix = f"write {_EXAMPLES[kind]}"
    shown = clip_message(repr(value), 80)
    if isinstance(value, bool):
        raise UnitError(field, f"{shown} is a boolean, not a quantity", fix)
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            raise UnitError(field, f"{shown} is not a finite number", fix)
        return number
    if not isinstance(value, str):
        raise UnitError(
            field, f"expected a number or a string with a unit, got {type(value).__name__}",
            fix,
        )
    match = _QUANTITY_RE.match(value)
    if match is None:
        raise UnitError(field, f"cannot read {shown} as a quantity", fix)
    digits, unit = match.group(1), match.group(2)
    table = _TABLES[kind]
    if unit in table or unit == "":
        number = float(_EXACT.multiply(Decimal(digits), table.get(unit, _ONE)))
        if not math.isfinite(number):
            raise UnitError(field, f"{shown} is too large to be a finite number", fix)
        return number
    if unit in _AMBIGUOUS_K:
        raise UnitError(
            field, f"{shown}: 'K' is ambiguous (1000 or 1024)",
            "write 'kB' for 1000 bytes or 'KiB' for 1024 bytes",
        )
    if kind == "flops" and re.fullmatch(r"[kMGTPE]?(FL)?OPS/s", unit):
        raise UnitError(
            field, f"{shown}: {unit!r} says 'per second' twice (FLOPS already means FLOP/s)",
            fix,
        )
    other = _kind_of_unit(unit)
    if other is not None:
        raise UnitError(
            field, f"{shown} is a {other} quantity, but a {kind} quantity is expected",
            fix,
        )
    raise UnitError(field, f"unknown unit {unit!r} in {shown}", fix)


_DISPLAY: dict[Kind, tuple[str, tuple[tuple[float, str], ...]]] = {
    "flops": ("FLOP/s", ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1.0, ""))),
    "bandwidth": ("B/s", ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))),
    "bytes": ("B", ((2.0**40, "Ti"), (2.0**30, "Gi"), (2.0**20, "Mi"), (2.0**10, "Ki"), (1.0, ""))),
    "frequency": ("Hz", ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))),
    "power": ("W", ((1e3, "k"), (1.0, ""))),
    "time": ("s", ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))),
    "ratio": ("%", ((0.01, ""),)),
}


def format_quantity(value: float, kind: Kind, digits: int = 4, prefix: str | None = None) -> str:
    """Format an SI value for display with ``digits`` significant digits, e.g.
    ``format_quantity(3.35e12, "bandwidth")`` -> ``"3.35 TB/s"``.

    Byte sizes use binary prefixes (``"80 GiB"``), rates decimal ones; ratios print as
    percentages (``0.885`` -> ``"88.5 %"``). ``prefix`` forces one prefix, so a column of
    peaks reads alike (``prefix="T"``: ``"1978.9 TFLOP/s"``, not ``"1.9789 PFLOP/s"``).
    :func:`parse_quantity` reads every result back.
    """
    if kind not in _DISPLAY:
        raise UnitError("kind", f"unknown kind of quantity {kind!r}",
                        f"use one of {', '.join(KINDS)}")
    base, scales = _DISPLAY[kind]
    if kind == "ratio":
        return f"{value * 100:.{digits}g} %"
    if prefix is not None:
        forced = {p: s for s, p in scales}
        if prefix not in forced:
            raise ValueError(f"prefix {prefix!r} is not used for {kind}; use one of "
                             f"{', '.join(repr(p) for p in forced)}")
        return f"{value / forced[prefix]:.{digits}g} {prefix}{base}"
    magnitude = abs(value)
    for scale, prefix in scales:
        if magnitude >= scale:
            return f"{value / scale:.{digits}g} {prefix}{base}"
    scale, prefix = scales[-1]
    return f"{value / scale:.{digits}g} {prefix}{base}"


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def format_capacity(value: float, memory_type: str = "") -> str:
    """A memory capacity the way vendors print it, with the exact size beside it:
    ``format_capacity(80 * 2**30, "HBM3")`` -> ``"80 GB HBM3 (85.9 × 10⁹ B)"``.

    Memory vendors' "GB" is 2³⁰ bytes (an "80 GB" H100 holds 80 GiB = 85.9 × 10⁹ bytes),
    so a whole number of GiB prints as that many "GB" (TiB as "TB"); anything else prints
    in binary units. The bracket gives the byte count in powers of ten, which is what
    decimal-GB figures elsewhere (weights, KV cache) compare against.
    """
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        return format_quantity(v, "bytes")
    label = f" {memory_type}" if memory_type else ""
    vendor = ""
    for scale, unit in ((2.0**40, "TB"), (2.0**30, "GB"), (2.0**20, "MB")):
        if v >= scale and v % scale == 0:
            vendor = f"{v / scale:g} {unit}"
            break
    if not vendor:
        vendor = format_quantity(v, "bytes", digits=4)
    exponent = int(math.floor(math.log10(v) / 3) * 3) if v >= 1000 else 0
    mantissa = v / 10.0**exponent
    if not exponent:
        return f"{vendor}{label}"
    return f"{vendor}{label} ({mantissa:.1f} × 10{str(exponent).translate(_SUPERSCRIPT)} B)"
