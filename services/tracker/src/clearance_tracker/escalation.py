"""Pure rules of the escalation ladder: given a record and the time, what is due next.

The ladder (DESIGN §4.3), each step at most once per attempt, deadlines counted from
`teardownStartedAt`:

1. `stuck_alert` at `stuck_alert_seconds` (0 disables it);
2. `force_deletion` at `force_deletion_seconds` (≤ 0 disables it and step 3);
3. `finalizer_removal` at the force deadline + `finalizer_removal_delay`, only with
   `finalizerRemoval: AfterForceDeletion` and only after step 2 is done.

A step is due when its deadline has passed, objects are still open, the earlier enabled
steps are done, and nobody holds a live claim on it. A claim (written with CAS before the
step acts) is live for `claim_timeout`; after that the record's owner completes the step
with the same Msg-Ids, so a crash between claim and done repeats nothing visible. A claim
by *this* replica (same replica id: a restarted pod) is resumed at once.

Timers are nothing but these functions evaluated against the KV record, so they survive
restarts and replica hand-overs by construction. :func:`next_work` is the one decision the
replica's evaluation loop acts on (verify, publish `cleared`, or run a step), so the whole
ladder can be driven by plain calls with an explicit ``now``.

Durations come from user input (the AppWrapper's policy): a deadline beyond what a datetime
can hold is clamped to :data:`NEVER` instead of raising, so an absurd value means "not in
this lifetime" and never stops a teardown from being recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

import msgspec

from clearance.events import EscalationStep
from clearance_tracker.teardown import STEPS, StepState, Teardown

NEVER: Final = datetime.max.replace(tzinfo=UTC)
"""The latest representable moment: where a deadline too far away to compute lands."""

MAX_SECONDS: Final = 100 * 365 * 86400
"""Durations above a century are clamped to it before any arithmetic (then to :data:`NEVER`)."""

Work = Literal["verify", "publish_cleared"] | EscalationStep
"""What an owned record needs next: a verification, `cleared` published, or a ladder step."""


def after(start: datetime, seconds: float) -> datetime:
    """``start + seconds``, clamped to :data:`NEVER` (never raises on huge or odd input)."""
    try:
        value = float(seconds)
    except OverflowError:  # an int beyond any float
        value = math.inf if seconds > 0 else -math.inf
    if math.isnan(value):
        return NEVER
    try:
        return start + timedelta(seconds=max(-MAX_SECONDS, min(value, MAX_SECONDS)))
    except OverflowError:
        return NEVER


@dataclass(frozen=True, slots=True)
class Timing:
    """Tracker-wide timings that are not part of a teardown's policy."""

    finalizer_removal_delay: float = 10.0
    claim_timeout: float = 30.0
    verify_interval: float = 10.0


def deadline(record: Teardown, step: EscalationStep, timing: Timing) -> datetime | None:
    """When `step` becomes due, or None when the policy disables it.

    A recorded teardown carries its deadlines (fixed when it was recorded, so replicas with
    different settings agree); they are computed from the policy only to record them.
    """
    if record.deadlines:
        return record.deadlines.get(step)
    policy = record.policy
    start = record.teardown_started_at
    if step == "stuck_alert":
        if policy.stuck_alert_seconds <= 0:
            return None
        return after(start, policy.stuck_alert_seconds)
    if policy.force_deletion_seconds <= 0:
        return None
    force = after(start, policy.force_deletion_seconds)
    if step == "force_deletion":
        return force
    if policy.finalizer_removal != "AfterForceDeletion":
        return None
    return after(force, timing.finalizer_removal_delay)


def fix_deadlines(record: Teardown, timing: Timing) -> Teardown:
    """The record with its deadlines computed and stored."""
    fixed = {
        step: when
        for step in STEPS
        if (when := deadline(msgspec.structs.replace(record, deadlines={}), step, timing))
    }
    return msgspec.structs.replace(record, deadlines=fixed)


def _claim_live(state: StepState, *, now: datetime, me: str, timing: Timing) -> bool:
    if state.done_at is not None:
        return True
    if state.claimed_by == me:
        return False  # our own unfinished claim (we restarted): resume it
    return now < after(state.claimed_at, timing.claim_timeout)


def due_step(record: Teardown, *, now: datetime, me: str, timing: Timing) -> EscalationStep | None:
    """The step to run now, or None."""
    if record.clearing is not None or not record.open_objects:
        return None
    for step in STEPS:
        when = deadline(record, step, timing)
        if when is None:
            continue
        state = record.steps.get(step)
        if state is not None and state.done_at is not None:
            continue
        if now < when:
            return None  # steps run in ladder order
        if state is not None and _claim_live(state, now=now, me=me, timing=timing):
            return None
        return step
    return None


def claim(
    record: Teardown, step: EscalationStep, *, now: datetime, me: str, timing: Timing
) -> Teardown | None:
    """The record with `step` claimed by `me`, or None when `me` does not own the record or
    the step is not (or no longer) due (pure: applied inside a CAS loop, so a concurrent
    claim or a takeover makes it None)."""
    if record.owner != me or due_step(record, now=now, me=me, timing=timing) != step:
        return None
    steps = dict(record.steps)
    steps[step] = StepState(claimed_by=me, claimed_at=now)
    return msgspec.structs.replace(record, steps=steps)


def complete(
    record: Teardown,
    step: EscalationStep,
    *,
    now: datetime,
    me: str,
    objects: tuple[msgspec.Struct, ...] = (),
) -> Teardown | None:
    """The record with `step` marked done (None if it is already done)."""
    state = record.steps.get(step)
    if state is not None and state.done_at is not None:
        return None
    steps = dict(record.steps)
    steps[step] = StepState(
        claimed_by=state.claimed_by if state else me,
        claimed_at=state.claimed_at if state else now,
        done_at=now,
        objects=tuple(objects),  # type: ignore[arg-type]
    )
    return msgspec.structs.replace(record, steps=steps)


def verification_due(record: Teardown, *, now: datetime, timing: Timing) -> bool:
    if record.cleared:
        return False
    if record.last_verified_at is None or record.clearing is not None:
        return True
    return now >= periodic_verification_at(record, timing)


def periodic_verification_at(record: Teardown, timing: Timing) -> datetime:
    """When the periodic re-check of an open, verified record is due.

    ``verify_interval`` after the last verification — unless a watch event confirmed one of
    its objects since: its events are then still arriving (a burst being worked through), and
    a re-check, which exists for *missed* events, would only race the ones still queued. It
    then waits for ``verify_interval`` without confirmations, but never longer than twice the
    interval after the last verification. (The final verification, once every object is
    confirmed, is not periodic and never waits.)
    """
    assert record.last_verified_at is not None
    due = after(record.last_verified_at, timing.verify_interval)
    latest = max(
        (o.confirmed_at for o in record.objects.values() if o.confirmed_at is not None),
        default=None,
    )
    if latest is None or latest <= record.last_verified_at:
        return due
    quiet = after(latest, timing.verify_interval)
    return min(max(due, quiet), after(record.last_verified_at, 2 * timing.verify_interval))


def next_step_at(record: Teardown, *, me: str, timing: Timing) -> datetime | None:
    """When the next ladder step of this record falls due (None: no step left)."""
    if record.cleared:
        return None
    for step in STEPS:
        when = deadline(record, step, timing)
        if when is None or record.step_done(step):
            continue
        state = record.steps.get(step)
        if state is not None and state.claimed_by != me:
            when = max(when, after(state.claimed_at, timing.claim_timeout))
        return when
    return None


def next_wakeup(record: Teardown, *, now: datetime, me: str, timing: Timing) -> datetime | None:
    """The earliest moment something may be due for this record (for scheduling)."""
    if record.cleared:
        return None
    moments: list[datetime] = []
    if record.last_verified_at is None:
        moments.append(now)
    else:
        moments.append(periodic_verification_at(record, timing))
    step_at = next_step_at(record, me=me, timing=timing)
    if step_at is not None:
        moments.append(step_at)
    return min(moments)


def stuck_objects_count(record: Teardown, *, now: datetime, timing: Timing) -> int:
    """Open objects of a teardown past its stuck-alert deadline (the stuck gauge)."""
    when = deadline(record, "stuck_alert", timing)
    if record.cleared or when is None or now < when:
        return 0
    return len(record.open_objects)


def next_work(
    record: Teardown, *, now: datetime, me: str, timing: Timing, verified: bool = False
) -> Work | None:
    """What replica `me` must do next for `record`, or None (not its record, or nothing due).

    In order: publish `cleared` once it is fixed; verify when every tracked UID is confirmed
    (the final quorum LIST) or the periodic re-check is due — unless ``verified`` (this
    evaluation already verified); else the due ladder step.
    """
    if record.owner != me or record.cleared:
        return None
    if record.clearing is not None:
        return "publish_cleared"
    if not verified and (record.all_confirmed or verification_due(record, now=now, timing=timing)):
        return "verify"
    return due_step(record, now=now, me=me, timing=timing)
