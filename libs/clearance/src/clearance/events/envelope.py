"""The base every event derives from: the `type` tag, the stream and subject an event
is published on, and, for the events about one AppWrapper (cycle events and alerts),
the AppWrapper reference, the attempt, the time of the fact, the cycle root's
traceparent and the deterministic message id built from them.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from msgspec import Meta, Struct

from clearance.events.fields import (
    Attempt,
    Traceparent,
    UtcDateTime,
)
from clearance.events.snapshots import AppWrapperRef


class _Event(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: the `type` tag, and the helpers every event has."""

    # Set per family: the stream the event is published to.
    stream: ClassVar[str]

    @property
    def event_type(self) -> str:
        """The `type` tag, e.g. `cycle.teardown.started`."""
        tag = type(self).__struct_config__.tag
        assert isinstance(tag, str)
        return tag

    def subject(self) -> str:
        """The NATS subject this event is published on."""
        raise NotImplementedError

    def msg_id(self) -> str:
        """Deterministic `Nats-Msg-Id` (see the module docstring)."""
        raise NotImplementedError


class _AboutAppWrapper(_Event, frozen=True, kw_only=True):
    appwrapper: AppWrapperRef
    attempt: Attempt
    occurred_at: Annotated[UtcDateTime, Meta(description="When the fact happened.")]
    cycle_traceparent: Traceparent | None = None

    def _short_type(self) -> str:
        # "cycle.teardown.started" → "teardown.started": the subject's event tokens.
        return self.event_type.split(".", 1)[1]

    def _id_suffix(self) -> str | None:
        return None

    def msg_id(self) -> str:
        base = f"{self.appwrapper.uid}:{self.attempt}:{self.event_type}"
        suffix = self._id_suffix()
        return base if suffix is None else f"{base}:{suffix}"
