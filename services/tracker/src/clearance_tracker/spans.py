"""Spans of a teardown that outlive the process which started them.

A teardown can last hours and move between replicas, but its spans must form one tree in
the cycle's trace (DESIGN §6):

    requeue.cycle (dispatcher)
    ├── deletion.await            teardownStartedAt → cleared
    │   └── deletion.confirmed    one per object, first seen → confirmed
    ├── deletion.escalate         one per escalation step
    └── cleared                   links → every deletion.confirmed

The trick that makes this restart-proof: the ids are chosen up front and stored in the KV
record. `deletion.await` gets a span id when the teardown is recorded; children name it as
their parent long before it exists, and the replica that publishes `cleared` finally emits
`deletion.await` itself *with that id* and its real start time. Confirmation span ids are
stored per object, so `cleared` can link to them from any replica. :class:`PresetIds` is the
id generator that lets a span be created with a chosen id.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from collections.abc import Iterator
from datetime import datetime

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

_PRESET: contextvars.ContextVar[int | None] = contextvars.ContextVar("preset_span_id", default=None)


class PresetIds(IdGenerator):
    """Random ids, except for a span created inside :func:`preset_span_id`."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        preset = _PRESET.get()
        if preset is not None:
            _PRESET.set(None)  # only the first span created inside the block
            return preset
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return True


def install(provider: TracerProvider) -> None:
    """Use :class:`PresetIds` for every tracer obtained from `provider` afterwards."""
    provider.id_generator = PresetIds()  # type: ignore[assignment]


@contextlib.contextmanager
def preset_span_id(span_id: str) -> Iterator[None]:
    token = _PRESET.set(int(span_id, 16))
    try:
        yield
    finally:
        _PRESET.reset(token)


def new_span_id() -> str:
    value = 0
    while value == 0:
        value = secrets.randbits(64)
    return f"{value:016x}"


def new_trace_id() -> str:
    value = 0
    while value == 0:
        value = secrets.randbits(128)
    return f"{value:032x}"


def trace_id_of(traceparent: str | None) -> str | None:
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    return parts[1]


def context_of(trace_id: str, span_id: str) -> Context:
    """A context whose parent is the (remote) span `span_id` of trace `trace_id`."""
    span_context = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def span_context_of(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID),
    )


def nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)
