"""Wiring of one dispatcher process: NATS, Kubernetes, leadership, intake, loops, shutdown.

A replica campaigns for the Lease; only the leader loads state and acts. A standby is ready
(``/readyz``) but idle. Losing the Lease once held ends the process (exit 1) so that a
supervisor restarts it as a clean standby — the client-go convention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
from nats.js import api
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from clearance import bus, events, labels, subjects, testfaults
from clearance.bus import BusMetrics, Consumer, ConsumerSpec
from clearance.entrypoint import freeze_startup_heap
from clearance.informing import Change, Informer
from clearance.kube import NODES, PODS, Kube, KubeConfig, user_agent
from clearance.leadership import LeaderElector
from clearance.tasks import CrashWatch, wait_any
from clearance.telemetry import HealthServer, setup_tracing
from clearance_dispatcher import spans
from clearance_dispatcher.controller import Dispatcher
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.schemawatch import SchemaWatch
from clearance_dispatcher.settings import DispatcherSettings

log = logging.getLogger(__name__)

KUBE_DURABLE = "clearance-dispatcher-kube"
CLEARED_DURABLE = "clearance-dispatcher-cleared"
ALERTS_DURABLE = "clearance-dispatcher-alerts"


class Service:
    def __init__(
        self,
        settings: DispatcherSettings,
        *,
        tracer_provider: TracerProvider | None = None,
        kube_config: KubeConfig | None = None,
    ) -> None:
        """``tracer_provider``/``kube_config`` let a test run the service in-process."""
        self.settings = settings
        self.kube_config = kube_config or KubeConfig(
            request_timeout=settings.kube_request_timeout,
            user_agent=user_agent("dispatcher", settings.holder_identity),
            qps=settings.kube_qps,
            burst=settings.kube_burst,
            max_retries=settings.kube_max_retries,
        )
        self.registry = CollectorRegistry()
        self.metrics = DispatcherMetrics(self.registry)
        self.bus_metrics = BusMetrics(self.registry)
        self.own_provider = tracer_provider is None
        self.provider = tracer_provider or setup_tracing("clearance-dispatcher")
        spans.install(self.provider)  # before get_tracer: cycle roots re-created by id
        self.tracer = self.provider.get_tracer("clearance_dispatcher")
        self.health = HealthServer(
            registry=self.registry, host=settings.http_host, port=settings.http_port
        )
        self.consumers: list[Consumer[Any]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.crashes = CrashWatch()
        """A leader's background task ended with an error: the process exits (code 1)."""
        self.dispatcher: Dispatcher | None = None

    async def run(self, stop: asyncio.Event) -> int:
        settings = self.settings
        kube = await Kube.connect(self.kube_config)
        nc = await bus.connect(settings, name=f"clearance-dispatcher:{settings.holder_identity}")
        js = nc.jetstream(timeout=5)
        # The dispatcher keeps no KV of its own: the tracker's bucket is the tracker's to make.
        await bus.ensure_topology(js, buckets=(), replicas=settings.stream_replicas)
        dispatcher = self.dispatcher = Dispatcher(
            Runtime(
                settings,
                kube=kube,
                js=js,
                tracer=self.tracer,
                metrics=self.metrics,
                bus_metrics=self.bus_metrics,
            )
        )
        elector = LeaderElector(
            kube,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=settings.holder_identity,
            lease_duration=settings.lease_duration,
            retry_period=settings.lease_retry_period,
        )
        # Fencing: no API write but the Lease's own goes out outside the leader's term, so a
        # leader frozen past its lease cannot act on stale state when it wakes (DESIGN §5).
        if not testfaults.active("unfenced"):
            kube.fence = elector.term
        self.health.add_check("nats connected", lambda: bool(nc.is_connected))
        self.health.add_check(
            "state loaded (leader)",
            lambda: not elector.is_leader.is_set() or dispatcher.synced.is_set(),
        )
        await self.health.start()
        log.info(
            "dispatcher started",
            extra={"identity": settings.holder_identity, "http_port": self.health.port},
        )
        elector_task = asyncio.create_task(elector.run(), name="leader-election")
        code = 0
        try:
            await wait_any(stop, elector.is_leader)
            if not stop.is_set():
                self.metrics.leader.set(1)
                log.info("leading: loading state", extra={"identity": settings.holder_identity})
                await self._lead(dispatcher, js)
                await wait_any(stop, elector.lost, self.crashes.crashed)
                if self.crashes.crashed.is_set():
                    # A leader without its workers, scanner or informer would hold the lease
                    # and do nothing: the requeue cycles would stall behind a healthy process.
                    log.error("a background task crashed; exiting so a fresh replica leads")
                    code = 1
                elif not stop.is_set():
                    log.error("leadership lost; exiting so a fresh standby takes its place")
                    code = 1
        finally:
            await bus.shutdown(nc, self.consumers, timeout=settings.shutdown_timeout)
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await dispatcher.stop()
            elector_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await elector_task
            self.metrics.leader.set(0)
            await self.health.stop()
            await kube.close()
            if self.own_provider:
                self.provider.shutdown()
        return code

    def _task(self, coro: Any, name: str) -> None:
        self.tasks.append(self.crashes.watch(asyncio.create_task(coro, name=name)))

    @staticmethod
    def _pod_sink(dispatcher: Dispatcher) -> Any:
        async def pod_sink(change: Change) -> None:
            if change.action == "DELETED":
                dispatcher.on_pod_deleted(change.meta.uid)
            else:
                dispatcher.on_pod(msgspec.json.decode(change.raw, type=events.PodObject))

        return pod_sink

    async def _lead(self, dispatcher: Dispatcher, js: Any) -> None:
        settings = self.settings
        kube_client = dispatcher.kube
        # Where the bookkeeping lives is known before any AppWrapper is read.
        schema = SchemaWatch(dispatcher.rt)
        await schema.check()
        self._task(schema.run(), "crd-check")
        if settings.intake == "nats":
            kube_stream = bus.stream_spec(subjects.KUBE_STREAM, replicas=settings.stream_replicas)
            # The backlog is useless to a leader that LISTs right after subscribing: start at
            # NEW, subscribed *before* the LIST so nothing between the two is missed.
            with contextlib.suppress(Exception):
                await js.delete_consumer(kube_stream.name, KUBE_DURABLE)
            spec = ConsumerSpec(
                stream=kube_stream,
                durable=KUBE_DURABLE,
                # "item" too: the wrapped kinds' events (a Pod's item events, from an older
                # watcher, are handled by Intake.on_pod_item).
                filter_subjects=tuple(
                    subjects.kube_filter(kind=k) for k in ("appwrapper", "pod", "node", "item")
                ),
                ack_wait=settings.consumer_ack_wait,
                deliver_policy=api.DeliverPolicy.NEW,
                description="dispatcher: AppWrapper, pod, node and item events",
            )
            await self._consume(js, spec, dispatcher.handle_kube_event, concurrency=1)
            # Capacity needs every pod, but the watcher publishes only AppWrapper pods: the
            # others (usually few and slow-changing) are watched here, directly.
            unlabelled = Informer(kube_client, PODS, label_selector=f"!{labels.MCAD_APPWRAPPER}")
            self._task(unlabelled.run(self._pod_sink(dispatcher)), "informer:unlabelled-pods")
            await dispatcher.relist()
            self._task(self._resync(dispatcher), "resync")
        else:
            await self._informers(dispatcher)
        self._task(dispatcher.run_workers(), "workers")
        self._task(dispatcher.run_scanner(), "queue-scan")
        await self._consume(
            js,
            ConsumerSpec(
                stream=bus.stream_spec(subjects.CYCLE_STREAM, replicas=settings.stream_replicas),
                durable=CLEARED_DURABLE,
                filter_subjects=(subjects.cycle_filter(event="cleared"),),
                ack_wait=settings.consumer_ack_wait,
                description="dispatcher: cleared events (redispatch gate)",
            ),
            dispatcher.handle_cleared,
        )
        await self._consume(
            js,
            ConsumerSpec(
                stream=bus.stream_spec(subjects.ALERT_STREAM, replicas=settings.stream_replicas),
                durable=ALERTS_DURABLE,
                filter_subjects=(subjects.alert_filter(alert="deletion.stuck"),),
                ack_wait=settings.consumer_ack_wait,
                description="dispatcher: deletion.stuck alerts (DeletionStuck condition)",
            ),
            dispatcher.handle_alert,
        )
        freeze_startup_heap()
        log.info(
            "leading: state loaded, dispatching",
            extra={
                "appwrappers": len(dispatcher.state.appwrappers),
                "pods": len(dispatcher.state.pods),
                "nodes": len(dispatcher.state.nodes),
            },
        )

    async def _consume(
        self, js: Any, spec: ConsumerSpec, handler: Any, *, concurrency: int = 8
    ) -> None:
        consumer: Consumer[events.Event] = Consumer(
            js,
            spec,
            decode=events.decode,
            handler=handler,
            concurrency=concurrency,
            tracer=self.tracer,
            metrics=self.bus_metrics,
        )
        await consumer.start()
        self.consumers.append(consumer)

    async def _resync(self, dispatcher: Dispatcher) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_interval)
            try:
                await dispatcher.relist()
            except Exception as exc:
                log.warning("resync failed", extra={"error": repr(exc)})

    async def _informers(self, dispatcher: Dispatcher) -> None:
        """kube intake: list-then-watch AppWrappers, all pods and nodes directly."""
        assert dispatcher.kube is not None
        kube = dispatcher.kube

        async def aw_sink(change: Change) -> None:
            if change.action == "DELETED":
                dispatcher.on_appwrapper_deleted(
                    change.meta.namespace or "", change.meta.name, change.meta.uid
                )
            else:
                dispatcher.on_appwrapper(msgspec.json.decode(change.raw))

        pod_sink = self._pod_sink(dispatcher)

        async def node_sink(change: Change) -> None:
            if change.action == "DELETED":
                dispatcher.on_node_deleted(change.meta.name, change.meta.uid)
            else:
                dispatcher.on_node(msgspec.json.decode(change.raw, type=events.NodeObject))

        informers: list[tuple[Informer, Any]] = []
        namespaces = self.settings.namespaces or (None,)
        for ns in namespaces:
            informers.append((Informer(kube, dispatcher.aw_resource, namespace=ns), aw_sink))
        informers.append((Informer(kube, PODS), pod_sink))
        informers.append((Informer(kube, NODES), node_sink))
        for informer, sink in informers:
            self._task(informer.run(sink), f"informer:{informer.resource.plural}")
        await asyncio.gather(*(i.synced.wait() for i, _ in informers))
        dispatcher.synced.set()
