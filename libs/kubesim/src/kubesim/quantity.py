"""Kubernetes resource quantities (`500m`, `1.5Gi`, `2k`, `1e3`): exact parsing and the API
server's canonical string form.

A port of the rules of apimachinery `pkg/api/resource` (quantity.go `ParseQuantity`,
`CanonicalizeBytes`, `MarshalJSON`/`UnmarshalJSON`; suffix.go; amount.go), written from the
source, not executed against Go (reference cluster-faults-and-workloads.md §2):

* grammar `<sign><digits>[.<digits>]<suffix>`, suffix binary SI (Ki…Ei), decimal SI
  (n u m "" k M G T P E) or a decimal exponent (`e3`, `E-2`); the suffix family is remembered;
* values keep full precision down to nano; finer non-zero values round away from zero
  (`0.9n` → `1n`); binary SI values are capped at 2^63-1;
* canonical form: no fractional digits, the largest exponent that loses nothing (a multiple
  of 3 for decimal forms), zero is always `0`, binary values below 1024 print as decimal SI;
* the fast path of `ParseQuantity` keeps the input string **verbatim** when it looks
  canonical (decimal: scale a multiple of 3, digits not ending in `000`, no leading `0` digit;
  binary: low three bits of the number set) — so `+1` and `1.500` are stored as written, a
  quirk of the real server reproduced on purpose;
* JSON: strings are trimmed of surrounding whitespace, JSON numbers parse from their text,
  `null` is zero; the server always answers a quoted string.

The scheduler compares amounts exactly (`Fraction`), so `100m * 10 == 1` holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

__all__ = [
    "ERR_FORMAT",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "Quantity",
    "QuantityError",
    "canonical",
    "canonical_resource",
    "parse",
    "parse_json",
    "parse_quantity",
]

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

ERR_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXPONENT = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_BY_EXPONENT = {e: s for s, e in _BINARY_SUFFIXES.items()}
_MAX_INT64 = 2**63 - 1
_NANO = -9
# `amount` refuses to expand a decimal exponent beyond this (`1e2000000000` is a valid
# quantity string; materializing it as an integer would exhaust memory).
_MAX_EXPAND_EXPONENT = 4096


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity; the message is apimachinery's."""


@dataclass(frozen=True, slots=True)
class Quantity:
    """`mantissa * 10**exponent`, exactly, with the suffix family it was written in."""

    mantissa: int
    exponent: int
    format: Format
    # The input kept as written by ParseQuantity's fast path (serialized verbatim).
    verbatim: str | None = None

    @property
    def amount(self) -> Fraction:
        """The exact value in base units (cores, bytes, devices)."""
        if self.mantissa == 0:
            return Fraction(0)
        if self.exponent > _MAX_EXPAND_EXPONENT:
            raise QuantityError(f"quantity too large to compare: 1e{self.exponent}")
        return Fraction(self.mantissa) * Fraction(10) ** self.exponent

    def round_up(self, scale: int) -> Quantity:
        """`Quantity.RoundUp(scale)`: away from zero to a multiple of 10**scale.

        A value already that coarse is returned unchanged (verbatim string included), as the
        int64 fast path does; a rounded one loses its verbatim form.
        """
        if self.exponent >= scale or self.mantissa == 0:
            return self
        step = 10 ** (scale - self.exponent)
        magnitude = -(-abs(self.mantissa) // step)
        return Quantity(magnitude if self.mantissa > 0 else -magnitude, scale, self.format)

    def canonical(self) -> str:
        """The string the API server serializes (`Quantity.String()`)."""
        if self.verbatim is not None:
            return self.verbatim
        if self.mantissa == 0:
            return "0"
        fmt = self.format
        if fmt == "BinarySI":
            whole, exact = _as_integer(self.mantissa, self.exponent)
            # |value| < 1024 "avoids rounding and hopefully confusion"; a fraction would lose
            # precision in binary SI: both print as decimal SI.
            if exact and not -1024 < whole < 1024:
                return _binary_string(whole)
            fmt = "DecimalSI"
        return _decimal_string(self.mantissa, self.exponent, fmt)


def _as_integer(mantissa: int, exponent: int) -> tuple[int, bool]:
    """The value truncated toward zero, and whether that is exact."""
    if exponent >= 0:
        return mantissa * 10**exponent, True
    whole, rest = divmod(abs(mantissa), 10**-exponent)
    return (whole if mantissa > 0 else -whole), rest == 0


def _binary_string(value: int) -> str:
    sign = "-" if value < 0 else ""
    number = abs(value)
    power = 0
    while number % 1024 == 0 and power < 60:
        number //= 1024
        power += 10
    return f"{sign}{number}{_BINARY_BY_EXPONENT.get(power, '')}"


def _decimal_string(mantissa: int, exponent: int, fmt: Format) -> str:
    sign = "-" if mantissa < 0 else ""
    number = abs(mantissa)
    while number % 10 == 0:
        number //= 10
        exponent += 1
    while exponent % 3:
        number *= 10
        exponent -= 1
    if fmt == "DecimalSI" and exponent in _DECIMAL_BY_EXPONENT:
        suffix = _DECIMAL_BY_EXPONENT[exponent]
    else:
        # DecimalExponent, or DecimalSI beyond "E" (10^18): exponent notation keeps the value.
        suffix = "" if exponent == 0 else f"e{exponent}"
    return f"{sign}{number}{suffix}"


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """`parseQuantityString`: (positive, value, numerator, denominator, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if end and text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(ERR_FORMAT)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, Format]:
    """suffix.go `interpret`: (base, exponent, format)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in ("+", "-") else digits
        if body and all(c in _DIGITS for c in body):
            parsed = int(digits)
            if -(2**63) <= parsed <= _MAX_INT64:
                wrapped = (parsed + 2**31) % 2**32 - 2**31  # Go's int32(parsed)
                return 10, wrapped, "DecimalExponent"
    raise QuantityError(ERR_SUFFIX)


def parse(text: str) -> Quantity:
    """`resource.ParseQuantity` (no whitespace trimming: `" 1"` is an error here)."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    if text == "0":
        return Quantity(0, 0, "DecimalSI", "0")
    positive, value, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret(suffix)
    if fmt == "BinarySI":
        if exponent >= 0 and not denom:
            precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        else:
            precision = -1
        scale = 0
    else:
        precision = 18 - (len(num) + len(denom))
        scale = exponent
    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            digits = int(shifted)
            result = digits << exponent if fmt == "BinarySI" else digits
            if result <= _MAX_INT64:
                if fmt == "BinarySI":
                    keep = exponent % 10 == 0 and digits & 0x07 != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(result if positive else -result, scale, fmt, text if keep else None)
    return _parse_exact(value, base=base, exponent=exponent, fmt=fmt)


def _parse_exact(value: str, *, base: int, exponent: int, fmt: Format) -> Quantity:
    """The inf.Dec path: exact value, rounded up to nano, binary capped at 2^63-1."""
    body = value.lstrip("+-")
    negative = value.startswith("-")
    whole, _, frac = body.partition(".")
    digits = whole + frac
    if not digits or any(c not in _DIGITS for c in digits):
        raise QuantityError(ERR_NUMERIC)
    try:
        mantissa = int(digits)
    except ValueError as exc:  # beyond Python's int-from-string digit limit
        raise QuantityError(ERR_NUMERIC) from exc
    scale = -len(frac)
    if base == 10:
        scale += exponent
    else:
        mantissa <<= exponent
    if mantissa and scale < _NANO:
        shift = _NANO - scale
        # mantissa < 2**bits < 10**shift: below one nano, it rounds up to exactly 1n; otherwise
        # the ceiling of the (positive) quotient.
        mantissa = 1 if shift > mantissa.bit_length() else -(-mantissa // 10**shift)
        scale = _NANO
    if fmt == "BinarySI":
        too_big = (
            mantissa * 10**scale > _MAX_INT64
            if scale >= 0
            else mantissa > _MAX_INT64 * 10 ** (-scale)
        )
        if too_big:
            mantissa, scale = _MAX_INT64, 0
        if mantissa and (scale < 0 and mantissa < 10 ** (-scale)):
            fmt = "DecimalSI"  # 0 < value < 1
    return Quantity(-mantissa if negative else mantissa, scale, fmt)


def parse_json(value: Any) -> Quantity:
    """`Quantity.UnmarshalJSON` for a decoded JSON value (string, number or null)."""
    if value is None:
        return Quantity(0, 0, "DecimalSI")
    if isinstance(value, bool):
        raise QuantityError(ERR_FORMAT)
    if isinstance(value, int):
        return parse(str(value))
    if isinstance(value, float):
        # json.dumps writes floats with repr(); that is the text a Go server would have parsed.
        return parse(repr(value))
    if isinstance(value, str):
        return parse(value.strip())
    raise QuantityError(ERR_FORMAT)


def canonical(value: Any) -> str:
    """The canonical string of a JSON quantity value; raises QuantityError when invalid."""
    return parse_json(value).canonical()


def canonical_resource(value: Any) -> str:
    """The stored form of a ResourceList value (requests, limits, capacity…): rounded up to
    milli (core/v1 `SetDefaults_ResourceList`), then canonical."""
    return parse_json(value).round_up(-3).canonical()


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact amount of a quantity value in base units (cores, bytes, devices)."""
    return parse_json(value).amount
