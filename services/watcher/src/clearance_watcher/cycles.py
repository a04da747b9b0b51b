"""Which AppWrappers are inside a teardown, so the watcher can join their requeue-cycle trace.

DESIGN §6 wants one trace per requeue cycle with spans from all three services. The watcher
decides nothing, but it is the witness of the deletions the tracker confirms: when it publishes
the DELETED (or the deletionTimestamp) of an object of an attempt being torn down, its publish
span is parented to the cycle's root (the dispatcher writes that traceparent to
``status.clearance.cycleTraceparent``), and the tracker's consumer span then hangs under it.
Every other event stays out of traces (``CLEARANCE_TRACE_EVENTS`` aside): they belong to no cycle.

This module is the pure bookkeeping; :mod:`clearance_watcher.publishing` asks it per event.
"""

from __future__ import annotations

from dataclasses import dataclass

from clearance import labels
from clearance.events import KubeAppWrapperEvent, KubeEvent, KubeItemEvent, KubePodEvent


@dataclass(frozen=True, slots=True)
class OpenCycle:
    """A teardown in progress: the attempt being torn down and its trace."""

    attempt: int
    traceparent: str


class CycleIndex:
    """AppWrappers currently in a teardown, from their published events, keyed by the label
    values their objects carry (:func:`clearance.labels.value_for`: long names are hashed)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], OpenCycle] = {}

    def __len__(self) -> int:
        return len(self._open)

    def observe(self, event: KubeAppWrapperEvent) -> None:
        meta = event.object.metadata
        key = (meta.namespace or "", labels.value_for(meta.name))
        status = event.object.status.clearance
        tearing_down = (
            event.action != "DELETED"
            and status is not None
            and status.attempt is not None
            and status.cycle_traceparent is not None
            and status.teardown_started_at is not None
            and (status.cleared_at is None or status.cleared_at < status.teardown_started_at)
        )
        if tearing_down:
            assert status is not None and status.attempt is not None
            assert status.cycle_traceparent is not None
            self._open[key] = OpenCycle(status.attempt, status.cycle_traceparent)
        else:
            self._open.pop(key, None)

    def cycle_for(self, event: KubeEvent) -> OpenCycle | None:
        """The open cycle this pod/item event bears witness to, if any."""
        if not self._open:
            return None  # the common case, asked for every event: no teardown in progress
        if not isinstance(event, KubePodEvent | KubeItemEvent):
            return None
        meta = event.object.metadata
        appwrapper = meta.labels.get(labels.MCAD_APPWRAPPER)
        if appwrapper is None:
            return None
        namespace = meta.labels.get(labels.NAMESPACE) or meta.namespace or ""
        cycle = self._open.get((namespace, appwrapper))
        if cycle is None:
            return None
        attempt = labels.attempt_of(meta.labels)
        if attempt is not None and attempt > cycle.attempt:
            return None  # an object of the next attempt, not part of this teardown
        if event.action != "DELETED" and meta.deletion_timestamp is None:
            return None
        return cycle
