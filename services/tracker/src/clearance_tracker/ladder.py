"""The escalation ladder's actions: what each step does to the world, once it is due.

This module owns the effects of the three steps :mod:`.escalation` decides (DESIGN §4.3):
claim the step in the record (CAS) before anything is done, act under a `deletion.escalate`
span, mark it done (CAS) and count it. `stuck_alert` diagnoses each open object from a fresh
GET of it and its node and alerts; `force_deletion` deletes what is left with grace 0 and a
UID precondition, pods first, then alerts about whatever even that left; `finalizer_removal`
strips finalizers with a JSON patch guarded by a `test` of the UID. Each action is idempotent
(UID preconditions, the `test` op, deterministic Msg-Ids and Event names), so a step resumed
after a crash repeats nothing visible. Wording and publishing are :mod:`.reporting`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from opentelemetry.trace import Span, Tracer

from clearance import attributes
from clearance.events import EscalationStep, ObjectRef, PodObject, RemovedFinalizers, StuckObject
from clearance.kube import JSON_PATCH, Kube, KubeError
from clearance_tracker import spans
from clearance_tracker.commits import RecordWriter
from clearance_tracker.confirmation import Snapshot
from clearance_tracker.diagnosis import diagnose
from clearance_tracker.escalation import Timing, claim, complete
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.reads import ApiReader
from clearance_tracker.reporting import Reporter, logger_for
from clearance_tracker.store import Versioned
from clearance_tracker.teardown import Teardown
from clearance_tracker.verification import Verifier
from clearance_tracker.view import TeardownView

log = logging.getLogger(__name__)


class Ladder:
    """Carries out escalation steps for the teardowns this replica owns."""

    def __init__(
        self,
        *,
        kube: Kube,
        reader: ApiReader,
        verifier: Verifier,
        writer: RecordWriter,
        view: TeardownView,
        reporter: Reporter,
        metrics: TrackerMetrics,
        tracer: Tracer,
        me: str,
        timing: Timing,
        clock: Callable[[], datetime],
    ) -> None:
        self.kube = kube
        self.reader = reader
        self.verifier = verifier
        self.writer = writer
        self.view = view
        self.reporter = reporter
        self.metrics = metrics
        self.tracer = tracer
        self.me = me
        self.timing = timing
        self.now = clock

    async def escalate(self, version: Versioned, step: EscalationStep) -> None:
        """Claim `step`, carry it out, mark it done (no-op if another replica claimed it)."""
        now = self.now()
        claimed, wrote = await self.writer.mutate(
            version.record.key,
            lambda r: claim(r, step, now=now, me=self.me, timing=self.timing),
            known=version,
        )
        if claimed is None or not wrote:
            return  # another replica claimed it first, or it is no longer due
        record = claimed.record
        logger_for(record).bind(step=step).warning(
            "escalating teardown", extra={"open": len(record.open_objects)}
        )
        with self.tracer.start_as_current_span(
            "deletion.escalate",
            context=spans.root(record),
            attributes=spans.appwrapper_attributes(record)
            | {
                attributes.STEP: step,
                attributes.OPEN_OBJECT_COUNT: len(record.open_objects),
            },
        ) as span:
            if step == "stuck_alert":
                acted = await self._stuck_alert(claimed, span)
            elif step == "force_deletion":
                acted = await self._force_deletion(claimed, span)
            else:
                acted = await self._remove_finalizers(claimed, span)
        done_at = self.now()
        _, wrote = await self.writer.mutate(
            record.key, lambda r: complete(r, step, now=done_at, me=self.me, objects=acted)
        )
        if wrote:
            self.metrics.escalations.labels(step).inc()

    async def _diagnose(self, record: Teardown, alive: dict[str, Snapshot]) -> list[StuckObject]:
        names = [
            s.spec.node_name
            for s in alive.values()
            if isinstance(s, PodObject) and s.spec.node_name
        ]
        nodes = await self.reader.nodes(names)
        now = self.now()
        return [
            diagnose(record, obj, snapshot=alive.get(obj.uid), nodes=nodes, now=now)
            for obj in record.open_objects
            if obj.uid in alive
        ]

    async def _stuck_alert(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self.verifier.fresh_open(version)
        stuck = await self._diagnose(record, alive)
        span.set_attribute(attributes.STUCK_OBJECT_COUNT, len(stuck))
        if not stuck:
            return ()
        summary = await self.reporter.stuck(record, stuck, "stuck_alert", lead="DeletionStuck")
        await self.reporter.nodes_lost(record, stuck)
        await self.reporter.warning(
            record, reason="DeletionStuck", message=summary, step="stuck_alert"
        )
        return tuple(s.object for s in stuck)

    async def _force_deletion(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self.verifier.fresh_open(version)
        forced: list[ObjectRef] = []
        failures: list[str] = []
        for obj in record.open_objects:  # pods first, then items
            if obj.uid not in alive:
                continue
            resource = await self.reader.resolver.find(obj.api_version, obj.kind)
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
        span.set_attribute(attributes.FORCED_OBJECT_COUNT, len(forced))
        if not forced:
            return ()
        message = await self.reporter.forced(record, forced)
        # What even a grace-0 delete left behind (finalizers): say so, with a diagnosis.
        current = self.view.get(record.key) or version
        survivors_record, survivors = await self.verifier.fresh_open(current)
        stuck = await self._diagnose(survivors_record, survivors)
        if stuck:
            message = await self.reporter.stuck(
                survivors_record, stuck, "force_deletion", lead="DeletionStuck after force deletion"
            )
        await self.reporter.warning(
            record, reason="DeletionForced", message=message, step="force_deletion"
        )
        return tuple(forced)

    async def _remove_finalizers(self, version: Versioned, span: Span) -> tuple[ObjectRef, ...]:
        record, alive = await self.verifier.fresh_open(version)
        removed: list[RemovedFinalizers] = []
        for obj in record.open_objects:
            snapshot = alive.get(obj.uid)
            if snapshot is None or not snapshot.metadata.finalizers:
                continue
            resource = await self.reader.resolver.find(obj.api_version, obj.kind)
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
        span.set_attribute(attributes.UNFINALIZED_OBJECT_COUNT, len(removed))
        if not removed:
            return ()
        message = await self.reporter.finalizers_removed(record, removed)
        await self.reporter.warning(
            record, reason="FinalizersRemoved", message=message, step="finalizer_removal"
        )
        return tuple(r.object for r in removed)
