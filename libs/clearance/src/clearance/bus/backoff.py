"""Bounded exponential backoff with jitter, shared by publishing and consuming."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

PUBLISH_RETRY_DEADLINE: Final = 30.0
"""Default bound of one publish's retries, in seconds (``CLEARANCE_PUBLISH_RETRY_DEADLINE``).

Long enough for a JetStream cluster to elect a new stream leader after losing one (a few
seconds: Raft election timeouts, the client's reconnect) with room for a loaded machine."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter: at most ``attempts``, within ``deadline`` s."""

    attempts: int = 6
    initial: float = 0.1
    maximum: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.1
    deadline: float | None = None
    """Seconds from the first attempt after which no further attempt starts (None: no bound)."""

    def another(self, failures: int, *, elapsed: float, pause: float) -> bool:
        """Whether to try again after ``failures`` failed tries and a pause of ``pause``."""
        if failures >= self.attempts:
            return False
        return self.deadline is None or elapsed + pause <= self.deadline

    def delay(self, failures: int) -> float:
        """Pause after ``failures`` failed tries (1 or more): ``initial``, then growing."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, failures - 1))
        return base * (1 + random.uniform(-self.jitter, self.jitter))


DEFAULT_PUBLISH_RETRY: Final = RetryPolicy(attempts=1_000, deadline=PUBLISH_RETRY_DEADLINE)
"""Publishes retry with the same Msg-Id until acknowledged or the deadline passes."""
DEFAULT_HANDLER_BACKOFF: Final = RetryPolicy(initial=1.0, maximum=60.0)
"""nak delay after an unexpected handler exception, growing with the delivery count."""
