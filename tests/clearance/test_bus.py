"""The JetStream runtime against a real nats-server: dedup, redelivery, DLQ, tracing,
restarts (with and without the store) and a shutdown that does not hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.js.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry
from tests.support.polling import eventually

from clearance import bus, subjects
from clearance.bus import (
    DLQ_ERROR_HEADER,
    MSG_ID,
    BusMetrics,
    Consumer,
    ConsumerSpec,
    Delivery,
    KvSpec,
    PublishError,
    Retry,
    RetryPolicy,
    StreamSpec,
    connect,
    consume,
    default_streams,
    dlq_subject,
    ensure_consumer,
    ensure_kv,
    ensure_stream,
    ensure_topology,
    publish,
    shutdown,
)


class Ping(msgspec.Struct, tag="test.ping"):
    n: int


decode_ping = msgspec.json.Decoder(Ping).decode
FAST_RETRY = RetryPolicy(attempts=40, initial=0.05, maximum=0.25)


class Recorder:
    """A handler that records deliveries; per-call behaviour is pluggable."""

    def __init__(self, behaviour: Callable[[Ping, Delivery], Awaitable[None]] | None = None):
        self.calls: list[tuple[float, Ping, Delivery]] = []
        self.behaviour = behaviour

    async def __call__(self, event: Ping, delivery: Delivery) -> None:
        self.calls.append((time.monotonic(), event, delivery))
        if self.behaviour is not None:
            await self.behaviour(event, delivery)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def make_consumer(
    js: JetStreamContext,
    spec: ConsumerSpec,
    handler: Recorder,
    **kw: Any,
) -> Consumer[Ping]:
    kw.setdefault("fetch_timeout", 0.5)
    return Consumer(js, spec, decode=decode_ping, handler=handler, **kw)


# -- connection ----------------------------------------------------------------------


async def test_first_connection_to_a_dead_server_fails_with_a_clear_error() -> None:
    from clearance.natsserver import free_port
    from clearance.settings import CommonSettings

    url = f"nats://127.0.0.1:{free_port()}"
    settings = CommonSettings(nats_url=url, nats_reconnect_wait=0.05)
    start = time.monotonic()
    with pytest.raises(bus.BusError, match=url):
        await connect(settings, name="dead", first_connect_timeout=0.5)
    assert time.monotonic() - start < 2


async def test_user_and_password_come_from_the_settings(tmp_path: Any) -> None:
    from clearance.natsserver import NatsServer
    from clearance.settings import CommonSettings

    server = NatsServer(tmp_path / "auth", extra_args=("--user", "svc", "--pass", "s3cret"))
    await server.astart()
    try:
        ok = CommonSettings(nats_url=server.url, nats_user="svc", nats_password="s3cret")
        nc = await connect(ok, name="auth", first_connect_timeout=5)
        assert nc.is_connected
        await nc.close()
        wrong = CommonSettings(nats_url=server.url, nats_user="svc", nats_password="nope")
        with pytest.raises(bus.BusError, match="Authorization"):
            await connect(wrong, name="auth", first_connect_timeout=0.5)
    finally:
        await server.astop()


async def test_nkey_seed_file_authenticates_against_an_nkey_user(tmp_path: Any) -> None:
    import os

    import nkeys

    from clearance.natsserver import NatsServer
    from clearance.settings import CommonSettings

    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    config = tmp_path / "nkey.conf"
    config.write_text(f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    seed_file = tmp_path / "svc.nk"
    seed_file.write_bytes(seed)
    server = NatsServer(tmp_path / "store", extra_args=("-c", str(config)))
    await server.astart()
    try:
        settings = CommonSettings(nats_url=server.url, nats_nkey_seed=seed_file)
        nc = await connect(settings, name="nkey", first_connect_timeout=5)
        assert nc.is_connected
        await nc.close()
    finally:
        await server.astop()


# -- provisioning ----------------------------------------------------------------------


async def test_ensure_stream_is_idempotent_and_corrects_drift(
    js: JetStreamContext, unique_names: Any
) -> None:
    spec = unique_names.stream_spec(max_age=60)
    await ensure_stream(js, spec)
    await ensure_stream(js, spec)
    drifted = StreamSpec(spec.name, spec.subjects, max_age=120)
    info = await ensure_stream(js, drifted)
    assert info.config.max_age == 120
    assert (await js.stream_info(spec.name)).config.max_age == 120


async def test_ensure_consumer_updates_a_drifted_ack_wait(
    js: JetStreamContext, unique_names: Any
) -> None:
    stream = unique_names.stream_spec()
    await ensure_stream(js, stream)
    await ensure_consumer(js, ConsumerSpec(stream, unique_names.durable, ack_wait=5))
    again = await ensure_consumer(js, ConsumerSpec(stream, unique_names.durable, ack_wait=5))
    assert again.config.ack_wait == 5
    updated = await ensure_consumer(js, ConsumerSpec(stream, unique_names.durable, ack_wait=7))
    assert updated.config.ack_wait == 7


async def test_ensure_consumer_refuses_a_change_the_server_cannot_apply(
    js: JetStreamContext, unique_names: Any
) -> None:
    stream = unique_names.stream_spec()
    await ensure_stream(js, stream)
    await ensure_consumer(js, ConsumerSpec(stream, unique_names.durable))
    with pytest.raises(bus.ConsumerDriftError, match=unique_names.durable):
        await ensure_consumer(
            js, ConsumerSpec(stream, unique_names.durable, deliver_policy=api.DeliverPolicy.NEW)
        )


async def test_ensure_kv_creates_then_corrects_history(
    js: JetStreamContext, unique_names: Any
) -> None:
    kv = await ensure_kv(js, KvSpec(unique_names.bucket, history=2))
    await kv.put("aw.default.job1", b"v1")
    await ensure_kv(js, KvSpec(unique_names.bucket, history=2))
    await ensure_kv(js, KvSpec(unique_names.bucket, history=4))
    status = await (await js.key_value(unique_names.bucket)).status()
    assert status.history == 4
    assert (await kv.get("aw.default.job1")).value == b"v1"


async def test_default_topology_matches_the_design(
    nats_server_factory: Any, connect_nats: Any
) -> None:
    server = nats_server_factory()
    nc = await connect_nats(server.url, name="topology")
    try:
        js = nc.jetstream()
        await ensure_topology(js)
        await ensure_topology(js)  # idempotent
        expected = {
            "CLEARANCE_KUBE": ("clearance.kube.v1.>", 24 * 3600),
            "CLEARANCE_CYCLE": ("clearance.cycle.v1.>", 7 * 86400),
            "CLEARANCE_ALERTS": ("clearance.alert.v1.>", 30 * 86400),
            "CLEARANCE_DLQ": ("clearance.dlq.v1.>", 30 * 86400),
        }
        assert {s.name for s in default_streams()} == set(expected)
        for name, (subject, max_age) in expected.items():
            config = (await js.stream_info(name)).config
            assert config.subjects == [subject]
            assert config.max_age == max_age
            assert config.duplicate_window == 120
            assert config.retention == api.RetentionPolicy.LIMITS
            assert config.storage == api.StorageType.FILE
        # KV buckets belong to the services that use them (the tracker's: clearance_tracker.store)
        assert [
            i.config.name for i in await js.streams_info() if i.config.name.startswith("KV_")
        ] == []
    finally:
        await nc.close()


# -- publish ---------------------------------------------------------------------------


async def test_publish_dedups_by_msg_id(js: JetStreamContext, unique_names: Any) -> None:
    await ensure_stream(js, unique_names.stream_spec())
    registry = CollectorRegistry()
    metrics = BusMetrics(registry)
    subject = unique_names.subject("ping")
    first = await publish(js, subject, Ping(n=1), msg_id="aw-uid:1:ping", metrics=metrics)
    second = await publish(js, subject, Ping(n=1), msg_id="aw-uid:1:ping", metrics=metrics)
    other = await publish(js, subject, Ping(n=2), msg_id="aw-uid:2:ping", metrics=metrics)
    assert not first.duplicate
    assert second.duplicate is True and second.seq == first.seq
    assert other.seq == first.seq + 1
    assert (await js.stream_info(unique_names.stream)).state.messages == 2
    published = sample(
        registry, "clearance_events_published_total", stream=unique_names.stream, type="test.ping"
    )
    assert published == 3
    assert sample(registry, "clearance_events_duplicate_total", stream=unique_names.stream) == 1
    assert (
        sample(registry, "clearance_publish_latency_seconds_count", stream=unique_names.stream) == 3
    )


async def test_publish_writes_the_exact_msg_id_header_and_trace_context(
    js: JetStreamContext, unique_names: Any, tracing: Any
) -> None:
    await ensure_stream(js, unique_names.stream_spec())
    tracer = tracing.provider.get_tracer("test")
    ack = await publish(js, unique_names.subject("ping"), b"raw", msg_id="m-1", tracer=tracer)
    stored = await js.get_msg(unique_names.stream, ack.seq)
    assert stored.headers is not None
    assert stored.headers[MSG_ID] == "m-1"
    assert "Nats-Msg-Id" in stored.headers  # exact case: the server dedups on it
    assert stored.headers["traceparent"].startswith("00-")
    (span,) = tracing.exporter.get_finished_spans()
    assert span.kind == SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["messaging.system"] == "nats"
    assert span.attributes["messaging.destination.name"] == unique_names.subject("ping")
    assert span.attributes["messaging.message.id"] == "m-1"
    assert stored.headers["traceparent"].split("-")[1] == f"{span.context.trace_id:032x}"


async def test_publish_gives_up_with_a_typed_error_when_no_stream_takes_the_subject(
    js: JetStreamContext, unique_names: Any
) -> None:
    retry = RetryPolicy(attempts=3, initial=0.01, maximum=0.02)
    with pytest.raises(PublishError) as err:
        await publish(js, unique_names.subject("x"), b"x", msg_id="m", streams=(), retry=retry)
    assert err.value.attempts == 3
    assert isinstance(err.value.__cause__, nats.js.errors.NoStreamResponseError)


# -- consume ---------------------------------------------------------------------------


async def test_consumer_acks_only_after_the_handler_returned(
    js: JetStreamContext, unique_names: Any
) -> None:
    stream = unique_names.stream_spec()
    spec = ConsumerSpec(stream, unique_names.durable, ack_wait=5)
    gate = asyncio.Event()

    async def slow(event: Ping, delivery: Delivery) -> None:
        await gate.wait()

    handler = Recorder(slow)
    async with make_consumer(js, spec, handler):
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: len(handler.calls) == 1, what="delivery")
        info = await js.consumer_info(stream.name, spec.durable)
        assert info.num_ack_pending == 1  # handler still running: not acked
        gate.set()

        async def acked() -> bool:
            return (await js.consumer_info(stream.name, spec.durable)).num_ack_pending == 0

        for _ in range(200):
            if await acked():
                break
            await asyncio.sleep(0.01)
        assert await acked()


async def test_retry_naks_with_the_requested_delay(
    js: JetStreamContext, unique_names: Any, metrics_registry: CollectorRegistry
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    requested = 0.5

    async def retry_first(event: Ping, delivery: Delivery) -> None:
        if delivery.num_delivered == 1:
            raise Retry(requested, "not yet")

    handler = Recorder(retry_first)
    metrics = BusMetrics(metrics_registry)
    async with make_consumer(js, spec, handler, metrics=metrics):
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: len(handler.calls) == 2, what="redelivery")
    (t1, _, d1), (t2, _, d2) = handler.calls
    measured = t2 - t1
    print(f"nak(delay={requested}) redelivered after {measured:.3f}s")
    assert requested - 0.05 <= measured < requested + 0.5
    assert (d1.num_delivered, d2.num_delivered) == (1, 2)
    assert d2.redelivered and d2.msg_id == "a"
    labels = {"stream": unique_names.stream, "consumer": unique_names.durable}
    assert sample(metrics_registry, "clearance_events_redelivered_total", **labels) == 1
    assert (
        sample(metrics_registry, "clearance_events_consumed_total", outcome="retry", **labels) == 1
    )
    assert sample(metrics_registry, "clearance_events_consumed_total", outcome="ack", **labels) == 1


async def test_unacked_message_is_redelivered_after_ack_wait(
    js: JetStreamContext, unique_names: Any
) -> None:
    ack_wait = 1.0
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=ack_wait)

    async def hang_first(event: Ping, delivery: Delivery) -> None:
        if delivery.num_delivered == 1:
            await asyncio.sleep(ack_wait * 1.6)

    handler = Recorder(hang_first)
    # Heartbeats effectively off: nothing tells the server the first delivery is alive.
    async with make_consumer(js, spec, handler, heartbeat_interval=60):
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: len(handler.calls) == 2, timeout=4, what="redelivery")
    (t1, _, _), (t2, _, d2) = handler.calls
    print(f"ack_wait={ack_wait} redelivered after {t2 - t1:.3f}s")
    assert d2.num_delivered == 2
    assert ack_wait - 0.05 <= t2 - t1 < ack_wait + 0.5


async def test_in_progress_heartbeats_keep_a_long_handler_from_redelivery(
    js: JetStreamContext, unique_names: Any
) -> None:
    ack_wait = 1.0
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=ack_wait)

    async def long_work(event: Ping, delivery: Delivery) -> None:
        await asyncio.sleep(ack_wait * 2.5)

    handler = Recorder(long_work)
    async with make_consumer(js, spec, handler) as consumer:
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: consumer.in_flight == 1, what="start")
        await eventually(lambda: consumer.in_flight == 0, timeout=5, what="finish")
        await asyncio.sleep(ack_wait * 1.2)  # a redelivery would have shown up by now
    assert len(handler.calls) == 1
    info = await js.consumer_info(unique_names.stream, unique_names.durable)
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


async def test_handler_exception_is_retried_with_backoff(
    js: JetStreamContext, unique_names: Any, metrics_registry: CollectorRegistry
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)

    async def fail_first(event: Ping, delivery: Delivery) -> None:
        if delivery.num_delivered == 1:
            raise RuntimeError("transient")

    handler = Recorder(fail_first)
    metrics = BusMetrics(metrics_registry)
    backoff = RetryPolicy(initial=0.2, maximum=1.0, jitter=0)
    async with make_consumer(js, spec, handler, metrics=metrics, error_backoff=backoff):
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: len(handler.calls) == 2, what="redelivery")
    (t1, _, _), (t2, _, _) = handler.calls
    assert t2 - t1 >= 0.15
    labels = {"stream": unique_names.stream, "consumer": unique_names.durable}
    assert (
        sample(metrics_registry, "clearance_events_consumed_total", outcome="error", **labels) == 1
    )


async def test_concurrency_is_bounded(js: JetStreamContext, unique_names: Any) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    running = 0
    peak = 0

    async def work(event: Ping, delivery: Delivery) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.1)
        running -= 1

    handler = Recorder(work)
    await ensure_stream(js, spec.stream)
    for i in range(8):
        await publish(js, unique_names.subject("ping"), Ping(n=i), msg_id=f"m{i}", streams=())
    async with make_consumer(js, spec, handler, concurrency=3):
        await eventually(lambda: len(handler.calls) == 8, what="all handled")
    assert peak == 3
    assert sorted(event.n for _, event, _ in handler.calls) == list(range(8))


async def test_undecodable_message_is_terminated_and_copied_to_the_dlq(
    js: JetStreamContext, unique_names: Any, metrics_registry: CollectorRegistry
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=1)
    handler = Recorder()
    metrics = BusMetrics(metrics_registry)
    await ensure_stream(js, spec.stream)
    await publish(
        js, unique_names.subject("ping"), b"{not json", msg_id="bad-1", headers={"X-Origin": "t"}
    )
    await publish(js, unique_names.subject("ping"), Ping(n=7), msg_id="good-1")
    async with make_consumer(js, spec, handler, metrics=metrics):
        await eventually(lambda: len(handler.calls) == 1, what="the good message")
        labels = {"stream": unique_names.stream, "consumer": unique_names.durable}
        await eventually(
            lambda: sample(metrics_registry, "clearance_events_dead_lettered_total", **labels) == 1,
            what="dlq metric",
        )
        await asyncio.sleep(1.3)  # past ack_wait: a terminated message is never redelivered
    assert [event.n for _, event, _ in handler.calls] == [7]
    dead = await js.get_last_msg("CLEARANCE_DLQ", dlq_subject(unique_names.stream))
    assert dead.data == b"{not json"
    assert dead.headers is not None
    assert "DecodeError" in dead.headers[DLQ_ERROR_HEADER]
    assert dead.headers["Clearance-Dlq-Subject"] == unique_names.subject("ping")
    assert dead.headers["Clearance-Dlq-Msg-Id"] == "bad-1"
    assert dead.headers["X-Origin"] == "t"
    info = await js.consumer_info(unique_names.stream, unique_names.durable)
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


async def test_trace_context_crosses_publish_to_consume(
    js: JetStreamContext, unique_names: Any, tracing: Any
) -> None:
    tracer = tracing.provider.get_tracer("test")
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    handler = Recorder()
    consumer = await consume(
        js, spec, decode=decode_ping, handler=handler, tracer=tracer, fetch_timeout=0.5
    )
    try:
        with tracer.start_as_current_span("requeue.cycle"):
            await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a", tracer=tracer)
        await eventually(lambda: len(handler.calls) == 1, what="delivery")
        await eventually(
            lambda: any(s.kind == SpanKind.CONSUMER for s in tracing.exporter.get_finished_spans()),
            what="consumer span",
        )
    finally:
        await consumer.stop()
    spans = tracing.exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "requeue.cycle")
    producer = next(s for s in spans if s.kind == SpanKind.PRODUCER)
    consumer = next(s for s in spans if s.kind == SpanKind.CONSUMER)
    assert producer.parent is not None and producer.parent.span_id == root.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id == root.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert consumer.parent.is_remote
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.consumer.group.name"] == unique_names.durable
    assert consumer.attributes["clearance.nats.delivery_count"] == 1


async def test_a_consumer_deleted_on_the_server_is_recreated(
    js: JetStreamContext, unique_names: Any
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    handler = Recorder()
    async with make_consumer(js, spec, handler) as consumer:
        await js.delete_consumer(
            unique_names.stream, unique_names.durable
        )  # e.g. an operator's mistake
        await publish(js, unique_names.subject("ping"), Ping(n=1), msg_id="a")
        await eventually(lambda: len(handler.calls) == 1, what="delivery after recreation")
        assert consumer.ready


async def test_shutdown_after_an_empty_fetch_is_fast(connect_nats: Any, unique_names: Any) -> None:
    # drain_timeout=30 is the nats-py default that an empty fetch would make drain() wait.
    nc = await connect_nats(name="shutdown", drain_timeout=30)
    js = nc.jetstream()
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    consumer = make_consumer(js, spec, Recorder(), fetch_timeout=1.0)
    await consumer.start()
    await asyncio.sleep(1.3)  # at least one fetch came back empty
    start = time.monotonic()
    await shutdown(nc, [consumer])
    elapsed = time.monotonic() - start
    print(f"shutdown after empty fetch took {elapsed:.3f}s")
    assert nc.is_closed
    assert elapsed < 2.0


# -- server restarts -------------------------------------------------------------------


async def _consuming_pair(
    connect_nats: Any, url: str, unique_names: Any
) -> tuple[NatsClient, JetStreamContext, Consumer[Ping], Recorder, StreamSpec]:
    nc = await connect_nats(url, name="restart")
    js = nc.jetstream(timeout=2)
    stream = unique_names.stream_spec()
    spec = ConsumerSpec(stream, unique_names.durable, ack_wait=5)
    handler = Recorder()
    consumer = make_consumer(js, spec, handler)
    await consumer.start()
    return nc, js, consumer, handler, stream


async def test_consumer_resumes_after_a_restart_that_kept_the_store(
    nats_server_factory: Any, connect_nats: Any, unique_names: Any
) -> None:
    server = nats_server_factory()
    nc, js, consumer, handler, stream = await _consuming_pair(
        connect_nats, server.url, unique_names
    )
    try:
        await publish(
            js, unique_names.subject("ping"), Ping(n=1), msg_id="before", streams=(stream,)
        )
        await eventually(lambda: len(handler.calls) == 1, what="first message")
        await server.arestart()
        restarted = time.monotonic()
        await publish(
            js,
            unique_names.subject("ping"),
            Ping(n=2),
            msg_id="after",
            streams=(stream,),
            retry=FAST_RETRY,
        )
        await eventually(lambda: len(handler.calls) == 2, timeout=10, what="message after restart")
        print(
            f"restart with store: consumed again {time.monotonic() - restarted:.3f}s after restart"
        )
        assert [e.n for _, e, _ in handler.calls] == [1, 2]
        assert handler.calls[1][2].consumer == unique_names.durable
        info = await js.stream_info(stream.name)
        assert info.state.messages == 2  # the store survived: message 1 is still there
    finally:
        await shutdown(nc, [consumer])


async def test_streams_and_consumers_are_reprovisioned_after_a_wiped_store(
    nats_server_factory: Any,
    connect_nats: Any,
    unique_names: Any,
    metrics_registry: CollectorRegistry,
) -> None:
    server = nats_server_factory()
    nc, js, consumer, handler, stream = await _consuming_pair(
        connect_nats, server.url, unique_names
    )
    consumer.metrics = BusMetrics(metrics_registry)
    try:
        await publish(
            js, unique_names.subject("ping"), Ping(n=1), msg_id="before", streams=(stream,)
        )
        await eventually(lambda: len(handler.calls) == 1, what="first message")
        await server.arestart(wipe_store=True)
        restarted = time.monotonic()
        ack = await publish(
            js,
            unique_names.subject("ping"),
            Ping(n=2),
            msg_id="after",
            streams=(stream,),
            retry=FAST_RETRY,
        )
        assert ack.seq == 1  # a brand-new stream
        await eventually(lambda: len(handler.calls) == 2, timeout=10, what="message after wipe")
        print(f"wiped store: consumed again {time.monotonic() - restarted:.3f}s after restart")
        await eventually(lambda: consumer.ready, what="consumer ready again")
        assert (
            await js.consumer_info(stream.name, unique_names.durable)
        ).name == unique_names.durable
        reprovisions = sample(
            metrics_registry, "clearance_bus_reprovisions_total", stream=stream.name
        )
        assert reprovisions >= 1
    finally:
        await shutdown(nc, [consumer])


async def test_publish_during_an_outage_is_retried_and_stored_once(
    nats_server_factory: Any,
    connect_nats: Any,
    unique_names: Any,
    metrics_registry: CollectorRegistry,
) -> None:
    server = nats_server_factory()
    nc = await connect_nats(server.url, name="outage")
    js = nc.jetstream(timeout=2)
    stream = unique_names.stream_spec()
    await ensure_stream(js, stream)
    metrics = BusMetrics(metrics_registry)
    await server.astop()
    pending = asyncio.create_task(
        publish(
            js,
            unique_names.subject("ping"),
            Ping(n=1),
            msg_id="during-outage",
            streams=(stream,),
            retry=FAST_RETRY,
            timeout=0.3,
            metrics=metrics,
        )
    )
    await asyncio.sleep(1.0)  # several attempts time out while the server is down
    assert not pending.done()
    await server.astart()
    ack = await asyncio.wait_for(pending, 10)
    assert ack.stream == stream.name
    assert (await js.stream_info(stream.name)).state.messages == 1
    retries = sum(
        s.value
        for m in metrics_registry.collect()
        if m.name == "clearance_publish_retries"
        for s in m.samples
        if s.name.endswith("_total")
    )
    assert retries >= 1


async def test_consumer_exports_its_backlog_and_how_long_messages_waited(
    js: JetStreamContext, unique_names: Any, metrics_registry: CollectorRegistry
) -> None:
    spec = ConsumerSpec(unique_names.stream_spec(), unique_names.durable, ack_wait=5)
    gate = asyncio.Event()

    async def held(event: Ping, delivery: Delivery) -> None:
        await gate.wait()

    handler = Recorder(held)
    metrics = BusMetrics(metrics_registry)
    labels = {"stream": unique_names.stream, "consumer": unique_names.durable}
    await ensure_stream(js, spec.stream)
    for i in range(8):
        await publish(js, unique_names.subject("ping"), Ping(n=i), msg_id=f"m{i}", streams=())
    waited = 0.3
    await asyncio.sleep(waited)
    async with make_consumer(js, spec, handler, metrics=metrics, concurrency=1):
        # Exported at 0 from the start, so that the first dead letter is an increase.
        assert (
            metrics_registry.get_sample_value("clearance_events_dead_lettered_total", labels) == 0
        )
        await eventually(lambda: len(handler.calls) == 1, what="the first delivery")
        assert sample(metrics_registry, "clearance_consumer_pending_messages", **labels) == 7
        gate.set()
        await eventually(lambda: len(handler.calls) == 8, what="all handled")
        await eventually(
            lambda: (
                metrics_registry.get_sample_value("clearance_consumer_pending_messages", labels)
                == 0
            ),
            timeout=5,
            what="the backlog gauge back at 0",
        )
    count = sample(metrics_registry, "clearance_consumer_lag_seconds_count", **labels)
    total = sample(metrics_registry, "clearance_consumer_lag_seconds_sum", **labels)
    assert count == 8
    assert total >= 8 * waited * 0.9


def test_a_consumers_stream_spec_has_the_declared_replicas() -> None:
    spec = bus.stream_spec(subjects.CYCLE_STREAM, replicas=3)
    assert spec.name == subjects.CYCLE_STREAM and spec.replicas == 3
    with pytest.raises(LookupError, match="NOPE"):
        bus.stream_spec("NOPE", replicas=1)
