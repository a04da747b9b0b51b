"""The bus's errors, and the ``Retry`` signal a handler raises to ask for redelivery."""

from __future__ import annotations

from clearance.fencing import Fenced


class BusError(RuntimeError):
    """A NATS/JetStream operation failed in a way the caller must handle."""


class PublishError(BusError):
    """Publishing failed after every retry; ``__cause__`` is the last error."""

    def __init__(self, subject: str, msg_id: str, attempts: int, last: BaseException) -> None:
        self.subject = subject
        self.msg_id = msg_id
        self.attempts = attempts
        super().__init__(
            f"publish to {subject!r} (msg id {msg_id!r}) failed after {attempts} attempts: "
            f"{type(last).__name__}: {last}"
        )


class FencedPublish(BusError, Fenced):
    """A publish refused because the publisher's term has ended (:mod:`clearance.fencing`)."""


class StreamUnavailableError(BusError):
    """The server could not say whether a stream exists (no leader, no meta leader, timeout).

    Distinct from "no such stream" on purpose: a stream that exists but is electing a leader
    must be waited for, never re-created (re-creating it could only race the election or,
    with other settings, change its configuration).
    """


class ConsumerDriftError(BusError):
    """A durable consumer exists with a configuration the server refuses to update."""


class Retry(Exception):
    """Raised by a handler to ask for redelivery after ``delay`` seconds (``nak(delay)``)."""

    def __init__(self, delay: float, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(f"retry in {delay}s" + (f": {reason}" if reason else ""))
