"""Monitoring of a dispatched attempt: pod counts, completion, and the requeue decision.

Counts come from the cache and are written to status (``record_counts``, counts-only changes
at most once per ``counts_write_interval``); items with a
``completionstatus`` are polled every ``monitor_interval`` (GET of each item) and all complete
→ ``complete``. The verdict is :func:`clearance_dispatcher.requeueing.decide` (pure); a verdict
other than Keep is never taken on cached counts alone: the pods are re-counted from a quorum LIST
first, and only then handed to :class:`~clearance_dispatcher.effects.teardown.Teardown`, whose
``start_teardown`` write carries those counts (no separate counts write before it: a rack loss
requeues hundreds of gangs at once, and every write is a request against the API's rate).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import msgspec

from clearance.discovery import UnknownKind
from clearance.events import CycleCompleted
from clearance.kube import KubeError
from clearance_dispatcher import transitions
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.effects.teardown import Teardown
from clearance_dispatcher.intake import Intake
from clearance_dispatcher.policy import default_wait
from clearance_dispatcher.requeueing import Counts, Decision, Keep, current_wait, decide
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.state import Entry, Key
from clearance_dispatcher.status import Observed, Patch

log = logging.getLogger(__name__)


class Monitor:
    def __init__(self, rt: Runtime, intake: Intake, teardown: Teardown) -> None:
        self.rt = rt
        self.intake = intake
        self.teardown = teardown

    async def run(self, key: Key, entry: Entry, spec: AppWrapperSpec) -> None:
        rt = self.rt
        now = rt.now()
        obs = entry.observed
        attempt = obs.clearance.attempt
        counts = rt.state.counts(key, attempt)
        if spec.completion_items and await self._completed(entry, spec):
            await self._complete(key, entry, spec, attempt)
            return
        dispatched_at = obs.clearance.dispatched_at or now
        fallback = default_wait(rt.settings)
        wait = current_wait(obs.requeueing_time_in_seconds, spec.requeuing, fallback)

        def verdict(counts: Counts) -> Decision:
            return decide(
                now=now,
                dispatched_at=dispatched_at,
                first_dispatched_at=obs.first_dispatched_at,
                counts=counts,
                min_available=spec.min_available,
                requeuing=spec.requeuing,
                wait_seconds=wait,
                default_wait=fallback,
                number_of_requeueings=obs.number_of_requeueings,
                dispatch_limit_seconds=spec.dispatch_limit_seconds,
            )

        decision = verdict(counts)
        if not isinstance(decision, Keep):
            # Never tear an attempt down on cached counts alone (a lost or deduplicated pod
            # event would requeue a running attempt every wait period): re-count from a
            # quorum LIST first. Requeues are rare, the LIST is cheap.
            await self.intake.relist_pods_of(key, spec)
            fresh = rt.state.counts(key, attempt)
            if fresh != counts:
                log.info(
                    "pod cache was stale; counts corrected from a LIST before deciding",
                    extra={
                        "aw": f"{key[0]}/{key[1]}",
                        "attempt": attempt,
                        "cached_running": counts.running,
                        "running": fresh.running,
                    },
                )
                counts = fresh
                decision = verdict(counts)
            if isinstance(decision, Keep):
                await self._record(key, entry, spec, counts, attempt, at_once=True)
        else:
            await self._record(key, entry, spec, counts, attempt)
        if isinstance(decision, Keep):
            next_check = rt.settings.monitor_interval if spec.completion_items else None
            if decision.recheck_at is not None:
                until = (decision.recheck_at - now).total_seconds() + 0.05
                next_check = until if next_check is None else min(next_check, until)
            if next_check is not None:
                rt.queue.add_after(key, max(0.05, next_check))
            return
        await self.teardown.start(key, entry, spec, counts, decision)

    async def _record(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        counts: Counts,
        attempt: int,
        *,
        at_once: bool = False,
    ) -> None:
        """Write the counts; a counts-only change waits out ``counts_write_interval`` since the
        last one (a reconcile is queued for its end), a condition change never waits."""
        rt = self.rt
        now = rt.now()

        def change(obs: Observed) -> Patch | None:
            return transitions.record_counts(
                obs, attempt=attempt, counts=counts, min_available=spec.min_available, now=now
            )

        preview = change(entry.observed)
        if preview is None:
            return
        wait = transitions.counts_write_delay(
            preview,
            since_last=time.monotonic() - entry.local.counts_written,
            interval=rt.settings.counts_write_interval,
            at_once=at_once,
        )
        if wait > 0:
            rt.queue.add_after(key, wait)
            return
        written = await rt.write(key, change)
        if written is not None:
            entry.local.counts_written = time.monotonic()

    async def _completed(self, entry: Entry, spec: AppWrapperSpec) -> bool:
        """Every item with a completionstatus reports one of its listed conditions True."""
        rt = self.rt
        if time.monotonic() - entry.local.last_poll < rt.settings.monitor_interval * 0.9:
            return False
        entry.local.last_poll = time.monotonic()
        for item in spec.completion_items:
            try:
                resource = await rt.discovery.resolve(item.api_version, item.kind)
                raw = msgspec.json.decode(
                    await rt.kube.get(
                        resource,
                        item.name,
                        namespace=spec.namespace if resource.namespaced else None,
                    )
                )
            except (KubeError, UnknownKind):
                return False
            conds = (raw.get("status") or {}).get("conditions") or []
            if not any(
                c.get("type") in item.completion_status and c.get("status") == "True"
                for c in conds
                if isinstance(c, Mapping)
            ):
                return False
        return True

    async def _complete(self, key: Key, entry: Entry, spec: AppWrapperSpec, attempt: int) -> None:
        rt = self.rt
        now = rt.now()
        # Final counts from a quorum LIST: pod events may lag the item's completion.
        await self.intake.relist_pods_of(key, spec)
        counts = rt.state.counts(key, attempt)
        written = await rt.write(
            key, lambda obs: transitions.complete(obs, attempt=attempt, counts=counts, now=now)
        )
        if written is None:
            return
        rt.metrics.completions.inc()
        log.info("completed", extra={"aw": f"{key[0]}/{key[1]}", "attempt": attempt})
        await rt.publish(
            CycleCompleted(
                appwrapper=rt.ref(entry),
                attempt=attempt,
                occurred_at=now,
                message="every item completed",
            )
        )
        rt.request_scan()
