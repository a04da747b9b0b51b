"""When to requeue, how long to wait, and when to give up (pure; MCAD v1 semantics).

Wait after a dispatch before pods are counted (``status.requeueingTimeInSeconds``): the first
attempt waits ``timeInSeconds`` (default 300). Each requeue grows it (MCAD v1
``PreemptQueueJobs``): ``exponential`` doubles it, ``linear`` adds ``initialTimeInSeconds``
(else ``timeInSeconds``), ``none`` keeps it; ``maxTimeInSeconds`` > 0 caps it.

Requeue when ``now > dispatchedAt + wait`` and ``running + succeeded < max(minAvailable, 1)``
(MCAD v2's ``countPods`` rule: a Terminating pod is never running).

``maxNumRequeuings`` (> 0) is compared with ``status.numberOfRequeueings`` — the counter the
controller actually increments. MCAD v1 compares the *spec* counter it no longer increments, so
its limit never fires; here, with limit L, the AppWrapper is requeued exactly L times and the
(L+1)-th decision turns it Failed (and it is torn down).

No arithmetic here can raise: the spec's durations are within :mod:`clearance.bounds` (the
parser refuses others), and every wait computed or read back from status is clamped to
:data:`~clearance.bounds.MAX_DURATION` (an exponential wait doubles without end otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from clearance.bounds import MAX_DURATION
from clearance_dispatcher.appwrapper import Requeuing

_MAX_WAIT = int(MAX_DURATION)


def _clamped(seconds: int) -> int:
    return max(0, min(seconds, _MAX_WAIT))


@dataclass(frozen=True, slots=True)
class Counts:
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    terminating: int = 0


def initial_wait(requeuing: Requeuing, default_seconds: int) -> int:
    base = requeuing.time_in_seconds
    if base is None:
        base = requeuing.initial_time_in_seconds
    return _clamped(default_seconds if base is None else base)


def current_wait(stored: int | None, requeuing: Requeuing, default_seconds: int) -> int:
    """The wait in force: the grown value in status, else the initial one."""
    if stored is not None and stored > 0:
        return _clamped(stored)  # status is writable by anyone: never trusted unbounded
    return initial_wait(requeuing, default_seconds)


def grown_wait(current: int, requeuing: Requeuing, default_seconds: int) -> int:
    """The wait after one more requeue."""
    step = requeuing.initial_time_in_seconds
    if step is None:
        step = initial_wait(requeuing, default_seconds)
    if requeuing.growth_type == "exponential":
        value = max(current, 1) * 2
    elif requeuing.growth_type == "linear":
        value = current + step
    else:
        value = current
    if requeuing.max_time_in_seconds > 0:
        value = min(value, requeuing.max_time_in_seconds)
    return _clamped(value)


@dataclass(frozen=True, slots=True)
class Keep:
    """Nothing to do; look again at ``recheck_at`` (None: only on a change)."""

    recheck_at: datetime | None


@dataclass(frozen=True, slots=True)
class Requeue:
    reason: str
    message: str
    number_of_requeueings: int
    next_wait: int


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str
    message: str


Decision = Keep | Requeue | Fail


def enough(counts: Counts, min_available: int) -> bool:
    return counts.running + counts.succeeded >= max(min_available, 1)


def decide(
    *,
    now: datetime,
    dispatched_at: datetime,
    first_dispatched_at: datetime | None,
    counts: Counts,
    min_available: int,
    requeuing: Requeuing,
    wait_seconds: int,
    default_wait: int,
    number_of_requeueings: int,
    dispatch_limit_seconds: int | None,
) -> Decision:
    """The monitor's verdict for one dispatched attempt."""
    if dispatch_limit_seconds is not None and first_dispatched_at is not None:
        deadline = first_dispatched_at + timedelta(seconds=_clamped(dispatch_limit_seconds))
        if now > deadline:
            return Fail(
                "DispatchDeadlineExceeded",
                f"dispatchDuration.limit of {dispatch_limit_seconds}s exceeded",
            )
    else:
        deadline = None
    due = dispatched_at + timedelta(seconds=_clamped(wait_seconds))
    if enough(counts, min_available):
        return Keep(deadline)
    if now <= due:
        return Keep(min(due, deadline) if deadline is not None else due)
    minimum = max(min_available, 1)
    message = (
        f"Insufficient number of Running and Completed pods, minimum={minimum}, "
        f"running={counts.running}, completed={counts.succeeded}."
    )
    limit = requeuing.max_num_requeuings
    if limit > 0 and number_of_requeueings >= limit:
        return Fail(
            "MaxNumRequeuingsReached",
            f"{message} Requeued {number_of_requeueings} times, maxNumRequeuings={limit}.",
        )
    return Requeue(
        reason="MinPodsNotRunning",
        message=message,
        number_of_requeueings=number_of_requeueings + 1,
        next_wait=grown_wait(wait_seconds, requeuing, default_wait),
    )
