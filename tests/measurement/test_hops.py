"""The removal → cleared breakdown (bench 1) is timed between server timestamps only."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.bench.hops import hops
from tests.bench.observing import CycleFollower, Seen
from tests.support.serverclock import Commit

from clearance import events, labels


def _removed(at: float) -> Commit:
    stamped = labels.stamp(appwrapper="aw", namespace="default", attempt=1)
    return Commit.from_json(
        {"rv": "11", "time": at, "type": "DELETED", "kind": "Pod", "name": "aw-0",
         "labels": stamped}
    )  # fmt: skip


def _deleted_event(stored: float) -> Seen:
    stamped = labels.stamp(appwrapper="aw", namespace="default", attempt=1)
    pod = events.PodObject(
        metadata=events.ObjectMeta(
            name="aw-0", namespace="default", uid="u-1", resource_version="11", labels=stamped
        ),
    )
    event = events.KubePodEvent(action="DELETED", observed_at=datetime.now(UTC), object=pod)
    return Seen(event, stored, stored)


def _follower(*seen: Seen) -> CycleFollower:
    follower = CycleFollower(nc=None, subject="clearance.kube.v1.pod.default.*")  # type: ignore[arg-type]
    follower.seen.extend(seen)
    return follower


def test_the_two_hops_add_up_to_removed_to_cleared() -> None:
    out = hops(
        pods=_follower(_deleted_event(100.004)),
        last_removed={("aw", 1): _removed(100.000)},
        cleared={("aw", 1): 100.010},
    )
    assert round(out["removed_to_deleted_event_stored"]["p50"], 3) == 4.0
    assert round(out["deleted_event_stored_to_cleared_stored"]["p50"], 3) == 6.0
    assert out["untimed"] == 0


def test_a_deleted_event_stored_before_the_removal_is_untimed_not_negative() -> None:
    out = hops(
        pods=_follower(_deleted_event(99.990)),
        last_removed={("aw", 1): _removed(100.000)},
        cleared={("aw", 1): 100.010},
    )
    assert out["untimed"] == 1
    assert out["removed_to_deleted_event_stored"]["n"] == 0
