"""Every duration and count has a documented range, checked in one place (issue 13)."""

from __future__ import annotations

import dataclasses
from dataclasses import field

import pytest

from clearance import bounds
from clearance.settings import Seconds, Settings, SettingsError, doc


def test_a_duration_inside_the_range_passes() -> None:
    assert bounds.durations().problem(30 * 86400) is None


def test_int64_max_seconds_is_refused_naming_the_range() -> None:
    assert str(bounds.durations().problem(2**63 - 1)).endswith("is outside 0s..30d")


def test_nan_and_infinity_are_refused() -> None:
    assert "finite" in str(bounds.counts().problem(float("nan")))
    assert "finite" in str(bounds.durations().problem(float("inf")))


def test_counts_render_as_plain_numbers() -> None:
    assert str(bounds.counts(1, 100)) == "1..100"
    assert bounds.counts(1, 100).problem(0) == "0 is outside 1..100"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Example(Settings):
    wait: Seconds = field(
        default=5.0, metadata=doc("How long to wait.", bounds=bounds.durations(0.001, 3600))
    )


def test_a_setting_out_of_its_range_is_refused_with_the_range() -> None:
    with pytest.raises(SettingsError, match=r"CLEARANCE_WAIT='2h': 2h is outside 1ms\.\.1h"):
        Example.from_env({"CLEARANCE_WAIT": "2h"})


def test_help_shows_the_range() -> None:
    assert "[duration, default: 5s, range: 1ms..1h]" in Example.render_help()
