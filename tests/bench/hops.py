"""Where the time from "last old object removed" to ``cleared`` goes, hop by hop (bench 1).

Two hops, each between server timestamps (:mod:`tests.support.serverclock`):

* **watcher** - the API commit of the last attempt-N pod's removal → the JetStream store time
  of that pod's ``DELETED`` event in ``CLEARANCE_KUBE`` (kubesim's watch, the watcher's
  decode, its publish and PubAck);
* **tracker** - that store time → the store time of ``cycle.cleared`` (the tracker's consumer,
  its record update, the confirming LIST, the publish).

The pod events are read by a second :class:`~.observing.CycleFollower` on the kube stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.support.serverclock import Commit, interval

from clearance import events, labels, subjects

from .common import distribution
from .observing import CycleFollower, Seen


def pod_filter(namespace: str) -> str:
    """The watcher's pod events of one namespace."""
    return subjects.kube_filter(kind="pod", namespace=namespace)


def deleted_stored(seen: list[Seen]) -> dict[tuple[str, int], float]:
    """(pod name, attempt) → store time of the pod's ``DELETED`` event."""
    out: dict[tuple[str, int], float] = {}
    for s in seen:
        event = s.event
        if not isinstance(event, events.KubePodEvent) or event.action != "DELETED":
            continue
        attempt = labels.attempt_of(dict(event.object.metadata.labels))
        if attempt is not None:
            out.setdefault((event.object.metadata.name, attempt), s.stored)
    return out


def hops(
    *,
    pods: CycleFollower,
    last_removed: Mapping[tuple[str, int], Commit],
    cleared: Mapping[tuple[str, int], float],
) -> dict[str, Any]:
    """The two hops' distributions (ms) over the measured cycles, and the pairs not timed."""
    stored = deleted_stored(pods.seen)
    watcher: list[float] = []
    tracker: list[float] = []
    untimed = 0
    for key, cleared_at in cleared.items():
        removed = last_removed.get(key)
        if removed is None or removed.attempt is None:
            continue
        at = stored.get((removed.name, removed.attempt))
        first = None if at is None else interval(removed.time, at)
        second = None if at is None else interval(at, cleared_at)
        if first is None or second is None:
            untimed += 1
            continue
        watcher.append(first)
        tracker.append(second)
    return {
        "removed_to_deleted_event_stored": distribution(watcher),
        "deleted_event_stored_to_cleared_stored": distribution(tracker),
        "untimed": untimed,
    }
