"""Builders for the tracker's pure-logic tests: records, pod/item/node snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from clearance import labels
from clearance.events import (
    AppWrapperRef,
    ItemObject,
    NodeObject,
    PodObject,
    TeardownPolicy,
)
from clearance_tracker.teardown import KindRef, Teardown, TrackedObject

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
AW = AppWrapperRef(namespace="team-a", name="job1", uid="aw-uid-1")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pod(
    name: str,
    uid: str,
    *,
    attempt: int | None = 1,
    namespace: str = "team-a",
    appwrapper: str = "job1",
    node: str | None = "node-1",
    finalizers: tuple[str, ...] = (),
    deletion: datetime | None = None,
    owners: tuple[dict[str, Any], ...] = (),
    labelled: bool = True,
) -> PodObject:
    lbls: dict[str, str] = {}
    if labelled:
        lbls = labels.stamp(appwrapper=appwrapper, namespace=namespace, attempt=attempt or 0)
        if attempt is None:
            lbls.pop(labels.ATTEMPT)
    raw: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "labels": lbls,
            "finalizers": list(finalizers),
            "ownerReferences": list(owners),
        },
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
    }
    if deletion is not None:
        raw["metadata"]["deletionTimestamp"] = deletion.isoformat()
    return msgspec.convert(raw, PodObject)


def job(name: str, uid: str, *, attempt: int = 1, finalizers: tuple[str, ...] = ()) -> ItemObject:
    return msgspec.convert(
        {
            "kind": "Job",
            "apiVersion": "batch/v1",
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "uid": uid,
                "resourceVersion": "1",
                "labels": labels.stamp(appwrapper="job1", namespace="team-a", attempt=attempt),
                "finalizers": list(finalizers),
            },
        },
        ItemObject,
    )


def node(name: str = "node-1", *, ready: str = "True", taints: tuple[str, ...] = ()) -> NodeObject:
    return msgspec.convert(
        {
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"taints": [{"key": k, "effect": "NoExecute"} for k in taints]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        },
        NodeObject,
    )


def tracked(
    name: str,
    uid: str,
    *,
    kind: str = "Pod",
    api_version: str = "v1",
    node: str | None = None,
    source: str = "inventory",
    first_seen: datetime = T0,
    confirmed: bool = False,
    owner_uids: tuple[str, ...] = (),
) -> TrackedObject:
    return TrackedObject(
        kind=kind,
        api_version=api_version,
        namespace="team-a",
        name=name,
        uid=uid,
        source=source,  # type: ignore[arg-type]
        first_seen=first_seen,
        attempt=1,
        node=node,
        owner_uids=owner_uids,
        confirmed_at=at(1) if confirmed else None,
        confirmed_how="watch_deleted" if confirmed else None,
    )


def record(
    *objects: TrackedObject,
    attempt: int = 1,
    stuck: int = 60,
    force: int = 570,
    finalizers: str = "Never",
    owner: str = "r1",
) -> Teardown:
    return Teardown(
        appwrapper=AW,
        attempt=attempt,
        teardown_started_at=T0,
        recorded_at=T0,
        policy=TeardownPolicy(
            stuck_alert_seconds=stuck,
            force_deletion_seconds=force,
            finalizer_removal=finalizers,  # type: ignore[arg-type]
        ),
        owner=owner,
        trace_id="0" * 31 + "1",
        await_span_id="0" * 15 + "1",
        wrapped_kinds=(KindRef(api_version="batch/v1", kind="Job"),),
        objects={o.uid: o for o in objects},
    )
