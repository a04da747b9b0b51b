"""Cycle roots: the ``requeue.cycle`` span of each requeue cycle, keyed by its traceparent.

A root starts at the teardown decision (:meth:`CycleRoots.start`) and ends at the redispatch
that follows, or at the ``cleared`` of a Failed attempt (:meth:`CycleRoots.finish`). Its
identity is ``status.clearance.cycleTraceparent``: the live span is found under that key in the
AppWrapper's :class:`~clearance_dispatcher.state.Local` — no search by attempt. When this process
does not hold it (it was started by a replica that died), the same span is re-created from the
status — its ids from ``cycleTraceparent``, its start from ``cycleStartedAt``, its attempt from
``cycleAttempt`` — so every span of the cycle, from any process, keeps its parent. The span
attributes of every dispatcher span are built here (:func:`attributes`).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer

from clearance import attributes as attr
from clearance.bookkeeping import ClearanceStatus
from clearance.events import AppWrapperRef
from clearance.telemetry import context_from_traceparent, traceparent_of
from clearance_dispatcher import spans
from clearance_dispatcher.state import Local

log = logging.getLogger(__name__)

ROOT_NAME = "requeue.cycle"


def attributes(ref: AppWrapperRef, attempt: int | None, reason: str) -> dict[str, Any]:
    """The attributes every dispatcher span about one AppWrapper carries."""
    out: dict[str, Any] = {
        attr.K8S_NAMESPACE_NAME: ref.namespace,
        attr.APPWRAPPER_NAME: ref.name,
        attr.APPWRAPPER_UID: ref.uid,
        attr.REASON: reason,
    }
    if attempt is not None:
        out[attr.ATTEMPT] = attempt
    return out


class CycleRoots:
    """Starts, finds and ends cycle roots."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def start(self, ref: AppWrapperRef, *, attempt: int, reason: str, at: datetime) -> Span:
        """A new root for the teardown of ``attempt`` (kept only once its status is written:
        :meth:`keep`)."""
        return self.tracer.start_span(
            ROOT_NAME,
            context=Context(),
            start_time=spans.nanos(at),
            attributes=attributes(ref, attempt, reason),
        )

    @staticmethod
    def keep(local: Local, root: Span) -> None:
        traceparent = traceparent_of(root)
        if traceparent is None:  # a non-recording span: nothing to end later
            root.end()
            return
        local.roots[traceparent] = root

    @staticmethod
    def context(local: Local, traceparent: str | None) -> Context | None:
        """The parent context for a span of the cycle named by ``traceparent``."""
        if traceparent is None:
            return None
        root = local.roots.get(traceparent)
        if root is not None:
            return trace.set_span_in_context(root)
        with contextlib.suppress(ValueError):
            return context_from_traceparent(traceparent)
        return None

    @staticmethod
    def end_all(local: Local, *, outcome: str) -> None:
        for root in local.roots.values():
            root.set_attribute(attr.OUTCOME, outcome)
            root.end()
        local.roots.clear()

    def finish(
        self, local: Local, ref: AppWrapperRef, before: ClearanceStatus, *, outcome: str
    ) -> None:
        """End the root of the cycle ``before`` names (``before``: the bookkeeping read
        *before* the write that closed the cycle)."""
        traceparent = before.cycle_traceparent
        if traceparent is None:
            return
        live = local.roots.pop(traceparent, None)
        if live is not None:
            live.set_attribute(attr.OUTCOME, outcome)
            live.end()
            return
        ids = spans.ids_of(traceparent)
        if ids is None or before.cycle_started_at is None:
            return
        where = {"aw": f"{ref.namespace}/{ref.name}", "attempt": before.cycle_attempt}
        with spans.preset_ids(*ids):
            root = self.tracer.start_span(
                ROOT_NAME,
                context=Context(),
                start_time=spans.nanos(before.cycle_started_at),
                attributes=attributes(ref, before.cycle_attempt, before.reason or "")
                | {attr.OUTCOME: outcome, attr.RECOVERED: True},
            )
        context = root.get_span_context()
        if (context.trace_id, context.span_id) != ids:
            # A provider without spans.PresetIds: do not export a root with the wrong ids.
            log.warning("cycle root could not be re-created with its ids", extra=where)
            return
        root.end()
        log.info("cycle root re-created from status", extra=where | {"outcome": outcome})
