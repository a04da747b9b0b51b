"""The events the watcher publishes on the KUBE stream: one per watch event of an
AppWrapper, a Pod, a Node or a generic item, each carrying the object's snapshot, and
the `SnapshotProblem` that says when that snapshot is partial.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from msgspec import Meta, Struct

from clearance import subjects
from clearance.events.envelope import _Event
from clearance.events.fields import (
    UtcDateTime,
    WatchAction,
)
from clearance.events.snapshots import (
    AppWrapperObject,
    ItemObject,
    NodeObject,
    PodObject,
)


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
