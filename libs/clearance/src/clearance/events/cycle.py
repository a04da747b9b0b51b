"""The requeue cycle's events on the CYCLE stream, from `cycle.dispatched` through
teardown, confirmation, forcing and finalizer removal to `cycle.cleared`,
`cycle.redispatched`, `cycle.failed` and `cycle.completed`, with the teardown policy
and removed-finalizer records they carry.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, ClassVar, Literal

from msgspec import Meta, Struct, field

from clearance import subjects
from clearance.events.envelope import _AboutAppWrapper
from clearance.events.fields import (
    Count,
    UtcDateTime,
)
from clearance.events.snapshots import ObjectRef


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


ConfirmHow = Annotated[
    Literal["watch_deleted", "get_404", "uid_changed", "list_absent"],
    Meta(
        description="Evidence: DELETED event, GET 404, same name with a new UID, "
        "or absent from a quorum LIST."
    ),
]


class ConfirmedObject(Struct, frozen=True, kw_only=True):
    """One tracked object confirmed gone, and the evidence."""

    object: ObjectRef
    how: ConfirmHow


class CycleDeletionConfirmed(
    _CycleEvent, frozen=True, kw_only=True, tag="cycle.deletion.confirmed"
):
    """The tracker confirmed tracked objects gone: every object one write of the teardown's
    record confirmed (the DELETED events of a burst, or one verification), in one event.
    ``occurred_at`` is the latest of their confirmations."""

    confirmed: Annotated[tuple[ConfirmedObject, ...], Meta(min_length=1)]

    def _id_suffix(self) -> str | None:
        # A UID is confirmed by exactly one record write, so the set of UIDs names the fact.
        uids = sorted(c.object.uid for c in self.confirmed)
        if len(uids) == 1:
            return uids[0]
        return "n" + hashlib.sha256(",".join(uids).encode()).hexdigest()[:24]


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
