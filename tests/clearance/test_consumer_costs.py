"""What a busy consumer saves: CONSUMER spans kept for some messages only (bus.spanscope),
fetches in batches (``refill``)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from tests.support.polling import eventually

from clearance.bus import ConsumerSpec, Delivery, consume, ensure_stream, publish
from clearance.bus.spanscope import keeps


class Ping(msgspec.Struct, tag="test.ping"):
    n: int


decode_ping = msgspec.json.Decoder(Ping).decode


def _parent(trace_id: int) -> Context:
    span = NonRecordingSpan(
        SpanContext(trace_id, 0x1234, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    )
    return trace.set_span_in_context(span, Context())


def test_the_choice_follows_the_producers_trace_id() -> None:
    rng = random.Random(7)
    ids = [rng.getrandbits(128) or 1 for _ in range(4000)]
    kept = [keeps(_parent(i), 0.1) for i in ids]
    assert kept == [keeps(_parent(i), 0.1) for i in ids]  # the same trace, the same answer
    assert 0.07 < sum(kept) / len(kept) < 0.13
    assert all(keeps(_parent(i), 1.0) for i in ids[:50])
    assert not any(keeps(_parent(i), 0.0) for i in ids[:50])
    assert keeps(Context(), 1.0) and not keeps(Context(), 0.0)


async def test_an_unsampled_message_has_no_consumer_span_and_its_handler_joins_the_producer(
    js: JetStreamContext, unique_names: Any, tracing: Any
) -> None:
    tracer = tracing.provider.get_tracer("test")
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    handled: list[int] = []

    async def handler(event: Ping, delivery: Delivery) -> None:
        with tracer.start_as_current_span("inside"):
            handled.append(event.n)

    consumer = await consume(
        js, spec, decode=decode_ping, handler=handler, tracer=tracer, span_ratio=0.0
    )
    try:
        with tracer.start_as_current_span("origin"):
            await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a", tracer=tracer)
        await eventually(lambda: handled == [1], what="delivery")
        await eventually(
            lambda: any(s.name == "inside" for s in tracing.exporter.get_finished_spans()),
            what="the handler's span",
        )
    finally:
        await consumer.stop()
    spans = tracing.exporter.get_finished_spans()
    assert not [s for s in spans if s.kind == SpanKind.CONSUMER]
    producer = next(s for s in spans if s.kind == SpanKind.PRODUCER)
    inside = next(s for s in spans if s.name == "inside")
    assert inside.parent is not None and inside.parent.span_id == producer.context.span_id
    assert inside.context.trace_id == producer.context.trace_id


async def test_a_busy_consumer_fetches_again_only_when_refill_slots_are_free(
    js: JetStreamContext, unique_names: Any
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=30)
    release: dict[int, asyncio.Event] = {n: asyncio.Event() for n in range(8)}
    started: list[int] = []

    async def handler(event: Ping, delivery: Delivery) -> None:
        started.append(event.n)
        await release[event.n].wait()

    await ensure_stream(js, spec.stream)
    for n in range(8):
        await publish(js, unique_names.subject("ping"), Ping(n=n), msg_id=f"m{n}")
    consumer = await consume(
        js, spec, decode=decode_ping, handler=handler, concurrency=4, refill=2, fetch_timeout=0.2
    )
    try:
        await eventually(lambda: len(started) == 4, what="the first batch")
        release[started[0]].set()
        await asyncio.sleep(0.5)  # one slot free: below refill, no fetch
        assert len(started) == 4
        release[started[1]].set()
        await eventually(lambda: len(started) == 6, what="a batch of two")
    finally:
        for event in release.values():
            event.set()
        await consumer.stop()


def test_a_caught_up_consumer_asks_for_one_message_and_a_backlog_for_what_it_holds() -> None:
    """nats-py's fetch waits for a full batch (or its timeout) after the first message, so a
    batch larger than the backlog held a lone message up to ``fetch_timeout``: the tracker's
    ``teardown.started`` was handled 0.3-0.65 s after it was stored in ~1 % of cycles."""
    from clearance.bus import Consumer, StreamSpec

    spec = ConsumerSpec(stream=StreamSpec(name="T", subjects=("t.>",), max_age=60.0), durable="d")
    consumer = Consumer(None, spec, decode=decode_ping, handler=_ignore, concurrency=64)  # type: ignore[arg-type]
    assert consumer._batch(64) == 1  # nothing seen yet: caught up
    consumer._observe_pending(10)
    assert consumer._batch(64) == 10
    consumer._observe_pending(500)
    assert consumer._batch(64) == 64
    assert consumer._batch(3) == 3
    consumer._observe_pending(0)
    assert consumer._batch(64) == 1


async def _ignore(_: Ping, __: Delivery) -> None:
    return None
