"""Why is this AppWrapper not running? The pure part of ``clearance explain``.

:func:`explain` turns :class:`Facts` — what a user's kubeconfig and NATS credentials let
:mod:`clearance.explaining` read: the AppWrapper, the objects still carrying its label, their
nodes, and the cycle events and alerts stored for it — into an :class:`Explanation`: its state
and attempt, the current requeue cycle's timeline, what blocks it now (each remaining object
with a diagnosis made from those fresh reads), the next escalation step and when it is due, and
commands a person could run to unblock it. No I/O and no clock: ``Facts.now`` is the time.
Text and JSON forms are :mod:`clearance.explanation_text`'s.

The current cycle is the one ``status.clearance.cycleAttempt`` (else ``tearingDown``) names,
attempt N: its ``requeued``, ``teardown.started``, ``deletion.*``, ``finalizers.removed``,
``cleared``, ``failed`` and alerts of attempt N, then the ``redispatched`` of N+1. Events of
an earlier incarnation (another UID under the same name) are not this AppWrapper's.

The escalation ladder mirrors the tracker's (DESIGN §4.3), counted from ``teardown.started``:
stuck alert, force deletion, then — only with ``finalizerRemoval: AfterForceDeletion`` — the
finalizer removal, which the tracker runs its ``CLEARANCE_FINALIZER_REMOVAL_DELAY`` after the
force deadline (a tracker setting this side cannot read; its default is assumed and said).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from clearance import events
from clearance.appwrapper_status import AppWrapperStatus
from clearance.attempts import next_attempt
from clearance.blockers import Blocker, History, NodeFact, PresentObject, diagnose
from clearance.events import EscalationStep

DEFAULT_FINALIZER_REMOVAL_DELAY: Final = 10.0
"""The tracker's default ``CLEARANCE_FINALIZER_REMOVAL_DELAY`` (seconds after the force one)."""

STEP_NAMES: Final[dict[EscalationStep, str]] = {
    "stuck_alert": "stuck alert",
    "force_deletion": "force deletion",
    "finalizer_removal": "finalizer removal",
}


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything :func:`explain` decides on, as read at ``now``."""

    namespace: str
    name: str
    uid: str
    status: AppWrapperStatus
    max_requeuings: int
    """``spec.schedulingSpec.requeuing.maxNumRequeuings`` (0: no limit)."""
    history: tuple[History, ...]
    objects: tuple[PresentObject, ...]
    nodes: Mapping[str, NodeFact]
    now: datetime


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    at: datetime
    since_teardown: float | None
    """Seconds since ``teardown.started`` (None before the teardown is known)."""
    event: str
    """``requeued``, ``teardown.started``, …; alerts as ``ALERT deletion.stuck``."""
    attempt: int
    detail: str


@dataclass(frozen=True, slots=True)
class NextStep:
    what: str
    """``stuck alert``, ``force deletion``, ``finalizer removal``, ``cleared``, ``redispatch``,
    ``none``."""
    at: datetime | None
    due: str | None
    """``in 4s``, or how long ago it fell due; None without a time."""
    detail: str


@dataclass(frozen=True, slots=True)
class Explanation:
    namespace: str
    name: str
    uid: str
    state: str | None
    phase: str | None
    attempt: int
    requeues: int
    max_requeuings: int
    conditions: tuple[str, ...]
    cycle_attempt: int | None
    reason: str | None
    trace_id: str | None
    teardown_open: bool
    teardown_started_at: datetime | None
    cleared_at: datetime | None
    timeline: tuple[TimelineEntry, ...]
    blocking: tuple[Blocker, ...]
    next: NextStep
    now: datetime


# ------------------------------------------------------------------------------ the cycle


def cycle_attempt(facts: Facts) -> int | None:
    """The attempt the current cycle tore (or tears) down: the bookkeeping's, else the last
    ``requeued`` on the streams."""
    known = facts.status.bookkeeping.cycle_of
    if known is not None:
        return known
    requeues = [e.attempt for e in facts.history if isinstance(e, events.CycleRequeued)]
    return max(requeues) if requeues else None


def _in_cycle(event: History, attempt: int) -> bool:
    if isinstance(event, events.CycleRedispatched):
        return event.attempt == next_attempt(attempt)
    if isinstance(event, events.CycleDispatched):
        return False
    return event.attempt == attempt


def _teardown(history: tuple[History, ...], attempt: int) -> events.CycleTeardownStarted | None:
    found = [
        e for e in history if isinstance(e, events.CycleTeardownStarted) and e.attempt == attempt
    ]
    return found[-1] if found else None


def _refs(objs: tuple[events.ObjectRef, ...], limit: int = 3) -> str:
    """``pod a, job b (+2 more)``; an object listed twice (a bare Pod is both the item and its
    pod) is named once."""
    unique = tuple({o.uid: o for o in objs}.values())
    shown = ", ".join(f"{o.kind.lower()} {o.name}" for o in unique[:limit])
    return shown + (f" (+{len(unique) - limit} more)" if len(unique) > limit else "")


def _policy(policy: events.TeardownPolicy) -> str:
    force = f"{policy.force_deletion_seconds}s" if policy.force_deletion_seconds > 0 else "off"
    return (
        f"stuck alert after {policy.stuck_alert_seconds}s, force deletion after {force}, "
        f"finalizer removal {policy.finalizer_removal}"
    )


def _detail(event: History) -> str:
    match event:
        case events.CycleRequeued(reason=reason, number_of_requeueings=n):
            return f"requeue #{n}: {reason}"
        case events.CycleTeardownStarted(inventory=inventory, policy=policy):
            return f"deleting {_refs(inventory) or 'nothing listed'}; {_policy(policy)}"
        case events.CycleDeletionConfirmed(confirmed=confirmed):
            return "; ".join(
                f"{c.object.kind.lower()} {c.object.name} gone ({c.how.replace('_', ' ')})"
                for c in confirmed
            )
        case events.CycleDeletionForced(objects=objs):
            return f"grace-0 delete of {_refs(objs)}"
        case events.CycleFinalizersRemoved(removed=removed):
            return "; ".join(
                f"{r.object.kind.lower()} {r.object.name}: {', '.join(r.finalizers)}"
                for r in removed
            )
        case events.CycleCleared(confirmed=confirmed):
            return f"{len(confirmed)} object(s) confirmed gone, a quorum LIST agrees"
        case events.CycleRedispatched(attempt=attempt, pause_seconds=pause):
            return f"attempt {attempt} dispatched after a {pause:.0f}s pause"
        case events.CycleFailed(reason=reason, message=message):
            return f"{reason}: {message}" if message else reason
        case events.AlertDeletionStuck(step=step, stuck=stuck):
            objs = tuple(s.object for s in stuck)
            return f"[{STEP_NAMES[step]}] {len(stuck)} object(s) left: {_refs(objs)}"
        case events.AlertNodeLost(node=node, objects=objs):
            return f"node {node} is lost, holds {_refs(objs) or 'objects'}"
        case events.AlertDeletionForced(objects=objs):
            return f"force-deleted {_refs(objs)}"
    return getattr(event, "summary", "") or getattr(event, "message", "") or ""


CAUSAL_ORDER: Final[dict[str, int]] = {
    name: rank
    for rank, name in enumerate(
        (
            "cycle.requeued",
            "cycle.teardown.started",
            "alert.deletion.stuck",
            "alert.node.lost",
            "cycle.deletion.forced",
            "alert.deletion.forced",
            "cycle.finalizers.removed",
            "cycle.deletion.confirmed",
            "cycle.cleared",
            "cycle.failed",
            "alert.requeue.limit",
            "cycle.redispatched",
        )
    )
}
"""Order of events stamped with the same time (a producer stamps several facts at once: the
tracker's ``deletion.confirmed`` and ``cleared`` of one verification): cause before effect."""


def _order(event: History) -> tuple[datetime, int]:
    return event.occurred_at, CAUSAL_ORDER.get(event.event_type, len(CAUSAL_ORDER))


def timeline(facts: Facts, attempt: int) -> tuple[TimelineEntry, ...]:
    """The cycle's events in the order they happened (equal times: :data:`CAUSAL_ORDER`)."""
    teardown = _teardown(facts.history, attempt)
    start = teardown.occurred_at if teardown is not None else None
    mine = sorted((e for e in facts.history if _in_cycle(e, attempt)), key=_order)
    out = []
    for event in mine:
        name = event.event_type.split(".", 1)[1]
        if isinstance(event, events.AlertEvent):
            name = f"ALERT {name}"
        since = (event.occurred_at - start).total_seconds() if start is not None else None
        out.append(TimelineEntry(event.occurred_at, since, name, event.attempt, _detail(event)))
    return tuple(out)


# ------------------------------------------------------------------------ what comes next


def _done_steps(history: tuple[History, ...], attempt: int) -> set[EscalationStep]:
    done: set[EscalationStep] = set()
    for event in history:
        if event.attempt != attempt:
            continue
        if isinstance(event, events.AlertDeletionStuck):
            done.add(event.step)
        elif isinstance(event, events.CycleDeletionForced | events.AlertDeletionForced):
            done.add("force_deletion")
        elif isinstance(event, events.CycleFinalizersRemoved):
            done.add("finalizer_removal")
    return done


def _due(at: datetime, now: datetime, *, late: str) -> str:
    seconds = (at - now).total_seconds()
    if seconds >= 0:
        return f"in {seconds:.0f}s"
    return f"due {-seconds:.0f}s ago, {late}"


def next_escalation(
    teardown: events.CycleTeardownStarted, *, done: set[EscalationStep], now: datetime
) -> NextStep:
    """The first enabled ladder step not yet taken, and when it is due."""
    policy, start = teardown.policy, teardown.occurred_at
    force_at = None
    if policy.force_deletion_seconds > 0:
        force_at = start + timedelta(seconds=policy.force_deletion_seconds)
    ladder: list[tuple[EscalationStep, datetime | None, str]] = [
        (
            "stuck_alert",
            start + timedelta(seconds=policy.stuck_alert_seconds)
            if policy.stuck_alert_seconds > 0
            else None,
            "an alert with this diagnosis",
        ),
        ("force_deletion", force_at, "grace-0 delete of what is left, pods first"),
    ]
    if force_at is not None and policy.finalizer_removal == "AfterForceDeletion":
        removal_at = force_at + timedelta(seconds=DEFAULT_FINALIZER_REMOVAL_DELAY)
        ladder.append(
            (
                "finalizer_removal",
                removal_at,
                "the tracker strips the finalizers (at its CLEARANCE_FINALIZER_REMOVAL_DELAY "
                f"after the force deadline, default {DEFAULT_FINALIZER_REMOVAL_DELAY:.0f}s)",
            )
        )
    for step, at, what in ladder:
        if at is None or step in done:
            continue
        due = _due(at, now, late="the tracker runs it on its next scan")
        return NextStep(STEP_NAMES[step], at, due, what)
    why = (
        "finalizerRemoval is Never"
        if policy.finalizer_removal == "Never"
        else "every enabled step was taken"
    )
    return NextStep(
        "none",
        None,
        None,
        f"the ladder is done ({why}); the teardown waits until the objects go, "
        "and the job resumes by itself then",
    )


def _after_teardown(facts: Facts, attempt: int) -> NextStep:
    book = facts.status.bookkeeping
    if book.phase in ("Failed", "Completed"):
        return NextStep("none", None, None, f"the AppWrapper is {book.phase}; no further cycle")
    redispatched = [
        e
        for e in facts.history
        if isinstance(e, events.CycleRedispatched) and e.attempt == next_attempt(attempt)
    ]
    if redispatched:
        done = redispatched[-1]
        when = done.occurred_at.astimezone(UTC)
        return NextStep(
            "none",
            None,
            None,
            f"attempt {done.attempt} was dispatched at {when:%H:%M:%SZ}",
        )
    teardown = _teardown(facts.history, attempt)
    if book.cleared_at is not None and teardown is not None:
        at = book.cleared_at + timedelta(seconds=teardown.policy.pause_seconds)
        return NextStep(
            "redispatch",
            at,
            _due(at, facts.now, late="the pause is over"),
            f"attempt {next_attempt(attempt)}, {teardown.policy.pause_seconds}s after cleared, "
            "once capacity allows",
        )
    return NextStep(
        "redispatch", None, None, f"attempt {next_attempt(attempt)}, once capacity allows"
    )


# ------------------------------------------------------------------------------- explain


def explain(facts: Facts) -> Explanation:
    """The explanation of one AppWrapper from what was read (pure)."""
    book = facts.status.bookkeeping
    attempt = cycle_attempt(facts)
    teardown_open = book.tearing_down is not None
    blocking: tuple[Blocker, ...] = ()
    if attempt is None:
        nothing = "no requeue cycle yet" if book.attempt else "not dispatched yet"
        next_step = NextStep("none", None, None, nothing)
    elif teardown_open:
        open_attempt = book.tearing_down or attempt
        blocking = tuple(
            diagnose(o, nodes=facts.nodes, history=facts.history, now=facts.now)
            for o in facts.objects
            if o.attempt is None or o.attempt <= open_attempt
        )
        teardown = _teardown(facts.history, open_attempt)
        if not blocking:
            next_step = NextStep(
                "cleared",
                None,
                None,
                "nothing is left in the API server; the tracker's next "
                "verification publishes cleared",
            )
        elif teardown is None:
            next_step = NextStep("none", None, None, "teardown.started is not on the stream (yet)")
        else:
            done = _done_steps(facts.history, open_attempt)
            next_step = next_escalation(teardown, done=done, now=facts.now)
    else:
        next_step = _after_teardown(facts, attempt)
    teardown = _teardown(facts.history, attempt) if attempt is not None else None
    return Explanation(
        namespace=facts.namespace,
        name=facts.name,
        uid=facts.uid,
        state=facts.status.state,
        phase=book.phase,
        attempt=book.attempt,
        requeues=facts.status.requeues,
        max_requeuings=facts.max_requeuings,
        conditions=facts.status.conditions,
        cycle_attempt=attempt,
        reason=book.reason,
        trace_id=book.trace_id,
        teardown_open=teardown_open,
        teardown_started_at=book.teardown_started_at
        or (teardown.occurred_at if teardown else None),
        cleared_at=book.cleared_at,
        timeline=timeline(facts, attempt) if attempt is not None else (),
        blocking=blocking,
        next=next_step,
        now=facts.now,
    )
