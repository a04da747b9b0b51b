"""Harness of the tracker's integration tests: kubesim + private nats-server + tracker processes.

* kubesim's `Cluster` runs in the test's event loop (API server, kubelets, node lifecycle, GC,
  Job controller); tests act on it with the real `clearance.kube.Kube` client.
* Each test gets its own nats-server: stream and consumer names are fixed in production.
* The tracker runs as the deployed console script `clearance-tracker`, configured only
  through `CLEARANCE_*` variables, with short timings.
* `StandInWatcher` publishes pod and Job events exactly as the watcher does (same informer
  library, same event classes, same Msg-Ids) for the tests that must control when events
  flow (e.g. "the watcher was down"); the end-to-end tests run the real `clearance-watcher`.
* `Recorder` keeps every cycle event and alert (ordered consumers from the start of the
  streams); `OtlpReceiver` is a tiny OTLP/HTTP collector decoding the protobuf export requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from tests.support.polling import eventually as eventually  # the one eventually, re-exported

from clearance import attributes, bus, labels
from clearance.events import (
    AppWrapperRef,
    CycleTeardownStarted,
    Event,
    KubeItemEvent,
    KubePodEvent,
    ObjectRef,
    TeardownPolicy,
    decode,
    encode,
    snapshot_item,
    snapshot_pod,
)
from clearance.informing import Change, Informer
from clearance.kube import JOBS, PODS, Kube, KubeError, Resource
from clearance_tracker.teardown import Teardown, decode_record, record_key
from support.processes import ServiceProcess, free_port, venv_script

NAMESPACE = "team-a"


def now() -> datetime:
    return datetime.now(UTC)


# ----------------------------------------------------------------------- recording


@dataclass
class Received:
    subject: str
    headers: dict[str, str]
    event: Event
    at: float


@dataclass
class Recorder:
    """Every cycle event and alert published, in stream order, decoded."""

    js: JetStreamContext
    items: list[Received] = field(default_factory=list)
    _subs: list[Any] = field(default_factory=list)

    async def start(self) -> Recorder:
        for subject in ("clearance.cycle.v1.>", "clearance.alert.v1.>"):

            async def on_msg(msg: Msg) -> None:
                with contextlib.suppress(Exception):
                    self.items.append(
                        Received(
                            msg.subject, dict(msg.headers or {}), decode(msg.data), time.time()
                        )
                    )

            self._subs.append(
                await self.js.subscribe(
                    subject,
                    cb=on_msg,
                    ordered_consumer=True,
                    deliver_policy=api.DeliverPolicy.ALL,
                )
            )
        return self

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def of(self, event_type: str, *, aw: str | None = None) -> list[Received]:
        return [
            r
            for r in self.items
            if r.event.event_type == event_type
            and (aw is None or getattr(r.event, "appwrapper", None) is not None)
            and (aw is None or r.event.appwrapper.name == aw)  # type: ignore[union-attr]
        ]


# -------------------------------------------------------------------------- OTLP


@dataclass(frozen=True)
class SpanRecord:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    links: tuple[str, ...]
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


async def wait_ready(proc: ServiceProcess, *, marker: str, timeout: float = 30.0) -> bool:
    """Until `proc` serves /readyz 200 *with its own checks* (`marker` in the body), so that
    another process that grabbed the same free port cannot pass for it. False if it died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.running:
            return False
        with contextlib.suppress(OSError):
            status, body = await asyncio.to_thread(proc.http_get, "/readyz")
            if status == 200 and marker in body:
                return True
        await asyncio.sleep(0.05)
    raise AssertionError(f"{proc.command[0]} not ready after {timeout}s:\n{proc.output()}")


class OtlpReceiver:
    """POST /v1/traces (http/protobuf) → `spans`."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest()
        req.ParseFromString(await request.read())
        for rs in req.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        SpanRecord(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            links=tuple(link.span_id.hex() for link in s.links),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            resource=resource,
                        )
                    )
        return web.Response(body=b"", content_type="application/x-protobuf")

    def named(self, name: str, *, aw: str | None = None) -> list[SpanRecord]:
        return [
            s
            for s in self.spans
            if s.name == name and (aw is None or s.attributes.get(attributes.APPWRAPPER_NAME) == aw)
        ]


# ------------------------------------------------------------------ stand-in watcher


class StandInWatcher:
    """Publishes pod and Job events like `clearance-watcher` (informers → KubeXxxEvent)."""

    def __init__(self, kube: Kube, js: JetStreamContext, *, namespace: str = NAMESPACE) -> None:
        self.kube = kube
        self.js = js
        self.namespace = namespace
        self._tasks: list[asyncio.Task[None]] = []
        self.informers: list[Informer] = []

    async def start(self) -> StandInWatcher:
        for resource in (PODS, JOBS):
            informer = Informer(
                self.kube,
                resource,
                namespace=self.namespace,
                label_selector=labels.ANY_APPWRAPPER,
                inactivity_timeout=10,
            )
            self.informers.append(informer)
            self._tasks.append(asyncio.create_task(informer.run(self._sink(resource))))
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in self.informers)), 10)
        return self

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self.informers.clear()

    def _sink(self, resource: Resource) -> Callable[[Change], Awaitable[None]]:
        async def sink(change: Change) -> None:
            raw = msgspec.json.decode(change.raw)
            event: KubePodEvent | KubeItemEvent
            if resource is PODS:
                event = KubePodEvent(
                    action=change.action,
                    inferred=change.inferred,
                    observed_at=now(),
                    object=snapshot_pod(raw),
                )
            else:
                event = KubeItemEvent(
                    action=change.action,
                    inferred=change.inferred,
                    observed_at=now(),
                    object=snapshot_item(raw, kind=resource.kind, api_version=resource.api_version),
                )
            await bus.publish(self.js, event.subject(), encode(event), msg_id=event.msg_id())

        return sink


# ------------------------------------------------------------------------ tracker


TRACKER_ENV: dict[str, str] = {
    "CLEARANCE_HTTP_HOST": "127.0.0.1",
    "CLEARANCE_VERIFY_INTERVAL": "1s",
    "CLEARANCE_SCAN_INTERVAL": "100ms",
    "CLEARANCE_HEARTBEAT_INTERVAL": "300ms",
    "CLEARANCE_OWNER_TIMEOUT": "2s",
    "CLEARANCE_CLAIM_TIMEOUT": "5s",
    "CLEARANCE_FINALIZER_REMOVAL_DELAY": "500ms",
    "CLEARANCE_NATS_RECONNECT_WAIT": "100ms",
    "CLEARANCE_SHUTDOWN_TIMEOUT": "3s",
    "CLEARANCE_FETCH_TIMEOUT": "500ms",
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    # The test environment disables bytecode caching; kubernetes-asyncio's model modules
    # then take seconds to import at every (re)start.
    "PYTHONDONTWRITEBYTECODE": "",
}

WATCHER_ENV: dict[str, str] = {
    "CLEARANCE_HTTP_HOST": "127.0.0.1",
    "CLEARANCE_LEASE_NAMESPACE": "default",
    "CLEARANCE_LEASE_DURATION": "2s",
    "CLEARANCE_LEASE_RETRY_PERIOD": "200ms",
    "CLEARANCE_INACTIVITY_TIMEOUT": "5s",
    "CLEARANCE_RETRY_DELAY": "100ms",
    "CLEARANCE_DISCOVERY_RETRY": "1s",
    "CLEARANCE_NATS_RECONNECT_WAIT": "100ms",
    "CLEARANCE_SHUTDOWN_TIMEOUT": "3s",
    "PYTHONDONTWRITEBYTECODE": "",
}
CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd" / "appwrapper-crd.yaml"


@dataclass
class Stack:
    """Everything one integration test runs against."""

    tmp: Path
    nats_url: str
    kubeconfig: Path
    nc: NatsClient
    js: JetStreamContext
    kube: Kube
    recorder: Recorder
    otlp: OtlpReceiver
    cluster: Any
    nats: Any = None
    trackers: dict[str, ServiceProcess] = field(default_factory=dict)

    # -- processes -----------------------------------------------------------------

    def tracker(self, replica: str = "tracker-0", **env: str) -> ServiceProcess:
        port = free_port()
        full = {
            **TRACKER_ENV,
            "CLEARANCE_NATS_URL": self.nats_url,
            "CLEARANCE_KUBECONFIG": str(self.kubeconfig),
            "CLEARANCE_HTTP_PORT": str(port),
            "CLEARANCE_REPLICA_ID": replica,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp.endpoint,
            "OTEL_SERVICE_NAME": "clearance-tracker",
            "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={replica}",
            **env,
        }
        proc = ServiceProcess(
            [venv_script("clearance-tracker")],
            env=full,
            log_path=self.tmp / f"{replica}.log",
            http_port=port,
        )
        self.trackers[replica] = proc
        return proc

    async def start_tracker(self, replica: str = "tracker-0", **env: str) -> ServiceProcess:
        for _ in range(3):
            proc = self.tracker(replica, **env).start()
            if await wait_ready(proc, marker="clearance-tracker-kube"):
                return proc
            # The free port was taken by another process before the tracker bound it.
            proc.kill()
        raise AssertionError(f"{replica} did not become ready:\n{proc.output()}")

    async def start_watcher(self, identity: str = "watcher-0", **env: str) -> ServiceProcess:
        """The real `clearance-watcher` (issue #4) as a subprocess."""
        port = free_port()
        proc = ServiceProcess(
            [venv_script("clearance-watcher")],
            env={
                **WATCHER_ENV,
                "KUBECONFIG": str(self.kubeconfig),
                "CLEARANCE_NATS_URL": self.nats_url,
                "CLEARANCE_HTTP_PORT": str(port),
                "CLEARANCE_LEASE_IDENTITY": identity,
                **env,
            },
            log_path=self.tmp / f"{identity}.log",
            http_port=port,
        )
        self.trackers[identity] = proc
        proc.start()
        await asyncio.to_thread(proc.wait_ready, timeout=30)
        assert proc.running, proc.output()
        return proc

    async def restart(self, proc: ServiceProcess) -> ServiceProcess:
        proc.kill()
        proc.start()
        if not await wait_ready(proc, marker="clearance-tracker-kube"):
            raise AssertionError(f"restart failed:\n{proc.output()}")
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.output(tail=60)}" for name, p in self.trackers.items())

    # -- Kubernetes ----------------------------------------------------------------

    async def create_pod(
        self,
        name: str,
        *,
        aw: str,
        attempt: int = 1,
        node: str = "node-1",
        finalizers: tuple[str, ...] = (),
        grace: int = 30,
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": labels.stamp(appwrapper=aw, namespace=NAMESPACE, attempt=attempt),
                "finalizers": list(finalizers),
            },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
        return dict(json.loads(await self.kube.create(PODS, body, namespace=NAMESPACE)))

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads(await self.kube.get(PODS, name, namespace=NAMESPACE)))
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    async def delete_pod(self, name: str, *, grace: int | None = None) -> None:
        with contextlib.suppress(KubeError):
            await self.kube.delete(PODS, name, namespace=NAMESPACE, grace_period_seconds=grace)

    async def strip_finalizers(self, name: str) -> None:
        await self.kube.patch(PODS, name, {"metadata": {"finalizers": None}}, namespace=NAMESPACE)

    async def wait_pod_running(self, name: str, timeout: float = 10.0) -> None:
        async def running() -> bool:
            pod = await self.pod(name)
            return bool(pod and (pod.get("status") or {}).get("phase") == "Running")

        await eventually(running, timeout=timeout)

    # -- NATS ----------------------------------------------------------------------

    async def start_teardown(
        self,
        aw: str,
        *,
        inventory: list[dict[str, Any]],
        attempt: int = 1,
        policy: TeardownPolicy | None = None,
        aw_uid: str | None = None,
        traceparent: str | None = None,
    ) -> CycleTeardownStarted:
        refs = tuple(
            ObjectRef(
                kind=obj.get("kind", "Pod"),
                api_version=obj.get("apiVersion", "v1"),
                namespace=obj["metadata"].get("namespace"),
                name=obj["metadata"]["name"],
                uid=obj["metadata"]["uid"],
            )
            for obj in inventory
        )
        event = CycleTeardownStarted(
            appwrapper=AppWrapperRef(
                namespace=NAMESPACE, name=aw, uid=aw_uid or f"{aw}-{uuid.uuid4().hex[:8]}"
            ),
            attempt=attempt,
            occurred_at=now(),
            cycle_traceparent=traceparent,
            inventory=refs,
            policy=policy or TeardownPolicy(),
        )
        await bus.publish(self.js, event.subject(), encode(event), msg_id=event.msg_id())
        return event

    async def record(self, event: CycleTeardownStarted) -> Teardown | None:
        kv = await self.js.key_value("clearance-teardowns")
        try:
            entry = await kv.get(record_key(event.appwrapper.uid, event.attempt))
        except Exception:
            return None
        return decode_record(entry.value) if entry.value else None

    async def cleared(self, aw: str, *, timeout: float = 15.0) -> Received:
        result = await eventually(lambda: self.recorder.of("cycle.cleared", aw=aw), timeout=timeout)
        return result[0]  # type: ignore[no-any-return]


def new_traceparent() -> str:
    return f"00-{uuid.uuid4().hex}{uuid.uuid4().hex[:0]}-{uuid.uuid4().hex[:16]}-01"


async def create_job(
    stack: Stack, name: str, *, aw: str, pods: int, attempt: int = 1
) -> dict[str, Any]:
    """A batch/v1 Job of `pods` parallel pods, labelled like the dispatcher labels them."""
    stamp = labels.stamp(appwrapper=aw, namespace=NAMESPACE, attempt=attempt)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": stamp},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"labels": stamp},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        },
    }
    return dict(json.loads(await stack.kube.create(JOBS, body, namespace=NAMESPACE)))


async def pods_of(stack: Stack, aw: str) -> list[dict[str, Any]]:
    result = await stack.kube.list(
        PODS, namespace=NAMESPACE, label_selector=labels.selector_for(aw)
    )
    return [json.loads(bytes(raw)) for raw in result.items]
