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
stored per object, so `cleared` can link to them from any replica. :mod:`clearance.spanids`
lets a span be created with a chosen id.

This module owns those ids, the parents derived from a record (:func:`cycle_parent`,
:func:`root`) and the attributes the tracker's spans carry (:mod:`clearance.attributes`:
OpenTelemetry semantic conventions plus `clearance.*`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.context import Context

from clearance import attributes, spanids
from clearance.attributes import Attributes
from clearance.spanids import (
    PresetIds,
    context_of,
    install,
    nanos,
    new_span_id,
    new_trace_id,
    span_context_of,
)
from clearance.telemetry import context_from_traceparent
from clearance_tracker.teardown import Teardown, TrackedObject

__all__ = [
    "PresetIds",
    "appwrapper_attributes",
    "context_of",
    "cycle_parent",
    "install",
    "nanos",
    "new_span_id",
    "new_trace_id",
    "object_attributes",
    "preset_span_id",
    "root",
    "span_context_of",
    "trace_id_of",
]


@contextlib.contextmanager
def preset_span_id(span_id: str) -> Iterator[None]:
    """The next span created in this block gets the hex ``span_id``."""
    with spanids.preset_ids(span_id=int(span_id, 16)):
        yield


def trace_id_of(traceparent: str | None) -> str | None:
    ids = spanids.ids_of(traceparent)
    return None if ids is None else f"{ids[0]:032x}"


def cycle_parent(record: Teardown) -> Context | None:
    """The cycle root (`requeue.cycle`) as a parent, when the record knows its traceparent."""
    if record.cycle_traceparent:
        with contextlib.suppress(ValueError):
            return context_from_traceparent(record.cycle_traceparent)
    return None


def root(record: Teardown) -> Context:
    """Parent of `deletion.escalate` and `cleared`: the cycle root, else our `deletion.await`."""
    parent = cycle_parent(record)
    if parent is not None:
        return parent
    return context_of(record.trace_id, record.await_span_id)


def appwrapper_attributes(record: Teardown) -> Attributes:
    aw = record.appwrapper
    return attributes.appwrapper_attributes(
        namespace=aw.namespace, name=aw.name, uid=aw.uid, attempt=record.attempt
    )


def object_attributes(record: Teardown, obj: TrackedObject) -> Attributes:
    return appwrapper_attributes(record) | attributes.object_attributes(
        api_version=obj.api_version,
        kind=obj.kind,
        name=obj.name,
        uid=obj.uid,
        namespace=obj.namespace,
    )
