"""A read-only view of an AppWrapper's status as a person (or ``clearance explain``) reads it.

The MCAD-visible fields (``state``, ``numberOfRequeueings``, the true conditions) are read here;
the dispatcher's bookkeeping is read by :func:`clearance.bookkeeping.parse`, the same parser the
dispatcher uses, from ``status.clearance`` or — under a CRD that prunes unknown status fields
(MCAD's upstream one) — from the annotation ``clearance.dev/bookkeeping``, whose status fields
win over ``/status`` (it may lag behind). Everything is read leniently (a field of the wrong type
reads as absent) and nothing is written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clearance.bookkeeping import ClearanceStatus, annotation_document, parse


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class AppWrapperStatus:
    """The MCAD-visible status fields plus the bookkeeping."""

    state: str | None = None
    requeues: int = 0
    conditions: tuple[str, ...] = ()
    """Types of the conditions whose status is ``True``, in the order stored."""
    bookkeeping: ClearanceStatus = field(default_factory=ClearanceStatus)


def parse_status(status: object) -> AppWrapperStatus:
    """Read an AppWrapper's ``status`` (any JSON value; not a mapping reads as empty)."""
    if not isinstance(status, Mapping):
        return AppWrapperStatus()
    conditions = status.get("conditions")
    true_conditions = tuple(
        str(c["type"])
        for c in (conditions if isinstance(conditions, list) else [])
        if isinstance(c, Mapping) and c.get("status") == "True" and _str(c.get("type"))
    )
    cl = status.get("clearance")
    return AppWrapperStatus(
        state=_str(status.get("state")),
        requeues=max(_int(status.get("numberOfRequeueings")) or 0, 0),
        conditions=true_conditions,
        bookkeeping=parse(cl if isinstance(cl, Mapping) else {}),
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_appwrapper(raw: Mapping[str, Any]) -> AppWrapperStatus:
    """Read the status of a whole AppWrapper object: from the bookkeeping annotation when it
    holds a readable document (its status fields over ``/status``), else from ``status``."""
    status = dict(_mapping(raw.get("status")))
    document = annotation_document(raw) or {}
    if document:
        status.update(_mapping(document.get("status")))
        status["clearance"] = _mapping(document.get("clearance"))
    return parse_status(status)
