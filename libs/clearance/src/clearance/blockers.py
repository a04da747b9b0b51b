"""What still blocks a teardown, and why: the diagnosis part of ``clearance explain`` (pure).

Every object the API server still has for the torn-down attempt is diagnosed from the fresh
reads of it and its node, with the causes of the tracker's ``deletion.stuck`` diagnosis
(``clearance.events.Cause``, DESIGN §1 "lost node", §4.3): its node missing, not ready,
unreachable or out of service; finalizers by name; a grace period still running. A node the
user may not read keeps the node causes of the tracker's last diagnosis of that object, and
says so. Each blocker comes with the commands a person could run to unblock it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from clearance import events, testfaults
from clearance.events import Cause

UNREACHABLE_TAINT: Final = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE_TAINT: Final = "node.kubernetes.io/out-of-service"

History = events.CycleEvent | events.AlertEvent


@dataclass(frozen=True, slots=True)
class PresentObject:
    """An object of the AppWrapper the API server still has (fresh GET or quorum LIST)."""

    kind: str
    resource: str
    """What kubectl calls its resource: ``pod``, ``jobs.batch``, ``pytorchjobs.kubeflow.org``."""
    namespace: str
    name: str
    uid: str
    attempt: int | None
    node: str | None = None
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: datetime | None = None
    deletion_grace_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class NodeUnreadable:
    """The node could not be read (no permission, …): ``why`` says what the server said."""

    why: str


NodeFact = events.NodeObject | NodeUnreadable | None
"""A fresh node snapshot; None when the API server answered 404 (the node is gone)."""


@dataclass(frozen=True, slots=True)
class Blocker:
    """One object the teardown still waits for, and why."""

    object: PresentObject
    causes: tuple[Cause, ...]
    node_note: str | None
    """Where the node causes came from when the node could not be read."""
    commands: tuple[str, ...]


def node_causes(name: str, node: events.NodeObject | None) -> tuple[Cause, ...]:
    """Why node ``name`` is lost (empty when it is healthy): DESIGN §1 "lost node"."""
    if node is None:
        return (events.NodeMissing(node=name),)
    causes: list[Cause] = []
    ready = next((c for c in node.status.conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        causes.append(events.NodeNotReady(node=name, status=ready.status if ready else None))
    keys = {taint.key for taint in node.spec.taints}
    if UNREACHABLE_TAINT in keys:
        causes.append(events.NodeUnreachable(node=name))
    if OUT_OF_SERVICE_TAINT in keys:
        causes.append(events.NodeOutOfService(node=name))
    return tuple(causes)


_NODE_CAUSES: Final = (
    events.NodeMissing,
    events.NodeNotReady,
    events.NodeUnreachable,
    events.NodeOutOfService,
)


def _tracker_diagnosis(
    history: tuple[History, ...], uid: str, *, latest: bool = True
) -> tuple[Cause, ...]:
    """The causes of the tracker's latest (or first) diagnosis of ``uid`` in its alerts."""
    stuck_alerts = [e for e in history if isinstance(e, events.AlertDeletionStuck)]
    for event in reversed(stuck_alerts) if latest else stuck_alerts:
        for stuck in event.stuck:
            if stuck.object.uid == uid:
                return stuck.reasons
    return ()


def _tracker_node_causes(history: tuple[History, ...], uid: str) -> tuple[Cause, ...]:
    """The node causes of the tracker's latest diagnosis of ``uid`` (for an unreadable node)."""
    return tuple(c for c in _tracker_diagnosis(history, uid) if isinstance(c, _NODE_CAUSES))


def _kubectl(obj: PresentObject, *verb: str) -> str:
    return shlex.join(
        ["kubectl", "-n", obj.namespace, *verb[:1], obj.resource, obj.name, *verb[1:]]
    )


def unblock_commands(obj: PresentObject, causes: tuple[Cause, ...]) -> tuple[str, ...]:
    """What a person could run, in order: a grace-0 delete when no kubelet will ever confirm
    (lost node) or the grace period still runs, then dropping each finalizer by name — the JSON
    patch tests the UID and the finalizer at its index, so it never touches a new object of the
    same name nor another finalizer."""
    commands: list[str] = []
    lost_node = any(isinstance(c, _NODE_CAUSES) for c in causes)
    in_grace = any(isinstance(c, events.InGracePeriod) for c in causes)
    if obj.deletion_timestamp is None or (
        obj.deletion_grace_seconds != 0 and (lost_node or in_grace)
    ):
        commands.append(_kubectl(obj, "delete", "--grace-period=0", "--force"))
    if obj.finalizers:
        ops: list[dict[str, str]] = [{"op": "test", "path": "/metadata/uid", "value": obj.uid}]
        for index in reversed(range(len(obj.finalizers))):
            path = f"/metadata/finalizers/{index}"
            ops.append({"op": "test", "path": path, "value": obj.finalizers[index]})
            ops.append({"op": "remove", "path": path})
        patch = json.dumps(ops, separators=(",", ":"))
        commands.append(_kubectl(obj, "patch", "--type=json", "-p", patch))
    if not commands:
        commands.append(_kubectl(obj, "describe"))
    return tuple(commands)


def diagnose(
    obj: PresentObject,
    *,
    nodes: Mapping[str, NodeFact],
    history: tuple[History, ...],
    now: datetime,
) -> Blocker:
    """Why ``obj`` is still there at ``now``, from the fresh reads of it and ``nodes``."""
    if testfaults.active("explain-stale-diagnosis"):
        stale = _tracker_diagnosis(history, obj.uid, latest=False)
        if stale:
            return Blocker(obj, stale, None, unblock_commands(obj, stale))
    causes: list[Cause] = []
    note = None
    if obj.node is not None:
        node = nodes.get(obj.node, NodeUnreadable("not read"))
        if isinstance(node, NodeUnreadable):
            causes.extend(_tracker_node_causes(history, obj.uid))
            note = f"node {obj.node} not readable ({node.why})" + (
                "; node causes from the tracker's last diagnosis" if causes else ""
            )
        else:
            causes.extend(node_causes(obj.node, node))
    if obj.finalizers:
        causes.append(events.Finalizers(finalizers=obj.finalizers))
    deletion = obj.deletion_timestamp
    if deletion is not None and deletion > now:
        causes.append(events.InGracePeriod(seconds_left=(deletion - now).total_seconds()))
    if not causes:
        detail = (
            "deletion was never requested (no deletionTimestamp)"
            if deletion is None
            else "deletion requested, grace period over, nothing holds it"
        )
        causes.append(events.UnknownCause(detail=detail))
    tuple_causes = tuple(causes)
    return Blocker(obj, tuple_causes, note, unblock_commands(obj, tuple_causes))
