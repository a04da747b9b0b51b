"""What every end-to-end scenario needs besides the stack: observe NATS, the API and kubesim.

The scenarios of issue #7 assert DESIGN §5 invariants on what users can see: the cycle events
and alerts on NATS, the AppWrapper and its objects in the API server, and the order of writes
in the API server itself. This module gathers those views:

* :class:`EventLog` follows ``CLEARANCE_CYCLE`` and ``CLEARANCE_ALERTS`` with ordered
  consumers from the first stored message, decodes every event and notes when it arrived;
* :class:`AttemptLedger` watches every object carrying the AppWrapper label (pods, Jobs,
  Services, ConfigMaps) and remembers the attempt label of each UID it ever saw, so that even
  short-lived objects can be classified after they are gone;
* :func:`coexistence_violations` replays kubesim's write history (``/kubesim/v1/history``)
  against the ledger: the Safety invariant says no object of attempt N+1 may be created while
  any object of an attempt ≤ N still exists;
* :class:`Scenario` bundles the stack with a Kubernetes client and these views, plus the
  small API actions scenarios take (create an AppWrapper, strip a finalizer, lose a node);
* the builders (:func:`appwrapper`, :func:`item`, :func:`pod_template`, :func:`requeuing`) and
  the short timings are shared, so each scenario says only what is special about it;
* :func:`check_cycle_trace` asserts DESIGN §6 on the trace of one requeue cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import pkgutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec
import pytest
from nats.aio.client import Client as NatsClient
from nats.js import api
from opentelemetry.semconv import attributes as semconv_stable
from opentelemetry.semconv._incubating import attributes as semconv_incubating
from tests.support.incarnations import incarnation_violations
from tests.support.polling import eventually as eventually  # the one eventually, re-exported

from clearance import attributes, bus, events, labels, subjects
from clearance.kube import EVENTS, JOBS, PODS, Kube, KubeConfig, KubeError, Resource
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig
from clearance.traces import ReceivedSpan, waterfall

APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
TRACKED = (PODS, JOBS, SERVICES, CONFIGMAPS)
"""Every kind the scenarios wrap; the ledger and the API probes look at all of them."""

NAMESPACE = "default"
HOLD = "e2e.clearance.dev/hold"
"""A finalizer nobody but the test removes (a volume that never detaches)."""
RUN_TIME = "kubesim.dev/run-time"
EXIT_CODE = "kubesim.dev/exit-code"

# Short, real timings: a node is declared lost 2 s after its kubelet stops and its pods are
# evicted 2 s later (default toleration), so a requeue follows a lost node within ~5 s.
KUBESIM_FLAGS: tuple[str, ...] = (
    "--node-monitor-grace", "2s",
    "--node-monitor-period", "250ms",
    "--default-toleration", "2s",
    "--pod-start-delay", "300ms",
    "--heartbeat-interval", "500ms",
    "--kubelet-termination-delay", "300ms",
    "--scheduler-retry", "500ms",
    "--bookmark-interval", "5s",
)  # fmt: skip

SERVICE_ENV: dict[str, str] = {
    "CLEARANCE_LOG_LEVEL": "INFO",
    "CLEARANCE_LEASE_DURATION": "3s",
    "CLEARANCE_LEASE_RETRY_PERIOD": "500ms",
    "CLEARANCE_LEASE_RETRY": "500ms",
    "CLEARANCE_VERIFY_INTERVAL": "1s",
    "CLEARANCE_SCAN_INTERVAL": "250ms",
    "CLEARANCE_MONITOR_INTERVAL": "250ms",
    "CLEARANCE_COUNTS_WRITE_INTERVAL": "100ms",
    "CLEARANCE_QUEUE_SCAN_INTERVAL": "250ms",
    "CLEARANCE_HEARTBEAT_INTERVAL": "500ms",
    "CLEARANCE_OWNER_TIMEOUT": "3s",
    "CLEARANCE_FINALIZER_REMOVAL_DELAY": "1s",
    "CLEARANCE_NATS_RECONNECT_WAIT": "250ms",
    # Spans leave each process within a fraction of a second, so traces are complete soon
    # after the cycle ends.
    "OTEL_BSP_SCHEDULE_DELAY": "100",
}

E = TypeVar("E", bound=events.Event)


# ------------------------------------------------------------------------ AppWrappers


def requeuing(
    *,
    wait: int = 2,
    pause: int = 1,
    stuck_alert: int = 2,
    force: int = 4,
    finalizer_removal: str = "Never",
    max_requeuings: int = 0,
) -> dict[str, Any]:
    """``spec.schedulingSpec.requeuing`` with MCAD's and Clearance's teardown fields."""
    return {
        "timeInSeconds": wait,
        "growthType": "none",
        "maxNumRequeuings": max_requeuings,
        "pauseTimeInSeconds": pause,
        "stuckAlertTimeInSeconds": stuck_alert,
        "forceDeletionTimeInSeconds": force,
        "finalizerRemoval": finalizer_removal,
    }


def pod_template(
    name: str,
    *,
    grace: int = 1,
    finalizers: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    cpu: str = "100m",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/trainer:1.0",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def item(template: Mapping[str, Any], *, pods: int = 0, cpu: str = "100m") -> dict[str, Any]:
    """A generic item; ``pods`` > 0 declares its pods' requests for the capacity check."""
    entry: dict[str, Any] = {"replicas": 1, "generictemplate": dict(template)}
    if pods:
        entry["custompodresources"] = [
            {"replicas": pods, "requests": {"cpu": cpu, "memory": "64Mi"}}
        ]
    return entry


POLICY_ANNOTATIONS = {
    "pauseTimeInSeconds": "clearance.dev/pause-time-in-seconds",
    "forceDeletionTimeInSeconds": "clearance.dev/force-deletion-time-in-seconds",
    "stuckAlertTimeInSeconds": "clearance.dev/stuck-alert-time-in-seconds",
    "finalizerRemoval": "clearance.dev/finalizer-removal",
}
"""Clearance's teardown fields as the documented annotation keys (for CRDs that prune them)."""


def policy_as_annotations(
    requeue: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    """``requeue`` split into MCAD v1's own fields and Clearance's as annotations."""
    upstream = {k: v for k, v in requeue.items() if k not in POLICY_ANNOTATIONS}
    annotations = {POLICY_ANNOTATIONS[k]: str(v) for k, v in requeue.items() if k not in upstream}
    return upstream, annotations


def appwrapper(
    name: str,
    items: Sequence[Mapping[str, Any]],
    *,
    min_available: int,
    requeue: Mapping[str, Any],
    policy_in: str = "spec",
) -> dict[str, Any]:
    """An AppWrapper; ``policy_in="annotations"`` gives the teardown policy as annotations."""
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if policy_in == "annotations":
        requeue, metadata["annotations"] = policy_as_annotations(requeue)
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": metadata,
        "spec": {
            "priority": 5,
            "schedulingSpec": {"minAvailable": min_available, "requeuing": dict(requeue)},
            "resources": {"GenericItems": [dict(i) for i in items]},
        },
    }


UNSCHEDULABLE = {"kubernetes.io/hostname": "no-such-node"}
"""A node selector no node matches: the pod stays Pending, so the gang never forms."""


# ------------------------------------------------------------------------- NATS events


@dataclass(frozen=True, slots=True)
class Received:
    event: events.Event
    subject: str
    wall: float
    """``time.time()`` when the test received it (same clock as the services)."""


class EventLog:
    """Every cycle event and alert since the streams began, in stream order."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.undecodable: list[tuple[str, bytes]] = []
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, nc: NatsClient) -> EventLog:
        js = nc.jetstream()
        for stream, subject in (
            (subjects.CYCLE_STREAM, "clearance.cycle.v1.>"),
            (subjects.ALERT_STREAM, "clearance.alert.v1.>"),
        ):
            sub = await js.subscribe(
                subject,
                stream=stream,
                ordered_consumer=True,
                config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
            )
            self._tasks.append(asyncio.create_task(self._follow(sub)))
        return self

    async def _follow(self, sub: Any) -> None:
        # No unsubscribe on the way out: it can hang on a cancelled ordered consumer, and
        # closing the connection removes the ephemeral consumers anyway.
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                continue
            try:
                event = events.decode(msg.data)
            except events.EventDecodeError:
                self.undecodable.append((msg.subject, bytes(msg.data)))
                continue
            async with self._changed:
                self.received.append(Received(event, msg.subject, time.time()))
                self._changed.notify_all()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def of(self, kind: type[E], **attrs: Any) -> list[E]:
        """Events of one class whose attributes equal ``attrs`` (in stream order)."""
        return [
            r.event
            for r in self.received
            if isinstance(r.event, kind) and all(getattr(r.event, k) == v for k, v in attrs.items())
        ]

    def alerts(self) -> list[events.AlertEvent]:
        """Every alert, in stream order."""
        return [r.event for r in self.received if isinstance(r.event, events.AlertEvent)]

    def arrival(self, event: events.Event) -> float:
        return next(r.wall for r in self.received if r.event is event)

    async def wait_for(
        self,
        kind: type[E],
        *,
        timeout: float,
        where: Callable[[E], bool] = lambda _: True,
        **attrs: Any,
    ) -> E:
        """The first event of ``kind`` matching ``attrs`` and ``where`` (already stored or new)."""

        def find() -> E | None:
            return next((e for e in self.of(kind, **attrs) if where(e)), None)

        try:
            async with asyncio.timeout(timeout), self._changed:
                while (found := find()) is None:
                    await self._changed.wait()
                return found
        except TimeoutError:
            seen = "\n  ".join(f"{r.event.event_type} #{_attempt(r.event)}" for r in self.received)
            raise AssertionError(
                f"no {kind.__name__} {attrs or ''} within {timeout:.0f}s; events so far:\n  {seen}"
            ) from None

    def timeline(self) -> str:
        return "\n".join(
            f"{r.wall:.3f} {r.event.event_type} attempt={_attempt(r.event)}" for r in self.received
        )


def _attempt(event: events.Event) -> object:
    return getattr(event, "attempt", "-")


# ------------------------------------------------------------------------ API objects


@dataclass(frozen=True, slots=True)
class ApiObject:
    kind: str
    name: str
    uid: str
    attempt: int | None
    terminating: bool
    finalizers: tuple[str, ...]


class _Meta(msgspec.Struct):
    name: str
    uid: str
    labels: dict[str, str] = {}
    finalizers: list[str] = []
    deletionTimestamp: str | None = None  # Kubernetes wire name
    resourceVersion: str = ""


class _Obj(msgspec.Struct):
    metadata: _Meta


def _api_object(kind: str, raw: bytes | msgspec.Raw) -> ApiObject:
    meta = msgspec.json.decode(raw, type=_Obj).metadata
    return ApiObject(
        kind=kind,
        name=meta.name,
        uid=meta.uid,
        attempt=labels.attempt_of(meta.labels),
        terminating=meta.deletionTimestamp is not None,
        finalizers=tuple(meta.finalizers),
    )


class AttemptLedger:
    """uid → attempt of every object that ever carried the AppWrapper's label (by watch)."""

    def __init__(self, kube: Kube, appwrapper: str) -> None:
        self.kube = kube
        self.selector = labels.selector_for(appwrapper)
        self.attempts: dict[str, int | None] = {}
        self.kinds: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> AttemptLedger:
        for resource in TRACKED:
            listed = await self.kube.list(
                resource, namespace=NAMESPACE, label_selector=self.selector
            )
            for raw in listed.items:
                self._note(resource.kind, raw)
            self._tasks.append(asyncio.create_task(self._watch(resource, listed.resource_version)))
        return self

    def _note(self, kind: str, raw: bytes | msgspec.Raw) -> None:
        obj = _api_object(kind, raw)
        self.attempts.setdefault(obj.uid, obj.attempt)
        self.kinds[obj.uid] = kind

    async def _watch(self, resource: Resource, rv: str) -> None:
        while True:
            try:
                async for line in self.kube.watch(
                    resource,
                    resource_version=rv,
                    namespace=NAMESPACE,
                    label_selector=self.selector,
                    timeout_seconds=60,
                ):
                    if line.type == "ERROR":
                        raise RuntimeError(f"the ledger's watch of {resource.plural} broke")
                    meta = msgspec.json.decode(line.object, type=_Obj).metadata
                    rv = meta.resourceVersion or rv
                    if line.type in ("ADDED", "MODIFIED", "DELETED"):
                        self._note(resource.kind, line.object)
            except KubeError:
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Write:
    """One entry of kubesim's write history."""

    rv: int
    type: str
    kind: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    """The object's labels at this commit."""
    time: float = 0.0
    """Commit time (seconds since the epoch, the services' clock)."""

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Write:
        """One item of ``GET /kubesim/v1/history``."""
        return cls(
            rv=int(entry["rv"]),
            type=str(entry["type"]),
            kind=str(entry["kind"]),
            name=str(entry["name"]),
            uid=str(entry["uid"]),
            labels=dict(entry.get("labels") or {}),
            time=float(entry.get("time") or 0.0),
        )


def attempts_from_history(history: Iterable[Write], appwrapper: str) -> dict[str, int | None]:
    """uid → attempt of every object that carried ``appwrapper``'s label in any commit.

    The write history records each commit's labels, so it classifies objects of every kind
    (ReplicaSets, PyTorchJobs, …) without a watch of its own, short-lived ones included.
    """
    out: dict[str, int | None] = {}
    for write in history:
        if write.labels.get(labels.MCAD_APPWRAPPER) != labels.value_for(appwrapper):
            continue
        attempt = labels.attempt_of(dict(write.labels))
        if out.get(write.uid) is None:
            out[write.uid] = attempt
    return out


def coexistence_violations(
    history: Iterable[Write], attempts: Mapping[str, int | None]
) -> list[str]:
    """Creations of attempt-N+1 objects while an object of an attempt ≤ N still existed.

    Replays the writes in resourceVersion order, keeping the set of live objects per attempt.
    Objects without an attempt (not created by Clearance) are ignored; an object that carries
    the AppWrapper label but whose attempt is unknown is itself reported.
    """
    alive: dict[str, tuple[int, str]] = {}
    violations: list[str] = []
    for write in sorted(history, key=lambda w: w.rv):
        if write.uid not in attempts:
            continue
        attempt = attempts[write.uid]
        if attempt is None:
            violations.append(f"{write.kind} {write.name} ({write.uid}) has no attempt label")
            continue
        if write.type == "ADDED":
            older = sorted(
                f"{kind_name} (attempt {a})" for a, kind_name in alive.values() if a < attempt
            )
            if older:
                violations.append(
                    f"rv {write.rv}: {write.kind} {write.name} of attempt {attempt} created "
                    f"while {', '.join(older)} existed"
                )
            alive[write.uid] = (attempt, f"{write.kind} {write.name}")
        elif write.type == "DELETED":
            alive.pop(write.uid, None)
    return violations


# ---------------------------------------------------------------------------- scenario


@dataclass
class Scenario:
    """A started stack plus the test's own clients and observers."""

    stack: LocalStack
    kube: Kube
    nc: NatsClient
    log: EventLog
    http: aiohttp.ClientSession
    ledgers: list[AttemptLedger] = field(default_factory=list)

    @classmethod
    async def open(cls, stack: LocalStack) -> Scenario:
        nc = await bus.connect(
            CommonSettings(nats_url=stack.nats_url, nats_reconnect_wait=0.1),
            name="e2e",
            first_connect_timeout=10,
        )
        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        log = await EventLog().start(nc)
        return cls(stack=stack, kube=kube, nc=nc, log=log, http=aiohttp.ClientSession())

    async def close(self) -> None:
        """Close the test's clients; a step that hangs is reported and skipped, never waited."""
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            *((f"ledger {ledger.selector}", ledger.stop) for ledger in self.ledgers),
            ("event log", self.log.stop),
            ("http session", self.http.close),
            ("kube client", self.kube.close),
            ("nats client", self.nc.close),
        ]
        for what, step in steps:
            try:
                async with asyncio.timeout(5):
                    await step()
            except TimeoutError:
                print(f"e2e: closing the {what} hung for 5 s; left behind")
            except Exception as exc:
                print(f"e2e: closing the {what} failed: {exc!r}")

    # -- actions

    async def submit(self, body: Mapping[str, Any], *, ledger: bool = True) -> str:
        """Create the AppWrapper (watching its objects first); returns its uid."""
        name = str(body["metadata"]["name"])
        if ledger:
            self.ledgers.append(await AttemptLedger(self.kube, name).start())
        raw = await self.kube.create(APPWRAPPERS, body, namespace=NAMESPACE)
        return str(msgspec.json.decode(raw, type=_Obj).metadata.uid)

    async def strip_finalizers(self, pod: str) -> None:
        """What the finalizer's owner does when its cleanup finally finishes."""
        await self.kube.patch(
            PODS,
            pod,
            [{"op": "remove", "path": "/metadata/finalizers"}],
            namespace=NAMESPACE,
            content_type="application/json-patch+json",
        )

    def lose_node(self, node: str) -> None:
        self.stack.kubesim_ctl("lose-node", node)

    # -- API views

    async def appwrapper(self, name: str) -> dict[str, Any]:
        raw = await self.kube.get(APPWRAPPERS, name, namespace=NAMESPACE)
        return msgspec.json.decode(raw, type=dict[str, Any])

    async def status(self, name: str) -> dict[str, Any]:
        return dict((await self.appwrapper(name)).get("status") or {})

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            raw = await self.kube.get(PODS, name, namespace=NAMESPACE)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise
        return msgspec.json.decode(raw, type=dict[str, Any])

    async def objects(self, appwrapper: str) -> list[ApiObject]:
        """Every object with the AppWrapper label, by quorum LIST (no resourceVersion)."""
        found: list[ApiObject] = []
        for resource in TRACKED:
            listed = await self.kube.list(
                resource, namespace=NAMESPACE, label_selector=labels.selector_for(appwrapper)
            )
            found.extend(_api_object(resource.kind, raw) for raw in listed.items)
        return found

    async def kube_events(self, appwrapper: str) -> list[dict[str, Any]]:
        """Kubernetes Events whose involved object is the AppWrapper."""
        listed = await self.kube.list(EVENTS, namespace=NAMESPACE)
        found = [msgspec.json.decode(raw, type=dict[str, Any]) for raw in listed.items]
        return [
            e
            for e in found
            if (e.get("involvedObject") or {}).get("kind") == "AppWrapper"
            and e["involvedObject"].get("name") == appwrapper
        ]

    async def raw_history(self) -> list[dict[str, Any]]:
        url = f"{self.stack.kubesim_url}/kubesim/v1/history"
        async with self.http.get(url, params={"namespace": NAMESPACE}) as response:
            response.raise_for_status()
            body = await response.json()
        return list(body["items"])

    async def history(self) -> list[Write]:
        return [Write.from_json(e) for e in await self.raw_history()]

    def attempts(self) -> dict[str, int | None]:
        merged: dict[str, int | None] = {}
        for ledger in self.ledgers:
            merged.update(ledger.attempts)
        return merged

    async def safety_violations(self) -> list[str]:
        """Safety (attempts) and Incarnations (DESIGN §5) from the write history."""
        raw = await self.raw_history()
        attempts = coexistence_violations([Write.from_json(e) for e in raw], self.attempts())
        return attempts + incarnation_violations(raw)

    async def safety_violations_per_appwrapper(self) -> list[str]:
        """The same check, per AppWrapper (label selector): with several AppWrappers, one's
        attempt 2 beside another's attempt 1 is no violation (DESIGN §5 is per AppWrapper)."""
        history = await self.history()
        return [
            f"{ledger.selector}: {violation}"
            for ledger in self.ledgers
            for violation in coexistence_violations(history, ledger.attempts)
        ]


def pod_state(pod: Mapping[str, Any] | None) -> str:
    if pod is None:
        return "absent"
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase", "Pending"))


def condition(status: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), None)


# ---------------------------------------------------------------------------- traces

CYCLE_CHILDREN = frozenset(
    {"teardown.delete", "deletion.await", "deletion.escalate", "cleared", "redispatch"}
)
"""Spans DESIGN §6 puts directly under ``requeue.cycle``."""


def span_attempt(span: ReceivedSpan) -> object:
    return span.attributes.get("clearance.attempt", span.attributes.get("attempt"))


def span_appwrapper(span: ReceivedSpan) -> object:
    return span.attributes.get(attributes.APPWRAPPER_NAME)


@functools.cache
def semconv_names() -> frozenset[str]:
    """Every attribute name the installed OpenTelemetry semantic conventions define."""
    names: set[str] = set()
    for package in (semconv_stable, semconv_incubating):
        for module in pkgutil.iter_modules(package.__path__):
            found = importlib.import_module(f"{package.__name__}.{module.name}")
            names.update(v for k, v in vars(found).items() if k.isupper() and isinstance(v, str))
    return frozenset(names)


def unconventional_attributes(trace: Sequence[ReceivedSpan]) -> list[str]:
    """``service: span: key`` for each attribute that is neither a semantic-convention name
    nor under our one ``clearance.`` namespace (issue 15 Build 5)."""
    return sorted(
        {
            f"{s.service}: {s.name}: {key}"
            for s in trace
            for key in s.attributes
            if not key.startswith("clearance.") and key not in semconv_names()
        }
    )


def orphans(trace: Sequence[ReceivedSpan]) -> list[ReceivedSpan]:
    ids = {s.span_id for s in trace}
    return [s for s in trace if s.parent_span_id is not None and s.parent_span_id not in ids]


async def check_cycle_trace(
    scenario: Scenario,
    appwrapper: str,
    attempt: int,
    *,
    closing: str | None = "redispatch",
    timeout: float = 10.0,
) -> list[ReceivedSpan]:
    """Assert DESIGN §6 on the trace of the cycle that tore down ``attempt``; return it.

    One ``requeue.cycle`` root (no parent) for this AppWrapper and attempt; its trace holds
    ``teardown.delete``, ``deletion.await``, ``cleared`` and ``closing`` (the span that ends the
    cycle), each a direct child of the root; spans from the dispatcher and the tracker; no
    orphan (every parent was exported); and no cycle span of this attempt in another trace.
    """
    receiver = scenario.stack.receiver
    assert receiver is not None, "the stack runs without a trace receiver"

    def roots() -> list[ReceivedSpan]:
        return [
            s
            for s in receiver.spans
            if s.name == "requeue.cycle"
            and span_appwrapper(s) == appwrapper
            and span_attempt(s) == attempt
        ]

    async def root_arrived() -> list[ReceivedSpan]:
        return roots()

    try:
        await eventually(
            root_arrived, timeout=timeout, what=f"requeue.cycle of {appwrapper} attempt {attempt}"
        )
    except AssertionError as exc:
        related: dict[str, list[str]] = {}
        for s in receiver.spans:
            if span_appwrapper(s) == appwrapper:
                related.setdefault(s.trace_id, []).append(f"{s.service}:{s.name}")
        raise AssertionError(f"{exc}; spans of {appwrapper} by trace: {related}") from None
    (root,) = roots()
    expected = {"teardown.delete", "deletion.await", "cleared"} | ({closing} if closing else set())

    async def complete() -> bool:
        trace = receiver.trace(root.trace_id)
        return {s.name for s in trace} >= expected and not orphans(trace)

    # Spans of different processes arrive in any order: give stragglers a moment.
    with contextlib.suppress(AssertionError):
        await eventually(complete, timeout=5, what="the whole trace")
    trace = receiver.trace(root.trace_id)
    print(f"trace of {appwrapper} attempt {attempt}:\n{waterfall(trace)}")  # shown on failure
    assert root.parent_span_id is None
    assert {s.name for s in trace} >= expected, sorted({s.name for s in trace})
    misplaced = [
        s.name for s in trace if s.name in CYCLE_CHILDREN and s.parent_span_id != root.span_id
    ]
    assert misplaced == [], misplaced
    lost = orphans(trace)
    assert lost == [], [
        f"{s.service}: {s.name} at +{(s.start_ns - root.start_ns) / 1e9:.2f}s, parent "
        f"{s.parent_span_id} never received"
        for s in lost
    ]
    assert {"clearance-dispatcher", "clearance-tracker"} <= {s.service for s in trace}
    unconventional = unconventional_attributes(trace)
    assert unconventional == [], unconventional
    strays = [
        s.name
        for s in receiver.spans
        if s.name in CYCLE_CHILDREN - {"redispatch"}
        and span_appwrapper(s) == appwrapper
        and span_attempt(s) == attempt
        and s.trace_id != root.trace_id
    ]
    assert strays == [], f"cycle spans of attempt {attempt} outside its trace: {strays}"
    return trace


# ------------------------------------------------------------------------ stacks

REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()

Launch = Callable[..., Awaitable[Scenario]]
"""The ``launch`` fixture: ``await launch(nodes=2, kubesim_flags=(...), env={...})``."""


def failed(node: pytest.Item) -> bool:
    reports = node.stash.get(REPORTS, {})
    return any(r.failed for r in reports.values())


def dump_logs(stack: LocalStack, *, tail: int = 60) -> None:
    """Print the tail of every process log (shown by pytest for failed tests)."""
    print(f"\n===== logs in {stack.workdir / 'logs'} =====")
    processes = {"kubesim": stack.kubesim, **stack.services}
    for name, process in processes.items():
        if process is None:
            continue
        print(f"----- {name} (last {tail} lines) -----")
        print(process.output(tail=tail))


def stack_config(
    workdir: Path,
    *,
    nodes: int = 2,
    kubesim_flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    service_env: Mapping[str, Mapping[str, str]] | None = None,
    crd: str | None = None,
    services: Sequence[str] | None = None,
) -> StackConfig:
    """The e2e defaults (short timings) with a scenario's additions."""
    return StackConfig(
        workdir=workdir,
        nodes=nodes,
        kubesim_flags=(*KUBESIM_FLAGS, *kubesim_flags),
        env={**SERVICE_ENV, **(env or {})},
        service_env=service_env or {},
        crd=crd,
        **({"services": tuple(services)} if services is not None else {}),
    )
