"""Pure rules: why is this object still here? (the diagnosis carried by `deletion.stuck`).

Inputs are fresh snapshots the tracker just read (the object by GET, its node by GET), so
the diagnosis describes the cluster at alert time, not a cache. The causes mirror
DESIGN §1 "lost node" and kubernetes-semantics §0/§1.1:

* the node is missing, `Ready` ≠ True, tainted `node.kubernetes.io/unreachable` or
  `node.kubernetes.io/out-of-service` → no kubelet will ever confirm the deletion;
* finalizers are present → even a grace-0 delete leaves the object (named);
* `deletionTimestamp` still in the future → the object is inside its grace period;
* the same name was already confirmed gone under another UID, or its owner still exists
  while it appeared after the teardown started → a controller keeps recreating it;
* nothing of the above → `unknown` (with a hint, e.g. "deletion was never requested").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final, get_args

from clearance.events import (
    Cause,
    ControllerRecreating,
    Finalizers,
    InGracePeriod,
    ItemObject,
    NodeMissing,
    NodeNotReady,
    NodeObject,
    NodeOutOfService,
    NodeUnreachable,
    ObjectRef,
    PodObject,
    StuckObject,
    UnknownCause,
)
from clearance_tracker.teardown import Teardown, TrackedObject

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"

NodeLookup = Mapping[str, NodeObject | None]
"""Node name → fresh snapshot, or None when the GET answered 404."""


def node_causes(name: str, node: NodeObject | None) -> tuple[Cause, ...]:
    """Why node `name` is lost (empty when it is healthy)."""
    if node is None:
        return (NodeMissing(node=name),)
    causes: list[Cause] = []
    ready = next((c for c in node.status.conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        causes.append(NodeNotReady(node=name, status=ready.status if ready else None))
    keys = {taint.key for taint in node.spec.taints}
    if UNREACHABLE_TAINT in keys:
        causes.append(NodeUnreachable(node=name))
    if OUT_OF_SERVICE_TAINT in keys:
        causes.append(NodeOutOfService(node=name))
    return tuple(causes)


def _recreation(record: Teardown, obj: TrackedObject) -> ControllerRecreating | None:
    """A controller is still producing this object (see module docstring)."""
    same_name_gone = any(
        o.uid != obj.uid
        and o.gone
        and o.kind == obj.kind
        and o.namespace == obj.namespace
        and o.name == obj.name
        for o in record.objects.values()
    )
    owner: ObjectRef | None = None
    for uid in obj.owner_uids:
        tracked = record.objects.get(uid)
        if tracked is not None and not tracked.gone:
            owner = tracked.ref()
            break
    appeared_later = obj.first_seen > record.teardown_started_at and obj.source != "inventory"
    if same_name_gone or (owner is not None and appeared_later):
        return ControllerRecreating(controller=owner)
    return None


def diagnose(
    record: Teardown,
    obj: TrackedObject,
    *,
    snapshot: PodObject | ItemObject | None,
    nodes: NodeLookup,
    now: datetime,
) -> StuckObject:
    """The diagnosis of one object that outlived a deadline."""
    meta = snapshot.metadata if snapshot is not None else None
    node = (
        snapshot.spec.node_name
        if isinstance(snapshot, PodObject) and snapshot.spec.node_name
        else obj.node
    )
    finalizers = meta.finalizers if meta is not None else obj.finalizers
    deletion = meta.deletion_timestamp if meta is not None else obj.deletion_timestamp
    causes: list[Cause] = []
    if node is not None and node in nodes:
        causes.extend(node_causes(node, nodes[node]))
    if finalizers:
        causes.append(Finalizers(finalizers=tuple(finalizers)))
    if deletion is not None and deletion > now:
        causes.append(InGracePeriod(seconds_left=(deletion - now).total_seconds()))
    recreating = _recreation(record, obj)
    if recreating is not None:
        causes.append(recreating)
    if not causes:
        detail = (
            "deletion was never requested (no deletionTimestamp)"
            if deletion is None
            else "deletion requested, grace period over, nothing holds it"
        )
        causes.append(UnknownCause(detail=detail))
    return StuckObject(
        object=obj.ref(), node=node, deletion_timestamp=deletion, reasons=tuple(causes)
    )


def describe(stuck: StuckObject) -> str:
    """One short human phrase for a stuck object (used in summaries and Warning Events)."""
    parts: list[str] = []
    for cause in stuck.reasons:
        if isinstance(cause, NodeMissing):
            parts.append(f"node {cause.node} missing")
        elif isinstance(cause, NodeNotReady):
            parts.append(f"node {cause.node} not ready")
        elif isinstance(cause, NodeUnreachable):
            parts.append(f"node {cause.node} unreachable")
        elif isinstance(cause, NodeOutOfService):
            parts.append(f"node {cause.node} out of service")
        elif isinstance(cause, Finalizers):
            parts.append("finalizers " + ", ".join(cause.finalizers))
        elif isinstance(cause, InGracePeriod):
            parts.append(f"in grace period ({cause.seconds_left:.0f}s left)")
        elif isinstance(cause, ControllerRecreating):
            parts.append("a controller keeps recreating it")
        else:
            parts.append(cause.detail or "unknown")
    ref = stuck.object
    return f"{ref.kind.lower()} {ref.name}: " + "; ".join(parts)


def lost_nodes(stuck: list[StuckObject]) -> dict[str, tuple[tuple[Cause, ...], list[ObjectRef]]]:
    """Lost nodes holding stuck objects → (node causes, objects), for `alert.node.lost`."""
    out: dict[str, tuple[tuple[Cause, ...], list[ObjectRef]]] = {}
    for item in stuck:
        node_reasons = tuple(
            c
            for c in item.reasons
            if isinstance(c, NodeMissing | NodeNotReady | NodeUnreachable | NodeOutOfService)
        )
        if item.node is None or not node_reasons:
            continue
        entry = out.setdefault(item.node, (node_reasons, []))
        entry[1].append(item.object)
    return out


CAUSE_NAMES: Final[tuple[str, ...]] = tuple(
    str(kind.__struct_config__.tag) for kind in get_args(Cause)
)
"""Every cause a diagnosis can name (the `cause` label of `clearance_objects_stuck_diagnosed`)."""


def cause_names(stuck: StuckObject) -> tuple[str, ...]:
    """The causes of one diagnosis by name (`node_not_ready`, `finalizers`, …)."""
    return tuple(str(type(cause).__struct_config__.tag) for cause in stuck.reasons)


def count_causes(
    open_uids: Iterable[str], diagnosed: Mapping[str, tuple[str, ...]]
) -> Counter[str]:
    """How many still-open objects each cause holds, from the latest diagnosis by UID (an object
    with several causes counts once under each; an open object never diagnosed counts nowhere)."""
    counts: Counter[str] = Counter()
    for uid in open_uids:
        counts.update(set(diagnosed.get(uid, ())))
    return counts
