"""Tracing helpers, JSON logs and the health/metrics server."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, Counter

from clearance.telemetry import (
    ContextLogger,
    HealthServer,
    appwrapper_logger,
    context_from_traceparent,
    current_traceparent,
    extract_context,
    inject_headers,
    setup_logging,
    setup_tracing,
    traceparent_of,
)

# -- trace context ---------------------------------------------------------------------


def test_headers_carry_the_current_span_as_traceparent(tracing: Any) -> None:
    tracer = tracing.provider.get_tracer("t")
    with tracer.start_as_current_span("producer") as span:
        headers = inject_headers()
    trace_id = f"{span.get_span_context().trace_id:032x}"
    span_id = f"{span.get_span_context().span_id:016x}"
    assert headers["traceparent"].split("-")[1:3] == [trace_id, span_id]
    parent = trace.get_current_span(extract_context(headers)).get_span_context()
    assert parent.is_remote and parent.span_id == span.get_span_context().span_id


def test_extraction_ignores_header_case(tracing: Any) -> None:
    tracer = tracing.provider.get_tracer("t")
    with tracer.start_as_current_span("producer") as span:
        headers = {"Traceparent": inject_headers()["traceparent"]}
    parent = trace.get_current_span(extract_context(headers)).get_span_context()
    assert parent.trace_id == span.get_span_context().trace_id


def test_missing_headers_give_an_empty_context() -> None:
    assert not trace.get_current_span(extract_context(None)).get_span_context().is_valid
    assert not trace.get_current_span(extract_context({"x": "y"})).get_span_context().is_valid


def test_a_stored_traceparent_reparents_later_spans(tracing: Any) -> None:
    tracer = tracing.provider.get_tracer("t")
    with tracer.start_as_current_span("requeue.cycle") as root:
        stored = current_traceparent()
    assert stored is not None and stored == traceparent_of(root)
    # ... later, maybe in another process, from the KV record:
    with tracer.start_as_current_span("cleared", context=context_from_traceparent(stored)):
        pass
    cleared = next(s for s in tracing.exporter.get_finished_spans() if s.name == "cleared")
    assert cleared.context.trace_id == root.get_span_context().trace_id
    assert cleared.parent is not None and cleared.parent.span_id == root.get_span_context().span_id


def test_traceparent_of_nothing_is_none() -> None:
    assert current_traceparent() is None


@pytest.mark.parametrize("bad", ["", "garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01"])
def test_a_malformed_traceparent_is_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="traceparent"):
        context_from_traceparent(bad)


# -- provider --------------------------------------------------------------------------


def test_otel_service_name_overrides_the_code_default() -> None:
    provider = setup_tracing(
        "clearance-tracker",
        exporter=InMemorySpanExporter(),
        environ={"OTEL_SERVICE_NAME": "tracker-canary", "OTEL_RESOURCE_ATTRIBUTES": "env=ci"},
    )
    attrs = provider.resource.attributes
    assert attrs["service.name"] == "tracker-canary"
    assert attrs["service.namespace"] == "clearance"
    assert attrs["env"] == "ci"
    default = setup_tracing("clearance-tracker", exporter=InMemorySpanExporter(), environ={})
    assert default.resource.attributes["service.name"] == "clearance-tracker"


def test_each_setup_returns_an_independent_provider() -> None:
    a, b = InMemorySpanExporter(), InMemorySpanExporter()
    pa = setup_tracing("a", exporter=a, environ={})
    pb = setup_tracing("b", exporter=b, environ={})
    with pa.get_tracer("t").start_as_current_span("only-a"):
        pass
    with pb.get_tracer("t").start_as_current_span("only-b"):
        pass
    assert [s.name for s in a.get_finished_spans()] == ["only-a"]
    assert [s.name for s in b.get_finished_spans()] == ["only-b"]


async def test_spans_are_exported_over_otlp_http_protobuf_when_the_endpoint_is_set() -> None:
    received: list[tuple[str, str, bytes]] = []

    async def collector(request: web.Request) -> web.Response:
        received.append((request.path, request.content_type, await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collector)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        provider = setup_tracing(
            "clearance-watcher", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        )
        with provider.get_tracer("t").start_as_current_span("exported"):
            pass
        # The exporter is synchronous HTTP: flush from a thread so our collector can answer.
        assert await asyncio.to_thread(provider.force_flush, 5000)
        await asyncio.to_thread(provider.shutdown)
    finally:
        await runner.cleanup()
    path, content_type, body = received[0]
    assert path == "/v1/traces"
    assert content_type == "application/x-protobuf"
    request = ExportTraceServiceRequest.FromString(body)
    resource_spans = request.resource_spans[0]
    names = [s.name for scope in resource_spans.scope_spans for s in scope.spans]
    assert names == ["exported"]
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "clearance-watcher"


# -- logging ---------------------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    handler = setup_logging("DEBUG", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_log_lines_are_json_with_trace_ids_and_bound_context(
    log_stream: io.StringIO, tracing: Any
) -> None:
    log = ContextLogger(
        logging.getLogger("clearance.tracker"), aw="team-a/job1", namespace="team-a"
    )
    with tracing.provider.get_tracer("t").start_as_current_span("work") as span:
        log.bind(attempt=2).info("pod %s confirmed gone", "job1-0", extra={"pod": "job1-0"})
    (line,) = lines(log_stream)
    assert line["msg"] == "pod job1-0 confirmed gone"
    assert line["level"] == "INFO" and line["logger"] == "clearance.tracker"
    assert line["ts"].endswith("+00:00")
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert (line["aw"], line["namespace"], line["attempt"], line["pod"]) == (
        "team-a/job1",
        "team-a",
        2,
        "job1-0",
    )


def test_appwrapper_logger_stamps_the_appwrapper(log_stream: io.StringIO) -> None:
    log = appwrapper_logger(logging.getLogger("w"), namespace="ns", name="job", attempt=3)
    log.warning("stuck")
    (line,) = lines(log_stream)
    assert (line["aw"], line["namespace"], line["attempt"]) == ("ns/job", "ns", 3)


def test_log_lines_outside_a_span_have_no_trace_id_and_keep_exceptions(
    log_stream: io.StringIO,
) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed", extra={"when": object()})
    (line,) = lines(log_stream)
    assert "trace_id" not in line
    assert "RuntimeError: boom" in line["exc"]
    assert isinstance(line["when"], str)  # unserialisable extras are stringified


def test_setup_logging_replaces_its_own_handler(log_stream: io.StringIO) -> None:
    again = io.StringIO()
    handler = setup_logging("INFO", stream=again)
    try:
        logging.getLogger("y").info("once")
        assert log_stream.getvalue() == ""
        assert len(lines(again)) == 1
    finally:
        logging.getLogger().removeHandler(handler)


# -- health server ---------------------------------------------------------------------


async def test_health_server_reports_liveness_readiness_and_metrics() -> None:
    registry = CollectorRegistry()
    Counter("clearance_test_things", "Things.", registry=registry).inc(3)
    health = HealthServer(registry=registry, port=0)
    nats_connected = False

    async def watches_synced() -> bool:
        return True

    health.add_check("nats connected", lambda: nats_connected)
    health.add_check("watches synced", watches_synced)
    port = await health.start()
    assert port > 0 and health.port == port
    try:
        async with aiohttp.ClientSession(base_url=health.url) as http:
            async with http.get("/healthz") as resp:
                assert resp.status == 200
            async with http.get("/readyz") as resp:
                assert resp.status == 503
                body = await resp.json()
                assert body["status"] == "not ready"
                assert body["checks"]["nats connected"].startswith("failing")
                assert body["checks"]["watches synced"] == "ok"
            nats_connected = True
            async with http.get("/readyz") as resp:
                assert resp.status == 200
                assert (await resp.json())["status"] == "ready"
            async with http.get("/metrics") as resp:
                assert resp.status == 200
                assert "clearance_test_things_total 3.0" in await resp.text()
    finally:
        await health.stop()


async def test_a_raising_or_hanging_check_counts_as_failing() -> None:
    health = HealthServer(registry=CollectorRegistry(), check_timeout=0.1)

    def broken() -> bool:
        raise ConnectionError("no route")

    async def hangs() -> bool:
        await asyncio.sleep(10)
        return True

    health.add_check("broken", broken)
    health.add_check("hangs", hangs)
    results = await health.check_readiness()
    assert results["broken"] == "ConnectionError: no route"
    assert results["hangs"] is not None and "timed out" in results["hangs"]
