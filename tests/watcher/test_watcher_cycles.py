"""Which published events join a requeue cycle's trace (pure logic of clearance_watcher.cycles)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from clearance import events
from clearance_watcher.cycles import CycleIndex

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def aw_event(**clearance: Any) -> events.KubeAppWrapperEvent:
    raw = {
        "metadata": {"name": "job", "namespace": "ns", "uid": "aw-1", "resourceVersion": "5"},
        "status": {"clearance": clearance},
    }
    obj = msgspec.convert(raw, events.AppWrapperObject)
    return events.KubeAppWrapperEvent(action="MODIFIED", observed_at=T0, object=obj)


def pod_event(
    action: str = "DELETED", *, attempt: str = "1", terminating: bool = False
) -> events.KubePodEvent:
    meta: dict[str, Any] = {
        "name": "job-0",
        "namespace": "ns",
        "uid": "pod-1",
        "resourceVersion": "9",
        "labels": {"appwrapper.mcad.ibm.com": "job", "clearance.dev/attempt": attempt},
    }
    if terminating:
        meta["deletionTimestamp"] = T0.isoformat()
    obj = msgspec.convert({"metadata": meta}, events.PodObject)
    return events.KubePodEvent(action=action, observed_at=T0, object=obj)  # type: ignore[arg-type]


def tearing_down() -> CycleIndex:
    index = CycleIndex()
    index.observe(
        aw_event(attempt=1, teardownStartedAt=T0.isoformat(), cycleTraceparent=TRACEPARENT)
    )
    return index


def test_deletion_of_an_object_being_torn_down_joins_the_cycle() -> None:
    cycle = tearing_down().cycle_for(pod_event("DELETED"))
    assert cycle is not None
    assert cycle.traceparent == TRACEPARENT
    assert cycle.attempt == 1


def test_terminating_object_joins_the_cycle_but_a_plain_update_does_not() -> None:
    index = tearing_down()
    assert index.cycle_for(pod_event("MODIFIED", terminating=True)) is not None
    assert index.cycle_for(pod_event("MODIFIED")) is None


def test_objects_of_the_next_attempt_stay_out_of_the_old_cycle() -> None:
    assert tearing_down().cycle_for(pod_event("DELETED", attempt="2")) is None


def test_cleared_teardown_closes_the_cycle() -> None:
    index = tearing_down()
    later = (T0 + timedelta(seconds=5)).isoformat()
    index.observe(
        aw_event(
            attempt=1,
            teardownStartedAt=T0.isoformat(),
            clearedAt=later,
            cycleTraceparent=TRACEPARENT,
        )
    )
    assert index.cycle_for(pod_event("DELETED")) is None
    assert len(index) == 0
