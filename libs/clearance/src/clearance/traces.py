"""A tiny OTLP/HTTP trace receiver and a terminal waterfall of one trace.

``clearance demo`` and the end-to-end tests need to see the spans the three service processes
export, exactly as Jaeger would receive them: the services post real OTLP http/protobuf
(``ExportTraceServiceRequest``) to ``OTEL_EXPORTER_OTLP_ENDPOINT``. This receiver decodes those
payloads with opentelemetry-proto and keeps the spans in memory; :func:`waterfall` renders one
trace as indented bars, the way Jaeger's timeline shows it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True, slots=True)
class SpanLink:
    trace_id: str
    span_id: str


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as an OTLP collector received it (ids in lowercase hex)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[SpanLink, ...] = ()

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def decode_export(payload: bytes) -> list[ReceivedSpan]:
    """Spans of one ``ExportTraceServiceRequest`` (protobuf bytes)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(payload)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        service = str(resource.get("service.name", "unknown"))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=service,
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        links=tuple(
                            SpanLink(link.trace_id.hex(), link.span_id.hex()) for link in span.links
                        ),
                    )
                )
    return spans


class TraceReceiver:
    """Serves ``POST /v1/traces`` (OTLP http/protobuf) on loopback and keeps every span."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        """The value for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self, *, port: int = 0) -> TraceReceiver:
        app = web.Application(client_max_size=32 * 1024**2)
        app.router.add_post("/v1/traces", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _receive(self, request: web.Request) -> web.Response:
        spans = decode_export(await request.read())
        async with self._arrived:
            self.spans.extend(spans)
            self._arrived.notify_all()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def wait_for(self, name: str, *, timeout: float, **attributes: Any) -> ReceivedSpan:
        """The first span called ``name`` whose attributes include ``attributes``."""

        def find() -> ReceivedSpan | None:
            for span in self.spans:
                if span.name == name and all(
                    span.attributes.get(k) == v for k, v in attributes.items()
                ):
                    return span
            return None

        async with asyncio.timeout(timeout), self._arrived:
            while (found := find()) is None:
                await self._arrived.wait()
            return found

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]


def waterfall(spans: Iterable[ReceivedSpan], *, width: int = 40) -> str:
    """Render one trace as a tree of timing bars (children under parents, by start time)."""
    ordered = sorted(spans, key=lambda s: s.start_ns)
    if not ordered:
        return "(no spans)"
    start = min(s.start_ns for s in ordered)
    end = max(s.end_ns for s in ordered)
    total = max(end - start, 1)
    ids = {s.span_id for s in ordered}
    children: dict[str | None, list[ReceivedSpan]] = defaultdict(list)
    for span in ordered:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children[parent].append(span)

    lines: list[str] = []
    depth_of: dict[str, int] = {}
    for span in ordered:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        depth_of[span.span_id] = 0 if parent is None else depth_of.get(parent, 0) + 1
    label_width = min(64, max(2 * depth_of[s.span_id] + len(s.name) for s in ordered))
    service_width = max(len(s.service) for s in ordered)

    def render(span: ReceivedSpan, depth: int) -> None:
        left = int((span.start_ns - start) / total * width)
        length = max(1, int((span.end_ns - span.start_ns) / total * width))
        bar = " " * left + "█" * min(length, width - left)
        label = f"{'  ' * depth}{span.name}"
        links = f"  (+{len(span.links)} links)" if span.links else ""
        lines.append(
            f"{label:<{label_width}.{label_width}} {span.service:<{service_width}} "
            f"|{bar:<{width}}| {_seconds(span.end_ns - span.start_ns):>8}{links}"
        )
        for child in children.get(span.span_id, []):
            render(child, depth + 1)

    for root in children[None]:
        render(root, 0)
    return "\n".join(lines)


def _seconds(nanos: int) -> str:
    seconds = nanos / 1e9
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"
