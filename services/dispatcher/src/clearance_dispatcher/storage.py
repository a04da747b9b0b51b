"""Where the dispatcher keeps its bookkeeping (:class:`~clearance.bookkeeping.ClearanceStatus`).

:class:`Storage` is the contract; :class:`StatusStorage` keeps the bookkeeping in
``status.clearance`` (the project's CRD preserves it), one status patch carrying everything.
MCAD v1's upstream AppWrapper CRD declares no ``status.clearance`` and does not preserve unknown
status fields, so the API server drops the bookkeeping of every status write. Annotations are
never pruned, so :class:`AnnotationStorage` keeps it in ``metadata.annotations[clearance.dev/
bookkeeping]`` — one JSON document holding the bookkeeping **and** the MCAD-visible status fields
the dispatcher last decided (its "mirror"). That document is written in one resourceVersion-guarded
patch of the object: the commit point of a transition. The ``/status`` subresource (which cannot
carry metadata) is then written with the mirror; a crash or a conflict between the two leaves the
status behind, and every later write — also a reconcile whose transition has nothing to do —
re-sends what lags (:meth:`AnnotationStorage.writes`), so the status converges and no decision is
ever taken from it: the dispatcher reads the mirror (:meth:`AnnotationStorage.status`).

:class:`Bookkeeping` is the storage a dispatcher uses: ``status`` or ``annotations`` as chosen
(setting ``CLEARANCE_BOOKKEEPING``), or in ``auto`` mode whichever the served CRD schema keeps
(:mod:`clearance_dispatcher.crdschema` decides, at start-up and on every change of the CRD). Both
storages read the other's place when their own is empty, so switching loses nothing that is
still stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from clearance import testfaults
from clearance.bookkeeping import (
    BOOKKEEPING_ANNOTATION,
    LAYOUT,
    ClearanceStatus,
    annotation_document,
    parse,
    render,
)

StorageKind = Literal["status", "annotations"]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class Write:
    """One JSON merge patch: on ``/status`` (``subresource="status"``) or on the object."""

    subresource: Literal["status"] | None
    body: dict[str, Any]


class Storage(Protocol):
    """Where the bookkeeping of an AppWrapper is kept."""

    def read(self, raw: Mapping[str, Any]) -> ClearanceStatus: ...

    def status(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """The MCAD-visible status as last committed (what decisions read)."""
        ...

    def writes(
        self,
        status_patch: dict[str, Any],
        clearance: ClearanceStatus | None,
        *,
        raw: Mapping[str, Any] | None = None,
    ) -> tuple[Write, ...]:
        """The patches that store ``status_patch`` (the MCAD-visible status fields) and the
        new ``clearance`` (None: unchanged) on ``raw``, the object as read. The first one is
        the commit point: it carries the resourceVersion guard."""
        ...


class StatusStorage:
    """``status.clearance`` on the status subresource: one patch carries everything."""

    def read(self, raw: Mapping[str, Any]) -> ClearanceStatus:
        status = raw.get("status")
        cl = status.get("clearance") if isinstance(status, Mapping) else None
        return parse(cl if isinstance(cl, Mapping) else {})

    def status(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        status = raw.get("status")
        return status if isinstance(status, Mapping) else {}

    def writes(
        self,
        status_patch: dict[str, Any],
        clearance: ClearanceStatus | None,
        *,
        raw: Mapping[str, Any] | None = None,
    ) -> tuple[Write, ...]:
        body = dict(status_patch)
        if clearance is not None:
            body["clearance"] = render(clearance)
        return (Write("status", {"status": body}),) if body else ()


STATUS_STORAGE: Final = StatusStorage()


class AnnotationStorage:
    """The bookkeeping and its status mirror in one annotation; ``/status`` follows it."""

    def __init__(self) -> None:
        self.pruned: set[str] = set()
        """Top-level status fields the served schema drops (learnt by read-back): never
        re-sent, or every reconcile would write them again."""

    def read(self, raw: Mapping[str, Any]) -> ClearanceStatus:
        doc = annotation_document(raw)
        if doc is None:
            return STATUS_STORAGE.read(raw)  # kept under a CRD that preserved it
        return parse(_mapping(doc.get("clearance")))

    def status(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        status = dict(_mapping(raw.get("status")))
        doc = annotation_document(raw)
        if doc is not None and not testfaults.active("lagging-status"):
            status.update(_mapping(doc.get("status")))
        return status

    def writes(
        self,
        status_patch: dict[str, Any],
        clearance: ClearanceStatus | None,
        *,
        raw: Mapping[str, Any] | None = None,
    ) -> tuple[Write, ...]:
        raw = raw or {}
        doc = annotation_document(raw)
        old_mirror = dict(_mapping(doc.get("status"))) if doc is not None else {}
        mirror = dict(old_mirror)
        for key, value in status_patch.items():
            if value is None:
                mirror.pop(key, None)
            else:
                mirror[key] = value
        out: list[Write] = []
        if clearance is not None or mirror != old_mirror:
            bookkeeping = clearance if clearance is not None else self.read(raw)
            document = {"version": LAYOUT, "clearance": render(bookkeeping), "status": mirror}
            value = json.dumps(document, separators=(",", ":"), sort_keys=True)
            out.append(Write(None, {"metadata": {"annotations": {BOOKKEEPING_ANNOTATION: value}}}))
        live = _mapping(raw.get("status"))
        lag: dict[str, Any] = {
            k: v for k, v in mirror.items() if k not in self.pruned and live.get(k) != v
        }
        lag.update({k: None for k in old_mirror if k not in mirror and k in live})
        if testfaults.active("lagging-status"):
            lag = dict(status_patch)  # the status follows the patches, never repaired
        if lag:
            out.append(Write("status", {"status": lag}))
        return tuple(out)

    def learn_pruned(self, fields: set[str]) -> None:
        self.pruned |= fields


class Bookkeeping:
    """The storage in use: one of the two, switched by :meth:`use` (auto mode, CRD change)."""

    def __init__(self, kind: StorageKind = "status") -> None:
        self.annotations = AnnotationStorage()
        self.kind: StorageKind = kind
        self.switches = 0
        """How often the storage changed (entries cache their parsed status per value)."""

    @property
    def current(self) -> Storage:
        return self.annotations if self.kind == "annotations" else STATUS_STORAGE

    def use(self, kind: StorageKind) -> bool:
        """Switch to ``kind``; True when that is a change."""
        if kind == self.kind:
            return False
        self.kind = kind
        self.switches += 1
        return True

    def read(self, raw: Mapping[str, Any]) -> ClearanceStatus:
        if self.kind == "status" and not _mapping(_mapping(raw.get("status")).get("clearance")):
            doc = annotation_document(raw)  # kept in the annotation before a switch to status
            if doc is not None:
                return parse(_mapping(doc.get("clearance")))
        return self.current.read(raw)

    def status(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        return self.current.status(raw)

    def writes(
        self,
        status_patch: dict[str, Any],
        clearance: ClearanceStatus | None,
        *,
        raw: Mapping[str, Any] | None = None,
    ) -> tuple[Write, ...]:
        return self.current.writes(status_patch, clearance, raw=raw)
