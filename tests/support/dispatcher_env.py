"""The dispatcher's test environment and builders: kubesim + a private nats-server + the
services as subprocesses (:class:`Env`, started by :func:`env_factory`), the AppWrapper
builder :func:`job_appwrapper`, the watch recorders behind :class:`Objects` and
``Env.cycle``, the stand-in tracker for ``DISPATCHER_TESTS_STANDALONE=1``, and the status
predicates (:func:`state_is`, :func:`phase_is`, :func:`condition`). The ``make_env`` fixture
in tests/dispatcher/conftest.py wraps :func:`env_factory`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api
from tests.support.incarnations import incarnation_violations
from tests.support.processes import ServiceProcess, free_port, venv_script

from clearance import bus, events, labels, subjects
from clearance.informing import Change, Informer
from clearance.kube import JOBS, PODS, Kube, KubeConfig, KubeError, Resource
from clearance.settings import CommonSettings
from kubesim.cluster import Cluster, ClusterConfig

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "crd" / "appwrapper-crd.yaml"
if not CRD.exists():  # pragma: no cover - fall back to kubesim's fidelity copy
    CRD = (
        REPO / "tests" / "kubesim" / "fidelity" / "data" / "workload.codeflare.dev_appwrappers.yaml"
    )
AW = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
EVENTS_RES = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)

_STANDALONE = os.environ.get("DISPATCHER_TESTS_STANDALONE") == "1"
# The real watcher and tracker run unless DISPATCHER_TESTS_STANDALONE=1 asks for stand-ins;
# a missing console script then fails the tests instead of silently switching to stand-ins.
REAL_TRACKER = not _STANDALONE
REAL_WATCHER = not _STANDALONE


def job_appwrapper(
    name: str,
    namespace: str,
    *,
    parallelism: int = 2,
    min_available: int | None = 2,
    cpu: str = "250m",
    priority: int | None = None,
    requeuing: dict[str, Any] | None = None,
    completion: bool = True,
    unschedulable: bool = False,
    custom_cpu: str | None = None,
    dispatch_limit: int | None = None,
) -> dict[str, Any]:
    """An MCAD v1 AppWrapper wrapping one batch/v1 Job of ``parallelism`` pods."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "sleep 5"],
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
            }
        ],
    }
    if unschedulable:
        pod_spec["nodeSelector"] = {"clearance.test/nowhere": "true"}
    item: dict[str, Any] = {
        "replicas": 1,
        "generictemplate": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-job"},
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "template": {"metadata": {}, "spec": pod_spec},
            },
        },
    }
    if completion:
        item["completionstatus"] = "Complete"
    if custom_cpu is not None:
        item["custompodresources"] = [
            {"replicas": parallelism, "requests": {"cpu": custom_cpu, "memory": "64Mi"}}
        ]
    scheduling: dict[str, Any] = {}
    if min_available is not None:
        scheduling["minAvailable"] = min_available
    if requeuing is not None:
        scheduling["requeuing"] = requeuing
    if dispatch_limit is not None:
        scheduling["dispatchDuration"] = {"limit": dispatch_limit}
    spec: dict[str, Any] = {"schedulingSpec": scheduling, "resources": {"GenericItems": [item]}}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@dataclass
class Objects:
    """uid → (kind, attempt) of every labelled pod and Job ever seen (from a watch)."""

    attempts: dict[str, tuple[str, int]] = field(default_factory=dict)


@dataclass
class Env:
    cluster: Cluster
    kube: Kube
    nats_url: str
    nc: NatsClient
    js: JetStreamContext
    tmp: Path
    namespace: str
    objects: Objects
    processes: list[ServiceProcess] = field(default_factory=list)
    nats_server: Any = None
    """The private nats-server (a test may stop it)."""
    cycle: list[tuple[str, events.Event]] = field(default_factory=list)

    # -- processes -----------------------------------------------------------------------

    def dispatcher_env(self, **overrides: str) -> dict[str, str]:
        env = {
            "KUBECONFIG": str(self.cluster.kubeconfig_path),
            "CLEARANCE_NATS_URL": self.nats_url,
            "CLEARANCE_NATS_RECONNECT_WAIT": "100ms",
            "CLEARANCE_HTTP_HOST": "127.0.0.1",
            "CLEARANCE_INTAKE": "nats" if REAL_WATCHER else "kube",
            "CLEARANCE_REQUEUE_TIME": "10s",
            "CLEARANCE_STUCK_ALERT_TIME": "1s",
            "CLEARANCE_PAUSE_TIME": "0s",
            "CLEARANCE_QUEUE_SCAN_INTERVAL": "500ms",
            "CLEARANCE_MONITOR_INTERVAL": "300ms",
            "CLEARANCE_COUNTS_WRITE_INTERVAL": "100ms",
            "CLEARANCE_DISPATCH_BACKOFF": "200ms",
            "CLEARANCE_DISPATCH_BACKOFF_MAX": "1s",
            "CLEARANCE_LEASE_DURATION": "3s",
            "CLEARANCE_LEASE_RETRY_PERIOD": "500ms",
            "CLEARANCE_RESYNC_INTERVAL": "5s",
            "CLEARANCE_LOG_FORMAT": "text",
            "CLEARANCE_LOG_LEVEL": "INFO",
            "CLEARANCE_SHUTDOWN_TIMEOUT": "3s",
            "CLEARANCE_CONSUMER_ACK_WAIT": "2s",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "",
            # Cache bytecode: every (re)start otherwise recompiles kubernetes-asyncio.
            "PYTHONDONTWRITEBYTECODE": "",
        }
        env.update(overrides)
        return env

    async def start_dispatcher(
        self, *, name: str = "dispatcher", wait: bool = True, **overrides: str
    ) -> ServiceProcess:
        port = free_port()
        env = self.dispatcher_env(
            CLEARANCE_HTTP_PORT=str(port), CLEARANCE_LEASE_IDENTITY=name, **overrides
        )
        proc = ServiceProcess(
            [venv_script("clearance-dispatcher")],
            env=env,
            log_path=self.tmp / f"{name}.log",
            http_port=port,
        )
        proc.start()
        self.processes.append(proc)
        if wait:
            # Never block the event loop: kubesim runs in it.
            await asyncio.to_thread(proc.wait_ready, timeout=30)
        return proc

    async def start_service(self, script: str, name: str, **env: str) -> ServiceProcess:
        port = free_port()
        full = {
            "KUBECONFIG": str(self.cluster.kubeconfig_path),
            "CLEARANCE_NATS_URL": self.nats_url,
            "CLEARANCE_HTTP_HOST": "127.0.0.1",
            "CLEARANCE_HTTP_PORT": str(port),
            "CLEARANCE_LOG_FORMAT": "text",
            "PYTHONDONTWRITEBYTECODE": "",
            **env,
        }
        proc = ServiceProcess(
            [venv_script(script)], env=full, log_path=self.tmp / f"{name}.log", http_port=port
        )
        proc.start()
        self.processes.append(proc)
        await asyncio.to_thread(proc.wait_ready, timeout=30)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.output(tail=60)}" for p in self.processes)

    # -- API -----------------------------------------------------------------------------

    async def create_aw(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = msgspec.json.decode(
            await self.kube.create(AW, body, namespace=self.namespace)
        )
        return created

    async def get_aw(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = msgspec.json.decode(
            await self.kube.get(AW, name, namespace=self.namespace)
        )
        return got

    async def wait_aw(
        self,
        name: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 20,
        what: str = "condition",
    ) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        last: dict[str, Any] = {}
        while asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(KubeError):
                last = await self.get_aw(name)
                if predicate(last):
                    return last
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"{name}: {what} not reached in {timeout}s; status={json.dumps(last.get('status'))}"
            f"\n{self.logs()}"
        )

    async def warning_events(self, name: str) -> list[dict[str, Any]]:
        data = msgspec.json.decode(
            await self.kube.request("GET", EVENTS_RES.path(namespace=self.namespace))
        )
        return [
            e
            for e in data.get("items", [])
            if (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"
        ]

    async def history(self, **query: str) -> list[dict[str, Any]]:
        """kubesim's write history (the server runs in this event loop: async GET only)."""
        data = await self.kube.request("GET", "/kubesim/v1/history", query=query)
        return list(json.loads(data)["items"])

    def cycle_events(self, type_: str, aw: str | None = None) -> list[events.Event]:
        out = []
        for _, event in self.cycle:
            if event.event_type != type_:
                continue
            ref = getattr(event, "appwrapper", None)
            if aw is not None and (ref is None or ref.name != aw):
                continue
            out.append(event)
        return out

    async def wait_event(
        self, type_: str, aw: str, *, count: int = 1, timeout: float = 20
    ) -> list[events.Event]:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            found = self.cycle_events(type_, aw)
            if len(found) >= count:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"{count}x {type_} for {aw} not seen in {timeout}s\n{self.logs()}")

    async def assert_safety(self) -> None:
        """DESIGN §5 against kubesim's write history: no object of attempt N+1 is created
        while any object of attempts <= N of the same AppWrapper exists."""
        live: dict[str, tuple[str, int, str]] = {}  # uid -> (aw, attempt, name)
        checked = 0
        for entry in await self.history(namespace=self.namespace):
            if entry["kind"] not in ("Pod", "Job"):
                continue
            known = self.objects.attempts.get(entry["uid"])
            if known is None:
                continue
            aw, attempt = known
            if entry["type"] == "ADDED":
                older = [v for v in live.values() if v[0] == aw and v[1] < attempt]
                assert not older, (
                    f"{entry['kind']} {entry['name']} of attempt {attempt} created at rv "
                    f"{entry['rv']} while {older} still existed"
                )
                live[entry["uid"]] = (aw, attempt, entry["name"])
                checked += 1
            elif entry["type"] == "DELETED":
                live.pop(entry["uid"], None)
        assert checked > 0, "the history held no labelled object to check"
        assert not (
            found := incarnation_violations(await self.history(namespace=self.namespace))
        ), found


async def _record_objects(kube: Kube, namespace: str, objects: Objects) -> None:
    async def sink(change: Change) -> None:
        obj = msgspec.json.decode(change.raw)
        meta = obj.get("metadata") or {}
        lab = meta.get("labels") or {}
        attempt = labels.attempt_of(lab)
        if attempt is not None and lab.get(labels.MCAD_APPWRAPPER):
            objects.attempts.setdefault(
                str(meta.get("uid")), (str(lab[labels.MCAD_APPWRAPPER]), attempt)
            )

    await asyncio.gather(
        Informer(kube, PODS, namespace=namespace, label_selector=labels.ANY_APPWRAPPER).run(sink),
        Informer(kube, JOBS, namespace=namespace, label_selector=labels.ANY_APPWRAPPER).run(sink),
    )


async def _record_cycle(js: JetStreamContext, sink: list[tuple[str, events.Event]]) -> None:
    """Every cycle event and alert, in stream order (ordered push consumers)."""

    async def on_msg(msg: Any) -> None:
        with contextlib.suppress(events.EventDecodeError):
            sink.append((msg.subject, events.decode(msg.data)))

    subs = [
        await js.subscribe(
            subject, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL, cb=on_msg
        )
        for subject in ("clearance.cycle.v1.>", "clearance.alert.v1.>")
    ]
    try:
        await asyncio.Event().wait()
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def _stand_in_tracker(env: Env) -> None:
    """Publish ``cleared`` for a teardown once the API shows nothing of attempts <= N."""
    spec = bus.ConsumerSpec(
        stream=next(s for s in bus.default_streams() if s.name == subjects.CYCLE_STREAM),
        durable="test-stand-in-tracker",
        filter_subjects=(subjects.cycle_filter(event="teardown.started"),),
        ack_wait=30,
    )

    async def handle(event: events.Event, delivery: bus.Delivery) -> None:
        assert isinstance(event, events.CycleTeardownStarted)
        aw = event.appwrapper
        alerted = False
        while True:
            selector = f"{labels.MCAD_APPWRAPPER}={aw.name}"
            pods = (
                await env.kube.list(PODS, namespace=aw.namespace, label_selector=selector)
            ).items
            left = [
                p
                for p in (msgspec.json.decode(raw) for raw in pods)
                if (labels.attempt_of(p["metadata"].get("labels") or {}) or 0) <= event.attempt
            ]
            for ref in event.inventory:
                if ref.kind == "Job":
                    try:
                        await env.kube.get(JOBS, ref.name, namespace=aw.namespace)
                        left.append({"job": ref.name})
                    except KubeError as exc:
                        if not exc.not_found:
                            raise
            if not left:
                break
            if not alerted and datetime.now(UTC) - event.occurred_at > timedelta(seconds=1):
                alerted = True
                await _stuck_alert(env, event, left)
            await asyncio.sleep(0.1)
        now = datetime.now(UTC)
        cleared = events.CycleCleared(
            appwrapper=aw,
            attempt=event.attempt,
            occurred_at=now,
            cleared_at=now,
            teardown_started_at=event.occurred_at,
            confirmed=event.inventory,
            cycle_traceparent=event.cycle_traceparent,
        )
        await bus.publish(
            env.js, cleared.subject(), events.encode(cleared), msg_id=cleared.msg_id()
        )

    consumer: bus.Consumer[events.Event] = bus.Consumer(
        env.js, spec, decode=events.decode, handler=handle, concurrency=16
    )
    await consumer.start()
    try:
        await asyncio.Event().wait()
    finally:
        await consumer.stop(timeout=1)


async def _stuck_alert(
    env: Env, event: events.CycleTeardownStarted, left: list[dict[str, Any]]
) -> None:
    """What the tracker says when a teardown outlives its stuck-alert deadline."""
    stuck = tuple(
        events.StuckObject(
            object=events.ObjectRef(
                kind="Pod",
                api_version="v1",
                namespace=p["metadata"]["namespace"],
                name=p["metadata"]["name"],
                uid=p["metadata"]["uid"],
            ),
            node=(p.get("spec") or {}).get("nodeName"),
            reasons=(
                events.Finalizers(finalizers=tuple(p["metadata"]["finalizers"]))
                if p["metadata"].get("finalizers")
                else events.UnknownCause(detail="still present"),
            ),
        )
        for p in left
        if "metadata" in p
    )
    if not stuck:
        return
    alert = events.AlertDeletionStuck(
        appwrapper=event.appwrapper,
        attempt=event.attempt,
        occurred_at=datetime.now(UTC),
        summary=f"{len(stuck)} object(s) of attempt {event.attempt} still present",
        elapsed_seconds=(datetime.now(UTC) - event.occurred_at).total_seconds(),
        stuck=stuck,
        cycle_traceparent=event.cycle_traceparent,
    )
    await bus.publish(env.js, alert.subject(), events.encode(alert), msg_id=alert.msg_id())


ClusterFactory = Callable[..., Awaitable[Env]]


@contextlib.asynccontextmanager
async def env_factory(tmp_path: Path, nats_server_factory: Any) -> AsyncIterator[ClusterFactory]:
    """Yields ``make(...)``, which starts one dispatcher test environment; stops them all after."""
    created: list[tuple[Env, list[asyncio.Task[Any]]]] = []

    async def make(
        *,
        nodes: int = 2,
        node_cpu: str = "4",
        tracker: bool = True,
        pod_run_time: float = 2.0,
        termination_delay: float = 0.2,
        watcher: bool = True,
    ) -> Env:
        server = nats_server_factory()
        cluster = Cluster(
            ClusterConfig(
                nodes=nodes,
                node_cpu=node_cpu,
                node_memory="16Gi",
                pod_start_delay=0.2,
                pod_run_time=pod_run_time,
                kubelet_termination_delay=termination_delay,
                crd_files=(str(CRD),),
                scheduler_retry=0.3,
            )
        )
        await cluster.start()
        kube = await Kube.connect(KubeConfig(kubeconfig=str(cluster.kubeconfig_path)))
        nc = await bus.connect(
            CommonSettings(nats_url=server.url, nats_reconnect_wait=0.1), name="pytest-dispatcher"
        )
        js = nc.jetstream(timeout=5)
        await bus.ensure_topology(js)
        namespace = f"t-{uuid.uuid4().hex[:8]}"
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        env = Env(
            cluster=cluster,
            kube=kube,
            nats_url=server.url,
            nc=nc,
            js=js,
            tmp=tmp_path,
            namespace=namespace,
            objects=Objects(),
            nats_server=server,
        )
        tasks = [
            asyncio.create_task(_record_objects(kube, namespace, env.objects)),
            asyncio.create_task(_record_cycle(js, env.cycle)),
        ]
        if tracker:
            if REAL_TRACKER:
                await env.start_service(
                    "clearance-tracker",
                    "tracker",
                    CLEARANCE_VERIFY_INTERVAL="500ms",
                    CLEARANCE_SCAN_INTERVAL="200ms",
                    CLEARANCE_ACK_WAIT="2s",
                )
            else:
                tasks.append(asyncio.create_task(_stand_in_tracker(env)))
        if REAL_WATCHER and watcher:
            await env.start_service(
                "clearance-watcher",
                "watcher",
                CLEARANCE_LEASE_DURATION="3s",
                CLEARANCE_LEASE_RETRY_PERIOD="500ms",
                CLEARANCE_LEASE_NAMESPACE="default",
            )
        created.append((env, tasks))
        return env

    try:
        yield make
    finally:
        for env, tasks in created:
            for proc in env.processes:
                proc.kill()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await env.nc.close()
            await env.kube.close()
            await env.cluster.stop()


def state_is(state: str) -> Callable[[dict[str, Any]], bool]:
    return lambda aw: (aw.get("status") or {}).get("state") == state


def phase_is(phase: str, attempt: int | None = None) -> Callable[[dict[str, Any]], bool]:
    def check(aw: dict[str, Any]) -> bool:
        cl = (aw.get("status") or {}).get("clearance") or {}
        return cl.get("phase") == phase and (attempt is None or cl.get("attempt") == attempt)

    return check


def condition(aw: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (aw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None
