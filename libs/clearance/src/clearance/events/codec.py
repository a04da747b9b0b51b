"""The unions of every event family, the NATS headers events travel with, and the wire
codec: `encode` (which re-decodes to catch producer bugs) and `decode`, with the
errors that name the offending field.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from clearance.events.alerts import (
    AlertDeletionForced,
    AlertDeletionStuck,
    AlertDispatchFailed,
    AlertNodeLost,
    AlertRequeueLimit,
)
from clearance.events.cycle import (
    CycleCleared,
    CycleCompleted,
    CycleDeletionConfirmed,
    CycleDeletionForced,
    CycleDispatched,
    CycleFailed,
    CycleFinalizersRemoved,
    CycleRedispatched,
    CycleRequeued,
    CycleTeardownStarted,
)
from clearance.events.kube_events import (
    KubeAppWrapperEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
)

KubeEvent = KubeAppWrapperEvent | KubePodEvent | KubeNodeEvent | KubeItemEvent
CycleEvent = (
    CycleDispatched
    | CycleRequeued
    | CycleTeardownStarted
    | CycleDeletionConfirmed
    | CycleDeletionForced
    | CycleFinalizersRemoved
    | CycleCleared
    | CycleRedispatched
    | CycleFailed
    | CycleCompleted
)
AlertEvent = (
    AlertDeletionStuck
    | AlertNodeLost
    | AlertRequeueLimit
    | AlertDispatchFailed
    | AlertDeletionForced
)
Event = KubeEvent | CycleEvent | AlertEvent

# ------------------------------------------------------------------------- codec

HEADER_MSG_ID: Final = "Nats-Msg-Id"
"""Header carrying :meth:`msg_id`; JetStream dedups on it."""
HEADER_TRACEPARENT: Final = "traceparent"
HEADER_TRACESTATE: Final = "tracestate"

ENCODER: Final = msgspec.json.Encoder()
DECODER: Final = msgspec.json.Decoder(Event)

_PATH_RE: Final = re.compile(r"at `(\$[^`]*)`")


class EventEncodeError(ValueError):
    """An event built in code that would not decode on the other side (e.g. naive time)."""


class EventDecodeError(ValueError):
    """A payload that is not a valid event.

    `path` names the offending field as msgspec reports it (`$.stuck[0].reasons[1]`),
    `$` for a problem with the top-level object (e.g. a missing field), and `None` when
    the bytes are not JSON at all.
    """

    def __init__(self, message: str, *, path: str | None) -> None:
        super().__init__(message)
        self.path = path

    @classmethod
    def from_msgspec(cls, exc: msgspec.DecodeError) -> EventDecodeError:
        message = str(exc)
        match = _PATH_RE.search(message)
        if match:
            return cls(message, path=match.group(1))
        if isinstance(exc, msgspec.ValidationError):
            return cls(f"{message} - at `$`", path="$")
        return cls(message, path=None)


def encode(event: Event, *, validate: bool = True) -> bytes:
    """Encode an event as compact JSON, `type` first.

    Struct constructors do not check constraints, so by default the bytes are decoded
    once more before they leave: a producer bug (a naive datetime, `attempt=0`) fails
    here, loudly, instead of in every consumer's dead-letter queue. It costs about a
    microsecond per event.
    """
    data = ENCODER.encode(event)
    if validate:
        try:
            DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise EventEncodeError(f"{type(event).__name__} is not valid: {exc}") from exc
    return data


def decode(data: bytes | bytearray | memoryview | str) -> Event:
    """Decode and validate one event; raises :class:`EventDecodeError`."""
    try:
        return DECODER.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise EventDecodeError.from_msgspec(exc) from exc
