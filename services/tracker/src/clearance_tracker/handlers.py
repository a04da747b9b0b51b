"""Event handlers: `teardown.started` opens a record, a kube event updates the records it concerns.

This module owns what happens between a delivered message and its ack. `teardown.started`
creates the record with `kv.create` (a redelivery finds it and adds nothing), the handling
replica becoming its owner, then runs the first evaluation before the ack so deletions that
happened before the tracker heard of the teardown are confirmed at once. A pod or item event
is routed through the view (AppWrapper label, else ownerReferences to tracked objects) to
every open record it concerns, previewed on the cached copy — most MODIFIED events change
nothing and cost no KV trip — and group-committed otherwise; when the handling replica owns
a record whose last object this event confirmed, `cleared` is published before the ack (the
final quorum LIST starts at once, and the confirmation goes out in the verification's write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final, Protocol

import msgspec

from clearance import bus, labels
from clearance.events import CycleTeardownStarted, Event, KubeItemEvent, KubePodEvent
from clearance_tracker import spans
from clearance_tracker.commits import Change, RecordWriter
from clearance_tracker.confirmation import Outcome, Snapshot, apply_event
from clearance_tracker.deferral import DeferralLog
from clearance_tracker.escalation import Timing
from clearance_tracker.inventory import cycle_traceparent, open_teardown
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.reads import ApiReader, Listing
from clearance_tracker.reporting import logger_for
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.store import TeardownStore
from clearance_tracker.teardown import Teardown
from clearance_tracker.view import TeardownView


class _PolicyProbe(msgspec.Struct):
    policy: dict[str, Any] | None = None


_POLICY_PROBE: Final = msgspec.json.Decoder(_PolicyProbe)


class Evaluate(Protocol):
    def __call__(
        self,
        key: str,
        *,
        listing: asyncio.Task[Listing] | None = None,
        fact: Change | None = None,
    ) -> Awaitable[None]: ...


class Handlers:
    """The two consumers' handlers of one tracker replica."""

    def __init__(
        self,
        *,
        settings: TrackerSettings,
        store: TeardownStore,
        view: TeardownView,
        writer: RecordWriter,
        reader: ApiReader,
        metrics: TrackerMetrics,
        timing: Timing,
        clock: Callable[[], datetime],
        evaluate: Evaluate,
        deferrals: DeferralLog,
    ) -> None:
        self.settings = settings
        self.me = settings.identity
        self.store = store
        self.view = view
        self.writer = writer
        self.reader = reader
        self.metrics = metrics
        self.timing = timing
        self.now = clock
        self.evaluate = evaluate
        self.deferrals = deferrals

    # ---------------------------------------------------------- teardown.started

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
        traceparent = cycle_traceparent(event.cycle_traceparent, header_traceparent)
        record = open_teardown(
            event,
            policy=event.policy if policy_given else self.settings.default_policy(),
            owner=self.me,
            recorded_at=self.now(),
            trace_id=spans.trace_id_of(traceparent) or spans.new_trace_id(),
            await_span_id=spans.new_span_id(),
            traceparent=traceparent,
            timing=self.timing,
        )
        created = await self.store.create(record)
        logger = logger_for(record)
        if created is not None:
            self.metrics.teardowns_started.inc()
            logger.info(
                "teardown recorded",
                extra={
                    "objects": len(record.objects),
                    "policy": msgspec.to_builtins(record.policy),
                },
            )
            version = created
        else:
            existing = await self.store.get(record.key)
            if existing is None:
                raise bus.Retry(0.5, "teardown record vanished while being created")
            version = existing
        self.view.remember(version)
        if version.record.owner == self.me and not version.record.cleared:
            try:
                await self.evaluate(record.key)
            except Exception as exc:
                self.deferrals.failed(exc, what="first verification", key=record.key)

    # ------------------------------------------------------------- kube events

    async def on_kube_event(self, event: Event, delivery: bus.Delivery) -> None:
        if not isinstance(event, KubePodEvent | KubeItemEvent):
            return
        await self.observe(event.action, event.object)

    def _concerned(self, snapshot: Snapshot) -> set[str]:
        meta = snapshot.metadata
        assert meta.namespace is not None
        names = (
            meta.labels.get(labels.MCAD_APPWRAPPER),
            meta.labels.get(labels.CODEFLARE_APPWRAPPER),
        )
        keys = self.view.keys_of(meta.namespace, names)
        if not keys:
            # Unlabelled pods of tracked owners: look for a record tracking an owner.
            owners = {ref.uid for ref in meta.owner_references}
            if owners:
                keys = self.view.open_tracking(owners)
        return keys

    async def observe(self, action: str, snapshot: Snapshot) -> None:
        """Apply one watch event to every open teardown it concerns."""
        if snapshot.metadata.namespace is None:
            return
        for key in sorted(self._concerned(snapshot)):
            cached = self.view.get(key)
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
                listing = asyncio.create_task(self.reader.list_all(preview.record))

            def change(record: Teardown, now: datetime = now) -> Outcome | None:
                if record.clearing is not None:
                    return None
                return apply_event(record, action=action, snapshot=snapshot, now=now)

            try:
                if listing is not None:
                    # Probably the last confirmation: written together with the verification
                    # it makes due (and `clearing`), and `cleared` published before the ack.
                    await self.evaluate(key, listing=listing, fact=change)
                    continue
                version = await self.writer.commit(key, change, known=cached)
                if version is None:
                    continue
                record = version.record
                if record.owner == self.me and record.all_confirmed and not record.cleared:
                    # publish `cleared` before this input is acked
                    await self.evaluate(key)
            finally:
                if listing is not None and not listing.done():
                    listing.cancel()
