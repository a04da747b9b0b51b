"""Resource quantities: parsing and the API server's canonical form, without a server.

Oracle: apimachinery pkg/api/resource (quantity.go ParseQuantity/CanonicalizeBytes, suffix.go,
amount.go) and the expectations in its own quantity_test.go (TestQuantityParse,
TestQuantityString, TestQuantityParseEmit, TestJSONWhitespace), traced by reading the source
(reference cluster-faults-and-workloads.md §2: "derived, not executed"). Where a row comes
from somewhere else it says so.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kubesim.quantity import (
    ERR_FORMAT,
    ERR_SUFFIX,
    QuantityError,
    canonical,
    parse,
    parse_json,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # reference §2 (traced through ParseQuantity/CanonicalizeBytes)
        ("0", "0"),
        ("1", "1"),
        ("1000m", "1"),
        ("1500m", "1500m"),
        ("100m", "100m"),
        ("0.1", "100m"),
        ("0.5", "500m"),
        ("1000", "1k"),
        ("2Gi", "2Gi"),
        ("1024Mi", "1Gi"),
        ("1e3", "1e3"),
        # quantity.go doc comment
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        # TestQuantityParseEmit
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        # TestQuantityString alternates (non-canonical input → canonical output)
        ("307200Ki", "300Mi"),
        ("1025024Mi", "1001Gi"),
        ("1024Gi", "1Ti"),
        ("5000m", "5"),
        ("0.001T", "1G"),
        ("1000u", "1m"),
        ("1.08", "1080m"),
        ("1080000000n", "1080m"),
        (".001e12", "1e9"),
        ("0.001e0", "1e-3"),
        ("1000e-12", "1e-9"),
        ("00", "0"),
        ("1000E", "1e21"),
        # every zero prints "0" (reference §2)
        ("0m", "0"),
        ("0Gi", "0"),
        ("-0", "0"),
    ],
)
def test_non_canonical_strings_serialize_canonically(text: str, expected: str) -> None:
    assert canonical(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.001n", "4n"),  # below nano: rounded away from zero
        ("0.9n", "1n"),
        ("0.00000012345", "124n"),
        ("1.1E-9", "2e-9"),
        ("1.2345", "1234500u"),  # quantity.go doc comment: precision kept down to nano
        ("9Ei", "9223372036854775807"),  # binary SI capped at 2^63-1, which is odd → decimal
        ("18446744073709551616", "18446744073709551616"),  # decimal values are not capped
        ("-1024Mi", "-1Gi"),
        ("1023Ki", "1023Ki"),
        ("1.5Ki", "1536"),  # exact integer, not a multiple of 1024
        ("0.5Ki", "512"),  # below 1024: decimal SI
        ("0.0005Ki", "512m"),
    ],
)
def test_rounding_capping_and_format_changes(text: str, expected: str) -> None:
    assert canonical(text) == expected


@pytest.mark.parametrize("text", ["1Gi", "100m", "1e3", "+1", "01", "1.500", "1.", "1.G", "12E"])
def test_fast_path_keeps_strings_that_look_canonical_verbatim(text: str) -> None:
    """ParseQuantity stores `s: str` when scale%3 == 0, no `000` suffix and no leading 0 digit
    (binary: low bits set); MarshalJSON then writes it as given. `+1`, `1.500` are quirks."""
    assert canonical(text) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ERR_FORMAT),
        ("abc", ERR_FORMAT),
        ("1.1.M", ERR_FORMAT),
        ("1+1.0M", ERR_FORMAT),
        ("0.1am", ERR_FORMAT),
        (" 1", ERR_FORMAT),  # ParseQuantity itself does not trim (UnmarshalJSON does)
        ("1 ", ERR_FORMAT),
        ("1 Gi", ERR_FORMAT),
        ("0.1mi", ERR_SUFFIX),
        (".5i", ERR_SUFFIX),
        ("1i", ERR_SUFFIX),
        ("-3.01e-", ERR_SUFFIX),
        ("32MMi", ERR_SUFFIX),  # "unable to parse quantity's suffix" (BadRequest seen in the wild)
        ("1gi", ERR_FORMAT),  # lower-case g is not a suffix character at all
    ],
)
def test_malformed_strings_fail_with_apimachinery_messages(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse(text)
    assert str(caught.value) == message


@pytest.mark.parametrize("text", ["Gi", "m", ".", "+", "-."])
def test_a_suffix_or_sign_without_digits_is_zero(text: str) -> None:
    """parseQuantityString reads an empty numerator as "0" (TestParseQuantityString: ".")."""
    assert canonical(text) == "0"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),  # the MCAD example's `nvidia.com/gpu: 0` (issue 19)
        (1, "1"),
        (1000, "1k"),
        (-1, "-1"),
        (0.1, "100m"),
        (1.0, "1"),
        (1e-05, "10e-6"),
        (" 1", "1"),  # TestJSONWhitespace: UnmarshalJSON trims
        ("1 ", "1"),
        (None, "0"),  # null decodes to a zero Quantity
    ],
)
def test_json_values_decode_like_unmarshal_json(value: Any, expected: str) -> None:
    assert canonical(value) == expected


@pytest.mark.parametrize("value", [True, [], {}, float("inf"), float("nan")])
def test_json_values_that_are_not_quantities_are_rejected(value: Any) -> None:
    with pytest.raises(QuantityError):
        parse_json(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1n", "1m"),  # SetDefaults_ResourceList: RoundUp(milli) on every ResourceList value
        ("1.2345", "1235m"),
        ("-1.2345", "-1235m"),
        ("100m", "100m"),
        ("+1", "+1"),  # already coarse enough: RoundUp keeps the verbatim string
        ("1Gi", "1Gi"),
    ],
)
def test_round_up_to_milli(text: str, expected: str) -> None:
    assert parse(text).round_up(-3).canonical() == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1.5", Fraction(3, 2)),
        ("1Ki", Fraction(1024)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("128Mi", Fraction(128 * 2**20)),
        ("1k", Fraction(1000)),
        ("2M", Fraction(2_000_000)),
        ("1G", Fraction(10**9)),
        ("1e3", Fraction(1000)),
        ("12E-1", Fraction(6, 5)),
        ("100n", Fraction(1, 10**7)),
        (".5", Fraction(1, 2)),
        (3, Fraction(3)),
    ],
)
def test_amounts_are_exact(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_milli_cpu_adds_up_exactly() -> None:
    assert sum((parse_quantity("100m") for _ in range(10)), Fraction(0)) == parse_quantity("1")


@pytest.mark.parametrize(
    "text", ["7.123456M", "1.53E12", "0.00050k", "100.035Ki", "9223372036854775807Ki", "1e300"]
)
def test_canonical_form_is_stable_and_keeps_the_value(text: str) -> None:
    once = canonical(text)
    assert canonical(once) == once
    assert parse(once).amount == parse(text).amount


def test_a_huge_exponent_parses_without_expanding() -> None:
    assert canonical("1e2000000001") == "1e2000000001"  # scale a multiple of 3: verbatim
    assert canonical("1e2000000000") == "100e1999999998"
    assert canonical("1e-2000000000") == "1e-9"
