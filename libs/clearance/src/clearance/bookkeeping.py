"""The dispatcher's bookkeeping of one AppWrapper, typed (:class:`ClearanceStatus`), and its layout.

This module is the only code that parses or renders ``status.clearance``; the dispatcher writes
it (``clearance_dispatcher.storage`` decides where it is kept) and ``clearance explain`` reads it
through the same :func:`parse`. Every field has one meaning in every phase (docs/DESIGN.md §2
lists them):

* ``attempt`` — the latest attempt whose dispatch was decided (0: never dispatched). Objects of
  it carry ``clearance.dev/attempt=<attempt>``. It changes only when a dispatch begins.
* ``tearingDown`` — the attempt whose teardown was decided and whose ``cleared`` is awaited;
  null when no teardown is open. It is set with the teardown decision and cleared by the
  ``cleared`` of that attempt, nothing else.
* ``cycleAttempt`` — the attempt torn down in the current (or last) requeue cycle, the root
  span's ``clearance.attempt``; the root itself is named by ``cycleTraceparent`` and open while
  ``cycleStartedAt`` is set.

The attempt a dispatch creates (:attr:`ClearanceStatus.attempt_to_dispatch`) is derived here and
nowhere else, so no ``attempt ± 1`` exists outside this module. A status written before
``version`` 2 (by an older dispatcher) is read once through :func:`_from_legacy`; the next write
stores the whole new layout. Under a CRD that prunes unknown status fields the bookkeeping is
kept in the annotation :data:`BOOKKEEPING_ANNOTATION` (:func:`annotation_document` reads it).
The builders are pure: they return a new value and write nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from clearance.attempts import next_attempt
from clearance.timestamps import micro_time, parse_time

Phase = Literal[
    "Queued", "Dispatching", "Dispatched", "TearingDown", "Completed", "Failed", "Invalid"
]
PHASES: Final[tuple[Phase, ...]] = (
    "Queued",
    "Dispatching",
    "Dispatched",
    "TearingDown",
    "Completed",
    "Failed",
    "Invalid",
)
LAYOUT: Final = 2
"""``status.clearance.version`` written by this code; absent = the layout before it."""
BOOKKEEPING_ANNOTATION: Final = "clearance.dev/bookkeeping"
"""Where the bookkeeping is kept when the served CRD prunes ``status.clearance``: one JSON
document ``{"version": 2, "clearance": {...}, "status": {...}}`` with the bookkeeping and the
MCAD-visible status fields the dispatcher last decided (which win over a lagging ``/status``)."""


@dataclass(frozen=True, slots=True)
class StuckEntry:
    """One object the tracker reported stuck (shown in ``status.clearance.stuck``)."""

    kind: str
    name: str
    uid: str
    node: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class ClearanceStatus:
    """``status.clearance``, typed; see the module docstring for what each field means."""

    phase: Phase | None = None
    attempt: int = 0
    tearing_down: int | None = None
    dispatched_at: datetime | None = None
    teardown_started_at: datetime | None = None
    teardown_published: bool = False
    cleared_at: datetime | None = None
    cycle_traceparent: str | None = None
    cycle_started_at: datetime | None = None
    cycle_attempt: int | None = None
    reason: str | None = None
    stuck: tuple[StuckEntry, ...] = ()
    terminating: int = 0
    invalid_generation: int | None = None
    legacy: bool = False
    """Read from a layout before version 2 (the next write migrates it)."""

    # -- derived: the only place attempts are computed ----------------------------------------

    @property
    def attempt_to_dispatch(self) -> int | None:
        """The attempt a dispatch now creates: the next one from the queue, the decided one
        while Dispatching (a restart resumes it); None in any other phase."""
        if self.phase in (None, "Queued", "Invalid"):
            return next_attempt(self.attempt)
        if self.phase == "Dispatching":
            return self.attempt
        return None

    @property
    def never_dispatched(self) -> bool:
        return self.attempt == 0

    @property
    def is_redispatch(self) -> bool:
        """The attempt decided (or to be decided) follows a teardown of an earlier one."""
        attempt = self.attempt_to_dispatch
        return (attempt if attempt is not None else self.attempt) > 1

    @property
    def refused_attempt(self) -> int:
        """The attempt a refusal (invalid spec, never dispatched) is about: the one that
        would have been dispatched — for events, which count attempts from 1."""
        attempt = self.attempt_to_dispatch
        return self.attempt if attempt is None else attempt

    @property
    def cycle_open(self) -> bool:
        """A requeue-cycle root span is open (in this or a dead process)."""
        return self.cycle_traceparent is not None and self.cycle_started_at is not None

    @property
    def cycle_of(self) -> int | None:
        """The attempt torn down in the current (or last) requeue cycle, if any."""
        return self.cycle_attempt if self.cycle_attempt is not None else self.tearing_down

    @property
    def trace_id(self) -> str | None:
        """The trace id of the cycle's root span (from its W3C traceparent)."""
        parts = (self.cycle_traceparent or "").split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None

    def awaits_cleared_of(self, attempt: int) -> bool:
        """Is ``cleared`` of ``attempt`` the one this AppWrapper waits for?"""
        return self.tearing_down is not None and self.tearing_down == attempt

    # -- builders: every change of the bookkeeping is one of these -----------------------------

    def queued(self) -> ClearanceStatus:
        return dataclasses.replace(self, phase="Queued", invalid_generation=None)

    def invalid(self, generation: int) -> ClearanceStatus:
        return dataclasses.replace(self, phase="Invalid", invalid_generation=generation)

    def dispatching(self, attempt: int) -> ClearanceStatus:
        """Dispatch of ``attempt`` decided (written before anything is created)."""
        return dataclasses.replace(
            self,
            phase="Dispatching",
            attempt=attempt,
            dispatched_at=None,
            teardown_started_at=None,
            teardown_published=False,
            stuck=(),
            terminating=0,
        )

    def dispatched(self, at: datetime) -> ClearanceStatus:
        """Every item of ``attempt`` exists; the previous cycle's root ends now."""
        return dataclasses.replace(
            self, phase="Dispatched", dispatched_at=at, cycle_started_at=None
        )

    def with_terminating(self, terminating: int) -> ClearanceStatus:
        return dataclasses.replace(self, terminating=terminating)

    def completed(self, terminating: int) -> ClearanceStatus:
        return dataclasses.replace(self, phase="Completed", terminating=terminating)

    def teardown_decided(
        self,
        *,
        phase: Literal["TearingDown", "Failed"],
        at: datetime,
        open_cycle: bool = False,
        reason: str | None = None,
        cycle_traceparent: str | None = None,
    ) -> ClearanceStatus:
        """Teardown of ``attempt`` decided. With ``open_cycle`` a new requeue cycle opens (its
        root started ``at``, named by ``cycle_traceparent``); without, the open cycle (if any)
        carries on."""
        cycle: dict[str, Any] = {}
        if open_cycle:
            cycle = {
                "cycle_traceparent": cycle_traceparent,
                "cycle_started_at": at,
                "cycle_attempt": self.attempt,
                "reason": reason,
            }
        return dataclasses.replace(
            self,
            phase=phase,
            tearing_down=self.attempt,
            teardown_started_at=at,
            teardown_published=False,
            cleared_at=None,
            stuck=(),
            **cycle,
        )

    def announced(self) -> ClearanceStatus:
        """``teardown.started`` of ``tearingDown`` is published."""
        return dataclasses.replace(self, teardown_published=True)

    def cleared(self, at: datetime) -> ClearanceStatus:
        """``cleared`` of ``tearingDown`` accepted: a requeue goes back to the queue; a Failed
        AppWrapper stays Failed and its cycle ends."""
        if self.phase == "TearingDown":
            return dataclasses.replace(
                self, phase="Queued", tearing_down=None, cleared_at=at, stuck=()
            )
        return dataclasses.replace(
            self, tearing_down=None, cleared_at=at, stuck=(), cycle_started_at=None
        )

    def with_stuck(self, stuck: tuple[StuckEntry, ...]) -> ClearanceStatus:
        return dataclasses.replace(self, stuck=stuck)


# ------------------------------------------------------------------------------- parsing


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _stuck(value: object) -> tuple[StuckEntry, ...]:
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, Mapping):
            out.append(
                StuckEntry(
                    kind=str(item.get("kind") or ""),
                    name=str(item.get("name") or ""),
                    uid=str(item.get("uid") or ""),
                    node=_str(item.get("node")),
                    reason=str(item.get("reason") or ""),
                )
            )
    return tuple(out)


def parse(cl: Mapping[str, Any]) -> ClearanceStatus:
    """Read the bookkeeping mapping, leniently (a wrong type reads as absent)."""
    phase = cl.get("phase")
    attempt = _int(cl.get("attempt")) or 0
    status = ClearanceStatus(
        phase=phase if phase in PHASES else None,
        attempt=max(attempt, 0),
        tearing_down=_int(cl.get("tearingDown")),
        dispatched_at=parse_time(cl.get("dispatchedAt")),
        teardown_started_at=parse_time(cl.get("teardownStartedAt")),
        teardown_published=cl.get("teardownPublished") is True,
        cleared_at=parse_time(cl.get("clearedAt")),
        cycle_traceparent=_str(cl.get("cycleTraceparent")),
        cycle_started_at=parse_time(cl.get("cycleStartedAt")),
        cycle_attempt=_int(cl.get("cycleAttempt")),
        reason=_str(cl.get("reason")),
        stuck=_stuck(cl.get("stuck")),
        terminating=_int(cl.get("terminating")) or 0,
        invalid_generation=_int(cl.get("invalidGeneration")),
    )
    if cl and _int(cl.get("version")) is None:
        return _from_legacy(status)
    return status


def _from_legacy(status: ClearanceStatus) -> ClearanceStatus:
    """The layout before version 2 had no ``tearingDown`` / ``cycleAttempt``: a teardown was
    open while TearingDown/Failed with ``teardownStartedAt`` set and no ``clearedAt``, and the
    cycle's attempt was ``attempt`` except once a redispatch had begun (Dispatching, or a
    Failed redispatch whose teardown started after the cycle did)."""
    open_teardown = (
        status.phase in ("TearingDown", "Failed")
        and status.teardown_started_at is not None
        and status.cleared_at is None
    )
    cycle_attempt = None
    if status.cycle_traceparent is not None:
        moved_on = status.phase == "Dispatching" or (
            status.phase == "Failed"
            and status.cycle_started_at is not None
            and status.teardown_started_at is not None
            and status.teardown_started_at > status.cycle_started_at
        )
        cycle_attempt = status.attempt - 1 if moved_on else status.attempt
    return dataclasses.replace(
        status,
        tearing_down=status.attempt if open_teardown else None,
        cycle_attempt=cycle_attempt if cycle_attempt and cycle_attempt > 0 else None,
        legacy=True,
    )


def render(status: ClearanceStatus) -> dict[str, Any]:
    """The whole bookkeeping as a merge patch value (null removes a field written before)."""

    def when(moment: datetime | None) -> str | None:
        return None if moment is None else micro_time(moment)

    return {
        "version": LAYOUT,
        "phase": status.phase,
        "attempt": status.attempt,
        "tearingDown": status.tearing_down,
        "dispatchedAt": when(status.dispatched_at),
        "teardownStartedAt": when(status.teardown_started_at),
        "teardownPublished": status.teardown_published,
        "clearedAt": when(status.cleared_at),
        "cycleTraceparent": status.cycle_traceparent,
        "cycleStartedAt": when(status.cycle_started_at),
        "cycleAttempt": status.cycle_attempt,
        "reason": status.reason,
        "stuck": [dataclasses.asdict(s) for s in status.stuck],
        "terminating": status.terminating,
        "invalidGeneration": status.invalid_generation,
    }


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def annotation_document(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The :data:`BOOKKEEPING_ANNOTATION` document of an AppWrapper object, or None when it is
    absent or not a readable JSON object."""
    value = _mapping(_mapping(raw.get("metadata")).get("annotations")).get(BOOKKEEPING_ANNOTATION)
    if not isinstance(value, str):
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, Mapping) else None
