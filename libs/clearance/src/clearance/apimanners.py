"""API manners: a client-side rate limit, 429 ``Retry-After`` honoured, 5xx backed off with jitter.

A mass failure (a rack lost, hundreds of gangs requeued at once) makes every service burst at the
API server together. Each :class:`~clearance.kube.Kube` therefore behaves like a client-go
controller client:

* **rate limit** — a token bucket of ``qps`` tokens per second holding at most ``burst``
  (client-go's ``flowcontrol.NewTokenBucketRateLimiter``); every request takes a token first,
  waiting for one when the bucket is empty. ``qps`` 0 switches the limit off;
* **429 Too Many Requests** (max-in-flight / API Priority and Fairness) and any 5xx carrying
  ``Retry-After`` — the server did not process the request, so it is sent again after the
  ``Retry-After`` seconds (plus up to 10% jitter), at most ``max_retries`` times;
* **other 5xx** on reads (GET, LIST) — sent again after an exponential backoff with full
  jitter (0.1 s doubling, at most 5 s); a write that failed with a 5xx is handed back to the
  caller, which has its own retry (it may have been applied).

Pure timing rules live here; :meth:`clearance.kube.Kube._open` applies them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Final

DEFAULT_QPS: Final = 50.0
"""Requests per second per process (Kueue's manager default; client-go's own is 5)."""
DEFAULT_BURST: Final = 100
"""Requests a process may send at once after being idle (Kueue's manager default)."""
DEFAULT_MAX_RETRIES: Final = 10
"""Retries of one request after 429 / 5xx (client-go's ``maxRetries`` default)."""
MAX_RETRY_AFTER: Final = 60.0
"""Longest ``Retry-After`` obeyed (a larger value is cut to this)."""
BACKOFF_BASE: Final = 0.1
BACKOFF_CAP: Final = 5.0


URGENT: ContextVar[bool] = ContextVar("clearance_api_urgent", default=False)
"""Set (in its own task) by a caller a user is waiting on right now — the dispatcher's first
looks at a new AppWrapper: a refusal naming the field, or Queued. Its requests do not queue
behind a burst of dispatch creates and teardown deletes: they go at once while the bucket owes
less than one more ``burst`` of tokens, and the others pay that debt, so the long-run rate stays
``qps`` and the extra burst is bounded (issue 13: first looks waited ~5 s behind a 40-item
teardown at the default 50 requests/s)."""


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` stored; :meth:`take` waits for one."""

    def __init__(
        self, *, qps: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.clock = clock
        self._tokens = float(self.burst)
        self._at = clock()
        self._lock = asyncio.Lock()
        self.waited = 0.0
        """Seconds spent waiting for tokens, in total."""

    def delay(self) -> float:
        """Take a token now and return how long to wait before using it (0: at once)."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def take(self, *, urgent: bool = False) -> None:
        """Wait for a token; ``urgent`` (or :data:`URGENT` set) passes the queue (see there)."""
        if self.qps <= 0:
            return
        if urgent or URGENT.get():
            overdraft = self.delay() - self.burst / self.qps
            if overdraft > 0:
                self.waited += overdraft
                await asyncio.sleep(overdraft)
            return
        async with self._lock:  # FIFO: one waiter computes its delay at a time
            wait = self.delay()
            if wait > 0:
                self.waited += wait
                await asyncio.sleep(wait)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds of a ``Retry-After: <seconds>`` header (None: absent or not a number)."""
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def pause_before_retry(
    *,
    status: int,
    method: str,
    headers: Mapping[str, str],
    retry: int,
    rand: Callable[[], float] = random.random,
) -> float | None:
    """How long to wait before sending a failed request again (None: do not retry).

    ``retry`` counts from 1 (the first retry)."""
    after = retry_after(headers) if status == 429 or status >= 500 else None
    if after is not None:
        return after * (1.0 + 0.1 * rand())
    step = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (retry - 1))
    if status == 429:
        return float(step * (0.5 + 0.5 * rand()))
    if status >= 500 and method == "GET":
        return float(step * rand())
    return None


@dataclass
class Manners:
    """One client's rate limit and retry rule, with what it did (for tests and reports)."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    max_retries: int = DEFAULT_MAX_RETRIES
    bucket: TokenBucket = field(init=False)
    throttled: int = 0
    """Answers 429 received."""
    retried: int = 0
    """Requests sent again (after a 429 or a 5xx)."""

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(qps=self.qps, burst=self.burst)
