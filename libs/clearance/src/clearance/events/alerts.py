"""The alert events on the ALERT stream (stuck deletions, lost nodes, the requeue
limit, failed dispatches, forced deletions) and the diagnosis they carry: the causes
that explain why an object outlived its teardown deadline.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from msgspec import Meta, Struct

from clearance import subjects
from clearance.events.envelope import _AboutAppWrapper
from clearance.events.fields import (
    Count,
    Severity,
    UtcDateTime,
)
from clearance.events.snapshots import ObjectRef


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
