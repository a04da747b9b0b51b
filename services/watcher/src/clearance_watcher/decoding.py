"""Raw Kubernetes JSON → slim snapshot → kube event, on the hot path.

The snapshot structs of :mod:`clearance.events` keep the Kubernetes JSON shape and ignore
unknown fields, so one ``msgspec`` decode straight from the watch line's raw ``object``
bytes yields the slim object (no dict, no kubernetes-asyncio model in between). That is
the whole decode path the benchmark measures.

Hostile input (wrong types, a field out of range) fails that decode. The caller then asks
:meth:`Codec.identity` for the object's identity alone: enough to log it, to account for
it in a relist (so it is not mistaken for a deleted object) and to publish its deletion.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec

from clearance import events, subjects
from clearance.events import (
    AppWrapperObject,
    ItemObject,
    KubeAppWrapperEvent,
    KubeEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    NodeObject,
    ObjectMeta,
    PodObject,
    WatchAction,
)
from clearance.informing import meta_of
from clearance.kube import Resource

Snapshot = PodObject | NodeObject | AppWrapperObject | ItemObject


class _Body(msgspec.Struct, frozen=True):
    """Any object reduced to its (validated) metadata; used for items and fallbacks."""

    metadata: ObjectMeta


class _Bookmark(msgspec.Struct, frozen=True):
    class Meta(msgspec.Struct, frozen=True):
        resourceVersion: str = ""  # Kubernetes wire name

    metadata: Meta = msgspec.field(default_factory=Meta)


_BODY: Final = msgspec.json.Decoder(_Body)
_BOOKMARK: Final = msgspec.json.Decoder(_Bookmark)


def bookmark_rv(raw: bytes | msgspec.Raw) -> str:
    """resourceVersion carried by a BOOKMARK (``""`` when absent or malformed)."""
    try:
        return _BOOKMARK.decode(raw).metadata.resourceVersion
    except msgspec.DecodeError:
        return ""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an object is, as far as it could be read (for logs of undecodable objects)."""

    uid: str
    name: str
    namespace: str | None
    resource_version: str

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{where}{self.name} (uid {self.uid or '?'}, rv {self.resource_version or '?'})"


def loose_identity(raw: bytes | msgspec.Raw) -> Identity | None:
    """Identity fields without any constraint checking; None if not even that decodes."""
    try:
        meta = meta_of(raw)
    except msgspec.DecodeError:
        return None
    return Identity(meta.uid, meta.name, meta.namespace, meta.resourceVersion)


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

    def identity_snapshot(self, raw: bytes | msgspec.Raw) -> Snapshot | None:
        """A snapshot holding only the (valid) metadata, or None if even that fails."""
        try:
            meta = _BODY.decode(raw).metadata
        except msgspec.DecodeError:
            return None
        return self.bare(meta)

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
    ) -> KubeEvent:
        if isinstance(snapshot, PodObject):
            return KubePodEvent(
                action=action, inferred=inferred, observed_at=observed_at, object=snapshot
            )
        if isinstance(snapshot, NodeObject):
            return KubeNodeEvent(
                action=action, inferred=inferred, observed_at=observed_at, object=snapshot
            )
        if isinstance(snapshot, AppWrapperObject):
            return KubeAppWrapperEvent(
                action=action, inferred=inferred, observed_at=observed_at, object=snapshot
            )
        return KubeItemEvent(
            action=action, inferred=inferred, observed_at=observed_at, object=snapshot
        )


def encode_event(event: KubeEvent) -> bytes:
    """Event bytes; no re-validation: the snapshot came out of a validating decode."""
    return events.ENCODER.encode(event)
