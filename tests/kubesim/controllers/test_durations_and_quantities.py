"""Kubernetes-style durations and resource quantities."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kubesim.controllers.quantity import QuantityError, format_quantity, parse_quantity
from kubesim.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("-2s", -2.0),
        ("100us", 1e-4),
        ("1h2m3s4ms", 3723.004),
    ],
)
def test_durations_parse_like_go(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "2x", "s", "1h 30m", "--1s"])
def test_invalid_durations_are_rejected(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (2, "2s"), (300, "5m0s"), (5400, "1h30m0s"), (1.5, "1.5s")],
)
def test_durations_format_like_go(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


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
def test_quantities_parse_exactly(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_milli_cpu_adds_up_exactly() -> None:
    assert sum((parse_quantity("100m") for _ in range(10)), Fraction(0)) == parse_quantity("1")


@pytest.mark.parametrize("text", ["", "abc", "1Qi", "1.2.3", "Gi", "1 Gi"])
def test_invalid_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_quantities_format_canonically() -> None:
    assert format_quantity(Fraction(1, 2)) == "500m"
    assert format_quantity(Fraction(4)) == "4"
    assert format_quantity(Fraction(8 * 2**30), binary=True) == "8Gi"
