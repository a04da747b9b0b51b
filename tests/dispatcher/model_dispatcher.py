"""The dispatcher under test: its pure decisions, driven in the order the service drives them.

This module owns the glue between the model API (:mod:`model_api`) and the dispatcher's pure
modules: the cache (``state.ClusterState``: AppWrapper and pod events applied by
resourceVersion), the status read and written (``status.observe`` / ``status.render`` /
``bookkeeping``), the transitions, the requeue rules (``requeueing.decide``, waits) and the
pause (``admission.pause_remaining``). :meth:`ModelDispatcher.reconcile` mirrors
``Reconciler.reconcile`` and the effects (dispatch, monitor, teardown) step by step; it is a
generator that yields at the service's crash points, so the machine can run other things —
or kill the process — between any two of them. :meth:`ModelDispatcher.write` is
``status.update_status``: the transition evaluated on the cached object, a guarded patch, and
on 409 a fresh read and the transition evaluated again. ``handle_cleared`` is the `cleared`
handler. A restart is a new instance built from a LIST of the API (nothing else survives).

Every status write, item creation, deletion and publication is reported to a :class:`Judge`.
:class:`Decisions` names the pure functions called, so a proof test can break one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tests.dispatcher.model_api import KEY, NAME, UID, Api

from clearance import labels
from clearance_dispatcher import requeueing, transitions
from clearance_dispatcher.admission import pause_remaining
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.dispatching import build_object, ours
from clearance_dispatcher.policy import default_wait
from clearance_dispatcher.requeueing import Counts, Fail, Keep, Requeue
from clearance_dispatcher.settings import DispatcherSettings
from clearance_dispatcher.state import ClusterState, newer
from clearance_dispatcher.status import Observed, Patch, observe, render
from clearance_dispatcher.storage import STATUS_STORAGE

SETTINGS = DispatcherSettings()
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AW_API_VERSION = "workload.codeflare.dev/v1beta1"


@dataclass(frozen=True)
class Decisions:
    """The pure decisions the glue calls; the real ones unless a proof test swaps one."""

    accept_cleared: Callable[..., Patch | None] = transitions.accept_cleared
    begin_dispatch: Callable[..., Patch | None] = transitions.begin_dispatch
    decide: Callable[..., requeueing.Decision] = requeueing.decide


@dataclass(frozen=True)
class Published:
    """A message on the cycle stream (deduplicated by its Msg-Id)."""

    type: str
    attempt: int
    msg_id: str


class Judge(Protocol):
    def on_status(self, before: Observed, after: Observed) -> None: ...
    def on_create(self, attempt: int) -> None: ...
    def on_publish(self, message: Published) -> None: ...


class Abort(Exception):
    """The write kept conflicting (the service re-queues the key)."""


@dataclass
class ModelDispatcher:
    api: Api
    judge: Judge
    clock: Callable[[], datetime]
    runs: Callable[[int], bool]
    """Whether the world lets the pods of an attempt run (the schedule's choice)."""
    decisions: Decisions = field(default_factory=Decisions)
    state: ClusterState = field(default_factory=ClusterState)

    def __post_init__(self) -> None:
        """Start-up: a consistent LIST of the AppWrapper and its pods fills the cache."""
        self.state.apply_appwrapper(self.api.get_aw())
        pods, _ = self.api.list_pods()
        for pod in pods:
            self.state.apply_pod(pod)

    @property
    def observed(self) -> Observed:
        return self.state.appwrappers[KEY].observed

    @property
    def spec(self) -> AppWrapperSpec:
        parsed = self.state.appwrappers[KEY].parsed
        assert isinstance(parsed, AppWrapperSpec)
        return parsed

    # ------------------------------------------------------------------ intake

    def apply(self, kind: str, body: Any) -> None:
        """One watch event into the cache (intake.on_pod / on_pod_deleted / on_appwrapper)."""
        if kind == "pod":
            self.state.apply_pod(body)
        elif kind == "pod_deleted":
            self.state.remove_pod(body)
        else:
            self.state.apply_appwrapper(body)

    def resync(self) -> None:
        """intake.relist (every ``resync_interval``): a consistent LIST; vanished pods go."""
        self.state.apply_appwrapper(self.api.get_aw())
        pods, _ = self.api.list_pods()
        listed = {p.metadata.uid for p in pods}
        for pod in pods:
            self.state.apply_pod(pod)
        for uid in [u for u in self.state.pods if u not in listed]:
            self.state.remove_pod(uid)

    def relist_pods(self) -> None:
        """intake.relist_pods_of: a quorum LIST into the cache, unlisted older pods dropped."""
        pods, rv = self.api.list_pods()
        listed = set()
        for pod in pods:
            listed.add(pod.metadata.uid)
            self.state.apply_pod(pod)
        for pod in list(self.state.pods_of(KEY)):
            if pod.metadata.uid not in listed and not newer(pod.metadata.resource_version, rv):
                self.state.remove_pod(pod.metadata.uid)

    # ------------------------------------------------------------------- write

    def write(self, transition: Callable[[Observed], Patch | None]) -> dict[str, Any] | None:
        """status.update_status on the cached object; a 409 re-reads and re-evaluates."""
        current = self.state.appwrappers[KEY].raw
        for _ in range(5):
            before = observe(current)
            patch = transition(before)
            if patch is None:
                return None
            writes = STATUS_STORAGE.writes(*render(before, patch))
            if not writes:
                return None
            updated = self.api.patch_status(
                writes[0].body, rv=current["metadata"]["resourceVersion"]
            )
            if updated is None:
                current = self.api.get_aw()
                continue
            self.state.apply_appwrapper(updated)
            self.judge.on_status(before, observe(updated))
            return updated
        raise Abort()

    def publish(self, type_: str, attempt: int) -> None:
        self.judge.on_publish(Published(type_, attempt, f"{UID}:{attempt}:{type_}"))

    # --------------------------------------------------------------- reconcile

    def reconcile(self) -> Iterator[str]:
        """Reconciler.reconcile: one step of the phase's work, yielding at crash points."""
        cl = self.observed.clearance
        if cl.phase is None:
            now = self.clock()
            self.write(lambda o: transitions.enqueue(o, reason="AwaitingHeadOfLine", now=now))
        elif cl.phase == "Queued":
            if pause_remaining(cl, self.spec, SETTINGS, self.clock()) > 0:
                return
            attempt = cl.attempt_to_dispatch
            if attempt is not None:
                yield from self.dispatch(attempt)
        elif cl.phase == "Dispatching":
            yield from self.dispatch(cl.attempt)
        elif cl.phase == "Dispatched":
            yield from self.monitor()
        elif cl.phase in ("TearingDown", "Failed") and (
            cl.tearing_down is not None and not cl.teardown_published
        ):
            yield from self.teardown()

    def dispatch(self, attempt: int) -> Iterator[str]:
        """effects.dispatch.Dispatch.run: the safety belt, the decision, the items."""
        now = self.clock()
        pods, _ = self.api.list_pods()
        older = [p.metadata.name for p in pods if labels.attempt_of(p.metadata.labels) != attempt]
        if older:
            message = "objects of an earlier attempt still exist: " + ", ".join(older)
            self.write(
                lambda o: transitions.backoff(
                    o, reason="OldObjectsPresent", message=message, now=now
                )
            )
            return
        if self.observed.clearance.phase == "Queued":
            begin = self.decisions.begin_dispatch
            if self.write(lambda o: begin(o, attempt=attempt, now=now)) is None:
                return
            yield "dispatch.started"
        spec = self.spec
        for item in spec.items:
            body = build_object(item, spec, attempt=attempt, aw_api_version=AW_API_VERSION)
            self.judge.on_create(attempt)
            if self.api.create_item(body, runs=self.runs(attempt)) is None:
                existing = self.api.items.get(item.name)
                meta = existing["metadata"] if existing else None
                if meta is None or not ours(
                    meta["labels"], meta["ownerReferences"], uid=UID, attempt=attempt
                ):
                    why = f"{item.kind} {item.name!r} of another attempt is still present"

                    def blocked(o: Observed, why: str = why) -> Patch | None:
                        return transitions.backoff(o, reason="ItemBlocked", message=why, now=now)

                    self.write(blocked)
                    return
        yield "dispatch.created"
        cl = self.observed.clearance
        self.publish("cycle.dispatched", attempt)
        if cl.is_redispatch and cl.cleared_at is not None:
            self.publish("cycle.redispatched", attempt)
        yield "dispatch.published"
        self.write(
            lambda o: transitions.finish_dispatch(
                o, attempt=attempt, items=len(spec.items), min_available=spec.min_available, now=now
            )
        )

    def verdict(self, counts: Counts, now: datetime) -> requeueing.Decision:
        obs, spec = self.observed, self.spec
        fallback = default_wait(SETTINGS)
        return self.decisions.decide(
            now=now,
            dispatched_at=obs.clearance.dispatched_at or now,
            first_dispatched_at=obs.first_dispatched_at,
            counts=counts,
            min_available=spec.min_available,
            requeuing=spec.requeuing,
            wait_seconds=requeueing.current_wait(
                obs.requeueing_time_in_seconds, spec.requeuing, fallback
            ),
            default_wait=fallback,
            number_of_requeueings=obs.number_of_requeueings,
            dispatch_limit_seconds=spec.dispatch_limit_seconds,
        )

    def monitor(self) -> Iterator[str]:
        """effects.monitor.Monitor.run: counts, and never a teardown on cached counts alone."""
        now = self.clock()
        attempt = self.observed.clearance.attempt
        spec = self.spec
        counts = self.state.counts(KEY, attempt)

        def record(o: Observed, counts: Counts = counts) -> Patch | None:
            return transitions.record_counts(
                o, attempt=attempt, counts=counts, min_available=spec.min_available, now=now
            )

        self.write(record)
        decision = self.verdict(counts, now)
        if not isinstance(decision, Keep):
            self.relist_pods()
            fresh = self.state.counts(KEY, attempt)
            if fresh != counts:
                counts = fresh
                self.write(record)
                decision = self.verdict(counts, now)
        if isinstance(decision, Keep):
            return
        yield "monitor.decided"
        assert isinstance(decision, Requeue | Fail)

        def start(o: Observed, decision: Requeue | Fail = decision) -> Patch | None:
            return transitions.start_teardown(
                o, attempt=attempt, decision=decision, cycle_traceparent=TRACEPARENT, now=now
            )

        if self.write(start) is None:
            return
        yield "requeue.decided"
        if isinstance(decision, Fail):
            self.publish("cycle.failed", attempt)
        yield from self.teardown()

    def teardown(self) -> Iterator[str]:
        """effects.teardown.Teardown.run: delete the items of ``tearingDown``, announce it."""
        cl = self.observed.clearance
        attempt = cl.tearing_down
        if attempt is None:
            return
        now = self.clock()
        for name, obj in list(self.api.items.items()):
            meta = obj["metadata"]
            found = labels.attempt_of(meta["labels"])
            mine = any(o.get("uid") == UID for o in meta["ownerReferences"])
            if mine and (found is None or found <= attempt):
                self.api.delete_item(name, uid=meta["uid"])
        yield "teardown.deleted"
        if cl.phase == "TearingDown":
            self.publish("cycle.requeued", attempt)
        self.publish("cycle.teardown.started", attempt)
        yield "teardown.published"
        self.write(lambda o: transitions.announce_teardown(o, attempt=attempt, now=now))

    # ---------------------------------------------------------------- handlers

    def handle_cleared(self, *, uid: str, attempt: int, cleared_at: datetime) -> bool:
        """handlers.handle_cleared: only the awaited attempt of this AppWrapper counts."""
        if uid != UID:
            return False
        now = self.clock()
        accept = self.decisions.accept_cleared
        return (
            self.write(lambda o: accept(o, attempt=attempt, cleared_at=cleared_at, now=now))
            is not None
        )


__all__ = ["KEY", "NAME", "Abort", "Decisions", "ModelDispatcher", "Published"]
