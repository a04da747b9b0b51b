"""A read-only view of an AppWrapper's status as a person (or ``clearance explain``) reads it.

The dispatcher owns the bookkeeping (``clearance_dispatcher.bookkeeping`` writes it) and
libraries never import services, so this module reads the layout documented in docs/DESIGN.md §2
on its own. It is kept in ``status.clearance``, or — under a CRD that prunes unknown status
fields (MCAD's upstream one) — in the annotation ``clearance.dev/bookkeeping``: one JSON
document ``{"clearance": {...}, "status": {...}}`` holding the bookkeeping and the MCAD-visible
status fields the dispatcher last decided, which win over ``/status`` (it may lag behind). The
layout is read leniently (a field of the wrong type reads as absent) and without
writing anything back. Fields the explanation does not need (the cycle's traceparent aside) are
left out. A status written before layout version 2 has no ``tearingDown`` / ``cycleAttempt``;
they are derived the way DESIGN §2 describes the old layout (an open teardown is one whose
``teardownStartedAt`` is set and ``clearedAt`` is not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

TEARDOWN_PHASES: Final = ("TearingDown", "Failed")
BOOKKEEPING_ANNOTATION: Final = "clearance.dev/bookkeeping"


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp (``Z`` or an offset) as an aware datetime; anything else: None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class StuckReport:
    """One ``status.clearance.stuck[]`` entry: an object the tracker reported stuck."""

    kind: str
    name: str
    uid: str
    node: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class Bookkeeping:
    """``status.clearance`` (DESIGN §2), read only."""

    phase: str | None = None
    attempt: int = 0
    tearing_down: int | None = None
    dispatched_at: datetime | None = None
    teardown_started_at: datetime | None = None
    cleared_at: datetime | None = None
    cycle_traceparent: str | None = None
    cycle_started_at: datetime | None = None
    cycle_attempt: int | None = None
    reason: str | None = None
    stuck: tuple[StuckReport, ...] = ()
    legacy: bool = False

    @property
    def cycle_of(self) -> int | None:
        """The attempt torn down in the current (or last) requeue cycle, if any."""
        return self.cycle_attempt if self.cycle_attempt is not None else self.tearing_down

    @property
    def trace_id(self) -> str | None:
        """The trace id of the cycle's root span (from its W3C traceparent)."""
        parts = (self.cycle_traceparent or "").split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


@dataclass(frozen=True, slots=True)
class AppWrapperStatus:
    """The MCAD-visible status fields plus the bookkeeping."""

    state: str | None = None
    requeues: int = 0
    conditions: tuple[str, ...] = ()
    """Types of the conditions whose status is ``True``, in the order stored."""
    bookkeeping: Bookkeeping = Bookkeeping()


def _stuck(value: object) -> tuple[StuckReport, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        StuckReport(
            kind=str(item.get("kind") or ""),
            name=str(item.get("name") or ""),
            uid=str(item.get("uid") or ""),
            node=_str(item.get("node")),
            reason=str(item.get("reason") or ""),
        )
        for item in value
        if isinstance(item, Mapping)
    )


def parse_bookkeeping(cl: Mapping[str, Any]) -> Bookkeeping:
    """Read a ``status.clearance`` mapping (empty: never touched by the dispatcher)."""
    legacy = bool(cl) and _int(cl.get("version")) is None
    phase = _str(cl.get("phase"))
    attempt = max(_int(cl.get("attempt")) or 0, 0)
    started = parse_time(cl.get("teardownStartedAt"))
    cleared = parse_time(cl.get("clearedAt"))
    traceparent = _str(cl.get("cycleTraceparent"))
    tearing_down = _int(cl.get("tearingDown"))
    cycle_attempt = _int(cl.get("cycleAttempt"))
    if legacy:
        open_teardown = phase in TEARDOWN_PHASES and started is not None and cleared is None
        tearing_down = attempt if open_teardown else None
        cycle_attempt = attempt if traceparent is not None and attempt > 0 else None
    return Bookkeeping(
        phase=phase,
        attempt=attempt,
        tearing_down=tearing_down,
        dispatched_at=parse_time(cl.get("dispatchedAt")),
        teardown_started_at=started,
        cleared_at=cleared,
        cycle_traceparent=traceparent,
        cycle_started_at=parse_time(cl.get("cycleStartedAt")),
        cycle_attempt=cycle_attempt,
        reason=_str(cl.get("reason")),
        stuck=_stuck(cl.get("stuck")),
        legacy=legacy,
    )


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
        bookkeeping=parse_bookkeeping(cl if isinstance(cl, Mapping) else {}),
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_appwrapper(raw: Mapping[str, Any]) -> AppWrapperStatus:
    """Read the status of a whole AppWrapper object: from the bookkeeping annotation when it
    holds a readable document (its status fields over ``/status``), else from ``status``."""
    status = dict(_mapping(raw.get("status")))
    annotations = _mapping(_mapping(raw.get("metadata")).get("annotations"))
    text = annotations.get(BOOKKEEPING_ANNOTATION)
    try:
        document = _mapping(json.loads(text)) if isinstance(text, str) else {}
    except ValueError:
        document = {}
    if document:
        status.update(_mapping(document.get("status")))
        status["clearance"] = _mapping(document.get("clearance"))
    return parse_status(status)
