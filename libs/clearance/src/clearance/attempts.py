"""What an attempt number means, in one place for every service and tool.

An AppWrapper's attempts are numbered from 1: attempt 1 is its first dispatch; when attempt N is
requeued, its objects are torn down (``teardown.started`` … ``cleared`` all carry N) and the next
dispatch creates attempt N + 1. Every event, label (``clearance.dev/attempt``) and bookkeeping
field names the attempt it is about, never a neighbour of it, so the only arithmetic on attempt
numbers anywhere is :func:`next_attempt` (and the dispatcher's ``ClearanceStatus``, which derives
the attempt to dispatch from its phase with it).
"""

from __future__ import annotations

from typing import Final

FIRST: Final = 1
"""The number of an AppWrapper's first dispatch."""


def next_attempt(attempt: int) -> int:
    """The attempt dispatched once ``attempt`` is cleared (or the first one, from 0 = none)."""
    return attempt + 1
