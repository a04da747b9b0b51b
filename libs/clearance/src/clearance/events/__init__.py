"""The event contract: every message Clearance puts on NATS (DESIGN §3).

All events are frozen msgspec Structs in one tagged union, :data:`Event`, keyed by the
`type` field (`kube.pod`, `cycle.teardown.started`, `alert.deletion.stuck`, ...).
The JSON Schema and the AsyncAPI document in `proto/` are generated from these
classes (`make schemas`), so the docstrings and `Meta(description=...)` here are
the published documentation.

Conventions
-----------
* **Naming.** Structs that mirror a Kubernetes object or reference (`PodObject`,
  `ObjectMeta`, `ObjectRef`, the AppWrapper spec, ...) keep the Kubernetes JSON
  names on the wire (`apiVersion`, `deletionTimestamp`, `GenericItems`,
  `nvidia.com/gpu`) and the Kubernetes nesting (`metadata`/`spec`/`status`),
  while the Python attributes are snake_case (`obj.metadata.deletion_timestamp`).
  Clearance's own envelope fields are snake_case on the wire too (`observed_at`,
  `occurred_at`, `cycle_traceparent`). Rule of thumb: a path that exists in the
  Kubernetes object has the Kubernetes spelling; everything else is snake_case.
* **Raw decoding.** Because the snapshots keep the Kubernetes shape and ignore
  unknown fields, the watcher decodes list/watch JSON straight into them:
  `msgspec.json.decode(raw, type=PodObject)` drops `managedFields` and everything
  else Clearance does not need. Only `metadata.name`, `metadata.uid` and
  `metadata.resourceVersion` are required; every other field has a default.
  List items carry no `kind`/`apiVersion`: the fixed kinds default them, and
  :func:`snapshot_item` takes them as arguments.
* **Forward compatibility.** Unknown fields are ignored everywhere, so a newer
  producer may add fields without breaking an older consumer. Removing or retyping a
  field is a breaking change and needs a `v2` subject.
* **Time.** Every timestamp is tz-aware (naive datetimes are rejected) and encodes as
  RFC 3339.
* **Trace context** travels in the `traceparent` header, not in the body. Cycle
  and alert events may also carry `cycle_traceparent`, the context of the
  `requeue.cycle` root span, so a consumer can link to it after the fact.
* **Attempt.** `attempt` is the attempt the event is about: the torn-down attempt
  N for `requeued`, `teardown.started`, `deletion.*`, `finalizers.removed`,
  `cleared` and the alerts; the new attempt for `dispatched` and
  `redispatched` (N+1 after a requeue).

Message ids
-----------
`msg_id()` gives the deterministic `Nats-Msg-Id` used for JetStream dedup:

* cycle and alert events: `<aw-uid>:<attempt>:<type>`, plus a discriminator where one
  attempt legitimately has several events of a type: for `cycle.deletion.confirmed`
  the object uid (one object) or a digest of the sorted uids (several: a uid is confirmed
  by exactly one record write, so the set names the fact), the step for
  `alert.deletion.stuck`, the node for `alert.node.lost`. Republishing the same fact
  after a crash dedups; a new fact never collides with an old one.
* kube ADDED/MODIFIED: `<kind>:<uid>:<resourceVersion>` (kind: pod, node, appwrapper,
  item — a bare Pod wrapped by an AppWrapper is reported both as `pod` and as `item`, and
  both copies must be stored). The id names the object *state*,
  not the verb, so a relist that re-announces an unchanged object as ADDED dedups
  against the MODIFIED that first reported that state.
* kube DELETED: `<kind>:<uid>:DELETED`, for a real DELETED and for a tombstone the watcher
  inferred after a relist (`inferred=True`) alike. A uid is deleted exactly once, so
  whichever of the two reaches JetStream first inside the dedup window wins and the
  other is dropped; the two carry different resourceVersions (the real one has the
  deletion's), so a key with the rv would let both through. Outside the dedup window
  a duplicate DELETED can still arrive: consumers treat DELETED idempotently per uid.
"""

from __future__ import annotations

from clearance.events.alerts import (
    AlertDeletionForced,
    AlertDeletionStuck,
    AlertDispatchFailed,
    AlertNodeLost,
    AlertRequeueLimit,
    Cause,
    ControllerRecreating,
    EscalationStep,
    Finalizers,
    InGracePeriod,
    NodeMissing,
    NodeNotReady,
    NodeOutOfService,
    NodeUnreachable,
    StuckObject,
    UnknownCause,
)
from clearance.events.codec import (
    DECODER,
    ENCODER,
    HEADER_MSG_ID,
    HEADER_TRACEPARENT,
    HEADER_TRACESTATE,
    AlertEvent,
    CycleEvent,
    Event,
    EventDecodeError,
    EventEncodeError,
    KubeEvent,
    decode,
    encode,
)
from clearance.events.cycle import (
    ConfirmedObject,
    CycleCleared,
    CycleCompleted,
    CycleDeletionConfirmed,
    CycleDeletionForced,
    CycleDispatched,
    CycleFailed,
    CycleFinalizersRemoved,
    CycleRedispatched,
    CycleRequeued,
    CycleTeardownStarted,
    RemovedFinalizers,
    TeardownPolicy,
)
from clearance.events.fields import (
    ApiVersion,
    Attempt,
    Count,
    Kind,
    Name,
    Namespace,
    Severity,
    Traceparent,
    Uid,
    UtcDateTime,
    WatchAction,
)
from clearance.events.kube_events import (
    KubeAppWrapperEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    SnapshotProblem,
)
from clearance.events.snapshots import (
    AppWrapperObject,
    AppWrapperRef,
    AppWrapperResources,
    AppWrapperSpec,
    AppWrapperStatus,
    ClearanceStatus,
    Condition,
    Container,
    DispatchDuration,
    ItemObject,
    NodeObject,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    ObjectRef,
    OwnerReference,
    PodObject,
    PodSpec,
    PodStatus,
    Quantity,
    Requeuing,
    ResourceList,
    ResourceRequirements,
    SchedulingSpec,
    StuckStatus,
    Taint,
    snapshot_appwrapper,
    snapshot_item,
    snapshot_node,
    snapshot_pod,
)

__all__ = [
    "DECODER",
    "ENCODER",
    "HEADER_MSG_ID",
    "HEADER_TRACEPARENT",
    "HEADER_TRACESTATE",
    "AlertDeletionForced",
    "AlertDeletionStuck",
    "AlertDispatchFailed",
    "AlertEvent",
    "AlertNodeLost",
    "AlertRequeueLimit",
    "ApiVersion",
    "AppWrapperObject",
    "AppWrapperRef",
    "AppWrapperResources",
    "AppWrapperSpec",
    "AppWrapperStatus",
    "Attempt",
    "Cause",
    "ClearanceStatus",
    "Condition",
    "ConfirmedObject",
    "Container",
    "ControllerRecreating",
    "Count",
    "CycleCleared",
    "CycleCompleted",
    "CycleDeletionConfirmed",
    "CycleDeletionForced",
    "CycleDispatched",
    "CycleEvent",
    "CycleFailed",
    "CycleFinalizersRemoved",
    "CycleRedispatched",
    "CycleRequeued",
    "CycleTeardownStarted",
    "DispatchDuration",
    "EscalationStep",
    "Event",
    "EventDecodeError",
    "EventEncodeError",
    "Finalizers",
    "InGracePeriod",
    "ItemObject",
    "Kind",
    "KubeAppWrapperEvent",
    "KubeEvent",
    "KubeItemEvent",
    "KubeNodeEvent",
    "KubePodEvent",
    "Name",
    "Namespace",
    "NodeMissing",
    "NodeNotReady",
    "NodeObject",
    "NodeOutOfService",
    "NodeSpec",
    "NodeStatus",
    "NodeUnreachable",
    "ObjectMeta",
    "ObjectRef",
    "OwnerReference",
    "PodObject",
    "PodSpec",
    "PodStatus",
    "Quantity",
    "RemovedFinalizers",
    "Requeuing",
    "ResourceList",
    "ResourceRequirements",
    "SchedulingSpec",
    "Severity",
    "SnapshotProblem",
    "StuckObject",
    "StuckStatus",
    "Taint",
    "TeardownPolicy",
    "Traceparent",
    "Uid",
    "UnknownCause",
    "UtcDateTime",
    "WatchAction",
    "decode",
    "encode",
    "snapshot_appwrapper",
    "snapshot_item",
    "snapshot_node",
    "snapshot_pod",
]
