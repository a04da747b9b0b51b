"""Traces, logs, health and metrics plumbing shared by every Clearance service.

One requeue cycle is one trace across three services, so trace context has to ride
in NATS headers (``inject_headers``/``extract_context``) and, for cycles that outlive
a process, in a KV record as a plain ``traceparent`` string
(``traceparent_of``/``context_from_traceparent``).

``setup_tracing`` *returns* a provider instead of relying on the global one: the
OpenTelemetry API lets the global provider be set once per process, which is fine
for a service but wrong for tests, which inject their own provider and exporter.

Logs are one JSON object per line and carry the current ``trace_id``/``span_id`` plus
whatever context the caller bound (``aw``, ``namespace``, ``attempt``), so a log line
can be joined with its trace in Jaeger.

``HealthServer`` is the single HTTP port of a service: ``/healthz`` (the process is
alive), ``/readyz`` (every registered readiness check passes) and ``/metrics`` (the
service's own prometheus ``CollectorRegistry``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import IO, Any, Final

from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

__all__ = [
    "ContextLogger",
    "HealthServer",
    "JsonFormatter",
    "ReadinessCheck",
    "appwrapper_logger",
    "context_from_traceparent",
    "current_traceparent",
    "extract_context",
    "inject_headers",
    "setup_logging",
    "setup_tracing",
    "traceparent_of",
]

SERVICE_NAMESPACE: Final = "clearance"

# -- tracing ---------------------------------------------------------------------------


def setup_tracing(
    service_name: str,
    *,
    exporter: SpanExporter | None = None,
    batch: bool | None = None,
    environ: Mapping[str, str] | None = None,
    service_version: str | None = None,
) -> TracerProvider:
    """Build a TracerProvider for one service; callers pass it (or its tracers) down.

    * Resource: ``service.name`` (``OTEL_SERVICE_NAME`` wins when set),
      ``service.namespace=clearance``, ``OTEL_RESOURCE_ATTRIBUTES``.
    * ``exporter`` given (tests): it is used, with a synchronous ``SimpleSpanProcessor``
      unless ``batch=True``, so finished spans are visible at once.
    * otherwise, ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) set: OTLP
      http/protobuf behind a ``BatchSpanProcessor``.
    * otherwise: no exporter; spans are still created so trace ids reach logs/headers.

    The global provider is not touched; a service that wants it can call
    ``trace.set_tracer_provider`` once itself.
    """
    env = os.environ if environ is None else environ
    attrs: dict[str, str] = {"service.name": service_name, "service.namespace": SERVICE_NAMESPACE}
    if service_version:
        attrs["service.version"] = service_version
    # Resource.create lets our attributes beat the environment; deployments expect the
    # opposite (OTEL_SERVICE_NAME renames a service), so the env detector goes on top.
    resource = Resource.create(attrs)
    if environ is None:
        resource = resource.merge(OTELResourceDetector().detect())
    else:
        resource = resource.merge(_resource_from(env))
    provider = TracerProvider(resource=resource)
    processor: SpanProcessor | None = None
    if exporter is not None:
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    else:
        endpoint = _otlp_traces_endpoint(env)
        if endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = OTLPSpanExporter(endpoint=endpoint)
            processor = SimpleSpanProcessor(otlp) if batch is False else BatchSpanProcessor(otlp)
    if processor is not None:
        provider.add_span_processor(processor)
    return provider


def _resource_from(env: Mapping[str, str]) -> Resource:
    attrs: dict[str, str] = {}
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attrs[key.strip()] = value.strip()
    if env.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = env["OTEL_SERVICE_NAME"]
    return Resource(attrs)


def _otlp_traces_endpoint(env: Mapping[str, str]) -> str | None:
    specific = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return base.rstrip("/") + "/v1/traces"
    return None


def inject_headers(
    ctx: Context | None = None, headers: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """W3C trace context (and baggage) of ``ctx`` (default: current) as NATS headers.

    Always goes through the propagator, so header names are exactly what extractors
    look for (``traceparent``, lowercase).
    """
    carrier: dict[str, str] = dict(headers) if headers is not None else {}
    propagate.inject(carrier, context=ctx)
    return carrier


def extract_context(headers: Mapping[str, str] | None) -> Context:
    """The remote parent context carried by message headers (empty when absent).

    nats-py 2.16 hands headers over as a case-sensitive dict and other clients may
    capitalise ``Traceparent``; keys are lowercased first so either form works.
    """
    if not headers:
        return Context()
    carrier = {key.lower(): value for key, value in headers.items()}
    return propagate.extract(carrier)


def traceparent_of(span: trace.Span | None = None) -> str | None:
    """``00-<trace>-<span>-<flags>`` of ``span`` (default: current), or None if invalid.

    This is the string stored in the teardown KV record to re-parent later spans.
    """
    target = span if span is not None else trace.get_current_span()
    if not target.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(target))
    return carrier.get("traceparent")


def current_traceparent() -> str | None:
    return traceparent_of(None)


def context_from_traceparent(traceparent: str, tracestate: str | None = None) -> Context:
    """A context whose (remote) parent is the span named by ``traceparent``.

    Raises ``ValueError`` for a malformed value, so a corrupt KV record is noticed
    rather than silently starting a new trace.
    """
    carrier = {"traceparent": traceparent.strip()}
    if tracestate:
        carrier["tracestate"] = tracestate
    ctx = TraceContextTextMapPropagator().extract(carrier)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        raise ValueError(f"not a valid W3C traceparent: {traceparent!r}")
    return ctx


# -- logging ---------------------------------------------------------------------------

# Attributes every LogRecord has; anything else on a record came in through `extra`.
_RECORD_FIELDS: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, trace_id, span_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        span_ctx = trace.get_current_span().get_span_context()
        if span_ctx.is_valid:
            doc["trace_id"] = f"{span_ctx.trace_id:032x}"
            doc["span_id"] = f"{span_ctx.span_id:016x}"
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and not key.startswith("_") and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            doc["exc"] = record.exc_text
        if record.stack_info:
            doc["stack"] = record.stack_info
        return json.dumps(doc, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s%(context)s")

    def format(self, record: logging.LogRecord) -> str:
        extras = {
            k: v
            for k, v in record.__dict__.items()
            if k not in _RECORD_FIELDS and not k.startswith("_") and k != "context"
        }
        record.context = "".join(f" {k}={v}" for k, v in extras.items())
        return super().format(record)


_HANDLER_MARK: Final = "_clearance_handler"


def setup_logging(
    level: str | int = "INFO", *, fmt: str = "json", stream: IO[str] | None = None
) -> logging.Handler:
    """Route the root logger to ``stream`` (stderr) as JSON lines (or text for humans).

    Idempotent: a handler installed by an earlier call is replaced, others are kept.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class ContextLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that stamps fixed context (e.g. ``aw``, ``namespace``, ``attempt``).

    ``log = ContextLogger(logger, aw="team-a/job1", attempt=2)``; ``log.bind(pod=...)``
    derives a logger with more context. Per-call ``extra`` wins over bound values.
    """

    def __init__(self, logger: logging.Logger, **context: Any) -> None:
        super().__init__(logger, context)

    def bind(self, **context: Any) -> ContextLogger:
        return ContextLogger(self.logger, **{**dict(self.extra or {}), **context})

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**dict(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def appwrapper_logger(
    logger: logging.Logger,
    *,
    namespace: str,
    name: str,
    attempt: int | None = None,
    **more: Any,
) -> ContextLogger:
    """The per-AppWrapper logger: every line carries ``aw``, ``namespace`` (and ``attempt``)."""
    context: dict[str, Any] = {"aw": f"{namespace}/{name}", "namespace": namespace, **more}
    if attempt is not None:
        context["attempt"] = attempt
    return ContextLogger(logger, **context)


# -- health / readiness / metrics ------------------------------------------------------

ReadinessCheck = Callable[[], bool | Awaitable[bool]]


class HealthServer:
    """The one HTTP port of a service: ``/healthz``, ``/readyz``, ``/metrics``.

    Readiness checks are named callables (sync or async) returning True when ready,
    e.g. ``"nats connected": lambda: nc.is_connected``. A check that raises or takes
    longer than ``check_timeout`` counts as failing; ``/readyz`` names the failures.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        host: str = "127.0.0.1",
        port: int = 0,
        check_timeout: float = 2.0,
    ) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self.check_timeout = check_timeout
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def remove_check(self, name: str) -> None:
        self._checks.pop(name, None)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("HealthServer not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", make_aiohttp_handler(self.registry))
        return app

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with ``port=0``)."""
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port)
        await site.start()
        self._runner = runner
        addresses = runner.addresses
        self._port = int(addresses[0][1]) if addresses else self._requested_port
        return self._port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def check_readiness(self) -> dict[str, str | None]:
        """Run every check; maps name → None when passing, else the failure reason."""
        results: dict[str, str | None] = {}
        for name, check in list(self._checks.items()):
            try:
                outcome = check()
                if inspect.isawaitable(outcome):
                    outcome = await asyncio.wait_for(outcome, self.check_timeout)
                results[name] = None if outcome else "false"
            except TimeoutError:
                results[name] = f"timed out after {self.check_timeout}s"
            except Exception as exc:
                results[name] = f"{type(exc).__name__}: {exc}"
        return results

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _readyz(self, request: web.Request) -> web.Response:
        results = await self.check_readiness()
        failing = {name: why for name, why in results.items() if why is not None}
        body = {
            "status": "not ready" if failing else "ready",
            "checks": {
                name: ("ok" if why is None else f"failing: {why}") for name, why in results.items()
            },
        }
        return web.json_response(body, status=503 if failing else 200)
