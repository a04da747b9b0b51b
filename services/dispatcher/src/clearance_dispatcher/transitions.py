"""Every status transition of an AppWrapper, pure: ``(observed, facts…, now) → Patch | None``.

Each function checks that the AppWrapper is still in the phase (and attempt) the transition
starts from — it is evaluated again on a fresh object after a 409 — and returns the whole
change as one :class:`~clearance_dispatcher.status.Patch`: the new bookkeeping (built only
through :class:`~clearance_dispatcher.bookkeeping.ClearanceStatus`'s builders), the MCAD status
fields and the conditions. ``None`` means "not applicable any more": the caller does nothing.
No I/O here: the effects (:mod:`clearance_dispatcher.effects`) write these patches *before*
their side effects, so a crash anywhere resumes at the step it was in.

    (new) ─enqueue─▶ Queued ─begin_dispatch─▶ Dispatching ─finish_dispatch─▶ Dispatched
    Dispatched ─start_teardown─▶ TearingDown | Failed   (tearingDown = attempt)
    Dispatching ─fail_creation─▶ Failed                 (tearingDown = attempt)
    TearingDown ─accept_cleared─▶ Queued ;  Failed ─accept_cleared─▶ Failed (cycle ends)
    TearingDown ─redispatch_on_cleared─▶ Dispatching (pause 0 and admitted: one write)
    Dispatched ─complete─▶ Completed ;  (new) | Queued | Invalid ─mark_invalid─▶ Invalid
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from clearance.attempts import next_attempt
from clearance.bookkeeping import StuckEntry
from clearance.timestamps import micro_time
from clearance_dispatcher.requeueing import Counts, Fail, Requeue, enough
from clearance_dispatcher.status import ConditionChange, Observed, Patch

MESSAGE_LIMIT = 1024
"""Longest ``status.message`` (and condition message) written."""


def enqueue(obs: Observed, *, reason: str, now: datetime) -> Patch | None:
    """A new AppWrapper (or one whose spec was fixed) joins the dispatch queue."""
    if obs.clearance.phase not in (None, "Invalid"):
        return None
    status: dict[str, Any] = {"state": "Pending", "queuejobstate": "Queueing"}
    if not obs.first_seen:
        status["controllerfirsttimestamp"] = micro_time(now)
    return Patch(
        at=now,
        clearance=obs.clearance.queued(),
        status=status,
        conditions={
            "Queueing": (True, reason, "waiting in the dispatch queue"),
            "Failed": (False, reason, ""),
        },
    )


def mark_invalid(
    obs: Observed, *, generation: int, reason: str, message: str, now: datetime
) -> Patch | None:
    """The spec of ``generation`` cannot be dispatched (before any dispatch of it)."""
    cl = obs.clearance
    if cl.phase not in (None, "Queued", "Invalid"):
        return None
    if cl.phase == "Invalid" and cl.invalid_generation == generation:
        return None
    return Patch(
        at=now,
        clearance=cl.invalid(generation),
        status={"state": "Failed", "queuejobstate": "Failed", "message": message[:MESSAGE_LIMIT]},
        conditions={"Failed": (True, reason, message), "Queueing": (False, reason, message)},
    )


def queue_waiting(obs: Observed, *, reason: str, why: str, now: datetime) -> Patch | None:
    """A queued AppWrapper says why it waits (capacity, head of line)."""
    if obs.clearance.phase != "Queued":
        return None
    return Patch(at=now, conditions={"Queueing": (True, reason, why)})


def backoff(obs: Observed, *, reason: str, message: str, now: datetime) -> Patch | None:
    """A dispatch is held back (old objects present, an item blocked, a transient error)."""
    return Patch(at=now, conditions={"Backoff": (True, reason, message)})


def blocked(obs: Observed, *, message: str, now: datetime) -> Patch | None:
    """A dispatch is held by leftovers (objects of an earlier attempt or incarnation): the
    ``Blocked`` condition names each and its diagnosis (``kubectl describe appwrapper``)."""
    return Patch(
        at=now,
        conditions={
            "Blocked": (True, "LeftoverObjects", message),
            "Backoff": (True, "OldObjectsPresent", message),
        },
    )


def begin_dispatch(obs: Observed, *, attempt: int, now: datetime) -> Patch | None:
    """Dispatch of ``attempt`` decided: written before any item is created."""
    cl = obs.clearance
    if cl.phase != "Queued" or cl.attempt_to_dispatch != attempt or cl.tearing_down is not None:
        return None
    return Patch(
        at=now,
        clearance=cl.dispatching(attempt),
        status={
            "state": "Running",
            "queuejobstate": "Dispatched",
            "isdispatched": True,
            "canrun": True,
        },
        conditions={
            "Queueing": (False, "FrontOfQueue", "dispatching"),
            "Backoff": (False, "Dispatching", ""),
        },
    )


def finish_dispatch(
    obs: Observed, *, attempt: int, items: int, min_available: int, now: datetime
) -> Patch | None:
    """Every item of ``attempt`` exists (and its events are published)."""
    cl = obs.clearance
    if cl.phase != "Dispatching" or cl.attempt != attempt:
        return None
    status: dict[str, Any] = {"template": min_available}
    if obs.first_dispatched_at is None:
        status["controllerfirstdispatchtimestamp"] = micro_time(now)
    return Patch(
        at=now,
        clearance=cl.dispatched(now),
        status=status,
        conditions={
            "Dispatched": (
                True,
                "AppWrapperRunnable",
                f"attempt {attempt}: {items} item(s) created",
            ),
            "Backoff": (False, "Dispatched", ""),
            "Blocked": (False, "Dispatched", ""),
            "Running": (False, "AwaitingPods", ""),
        },
    )


def fail_creation(
    obs: Observed, *, attempt: int, reason: str, message: str, now: datetime
) -> Patch | None:
    """An item of ``attempt`` cannot be created, ever: Failed, and what exists is torn down."""
    cl = obs.clearance
    if cl.phase != "Dispatching" or cl.attempt != attempt:
        return None
    return Patch(
        at=now,
        clearance=cl.teardown_decided(phase="Failed", at=now),
        status={
            "state": "Failed",
            "queuejobstate": "Failed",
            "isdispatched": False,
            "message": message[:MESSAGE_LIMIT],
        },
        conditions={"Failed": (True, reason, message), "Dispatched": (False, reason, message)},
    )


def changed_counts(obs: Observed, counts: Counts) -> dict[str, Any]:
    """The MCAD count fields of ``status`` that ``counts`` changes."""
    status: dict[str, Any] = {}
    for name, value in (
        ("pending", counts.pending),
        ("running", counts.running),
        ("Succeeded", counts.succeeded),
        ("failed", counts.failed),
    ):
        if obs.counts.get(name) != value:
            status[name] = value
    return status


def record_counts(
    obs: Observed, *, attempt: int, counts: Counts, min_available: int, now: datetime
) -> Patch | None:
    """Pod counts of the dispatched ``attempt``; ``Running`` once enough pods run."""
    cl = obs.clearance
    if cl.phase != "Dispatched" or cl.attempt != attempt:
        return None
    status = changed_counts(obs, counts)
    conditions: dict[str, ConditionChange] = {}
    running = obs.condition("Running") or {}
    if enough(counts, min_available) and running.get("status") != "True":
        minimum = max(min_available, 1)
        conditions["Running"] = (
            True,
            "PodsRunning",
            f"running={counts.running}, completed={counts.succeeded}, minimum={minimum}",
        )
        status["queuejobstate"] = "Running"
    new = cl.with_terminating(counts.terminating)
    if not status and not conditions and new == cl:
        return None
    return Patch(at=now, clearance=new, status=status, conditions=conditions)


def counts_write_delay(
    patch: Patch, *, since_last: float, interval: float, at_once: bool = False
) -> float:
    """Seconds to hold a :func:`record_counts` patch back (0: write it now).

    A patch that changes only counts waits until ``interval`` has passed since the last
    counts write (a pod-by-pod start is written once, not once per pod); one that changes a
    condition (``Running``), or one ``at_once`` asks for (counts corrected by a quorum LIST
    right before a decision), is never held."""
    if patch.conditions or at_once:
        return 0.0
    return max(0.0, interval - since_last)


def complete(obs: Observed, *, attempt: int, counts: Counts, now: datetime) -> Patch | None:
    """Every item with a ``completionstatus`` reports completion."""
    cl = obs.clearance
    if cl.phase != "Dispatched" or cl.attempt != attempt:
        return None
    return Patch(
        at=now,
        clearance=cl.completed(counts.terminating),
        status={
            "state": "Completed",
            "queuejobstate": "Completed",
            "pending": counts.pending,
            "running": counts.running,
            "Succeeded": counts.succeeded,
            "failed": counts.failed,
        },
        conditions={"Completed": (True, "PodsCompleted", "every item reports completion")},
    )


def start_teardown(
    obs: Observed,
    *,
    attempt: int,
    decision: Requeue | Fail,
    cycle_traceparent: str | None,
    counts: Counts | None = None,
    now: datetime,
) -> Patch | None:
    """The monitor's requeue (or fail) of ``attempt``: a requeue cycle opens, deletions follow.
    ``counts`` (those the decision was taken on) are written in the same patch."""
    cl = obs.clearance
    if cl.phase != "Dispatched" or cl.attempt != attempt:
        return None
    if counts is not None:
        cl = cl.with_terminating(counts.terminating)
    reason, message = decision.reason, decision.message
    conditions: dict[str, ConditionChange] = {
        "AwaitingDeletion": (
            True,
            reason,
            f"waiting for every object of attempt {attempt} to be gone",
        ),
        "Running": (False, reason, message),
        "Dispatched": (False, reason, message),
    }
    status: dict[str, Any] = {"isdispatched": False, "message": message[:MESSAGE_LIMIT]}
    if counts is not None:
        status.update(changed_counts(obs, counts))
    if isinstance(decision, Requeue):
        status.update(
            state="Pending",
            queuejobstate="Backoff",
            numberOfRequeueings=decision.number_of_requeueings,
            requeueingTimeInSeconds=decision.next_wait,
        )
        conditions["Backoff"] = (True, reason, message)
        phase: Any = "TearingDown"
    else:
        status.update(state="Failed", queuejobstate="Failed")
        conditions["Failed"] = (True, reason, message)
        phase = "Failed"
    return Patch(
        at=now,
        clearance=cl.teardown_decided(
            phase=phase,
            at=now,
            open_cycle=True,
            reason=reason,
            cycle_traceparent=cycle_traceparent,
        ),
        status=status,
        conditions=conditions,
    )


def announce_teardown(obs: Observed, *, attempt: int, now: datetime) -> Patch | None:
    """``teardown.started`` of ``attempt`` is on the stream."""
    cl = obs.clearance
    if not cl.awaits_cleared_of(attempt) or cl.teardown_published:
        return None
    return Patch(at=now, clearance=cl.announced())


def accept_cleared(
    obs: Observed, *, attempt: int, cleared_at: datetime, now: datetime
) -> Patch | None:
    """The tracker's ``cleared`` of ``attempt``: only the awaited one counts (a stale or
    duplicate ``cleared`` is None)."""
    cl = obs.clearance
    if not cl.awaits_cleared_of(attempt):
        return None
    conditions: dict[str, ConditionChange] = {
        "AwaitingDeletion": (False, "Cleared", f"every object of attempt {attempt} is gone"),
        "DeletionStuck": (False, "Cleared", ""),
    }
    status: dict[str, Any] = {}
    if cl.phase == "TearingDown":
        conditions["Queueing"] = (
            True,
            "Requeued",
            f"Requeued because {obs.message or 'of a requeue'}",
        )
        status["queuejobstate"] = "Queueing"
    return Patch(at=now, clearance=cl.cleared(cleared_at), status=status, conditions=conditions)


def redispatch_on_cleared(
    obs: Observed, *, attempt: int, cleared_at: datetime, now: datetime
) -> Patch | None:
    """``cleared`` of ``attempt`` with no pause and room to dispatch: the requeue's Queued and
    the Dispatching of ``attempt + 1`` in one write (``accept_cleared`` then
    ``begin_dispatch``, merged; the later change of a field wins). None when either does
    not apply (a Failed attempt, a stale ``cleared``): the caller falls back to the queue."""
    first = accept_cleared(obs, attempt=attempt, cleared_at=cleared_at, now=now)
    if first is None or first.clearance is None or first.clearance.phase != "Queued":
        return None
    second = begin_dispatch(
        dataclasses.replace(obs, clearance=first.clearance), attempt=next_attempt(attempt), now=now
    )
    if second is None:
        return None
    return Patch(
        at=now,
        clearance=second.clearance,
        status={**first.status, **second.status},
        conditions={**first.conditions, **second.conditions},
    )


def record_stuck(
    obs: Observed,
    *,
    attempt: int,
    stuck: Sequence[StuckEntry],
    step: str,
    summary: str,
    now: datetime,
) -> Patch | None:
    """The tracker's ``deletion.stuck`` for the teardown of ``attempt``."""
    cl = obs.clearance
    if not cl.awaits_cleared_of(attempt):
        return None
    return Patch(
        at=now,
        clearance=cl.with_stuck(tuple(stuck)),
        conditions={"DeletionStuck": (True, step, summary)},
    )
