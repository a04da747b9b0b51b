"""Kubernetes-style durations (quantities: tests/kubesim/api/test_quantity.py)."""

from __future__ import annotations

import pytest

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
