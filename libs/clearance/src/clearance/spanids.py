"""Spans created with chosen ids, so a trace survives the process that started it.

A requeue cycle can outlive any one process: the dispatcher that opened the cycle root, or
the tracker replica that began ``deletion.await``, may die before the span ends. Both services
store the span's ids (and start time) durably up front, let children name it as their parent,
and have whichever process finishes the work emit the span *with those ids*. OpenTelemetry's
SDK picks ids through the provider's ``IdGenerator``; :class:`PresetIds` returns preset ids
for the first span created inside :func:`preset_ids` and random ones otherwise.
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

# (trace id or None, span id) for the next span created in this context.
_PRESET: contextvars.ContextVar[tuple[int | None, int] | None] = contextvars.ContextVar(
    "clearance_preset_span_ids", default=None
)


class PresetIds(IdGenerator):
    """Random ids, except for the first span created inside :func:`preset_ids`."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        # Asked only for a root span, before its span id.
        preset = _PRESET.get()
        if preset is not None and preset[0] is not None:
            return preset[0]
        return self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        preset = _PRESET.get()
        if preset is not None:
            _PRESET.set(None)  # only the first span created inside the block
            return preset[1]
        return self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True


def install(provider: TracerProvider) -> None:
    """Use :class:`PresetIds` for every tracer obtained from ``provider`` afterwards."""
    if not isinstance(getattr(provider, "id_generator", None), PresetIds):
        provider.id_generator = PresetIds()  # type: ignore[assignment]


@contextlib.contextmanager
def preset_ids(*, span_id: int, trace_id: int | None = None) -> Iterator[None]:
    """The next span created in this block gets ``span_id`` (and ``trace_id`` if a root)."""
    token = _PRESET.set((trace_id, span_id))
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


def ids_of(traceparent: str | None) -> tuple[int, int] | None:
    """(trace id, span id) of a W3C traceparent, or None when it is not usable."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id


def span_context_of(trace_id: str, span_id: str) -> SpanContext:
    """The (remote, sampled) span context of hex ids."""
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID),
    )


def context_of(trace_id: str, span_id: str) -> Context:
    """A context whose parent is the (remote) span ``span_id`` of trace ``trace_id``."""
    return trace.set_span_in_context(NonRecordingSpan(span_context_of(trace_id, span_id)))


def nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)
