"""Deferred evaluations: work that waits for NATS, the API server or this replica's term.

An evaluation (verify, publish `cleared`, a ladder step) needs the KV bucket, the API server
and a term held by this replica. While one of them is away (a stream electing a leader, NATS
restarting, the API server unreachable or throttling, the term lapsed until the next heartbeat
starts a new one), the evaluation fails and the next scan does it again. That is the design
at work, not a fault: it is said in one WARNING line per reason, at most once every
``interval`` seconds with the count deferred since, never with a traceback, and counted in
``clearance_tracker_evaluations_deferred_total{reason}``. Any other failure is still an ERROR
with its traceback. :func:`reason_of` is the pure rule; :class:`DeferralLog` the throttled line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import nats.errors
import nats.js.errors
from prometheus_client import Counter

from clearance.bus import PublishError, StreamUnavailableError
from clearance.fencing import Fenced
from clearance.kube import KubeError

Reason = Literal["term", "nats", "api", "timeout"]

REASONS: Final[tuple[Reason, ...]] = ("term", "nats", "api", "timeout")

_WHAT: Final[dict[Reason, str]] = {
    "term": "this replica's term is not held (its next heartbeat starts a new one)",
    "nats": "NATS or the record bucket is unavailable",
    "api": "the API server is unreachable, throttling or failing",
    "timeout": "a read or write timed out",
}

_NATS_UNAVAILABLE: Final = (
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.NoServersError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    StreamUnavailableError,
    PublishError,
)


def reason_of(exc: BaseException) -> Reason | None:
    """Why an evaluation failed, if the failure is expected unavailability; None otherwise."""
    if isinstance(exc, Fenced):
        return "term"
    if isinstance(exc, _NATS_UNAVAILABLE):
        return "nats"
    if isinstance(exc, KubeError):
        return "api" if exc.code == 0 or exc.code == 429 or exc.code >= 500 else None
    if isinstance(exc, TimeoutError):  # nats-py's TimeoutError is one too
        return "nats" if isinstance(exc, nats.errors.TimeoutError) else "timeout"
    return None


@dataclass
class _Said:
    at: float
    since: int = 0
    """Deferrals for the same reason not said since ``at``."""


class DeferralLog:
    """One WARNING line per reason per ``interval``; a count for every deferral."""

    def __init__(
        self,
        logger: logging.Logger,
        counter: Counter,
        *,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.counter = counter
        self.interval = interval
        self.clock = clock
        self._said: dict[Reason, _Said] = {}

    def failed(self, exc: BaseException, *, what: str, key: str) -> bool:
        """Log ``what`` failing for record ``key``; True if it was a deferral (no traceback)."""
        reason = reason_of(exc)
        if reason is None:
            self.logger.error(
                f"{what} failed; retried at the next scan", exc_info=exc, extra={"record": key}
            )
            return False
        self.counter.labels(reason).inc()
        now = self.clock()
        said = self._said.get(reason)
        if said is not None and now - said.at < self.interval:
            said.since += 1
            return True
        self.logger.warning(
            f"{what} deferred: {_WHAT[reason]}; retried at the next scan",
            extra={
                "reason": reason,
                "record": key,
                "error": f"{type(exc).__name__}: {exc}",
                "deferred_since_last_line": said.since if said is not None else 0,
            },
        )
        self._said[reason] = _Said(at=now)
        return True
