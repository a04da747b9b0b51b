"""The ranges every duration and count must lie in, for settings and AppWrapper specs alike.

Input that passes the API server's schema can still be absurd: ``timeInSeconds`` at int64 max
made ``timedelta`` overflow and stalled an AppWrapper forever (issue 13). Clearance therefore
gives every duration and count a documented range and checks it in one place: here. Values
outside are refused with a message naming the field and the range — a setting at start-up, a
spec field as a Failed condition on the AppWrapper — never clamped silently, never left to
raise deep inside arithmetic.

Durations are bounded by :data:`MAX_DURATION` (30 days): longer than any teardown deadline or
requeue wait a user could mean, and far inside what ``datetime`` arithmetic can represent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from clearance.durations import format_duration

MAX_DURATION: Final = 30 * 86400.0
"""Seconds: the longest duration Clearance accepts anywhere (30 days)."""

_SHOWN_AS_DURATION: Final = 10**15
"""Beyond this many seconds a value is shown as a plain number, not as days."""

MAX_COUNT: Final = 1_000_000
"""The largest count accepted where no tighter bound applies (requeue limits, replicas)."""


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive bounds ``low..high`` of a number, with how to show them."""

    low: float
    high: float
    duration: bool = False
    """Render the bounds as durations (``30d``) rather than plain numbers."""

    def problem(self, value: float) -> str | None:
        """``None`` when ``value`` lies in the range, else a message saying the range.

        Never raises: an ``int`` beyond any float (JSON allows ``1e400`` written out) is
        compared exactly and shown as a number.
        """
        if isinstance(value, bool):
            return f"expected a number in {self}, got {value!r}"
        if isinstance(value, int):
            if self.low <= value <= self.high:
                return None
            if abs(value) > _SHOWN_AS_DURATION:
                return f"{value} is outside {self}"
            return f"{_show(value, self.duration)} is outside {self}"
        if not math.isfinite(value):
            return f"expected a finite number in {self}, got {value!r}"
        if self.low <= value <= self.high:
            return None
        return f"{_show(value, self.duration)} is outside {self}"

    def clamp(self, value: float) -> float:
        """``value`` moved into the range (for values Clearance computes, never user input)."""
        return max(self.low, min(value, self.high))

    def __str__(self) -> str:
        return f"{_show(self.low, self.duration)}..{_show(self.high, self.duration)}"


def _show(value: float, duration: bool) -> str:
    if duration:
        if value < 0:
            return f"-{format_duration(-value)}"
        return format_duration(value)
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def durations(low: float = 0.0, high: float = MAX_DURATION) -> Range:
    """A duration range in seconds (default 0s..30d)."""
    return Range(low, high, duration=True)


def counts(low: int = 0, high: int = MAX_COUNT) -> Range:
    """A count range (default 0..1000000)."""
    return Range(float(low), float(high))
