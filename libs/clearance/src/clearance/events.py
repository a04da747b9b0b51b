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
  attempt legitimately has several events of a type: the object uid for
  `cycle.deletion.confirmed`, the step for `alert.deletion.stuck`, the node for
  `alert.node.lost`. Republishing the same fact after a crash dedups; a new fact
  never collides with an old one.
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

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec
from msgspec import Meta, Struct, field

from clearance import subjects

# ----------------------------------------------------------------- constrained types

UtcDateTime = Annotated[
    datetime, Meta(tz=True, description="RFC 3339 timestamp with a UTC offset.")
]
Name = Annotated[str, Meta(min_length=1, max_length=253, description="Kubernetes object name.")]
Namespace = Annotated[str, Meta(min_length=1, max_length=63, description="Kubernetes namespace.")]
# Kubernetes UIDs are UUIDs; the pattern is looser on purpose (any simulator or
# future format), but forbids ':' because uids are joined with ':' in message ids.
Uid = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=128,
        pattern=r"^[0-9A-Za-z][0-9A-Za-z._-]*$",
        description="Kubernetes object UID.",
    ),
]
Kind = Annotated[str, Meta(min_length=1, max_length=128, description="Kubernetes kind.")]
ApiVersion = Annotated[
    str, Meta(min_length=1, max_length=253, description="Kubernetes apiVersion.")
]
Attempt = Annotated[
    int, Meta(ge=1, description="Dispatch attempt: 1 for the first dispatch, +1 per requeue.")
]
Count = Annotated[int, Meta(ge=0)]
Traceparent = Annotated[
    str,
    Meta(
        pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="W3C traceparent of the requeue.cycle root span.",
    ),
]
Severity = subjects.Severity
WatchAction = Literal["ADDED", "MODIFIED", "DELETED"]

_KUBE_NAMES: Final = {"generic_items": "GenericItems", "nvidia_gpu": "nvidia.com/gpu"}


def _kube_name(name: str) -> str:
    """Python attribute → Kubernetes JSON name (camelCase plus a few exceptions)."""
    if name in _KUBE_NAMES:
        return _KUBE_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class _Kube(Struct, frozen=True, kw_only=True, rename=_kube_name):
    """Base of every Struct that mirrors Kubernetes JSON."""


# ------------------------------------------------------------------ shared snapshots


class OwnerReference(_Kube, frozen=True, kw_only=True):
    """A `metadata.ownerReferences[]` entry."""

    api_version: ApiVersion
    kind: Kind
    name: Name
    uid: Uid
    controller: bool | None = None


class ObjectMeta(_Kube, frozen=True, kw_only=True):
    """The slice of `metadata` Clearance decides on (no annotations, no managedFields)."""

    name: Name
    namespace: Annotated[
        Namespace | None, Meta(description="Absent for cluster-scoped objects.")
    ] = None
    uid: Uid
    resource_version: Annotated[
        str, Meta(min_length=1, description="resourceVersion of this snapshot.")
    ]
    labels: dict[str, str] = {}
    creation_timestamp: UtcDateTime | None = None
    deletion_timestamp: Annotated[
        UtcDateTime | None,
        Meta(description="Set once deletion was requested; the object is not gone yet."),
    ] = None
    deletion_grace_period_seconds: int | None = None
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


Quantity = Annotated[
    str | int | float,
    Meta(
        description="Kubernetes resource quantity. The API server stores the canonical "
        'string (`"500m"`, `"4Gi"`, `"0"`); a number is kept as the object carried it '
        "(custom resources keep what the user wrote, simulators may keep integers)."
    ),
]


class ResourceList(_Kube, frozen=True, kw_only=True):
    """Quantities as the object carries them: strings (`"500m"`, `"4Gi"`, `"1"`) or numbers."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    nvidia_gpu: Quantity | None = None


class ResourceRequirements(_Kube, frozen=True, kw_only=True):
    requests: ResourceList = field(default_factory=ResourceList)
    limits: ResourceList = field(default_factory=ResourceList)


class Condition(_Kube, frozen=True, kw_only=True):
    """A status condition (pods, nodes, AppWrappers)."""

    type: str
    status: str
    reason: str | None = None
    last_transition_time: UtcDateTime | None = None


# ----------------------------------------------------------------------------- pods


class Container(_Kube, frozen=True, kw_only=True):
    name: str
    resources: ResourceRequirements = field(default_factory=ResourceRequirements)


class PodSpec(_Kube, frozen=True, kw_only=True):
    node_name: str | None = None
    containers: tuple[Container, ...] = ()
    termination_grace_period_seconds: int | None = None


class PodStatus(_Kube, frozen=True, kw_only=True):
    phase: str | None = None
    reason: str | None = None
    conditions: tuple[Condition, ...] = ()


class PodObject(_Kube, frozen=True, kw_only=True):
    """Slim Pod: identity, deletion state, node, phase, readiness and requests."""

    kind: Kind = "Pod"
    api_version: ApiVersion = "v1"
    metadata: ObjectMeta
    spec: PodSpec = field(default_factory=PodSpec)
    status: PodStatus = field(default_factory=PodStatus)

    @property
    def ready(self) -> bool:
        """The pod's `Ready` condition is `True`."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)


# ---------------------------------------------------------------------------- nodes


class Taint(_Kube, frozen=True, kw_only=True):
    key: str
    value: str | None = None
    effect: str
    time_added: UtcDateTime | None = None


class NodeSpec(_Kube, frozen=True, kw_only=True):
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class NodeStatus(_Kube, frozen=True, kw_only=True):
    conditions: tuple[Condition, ...] = ()
    allocatable: ResourceList = field(default_factory=ResourceList)


class NodeObject(_Kube, frozen=True, kw_only=True):
    """Slim Node: conditions, taints, schedulability and allocatable capacity."""

    kind: Kind = "Node"
    api_version: ApiVersion = "v1"
    metadata: ObjectMeta
    spec: NodeSpec = field(default_factory=NodeSpec)
    status: NodeStatus = field(default_factory=NodeStatus)


# ---------------------------------------------------------------------- AppWrappers


class Requeuing(_Kube, frozen=True, kw_only=True):
    """`spec.schedulingSpec.requeuing`; absent fields mean "operator default"."""

    time_in_seconds: int | None = None
    growth_type: str | None = None
    max_time_in_seconds: int | None = None
    max_num_requeuings: int | None = None
    pause_time_in_seconds: int | None = None
    force_deletion_time_in_seconds: int | None = None
    stuck_alert_time_in_seconds: int | None = None
    finalizer_removal: str | None = None


class DispatchDuration(_Kube, frozen=True, kw_only=True):
    limit: int | None = None


class SchedulingSpec(_Kube, frozen=True, kw_only=True):
    min_available: int | None = None
    requeuing: Requeuing = field(default_factory=Requeuing)
    dispatch_duration: DispatchDuration = field(default_factory=DispatchDuration)


class AppWrapperResources(_Kube, frozen=True, kw_only=True):
    generic_items: Annotated[
        tuple[dict[str, Any], ...],
        Meta(description="GenericItems as written by the user: arbitrary templates."),
    ] = ()


class AppWrapperSpec(_Kube, frozen=True, kw_only=True):
    priority: int | None = None
    scheduling_spec: SchedulingSpec = field(default_factory=SchedulingSpec)
    resources: AppWrapperResources = field(default_factory=AppWrapperResources)


class StuckStatus(_Kube, frozen=True, kw_only=True):
    """`status.clearance.stuck[]` entry."""

    kind: str
    name: str
    uid: str
    node: str | None = None
    reason: str | None = None


class ClearanceStatus(_Kube, frozen=True, kw_only=True):
    """`status.clearance`: the teardown bookkeeping Clearance writes on the AppWrapper."""

    attempt: int | None = None
    teardown_started_at: UtcDateTime | None = None
    cleared_at: UtcDateTime | None = None
    stuck: tuple[StuckStatus, ...] = ()
    cycle_traceparent: Annotated[
        str | None,
        Meta(description="W3C traceparent of the open requeue cycle (the dispatcher's root)."),
    ] = None


class AppWrapperStatus(_Kube, frozen=True, kw_only=True):
    state: str | None = None
    number_of_requeueings: int | None = None
    requeueing_time_in_seconds: int | None = None
    conditions: tuple[Condition, ...] = ()
    clearance: ClearanceStatus | None = None


class AppWrapperObject(_Kube, frozen=True, kw_only=True):
    """The AppWrapper spec/status subset the dispatcher and tracker act on."""

    kind: Kind = "AppWrapper"
    api_version: ApiVersion = "workload.codeflare.dev/v1beta1"
    metadata: ObjectMeta
    spec: AppWrapperSpec = field(default_factory=AppWrapperSpec)
    status: AppWrapperStatus = field(default_factory=AppWrapperStatus)


# ---------------------------------------------------------------------------- items


class ItemObject(_Kube, frozen=True, kw_only=True):
    """A generic item of any kind (Job, Service, PyTorchJob, ...): identity only."""

    kind: Kind
    api_version: ApiVersion
    metadata: ObjectMeta


# ----------------------------------------------------------------- snapshot helpers


def snapshot_pod(raw: dict[str, Any]) -> PodObject:
    """Slim a Kubernetes Pod JSON dict; raises `msgspec.ValidationError` if unusable."""
    return msgspec.convert(raw, PodObject)


def snapshot_node(raw: dict[str, Any]) -> NodeObject:
    """Slim a Kubernetes Node JSON dict."""
    return msgspec.convert(raw, NodeObject)


def snapshot_appwrapper(raw: dict[str, Any]) -> AppWrapperObject:
    """Slim an AppWrapper JSON dict."""
    return msgspec.convert(raw, AppWrapperObject)


def snapshot_item(
    raw: dict[str, Any], *, kind: str | None = None, api_version: str | None = None
) -> ItemObject:
    """Slim a generic item; `kind`/`api_version` fill in what list items omit."""
    filled = dict(raw)
    if kind is not None:
        filled.setdefault("kind", kind)
    if api_version is not None:
        filled.setdefault("apiVersion", api_version)
    return msgspec.convert(filled, ItemObject)


# ------------------------------------------------------------------------- references


class ObjectRef(_Kube, frozen=True, kw_only=True):
    """Identity of one Kubernetes object, pinned by UID."""

    kind: Kind
    api_version: ApiVersion
    namespace: Namespace | None = None
    name: Name
    uid: Uid


class AppWrapperRef(_Kube, frozen=True, kw_only=True):
    """Identity of the AppWrapper a cycle or alert event is about."""

    namespace: Namespace
    name: Name
    uid: Uid


# ------------------------------------------------------------------------ the union


class _Event(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: the `type` tag, and the helpers every event has."""

    # Set per family: the stream the event is published to.
    stream: ClassVar[str]

    @property
    def event_type(self) -> str:
        """The `type` tag, e.g. `cycle.teardown.started`."""
        tag = type(self).__struct_config__.tag
        assert isinstance(tag, str)
        return tag

    def subject(self) -> str:
        """The NATS subject this event is published on."""
        raise NotImplementedError

    def msg_id(self) -> str:
        """Deterministic `Nats-Msg-Id` (see the module docstring)."""
        raise NotImplementedError


# ----------------------------------------------------------------------- kube events


class SnapshotProblem(Struct, frozen=True, kw_only=True):
    """Why a kube event's `object` is partial rather than the complete snapshot.

    The watcher never drops an object it can identify. When the stored object does not
    decode whole into its snapshot type (a wrong type the API accepted, a value outside the
    snapshot's constraints), it publishes what did decode and says what did not; when an
    event is above the NATS max payload, it publishes a reduced snapshot and says so. In
    both cases `object.metadata` `name`, `uid` and `resourceVersion` are exact and every
    path in `dropped` is left at its default (or, for a map, incomplete): what is missing
    there is no fact about the object.
    """

    message: Annotated[
        str,
        Meta(
            min_length=1,
            description="What went wrong, in words: the decode error as the decoder "
            "reported it, or the payload size.",
        ),
    ]
    path: Annotated[
        str,
        Meta(
            min_length=1,
            description="JSON path of the value that failed to decode, in the object as "
            "stored (`$.spec.containers[0].resources.limits.nvidia.com/gpu`); `$` when "
            "the object as a whole is at fault (too large).",
        ),
    ]
    dropped: Annotated[
        tuple[str, ...],
        Meta(
            description="Paths of the snapshot left at their default or incomplete "
            "(`$.metadata.ownerReferences[0]`; `$.metadata.labels` when foreign labels "
            "were cut for size; `$.spec` for an AppWrapper whose spec did not decode: an "
            "AppWrapper spec is published whole or not at all)."
        ),
    ] = ()


class _KubeEvent(_Event, frozen=True, kw_only=True):
    stream: ClassVar[str] = subjects.KUBE_STREAM
    kube_kind: ClassVar[subjects.KubeKind]

    action: Annotated[WatchAction, Meta(description="Watch event type.")]
    inferred: Annotated[
        bool,
        Meta(
            description="True for a DELETED the watcher inferred because a relist no "
            "longer contained the object (the real DELETED was missed)."
        ),
    ] = False
    observed_at: Annotated[UtcDateTime, Meta(description="When the watcher saw it.")]
    problem: Annotated[
        SnapshotProblem | None,
        Meta(
            description="Set when the object did not decode whole: `object` then holds "
            "its identity and whatever else decoded (see SnapshotProblem). Absent on a "
            "complete snapshot."
        ),
    ] = None

    # Each kind narrows this to its own snapshot type.
    object: PodObject | NodeObject | AppWrapperObject | ItemObject

    def subject(self) -> str:
        meta = self.object.metadata
        return subjects.kube_subject(self.kube_kind, meta.namespace, meta.name)

    def msg_id(self) -> str:
        # The kind token keeps apart the two events of one object watched twice: a bare Pod
        # wrapped by an AppWrapper is both a `pod` and an `item` (same uid and version).
        meta = self.object.metadata
        if self.action == "DELETED":
            return f"{self.kube_kind}:{meta.uid}:DELETED"
        return f"{self.kube_kind}:{meta.uid}:{meta.resource_version}"


class KubeAppWrapperEvent(_KubeEvent, frozen=True, kw_only=True, tag="kube.appwrapper"):
    """An AppWrapper was added, modified or deleted (watcher).

    With `problem` set and `$.spec` in `problem.dropped`, the stored spec did not decode:
    `object.spec` is empty, the AppWrapper must not be dispatched from this event, and the
    dispatcher marks it Failed naming `problem.path` (DESIGN §3).
    """

    kube_kind: ClassVar[subjects.KubeKind] = "appwrapper"
    object: AppWrapperObject


class KubePodEvent(_KubeEvent, frozen=True, kw_only=True, tag="kube.pod"):
    """A pod carrying an AppWrapper label was added, modified or deleted (watcher)."""

    kube_kind: ClassVar[subjects.KubeKind] = "pod"
    object: PodObject


class KubeNodeEvent(_KubeEvent, frozen=True, kw_only=True, tag="kube.node"):
    """A node was added, modified or deleted (watcher); subject namespace is `_`."""

    kube_kind: ClassVar[subjects.KubeKind] = "node"
    object: NodeObject


class KubeItemEvent(_KubeEvent, frozen=True, kw_only=True, tag="kube.item"):
    """A generic item created for an AppWrapper changed (watcher)."""

    kube_kind: ClassVar[subjects.KubeKind] = "item"
    object: ItemObject


# ---------------------------------------------------------------------- cycle events


class _AboutAppWrapper(_Event, frozen=True, kw_only=True):
    appwrapper: AppWrapperRef
    attempt: Attempt
    occurred_at: Annotated[UtcDateTime, Meta(description="When the fact happened.")]
    cycle_traceparent: Traceparent | None = None

    def _short_type(self) -> str:
        # "cycle.teardown.started" → "teardown.started": the subject's event tokens.
        return self.event_type.split(".", 1)[1]

    def _id_suffix(self) -> str | None:
        return None

    def msg_id(self) -> str:
        base = f"{self.appwrapper.uid}:{self.attempt}:{self.event_type}"
        suffix = self._id_suffix()
        return base if suffix is None else f"{base}:{suffix}"


class _CycleEvent(_AboutAppWrapper, frozen=True, kw_only=True):
    stream: ClassVar[str] = subjects.CYCLE_STREAM

    def subject(self) -> str:
        aw = self.appwrapper
        return subjects.cycle_subject(aw.namespace, aw.name, self._short_type())


class CycleDispatched(_CycleEvent, frozen=True, kw_only=True, tag="cycle.dispatched"):
    """The dispatcher created the generic items of `attempt` (dispatcher)."""

    items: Annotated[
        tuple[ObjectRef, ...], Meta(description="Objects created for this attempt.")
    ] = ()


class CycleRequeued(_CycleEvent, frozen=True, kw_only=True, tag="cycle.requeued"):
    """The dispatcher decided to requeue `attempt` and bumped the requeue count."""

    reason: Annotated[str, Meta(min_length=1, description="Why, in words.")]
    number_of_requeueings: Count
    running: Count = 0
    succeeded: Count = 0
    min_available: Count = 0


class TeardownPolicy(Struct, frozen=True, kw_only=True):
    """Deadlines of one teardown, resolved from the AppWrapper and operator defaults."""

    stuck_alert_seconds: Annotated[int, Meta(ge=0)] = 60
    force_deletion_seconds: Annotated[
        int, Meta(description="Grace-0 delete after this many seconds; <= 0 disables.")
    ] = 570
    finalizer_removal: Literal["Never", "AfterForceDeletion"] = "Never"
    pause_seconds: Annotated[int, Meta(ge=0, description="Wait after cleared.")] = 90


class CycleTeardownStarted(_CycleEvent, frozen=True, kw_only=True, tag="cycle.teardown.started"):
    """The dispatcher issued the deletions of `attempt`; deadlines count from here."""

    inventory: Annotated[
        tuple[ObjectRef, ...],
        Meta(description="Objects the dispatcher knows must go (the tracker adds more)."),
    ]
    policy: TeardownPolicy = field(default_factory=TeardownPolicy)


class CycleDeletionConfirmed(
    _CycleEvent, frozen=True, kw_only=True, tag="cycle.deletion.confirmed"
):
    """The tracker confirmed that one tracked object is gone."""

    object: ObjectRef
    how: Annotated[
        Literal["watch_deleted", "get_404", "uid_changed", "list_absent"],
        Meta(
            description="Evidence: DELETED event, GET 404, same name with a new UID, "
            "or absent from a quorum LIST."
        ),
    ]

    def _id_suffix(self) -> str | None:
        return self.object.uid


class CycleDeletionForced(_CycleEvent, frozen=True, kw_only=True, tag="cycle.deletion.forced"):
    """The tracker force-deleted the remaining objects (grace 0, UID precondition)."""

    objects: Annotated[tuple[ObjectRef, ...], Meta(min_length=1)]


class RemovedFinalizers(Struct, frozen=True, kw_only=True):
    object: ObjectRef
    finalizers: Annotated[tuple[str, ...], Meta(min_length=1)]


class CycleFinalizersRemoved(
    _CycleEvent, frozen=True, kw_only=True, tag="cycle.finalizers.removed"
):
    """The tracker stripped finalizers (only with `finalizerRemoval: AfterForceDeletion`)."""

    removed: Annotated[tuple[RemovedFinalizers, ...], Meta(min_length=1)]


class CycleCleared(_CycleEvent, frozen=True, kw_only=True, tag="cycle.cleared"):
    """Every object of `attempt` is gone and a quorum LIST agrees (tracker only)."""

    cleared_at: UtcDateTime
    teardown_started_at: UtcDateTime | None = None
    confirmed: Annotated[
        tuple[ObjectRef, ...], Meta(description="Every object whose disappearance was confirmed.")
    ] = ()


class CycleRedispatched(_CycleEvent, frozen=True, kw_only=True, tag="cycle.redispatched"):
    """The dispatcher dispatched `attempt` (= N+1) after `cleared` of N and the pause."""

    cleared_at: UtcDateTime
    pause_seconds: Annotated[float, Meta(ge=0)] = 0.0


class CycleFailed(_CycleEvent, frozen=True, kw_only=True, tag="cycle.failed"):
    """The AppWrapper went to Failed (requeue limit, bad spec, dispatch error).

    `attempt` is the torn-down attempt when the failure tears one down; for a refused spec
    (nothing dispatched) it is the attempt that would have been dispatched, and `generation`
    names the refused spec."""

    reason: Annotated[str, Meta(min_length=1)]
    message: str = ""
    generation: (
        Annotated[int, Meta(ge=1, description="metadata.generation of a refused spec.")] | None
    ) = None

    def _id_suffix(self) -> str | None:
        # A spec refused, fixed and refused again is a new fact each time.
        return None if self.generation is None else f"generation-{self.generation}"


class CycleCompleted(_CycleEvent, frozen=True, kw_only=True, tag="cycle.completed"):
    """The AppWrapper completed; no further cycle follows."""

    message: str = ""


# ---------------------------------------------------------------------- diagnosis


class _Cause(Struct, frozen=True, kw_only=True, tag_field="cause"):
    pass


class NodeMissing(_Cause, frozen=True, kw_only=True, tag="node_missing"):
    """The object's node no longer exists."""

    node: str


class NodeNotReady(_Cause, frozen=True, kw_only=True, tag="node_not_ready"):
    """The node's Ready condition is not True."""

    node: str
    status: str | None = None


class NodeUnreachable(_Cause, frozen=True, kw_only=True, tag="node_unreachable"):
    """The node is tainted `node.kubernetes.io/unreachable`."""

    node: str


class NodeOutOfService(_Cause, frozen=True, kw_only=True, tag="node_out_of_service"):
    """The node is tainted `node.kubernetes.io/out-of-service`."""

    node: str


class Finalizers(_Cause, frozen=True, kw_only=True, tag="finalizers"):
    """Finalizers still hold the object."""

    finalizers: Annotated[tuple[str, ...], Meta(min_length=1)]


class InGracePeriod(_Cause, frozen=True, kw_only=True, tag="in_grace_period"):
    """The object is still inside its deletion grace period."""

    seconds_left: Annotated[float, Meta(ge=0)]


class ControllerRecreating(_Cause, frozen=True, kw_only=True, tag="controller_recreating"):
    """A controller keeps recreating the object (a new UID with the same name)."""

    controller: ObjectRef | None = None


class UnknownCause(_Cause, frozen=True, kw_only=True, tag="unknown"):
    """Nothing explains why the object is still there."""

    detail: str = ""


Cause = (
    NodeMissing
    | NodeNotReady
    | NodeUnreachable
    | NodeOutOfService
    | Finalizers
    | InGracePeriod
    | ControllerRecreating
    | UnknownCause
)


class StuckObject(Struct, frozen=True, kw_only=True):
    """Diagnosis of one object that outlived a teardown deadline."""

    object: ObjectRef
    node: str | None = None
    deletion_timestamp: UtcDateTime | None = None
    reasons: Annotated[tuple[Cause, ...], Meta(min_length=1)]


# ---------------------------------------------------------------------- alert events


class _AlertEvent(_AboutAppWrapper, frozen=True, kw_only=True):
    stream: ClassVar[str] = subjects.ALERT_STREAM

    severity: Severity = "warning"
    summary: Annotated[str, Meta(min_length=1, description="One line for a human.")]

    def subject(self) -> str:
        aw = self.appwrapper
        return subjects.alert_subject(self.severity, aw.namespace, aw.name, self._short_type())


EscalationStep = Literal["stuck_alert", "force_deletion", "finalizer_removal"]


class AlertDeletionStuck(_AlertEvent, frozen=True, kw_only=True, tag="alert.deletion.stuck"):
    """Objects of a teardown outlived a deadline; one alert per escalation step."""

    step: Annotated[
        EscalationStep, Meta(description="The deadline that passed with objects left.")
    ] = "stuck_alert"
    elapsed_seconds: Annotated[float, Meta(ge=0, description="Since teardown.started.")]
    stuck: Annotated[tuple[StuckObject, ...], Meta(min_length=1)]

    def _id_suffix(self) -> str | None:
        return self.step


class AlertNodeLost(_AlertEvent, frozen=True, kw_only=True, tag="alert.node.lost"):
    """A node holding objects of this AppWrapper is lost (missing, NotReady, tainted)."""

    node: str
    reasons: Annotated[tuple[Cause, ...], Meta(min_length=1)]
    objects: tuple[ObjectRef, ...] = ()

    def _id_suffix(self) -> str | None:
        return subjects.encode_token(self.node)


class AlertRequeueLimit(_AlertEvent, frozen=True, kw_only=True, tag="alert.requeue.limit"):
    """The AppWrapper reached `maxNumRequeuings` and was marked Failed."""

    severity: Severity = "critical"
    number_of_requeueings: Count
    max_num_requeuings: Annotated[int, Meta(ge=1)]


class AlertDispatchFailed(_AlertEvent, frozen=True, kw_only=True, tag="alert.dispatch.failed"):
    """Creating the generic items of `attempt` failed."""

    reason: Annotated[str, Meta(min_length=1)]
    message: str = ""
    item: ObjectRef | None = None


class AlertDeletionForced(_AlertEvent, frozen=True, kw_only=True, tag="alert.deletion.forced"):
    """The tracker escalated to a grace-0 delete; visible to pagers."""

    objects: Annotated[tuple[ObjectRef, ...], Meta(min_length=1)]


KubeEvent = KubeAppWrapperEvent | KubePodEvent | KubeNodeEvent | KubeItemEvent
CycleEvent = (
    CycleDispatched
    | CycleRequeued
    | CycleTeardownStarted
    | CycleDeletionConfirmed
    | CycleDeletionForced
    | CycleFinalizersRemoved
    | CycleCleared
    | CycleRedispatched
    | CycleFailed
    | CycleCompleted
)
AlertEvent = (
    AlertDeletionStuck
    | AlertNodeLost
    | AlertRequeueLimit
    | AlertDispatchFailed
    | AlertDeletionForced
)
Event = KubeEvent | CycleEvent | AlertEvent

# ------------------------------------------------------------------------- codec

HEADER_MSG_ID: Final = "Nats-Msg-Id"
"""Header carrying :meth:`msg_id`; JetStream dedups on it."""
HEADER_TRACEPARENT: Final = "traceparent"
HEADER_TRACESTATE: Final = "tracestate"

ENCODER: Final = msgspec.json.Encoder()
DECODER: Final = msgspec.json.Decoder(Event)

_PATH_RE: Final = re.compile(r"at `(\$[^`]*)`")


class EventEncodeError(ValueError):
    """An event built in code that would not decode on the other side (e.g. naive time)."""


class EventDecodeError(ValueError):
    """A payload that is not a valid event.

    `path` names the offending field as msgspec reports it (`$.stuck[0].reasons[1]`),
    `$` for a problem with the top-level object (e.g. a missing field), and `None` when
    the bytes are not JSON at all.
    """

    def __init__(self, message: str, *, path: str | None) -> None:
        super().__init__(message)
        self.path = path

    @classmethod
    def from_msgspec(cls, exc: msgspec.DecodeError) -> EventDecodeError:
        message = str(exc)
        match = _PATH_RE.search(message)
        if match:
            return cls(message, path=match.group(1))
        if isinstance(exc, msgspec.ValidationError):
            return cls(f"{message} - at `$`", path="$")
        return cls(message, path=None)


def encode(event: Event, *, validate: bool = True) -> bytes:
    """Encode an event as compact JSON, `type` first.

    Struct constructors do not check constraints, so by default the bytes are decoded
    once more before they leave: a producer bug (a naive datetime, `attempt=0`) fails
    here, loudly, instead of in every consumer's dead-letter queue. It costs about a
    microsecond per event.
    """
    data = ENCODER.encode(event)
    if validate:
        try:
            DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise EventEncodeError(f"{type(event).__name__} is not valid: {exc}") from exc
    return data


def decode(data: bytes | bytearray | memoryview | str) -> Event:
    """Decode and validate one event; raises :class:`EventDecodeError`."""
    try:
        return DECODER.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise EventDecodeError.from_msgspec(exc) from exc
