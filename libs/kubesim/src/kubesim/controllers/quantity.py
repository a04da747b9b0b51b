"""Kubernetes resource quantities (`500m`, `1.5Gi`, `2k`, `1e3`) as exact numbers.

The scheduler compares pod requests with node allocatable; doing that on floats would make
`100m * 10 == 1` false, so quantities are parsed to `fractions.Fraction` like the real
`resource.Quantity` keeps an exact decimal.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["QuantityError", "format_quantity", "parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity into an exact number of base units (cores, bytes, devices).

    Grammar from apimachinery `resource.ParseQuantity`: a signed decimal number followed by a
    binary SI suffix (Ki…Ei), a decimal SI suffix (n, u, m, k, M, G, T, P, E) or a decimal
    exponent (`1e3`, `12E-1`).
    """
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(
            "quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}"
        )
    number = Fraction(match.group("number"))
    if match.group("sign") == "-":
        number = -number
    if match.group("binary"):
        return number * _BINARY[match.group("binary")]
    if match.group("exp"):
        return number * Fraction(10) ** int(match.group("exp")[1:])
    return number * _DECIMAL[match.group("decimal") or ""]


def format_quantity(amount: Fraction, *, binary: bool = False) -> str:
    """Format a quantity canonically enough for messages and node capacity (`500m`, `4`, `8Gi`)."""
    if binary and amount.denominator == 1 and amount != 0:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            scale = _BINARY[suffix]
            if amount % scale == 0:
                return f"{amount // scale}{suffix}"
    if amount.denominator == 1:
        return str(amount.numerator)
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = amount * 10**9
    return f"{round(nano)}n"
