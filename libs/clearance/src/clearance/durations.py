"""Durations as people write them: ``500ms``, ``2s``, ``5m``, ``1h``, ``1d``, ``1m30s``.

One parser and one formatter for settings, ``--help`` and messages, so a duration reads the
same wherever Clearance shows it.
"""

from __future__ import annotations

import math
import re
from typing import Final

_UNITS: Final[dict[str, float]] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Parse ``500ms``/``2s``/``5m``/``1h``/``1d``/``1m30s`` or a bare number into seconds."""
    raw = text.strip().lower()
    if not raw:
        raise ValueError("empty duration")
    try:
        value = float(raw)
    except ValueError:
        pos = 0
        value = 0.0
        for match in _DURATION_PART.finditer(raw):
            if match.start() != pos:
                break
            value += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw) or pos == 0:
            raise ValueError(
                f"expected a duration like 500ms, 2s, 5m, 1h or 1d, got {text!r}"
            ) from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a non-negative duration, got {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """Render seconds the way :func:`parse_duration` reads them (``90`` → ``1m30s``)."""
    if seconds == 0:
        return "0s"
    if seconds < 1 or not float(seconds).is_integer():
        if (seconds * 1000).is_integer() and seconds < 1:
            return f"{int(seconds * 1000)}ms"
        return f"{seconds:g}s"
    rest = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)
