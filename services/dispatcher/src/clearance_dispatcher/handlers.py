"""The tracker's messages to the dispatcher: ``cleared`` (the redispatch gate), ``deletion.stuck``.

``cleared`` of attempt N is accepted only while the bookkeeping awaits exactly that attempt
(``tearingDown`` = N, :func:`~clearance_dispatcher.transitions.accept_cleared`); anything else —
a duplicate, a stale attempt, an unknown AppWrapper — is counted and acknowledged without
effect. Accepted with a zero pause and room in the cluster (the queue scan's own rule,
:meth:`~clearance_dispatcher.admission.Admission.admits`), the requeue and the Dispatching of
N+1 are one status write - after the dispatch's safety-belt LIST found no pod of another
attempt, so an attempt is never written while old pods exist - and a worker creates the items
at once, with no scan and no second LIST in between;
otherwise the AppWrapper is queued again and the queue scan woken; a Failed attempt's
``cleared`` ends its cycle root instead. ``deletion.stuck`` becomes the ``DeletionStuck``
condition and ``status.clearance.stuck``. A write that does not go through is retried by
redelivery (:class:`~clearance.bus.Retry`).
"""

from __future__ import annotations

import logging

from clearance.attempts import next_attempt
from clearance.bookkeeping import ClearanceStatus, StuckEntry
from clearance.bus import Delivery, Retry
from clearance.events import AlertDeletionStuck, AppWrapperRef, CycleCleared, Event
from clearance.kube import KubeError
from clearance_dispatcher import transitions
from clearance_dispatcher.admission import Admission
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.cycles import CycleRoots
from clearance_dispatcher.effects.dispatch import Dispatch
from clearance_dispatcher.policy import pause_seconds
from clearance_dispatcher.runtime import Abort, Runtime
from clearance_dispatcher.state import Entry
from clearance_dispatcher.status import Observed, Patch

log = logging.getLogger(__name__)


class Handlers:
    def __init__(
        self, rt: Runtime, roots: CycleRoots, admission: Admission, dispatch: Dispatch
    ) -> None:
        self.rt = rt
        self.roots = roots
        self.admission = admission
        self.dispatch = dispatch

    def _dispatch_at_once(self, key: tuple[str, str], entry: Entry) -> bool:
        """A requeued AppWrapper with no pause that a queue scan would admit right now."""
        spec = entry.parsed
        if not isinstance(spec, AppWrapperSpec) or entry.observed.clearance.phase != "TearingDown":
            return False
        if pause_seconds(spec, self.rt.settings) > 0:
            return False
        return self.admission.admits(key, spec)

    async def _belt_clear(self, entry: Entry, attempt: int) -> bool:
        """The dispatch's safety belt, before its attempt is written: a quorum LIST finds no
        pod of another attempt (False, also on an API error: the queue path retries)."""
        spec = entry.parsed
        assert isinstance(spec, AppWrapperSpec)
        try:
            return not await self.dispatch.older_pods(spec, attempt)
        except KubeError:
            return False

    def _entry(self, aw: AppWrapperRef) -> Entry | None:
        """The cached AppWrapper the tracker's message is about (None: not this UID)."""
        if not self.rt.synced.is_set():
            raise Retry(1.0, "state not loaded yet")
        entry = self.rt.state.appwrappers.get((aw.namespace, aw.name))
        return entry if entry is not None and entry.uid == aw.uid else None

    def _require_term(self) -> None:
        """A replica whose term is over must not ack a ``cleared``: its cached AppWrappers
        miss the new leader's writes (a `tearingDown` it never saw makes the cleared look
        stale), and an acked message never reaches the leader — the cycle would hang."""
        fence = self.rt.kube.fence
        if fence is not None and not fence.valid():
            raise Retry(1.0, "not the leader: redelivered to the replica that leads")

    async def handle_cleared(self, event: Event, delivery: Delivery) -> None:
        if not isinstance(event, CycleCleared):
            return
        rt = self.rt
        aw = event.appwrapper
        key = (aw.namespace, aw.name)
        where = {"aw": f"{aw.namespace}/{aw.name}", "attempt": event.attempt}
        self._require_term()
        entry = self._entry(aw)
        if entry is None:
            rt.metrics.cleared.labels("unknown").inc()
            log.info("cleared for an unknown appwrapper ignored", extra=where)
            return
        now = rt.now()
        before: list[ClearanceStatus] = []
        at_once = self._dispatch_at_once(key, entry) and await self._belt_clear(
            entry, next_attempt(event.attempt)
        )

        def accept(obs: Observed) -> Patch | None:
            before[:] = [obs.clearance]
            if at_once:
                # Queued and Dispatching of N+1 in one write; the worker then resumes the
                # Dispatching (safety-belt LIST, items) without waiting for a queue scan.
                both = transitions.redispatch_on_cleared(
                    obs, attempt=event.attempt, cleared_at=event.cleared_at, now=now
                )
                if both is not None:
                    return both
            return transitions.accept_cleared(
                obs, attempt=event.attempt, cleared_at=event.cleared_at, now=now
            )

        try:
            written = await rt.write(key, accept)
        except Abort:
            raise Retry(1.0, "status write did not go through") from None
        if written is None:
            self._require_term()  # a deposed leader's cache is stale: the leader judges it
            rt.metrics.cleared.labels("stale").inc()
            log.info("stale or duplicate cleared ignored", extra=where)
            return
        rt.crash_point("cleared.recorded")
        rt.metrics.cleared.labels("accepted").inc()
        log.info("cleared", extra=where)
        if before and before[0].phase == "Failed":
            # No redispatch follows: the Failed attempt's cycle ends with its cleared.
            self.roots.finish(entry.local, aw, before[0], outcome="failed")
        rt.queue.add(key)
        if rt.state.appwrappers[key].observed.clearance.phase != "Dispatching":
            rt.request_scan()
        else:
            rt.state.appwrappers[key].local.belt_checked = next_attempt(event.attempt)
            rt.crash_point("dispatch.started")
            rt.request_scan()  # the reservation changed: others may fit differently

    async def handle_alert(self, event: Event, delivery: Delivery) -> None:
        """The tracker's ``deletion.stuck`` → ``DeletionStuck`` condition + ``clearance.stuck``."""
        if not isinstance(event, AlertDeletionStuck):
            return
        rt = self.rt
        aw = event.appwrapper
        if self._entry(aw) is None:
            return
        now = rt.now()
        stuck = tuple(
            StuckEntry(
                kind=s.object.kind,
                name=s.object.name,
                uid=s.object.uid,
                node=s.node,
                reason=", ".join(str(type(r).__struct_config__.tag) for r in s.reasons),
            )
            for s in event.stuck
        )
        try:
            await rt.write(
                (aw.namespace, aw.name),
                lambda obs: transitions.record_stuck(
                    obs,
                    attempt=event.attempt,
                    stuck=stuck,
                    step=event.step,
                    summary=event.summary,
                    now=now,
                ),
            )
        except Abort:
            raise Retry(1.0, "status write did not go through") from None
