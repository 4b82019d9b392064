"""Unit parsing and formatting: a table of hand-checked parses, the errors, and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel._errors import UnitError
from perfmodel._units import KINDS, Kind, format_quantity, parse_quantity

# (text, kind, SI value worked out by hand)
PARSES: list[tuple[object, Kind, float]] = [
    ("989 TFLOP/s", "flops", 989e12),
    ("989.4 TFLOPS", "flops", 989.4e12),
    ("1979 TOPS", "flops", 1979e12),
    ("66.9 TFLOP/s", "flops", 66.9e12),  # exact: not 66.9 * 1e12 = 66900000000000.01
    ("3.35 TB/s", "bandwidth", 3.35e12),
    ("3.35TB/s", "bandwidth", 3.35e12),  # no space
    ("900 GB/s", "bandwidth", 900e9),
    ("64 GiB/s", "bandwidth", 64 * 1024**3),  # 68_719_476_736 B/s
    ("100 Gb/s", "bandwidth", 12.5e9),  # bits: 100e9 / 8
    ("50 MiB", "bytes", 50 * 2**20),  # 52_428_800
    ("80 GiB", "bytes", 85_899_345_920),  # 80 * 1024**3
    ("80 GB", "bytes", 80e9),
    ("228 KiB", "bytes", 233_472),  # 228 * 1024
    ("40 kB", "bytes", 40_000),
    ("1.98 GHz", "frequency", 1.98e9),
    ("1830 MHz", "frequency", 1.83e9),
    ("700 W", "power", 700.0),
    ("1 kW", "power", 1000.0),
    ("5 us", "time", 5e-6),
    ("5 µs", "time", 5e-6),
    ("1.2 ms", "time", 1.2e-3),
    ("40 ns", "time", 4e-8),
    ("85 %", "ratio", 0.85),
    ("85%", "ratio", 0.85),
    # plain numbers are SI already, whatever their type
    (3.35e12, "bandwidth", 3.35e12),
    (132, "flops", 132.0),
    ("1e15", "flops", 1e15),  # YAML 1.1 reads 1e15 as a string
    ("0.85", "ratio", 0.85),
    (0.85, "ratio", 0.85),
    ("  7 W ", "power", 7.0),
]


@pytest.mark.parametrize(("text", "kind", "expected"), PARSES)
def test_parse_table(text: object, kind: Kind, expected: float) -> None:
    assert parse_quantity(text, kind) == expected


def test_binary_and_decimal_prefixes_differ() -> None:
    # 1 GiB / 1 GB = 2**30 / 10**9 = 1.073741824
    assert parse_quantity("1 GiB", "bytes") / parse_quantity("1 GB", "bytes") == 1.073741824


# (value, kind, substrings the message must contain)
ERRORS: list[tuple[object, Kind, tuple[str, ...]]] = [
    ("3.35 TB", "bandwidth", ("memory.bandwidth", "bytes quantity", "'3.35 TB/s'", "GiB/s")),
    ("989 TFLOPS/s", "flops", ("memory.bandwidth", "twice", "TFLOP/s")),
    ("50 KB", "bytes", ("ambiguous", "kB", "KiB")),
    ("50 KB/s", "bandwidth", ("ambiguous",)),
    (float("nan"), "flops", ("not a finite",)),
    (float("inf"), "bandwidth", ("not a finite",)),
    ("nan", "flops", ("cannot read",)),
    ("1e999 TB/s", "bandwidth", ("too large",)),
    (True, "bytes", ("boolean",)),
    (False, "ratio", ("boolean",)),
    ("fast", "bandwidth", ("cannot read", "'3.35 TB/s'")),
    ("3 furlongs", "bytes", ("unknown unit 'furlongs'",)),
    ("1.98 GHz", "bandwidth", ("frequency quantity",)),
    ("3 TB/s", "bytes", ("bandwidth quantity",)),
    ([1, 2], "bytes", ("expected a number or a string", "list")),
    (None, "time", ("NoneType",)),
]


@pytest.mark.parametrize(("value", "kind", "needles"), ERRORS)
def test_parse_errors(value: object, kind: Kind, needles: tuple[str, ...]) -> None:
    with pytest.raises(UnitError) as info:
        parse_quantity(value, kind, field="memory.bandwidth")
    message = str(info.value)
    assert message.startswith("memory.bandwidth: ")
    assert "(fix: " in message
    for needle in needles:
        assert needle in message
    assert info.value.field == "memory.bandwidth"


def test_unit_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        parse_quantity("1 KB", "bytes")


# ------------------------------------------------------------------------------ properties
DECIMAL_EXPONENTS = {"": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# kind -> base spellings -> (is a bit unit, prefixes that apply)
SPELLINGS: dict[Kind, dict[str, bool]] = {
    "flops": {"FLOP/s": False, "FLOPS": False, "OP/s": False, "OPS": False},
    "bandwidth": {"B/s": False, "Bps": False, "b/s": True, "bps": True},
    "bytes": {"B": False, "bytes": False},
}
values = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(deadline=None, max_examples=300)
@given(
    value=values,
    kind=st.sampled_from(sorted(SPELLINGS)),
    prefix=st.sampled_from(sorted(DECIMAL_EXPONENTS)),
    data=st.data(),
    space=st.sampled_from(["", " "]),
)
def test_decimal_prefix_round_trip(
    value: float, kind: Kind, prefix: str, data: st.DataObject, space: str
) -> None:
    base = data.draw(st.sampled_from(sorted(SPELLINGS[kind])))
    text = f"{value!r}{space}{prefix}{base}"
    # "3.35 TB/s" must equal the literal 3.35e12: the correctly rounded decimal, exactly.
    expected = float(f"{value!r}e{DECIMAL_EXPONENTS[prefix]}")
    if SPELLINGS[kind][base]:
        expected /= 8  # bits; dividing by a power of two is exact
    assert parse_quantity(text, kind) == expected


@settings(deadline=None, max_examples=300)
@given(
    value=values,
    kind=st.sampled_from(["bandwidth", "bytes"]),
    prefix=st.sampled_from(sorted(BINARY_EXPONENTS)),
)
def test_binary_prefix_round_trip(value: float, kind: Kind, prefix: str) -> None:
    base = "B/s" if kind == "bandwidth" else "B"
    # Multiplying by a power of two is exact, so equality is exact too.
    assert parse_quantity(f"{value!r} {prefix}{base}", kind) == value * 2.0 ** BINARY_EXPONENTS[
        prefix
    ]


@settings(deadline=None, max_examples=200)
@given(value=values, prefix=st.sampled_from(["m", "u", "µ", "n", ""]))
def test_time_prefix_round_trip(value: float, prefix: str) -> None:
    exponent = {"m": -3, "u": -6, "µ": -6, "n": -9, "": 0}[prefix]
    assert parse_quantity(f"{value!r} {prefix}s", "time") == float(f"{value!r}e{exponent}")


@settings(deadline=None, max_examples=400)
@given(
    value=st.floats(min_value=1e-9, max_value=1e21, allow_nan=False),
    kind=st.sampled_from(KINDS),
    digits=st.integers(min_value=3, max_value=8),
)
def test_format_then_parse_round_trips(value: float, kind: Kind, digits: int) -> None:
    text = format_quantity(value, kind, digits=digits)
    back = parse_quantity(text, kind)
    # `digits` significant digits: relative error at most half a unit in the last digit.
    assert math.isclose(back, value, rel_tol=0.5 * 10 ** (1 - digits) * (1 + 1e-9))


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        (3.35e12, "bandwidth", "3.35 TB/s"),
        (989.4e12, "flops", "989.4 TFLOP/s"),
        (80 * 2**30, "bytes", "80 GiB"),
        (50 * 2**20, "bytes", "50 MiB"),
        (1.83e9, "frequency", "1.83 GHz"),
        (5e-6, "time", "5 µs"),
        (0.885, "ratio", "88.5 %"),
        (700.0, "power", "700 W"),
    ],
)
def test_format_examples(value: float, kind: Kind, expected: str) -> None:
    assert format_quantity(value, kind) == expected


def test_format_forced_prefix() -> None:
    assert format_quantity(1978.9e12, "flops", digits=6, prefix="T") == "1978.9 TFLOP/s"
    assert format_quantity(1978.9e12, "flops") == "1.979 PFLOP/s"
    with pytest.raises(ValueError, match="prefix 'Gi'"):
        format_quantity(1.0, "flops", prefix="Gi")
