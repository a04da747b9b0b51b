"""What the tracker tells the world: cycle events, alerts, Warning Events, spans, metrics, logs.

This module owns every message the tracker publishes and how it is worded: the audit trail of
confirmations (one `cycle.deletion.confirmed` per record write listing the objects it
confirmed, with a `deletion.confirmed` span per object, emitted after the fact is in KV),
`cycle.cleared` with its `cleared` span and the restart-proof `deletion.await`, the ladder's
`alert.deletion.stuck` / `alert.node.lost` / `cycle.deletion.forced` / `alert.deletion.forced`
/ `cycle.finalizers.removed`, and the Kubernetes Warning Events on the AppWrapper. Every
message has a deterministic Msg-Id (per AppWrapper UID, attempt and step or object), so a step
repeated after a crash publishes nothing new. It decides nothing: the caller has already
decided, and passes the record and what was found or done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from nats.js import JetStreamContext
from opentelemetry.context import Context
from opentelemetry.trace import Link, Tracer

from clearance import attributes, bus
from clearance.events import (
    AlertDeletionForced,
    AlertDeletionStuck,
    AlertNodeLost,
    ConfirmedObject,
    CycleCleared,
    CycleDeletionConfirmed,
    CycleDeletionForced,
    CycleFinalizersRemoved,
    EscalationStep,
    Event,
    ObjectRef,
    RemovedFinalizers,
    StuckObject,
)
from clearance.kube import Kube
from clearance.recording import record_appwrapper_event
from clearance.telemetry import ContextLogger
from clearance_tracker import spans
from clearance_tracker.confirmation import Confirmation
from clearance_tracker.diagnosis import cause_names, describe, lost_nodes
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.teardown import Teardown

log = logging.getLogger(__name__)

COMPONENT: Final = "clearance-tracker"
"""`source.component` of the Warning Events the tracker records."""


def logger_for(record: Teardown) -> ContextLogger:
    aw = record.appwrapper
    return ContextLogger(log, aw=f"{aw.namespace}/{aw.name}", aw_uid=aw.uid, attempt=record.attempt)


E = TypeVar("E")


def _about(make: Callable[..., E], record: Teardown, *, occurred_at: datetime, **fields: Any) -> E:
    """A cycle event or alert about `record`'s AppWrapper and attempt, in its cycle's trace."""
    return make(
        appwrapper=record.appwrapper,
        attempt=record.attempt,
        occurred_at=occurred_at,
        cycle_traceparent=record.cycle_traceparent,
        **fields,
    )


def _names(refs: Sequence[ObjectRef]) -> str:
    return ", ".join(f"{r.kind.lower()} {r.name}" for r in refs[:5])


class Reporter:
    """Publishes and records on behalf of one tracker replica."""

    def __init__(
        self,
        *,
        js: JetStreamContext,
        kube: Kube,
        tracer: Tracer,
        metrics: TrackerMetrics,
        bus_metrics: bus.BusMetrics | None,
        aw_api_version: str,
        clock: Callable[[], datetime],
    ) -> None:
        self.kube = kube
        self.tracer = tracer
        self.metrics = metrics
        self.events = bus.EventPublisher(
            js, tracer=tracer, metrics=bus_metrics, fence=lambda: kube.fence
        )
        """Where the tracker's events leave, fenced like its API writes (``kube.fence``)."""
        self.aw_api_version = aw_api_version
        self.now = clock
        self.diagnosed: dict[str, dict[str, tuple[str, ...]]] = {}
        """Record key → object UID → causes of the latest diagnosis this replica published
        (the tracker's scan turns it into the by-cause stuck gauge)."""

    async def publish(self, event: Event, *, parent: Context | None = None) -> None:
        await self.events.publish(event, parent=parent)

    # ------------------------------------------------------------ confirmations

    async def confirmations(self, record: Teardown, confirmed: Iterable[Confirmation]) -> None:
        """Spans, metrics, logs and audit events of objects a KV write just confirmed gone."""
        try:
            await self._confirmations(record, confirmed)
        except Exception:
            log.exception("could not report confirmations")

    async def _confirmations(self, record: Teardown, confirmed: Iterable[Confirmation]) -> None:
        """A ``deletion.confirmed`` span per object, and one audit event for them all.

        One event per record write (the facts of a burst of DELETED events, or of one
        verification, go out together): a burst of N objects costs one JetStream publish per
        group-committed write instead of N. Its PRODUCER span is a child of the teardown's
        ``deletion.await``, beside the per-object spans it lists."""
        logger = logger_for(record)
        parent = spans.context_of(record.trace_id, record.await_span_id)
        reported: list[ConfirmedObject] = []
        latest = None
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
                    attributes=spans.object_attributes(record, obj)
                    | {attributes.CONFIRMATION_HOW: confirmation.how},
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
            reported.append(ConfirmedObject(object=obj.ref(), how=confirmation.how))
            latest = obj.confirmed_at if latest is None else max(latest, obj.confirmed_at)
        if latest is None:
            return
        event = _about(
            CycleDeletionConfirmed, record, occurred_at=latest, confirmed=tuple(reported)
        )
        try:
            await self.publish(event, parent=parent)
        except bus.PublishError as exc:
            # An audit event: the KV record already holds the facts.
            logger.warning("deletion.confirmed not published", extra={"error": str(exc)})

    # ------------------------------------------------------------------ cleared

    async def cleared(self, record: Teardown) -> None:
        """`cycle.cleared` under its `cleared` span, then the teardown's `deletion.await`."""
        clearing = record.clearing
        assert clearing is not None
        confirmed = [o for o in record.objects.values() if o.gone]
        links = [
            Link(
                spans.span_context_of(record.trace_id, o.confirm_span_id),
                {attributes.OBJECT_UID: o.uid, attributes.OBJECT_KIND: o.kind},
            )
            for o in confirmed
            if o.confirm_span_id
        ]
        with self.tracer.start_as_current_span(
            "cleared",
            context=spans.root(record),
            links=links,
            attributes=spans.appwrapper_attributes(record)
            | {attributes.OBJECT_COUNT: len(confirmed)},
        ):
            await self.publish(
                _about(
                    CycleCleared,
                    record,
                    occurred_at=clearing.cleared_at,
                    cleared_at=clearing.cleared_at,
                    teardown_started_at=record.teardown_started_at,
                    confirmed=tuple(o.ref() for o in confirmed),
                )
            )
        with spans.preset_span_id(record.await_span_id):
            await_span = self.tracer.start_span(
                "deletion.await",
                context=spans.cycle_parent(record),
                start_time=spans.nanos(record.teardown_started_at),
                attributes=spans.appwrapper_attributes(record)
                | {attributes.OBJECT_COUNT: len(record.objects)},
            )
        await_span.end(end_time=spans.nanos(max(clearing.cleared_at, record.teardown_started_at)))

    def count_cleared(self, record: Teardown, *, published_at: datetime) -> None:
        """Metrics and log line of a `cleared` this replica marked published."""
        clearing = record.clearing
        assert clearing is not None
        confirmed = [o for o in record.objects.values() if o.gone]
        self.metrics.cleared.inc()
        duration = (clearing.cleared_at - record.teardown_started_at).total_seconds()
        self.metrics.teardown_duration.observe(max(0.0, duration))
        last = max((o.confirmed_at for o in confirmed if o.confirmed_at), default=None)
        if last is not None:
            self.metrics.cleared_latency.observe(max(0.0, (published_at - last).total_seconds()))
        logger_for(record).info(
            "teardown cleared", extra={"duration_s": round(duration, 3), "objects": len(confirmed)}
        )

    # ------------------------------------------------------------------- ladder

    def _elapsed(self, record: Teardown) -> float:
        return max(0.0, (self.now() - record.teardown_started_at).total_seconds())

    async def stuck(
        self, record: Teardown, stuck: list[StuckObject], step: EscalationStep, *, lead: str
    ) -> str:
        """`alert.deletion.stuck` for `step` with one diagnosis per object; returns its summary."""
        self.diagnosed[record.key] = {s.object.uid: cause_names(s) for s in stuck}
        aw = record.appwrapper
        details = "; ".join(describe(s) for s in stuck[:5])
        more = f" (+{len(stuck) - 5} more)" if len(stuck) > 5 else ""
        summary = (
            f"{lead}: {len(stuck)} object(s) of AppWrapper {aw.namespace}/{aw.name} attempt "
            f"{record.attempt} still present {self._elapsed(record):.0f}s after teardown "
            f"started: {details}{more}"
        )
        await self.publish(
            _about(
                AlertDeletionStuck,
                record,
                occurred_at=self.now(),
                summary=summary,
                step=step,
                elapsed_seconds=self._elapsed(record),
                stuck=tuple(stuck),
            )
        )
        return summary

    async def nodes_lost(self, record: Teardown, stuck: list[StuckObject]) -> None:
        """One `alert.node.lost` per lost node that holds objects of the teardown."""
        aw = record.appwrapper
        for node, (causes, objects) in lost_nodes(stuck).items():
            await self.publish(
                _about(
                    AlertNodeLost,
                    record,
                    occurred_at=self.now(),
                    summary=f"node {node} is lost and holds {len(objects)} object(s) of "
                    f"{aw.namespace}/{aw.name}",
                    node=node,
                    reasons=causes,
                    objects=tuple(objects),
                )
            )

    async def forced(self, record: Teardown, forced: Sequence[ObjectRef]) -> str:
        """`cycle.deletion.forced` + `alert.deletion.forced`; returns the alert's summary."""
        aw = record.appwrapper
        message = (
            f"DeletionForced: grace-0 deletion of {len(forced)} object(s) of AppWrapper "
            f"{aw.namespace}/{aw.name} attempt {record.attempt}: {_names(forced)}"
        )
        objects = tuple(forced)
        await self.publish(
            _about(CycleDeletionForced, record, occurred_at=self.now(), objects=objects)
        )
        await self.publish(
            _about(
                AlertDeletionForced,
                record,
                occurred_at=self.now(),
                summary=message,
                objects=objects,
            )
        )
        return message

    async def finalizers_removed(
        self, record: Teardown, removed: Sequence[RemovedFinalizers]
    ) -> str:
        """`cycle.finalizers.removed`; returns the Warning Event's message."""
        await self.publish(
            _about(CycleFinalizersRemoved, record, occurred_at=self.now(), removed=tuple(removed))
        )
        detail = "; ".join(
            f"{r.object.kind.lower()} {r.object.name}: {', '.join(r.finalizers)}"
            for r in removed[:5]
        )
        return (
            f"FinalizersRemoved (finalizerRemoval: AfterForceDeletion) from "
            f"{len(removed)} object(s) of attempt {record.attempt}: {detail}"
        )

    async def warning(self, record: Teardown, *, reason: str, message: str, step: str) -> None:
        """A Kubernetes Warning Event on the AppWrapper (one per attempt and step)."""
        await record_appwrapper_event(
            self.kube,
            record.appwrapper,
            api_version=self.aw_api_version,
            component=COMPONENT,
            reason=reason,
            message=message,
            type_="Warning",
            key=f"{record.attempt}:{step}",
        )
