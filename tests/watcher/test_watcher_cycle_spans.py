"""A deletion a requeue cycle waits for is sent on the pipelined path inside the cycle's trace:
its PRODUCER span is a child of the cycle, ended by the PubAck, and its context is in the
stored message's headers (the tracker's CONSUMER span becomes its child)."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext, api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry
from test_watcher_cycles import TRACEPARENT, aw_event, pod_event

from clearance import attributes, bus, subjects
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.publishing import Progress, Publisher

CYCLE_TRACE, CYCLE_SPAN = TRACEPARENT.split("-")[1:3]


async def _stored_headers(js: JetStreamContext, subject: str) -> dict[str, str]:
    sub = await js.subscribe(
        subject, ordered_consumer=True, config=api.ConsumerConfig(deliver_policy="all")
    )
    msg = await sub.next_msg(timeout=5)
    await sub.unsubscribe()
    return dict(msg.headers or {})


async def test_a_cycle_deletion_is_stored_with_its_span_as_the_cycle_s_child(
    js: JetStreamContext,
) -> None:
    kube = [s for s in bus.default_streams() if s.name == subjects.KUBE_STREAM]
    await bus.ensure_topology(js, streams=kube, buckets=())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    publisher = Publisher(
        js,
        max_in_flight=8,
        publish_timeout=5.0,
        metrics=WatcherMetrics(CollectorRegistry()),
        cycle_tracer=provider.get_tracer("test"),
    )
    publisher.cycles.observe(
        aw_event(attempt=1, teardownStartedAt="2026-12-02T12:00:00Z", cycleTraceparent=TRACEPARENT)
    )
    deleted = pod_event("DELETED")
    await publisher.submit(deleted, progress=Progress("core/v1/pods@*"), rv="9")
    await asyncio.sleep(0)  # the sender's turn
    # In flight on the pipelined path: its PubAck is awaited by the shared reply inbox, not
    # by a publish task of its own (a slower path that held the object's next event).
    assert len(publisher._acks) == 1
    assert await publisher.flush(timeout=10)

    (span,) = exporter.get_finished_spans()
    assert span.name == "observe pod deleted" and span.kind == SpanKind.PRODUCER
    assert f"{span.context.trace_id:032x}" == CYCLE_TRACE
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CYCLE_SPAN
    assert span.attributes is not None
    assert span.attributes[attributes.NATS_STREAM] == subjects.KUBE_STREAM
    assert span.attributes["messaging.message.id"] == deleted.msg_id()
    headers = await _stored_headers(js, deleted.subject())
    assert headers["traceparent"].split("-")[1:3] == [
        CYCLE_TRACE,
        f"{span.context.span_id:016x}",
    ]
    assert headers[bus.MSG_ID] == deleted.msg_id()
