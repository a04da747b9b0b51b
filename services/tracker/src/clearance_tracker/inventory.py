"""Pure: the record a `teardown.started` opens — its inventory, wrapped kinds, trace and deadlines.

This module owns the step from the dispatcher's announcement to the tracker's first record:
one tracked object per object of the inventory (deduplicated: a bare Pod wrapped by an
AppWrapper is both a generic item and one of its pods, and producers have listed it twice),
the wrapped kinds the final quorum LIST must cover (with the intermediate kinds their controllers
create, see :data:`INTERMEDIATE_KINDS`), the cycle traceparent (event field, else
the message header, dropped when malformed) and the deadlines fixed from the policy. Nothing
here does I/O or reads a clock; the caller passes ``recorded_at`` and the ids it reserved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final

from clearance.events import CycleTeardownStarted, ObjectRef, TeardownPolicy
from clearance.telemetry import context_from_traceparent
from clearance_tracker.escalation import Timing, fix_deadlines
from clearance_tracker.teardown import KindRef, Teardown, TrackedObject

INTERMEDIATE_KINDS: Final[Mapping[tuple[str, str], tuple[KindRef, ...]]] = {
    ("apps/v1", "Deployment"): (KindRef(api_version="apps/v1", kind="ReplicaSet"),),
}
"""(apiVersion, kind) of a wrapped kind → the labelled objects its controller creates between it
and its pods. A Deployment's ReplicaSets carry its pod template's labels (the AppWrapper's,
stamped by the dispatcher) and are nobody's generic item: unless the final LIST covers them, a
ReplicaSet that outlives its Deployment (held by a finalizer, or not yet collected) could still
create pods of the attempt after ``cleared``. Pods of StatefulSets, Jobs and PyTorchJobs are
pods, always listed."""


def covered_kinds(refs: Iterable[ObjectRef]) -> tuple[KindRef, ...]:
    """Kinds other than Pod the final LIST must cover for ``refs``: theirs, then intermediates."""
    kinds: list[KindRef] = []
    for ref in refs:
        if ref.kind == "Pod" and ref.api_version == "v1":
            continue
        for kind in (
            KindRef(api_version=ref.api_version, kind=ref.kind),
            *INTERMEDIATE_KINDS.get((ref.api_version, ref.kind), ()),
        ):
            if kind not in kinds:
                kinds.append(kind)
    return tuple(kinds)


def identity(ref: ObjectRef) -> tuple[str, ...]:
    """What makes two inventory entries the same object: the UID, else group/kind/namespace/name.

    A UID names one object for ever. The event contract requires a UID, so the fallback only
    keeps the rule total: without one, API group, kind, namespace and name decide (the
    version may differ).
    """
    if ref.uid:
        return ("uid", ref.uid)
    group = ref.api_version.rpartition("/")[0]
    return ("name", group, ref.kind, ref.namespace or "", ref.name)


def unique_inventory(refs: Iterable[ObjectRef]) -> tuple[ObjectRef, ...]:
    """The inventory with each object once (first entry wins), in the producer's order."""
    seen: set[tuple[str, ...]] = set()
    unique: list[ObjectRef] = []
    for ref in refs:
        key = identity(ref)
        if key not in seen:
            seen.add(key)
            unique.append(ref)
    return tuple(unique)


def cycle_traceparent(event_value: str | None, header_value: str | None) -> str | None:
    """The cycle's traceparent: the event's field, else the message header; None if malformed."""
    candidate = event_value or header_value
    if candidate is None:
        return None
    try:
        context_from_traceparent(candidate)
    except ValueError:
        return None
    return candidate


def open_teardown(
    event: CycleTeardownStarted,
    *,
    policy: TeardownPolicy,
    owner: str,
    recorded_at: datetime,
    trace_id: str,
    await_span_id: str,
    traceparent: str | None,
    timing: Timing,
) -> Teardown:
    """The new record of `event`'s teardown, owned by `owner`, deadlines fixed."""
    objects: dict[str, TrackedObject] = {}
    inventory = unique_inventory(event.inventory)
    for ref in inventory:
        objects[ref.uid] = TrackedObject(
            kind=ref.kind,
            api_version=ref.api_version,
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            source="inventory",
            first_seen=event.occurred_at,
            attempt=event.attempt,
        )
    record = Teardown(
        appwrapper=event.appwrapper,
        attempt=event.attempt,
        teardown_started_at=event.occurred_at,
        recorded_at=recorded_at,
        policy=policy,
        owner=owner,
        trace_id=trace_id,
        await_span_id=await_span_id,
        cycle_traceparent=traceparent,
        wrapped_kinds=covered_kinds(inventory),
        objects=objects,
    )
    return fix_deadlines(record, timing)
