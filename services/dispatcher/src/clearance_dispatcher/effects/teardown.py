"""Teardown of one attempt: open the requeue cycle, delete the items, announce the teardown.

:meth:`Teardown.start` follows the monitor's requeue/fail decision: a new ``requeue.cycle`` root,
the ``start_teardown`` transition (``tearingDown`` = the attempt, the root's traceparent), the
user-facing Event, and for a failure ``failed`` (+ ``requeue.limit``). :meth:`Teardown.run`
(also the resume point after a crash, and the path of a Failed dispatch) deletes the items of
``tearingDown``, publishes ``requeued`` + ``teardown.started`` with the inventory and the
resolved policy, then marks the teardown announced. From then on only the tracker's ``cleared``
moves the AppWrapper on.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

from clearance import labels
from clearance.events import (
    AlertRequeueLimit,
    CycleFailed,
    CycleRequeued,
    CycleTeardownStarted,
    ObjectRef,
)
from clearance.telemetry import traceparent_of
from clearance_dispatcher import transitions
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.cycles import CycleRoots, attributes
from clearance_dispatcher.deletion import delete_items
from clearance_dispatcher.policy import teardown_policy
from clearance_dispatcher.requeueing import Counts, Fail, Requeue
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.state import Entry, Key
from clearance_dispatcher.transitions import MESSAGE_LIMIT

log = logging.getLogger(__name__)


class Teardown:
    def __init__(self, rt: Runtime, roots: CycleRoots) -> None:
        self.rt = rt
        self.roots = roots

    async def start(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        counts: Counts,
        decision: Requeue | Fail,
    ) -> None:
        """Requeue or fail the dispatched attempt: the decision first, then the teardown."""
        rt = self.rt
        now = rt.now()
        before = entry.observed
        attempt = before.clearance.attempt
        ref = rt.ref(entry)
        root = self.roots.start(ref, attempt=attempt, reason=decision.reason, at=now)
        traceparent = traceparent_of(root)
        try:
            written = await rt.write(
                key,
                lambda obs: transitions.start_teardown(
                    obs,
                    attempt=attempt,
                    decision=decision,
                    cycle_traceparent=traceparent,
                    counts=counts,
                    now=now,
                ),
            )
        except BaseException:
            # Not ended, so never exported: the decision was not recorded, and the retry opens
            # the cycle's one root (an ended root here was a second ``requeue.cycle``).
            raise
        if written is None:
            return  # nothing decided: the root is dropped unended (no span is exported)
        self.roots.keep(entry.local, root)
        rt.crash_point("requeue.decided")
        where = {"aw": f"{key[0]}/{key[1]}", "attempt": attempt}
        if isinstance(decision, Requeue):
            rt.metrics.requeues.inc()
            log.info(
                "requeue",
                extra=where
                | {"reason": decision.message, "requeues": decision.number_of_requeueings},
            )
            await rt.warn(
                entry, decision.reason, decision.message, key=f"requeue:{attempt}", type_="Normal"
            )
        else:
            rt.metrics.failures.labels(decision.reason).inc()
            log.warning(
                "failed", extra=where | {"reason": decision.reason, "error": decision.message}
            )
            await rt.warn(entry, decision.reason, decision.message, key=f"failed:{attempt}")
            parent = trace.set_span_in_context(root)
            await rt.publish(
                CycleFailed(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    reason=decision.reason,
                    message=decision.message[:MESSAGE_LIMIT],
                    cycle_traceparent=traceparent,
                ),
                parent=parent,
            )
            if decision.reason == "MaxNumRequeuingsReached":
                requeues = before.number_of_requeueings
                limit = spec.requeuing.max_num_requeuings
                await rt.publish(
                    AlertRequeueLimit(
                        appwrapper=ref,
                        attempt=attempt,
                        occurred_at=now,
                        summary=f"{key[0]}/{key[1]} failed after {requeues} requeues "
                        f"(maxNumRequeuings={limit})",
                        number_of_requeueings=requeues,
                        max_num_requeuings=limit,
                        cycle_traceparent=traceparent,
                    ),
                    parent=parent,
                )
        await self.run(key, rt.state.appwrappers.get(key, entry), spec, counts=counts)

    async def run(
        self, key: Key, entry: Entry, spec: AppWrapperSpec, *, counts: Counts | None = None
    ) -> None:
        """Delete the items of ``tearingDown`` and announce the teardown (idempotent)."""
        rt = self.rt
        obs = entry.observed
        cl = obs.clearance
        attempt = cl.tearing_down
        if attempt is None:
            return
        now = rt.now()
        ref = rt.ref(entry)
        with rt.tracer.start_as_current_span(
            "teardown.delete",
            context=self.roots.context(entry.local, cl.cycle_traceparent),
            attributes=attributes(ref, attempt, "teardown"),
        ):
            deleted = await delete_items(rt.kube, rt.discovery, spec, attempt=attempt)
            rt.crash_point("teardown.deleted")
            inventory: list[ObjectRef] = list(deleted)
            listed = {ref.uid for ref in deleted}  # a bare-Pod item is one object, one entry
            for pod in rt.state.pods_of(key):
                found = labels.attempt_of(pod.metadata.labels)
                if pod.metadata.uid in listed:
                    continue
                if found is None or found <= attempt:
                    inventory.append(
                        ObjectRef(
                            kind="Pod",
                            api_version="v1",
                            namespace=pod.metadata.namespace,
                            name=pod.metadata.name,
                            uid=pod.metadata.uid,
                        )
                    )
            started_at = cl.teardown_started_at or now
            parent = trace.set_span_in_context(trace.get_current_span())
            if cl.phase == "TearingDown":
                counts = counts or rt.state.counts(key, attempt)
                await rt.publish(
                    CycleRequeued(
                        appwrapper=ref,
                        attempt=attempt,
                        occurred_at=started_at,
                        reason=obs.message or "requeued",
                        number_of_requeueings=obs.number_of_requeueings,
                        running=counts.running,
                        succeeded=counts.succeeded,
                        min_available=spec.min_available,
                        cycle_traceparent=cl.cycle_traceparent,
                    ),
                    parent=parent,
                )
            await rt.publish(
                CycleTeardownStarted(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=started_at,
                    inventory=tuple(inventory),
                    policy=teardown_policy(spec, rt.settings),
                    cycle_traceparent=cl.cycle_traceparent,
                ),
                parent=parent,
            )
        rt.crash_point("teardown.published")
        await rt.write(key, lambda o: transitions.announce_teardown(o, attempt=attempt, now=now))
        rt.request_scan()
