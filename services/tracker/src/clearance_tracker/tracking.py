"""The tracker's I/O: consume events, verify against the API server, escalate, publish `cleared`.

Division of labour between replicas (all state in the KV bucket, every write a CAS):

* **Any replica** handles any message: `teardown.started` creates the record (the creating
  replica becomes its *owner*); a kube event updates every open record it concerns.
* **The owner** does everything that acts on the world: verification (quorum LIST + GET),
  escalation steps, and `cleared`. Each replica watches the bucket, so when another replica
  confirms the last object, the owner hears of it within milliseconds and clears. When the
  handling replica is the owner itself, `cleared` is published before the input is acked.
* **Ownership** follows liveness: every replica writes a heartbeat key; a record whose owner's
  heartbeat is older than `owner_timeout` is taken over (CAS on `owner`) by a live replica.
  A restarted pod keeps its replica id (HOSTNAME) and resumes its records at once.

Timers are not kept anywhere but in the records: each scan recomputes what is due from
`teardownStartedAt`, the policy, the steps reached and `last_verified_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, Tracer

from clearance import bus, labels
from clearance.events import (
    AlertDeletionForced,
    AlertDeletionStuck,
    AlertNodeLost,
    AppWrapperRef,
    CycleCleared,
    CycleDeletionConfirmed,
    CycleDeletionForced,
    CycleFinalizersRemoved,
    CycleTeardownStarted,
    EscalationStep,
    Event,
    ItemObject,
    KubeItemEvent,
    KubePodEvent,
    NodeObject,
    ObjectRef,
    PodObject,
    RemovedFinalizers,
    StuckObject,
    TeardownPolicy,
    encode,
)
from clearance.kube import JSON_PATCH, NODES, Kube, KubeError
from clearance.recording import record_event
from clearance.telemetry import ContextLogger, context_from_traceparent
from clearance_tracker import spans
from clearance_tracker.confirmation import (
    Confirmation,
    GetResult,
    Missing,
    Outcome,
    Snapshot,
    apply_event,
    apply_get,
    apply_list,
    mark_verified,
    unseen,
)
from clearance_tracker.diagnosis import (
    CAUSE_NAMES,
    cause_names,
    count_causes,
    describe,
    diagnose,
    lost_nodes,
)
from clearance_tracker.escalation import (
    Timing,
    claim,
    complete,
    due_step,
    fix_deadlines,
    stuck_objects_count,
    verification_due,
)
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.resources import Resolver
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.teardown import (
    RECORD_PREFIX,
    REPLICA_PREFIX,
    Clearing,
    KindRef,
    Teardown,
    TeardownStore,
    TrackedObject,
    Versioned,
    decode_heartbeat,
    decode_record,
    record_key,
)

log = logging.getLogger(__name__)

COMPONENT: Final = "clearance-tracker"
_POD_DECODER: Final = msgspec.json.Decoder(PodObject)
_ITEM_DECODER: Final = msgspec.json.Decoder(ItemObject)
_NODE_DECODER: Final = msgspec.json.Decoder(NodeObject)


Listing = tuple[frozenset[tuple[str, str]], list[Snapshot]]
"""The kinds a verification LIST covered, and the objects it found."""


class _PolicyProbe(msgspec.Struct):
    policy: dict[str, Any] | None = None


_POLICY_PROBE: Final = msgspec.json.Decoder(_PolicyProbe)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _snapshot(raw: bytes | msgspec.Raw, *, api_version: str, kind: str) -> Snapshot:
    if kind == "Pod" and api_version == "v1":
        return _POD_DECODER.decode(raw)
    item = _ITEM_DECODER.decode(_fill_kind(raw, api_version=api_version, kind=kind))
    return item


def _fill_kind(raw: bytes | msgspec.Raw, *, api_version: str, kind: str) -> bytes:
    # LIST items carry no kind/apiVersion; ItemObject requires them.
    data = msgspec.json.decode(raw)
    data.setdefault("kind", kind)
    data.setdefault("apiVersion", api_version)
    return msgspec.json.encode(data)


class Tracker:
    """One replica of the deletion tracker."""

    def __init__(
        self,
        *,
        settings: TrackerSettings,
        js: JetStreamContext,
        kv: KeyValue,
        kube: Kube,
        tracer: Tracer,
        metrics: TrackerMetrics,
        bus_metrics: bus.BusMetrics | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.js = js
        self.kv = kv
        self.kube = kube
        self.tracer = tracer
        self.metrics = metrics
        self.bus_metrics = bus_metrics
        self.now = clock
        self.me = settings.identity
        self.store = TeardownStore(kv)
        self.resolver = Resolver(kube)
        self.timing = Timing(
            finalizer_removal_delay=settings.finalizer_removal_delay,
            claim_timeout=settings.claim_timeout,
            verify_interval=settings.verify_interval,
        )
        self.aw_api_version = f"{settings.appwrapper_group}/{settings.appwrapper_version}"
        self.cache: dict[str, Versioned] = {}
        self.by_aw: dict[tuple[str, str], set[str]] = {}
        self.heartbeats: dict[str, datetime] = {}
        self.diagnosed: dict[str, dict[str, tuple[str, ...]]] = {}
        """Record key → object UID → causes of its latest diagnosis (the by-cause gauge)."""
        self.synced = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._write_locks: dict[str, asyncio.Lock] = {}
        self._pending: dict[
            str, list[tuple[Callable[[Teardown], Outcome | None], asyncio.Future[Versioned | None]]]
        ] = {}
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._started_at = self.now()

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, sync_timeout: float = 30.0) -> None:
        await self.store.beat(self.me, self.now())
        self._watch = asyncio.create_task(self._watch_loop(), name="tracker:kv-watch")
        self._tasks.append(self._watch)
        await asyncio.wait_for(self.synced.wait(), sync_timeout)
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="tracker:heartbeat"))
        self._tasks.append(asyncio.create_task(self._scan_loop(), name="tracker:scan"))
        log.info("tracker started", extra={"replica": self.me, "records": len(self.cache)})

    async def stop(self, *, timeout: float = 10.0, release: bool = True) -> None:
        """Stop timers and the KV watch; wait for running evaluations (≤ ``timeout``).

        With ``release``, the heartbeat key is deleted so that other replicas take over
        this replica's open teardowns at once instead of after ``owner_timeout``.
        """
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._workers:
            await asyncio.wait(set(self._workers), timeout=timeout)
        if release:
            with contextlib.suppress(Exception):
                await self.kv.delete(f"{REPLICA_PREFIX}.{self.me}")

    @property
    def ready(self) -> bool:
        return self.synced.is_set() and all(not t.done() for t in self._tasks)

    # ---------------------------------------------------------------- the KV view

    async def _watch_loop(self) -> None:
        while not self._stopping.is_set():
            watcher: KeyValue.KeyWatcher | None = None
            try:
                watcher = await self.kv.watchall()
                async for entry in watcher:
                    if entry is None:
                        self.synced.set()
                        continue
                    self._on_entry(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kv watch failed; restarting it", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)
            finally:
                if watcher is not None:
                    with contextlib.suppress(Exception):
                        await watcher.stop()  # type: ignore[no-untyped-call]

    def _on_entry(self, entry: KeyValue.Entry) -> None:
        key = entry.key
        value = entry.value
        deleted = entry.operation in ("DEL", "PURGE") or not value
        if key.startswith(REPLICA_PREFIX + "."):
            replica = key[len(REPLICA_PREFIX) + 1 :]
            if deleted:
                self.heartbeats.pop(replica, None)
            else:
                with contextlib.suppress(msgspec.DecodeError):
                    self.heartbeats[replica] = decode_heartbeat(value or b"").at
            return
        if not key.startswith(RECORD_PREFIX + "."):
            return
        if deleted:
            self._forget(key)
            return
        try:
            record = decode_record(value or b"")
        except msgspec.DecodeError as exc:
            log.error("undecodable teardown record ignored", extra={"key": key, "error": str(exc)})
            return
        self._remember(Versioned(record, int(entry.revision or 0)))

    def _remember(self, version: Versioned) -> None:
        key = version.record.key
        cached = self.cache.get(key)
        if cached is not None and cached.revision >= version.revision:
            return
        self.cache[key] = version
        aw = version.record.appwrapper
        self.by_aw.setdefault((aw.namespace, aw.name), set()).add(key)
        record = version.record
        if record.owner == self.me and self._needs_attention(record, self.now()):
            self.poke(key)

    def _forget(self, key: str) -> None:
        self._locks.pop(key, None)
        self._write_locks.pop(key, None)
        version = self.cache.pop(key, None)
        if version is not None:
            aw = version.record.appwrapper
            keys = self.by_aw.get((aw.namespace, aw.name))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_aw[(aw.namespace, aw.name)]

    def _needs_attention(self, record: Teardown, now: datetime) -> bool:
        if record.cleared:
            return False
        if record.clearing is not None or record.all_confirmed:
            return True
        if verification_due(record, now=now, timing=self.timing):
            return True
        return due_step(record, now=now, me=self.me, timing=self.timing) is not None

    # ------------------------------------------------------------------- timers

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            try:
                await self.store.beat(self.me, self.now())
            except Exception as exc:
                log.warning("heartbeat failed", extra={"error": repr(exc)})
                continue
            # Our own beats come back through the KV watch; if they stopped arriving, the
            # watch is stuck (e.g. after a NATS outage) and the whole view is stale.
            seen = self.heartbeats.get(self.me)
            stale = timedelta(seconds=self.settings.owner_timeout)
            if seen is not None and self.now() - seen > stale and self._watch is not None:
                log.warning("kv watch stalled; restarting it")
                self._watch.cancel()
                self._tasks.remove(self._watch)
                self._watch = asyncio.create_task(self._watch_loop(), name="tracker:kv-watch")
                self._tasks.append(self._watch)

    async def _scan_loop(self) -> None:
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scan failed")
            await asyncio.sleep(self.settings.scan_interval)

    def _owner_alive(self, owner: str, now: datetime) -> bool:
        if owner == self.me:
            return True
        beat = self.heartbeats.get(owner)
        if beat is None:
            # Never seen: give a replica that just started the benefit of the doubt.
            return now - self._started_at < timedelta(seconds=self.settings.owner_timeout)
        return now - beat < timedelta(seconds=self.settings.owner_timeout)

    async def scan(self) -> None:
        """One pass over the KV view: take over orphans, poke what is due, update gauges."""
        now = self.now()
        stuck = 0
        owned_open = 0
        causes: Counter[str] = Counter()
        retention = timedelta(seconds=self.settings.record_retention)
        for key, version in list(self.cache.items()):
            record = version.record
            if record.cleared:
                assert record.clearing is not None
                if now - record.clearing.cleared_at > retention and (
                    record.owner == self.me or not self._owner_alive(record.owner, now)
                ):
                    await self.store.delete(key, version.revision)
                continue
            if record.owner != self.me:
                if not self._owner_alive(record.owner, now):
                    await self._take_over(key, record.owner)
                continue
            owned_open += 1
            stuck += stuck_objects_count(record, now=now, timing=self.timing)
            if key in self.diagnosed:
                causes += count_causes((o.uid for o in record.open_objects), self.diagnosed[key])
            if self._needs_attention(record, now):
                self.poke(key)
        self.metrics.objects_stuck.set(stuck)
        for key in [k for k in self.diagnosed if not self._owned_open(k)]:
            del self.diagnosed[key]
        for cause in CAUSE_NAMES:
            self.metrics.objects_stuck_diagnosed.labels(cause).set(causes[cause])
        self.metrics.teardowns_open.set(owned_open)

    def _owned_open(self, key: str) -> bool:
        version = self.cache.get(key)
        return (
            version is not None and version.record.owner == self.me and not version.record.cleared
        )

    async def _take_over(self, key: str, dead: str) -> None:
        # The view may lag (a slow watch): read the heartbeat itself before taking over.
        with contextlib.suppress(Exception):
            entry = await self.kv.get(f"{REPLICA_PREFIX}.{dead}")
            if entry.value and self.now() - decode_heartbeat(entry.value).at < timedelta(
                seconds=self.settings.owner_timeout
            ):
                return

        def change(record: Teardown) -> Teardown | None:
            if record.owner != dead or record.cleared:
                return None
            return msgspec.structs.replace(record, owner=self.me)

        _version, wrote = await self._mutate(key, change)
        if wrote:
            self.metrics.takeovers.inc()
            log.warning(
                "took over a teardown from a replica whose heartbeat stopped",
                extra={"key": key, "previous_owner": dead, "replica": self.me},
            )
            self.poke(key)

    def poke(self, key: str) -> None:
        """Evaluate `key` soon (coalesced: one evaluation at a time per record)."""
        if self._stopping.is_set():
            return
        if key in self._running:
            self._again.add(key)
            return
        self._running.add(key)
        task = asyncio.create_task(self._evaluate_loop(key), name=f"tracker:evaluate:{key}")
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    async def _evaluate_loop(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                try:
                    await self.evaluate(key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("teardown evaluation failed; retried at the next scan")
                if key not in self._again or self._stopping.is_set():
                    return
        finally:
            self._running.discard(key)

    # ------------------------------------------------------------------ handlers

    async def on_cycle_event(self, event: Event, delivery: bus.Delivery) -> None:
        if not isinstance(event, CycleTeardownStarted):
            return
        policy_given = _POLICY_PROBE.decode(delivery.msg.data).policy is not None
        await self.record_teardown(
            event, policy_given=policy_given, header_traceparent=delivery.headers.get("traceparent")
        )

    async def record_teardown(
        self,
        event: CycleTeardownStarted,
        *,
        policy_given: bool = True,
        header_traceparent: str | None = None,
    ) -> None:
        """Create the record of a teardown (idempotent) and verify it once, before the ack."""
        now = self.now()
        policy = event.policy if policy_given else self._default_policy()
        cycle_tp = event.cycle_traceparent or header_traceparent
        if cycle_tp is not None:
            try:
                context_from_traceparent(cycle_tp)
            except ValueError:
                cycle_tp = None
        trace_id = spans.trace_id_of(cycle_tp) or spans.new_trace_id()
        objects: dict[str, TrackedObject] = {}
        kinds: list[KindRef] = []
        for ref in event.inventory:
            objects[ref.uid] = TrackedObject(
                kind=ref.kind,
                api_version=ref.api_version,
                namespace=ref.namespace,
                name=ref.name,
                uid=ref.uid,
                source="inventory",
                first_seen=event.occurred_at,
                attempt=event.attempt,
            )
            kind = KindRef(api_version=ref.api_version, kind=ref.kind)
            if not (ref.kind == "Pod" and ref.api_version == "v1") and kind not in kinds:
                kinds.append(kind)
        record = Teardown(
            appwrapper=event.appwrapper,
            attempt=event.attempt,
            teardown_started_at=event.occurred_at,
            recorded_at=now,
            policy=policy,
            owner=self.me,
            trace_id=trace_id,
            await_span_id=spans.new_span_id(),
            cycle_traceparent=cycle_tp,
            wrapped_kinds=tuple(kinds),
            objects=objects,
        )
        record = fix_deadlines(record, self.timing)
        created = await self.store.create(record)
        logger = self._logger(record)
        if created is not None:
            self.metrics.teardowns_started.inc()
            logger.info(
                "teardown recorded",
                extra={"objects": len(objects), "policy": msgspec.to_builtins(policy)},
            )
            self._remember(created)
            version = created
        else:
            existing = await self.store.get(record.key)
            if existing is None:
                raise bus.Retry(0.5, "teardown record vanished while being created")
            version = existing
            self._remember(version)
        if version.record.owner == self.me and not version.record.cleared:
            try:
                await self.evaluate(record.key)
            except Exception:
                logger.exception("first verification failed; retried at the next scan")

    def _default_policy(self) -> TeardownPolicy:
        s = self.settings
        return TeardownPolicy(
            stuck_alert_seconds=round(s.stuck_alert_time),
            force_deletion_seconds=round(s.force_deletion_time),
            finalizer_removal=s.finalizer_removal,
        )

    async def on_kube_event(self, event: Event, delivery: bus.Delivery) -> None:
        if not isinstance(event, KubePodEvent | KubeItemEvent):
            return
        await self.observe(event.action, event.object)

    async def observe(self, action: str, snapshot: Snapshot) -> None:
        """Apply one watch event to every open teardown it concerns."""
        meta = snapshot.metadata
        if meta.namespace is None:
            return
        names = {
            meta.labels.get(labels.MCAD_APPWRAPPER),
            meta.labels.get(labels.CODEFLARE_APPWRAPPER),
        }
        keys: set[str] = set()
        for name in names:
            if name:
                keys |= self.by_aw.get((meta.namespace, name), set())
        if not keys:
            # Unlabelled pods of tracked owners: look for a record tracking an owner.
            owners = {ref.uid for ref in meta.owner_references}
            if owners:
                keys = {
                    k
                    for k, v in self.cache.items()
                    if not v.record.cleared and owners & v.record.objects.keys()
                }
        for key in sorted(keys):
            cached = self.cache.get(key)
            if cached is None or cached.record.cleared or cached.record.clearing is not None:
                continue
            now = self.now()
            preview = apply_event(cached.record, action=action, snapshot=snapshot, now=now)
            if not preview.changed:
                # Events only add members and confirm deletions; what changes nothing on the
                # cached copy changes nothing on a newer one (confirmations are never undone,
                # membership is decided by labels), so most MODIFIED events cost no KV trip.
                continue
            listing: asyncio.Task[Listing] | None = None
            if preview.record.all_confirmed and cached.record.owner == self.me:
                # Probably the last object: start the final quorum LIST now, while the
                # confirmation is being written (it is issued after this DELETED was seen).
                listing = asyncio.create_task(self._list_all(preview.record))

            def change(record: Teardown, now: datetime = now) -> Outcome | None:
                if record.clearing is not None:
                    return None
                return apply_event(record, action=action, snapshot=snapshot, now=now)

            try:
                version = await self._commit(key, change, known=cached)
                if version is None:
                    continue
                record = version.record
                if record.owner == self.me and record.all_confirmed and not record.cleared:
                    # publish `cleared` before this input is acked
                    await self.evaluate(key, listing=listing)
            finally:
                if listing is not None and not listing.done():
                    listing.cancel()

    # ------------------------------------------------------------- the owner's work

    async def _mutate(
        self,
        key: str,
        change: Callable[[Teardown], Teardown | None],
        *,
        known: Versioned | None = None,
    ) -> tuple[Versioned | None, bool]:
        """CAS update of one record; writers of a record in this process take turns, so the
        cached revision is almost always current and concurrent events do not retry."""
        async with self._write_lock(key):
            version, wrote = await self.store.mutate(key, change, known=self.cache.get(key, known))
        if version is not None:
            self._remember(version)
        return version, wrote

    def _write_lock(self, key: str) -> asyncio.Lock:
        lock = self._write_locks.get(key)
        if lock is None:
            lock = self._write_locks[key] = asyncio.Lock()
        return lock

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def evaluate(self, key: str, *, listing: asyncio.Task[Listing] | None = None) -> None:
        """Do whatever is due for one owned teardown: verify, clear, escalate.

        ``listing``: a quorum LIST of the teardown's kinds already started by the caller
        after the event that prompted this evaluation (saves a round trip on the hot path).
        """
        async with self._lock(key):
            # The cache follows the KV watch and every local write; a stale copy only costs
            # a CAS conflict below, after which the store re-reads.
            version = self.cache.get(key) or await self.store.get(key)
            if version is None:
                self._forget(key)
                return
            self._remember(version)
            record = version.record
            if record.owner != self.me or record.cleared:
                return
            now = self.now()
            if record.clearing is None and (
                record.all_confirmed or verification_due(record, now=now, timing=self.timing)
            ):
                version = await self.verify(version, listing=listing)
                record = version.record
            if record.clearing is not None:
                await self._publish_cleared(version)
                return
            step = due_step(record, now=self.now(), me=self.me, timing=self.timing)
            if step is not None:
                await self._escalate(version, step)

    async def _commit(
        self,
        key: str,
        change: Callable[[Teardown], Outcome | None],
        *,
        known: Versioned | None = None,
    ) -> Versioned | None:
        """CAS-apply pure facts; then spans/events/metrics for what this write confirmed.

        Group commit: facts about one record that arrive while a write of it is in flight
        queue up and go out together in the next single CAS write, so the burst of DELETED
        events of a teardown costs a few KV round trips, not one conflict storm.
        """
        future: asyncio.Future[Versioned | None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((change, future))
        async with self._write_lock(key):
            batch = self._pending.pop(key, [])
            if batch:
                await self._write_batch(key, batch, known)
        return await future

    async def _write_batch(
        self,
        key: str,
        batch: list[tuple[Callable[[Teardown], Outcome | None], asyncio.Future[Versioned | None]]],
        known: Versioned | None,
    ) -> None:
        confirmed: list[Confirmation] = []

        def mutation(record: Teardown) -> Teardown | None:
            confirmed.clear()
            new = record
            for change, _ in batch:
                outcome = change(new)
                if outcome is not None:
                    confirmed.extend(outcome.confirmed)
                    new = _stamp_span_ids(outcome.record, outcome.confirmed)
            return new

        try:
            version, wrote = await self.store.mutate(
                key, mutation, known=self.cache.get(key, known)
            )
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        if version is not None:
            self._remember(version)
        for _, future in batch:
            if not future.done():
                future.set_result(version)
        if version is not None and wrote and confirmed:
            # Spans and audit events only, off the critical path: the fact is in KV already.
            self._spawn(self._after_confirmations(version.record, list(confirmed)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    async def _after_confirmations(
        self, record: Teardown, confirmed: Iterable[Confirmation]
    ) -> None:
        try:
            await self._report_confirmations(record, confirmed)
        except Exception:
            log.exception("could not report confirmations")

    async def _report_confirmations(
        self, record: Teardown, confirmed: Iterable[Confirmation]
    ) -> None:
        logger = self._logger(record)
        parent = spans.context_of(record.trace_id, record.await_span_id)
        for confirmation in confirmed:
            obj = record.objects.get(confirmation.object.uid)
            if obj is None or obj.confirmed_at is None or obj.confirm_span_id is None:
                continue
            self.metrics.confirmations.labels(confirmation.how).inc()
            start = max(obj.first_seen, record.teardown_started_at)
            with spans.preset_span_id(obj.confirm_span_id):
                span = self.tracer.start_span(
                    "deletion.confirmed",
                    context=parent,
                    start_time=spans.nanos(min(start, obj.confirmed_at)),
                    attributes=_object_attributes(record, obj)
                    | {"clearance.how": confirmation.how},
                )
            span.end(end_time=spans.nanos(obj.confirmed_at))
            logger.info(
                "object confirmed gone",
                extra={
                    "object_kind": obj.kind,
                    "object_name": obj.name,
                    "object_uid": obj.uid,
                    "how": confirmation.how,
                },
            )
            event = CycleDeletionConfirmed(
                appwrapper=record.appwrapper,
                attempt=record.attempt,
                occurred_at=obj.confirmed_at,
                cycle_traceparent=record.cycle_traceparent,
                object=obj.ref(),
                how=confirmation.how,
            )
            try:
                await self._publish(
                    event, parent=spans.context_of(record.trace_id, obj.confirm_span_id)
                )
            except bus.PublishError as exc:
                # An audit event: the KV record already holds the fact.
                logger.warning("deletion.confirmed not published", extra={"error": str(exc)})

    async def verify(
        self, version: Versioned, *, listing: asyncio.Task[Listing] | None = None
    ) -> Versioned:
        """Quorum LIST by the AppWrapper label (pods + every wrapped kind), GET of what the
        LIST did not show; if nothing of attempts ≤ N is left, fix `cleared_at` (CAS)."""
        record = version.record
        listed: list[Snapshot] | None = None
        if listing is not None:
            try:
                covered, snapshots = await listing
            except Exception:
                covered, snapshots = frozenset(), []
            # Usable only if it covered every kind the record knows by now.
            if _kinds(record) <= covered:
                listed = snapshots
        if listed is None:
            _, listed = await self._list_all(record)
        now = self.now()
        list_outcome, _ = apply_list(record, items=listed, now=now)
        gets: list[tuple[str, GetResult]] = []
        for obj in unseen(list_outcome.record, [s.metadata.uid for s in listed]):
            gets.append((obj.uid, await self._get(obj)))
        self.metrics.verifications.inc()

        def change(current: Teardown) -> Outcome | None:
            if current.clearing is not None:
                return None
            outcome, _ = apply_list(current, items=listed, now=now)
            confirmed = list(outcome.confirmed)
            added = list(outcome.added)
            new = outcome.record
            for uid, result in gets:
                step = apply_get(new, uid=uid, result=result, now=now)
                confirmed.extend(step.confirmed)
                added.extend(step.added)
                new = step.record
            new = mark_verified(new, now)
            # The cleared rule: every tracked UID confirmed AND this fresh LIST (which
            # just merged everything of attempts ≤ N into the record) left nothing open.
            if new.all_confirmed:
                new = msgspec.structs.replace(new, clearing=Clearing(cleared_at=now, by=self.me))
            return Outcome(new, tuple(confirmed), tuple(added))

        updated = await self._commit(record.key, change, known=version)
        if updated is None:
            return version
        if list_outcome.added:
            self._logger(updated.record).info(
                "verification found more objects to wait for",
                extra={"added": [f"{o.kind}/{o.name}" for o in list_outcome.added]},
            )
        return updated

    async def _list_all(self, record: Teardown) -> Listing:
        """Quorum LIST by the AppWrapper label of pods and every kind the record knows."""
        aw = record.appwrapper
        selector = labels.selector_for(aw.name)
        kinds = _kinds(record)
        results = await asyncio.gather(
            *(self._list(api_version, kind, aw.namespace, selector) for api_version, kind in kinds)
        )
        return kinds, [snapshot for result in results for snapshot in result]

    async def _list(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[Snapshot]:
        """Quorum LIST of one kind by the AppWrapper label ([] when the kind is not served)."""
        resource = await self.resolver.resolve(api_version, kind)
        if resource is None:
            return []
        try:
            result = await self.kube.list(resource, namespace=namespace, label_selector=selector)
        except KubeError as exc:
            if exc.not_found:
                return []
            self.metrics.kube_errors.labels("list").inc()
            raise
        snapshots: list[Snapshot] = []
        for raw in result.items:
            try:
                snapshots.append(_snapshot(raw, api_version=api_version, kind=kind))
            except msgspec.DecodeError as exc:
                log.warning("unreadable object in LIST", extra={"error": str(exc)})
        return snapshots

    async def _get(self, obj: TrackedObject) -> GetResult:
        resource = await self.resolver.resolve(obj.api_version, obj.kind)
        if resource is None:
            return Missing(obj.uid)
        try:
            raw = await self.kube.get(resource, obj.name, namespace=obj.namespace)
        except KubeError as exc:
            if exc.not_found:
                return Missing(obj.uid)
            self.metrics.kube_errors.labels("get").inc()
            raise
        return _snapshot(raw, api_version=obj.api_version, kind=obj.kind)

    async def _publish_cleared(self, version: Versioned) -> None:
        record = version.record
        clearing = record.clearing
        assert clearing is not None
        confirmed = [o for o in record.objects.values() if o.gone]
        links = [
            Link(
                spans.span_context_of(record.trace_id, o.confirm_span_id),
                {"clearance.object.uid": o.uid, "clearance.object.kind": o.kind},
            )
            for o in confirmed
            if o.confirm_span_id
        ]
        with self.tracer.start_as_current_span(
            "cleared",
            context=self._root(record),
            links=links,
            attributes=_aw_attributes(record) | {"clearance.objects": len(confirmed)},
        ):
            event = CycleCleared(
                appwrapper=record.appwrapper,
                attempt=record.attempt,
                occurred_at=clearing.cleared_at,
                cycle_traceparent=record.cycle_traceparent,
                cleared_at=clearing.cleared_at,
                teardown_started_at=record.teardown_started_at,
                confirmed=tuple(o.ref() for o in confirmed),
            )
            await self._publish(event)
        published_at = self.now()
        with spans.preset_span_id(record.await_span_id):
            await_span = self.tracer.start_span(
                "deletion.await",
                context=self._cycle_parent(record),
                start_time=spans.nanos(record.teardown_started_at),
                attributes=_aw_attributes(record) | {"clearance.objects": len(record.objects)},
            )
        await_span.end(end_time=spans.nanos(max(clearing.cleared_at, record.teardown_started_at)))

        def change(current: Teardown) -> Teardown | None:
            if current.clearing is None or current.clearing.published:
                return None
            return msgspec.structs.replace(
                current, clearing=msgspec.structs.replace(current.clearing, published=True)
            )

        _updated, wrote = await self._mutate(record.key, change, known=version)
        if wrote:
            self.metrics.cleared.inc()
            duration = (clearing.cleared_at - record.teardown_started_at).total_seconds()
            self.metrics.teardown_duration.observe(max(0.0, duration))
            last = max((o.confirmed_at for o in confirmed if o.confirmed_at), default=None)
            if last is not None:
                self.metrics.cleared_latency.observe(
                    max(0.0, (published_at - last).total_seconds())
                )
            self._logger(record).info(
                "teardown cleared",
                extra={"duration_s": round(duration, 3), "objects": len(confirmed)},
            )

    # ---------------------------------------------------------------- escalation

    async def _escalate(self, version: Versioned, step: EscalationStep) -> None:
        now = self.now()
        claimed, wrote = await self._mutate(
            version.record.key,
            lambda r: claim(r, step, now=now, me=self.me, timing=self.timing),
            known=version,
        )
        if claimed is None or not wrote:
            return  # another replica claimed it first, or it is no longer due
        self._remember(claimed)
        record = claimed.record
        logger = self._logger(record).bind(step=step)
        logger.warning("escalating teardown", extra={"open": len(record.open_objects)})
        with self.tracer.start_as_current_span(
            "deletion.escalate",
            context=self._root(record),
            attributes=_aw_attributes(record)
            | {"clearance.step": step, "clearance.open_objects": len(record.open_objects)},
        ) as span:
            if step == "stuck_alert":
                acted = await self._stuck_alert(claimed, span)
            elif step == "force_deletion":
                acted = await self._force_deletion(claimed, span)
            else:
                acted = await self._remove_finalizers(claimed, span)
        done_at = self.now()
        _, wrote = await self._mutate(
            record.key, lambda r: complete(r, step, now=done_at, me=self.me, objects=acted)
        )
        if wrote:
            self.metrics.escalations.labels(step).inc()

    async def _fresh_open(self, version: Versioned) -> tuple[Teardown, dict[str, Snapshot]]:
        """GET every open object now; apply what the answers prove; return the survivors."""
        record = version.record
        results = [(o.uid, await self._get(o)) for o in record.open_objects]
        now = self.now()

        def change(current: Teardown) -> Outcome | None:
            confirmed: list[Confirmation] = []
            new = current
            for uid, result in results:
                step = apply_get(new, uid=uid, result=result, now=now)
                confirmed.extend(step.confirmed)
                new = step.record
            return Outcome(new, tuple(confirmed))

        updated = await self._commit(record.key, change, known=version)
        current = updated.record if updated is not None else record
        alive: dict[str, Snapshot] = {}
        for uid, result in results:
            if isinstance(result, Missing) or result.metadata.uid != uid:
                continue
            alive[uid] = result
        return current, alive

    async def _nodes(self, alive: dict[str, Snapshot]) -> dict[str, NodeObject | None]:
        names = {
            s.spec.node_name
            for s in alive.values()
            if isinstance(s, PodObject) and s.spec.node_name
        }
        nodes: dict[str, NodeObject | None] = {}
        for name in sorted(names):
            try:
                nodes[name] = _NODE_DECODER.decode(await self.kube.get(NODES, name))
            except KubeError as exc:
                if exc.not_found:
                    nodes[name] = None
                else:
                    self.metrics.kube_errors.labels("get_node").inc()
        return nodes

    async def _diagnose(self, record: Teardown, alive: dict[str, Snapshot]) -> list[StuckObject]:
        nodes = await self._nodes(alive)
        now = self.now()
        return [
            diagnose(record, obj, snapshot=alive.get(obj.uid), nodes=nodes, now=now)
            for obj in record.open_objects
            if obj.uid in alive
        ]

    def _summary(self, record: Teardown, stuck: list[StuckObject], *, lead: str) -> str:
        aw = record.appwrapper
        elapsed = (self.now() - record.teardown_started_at).total_seconds()
        details = "; ".join(describe(s) for s in stuck[:5])
        more = f" (+{len(stuck) - 5} more)" if len(stuck) > 5 else ""
        return (
            f"{lead}: {len(stuck)} object(s) of AppWrapper {aw.namespace}/{aw.name} attempt "
            f"{record.attempt} still present {elapsed:.0f}s after teardown started: {details}{more}"
        )

    async def _alert_stuck(
        self, record: Teardown, stuck: list[StuckObject], step: EscalationStep, *, lead: str
    ) -> str:
        summary = self._summary(record, stuck, lead=lead)
        self.diagnosed[record.key] = {s.object.uid: cause_names(s) for s in stuck}
        await self._publish(
            AlertDeletionStuck(
                appwrapper=record.appwrapper,
                attempt=record.attempt,
                occurred_at=self.now(),
                cycle_traceparent=record.cycle_traceparent,
                summary=summary,
                step=step,
                elapsed_seconds=max(0.0, (self.now() - record.teardown_started_at).total_seconds()),
                stuck=tuple(stuck),
            )
        )
        return summary

    async def _stuck_alert(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self._fresh_open(version)
        stuck = await self._diagnose(record, alive)
        span.set_attribute("clearance.stuck_objects", len(stuck))
        if not stuck:
            return ()
        summary = await self._alert_stuck(record, stuck, "stuck_alert", lead="DeletionStuck")
        for node, (causes, objects) in lost_nodes(stuck).items():
            await self._publish(
                AlertNodeLost(
                    appwrapper=record.appwrapper,
                    attempt=record.attempt,
                    occurred_at=self.now(),
                    cycle_traceparent=record.cycle_traceparent,
                    summary=f"node {node} is lost and holds {len(objects)} object(s) of "
                    f"{record.appwrapper.namespace}/{record.appwrapper.name}",
                    node=node,
                    reasons=causes,
                    objects=tuple(objects),
                )
            )
        await self._record(record, reason="DeletionStuck", message=summary, step="stuck_alert")
        return tuple(s.object for s in stuck)

    async def _force_deletion(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self._fresh_open(version)
        forced: list[ObjectRef] = []
        failures: list[str] = []
        for obj in record.open_objects:  # pods first, then items
            if obj.uid not in alive:
                continue
            resource = await self.resolver.resolve(obj.api_version, obj.kind)
            if resource is None:
                continue
            try:
                await self.kube.delete(
                    resource,
                    obj.name,
                    namespace=obj.namespace,
                    grace_period_seconds=0,
                    propagation_policy="Background",
                    uid=obj.uid,
                )
            except KubeError as exc:
                if exc.not_found or exc.conflict:
                    continue  # gone, or the name now belongs to another UID
                self.metrics.kube_errors.labels("force_delete").inc()
                failures.append(f"{obj.kind}/{obj.name}: {exc}")
                continue
            forced.append(obj.ref())
        if failures:
            raise RuntimeError("force deletion failed for " + "; ".join(failures))
        span.set_attribute("clearance.forced_objects", len(forced))
        if not forced:
            return ()
        aw = record.appwrapper
        names = ", ".join(f"{r.kind.lower()} {r.name}" for r in forced[:5])
        message = (
            f"DeletionForced: grace-0 deletion of {len(forced)} object(s) of AppWrapper "
            f"{aw.namespace}/{aw.name} attempt {record.attempt}: {names}"
        )
        await self._publish(
            CycleDeletionForced(
                appwrapper=aw,
                attempt=record.attempt,
                occurred_at=self.now(),
                cycle_traceparent=record.cycle_traceparent,
                objects=tuple(forced),
            )
        )
        await self._publish(
            AlertDeletionForced(
                appwrapper=aw,
                attempt=record.attempt,
                occurred_at=self.now(),
                cycle_traceparent=record.cycle_traceparent,
                summary=message,
                objects=tuple(forced),
            )
        )
        # What even a grace-0 delete left behind (finalizers): say so, with a diagnosis.
        current = self.cache.get(record.key, version)
        survivors_record, survivors = await self._fresh_open(current)
        stuck = await self._diagnose(survivors_record, survivors)
        if stuck:
            message = await self._alert_stuck(
                survivors_record, stuck, "force_deletion", lead="DeletionStuck after force deletion"
            )
        await self._record(record, reason="DeletionForced", message=message, step="force_deletion")
        return tuple(forced)

    async def _remove_finalizers(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self._fresh_open(version)
        removed: list[RemovedFinalizers] = []
        for obj in record.open_objects:
            snapshot = alive.get(obj.uid)
            if snapshot is None or not snapshot.metadata.finalizers:
                continue
            resource = await self.resolver.resolve(obj.api_version, obj.kind)
            if resource is None:
                continue
            patch = [
                {"op": "test", "path": "/metadata/uid", "value": obj.uid},
                {"op": "remove", "path": "/metadata/finalizers"},
            ]
            try:
                await self.kube.patch(
                    resource, obj.name, patch, namespace=obj.namespace, content_type=JSON_PATCH
                )
            except KubeError as exc:
                if exc.not_found or exc.code in (409, 422):
                    continue  # gone, another UID, or the finalizers already went
                self.metrics.kube_errors.labels("remove_finalizers").inc()
                raise
            removed.append(
                RemovedFinalizers(object=obj.ref(), finalizers=tuple(snapshot.metadata.finalizers))
            )
        span.set_attribute("clearance.unfinalized_objects", len(removed))
        if not removed:
            return ()
        aw = record.appwrapper
        await self._publish(
            CycleFinalizersRemoved(
                appwrapper=aw,
                attempt=record.attempt,
                occurred_at=self.now(),
                cycle_traceparent=record.cycle_traceparent,
                removed=tuple(removed),
            )
        )
        detail = "; ".join(
            f"{r.object.kind.lower()} {r.object.name}: {', '.join(r.finalizers)}"
            for r in removed[:5]
        )
        await self._record(
            record,
            reason="FinalizersRemoved",
            message=f"FinalizersRemoved (finalizerRemoval: AfterForceDeletion) from "
            f"{len(removed)} object(s) of attempt {record.attempt}: {detail}",
            step="finalizer_removal",
        )
        return tuple(r.object for r in removed)

    async def _record(self, record: Teardown, *, reason: str, message: str, step: str) -> None:
        aw = record.appwrapper
        await record_event(
            self.kube,
            involved={
                "apiVersion": self.aw_api_version,
                "kind": "AppWrapper",
                "namespace": aw.namespace,
                "name": aw.name,
                "uid": aw.uid,
            },
            reason=reason,
            message=message,
            type_="Warning",
            component=COMPONENT,
            key=f"{record.attempt}:{step}",
        )

    # ------------------------------------------------------------------- helpers

    async def _publish(self, event: Event, *, parent: Context | None = None) -> None:
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

    def _cycle_parent(self, record: Teardown) -> Context | None:
        if record.cycle_traceparent:
            with contextlib.suppress(ValueError):
                return context_from_traceparent(record.cycle_traceparent)
        return None

    def _root(self, record: Teardown) -> Context:
        """Parent of escalate/cleared: the cycle root, else our own deletion.await."""
        parent = self._cycle_parent(record)
        if parent is not None:
            return parent
        return spans.context_of(record.trace_id, record.await_span_id)

    def _logger(self, record: Teardown) -> ContextLogger:
        aw = record.appwrapper
        return ContextLogger(
            log, aw=f"{aw.namespace}/{aw.name}", aw_uid=aw.uid, attempt=record.attempt
        )


def _kinds(record: Teardown) -> frozenset[tuple[str, str]]:
    """(apiVersion, kind) pairs the final LIST must cover: pods, wrapped kinds, tracked kinds."""
    kinds = {("v1", "Pod")}
    kinds.update((k.api_version, k.kind) for k in record.wrapped_kinds)
    kinds.update((o.api_version, o.kind) for o in record.objects.values())
    return frozenset(kinds)


def _stamp_span_ids(record: Teardown, confirmed: Iterable[Confirmation]) -> Teardown:
    uids = [c.object.uid for c in confirmed]
    if not uids:
        return record
    objects = dict(record.objects)
    for uid in uids:
        obj = objects.get(uid)
        if obj is not None and obj.confirm_span_id is None:
            objects[uid] = msgspec.structs.replace(obj, confirm_span_id=spans.new_span_id())
    return msgspec.structs.replace(record, objects=objects)


def _aw_attributes(record: Teardown) -> dict[str, str | int]:
    aw: AppWrapperRef = record.appwrapper
    return {
        "clearance.aw.namespace": aw.namespace,
        "clearance.aw.name": aw.name,
        "clearance.aw.uid": aw.uid,
        "clearance.attempt": record.attempt,
    }


def _object_attributes(record: Teardown, obj: TrackedObject) -> dict[str, str | int]:
    return _aw_attributes(record) | {
        "k8s.object.kind": obj.kind,
        "k8s.object.name": obj.name,
        "k8s.object.uid": obj.uid,
        "k8s.namespace.name": obj.namespace or "",
    }


__all__ = ["COMPONENT", "Tracker", "record_key", "utcnow"]
