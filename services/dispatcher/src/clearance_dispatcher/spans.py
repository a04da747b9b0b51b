"""The cycle root span (``requeue.cycle``) survives a restart of the dispatcher.

The root is started in memory at the requeue decision and ended at the redispatch (or at the
``cleared`` of a Failed attempt). Its ids are in ``status.clearance.cycleTraceparent`` and its
start time in ``status.clearance.cycleStartedAt``, so a process that does not hold the live
span (it was started by a replica that died) emits it itself, *with those ids* and the
original start time: every span of the cycle, whoever made it, then has its parent. The
technique is the tracker's for ``deletion.await`` (``clearance_tracker.spans``): an id
generator that returns preset ids for the next span created inside :func:`preset_ids`; for a
root the trace id is preset too (a root has no parent to inherit it from).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from datetime import datetime

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

_PRESET: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "clearance_dispatcher_preset_ids", default=None
)


class PresetIds(IdGenerator):
    """Random ids, except for the first span created inside :func:`preset_ids`."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        preset = _PRESET.get()
        return preset[0] if preset is not None else self._random.generate_trace_id()

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
def preset_ids(trace_id: int, span_id: int) -> Iterator[None]:
    token = _PRESET.set((trace_id, span_id))
    try:
        yield
    finally:
        _PRESET.reset(token)


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


def nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)
