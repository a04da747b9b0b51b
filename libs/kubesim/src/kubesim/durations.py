"""Kubernetes-style durations (`500ms`, `2s`, `5m`, `1h30m`), as Go's `time.ParseDuration` does.

Every kubesim timing flag takes one, exactly like the real `--node-monitor-grace-period=40s` style
flags of kube-controller-manager, so a flag value can be copied from a real component's manifest.
"""

from __future__ import annotations

import math
import re

__all__ = ["DurationError", "format_duration", "parse_duration"]

# Go accepts "us" and "µs"/"μs" for microseconds; keep the same spellings.
_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """A string that is not a valid Kubernetes/Go duration."""


def parse_duration(text: str) -> float:
    """Return the duration in seconds.

    Accepts Go syntax: an optional sign, then one or more `<number><unit>` parts (`1h30m`,
    `1.5s`, `300ms`). A bare `0` is allowed, as in Go. A bare number with no unit is rejected
    (Go rejects it too), which catches `--pod-run-time 5` meaning "5 what?".
    """
    raw = text.strip()
    if not raw:
        raise DurationError("empty duration")
    sign = 1.0
    body = raw
    if body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    pos = 0
    total = 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            raise DurationError(
                f"invalid duration {text!r}: expected <number><unit> with unit one of "
                "ns, us, ms, s, m, h (for example 500ms, 2s, 5m, 1h30m)"
            )
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body:
        raise DurationError(f"invalid duration {text!r}")
    return sign * total


def format_duration(seconds: float) -> str:
    """Format seconds the way Go's `Duration.String` does (`1h30m0s`, `500ms`, `2s`, `0s`)."""
    if seconds == 0:
        return "0s"
    if math.isinf(seconds) or math.isnan(seconds):
        raise DurationError(f"cannot format {seconds!r} as a duration")
    sign = "-" if seconds < 0 else ""
    value = abs(seconds)
    if value < 1:
        # Sub-second values use the largest unit that keeps an integer-ish mantissa.
        for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
            if value >= scale:
                return f"{sign}{_trim(value / scale)}{unit}"
        return f"{sign}{_trim(value / 1e-9)}ns"
    hours, rest = divmod(value, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    out = ""
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    out += f"{_trim(secs)}s"
    return sign + out


def _trim(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"
