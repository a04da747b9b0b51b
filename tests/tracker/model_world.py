"""The tracker model's ground truth: one AppWrapper's objects in an in-memory API server.

This module owns what the tracker's state machine (test_model_teardown) treats as the truth
about the cluster: objects by UID with kind, name, attempt, owner, finalizers, a terminating
state and a node that may be lost; names unique among existing objects (a name is reused only
after its object is gone, with a new UID); every change emitted as a watch event kept for
delivery in any order, duplicated, dropped, or replayed stale, plus the informer relist that
re-announces what exists and what vanished. Reads answer from the present (quorum LIST by the
AppWrapper label, GET by name), deletes and the finalizer patch honour UID preconditions like
the API server does. No sockets, no clocks: the machine passes ``now``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec

from clearance import labels
from clearance.events import AppWrapperRef, ItemObject, ObjectRef, PodObject
from clearance_tracker.confirmation import GetResult, Missing, Snapshot

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "team-a"
AW = AppWrapperRef(namespace=NAMESPACE, name="job1", uid="aw-uid-1")
OTHER_AW = AppWrapperRef(namespace=NAMESPACE, name="job2", uid="aw-uid-2")
"""Another AppWrapper in the namespace: its objects must never be tracked or touched."""

JOB = ("batch/v1", "Job")
CONFIGMAP = ("v1", "ConfigMap")
POD = ("v1", "Pod")
ITEMS: tuple[tuple[tuple[str, str], str], ...] = (
    (JOB, "job1-job"),
    (CONFIGMAP, "job1-cm"),
    (POD, "job1-solo"),  # a bare Pod wrapped as a generic item
)

Action = Literal["ADDED", "MODIFIED", "DELETED"]
DeleteAnswer = Literal["deleted", "terminating", "not_found", "conflict"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Obj:
    """One object as the API server holds it."""

    uid: str
    api_version: str
    kind: str
    name: str
    appwrapper: AppWrapperRef
    attempt: int
    owner: tuple[str, str, str] | None = None  # (kind, name, uid) of the controller owner
    finalizers: tuple[str, ...] = ()
    deleting_since: datetime | None = None
    node_lost: bool = False
    """A pod on a lost node: the kubelet never confirms its termination (force deletion does)."""
    forced: bool = False
    """Deleted with grace 0: gone as soon as no finalizer holds it."""
    rv: int = 1

    @property
    def is_pod(self) -> bool:
        return (self.api_version, self.kind) == POD

    @property
    def key(self) -> tuple[str, str, str]:
        """What an ownerReference to this object names: (kind, name, uid)."""
        return (self.kind, self.name, self.uid)

    def ref(self) -> ObjectRef:
        return ObjectRef(
            kind=self.kind,
            api_version=self.api_version,
            namespace=NAMESPACE,
            name=self.name,
            uid=self.uid,
        )

    def snapshot(self) -> Snapshot:
        aw = self.appwrapper
        owner = (
            {
                "apiVersion": JOB[0],
                "kind": self.owner[0],
                "name": self.owner[1],
                "uid": self.owner[2],
            }
            if self.owner
            else {
                "apiVersion": "workload.codeflare.dev/v1beta1",
                "kind": "AppWrapper",
                "name": aw.name,
                "uid": aw.uid,
            }
        )
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": NAMESPACE,
            "uid": self.uid,
            "resourceVersion": str(self.rv),
            "labels": labels.stamp(appwrapper=aw.name, namespace=NAMESPACE, attempt=self.attempt),
            "finalizers": list(self.finalizers),
            "ownerReferences": [owner],
        }
        if self.deleting_since is not None:
            meta["deletionTimestamp"] = self.deleting_since.isoformat()
        raw: dict[str, Any] = {"metadata": meta}
        if self.is_pod:
            raw["spec"] = {"nodeName": "node-1", "containers": [{"name": "c"}]}
            return msgspec.convert(raw, PodObject)
        raw |= {"kind": self.kind, "apiVersion": self.api_version}
        return msgspec.convert(raw, ItemObject)


@dataclass(frozen=True)
class WatchEvent:
    action: Action
    snapshot: Snapshot
    seq: int


@dataclass
class Cluster:
    """The API server of the model: objects, removals in commit order, the watch stream."""

    objects: dict[str, Obj] = field(default_factory=dict)
    removed: dict[str, Obj] = field(default_factory=dict)
    fresh: list[WatchEvent] = field(default_factory=list)
    """Events just emitted, whose fate (on time, late, lost) the schedule has not drawn yet."""
    pending: list[WatchEvent] = field(default_factory=list)
    """On-time events, in order, not delivered yet."""
    late: list[WatchEvent] = field(default_factory=list)
    """Events held back (a redelivery after an ack timeout): they come after later ones."""
    delivered: list[WatchEvent] = field(default_factory=list)
    """Watch events delivered at least once (a stale replay picks one of these)."""
    lost_deletes: dict[str, WatchEvent] = field(default_factory=dict)
    """DELETED events lost before delivery, by UID (what a relist re-announces)."""
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    # ------------------------------------------------------------------ writes

    def _emit(self, action: Action, obj: Obj) -> None:
        self.fresh.append(WatchEvent(action, obj.snapshot(), next(self._seq)))

    def by_name(self, api_version: str, kind: str, name: str) -> Obj | None:
        for obj in self.objects.values():
            if (obj.api_version, obj.kind, obj.name) == (api_version, kind, name):
                return obj
        return None

    def create(
        self,
        kind: tuple[str, str],
        name: str,
        *,
        appwrapper: AppWrapperRef,
        attempt: int,
        owner: Obj | None = None,
        finalizers: tuple[str, ...] = (),
    ) -> Obj | None:
        """A new object (new UID), or None when the name is taken (409 AlreadyExists)."""
        if self.by_name(*kind, name) is not None:
            return None
        obj = Obj(
            uid=f"u{next(self._uids)}",
            api_version=kind[0],
            kind=kind[1],
            name=name,
            appwrapper=appwrapper,
            attempt=attempt,
            owner=(owner.kind, owner.name, owner.uid) if owner else None,
            finalizers=finalizers,
        )
        self.objects[obj.uid] = obj
        self._emit("ADDED", obj)
        return obj

    def _modify(self, obj: Obj) -> None:
        obj.rv += 1
        self._emit("MODIFIED", obj)

    def _remove(self, obj: Obj) -> None:
        del self.objects[obj.uid]
        self.removed[obj.uid] = obj
        obj.rv += 1
        self._emit("DELETED", obj)

    def delete(self, uid: str, *, now: datetime, grace: bool = True) -> DeleteAnswer:
        """DELETE of object ``uid``: an item without finalizers goes at once; a pod gets a
        deletionTimestamp and waits for its kubelet, unless grace 0; finalizers hold both."""
        target = self.objects.get(uid)
        if target is None:
            return "not_found"
        target.forced = target.forced or not grace
        if (not target.is_pod or not grace) and not target.finalizers:
            self._remove(target)
            return "deleted"
        if target.deleting_since is None:
            target.deleting_since = now
            self._modify(target)
        return "terminating"

    def delete_by_name(
        self, api_version: str, kind: str, name: str, *, uid: str, now: datetime, grace: bool
    ) -> DeleteAnswer:
        """What the tracker's force deletion sends: DELETE name with ``preconditions.uid``."""
        current = self.by_name(api_version, kind, name)
        if current is None:
            return "not_found"
        if current.uid != uid:
            return "conflict"
        return self.delete(uid, now=now, grace=grace)

    def kubelet_finish(self, uid: str) -> bool:
        """A terminating pod on a healthy node without finalizers goes away."""
        obj = self.objects.get(uid)
        if obj is None or not obj.is_pod or obj.deleting_since is None:
            return False
        if obj.node_lost or obj.finalizers:
            return False
        self._remove(obj)
        return True

    def drop_finalizers(self, uid: str) -> None:
        """Finalizers released (their controller, or the tracker's patch): gone if terminating."""
        obj = self.objects[uid]
        obj.finalizers = ()
        if obj.deleting_since is not None and (not obj.is_pod or obj.forced):
            self._remove(obj)
        else:
            self._modify(obj)

    def unfinalize_by_name(self, api_version: str, kind: str, name: str, *, uid: str) -> bool:
        """The tracker's JSON patch: `test` of the UID, then `remove` of the finalizers."""
        current = self.by_name(api_version, kind, name)
        if current is None or current.uid != uid or not current.finalizers:
            return False
        self.drop_finalizers(uid)
        return True

    def lose_node(self, uid: str) -> None:
        self.objects[uid].node_lost = True

    def recover_node(self, uid: str) -> None:
        self.objects[uid].node_lost = False

    def collect_garbage(self, *, now: datetime) -> list[Obj]:
        """Background propagation: dependents of a removed owner get deleted (with grace)."""
        orphans = [
            o
            for o in self.objects.values()
            if o.owner and o.owner[2] not in self.objects and o.deleting_since is None
        ]
        for obj in orphans:
            self.delete(obj.uid, now=now)
        return orphans

    # ------------------------------------------------------------------- reads

    def list_by_label(self, kinds: frozenset[tuple[str, str]], appwrapper: str) -> list[Snapshot]:
        """Quorum LIST by the AppWrapper label of each kind (what exists now, terminating too)."""
        return [
            o.snapshot()
            for o in sorted(self.objects.values(), key=lambda o: o.uid)
            if (o.api_version, o.kind) in kinds and o.appwrapper.name == appwrapper
        ]

    def get(self, api_version: str, kind: str, name: str) -> GetResult:
        current = self.by_name(api_version, kind, name)
        return Missing("") if current is None else current.snapshot()

    def alive_of(self, appwrapper: AppWrapperRef, *, up_to: int) -> list[Obj]:
        """Objects of ``appwrapper`` of attempts ≤ ``up_to`` that still exist (terminating too)."""
        return [
            o for o in self.objects.values() if o.appwrapper == appwrapper and o.attempt <= up_to
        ]

    # -------------------------------------------------------------- the stream

    def route(self, fate: Literal["on_time", "late", "lost"]) -> None:
        """The oldest fresh event goes on time, late, or is lost."""
        event = self.fresh.pop(0)
        if fate == "on_time":
            self.pending.append(event)
        elif fate == "late":
            self.late.append(event)
        elif event.action == "DELETED":
            self.lost_deletes[event.snapshot.metadata.uid] = event

    def next_event(self) -> WatchEvent | None:
        """The oldest on-time event, taken off the stream."""
        if not self.pending:
            return None
        return self._delivered(self.pending.pop(0))

    def late_event(self, index: int) -> WatchEvent | None:
        """One of the late events (``index`` mod their number), after whatever came since."""
        if not self.late:
            return None
        return self._delivered(self.late.pop(index % len(self.late)))

    def _delivered(self, event: WatchEvent) -> WatchEvent:
        self.delivered.append(event)
        self.lost_deletes.pop(event.snapshot.metadata.uid, None)
        return event

    def relist(self) -> None:
        """The watcher's relist after a 410: ADDED for what exists, DELETED for what vanished
        while its DELETED was lost (queued on time, after what is pending)."""
        for obj in sorted(self.objects.values(), key=lambda o: o.uid):
            self.pending.append(WatchEvent("ADDED", obj.snapshot(), next(self._seq)))
        for _, event in sorted(self.lost_deletes.items()):
            self.pending.append(WatchEvent("DELETED", event.snapshot, next(self._seq)))
        self.lost_deletes.clear()
