"""Dispatch of one attempt: the safety belt, the decision, the items, the announcement.

Order (each step repeatable after a crash): quorum reads must find no leftover — no object under
a name the attempt will create and no labelled object of another attempt or of an earlier
AppWrapper of the name (:mod:`clearance_dispatcher.leftovers`; else ``Blocked`` naming each with
its diagnosis, and an earlier incarnation's leftovers go to the tracker); from the queue,
``begin_dispatch`` writes ``attempt`` first; the items are created inside span ``dispatch`` (or
``redispatch``, a child of the open cycle root); ``dispatched`` (+ ``redispatched``) are
published; ``finish_dispatch`` ends the cycle's root. A blocked item or a transient error backs
off; a permanent one fails the AppWrapper and tears down what this attempt created.
"""

from __future__ import annotations

import contextlib
import logging

from clearance import bus, testfaults
from clearance.events import (
    AlertDispatchFailed,
    AppWrapperRef,
    CycleDispatched,
    CycleFailed,
    CycleRedispatched,
    CycleTeardownStarted,
)
from clearance_dispatcher import transitions
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.cycles import CycleRoots, attributes
from clearance_dispatcher.dispatching import (
    Blocked,
    Created,
    PermanentFailure,
    TransientFailure,
    create_items,
)
from clearance_dispatcher.effects.teardown import Teardown
from clearance_dispatcher.leftovers import Leftover, find_leftovers, incarnations, summary
from clearance_dispatcher.policy import default_wait, pause_seconds, teardown_policy
from clearance_dispatcher.requeueing import current_wait
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.state import Entry, Key
from clearance_dispatcher.transitions import MESSAGE_LIMIT

log = logging.getLogger(__name__)


class Dispatch:
    def __init__(self, rt: Runtime, roots: CycleRoots, teardown: Teardown) -> None:
        self.rt = rt
        self.roots = roots
        self.teardown = teardown

    async def leftovers(self, spec: AppWrapperSpec, attempt: int) -> list[Leftover]:
        """Quorum reads: every object that must go before ``attempt`` is created (any kind, any
        earlier attempt or incarnation; :mod:`clearance_dispatcher.leftovers`)."""
        rt = self.rt
        found = await find_leftovers(rt.kube, rt.discovery, spec, attempt=attempt)
        if testfaults.active("incarnation-blind"):
            return [x for x in found if x.ref.kind == "Pod"]
        return found

    async def older_pods(self, spec: AppWrapperSpec, attempt: int) -> list[str]:
        """The leftovers, described (the ``cleared`` handler's safety belt)."""
        return [x.describe() for x in await self.leftovers(spec, attempt)]

    async def run(self, key: Key, entry: Entry, spec: AppWrapperSpec, *, attempt: int) -> None:
        """Dispatch ``attempt`` (from the queue, or resumed while Dispatching)."""
        rt = self.rt
        now = rt.now()
        checked, entry.local.belt_checked = entry.local.belt_checked, None
        fresh = checked == attempt and entry.observed.clearance.phase == "Dispatching"
        # The cleared handler ran this check right before writing Dispatching: not twice.
        left = [] if fresh else await self.leftovers(spec, attempt)
        if left:
            entry.local.admitted = False
            await self._blocked(entry, spec, left)
            rt.queue.add_after(key, rt.next_backoff(entry))
            return
        if entry.observed.clearance.phase == "Queued":
            written = await rt.write(
                key, lambda obs: transitions.begin_dispatch(obs, attempt=attempt, now=now)
            )
            entry.local.admitted = False
            if written is None:
                rt.queue.add(key)
                return
            rt.crash_point("dispatch.started")
            entry = rt.state.appwrappers[key]
        cl = entry.observed.clearance
        redispatch = cl.is_redispatch
        name = "redispatch" if redispatch else "dispatch"
        parent = self.roots.context(entry.local, cl.cycle_traceparent) if redispatch else None
        with rt.tracer.start_as_current_span(
            name, context=parent, attributes=attributes(rt.ref(entry), attempt, name)
        ):
            outcome = await create_items(
                rt.kube, rt.discovery, spec, attempt=attempt, aw_api_version=rt.aw_api_version
            )
            if isinstance(outcome, Blocked):
                await self._backoff(key, "ItemBlocked", outcome.message)
                rt.queue.add_after(key, rt.next_backoff(entry))
                return
            if isinstance(outcome, TransientFailure):
                await self._creation_problem(
                    key,
                    entry,
                    spec,
                    attempt,
                    "ItemCreationFailure",
                    outcome.message,
                    permanent=False,
                )
                rt.queue.add_after(key, rt.next_backoff(entry))
                return
            if isinstance(outcome, PermanentFailure):
                await self._creation_problem(
                    key, entry, spec, attempt, outcome.reason, outcome.message, permanent=True
                )
                return
            rt.crash_point("dispatch.created")
            await self._finish(key, entry, spec, attempt, outcome)

    async def _finish(
        self, key: Key, entry: Entry, spec: AppWrapperSpec, attempt: int, outcome: Created
    ) -> None:
        rt = self.rt
        now = rt.now()
        ref = rt.ref(entry)
        before = rt.state.appwrappers[key].observed
        cl = before.clearance
        await rt.publish(
            CycleDispatched(
                appwrapper=ref,
                attempt=attempt,
                occurred_at=now,
                items=outcome.refs,
                cycle_traceparent=cl.cycle_traceparent if cl.is_redispatch else None,
            )
        )
        if cl.is_redispatch and cl.cleared_at is not None:
            await rt.publish(
                CycleRedispatched(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    cleared_at=cl.cleared_at,
                    pause_seconds=float(pause_seconds(spec, rt.settings)),
                    cycle_traceparent=cl.cycle_traceparent,
                )
            )
        rt.crash_point("dispatch.published")
        written = await rt.write(
            key,
            lambda obs: transitions.finish_dispatch(
                obs,
                attempt=attempt,
                items=len(outcome.refs),
                min_available=spec.min_available,
                now=now,
            ),
        )
        if written is None:
            return
        rt.metrics.dispatches.labels("redispatch" if cl.is_redispatch else "first").inc()
        if cl.is_redispatch:
            if cl.cleared_at is not None:
                latency = max(0.0, (now - cl.cleared_at).total_seconds())
                rt.metrics.redispatch_latency.observe(latency)
            self.roots.finish(entry.local, ref, cl, outcome="redispatched")
        log.info(
            "dispatched",
            extra={"aw": f"{key[0]}/{key[1]}", "attempt": attempt, "items": len(outcome.refs)},
        )
        wait = current_wait(
            before.requeueing_time_in_seconds, spec.requeuing, default_wait(rt.settings)
        )
        rt.queue.add_after(key, wait + 0.05)
        rt.request_scan()

    async def _blocked(self, entry: Entry, spec: AppWrapperSpec, left: list[Leftover]) -> None:
        """Say what holds the dispatch, and hand earlier incarnations' leftovers to the tracker
        (one ``teardown.started`` per incarnation and attempt: it alerts, escalates, confirms)."""
        rt = self.rt
        now = rt.now()
        message = summary(left)[:MESSAGE_LIMIT]
        key: Key = (spec.namespace, spec.name)
        await rt.write(key, lambda obs: transitions.blocked(obs, message=message, now=now))
        await rt.warn(entry, "LeftoverObjects", message, key=f"blocked:{left[0].ref.uid}")
        for (uid, attempt), objects in incarnations(left).items():
            if uid == spec.uid or (uid, attempt) in entry.local.announced:
                continue
            with contextlib.suppress(bus.PublishError):
                await rt.publish(
                    CycleTeardownStarted(
                        appwrapper=AppWrapperRef(namespace=spec.namespace, name=spec.name, uid=uid),
                        attempt=attempt,
                        occurred_at=now,
                        inventory=tuple(o.ref for o in objects),
                        policy=teardown_policy(spec, rt.settings),
                    )
                )
                entry.local.announced.add((uid, attempt))

    async def _backoff(self, key: Key, reason: str, message: str) -> None:
        now = self.rt.now()
        await self.rt.write(
            key, lambda obs: transitions.backoff(obs, reason=reason, message=message, now=now)
        )

    async def _creation_problem(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        attempt: int,
        reason: str,
        message: str,
        *,
        permanent: bool,
    ) -> None:
        rt = self.rt
        now = rt.now()
        ref = rt.ref(entry)
        await rt.warn(entry, reason, message, key=f"create:{attempt}:{reason}")
        with contextlib.suppress(bus.PublishError):
            await rt.publish(
                AlertDispatchFailed(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    reason=reason,
                    message=message[:MESSAGE_LIMIT],
                    summary=f"dispatch of attempt {attempt} failed: {reason}",
                    severity="critical" if permanent else "warning",
                )
            )
        if not permanent:
            await self._backoff(key, reason, message)
            return
        rt.metrics.failures.labels(reason).inc()
        written = await rt.write(
            key,
            lambda obs: transitions.fail_creation(
                obs, attempt=attempt, reason=reason, message=message, now=now
            ),
        )
        if written is None:
            return
        await rt.publish(
            CycleFailed(
                appwrapper=ref,
                attempt=attempt,
                occurred_at=now,
                reason=reason,
                message=message[:MESSAGE_LIMIT],
            )
        )
        await self.teardown.run(key, rt.state.appwrappers[key], spec)
