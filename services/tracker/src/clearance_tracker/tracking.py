"""One tracker replica: the parts wired together, its timers, and the evaluation of a record.

This module owns the replica's life (start, ready, stop) and the one loop that turns a
record into work: an evaluation (at most one at a time per record, coalesced when poked
again meanwhile) asks :func:`~.escalation.next_work` what is due and does it — verify
(:mod:`.verification`), publish `cleared` (:mod:`.reporting`, then mark it published with
CAS), or run a ladder step (:mod:`.ladder`). A scan every `scan_interval` is the timer of
record: it deletes records past their retention, takes over records of dead owners
(:mod:`.ownership`), pokes owned records with something due and sets the gauges. Deadlines are
kept nowhere but in the records, so they survive restarts and hand-overs by construction; an
in-memory alarm per owned record only rings at its next ladder deadline so the step does not
wait for the next scan.
The rest lives in the parts: the record (:mod:`.teardown`), the bucket (:mod:`.store`), the
view (:mod:`.view`), writes (:mod:`.commits`), reads (:mod:`.reads`) and the handlers
(:mod:`.handlers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue
from opentelemetry.trace import Tracer

from clearance import bus, testfaults
from clearance.kube import Kube
from clearance.tasks import CrashWatch
from clearance_tracker.commits import Change, RecordWriter
from clearance_tracker.confirmation import Confirmation
from clearance_tracker.deferral import DeferralLog
from clearance_tracker.diagnosis import CAUSE_NAMES, count_causes
from clearance_tracker.escalation import (
    Timing,
    due_step,
    next_step_at,
    next_work,
    stuck_objects_count,
)
from clearance_tracker.handlers import Handlers
from clearance_tracker.ladder import Ladder
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.ownership import Ownership, retention_over
from clearance_tracker.reads import ApiReader, Listing
from clearance_tracker.reporting import COMPONENT, Reporter, logger_for
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.store import TeardownStore, Versioned
from clearance_tracker.teardown import Teardown
from clearance_tracker.verification import Verifier
from clearance_tracker.view import TeardownView

log = logging.getLogger(__name__)

ALARM_SLACK = 0.005
"""Seconds an alarm rings after its deadline, so the clock has passed it when it is read."""


SCAN_SLICE = 256
"""Records a scan looks at between two yields to the event loop."""


def utcnow() -> datetime:
    return datetime.now(UTC)


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
        self.metrics = metrics
        self.now = clock
        self.me = settings.identity
        self.timing = Timing(
            finalizer_removal_delay=settings.finalizer_removal_delay,
            claim_timeout=settings.claim_timeout,
            verify_interval=settings.verify_interval,
        )
        self.store = TeardownStore(kv)
        self.crashes = CrashWatch()
        """The replica's timers, KV watch and consumer loops: one ending with an error ends
        the process (:mod:`clearance_tracker.service`), never a replica alive doing nothing."""
        self.view = TeardownView(
            kv, on_record=self._on_record, on_forget=self._on_forget, crashes=self.crashes
        )
        self.reporter = Reporter(
            js=js,
            kube=kube,
            tracer=tracer,
            metrics=metrics,
            bus_metrics=bus_metrics,
            aw_api_version=f"{settings.appwrapper_group}/{settings.appwrapper_version}",
            clock=clock,
        )
        self.writer = RecordWriter(self.store, self.view, on_confirmed=self._on_confirmed)
        self.reader = ApiReader(kube, metrics=metrics)
        self.verifier = Verifier(
            reader=self.reader,
            writer=self.writer,
            metrics=metrics,
            me=self.me,
            clock=clock,
            logger=logger_for,
        )
        self.ladder = Ladder(
            kube=kube,
            reader=self.reader,
            verifier=self.verifier,
            writer=self.writer,
            view=self.view,
            reporter=self.reporter,
            metrics=metrics,
            tracer=tracer,
            me=self.me,
            timing=self.timing,
            clock=clock,
        )
        self.ownership = Ownership(
            store=self.store,
            view=self.view,
            writer=self.writer,
            metrics=metrics,
            me=self.me,
            heartbeat_interval=settings.heartbeat_interval,
            owner_timeout=settings.owner_timeout,
            clock=clock,
            poke=self.poke,
        )
        # Fencing: every API write of this replica passes its heartbeat term first.
        if not testfaults.active("unfenced"):
            kube.fence = self.ownership.term
            self.store.fence = self.ownership.term
        self.deferrals = DeferralLog(log, metrics.evaluations_deferred)
        """Evaluations waiting for NATS, the API or the term: one throttled WARNING line."""
        self.handlers = Handlers(
            settings=settings,
            store=self.store,
            view=self.view,
            writer=self.writer,
            reader=self.reader,
            metrics=metrics,
            timing=self.timing,
            clock=clock,
            evaluate=self.evaluate,
            deferrals=self.deferrals,
        )
        self.on_cycle_event = self.handlers.on_cycle_event
        self.on_kube_event = self.handlers.on_kube_event
        self._evaluation_locks: dict[str, asyncio.Lock] = {}
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._alarms: dict[str, asyncio.TimerHandle] = {}
        """Owned records → a wake-up at their next ladder deadline (see :meth:`_arm`)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, sync_timeout: float = 30.0) -> None:
        await self.ownership.beat()
        self.view.start()
        await asyncio.wait_for(self.view.synced.wait(), sync_timeout)
        for loop, name in (
            (self.ownership.heartbeat_loop(), "tracker:heartbeat"),
            (self._scan_loop(), "tracker:scan"),
        ):
            self._tasks.append(self.crashes.watch(asyncio.create_task(loop, name=name)))
        log.info("tracker started", extra={"replica": self.me, "records": len(self.view.records)})

    async def stop(self, *, timeout: float = 10.0, release: bool = True) -> None:
        """Stop timers and the KV watch; wait for running evaluations (≤ ``timeout``).

        With ``release``, the heartbeat key is deleted so that other replicas take over
        this replica's open teardowns at once instead of after ``owner_timeout``.
        """
        self._stopping.set()
        for alarm in self._alarms.values():
            alarm.cancel()
        self._alarms.clear()
        tasks = [*self._tasks, *([self.view.task] if self.view.task is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._workers:
            await asyncio.wait(set(self._workers), timeout=timeout)
        if release:
            self.ownership.term.ended()
            with contextlib.suppress(Exception):
                await self.store.release(self.me)

    @property
    def ready(self) -> bool:
        watch = self.view.task
        return (
            self.view.synced.is_set()
            and watch is not None
            and not watch.done()
            and all(not t.done() for t in self._tasks)
        )

    # ------------------------------------------------------------- view listeners

    def _on_record(self, version: Versioned) -> None:
        record = version.record
        self._arm(record)
        if record.owner == self.me and self._needs_attention(record, self.now()):
            if self._periodic_only(record, self.now()):
                return  # periodic re-checks are started by the scan, within verify_rate
            self.poke(record.key)

    def _periodic_only(self, record: Teardown, now: datetime) -> bool:
        """Is a periodic re-check all that is due? (verified before, not all confirmed, not
        clearing, no ladder step due: neither a first nor a final verification)."""
        return (
            record.last_verified_at is not None
            and record.clearing is None
            and not record.all_confirmed
            and due_step(record, now=now, me=self.me, timing=self.timing) is None
        )

    def _arm(self, record: Teardown) -> None:
        """Wake up at the record's next ladder deadline (a force deletion is due the moment
        its deadline passes, not up to a ``scan_interval`` later: in a rack loss that was
        ~0.5 s of every gang's redispatch). The deadline itself lives in the record, and
        the scan still finds it after a restart or a hand-over: this alarm only saves the
        wait for the next scan."""
        alarm = self._alarms.pop(record.key, None)
        if alarm is not None:
            alarm.cancel()
        if record.owner != self.me or record.cleared or self._stopping.is_set():
            return
        when = next_step_at(record, me=self.me, timing=self.timing)
        if when is None:
            return
        delay = (when - self.now()).total_seconds()
        if delay <= 0:
            return  # due now: the caller pokes it
        loop = asyncio.get_running_loop()
        self._alarms[record.key] = loop.call_later(delay + ALARM_SLACK, self._ring, record.key)

    def _ring(self, key: str) -> None:
        self._alarms.pop(key, None)
        if self._owned_open(key):
            self.poke(key)

    def _on_forget(self, key: str) -> None:
        alarm = self._alarms.pop(key, None)
        if alarm is not None:
            alarm.cancel()
        self._evaluation_locks.pop(key, None)
        self.writer.forget(key)

    def _on_confirmed(self, record: Teardown, confirmed: list[Confirmation]) -> None:
        # Spans and audit events only, off the critical path: the fact is in KV already.
        self._spawn(self.reporter.confirmations(record, confirmed))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    def _needs_attention(self, record: Teardown, now: datetime) -> bool:
        return next_work(record, now=now, me=self.me, timing=self.timing) is not None

    # --------------------------------------------------------------------- timers

    async def _scan_loop(self) -> None:
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scan failed")
            await asyncio.sleep(self.settings.scan_interval)

    async def scan(self) -> None:
        """One pass over the KV view: take over orphans, poke what is due, update gauges."""
        now = self.now()
        stuck = 0
        owned_open = 0
        causes: Counter[str] = Counter()
        diagnosed = self.reporter.diagnosed
        # Periodic re-checks this pass may start (verify_rate); the rest stay due.
        budget = max(1, int(self.settings.verify_rate * self.settings.scan_interval))
        for index, (key, version) in enumerate(list(self.view.records.items())):
            if index and index % SCAN_SLICE == 0:
                # Let handlers and the health port run: at 10,000 records a pass takes
                # ~0.5 s of CPU, which in one piece starved /metrics past 5 s.
                await asyncio.sleep(0)
            record = version.record
            if record.cleared:
                if retention_over(record, now=now, retention=self.settings.record_retention) and (
                    record.owner == self.me or not self.ownership.alive(record.owner, now)
                ):
                    await self.store.delete(key, version.revision)
                continue
            if record.owner != self.me:
                if not self.ownership.alive(record.owner, now):
                    await self.ownership.take_over(key, record.owner)
                continue
            owned_open += 1
            stuck += stuck_objects_count(record, now=now, timing=self.timing)
            if key in diagnosed:
                causes += count_causes((o.uid for o in record.open_objects), diagnosed[key])
            work = next_work(record, now=now, me=self.me, timing=self.timing)
            if work is None:
                continue
            if work == "verify" and self._periodic_only(record, now):
                if budget <= 0 or key in self._running:
                    continue
                budget -= 1
            self.poke(key)
        self.metrics.objects_stuck.set(stuck)
        for key in [k for k in diagnosed if not self._owned_open(k)]:
            del diagnosed[key]
        for cause in CAUSE_NAMES:
            self.metrics.objects_stuck_diagnosed.labels(cause).set(causes[cause])
        self.metrics.teardowns_open.set(owned_open)

    def _owned_open(self, key: str) -> bool:
        version = self.view.records.get(key)
        return (
            version is not None and version.record.owner == self.me and not version.record.cleared
        )

    # ----------------------------------------------------------------- evaluation

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
                except Exception as exc:
                    self.deferrals.failed(exc, what="teardown evaluation", key=key)
                if key not in self._again or self._stopping.is_set():
                    return
        finally:
            self._running.discard(key)

    def _evaluation_lock(self, key: str) -> asyncio.Lock:
        lock = self._evaluation_locks.get(key)
        if lock is None:
            lock = self._evaluation_locks[key] = asyncio.Lock()
        return lock

    async def evaluate(
        self,
        key: str,
        *,
        listing: asyncio.Task[Listing] | None = None,
        fact: Change | None = None,
    ) -> None:
        """Do whatever is due for one owned teardown: verify, clear, escalate.

        ``listing``: a quorum LIST of the teardown's kinds already started by the caller
        after the event that prompted this evaluation (saves a round trip on the hot path).
        ``fact``: an event's change not yet written; when it makes a verification due (the
        last confirmation), it goes out in the verification's own write (one KV round trip
        on the way to `cleared`, not two), otherwise it is written first, alone.
        """
        async with self._evaluation_lock(key):
            # The view follows the KV watch and every local write; a stale copy only costs
            # a CAS conflict, after which the store re-reads.
            version = self.view.get(key) or await self.store.get(key)
            if version is None:
                self.view.forget(key)
                return
            self.view.remember(version)
            record = version.record
            if fact is not None:
                preview = fact(record)
                if preview is not None and self._verify_due(preview.record):
                    record = preview.record
                else:
                    written = await self.writer.commit(key, fact, known=version)
                    if written is None or not self._settles(written.record):
                        return
                    version, record, fact = written, written.record, None
            work = next_work(record, now=self.now(), me=self.me, timing=self.timing)
            if work == "verify":
                version = await self.verifier.verify(version, listing=listing, fact=fact)
                work = next_work(
                    version.record, now=self.now(), me=self.me, timing=self.timing, verified=True
                )
            if work == "publish_cleared":
                await self._publish_cleared(version)
            elif work is not None and work != "verify":
                await self.ladder.escalate(version, work)

    def _verify_due(self, record: Teardown) -> bool:
        return next_work(record, now=self.now(), me=self.me, timing=self.timing) == "verify"

    def _settles(self, record: Teardown) -> bool:
        """Every object confirmed on a record of ours: what an event's write goes on to (the
        final verification, `cleared`) before its ack; anything else waits for the scan."""
        return record.owner == self.me and record.all_confirmed and not record.cleared

    async def _publish_cleared(self, version: Versioned) -> None:
        record = version.record
        await self.reporter.cleared(record)
        published_at = self.now()

        def change(current: Teardown) -> Teardown | None:
            if current.clearing is None or current.clearing.published:
                return None
            return msgspec.structs.replace(
                current, clearing=msgspec.structs.replace(current.clearing, published=True)
            )

        _updated, wrote = await self.writer.mutate(record.key, change, known=version)
        if wrote:
            self.reporter.count_cleared(record, published_at=published_at)


__all__ = ["COMPONENT", "Tracker", "utcnow"]
