"""Wiring of one tracker process: health port, tracing, NATS, Kubernetes, consumers, shutdown.

Start-up order makes `/healthz` answer at once and `/readyz` only once the KV view is synced
and both consumers fetch. Shutdown order (SIGTERM): stop fetching and let in-flight handlers
finish (their acks go out), stop the tracker's timers and release its heartbeat (so another
replica takes over at once), drain NATS, close the Kubernetes client, flush spans.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.js import api
from prometheus_client import CollectorRegistry

from clearance import bus, events, subjects
from clearance.entrypoint import freeze_startup_heap
from clearance.kube import Kube, KubeConfig, user_agent
from clearance.tasks import wait_any
from clearance.telemetry import HealthServer, setup_tracing
from clearance_tracker import spans
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.store import ensure_bucket
from clearance_tracker.tracking import Tracker

log = logging.getLogger(__name__)

SERVICE_NAME = "clearance-tracker"
TEARDOWN_STARTED_FILTER = subjects.cycle_filter(event="teardown.started")
KUBE_FILTERS = (subjects.kube_filter(kind="pod"), subjects.kube_filter(kind="item"))


def consumer_specs(settings: TrackerSettings) -> tuple[bus.ConsumerSpec, bus.ConsumerSpec]:
    teardowns = bus.ConsumerSpec(
        stream=bus.stream_spec(subjects.CYCLE_STREAM, replicas=settings.stream_replicas),
        durable=settings.teardown_durable,
        filter_subjects=(TEARDOWN_STARTED_FILTER,),
        ack_wait=settings.ack_wait,
        description="clearance-tracker: teardown.started",
    )
    kube = bus.ConsumerSpec(
        stream=bus.stream_spec(subjects.KUBE_STREAM, replicas=settings.stream_replicas),
        durable=settings.kube_durable,
        filter_subjects=KUBE_FILTERS,
        ack_wait=settings.ack_wait,
        # Kube events older than the tracker's first start concern no teardown it knows;
        # verification covers anything missed while it was away.
        deliver_policy=api.DeliverPolicy.NEW,
        description="clearance-tracker: pod and item events",
    )
    return teardowns, kube


def _ready_check(consumer: bus.Consumer[Any]) -> Callable[[], bool]:
    return lambda: consumer.ready


async def run(settings: TrackerSettings, *, stop: asyncio.Event) -> int:
    """Serve until ``stop`` is set (0) or a background task crashed (1, after the same
    orderly shutdown: the replica's heartbeat is released, so another takes over at once)."""
    registry = CollectorRegistry()
    health = HealthServer(registry=registry, host=settings.http_host, port=settings.http_port)
    started = asyncio.Event()
    health.add_check("started", started.is_set)  # /readyz is 503 until start-up is complete
    await health.start()
    provider = setup_tracing(SERVICE_NAME)
    spans.install(provider)
    tracer = provider.get_tracer("clearance_tracker")
    bus_metrics = bus.BusMetrics(registry)
    metrics = TrackerMetrics(registry)
    nc = None
    kube = None
    tracker = None
    consumers: list[bus.Consumer[Any]] = []
    code = 0
    try:
        nc = await bus.connect(settings, name=f"{SERVICE_NAME}-{settings.identity}")
        js = nc.jetstream(timeout=5)
        await bus.ensure_topology(js, buckets=(), replicas=settings.stream_replicas)
        kv = await ensure_bucket(js, settings)
        kube = await Kube.connect(
            KubeConfig(
                kubeconfig=str(settings.kubeconfig) if settings.kubeconfig else None,
                context=settings.kube_context,
                request_timeout=settings.kube_request_timeout,
                user_agent=user_agent("tracker", settings.identity),
                qps=settings.kube_qps,
                burst=settings.kube_burst,
                max_retries=settings.kube_max_retries,
            )
        )
        tracker = Tracker(
            settings=settings,
            js=js,
            kv=kv,
            kube=kube,
            tracer=tracer,
            metrics=metrics,
            bus_metrics=bus_metrics,
        )
        await tracker.start()
        teardown_spec, kube_spec = consumer_specs(settings)
        for spec, handler, span_ratio in (
            (teardown_spec, tracker.on_cycle_event, 1.0),
            (kube_spec, tracker.on_kube_event, settings.kube_span_ratio),
        ):
            consumer: bus.Consumer[events.Event] = bus.Consumer(
                js,
                spec,
                decode=events.decode,
                handler=handler,
                concurrency=settings.consumer_concurrency,
                fetch_timeout=settings.fetch_timeout,
                tracer=tracer,
                metrics=bus_metrics,
                span_ratio=span_ratio,
                # Fetch a quarter of the slots at a time: the DELETED events of one teardown
                # then arrive together and their facts share one KV write (group commit).
                refill=max(1, settings.consumer_concurrency // 4),
            )
            await consumer.start()
            consumers.append(consumer)
            if consumer.loop is not None:
                tracker.crashes.watch(consumer.loop)
        client = nc
        health.add_check("nats", lambda: client.is_connected)
        health.add_check("teardowns", lambda: tracker is not None and tracker.ready)
        for c in consumers:
            health.add_check(f"consumer {c.name}", _ready_check(c))
        started.set()
        freeze_startup_heap()
        log.info(
            "clearance-tracker ready",
            extra={"replica": settings.identity, "http_port": health.port},
        )
        await wait_any(stop, tracker.crashes.crashed)
        if tracker.crashes.crashed.is_set():
            log.error("a background task crashed; exiting so the replica restarts")
            code = 1
        log.info("shutting down")
    finally:
        await asyncio.gather(
            *(c.stop(timeout=settings.shutdown_timeout) for c in consumers),
            return_exceptions=True,
        )
        if tracker is not None:
            await tracker.stop(timeout=settings.shutdown_timeout)
        if nc is not None:
            try:
                await bus.shutdown(nc, timeout=settings.shutdown_timeout)
            except Exception as exc:
                log.warning("nats shutdown failed", extra={"error": repr(exc)})
        if kube is not None:
            await kube.close()
        provider.shutdown()
        await health.stop()
    return code
