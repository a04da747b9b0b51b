"""The dispatcher's control loop: queue, dispatch, monitor, requeue, and redispatch on cleared.

Every AppWrapper is reconciled by one worker at a time (:class:`WorkQueue`); what to do is read
from ``status.clearance`` (see :mod:`clearance_dispatcher.status`), written *before* each side
effect with a resourceVersion-guarded patch, so a ``kill -9`` at any point resumes at the step
it was in and repeats only idempotent effects:

* Queued → (capacity admitted) → **Dispatching** (attempt N written first) → create items
  (409 of the same attempt = done) → publish ``dispatched``/``redispatched`` (deterministic
  Msg-Id) → **Dispatched**.
* Dispatched → too few pods after the wait → **TearingDown** (requeue count, cycle traceparent
  written first) → delete items (404 = done) → publish ``requeued`` + ``teardown.started`` →
  ``teardownPublished``.
* ``cleared`` of attempt N (and only of N) → ``clearedAt`` written → Queued; the next dispatch
  waits ``pauseTimeInSeconds`` from ``clearedAt``.

Safety belt besides ``cleared``: right before creating anything of attempt N, a quorum LIST of
the AppWrapper's pods must find none of an older attempt, and an item name still held by an
older object blocks creation (never overwritten).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer

from clearance import bus, labels
from clearance.bus import BusMetrics, Delivery, Retry
from clearance.discovery import Discovery, UnknownKind
from clearance.events import (
    AlertDeletionStuck,
    AlertDispatchFailed,
    AlertRequeueLimit,
    AppWrapperRef,
    CycleCleared,
    CycleCompleted,
    CycleDispatched,
    CycleFailed,
    CycleRedispatched,
    CycleRequeued,
    CycleTeardownStarted,
    Event,
    KubeAppWrapperEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    NodeObject,
    ObjectRef,
    PodObject,
    TeardownPolicy,
    encode,
)
from clearance.kube import NODES, PODS, Kube, KubeError, Resource
from clearance.recording import record_event
from clearance.telemetry import context_from_traceparent, traceparent_of
from clearance_dispatcher import capacity, queueing, spans
from clearance_dispatcher.appwrapper import (
    UNKNOWN_KIND,
    AppWrapperSpec,
    InvalidAppWrapper,
    Problem,
)
from clearance_dispatcher.dispatching import (
    Blocked,
    Created,
    PermanentFailure,
    TransientFailure,
    create_items,
    delete_items,
)
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.requeueing import Counts, Fail, Keep, Requeue, current_wait, decide
from clearance_dispatcher.settings import DispatcherSettings
from clearance_dispatcher.state import ClusterState, Entry, Key, newer
from clearance_dispatcher.status import (
    STATE_OF_PHASE,
    AppWrapperGone,
    Mutation,
    Observed,
    StatusConflict,
    condition,
    micro_time,
    observe,
    update_status,
    with_conditions,
)
from clearance_dispatcher.workqueue import WorkQueue

log = logging.getLogger(__name__)

COMPONENT: Final = "clearance-dispatcher"
_POD_DECODER: Final = msgspec.json.Decoder(PodObject)
_NODE_DECODER: Final = msgspec.json.Decoder(NodeObject)


class _Abort(Exception):
    """Stop this reconcile; the key was already re-queued."""


def _ceil_seconds(value: float) -> int:
    return max(0, math.ceil(value))


class Dispatcher:
    """State, work queue and the reconcile logic of one active dispatcher replica."""

    def __init__(
        self,
        settings: DispatcherSettings,
        *,
        kube: Kube,
        js: JetStreamContext,
        tracer: Tracer,
        metrics: DispatcherMetrics,
        bus_metrics: BusMetrics | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.js = js
        self.tracer = tracer
        self.metrics = metrics
        self.bus_metrics = bus_metrics
        self.clock = clock or (lambda: datetime.now(UTC))
        group, version = settings.appwrapper_group, settings.appwrapper_version
        self.aw_resource = Resource(group, version, "appwrappers", "AppWrapper")
        self.aw_api_version = f"{group}/{version}"
        self.state = ClusterState()
        self.queue: WorkQueue[Key] = WorkQueue()
        self.discovery = Discovery(kube, ttl=settings.discovery_ttl)
        self.admitted: set[Key] = set()
        self.waiting: dict[Key, str] = {}
        self.roots: dict[tuple[str, int], Span] = {}
        self.retries: dict[Key, int] = {}
        self.last_poll: dict[Key, float] = {}
        self.synced = asyncio.Event()
        self._scan_wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------------ helpers

    def now(self) -> datetime:
        return self.clock()

    def crash_point(self, point: str) -> None:
        """Test fault injection: die like ``kill -9`` at ``point`` (see settings)."""
        if self.settings.test_crash_at == point:
            log.warning("crash point reached; killing this process", extra={"point": point})
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def _serves(self, namespace: str) -> bool:
        return not self.settings.namespaces or namespace in self.settings.namespaces

    def _ref(self, entry: Entry) -> AppWrapperRef:
        meta = entry.raw["metadata"]
        return AppWrapperRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])

    def _involved(self, entry: Entry) -> dict[str, str]:
        meta = entry.raw["metadata"]
        return {
            "apiVersion": self.aw_api_version,
            "kind": "AppWrapper",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }

    def request_scan(self) -> None:
        self._scan_wake.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, event: Event, parent: Context | None = None) -> None:
        await bus.publish(
            self.js,
            event.subject(),
            encode(event),
            msg_id=event.msg_id(),
            tracer=self.tracer,
            parent=parent,
            metrics=self.bus_metrics,
            event_type=event.event_type,
        )

    async def _warn(
        self, entry: Entry, reason: str, message: str, *, key: str, type_: Any = "Warning"
    ) -> None:
        await record_event(
            self.kube,
            involved=self._involved(entry),
            reason=reason,
            message=message,
            type_=type_,
            component=COMPONENT,
            key=key,
        )

    def _cycle_context(self, uid: str, attempt: int, obs: Observed) -> Context | None:
        root = self.roots.get((uid, attempt))
        if root is not None:
            return trace.set_span_in_context(root)
        if obs.cycle_traceparent:
            with contextlib.suppress(ValueError):
                return context_from_traceparent(obs.cycle_traceparent)
        return None

    def _end_root(self, uid: str, attempt: int, *, outcome: str) -> None:
        root = self.roots.pop((uid, attempt), None)
        if root is not None:
            root.set_attribute("clearance.outcome", outcome)
            root.end()

    def _finish_cycle(
        self, ref: AppWrapperRef, attempt: int, obs: Observed, *, outcome: str
    ) -> None:
        """End the cycle root of ``attempt``: the live span if this process holds it, else
        (it died with a replica) the same span re-created from the status — its ids from
        ``cycleTraceparent``, its start from ``cycleStartedAt`` — so the cycle's spans from
        every process keep their parent. ``obs`` is the status read *before* the write that
        cleared ``cycleStartedAt``."""
        for root_key, live in list(self.roots.items()):
            # By traceparent: a redispatch that failed to create its items (Failed) ends
            # the cycle of the attempt before it.
            if root_key[0] == ref.uid and traceparent_of(live) == obs.cycle_traceparent:
                self._end_root(*root_key, outcome=outcome)
                return
        if (ref.uid, attempt) in self.roots:
            self._end_root(ref.uid, attempt, outcome=outcome)
            return
        ids = spans.ids_of(obs.cycle_traceparent)
        if ids is None or obs.cycle_started_at is None:
            return
        with spans.preset_ids(*ids):
            root = self.tracer.start_span(
                "requeue.cycle",
                context=Context(),
                start_time=spans.nanos(obs.cycle_started_at),
                attributes={
                    "appwrapper.namespace": ref.namespace,
                    "appwrapper.name": ref.name,
                    "appwrapper.uid": ref.uid,
                    "clearance.attempt": attempt,
                    "clearance.reason": obs.reason or "",
                    "clearance.outcome": outcome,
                    "clearance.recovered": True,
                },
            )
        if (root.get_span_context().trace_id, root.get_span_context().span_id) != ids:
            log.warning(  # a provider without spans.PresetIds: do not export a wrong root
                "cycle root could not be re-created with its ids",
                extra={"aw": f"{ref.namespace}/{ref.name}", "attempt": attempt},
            )
            return
        root.end()
        log.info(
            "cycle root re-created from status",
            extra={"aw": f"{ref.namespace}/{ref.name}", "attempt": attempt, "outcome": outcome},
        )

    # --------------------------------------------------------------------------- intake

    def on_appwrapper(self, raw: dict[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        if not self._serves(str(meta.get("namespace") or "")):
            return
        key = self.state.apply_appwrapper(raw)
        if key is not None:
            self.queue.add(key)
            self.request_scan()

    def on_appwrapper_deleted(self, namespace: str, name: str, uid: str | None) -> None:
        entry = self.state.remove_appwrapper((namespace, name), uid)
        if entry is None:
            return
        key = (namespace, name)
        self.queue.forget(key)
        self.admitted.discard(key)
        self.waiting.pop(key, None)
        self.retries.pop(key, None)
        self.last_poll.pop(key, None)
        for root_key in [k for k in self.roots if k[0] == entry.uid]:
            self._end_root(*root_key, outcome="appwrapper deleted")
        log.info("appwrapper deleted; removing its objects", extra={"aw": f"{namespace}/{name}"})
        if entry.last_valid is not None:
            self._spawn(self._delete_all(entry.last_valid))
        self.request_scan()

    async def _delete_all(self, spec: AppWrapperSpec) -> None:
        """Explicit teardown of a deleted AppWrapper (ownerReference GC does it too)."""
        for attempt in range(5):
            try:
                await delete_items(self.kube, self.discovery, spec, attempt=None)
                return
            except KubeError as exc:
                log.warning(
                    "deleting items of a deleted appwrapper failed",
                    extra={"aw": f"{spec.namespace}/{spec.name}", "error": str(exc)},
                )
                await asyncio.sleep(min(2**attempt, 10))

    def on_pod(self, pod: PodObject) -> None:
        changed = self.state.apply_pod(pod)
        self._after_pod_change(changed)

    def on_pod_deleted(self, uid: str) -> None:
        self._after_pod_change(self.state.remove_pod(uid))

    def _after_pod_change(self, changed: Key | bool | None) -> None:
        if changed is None:
            return
        if isinstance(changed, tuple) and changed in self.state.appwrappers:
            self.queue.add(changed)
        self.request_scan()

    def on_node(self, node: NodeObject) -> None:
        if self.state.apply_node(node):
            self.request_scan()

    def on_node_deleted(self, name: str, uid: str | None = None) -> None:
        if self.state.remove_node(name, uid):
            self.request_scan()

    async def relist(self) -> None:
        """A consistent LIST of AppWrappers, pods and nodes; vanished objects are removed."""
        aw_items: list[dict[str, Any]] = []
        if self.settings.namespaces:
            for ns in self.settings.namespaces:
                result = await self.kube.list(self.aw_resource, namespace=ns)
                aw_items.extend(msgspec.json.decode(raw) for raw in result.items)
        else:
            result = await self.kube.list(self.aw_resource)
            aw_items.extend(msgspec.json.decode(raw) for raw in result.items)
        pods = [_POD_DECODER.decode(raw) for raw in (await self.kube.list(PODS)).items]
        nodes = [_NODE_DECODER.decode(raw) for raw in (await self.kube.list(NODES)).items]
        seen_aws = set()
        for raw in aw_items:
            meta = raw.get("metadata") or {}
            seen_aws.add((str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")))
            self.on_appwrapper(raw)
        for key, entry in list(self.state.appwrappers.items()):
            if (key[0], key[1], entry.uid) not in seen_aws:
                self.on_appwrapper_deleted(key[0], key[1], entry.uid)
        pod_uids = {p.metadata.uid for p in pods}
        for pod in pods:
            self.on_pod(pod)
        for uid in [u for u in self.state.pods if u not in pod_uids]:
            self.on_pod_deleted(uid)
        node_names = {n.metadata.name for n in nodes}
        for node in nodes:
            self.on_node(node)
        for name in [n for n in self.state.nodes if n not in node_names]:
            self.on_node_deleted(name)
        self.synced.set()

    async def handle_kube_event(self, event: Event, delivery: Delivery) -> None:
        """NATS intake: apply one watcher event (AppWrappers are re-read from the API)."""
        if isinstance(event, KubePodEvent):
            if event.action == "DELETED":
                self.on_pod_deleted(event.object.metadata.uid)
            else:
                self.on_pod(event.object)
        elif isinstance(event, KubeNodeEvent):
            if event.action == "DELETED":
                self.on_node_deleted(event.object.metadata.name, event.object.metadata.uid)
            else:
                self.on_node(event.object)
        elif isinstance(event, KubeItemEvent):
            await self.on_pod_item(event)
        elif isinstance(event, KubeAppWrapperEvent):
            meta = event.object.metadata
            namespace = meta.namespace or ""
            if not self._serves(namespace):
                return
            if event.action == "DELETED":
                self.on_appwrapper_deleted(namespace, meta.name, meta.uid)
                return
            current = self.state.appwrappers.get((namespace, meta.name))
            if (
                current is not None
                and current.uid == meta.uid
                and not newer(meta.resource_version, current.rv)
            ):
                return  # our own write, or older
            # The snapshot is a subset; the dispatcher acts on the whole object.
            try:
                raw = msgspec.json.decode(
                    await self.kube.get(self.aw_resource, meta.name, namespace=namespace)
                )
            except KubeError as exc:
                if exc.not_found:
                    self.on_appwrapper_deleted(namespace, meta.name, meta.uid)
                    return
                raise Retry(1.0, f"GET appwrapper failed: {exc}") from exc
            self.on_appwrapper(raw)

    async def on_pod_item(self, event: KubeItemEvent) -> None:
        """A generic item that *is* a Pod (``kind: Pod`` in the AppWrapper).

        The watcher publishes such a pod twice, as a ``pod`` and as an ``item`` event, with
        the same ``Nats-Msg-Id`` (``uid:resourceVersion``): JetStream keeps whichever comes
        first, so the pod event may never reach the stream. The item snapshot carries no
        status, so the pod is re-read from the API when the item is newer than the cache.
        """
        obj = event.object
        if obj.kind != "Pod" or obj.api_version != "v1":
            return
        meta = obj.metadata
        if event.action == "DELETED":
            self.on_pod_deleted(meta.uid)
            return
        current = self.state.pods.get(meta.uid)
        if current is not None and not newer(
            meta.resource_version, current.metadata.resource_version
        ):
            return
        try:
            raw = await self.kube.get(PODS, meta.name, namespace=meta.namespace)
        except KubeError as exc:
            if exc.not_found:
                self.on_pod_deleted(meta.uid)
                return
            raise Retry(1.0, f"GET pod failed: {exc}") from exc
        pod = _POD_DECODER.decode(raw)
        if pod.metadata.uid != meta.uid:
            self.on_pod_deleted(meta.uid)  # gone, and its name reused by a newer pod
        self.on_pod(pod)

    async def relist_pods_of(self, key: Key, spec: AppWrapperSpec) -> None:
        """Quorum LIST of the AppWrapper's pods into the cache; cached ones not listed (and
        not changed since the LIST) are dropped. Decisions that are rare and costly to get
        wrong (requeue, fail, complete) count pods from this, never from the cache alone."""
        selector = f"{labels.MCAD_APPWRAPPER}={spec.name},{labels.NAMESPACE}={spec.namespace}"
        result = await self.kube.list(PODS, namespace=spec.namespace, label_selector=selector)
        listed = set()
        for raw_pod in result.items:
            pod = _POD_DECODER.decode(raw_pod)
            listed.add(pod.metadata.uid)
            self.on_pod(pod)
        for pod in list(self.state.pods_of(key)):
            if pod.metadata.uid in listed or pod.metadata.namespace != spec.namespace:
                continue
            rv = pod.metadata.resource_version
            if result.resource_version and newer(rv, result.resource_version):
                continue  # an event newer than the LIST: keep it
            self.on_pod_deleted(pod.metadata.uid)

    # ---------------------------------------------------------------------------- loops

    async def run_workers(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.settings.workers)))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.reconcile(key)
            except _Abort:
                pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._next_backoff(key)
                log.warning(
                    "reconcile failed; retrying",
                    exc_info=not isinstance(exc, KubeError | bus.PublishError | StatusConflict),
                    extra={
                        "aw": f"{key[0]}/{key[1]}",
                        "error": repr(exc),
                        "retry_in": round(delay, 2),
                    },
                )
                self.queue.add_after(key, delay)
            finally:
                self.queue.done(key)

    def _next_backoff(self, key: Key) -> float:
        n = self.retries.get(key, 0) + 1
        self.retries[key] = n
        delay = self.settings.dispatch_backoff * 2.0 ** min(n - 1, 30)
        return float(min(delay, self.settings.dispatch_backoff_max))

    async def run_scanner(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._scan_wake.wait(), self.settings.queue_scan_interval)
            self._scan_wake.clear()
            try:
                self.scan()
            except Exception:
                log.exception("queue scan failed")
            await asyncio.sleep(0.02)  # coalesce bursts of changes

    # ----------------------------------------------------------------------- queue scan

    def _reservations(self) -> list[dict[str, int]]:
        out = []
        for key, entry in self.state.appwrappers.items():
            spec = entry.last_valid
            if spec is None:
                continue
            obs = entry.observed
            if key in self.admitted:
                out.append(dict(spec.requests))
            elif obs.phase in ("Dispatching", "Dispatched"):
                created = self.state.created_requests(key, obs.attempt)
                out.append(capacity.reservation(spec.requests, created))
        return out

    def candidates(self) -> list[queueing.Candidate]:
        now = self.now()
        out = []
        for key, entry in self.state.appwrappers.items():
            if key in self.admitted or not isinstance(entry.parsed, AppWrapperSpec):
                continue
            obs = entry.observed
            # New AppWrappers compete too, so the order does not depend on which status
            # write finished first; an admitted new one is queued, then dispatched.
            if obs.phase not in ("Queued", None):
                continue
            if obs.cleared_at is not None and now < obs.cleared_at + timedelta(
                seconds=self._pause_seconds(entry.parsed)
            ):
                continue
            spec = entry.parsed
            out.append(queueing.Candidate(key, spec.priority, spec.creation, spec.requests))
        return out

    def scan(self) -> None:
        """Admit what fits, in queue order; the workers do the dispatching."""
        started = time.perf_counter()
        cands = self.candidates()
        self.metrics.queue_length.set(len(cands))
        phases: dict[str, int] = {}
        for entry in self.state.appwrappers.values():
            name: str = entry.observed.phase or "New"
            phases[name] = phases.get(name, 0) + 1
        for phase in ("New", *STATE_OF_PHASE):
            self.metrics.appwrappers.labels(phase).set(phases.get(phase, 0))
        if not cands:
            return
        free = capacity.free_capacity(
            self.state.nodes.values(),
            self.state.pods.values(),
            self._reservations(),
            requests_of=self.state.requests_of,
        )
        plan = queueing.plan(cands, free, policy=self.settings.head_of_line)
        for cand in plan.admit:
            self.admitted.add(cand.key)
            self.waiting.pop(cand.key, None)
            self.queue.add(cand.key)
        for key, why in plan.waiting.items():
            if self.waiting.get(key) != why:
                self.waiting[key] = why
                self.queue.add(key)
        self.metrics.capacity_check.observe(time.perf_counter() - started)

    # ------------------------------------------------------------------------ reconcile

    def _pause_seconds(self, spec: AppWrapperSpec) -> int:
        value = spec.requeuing.pause_time_in_seconds
        return _ceil_seconds(self.settings.pause_time) if value is None else value

    def _default_wait(self) -> int:
        return max(1, _ceil_seconds(self.settings.requeue_time))

    def policy_for(self, spec: AppWrapperSpec) -> TeardownPolicy:
        r = spec.requeuing
        return TeardownPolicy(
            stuck_alert_seconds=r.stuck_alert_time_in_seconds
            if r.stuck_alert_time_in_seconds is not None
            else _ceil_seconds(self.settings.stuck_alert_time),
            force_deletion_seconds=r.force_deletion_time_in_seconds
            if r.force_deletion_time_in_seconds is not None
            else _ceil_seconds(self.settings.force_deletion_time),
            finalizer_removal=r.finalizer_removal or self.settings.finalizer_removal,
            pause_seconds=self._pause_seconds(spec),
        )

    async def _write(self, key: Key, mutation: Mutation) -> dict[str, Any] | None:
        entry = self.state.appwrappers.get(key)
        if entry is None:
            raise _Abort()

        async def remember(updated: dict[str, Any]) -> None:
            self.state.apply_appwrapper(updated)

        try:
            return await update_status(
                self.kube,
                self.aw_resource,
                entry.raw,
                mutation,
                attempts=self.settings.status_retries,
                on_written=remember,
            )
        except AppWrapperGone:
            meta = entry.raw["metadata"]
            self.on_appwrapper_deleted(meta["namespace"], meta["name"], entry.uid)
            raise _Abort() from None
        except StatusConflict:
            self.metrics.status_conflicts.inc()
            self.queue.add_after(key, 0.5)
            raise _Abort() from None

    async def reconcile(self, key: Key) -> None:
        entry = self.state.appwrappers.get(key)
        if entry is None:
            return
        if entry.raw.get("metadata", {}).get("deletionTimestamp"):
            return  # being deleted (finalizers of others); GC and the DELETED event follow
        obs = observe(entry.raw)
        parsed = entry.parsed
        phase = obs.phase
        if phase in (None, "Queued", "Invalid") and isinstance(parsed, InvalidAppWrapper):
            await self._mark_invalid(key, entry, parsed.problems, obs)
            return
        if phase == "Invalid":
            if entry.generation == obs.invalid_generation:
                return
            await self._enqueue(key, entry, obs, reason="SpecFixed")
            return
        if phase is None:
            await self._enqueue(key, entry, obs, reason="AwaitingHeadOfLine")
            self.queue.add(key)
            return
        spec = parsed if isinstance(parsed, AppWrapperSpec) else entry.last_valid
        if spec is None:
            return
        if phase == "Queued":
            await self._reconcile_queued(key, entry, spec, obs)
        elif phase == "Dispatching":
            await self._dispatch(key, entry, spec, obs, attempt=obs.attempt)
        elif phase == "Dispatched":
            await self._monitor(key, entry, spec, obs)
        elif (
            phase in ("TearingDown", "Failed")
            and obs.teardown_started_at is not None
            and not obs.teardown_published
        ):
            await self._teardown(key, entry, spec, obs)
        self.retries.pop(key, None)

    # -- new / invalid -------------------------------------------------------------------

    async def _enqueue(self, key: Key, entry: Entry, obs: Observed, *, reason: str) -> None:
        now = self.now()

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase not in (None, "Invalid"):
                return None
            status: dict[str, Any] = {
                "state": "Pending",
                "queuejobstate": "Queueing",
                "clearance": {
                    "phase": "Queued",
                    "attempt": current.attempt,
                    "invalidGeneration": None,
                },
                "conditions": with_conditions(
                    raw,
                    {
                        "Queueing": (True, reason, "waiting in the dispatch queue"),
                        "Failed": (False, reason, ""),
                    },
                    now=now,
                )
                or raw.get("status", {}).get("conditions", []),
            }
            if not (raw.get("status") or {}).get("controllerfirsttimestamp"):
                status["controllerfirsttimestamp"] = micro_time(now)
            return status

        await self._write(key, mutation)
        self.request_scan()

    async def _mark_invalid(
        self, key: Key, entry: Entry, problems: tuple[Problem, ...], obs: Observed
    ) -> None:
        reason = problems[0].reason
        message = "; ".join(p.message for p in problems)
        generation = entry.generation
        now = self.now()

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase == "Invalid" and current.invalid_generation == generation:
                return None
            return {
                "state": "Failed",
                "queuejobstate": "Failed",
                "message": message[:1024],
                "clearance": {
                    "phase": "Invalid",
                    "attempt": current.attempt,
                    "invalidGeneration": generation,
                },
                "conditions": with_conditions(
                    raw,
                    {"Failed": (True, reason, message), "Queueing": (False, reason, message)},
                    now=now,
                )
                or raw.get("status", {}).get("conditions", []),
            }

        written = await self._write(key, mutation)
        if written is None:
            return
        self.metrics.failures.labels(reason).inc()
        log.warning(
            "invalid appwrapper",
            extra={"aw": f"{key[0]}/{key[1]}", "reason": reason, "error": message},
        )
        await self._warn(entry, reason, message, key=f"invalid:{generation}")
        with contextlib.suppress(bus.PublishError):
            await self._publish(
                CycleFailed(
                    appwrapper=self._ref(entry),
                    attempt=max(1, obs.attempt),
                    occurred_at=now,
                    reason=reason,
                    message=message[:1024],
                )
            )

    async def _check_kinds(
        self, key: Key, entry: Entry, spec: AppWrapperSpec, obs: Observed
    ) -> bool:
        """Every item's kind must be served by the API (discovery); else the spec is invalid."""
        problems = []
        for item in spec.items:
            try:
                await self.discovery.resolve(item.api_version, item.kind)
            except UnknownKind as exc:
                problems.append(
                    Problem(
                        UNKNOWN_KIND,
                        f"spec.resources.GenericItems[{item.index}].generictemplate: {exc}",
                    )
                )
        if problems:
            await self._mark_invalid(key, entry, tuple(problems), obs)
            return False
        return True

    # -- queued ----------------------------------------------------------------------------

    async def _reconcile_queued(
        self, key: Key, entry: Entry, spec: AppWrapperSpec, obs: Observed
    ) -> None:
        if obs.attempt == 0 and not await self._check_kinds(key, entry, spec, obs):
            self.admitted.discard(key)
            return
        if obs.cleared_at is not None:
            ready_at = obs.cleared_at + timedelta(seconds=self._pause_seconds(spec))
            delay = (ready_at - self.now()).total_seconds()
            if delay > 0:
                self.queue.add_after(key, delay)
                return
        if key in self.admitted:
            await self._dispatch(key, entry, spec, obs, attempt=obs.attempt + 1)
            return
        why = self.waiting.get(key)
        if why is not None:
            now = self.now()
            reason = (
                "InsufficientCapacity" if why.startswith("insufficient") else "AwaitingHeadOfLine"
            )

            def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
                if observe(raw).phase != "Queued":
                    return None
                conds = with_conditions(raw, {"Queueing": (True, reason, why)}, now=now)
                return None if conds is None else {"conditions": conds}

            await self._write(key, mutation)
        self.request_scan()

    # -- dispatch --------------------------------------------------------------------------

    async def _older_pods(self, spec: AppWrapperSpec, attempt: int) -> list[str]:
        """Quorum LIST: pods of this AppWrapper's name created for another attempt, or for an
        earlier AppWrapper of the same name (created before this one)."""
        selector = f"{labels.MCAD_APPWRAPPER}={spec.name},{labels.NAMESPACE}={spec.namespace}"
        result = await self.kube.list(PODS, namespace=spec.namespace, label_selector=selector)
        old = []
        for raw in result.items:
            pod = _POD_DECODER.decode(raw)
            found = labels.attempt_of(pod.metadata.labels)
            if found is None:
                continue  # not created through Clearance
            born = pod.metadata.creation_timestamp
            if found != attempt:
                old.append(f"{pod.metadata.name} (attempt {found})")
            elif spec.creation is not None and born is not None and born < spec.creation:
                old.append(f"{pod.metadata.name} (an earlier AppWrapper of this name)")
        return old

    async def _dispatch(
        self, key: Key, entry: Entry, spec: AppWrapperSpec, obs: Observed, *, attempt: int
    ) -> None:
        now = self.now()
        older = await self._older_pods(spec, attempt)
        if older:
            self.admitted.discard(key)
            message = "objects of an earlier attempt still exist: " + ", ".join(older[:5])
            await self._backoff_condition(key, "OldObjectsPresent", message)
            self.queue.add_after(key, self._next_backoff(key))
            return
        if obs.phase == "Queued":
            from_queue = attempt

            def start(raw: dict[str, Any]) -> dict[str, Any] | None:
                current = observe(raw)
                if current.phase != "Queued" or current.attempt + 1 != from_queue:
                    return None
                return {
                    "state": "Running",
                    "queuejobstate": "Dispatched",
                    "isdispatched": True,
                    "canrun": True,
                    "clearance": {
                        "phase": "Dispatching",
                        "attempt": from_queue,
                        "dispatchedAt": None,
                        "teardownStartedAt": None,
                        "teardownPublished": None,
                        "stuck": [],
                    },
                    "conditions": with_conditions(
                        raw,
                        {
                            "Queueing": (False, "FrontOfQueue", "dispatching"),
                            "Backoff": (False, "Dispatching", ""),
                        },
                        now=now,
                    )
                    or raw.get("status", {}).get("conditions", []),
                }

            written = await self._write(key, start)
            self.admitted.discard(key)
            if written is None:
                self.queue.add(key)
                return
            self.crash_point("dispatch.started")
            entry = self.state.appwrappers[key]
        root_ctx = self._cycle_context(spec.uid, attempt - 1, obs) if attempt > 1 else None
        span_cm = (
            self.tracer.start_as_current_span(
                "redispatch",
                context=root_ctx,
                attributes=self._span_attrs(spec, attempt, "redispatch"),
            )
            if attempt > 1
            else self.tracer.start_as_current_span(
                "dispatch", attributes=self._span_attrs(spec, attempt, "dispatch")
            )
        )
        with span_cm:
            outcome = await create_items(
                self.kube,
                self.discovery,
                spec,
                attempt=attempt,
                aw_api_version=self.aw_api_version,
            )
            if isinstance(outcome, Blocked):
                await self._backoff_condition(key, "ItemBlocked", outcome.message)
                self.queue.add_after(key, self._next_backoff(key))
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
                self.queue.add_after(key, self._next_backoff(key))
                return
            if isinstance(outcome, PermanentFailure):
                await self._creation_problem(
                    key, entry, spec, attempt, outcome.reason, outcome.message, permanent=True
                )
                return
            assert isinstance(outcome, Created)
            self.crash_point("dispatch.created")
            await self._finish_dispatch(key, entry, spec, obs, attempt, outcome)

    def _span_attrs(self, spec: AppWrapperSpec, attempt: int, reason: str) -> dict[str, Any]:
        return {
            "appwrapper.namespace": spec.namespace,
            "appwrapper.name": spec.name,
            "appwrapper.uid": spec.uid,
            "clearance.attempt": attempt,
            "clearance.reason": reason,
        }

    async def _finish_dispatch(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        obs: Observed,
        attempt: int,
        outcome: Created,
    ) -> None:
        now = self.now()
        ref = self._ref(entry)
        obs = observe(self.state.appwrappers[key].raw)
        await self._publish(
            CycleDispatched(
                appwrapper=ref,
                attempt=attempt,
                occurred_at=now,
                items=outcome.refs,
                cycle_traceparent=obs.cycle_traceparent if attempt > 1 else None,
            )
        )
        if attempt > 1 and obs.cleared_at is not None:
            await self._publish(
                CycleRedispatched(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    cleared_at=obs.cleared_at,
                    pause_seconds=float(self._pause_seconds(spec)),
                    cycle_traceparent=obs.cycle_traceparent,
                )
            )

        self.crash_point("dispatch.published")

        def done(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase != "Dispatching" or current.attempt != attempt:
                return None
            status: dict[str, Any] = {
                "clearance": {
                    "phase": "Dispatched",
                    "dispatchedAt": micro_time(now),
                    "cycleStartedAt": None,  # the previous cycle's root ends below
                },
                "conditions": with_conditions(
                    raw,
                    {
                        "Dispatched": (
                            True,
                            "AppWrapperRunnable",
                            f"attempt {attempt}: {len(outcome.refs)} item(s) created",
                        ),
                        "Backoff": (False, "Dispatched", ""),
                        "Running": (False, "AwaitingPods", ""),
                    },
                    now=now,
                )
                or raw.get("status", {}).get("conditions", []),
                "template": spec.min_available,
            }
            if not (raw.get("status") or {}).get("controllerfirstdispatchtimestamp"):
                status["controllerfirstdispatchtimestamp"] = micro_time(now)
            return status

        written = await self._write(key, done)
        if written is None:
            return
        self.metrics.dispatches.labels("redispatch" if attempt > 1 else "first").inc()
        if attempt > 1 and obs.cleared_at is not None:
            self.metrics.redispatch_latency.observe(
                max(0.0, (now - obs.cleared_at).total_seconds())
            )
        if attempt > 1:
            self._finish_cycle(ref, attempt - 1, obs, outcome="redispatched")
        log.info(
            "dispatched",
            extra={"aw": f"{key[0]}/{key[1]}", "attempt": attempt, "items": len(outcome.refs)},
        )
        self.queue.add_after(
            key,
            current_wait(obs.requeueing_time_in_seconds, spec.requeuing, self._default_wait())
            + 0.05,
        )
        self.request_scan()

    async def _backoff_condition(self, key: Key, reason: str, message: str) -> None:
        now = self.now()

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            conds = with_conditions(raw, {"Backoff": (True, reason, message)}, now=now)
            return None if conds is None else {"conditions": conds}

        await self._write(key, mutation)

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
        now = self.now()
        ref = self._ref(entry)
        await self._warn(entry, reason, message, key=f"create:{attempt}:{reason}")
        with contextlib.suppress(bus.PublishError):
            await self._publish(
                AlertDispatchFailed(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    reason=reason,
                    message=message[:1024],
                    summary=f"dispatch of attempt {attempt} failed: {reason}",
                    severity="critical" if permanent else "warning",
                )
            )
        if not permanent:
            await self._backoff_condition(key, reason, message)
            return
        self.metrics.failures.labels(reason).inc()

        def fail(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase != "Dispatching" or current.attempt != attempt:
                return None
            return {
                "state": "Failed",
                "queuejobstate": "Failed",
                "isdispatched": False,
                "message": message[:1024],
                "clearance": {
                    "phase": "Failed",
                    "teardownStartedAt": micro_time(now),
                    "teardownPublished": False,
                    "clearedAt": None,
                },
                "conditions": with_conditions(
                    raw,
                    {"Failed": (True, reason, message), "Dispatched": (False, reason, message)},
                    now=now,
                )
                or raw.get("status", {}).get("conditions", []),
            }

        if await self._write(key, fail) is None:
            return
        await self._publish(
            CycleFailed(
                appwrapper=ref,
                attempt=attempt,
                occurred_at=now,
                reason=reason,
                message=message[:1024],
            )
        )
        entry = self.state.appwrappers[key]
        await self._teardown(key, entry, spec, observe(entry.raw))

    # -- monitor ---------------------------------------------------------------------------

    async def _monitor(self, key: Key, entry: Entry, spec: AppWrapperSpec, obs: Observed) -> None:
        now = self.now()
        attempt = obs.attempt
        counts = self.state.counts(key, attempt)
        await self._write_counts(key, spec, counts, attempt)
        if spec.completion_items and await self._completed(key, spec):
            await self._complete(key, entry, spec, attempt)
            return
        dispatched_at = obs.dispatched_at or now
        wait = current_wait(obs.requeueing_time_in_seconds, spec.requeuing, self._default_wait())

        def decision_for(counts: Counts) -> Keep | Requeue | Fail:
            return decide(
                now=now,
                dispatched_at=dispatched_at,
                first_dispatched_at=obs.first_dispatched_at,
                counts=counts,
                min_available=spec.min_available,
                requeuing=spec.requeuing,
                wait_seconds=wait,
                default_wait=self._default_wait(),
                number_of_requeueings=obs.number_of_requeueings,
                dispatch_limit_seconds=spec.dispatch_limit_seconds,
            )

        decision = decision_for(counts)
        if not isinstance(decision, Keep):
            # Never tear an attempt down on cached counts alone (a lost or deduplicated pod
            # event would requeue a running attempt every wait period): re-count from a
            # quorum LIST first. Requeues are rare, the LIST is cheap.
            await self.relist_pods_of(key, spec)
            fresh = self.state.counts(key, attempt)
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
                await self._write_counts(key, spec, counts, attempt)
                decision = decision_for(counts)
        if isinstance(decision, Keep):
            next_check = self.settings.monitor_interval if spec.completion_items else None
            if decision.recheck_at is not None:
                until = (decision.recheck_at - now).total_seconds() + 0.05
                next_check = until if next_check is None else min(next_check, until)
            if next_check is not None:
                self.queue.add_after(key, max(0.05, next_check))
            return
        if isinstance(decision, Requeue):
            await self._start_teardown(key, entry, spec, obs, counts, requeue=decision)
        else:
            assert isinstance(decision, Fail)
            await self._start_teardown(key, entry, spec, obs, counts, fail=decision)

    async def _write_counts(
        self, key: Key, spec: AppWrapperSpec, counts: Counts, attempt: int
    ) -> None:
        now = self.now()
        enough = counts.running + counts.succeeded >= max(spec.min_available, 1)

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase != "Dispatched" or current.attempt != attempt:
                return None
            status = raw.get("status") or {}
            patch: dict[str, Any] = {}
            for field_name, value in (
                ("pending", counts.pending),
                ("running", counts.running),
                ("Succeeded", counts.succeeded),
                ("failed", counts.failed),
            ):
                if status.get(field_name) != value:
                    patch[field_name] = value
            if (status.get("clearance") or {}).get("terminating") != counts.terminating:
                patch["clearance"] = {"terminating": counts.terminating}
            if enough:
                conds = with_conditions(
                    raw,
                    {
                        "Running": (
                            True,
                            "PodsRunning",
                            f"running={counts.running}, completed={counts.succeeded}, "
                            f"minimum={max(spec.min_available, 1)}",
                        )
                    },
                    now=now,
                )
                running_cond = condition(raw, "Running") or {}
                if conds is not None and running_cond.get("status") != "True":
                    patch["conditions"] = conds
                    patch["queuejobstate"] = "Running"
            return patch or None

        await self._write(key, mutation)

    async def _completed(self, key: Key, spec: AppWrapperSpec) -> bool:
        """Every item with a completionstatus reports one of its listed conditions True."""
        last = self.last_poll.get(key, 0.0)
        if time.monotonic() - last < self.settings.monitor_interval * 0.9:
            return False
        self.last_poll[key] = time.monotonic()
        for item in spec.completion_items:
            try:
                resource = await self.discovery.resolve(item.api_version, item.kind)
                raw = msgspec.json.decode(
                    await self.kube.get(
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
        now = self.now()
        # Final counts from a quorum LIST: pod events may lag the item's completion.
        await self.relist_pods_of(key, spec)
        counts = self.state.counts(key, attempt)

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase != "Dispatched" or current.attempt != attempt:
                return None
            return {
                "state": "Completed",
                "queuejobstate": "Completed",
                "clearance": {"phase": "Completed", "terminating": counts.terminating},
                "pending": counts.pending,
                "running": counts.running,
                "Succeeded": counts.succeeded,
                "failed": counts.failed,
                "conditions": with_conditions(
                    raw,
                    {"Completed": (True, "PodsCompleted", "every item reports completion")},
                    now=now,
                )
                or raw.get("status", {}).get("conditions", []),
            }

        if await self._write(key, mutation) is None:
            return
        self.metrics.completions.inc()
        log.info("completed", extra={"aw": f"{key[0]}/{key[1]}", "attempt": attempt})
        await self._publish(
            CycleCompleted(
                appwrapper=self._ref(entry),
                attempt=attempt,
                occurred_at=now,
                message="every item completed",
            )
        )
        self.request_scan()

    # -- requeue / fail with teardown ------------------------------------------------------

    async def _start_teardown(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        obs: Observed,
        counts: Counts,
        *,
        requeue: Requeue | None = None,
        fail: Fail | None = None,
    ) -> None:
        now = self.now()
        attempt = obs.attempt
        reason = requeue.reason if requeue is not None else (fail.reason if fail else "")
        message = requeue.message if requeue is not None else (fail.message if fail else "")
        root = self.tracer.start_span(
            "requeue.cycle",
            context=Context(),
            start_time=spans.nanos(now),
            attributes=self._span_attrs(spec, attempt, reason),
        )
        traceparent = traceparent_of(root)

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.phase != "Dispatched" or current.attempt != attempt:
                return None
            clearance: dict[str, Any] = {
                "teardownStartedAt": micro_time(now),
                "teardownPublished": False,
                "clearedAt": None,
                "cycleTraceparent": traceparent,
                "cycleStartedAt": micro_time(now),
                "reason": reason,
                "stuck": [],
            }
            conditions: dict[str, tuple[bool, str, str]] = {
                "AwaitingDeletion": (
                    True,
                    reason,
                    f"waiting for every object of attempt {attempt} to be gone",
                ),
                "Running": (False, reason, message),
                "Dispatched": (False, reason, message),
            }
            status: dict[str, Any] = {"isdispatched": False, "message": message[:1024]}
            if requeue is not None:
                clearance["phase"] = "TearingDown"
                status.update(
                    state="Pending",
                    queuejobstate="Backoff",
                    numberOfRequeueings=requeue.number_of_requeueings,
                    requeueingTimeInSeconds=requeue.next_wait,
                )
                conditions["Backoff"] = (True, reason, message)
            else:
                clearance["phase"] = "Failed"
                status.update(state="Failed", queuejobstate="Failed")
                conditions["Failed"] = (True, reason, message)
            status["clearance"] = clearance
            status["conditions"] = with_conditions(raw, conditions, now=now) or raw.get(
                "status", {}
            ).get("conditions", [])
            return status

        try:
            written = await self._write(key, mutation)
        except BaseException:
            root.end()
            raise
        if written is None:
            root.end()
            return
        self.roots[(spec.uid, attempt)] = root
        self.crash_point("requeue.decided")
        ref = self._ref(entry)
        if requeue is not None:
            self.metrics.requeues.inc()
            log.info(
                "requeue",
                extra={
                    "aw": f"{key[0]}/{key[1]}",
                    "attempt": attempt,
                    "reason": message,
                    "requeues": requeue.number_of_requeueings,
                },
            )
            await self._warn(entry, reason, message, key=f"requeue:{attempt}", type_="Normal")
        else:
            assert fail is not None
            self.metrics.failures.labels(fail.reason).inc()
            log.warning(
                "failed",
                extra={
                    "aw": f"{key[0]}/{key[1]}",
                    "attempt": attempt,
                    "reason": fail.reason,
                    "error": fail.message,
                },
            )
            await self._warn(entry, fail.reason, fail.message, key=f"failed:{attempt}")
            ctx = trace.set_span_in_context(root)
            await self._publish(
                CycleFailed(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=now,
                    reason=fail.reason,
                    message=fail.message[:1024],
                    cycle_traceparent=traceparent,
                ),
                parent=ctx,
            )
            if fail.reason == "MaxNumRequeuingsReached":
                await self._publish(
                    AlertRequeueLimit(
                        appwrapper=ref,
                        attempt=attempt,
                        occurred_at=now,
                        summary=f"{key[0]}/{key[1]} failed after {obs.number_of_requeueings} "
                        f"requeues (maxNumRequeuings={spec.requeuing.max_num_requeuings})",
                        number_of_requeueings=obs.number_of_requeueings,
                        max_num_requeuings=max(1, spec.requeuing.max_num_requeuings),
                        cycle_traceparent=traceparent,
                    ),
                    parent=ctx,
                )
        entry = self.state.appwrappers.get(key, entry)
        await self._teardown(key, entry, spec, observe(entry.raw), counts=counts)

    async def _teardown(
        self,
        key: Key,
        entry: Entry,
        spec: AppWrapperSpec,
        obs: Observed,
        *,
        counts: Counts | None = None,
    ) -> None:
        """Delete the items of ``obs.attempt`` and announce the teardown (idempotent)."""
        attempt = obs.attempt
        now = self.now()
        parent = self._cycle_context(spec.uid, attempt, obs)
        with self.tracer.start_as_current_span(
            "teardown.delete",
            context=parent,
            attributes=self._span_attrs(spec, attempt, "teardown"),
        ):
            deleted = await delete_items(self.kube, self.discovery, spec, attempt=attempt)
            self.crash_point("teardown.deleted")
            inventory: list[ObjectRef] = list(deleted)
            for pod in self.state.pods_of(key):
                found = labels.attempt_of(pod.metadata.labels)
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
            ref = self._ref(entry)
            started_at = obs.teardown_started_at or now
            ctx = trace.get_current_span()
            span_ctx = trace.set_span_in_context(ctx)
            if obs.phase == "TearingDown":
                counts = counts or self.state.counts(key, attempt)
                await self._publish(
                    CycleRequeued(
                        appwrapper=ref,
                        attempt=attempt,
                        occurred_at=started_at,
                        reason=str((entry.raw.get("status") or {}).get("message") or "requeued"),
                        number_of_requeueings=obs.number_of_requeueings,
                        running=counts.running,
                        succeeded=counts.succeeded,
                        min_available=spec.min_available,
                        cycle_traceparent=obs.cycle_traceparent,
                    ),
                    parent=span_ctx,
                )
            await self._publish(
                CycleTeardownStarted(
                    appwrapper=ref,
                    attempt=attempt,
                    occurred_at=started_at,
                    inventory=tuple(inventory),
                    policy=self.policy_for(spec),
                    cycle_traceparent=obs.cycle_traceparent,
                ),
                parent=span_ctx,
            )

        self.crash_point("teardown.published")

        def published(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if current.attempt != attempt or current.teardown_published:
                return None
            return {"clearance": {"teardownPublished": True}}

        await self._write(key, published)
        self.request_scan()

    # --------------------------------------------------------------- cycle consumers

    async def handle_cleared(self, event: Event, delivery: Delivery) -> None:
        if not isinstance(event, CycleCleared):
            return
        if not self.synced.is_set():
            raise Retry(1.0, "state not loaded yet")
        aw = event.appwrapper
        key = (aw.namespace, aw.name)
        entry = self.state.appwrappers.get(key)
        if entry is None or entry.uid != aw.uid:
            self.metrics.cleared.labels("unknown").inc()
            log.info(
                "cleared for an unknown appwrapper ignored",
                extra={"aw": f"{aw.namespace}/{aw.name}", "attempt": event.attempt},
            )
            return
        now = self.now()
        attempt = event.attempt
        before: list[Observed] = []

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            before[:] = [current]
            if (
                current.attempt != attempt
                or current.phase not in ("TearingDown", "Failed")
                or current.teardown_started_at is None
                or current.cleared_at is not None
            ):
                return None
            conditions = {
                "AwaitingDeletion": (
                    False,
                    "Cleared",
                    f"every object of attempt {attempt} is gone",
                ),
                "DeletionStuck": (False, "Cleared", ""),
            }
            clearance: dict[str, Any] = {
                "clearedAt": micro_time(event.cleared_at),
                "stuck": [],
            }
            status: dict[str, Any] = {"clearance": clearance}
            if current.phase == "TearingDown":
                clearance["phase"] = "Queued"
                conditions["Queueing"] = (
                    True,
                    "Requeued",
                    f"Requeued because {raw.get('status', {}).get('message') or 'of a requeue'}",
                )
                status["queuejobstate"] = "Queueing"
            else:
                clearance["cycleStartedAt"] = None  # the Failed cycle's root ends below
            status["conditions"] = with_conditions(raw, conditions, now=now) or raw.get(
                "status", {}
            ).get("conditions", [])
            return status

        try:
            written = await self._write(key, mutation)
        except _Abort:
            raise Retry(1.0, "status write did not go through") from None
        if written is None:
            self.metrics.cleared.labels("stale").inc()
            log.info(
                "stale or duplicate cleared ignored",
                extra={"aw": f"{aw.namespace}/{aw.name}", "attempt": attempt},
            )
            return
        self.crash_point("cleared.recorded")
        self.metrics.cleared.labels("accepted").inc()
        log.info("cleared", extra={"aw": f"{aw.namespace}/{aw.name}", "attempt": attempt})
        if before and before[0].phase == "Failed":
            # No redispatch follows: the Failed attempt's cycle ends with its cleared.
            self._finish_cycle(aw, attempt, before[0], outcome="failed")
        self.queue.add(key)
        self.request_scan()

    async def handle_alert(self, event: Event, delivery: Delivery) -> None:
        """The tracker's ``deletion.stuck`` → ``DeletionStuck`` condition + ``clearance.stuck``."""
        if not isinstance(event, AlertDeletionStuck):
            return
        if not self.synced.is_set():
            raise Retry(1.0, "state not loaded yet")
        aw = event.appwrapper
        key = (aw.namespace, aw.name)
        entry = self.state.appwrappers.get(key)
        if entry is None or entry.uid != aw.uid:
            return
        now = self.now()
        stuck = [
            {
                "kind": s.object.kind,
                "name": s.object.name,
                "uid": s.object.uid,
                "node": s.node,
                "reason": ", ".join(str(type(r).__struct_config__.tag) for r in s.reasons),
            }
            for s in event.stuck
        ]

        def mutation(raw: dict[str, Any]) -> dict[str, Any] | None:
            current = observe(raw)
            if (
                current.attempt != event.attempt
                or current.cleared_at is not None
                or (current.phase not in ("TearingDown", "Failed"))
            ):
                return None
            conds = with_conditions(
                raw, {"DeletionStuck": (True, event.step, event.summary)}, now=now
            )
            patch: dict[str, Any] = {"clearance": {"stuck": stuck}}
            if conds is not None:
                patch["conditions"] = conds
            return patch

        try:
            await self._write(key, mutation)
        except _Abort:
            raise Retry(1.0, "status write did not go through") from None

    async def stop(self) -> None:
        self.queue.close()
        for task in list(self._tasks):
            task.cancel()
        for root_key in list(self.roots):
            self._end_root(*root_key, outcome="dispatcher stopped")
