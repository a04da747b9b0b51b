"""Dispatch of one attempt: the safety belt, the decision, the items, the announcement.

Order (each step repeatable after a crash): a quorum LIST must find no pod of another attempt
or of an earlier AppWrapper of the name (else ``Backoff/OldObjectsPresent``); from the queue,
``begin_dispatch`` writes ``attempt`` first; the items are created inside span ``dispatch`` (or
``redispatch``, a child of the open cycle root); ``dispatched`` (+ ``redispatched``) are
published; ``finish_dispatch`` ends the cycle's root. A blocked item or a transient error backs
off; a permanent one fails the AppWrapper and tears down what this attempt created.
"""

from __future__ import annotations

import contextlib
import logging

from clearance import bus, labels
from clearance.events import AlertDispatchFailed, CycleDispatched, CycleFailed, CycleRedispatched
from clearance.kube import PODS
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
from clearance_dispatcher.intake import POD_DECODER, pod_selector
from clearance_dispatcher.policy import default_wait, pause_seconds
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

    async def older_pods(self, spec: AppWrapperSpec, attempt: int) -> list[str]:
        """Quorum LIST: pods of this AppWrapper's name created for another attempt, or for an
        earlier AppWrapper of the same name (created before this one)."""
        result = await self.rt.kube.list(
            PODS, namespace=spec.namespace, label_selector=pod_selector(spec)
        )
        old = []
        for raw in result.items:
            pod = POD_DECODER.decode(raw)
            found = labels.attempt_of(pod.metadata.labels)
            if found is None:
                continue  # not created through Clearance
            born = pod.metadata.creation_timestamp
            if found != attempt:
                old.append(f"{pod.metadata.name} (attempt {found})")
            elif spec.creation is not None and born is not None and born < spec.creation:
                old.append(f"{pod.metadata.name} (an earlier AppWrapper of this name)")
        return old

    async def run(self, key: Key, entry: Entry, spec: AppWrapperSpec, *, attempt: int) -> None:
        """Dispatch ``attempt`` (from the queue, or resumed while Dispatching)."""
        rt = self.rt
        now = rt.now()
        checked, entry.local.belt_checked = entry.local.belt_checked, None
        fresh = checked == attempt and entry.observed.clearance.phase == "Dispatching"
        # The cleared handler ran this LIST right before writing Dispatching: not twice.
        older = [] if fresh else await self.older_pods(spec, attempt)
        if older:
            entry.local.admitted = False
            message = "objects of an earlier attempt still exist: " + ", ".join(older[:5])
            await self._backoff(key, "OldObjectsPresent", message)
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
