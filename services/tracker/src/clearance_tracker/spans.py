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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from clearance import spanids
from clearance.spanids import (
    PresetIds,
    context_of,
    install,
    nanos,
    new_span_id,
    new_trace_id,
    span_context_of,
)

__all__ = [
    "PresetIds",
    "context_of",
    "install",
    "nanos",
    "new_span_id",
    "new_trace_id",
    "preset_span_id",
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
