"""The slim Kubernetes snapshots a kube event carries (pods, nodes, AppWrappers and
generic items, with the metadata, spec and status parts Clearance reads), the helpers
that cut a raw API dict down to one, and the object and AppWrapper references that
cycle and alert events point with.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, field

from clearance.events.fields import (
    ApiVersion,
    Kind,
    Name,
    Namespace,
    Uid,
    UtcDateTime,
    _Kube,
)


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
