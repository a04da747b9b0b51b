"""Bounded exponential backoff with jitter, shared by publishing and consuming."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter."""

    attempts: int = 6
    initial: float = 0.1
    maximum: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def delay(self, attempt: int) -> float:
        """Pause after failed attempt number ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))
        return base * (1 + random.uniform(-self.jitter, self.jitter))


DEFAULT_PUBLISH_RETRY: Final = RetryPolicy()
DEFAULT_HANDLER_BACKOFF: Final = RetryPolicy(initial=1.0, maximum=60.0)
"""nak delay after an unexpected handler exception, growing with the delivery count."""
