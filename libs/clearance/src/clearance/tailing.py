"""Tail cycle events and alerts from NATS for people and scripts (``clearance events``).

Users subscribe to Clearance without writing code: a pager hook pipes ``clearance events
--alerts --json`` into its webhook, an operator watches ``clearance events -n team-a``. The
tail uses an ordered, ephemeral JetStream consumer: it reads the stored history from
``--since`` onward, then follows new messages, and leaves nothing behind on the server.

:func:`describe` (one readable line per event) is pure and tested on its own; :func:`tail`
does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from nats.aio.client import Client as NatsClient
from nats.js import api

from clearance import events, subjects
from clearance.causes import cause_text
from clearance.events import (
    AlertDeletionForced,
    AlertDeletionStuck,
    AlertDispatchFailed,
    AlertNodeLost,
    AlertRequeueLimit,
    CycleCleared,
    CycleDeletionConfirmed,
    CycleDeletionForced,
    CycleDispatched,
    CycleFailed,
    CycleFinalizersRemoved,
    CycleRedispatched,
    CycleRequeued,
    CycleTeardownStarted,
    ObjectRef,
    StuckObject,
)
from clearance.tasks import raise_if_cancelling


@dataclass(frozen=True, slots=True)
class TailRequest:
    """What to tail: alerts or cycle events, optionally narrowed, from when."""

    alerts: bool = False
    namespace: str | None = None
    appwrapper: str | None = None
    since: timedelta | None = None
    """Replay stored messages this far back; ``None``: new messages only (or all, if not
    following)."""
    follow: bool = True
    """Keep following new messages; False: print what is stored and exit."""

    @property
    def stream(self) -> str:
        return subjects.ALERT_STREAM if self.alerts else subjects.CYCLE_STREAM

    @property
    def subject_filter(self) -> str:
        if self.alerts:
            return subjects.alert_filter(namespace=self.namespace, appwrapper=self.appwrapper)
        return subjects.cycle_filter(namespace=self.namespace, appwrapper=self.appwrapper)


def _ref(obj: ObjectRef) -> str:
    return f"{obj.kind.lower()} {obj.name}"


def _refs(objs: tuple[ObjectRef, ...], limit: int = 4) -> str:
    """One entry per object (by UID): older dispatchers listed a bare-Pod item twice."""
    objs = tuple({o.uid or f"{o.kind}/{o.name}": o for o in objs}.values())
    shown = ", ".join(_ref(o) for o in objs[:limit])
    return shown + (f" (+{len(objs) - limit} more)" if len(objs) > limit else "")


def _stuck(obj: StuckObject) -> str:
    return f"{_ref(obj.object)}: " + "; ".join(cause_text(c) for c in obj.reasons)


def _details(event: events.CycleEvent | events.AlertEvent) -> str:
    match event:
        case CycleDispatched(items=items):
            return f"created {_refs(items)}" if items else "dispatched"
        case CycleRequeued(reason=reason, number_of_requeueings=n):
            return f"requeue #{n}: {reason}"
        case CycleTeardownStarted(inventory=inventory, policy=policy):
            return (
                f"deleting {_refs(inventory)}; alert after {policy.stuck_alert_seconds}s, "
                f"force after {policy.force_deletion_seconds}s"
            )
        case CycleDeletionConfirmed(confirmed=confirmed):
            return "; ".join(
                f"{_ref(c.object)} gone ({c.how.replace('_', ' ')})" for c in confirmed
            )
        case CycleDeletionForced(objects=objs):
            return f"force-deleted {_refs(objs)}"
        case CycleFinalizersRemoved(removed=removed):
            return "removed finalizers from " + ", ".join(
                f"{_ref(r.object)} ({', '.join(r.finalizers)})" for r in removed
            )
        case CycleCleared(confirmed=confirmed):
            return f"teardown complete, {len(confirmed)} object(s) confirmed gone"
        case CycleRedispatched(pause_seconds=pause):
            return f"redispatched after a {pause:.0f}s pause"
        case CycleFailed(reason=reason, message=message):
            return f"{reason}: {message}" if message else reason
        case AlertDeletionStuck(stuck=stuck, elapsed_seconds=elapsed, step=step):
            # Rendered from the structured diagnosis, whatever wording the producer chose.
            return (
                f"{len(stuck)} object(s) left {elapsed:.0f}s into the teardown "
                f"[{step.replace('_', ' ')}]: " + " | ".join(_stuck(s) for s in stuck)
            )
        case AlertNodeLost(summary=summary) | AlertRequeueLimit(summary=summary):
            return summary
        case AlertDispatchFailed(summary=summary) | AlertDeletionForced(summary=summary):
            return summary
    fallback = getattr(event, "summary", None) or getattr(event, "message", None)
    return str(fallback) if fallback else ""


def describe(event: events.CycleEvent | events.AlertEvent) -> str:
    """One line for a human: time, severity, AppWrapper and attempt, event, details."""
    when = event.occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    severity = getattr(event, "severity", "info").upper()
    aw = event.appwrapper
    name = event.event_type.split(".", 1)[1]
    return f"{when}  {severity:<8} {aw.namespace}/{aw.name} #{event.attempt}  {name:<18} " + (
        _details(event)
    )


def consumer_config(request: TailRequest, *, now: datetime | None = None) -> api.ConsumerConfig:
    """The ordered consumer's start position for a request."""
    if request.since is not None:
        start = (now or datetime.now(UTC)) - request.since
        return api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_TIME, opt_start_time=start
        )
    policy = api.DeliverPolicy.NEW if request.follow else api.DeliverPolicy.ALL
    return api.ConsumerConfig(deliver_policy=policy)


Printer = Callable[[str], None]


FOLLOW_HEARTBEAT: Final = 1.0
"""Idle heartbeat (s) of a following ordered consumer. nats-py re-creates the consumer after
two missed heartbeats: with its default 5 s, a follower whose NATS node was killed resumed
only after up to ~15 s (the HA demo's stuck alert, sent during the fail-over, was not shown
before the demo ended); with 1 s, within ~2-3 s."""


async def tail(
    nc: NatsClient,
    request: TailRequest,
    *,
    emit: Printer,
    as_json: bool = False,
    idle_exit: float = 1.0,
    stop: asyncio.Event | None = None,
) -> int:
    """Print matching events until ``stop`` is set (or, without follow, until caught up).

    Returns how many events were printed. Messages that are not valid events are shown as
    such instead of ending the tail.
    """
    js = nc.jetstream()
    stop = stop or asyncio.Event()
    printed = 0
    sub = await js.subscribe(
        request.subject_filter,
        stream=request.stream,
        ordered_consumer=True,
        idle_heartbeat=FOLLOW_HEARTBEAT if request.follow else None,
        config=consumer_config(request),
    )
    try:
        while not stop.is_set():
            raise_if_cancelling()  # next_msg may have swallowed a cancellation
            try:
                msg = await sub.next_msg(timeout=idle_exit)
            except TimeoutError:
                if not request.follow:
                    return printed
                continue
            try:
                event = events.decode(msg.data)
            except events.EventDecodeError as exc:
                emit(f"(undecodable message on {msg.subject}: {exc})")
                continue
            if isinstance(event, events.KubeEvent):
                continue
            emit(msg.data.decode() if as_json else describe(event))
            printed += 1
            if not request.follow and msg.metadata.num_pending == 0:
                return printed
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return printed
