"""Raw Kubernetes JSON → slim snapshot → kube event, on the hot path.

The snapshot structs of :mod:`clearance.events` keep the Kubernetes JSON shape and ignore
unknown fields, so one ``msgspec`` decode straight from the watch line's raw ``object``
bytes yields the slim object (no dict, no kubernetes-asyncio model in between). That is
the whole decode path the benchmark measures.

Hostile input (wrong types, a field out of range) fails that decode. :meth:`Codec.read`
then salvages what does decode (:mod:`clearance_watcher.salvage`) and says what did not in
a :class:`~clearance.events.SnapshotProblem`: the watcher publishes that partial snapshot
with the problem instead of dropping the object, so nobody is blind to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec

from clearance import events, subjects, testfaults
from clearance.events import (
    AppWrapperObject,
    EventDecodeError,
    ItemObject,
    KubeAppWrapperEvent,
    KubeEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    NodeObject,
    ObjectMeta,
    PodObject,
    SnapshotProblem,
    WatchAction,
)
from clearance.kube import Resource
from clearance_watcher.salvage import Unsalvageable, salvage

Snapshot = PodObject | NodeObject | AppWrapperObject | ItemObject


class _Body(msgspec.Struct, frozen=True):
    """Any object reduced to its (validated) metadata: what the watcher publishes of an item."""

    metadata: ObjectMeta


_BODY: Final = msgspec.json.Decoder(_Body)

_SNAPSHOT_TYPES: Final[dict[str, type[PodObject | NodeObject | AppWrapperObject]]] = {
    "pod": PodObject,
    "node": NodeObject,
    "appwrapper": AppWrapperObject,
}
_ATOMIC: Final[dict[str, tuple[str, ...]]] = {"appwrapper": ("$.spec",)}
"""Paths never published half-decoded: half an AppWrapper spec must not be dispatched."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What the watcher could make of one object as stored."""

    snapshot: Snapshot | None
    """None: not even a valid identity decodes; nothing can be published about it."""
    problem: SnapshotProblem | None = None
    """Set when ``snapshot`` is partial (or missing): what failed to decode, what was dropped."""
    raw: msgspec.Raw | None = None
    """The stored JSON, kept only for an object with a problem (its kinds are read from it)."""


class Codec:
    """Decodes one resource's objects and wraps them in the matching kube event."""

    def __init__(self, resource: Resource, kube_kind: subjects.KubeKind) -> None:
        self.resource = resource
        self.kube_kind: subjects.KubeKind = kube_kind
        self._kind = resource.kind
        self._api_version = resource.api_version
        self._decoder: msgspec.json.Decoder[Any]
        if kube_kind == "pod":
            self._decoder = msgspec.json.Decoder(PodObject)
        elif kube_kind == "node":
            self._decoder = msgspec.json.Decoder(NodeObject)
        elif kube_kind == "appwrapper":
            self._decoder = msgspec.json.Decoder(AppWrapperObject)
        else:
            self._decoder = _BODY

    def decode(self, raw: bytes | msgspec.Raw) -> Snapshot:
        """The slim snapshot; raises ``msgspec.DecodeError`` (incl. ValidationError)."""
        decoded = self._decoder.decode(raw)
        if self.kube_kind == "item":
            return ItemObject(
                kind=self._kind, api_version=self._api_version, metadata=decoded.metadata
            )
        snapshot: Snapshot = decoded
        # List items carry no kind/apiVersion and the struct defaults name the default
        # AppWrapper group; the resource we watch is the truth.
        if snapshot.api_version != self._api_version or snapshot.kind != self._kind:
            snapshot = msgspec.structs.replace(
                snapshot, api_version=self._api_version, kind=self._kind
            )
        return snapshot

    def read(self, raw: msgspec.Raw) -> Reading:
        """:meth:`decode`, or on failure what :meth:`salvage` can make of the object."""
        try:
            return Reading(self.decode(raw))
        except msgspec.DecodeError as exc:
            if testfaults.active("drop-undecodable"):
                where = EventDecodeError.from_msgspec(exc).path or "$"
                problem = SnapshotProblem(message=str(exc), path=where)
                return Reading(None, problem, msgspec.Raw(bytes(raw)))
            return self.salvage(raw, exc)

    def salvage(self, raw: bytes | msgspec.Raw, error: msgspec.DecodeError) -> Reading:
        """The partial snapshot of an object that failed :meth:`decode` with ``error``."""
        where = EventDecodeError.from_msgspec(error).path or "$"
        stored = msgspec.Raw(bytes(raw))
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return Reading(None, SnapshotProblem(message=str(error), path="$"), stored)
        cls = _SNAPSHOT_TYPES.get(self.kube_kind)
        snapshot: Snapshot
        try:
            if cls is None:
                meta_data = data.get("metadata") if isinstance(data, dict) else None
                meta, dropped = salvage(meta_data, ObjectMeta, path="$.metadata")
                snapshot = self.bare(meta)
            else:
                atomic = _ATOMIC.get(self.kube_kind, ())
                salvaged, dropped = salvage(data, cls, atomic=atomic)
                snapshot = msgspec.structs.replace(
                    salvaged, api_version=self._api_version, kind=self._kind
                )
        except Unsalvageable as exc:
            problem = SnapshotProblem(message=str(error), path=where, dropped=(exc.path,))
            return Reading(None, problem, stored)
        problem = SnapshotProblem(message=str(error), path=where, dropped=dropped)
        return Reading(snapshot, problem, stored)

    def bare(self, meta: ObjectMeta) -> Snapshot:
        """An identity-only snapshot of this resource's kind."""
        if self.kube_kind == "pod":
            return PodObject(metadata=meta)
        if self.kube_kind == "node":
            return NodeObject(metadata=meta)
        if self.kube_kind == "appwrapper":
            return AppWrapperObject(metadata=meta, api_version=self._api_version, kind=self._kind)
        return ItemObject(kind=self._kind, api_version=self._api_version, metadata=meta)

    def event(
        self,
        action: WatchAction,
        snapshot: Snapshot,
        *,
        observed_at: datetime,
        inferred: bool = False,
        problem: SnapshotProblem | None = None,
    ) -> KubeEvent:
        # Keyword arguments spelled out per class: a dict of the common ones unpacked with
        # ** costs more than the event itself (this runs for every watch line).
        if isinstance(snapshot, PodObject):
            return KubePodEvent(
                action=action,
                inferred=inferred,
                observed_at=observed_at,
                problem=problem,
                object=snapshot,
            )
        if isinstance(snapshot, NodeObject):
            return KubeNodeEvent(
                action=action,
                inferred=inferred,
                observed_at=observed_at,
                problem=problem,
                object=snapshot,
            )
        if isinstance(snapshot, AppWrapperObject):
            return KubeAppWrapperEvent(
                action=action,
                inferred=inferred,
                observed_at=observed_at,
                problem=problem,
                object=snapshot,
            )
        return KubeItemEvent(
            action=action,
            inferred=inferred,
            observed_at=observed_at,
            problem=problem,
            object=snapshot,
        )


def encode_event(event: KubeEvent) -> bytes:
    """Event bytes; no re-validation: the snapshot came out of a validating decode."""
    return events.ENCODER.encode(event)
