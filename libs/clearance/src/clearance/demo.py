"""``clearance demo``: the seed scenario of MCAD issue #599, end to end, narrated.

One AppWrapper with one pod (minAvailable 1) runs on a node that is then lost; the pod is
evicted and stays ``Terminating`` because its node cannot confirm and a finalizer holds it; it
outlives every deadline. (The cluster has two nodes: with every node of a zone down, the real
node lifecycle controller enters full-disruption mode and evicts nothing, and kubesim is
faithful to that.) Without Clearance, MCAD would redispatch into the same pod name and requeue
forever. With Clearance the job waits in ``AwaitingDeletion``: one alert per escalation step,
no churn. When the pod finally goes (the node comes back and the finalizer's owner finishes),
``cleared`` follows at once and the job runs again under the same names, requeued once.

Everything runs as separate processes on loopback (embedded nats-server, kubesim, the three
services); the demo itself is just another client: it narrates what it reads from NATS and
the API, prints the alerts as they arrive, the cycle's trace as a waterfall and key metrics,
and stops everything on exit or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec

from clearance import bus, events, subjects
from clearance.kube import PODS, Kube, KubeConfig, KubeError, Resource
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig
from clearance.tailing import describe

NAMESPACE = "default"
APPWRAPPER = "seed-job"
POD = "seed-job-0"
FINALIZER = "demo.clearance.dev/volume-detach"
APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")

KUBESIM_FLAGS = (
    "--node-monitor-grace", "2s",
    "--node-monitor-period", "500ms",
    "--default-toleration", "2s",
    "--pod-start-delay", "500ms",
    "--heartbeat-interval", "500ms",
    "--kubelet-termination-delay", "500ms",
    "--bookmark-interval", "5s",
)  # fmt: skip

SERVICE_ENV = {
    "CLEARANCE_LOG_LEVEL": "INFO",
    "CLEARANCE_LEASE_DURATION": "3s",
    "CLEARANCE_LEASE_RETRY_PERIOD": "500ms",
    "CLEARANCE_LEASE_RETRY": "500ms",
    "CLEARANCE_VERIFY_INTERVAL": "1s",
    "CLEARANCE_SCAN_INTERVAL": "500ms",
    "CLEARANCE_MONITOR_INTERVAL": "500ms",
    "CLEARANCE_QUEUE_SCAN_INTERVAL": "500ms",
    # Export spans within a fraction of a second so the waterfall is complete at the end.
    "OTEL_BSP_SCHEDULE_DELAY": "200",
}


def seed_appwrapper() -> dict[str, Any]:
    """The AppWrapper users would submit to MCAD, plus Clearance's teardown fields."""
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": APPWRAPPER, "namespace": NAMESPACE},
        "spec": {
            "priority": 5,
            "schedulingSpec": {
                "minAvailable": 1,
                "requeuing": {
                    "timeInSeconds": 3,
                    "growthType": "exponential",
                    "maxNumRequeuings": 5,
                    "pauseTimeInSeconds": 2,
                    "stuckAlertTimeInSeconds": 3,
                    "forceDeletionTimeInSeconds": 6,
                    "finalizerRemoval": "Never",
                },
            },
            "resources": {
                "GenericItems": [
                    {
                        "replicas": 1,
                        "custompodresources": [
                            {"replicas": 1, "requests": {"cpu": "1", "memory": "1Gi"}}
                        ],
                        "generictemplate": {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "metadata": {"name": POD, "finalizers": [FINALIZER]},
                            "spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 5,
                                "containers": [
                                    {
                                        "name": "trainer",
                                        "image": "registry.example/trainer:1.0",
                                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                    }
                                ],
                            },
                        },
                    }
                ]
            },
        },
    }


class _PodView(msgspec.Struct):
    metadata: dict[str, Any]
    spec: dict[str, Any] = msgspec.field(default_factory=dict)
    status: dict[str, Any] = msgspec.field(default_factory=dict)


class Narrator:
    """Timestamped lines relative to the demo's start."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.started = time.monotonic()
        self.out = out

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def step(self, text: str) -> None:
        self.say(f">>> {text}")


async def _pod(kube: Kube) -> _PodView | None:
    try:
        return msgspec.json.decode(await kube.get(PODS, POD, namespace=NAMESPACE), type=_PodView)
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


def _pod_state(pod: _PodView | None) -> str:
    if pod is None:
        return "absent"
    if pod.metadata.get("deletionTimestamp"):
        return "Terminating"
    return str(pod.status.get("phase", "Pending"))


async def _wait_pod(
    kube: Kube, predicate: Callable[[_PodView | None], bool], *, timeout: float, what: str
) -> _PodView | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = await _pod(kube)
        if predicate(pod):
            return pod
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


async def _follow(nc: Any, stream: str, subject: str, sink: asyncio.Queue[events.Event]) -> None:
    from nats.js import api

    js = nc.jetstream()
    sub = await js.subscribe(
        subject,
        stream=stream,
        ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                continue
            with contextlib.suppress(events.EventDecodeError):
                await sink.put(events.decode(msg.data))
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _await_event(
    queue: asyncio.Queue[events.Event],
    narrator: Narrator,
    predicate: Callable[[events.Event], bool],
    *,
    timeout: float,
    what: str,
) -> events.Event:
    """Narrate every cycle event and alert until one matches ``predicate``."""
    async with asyncio.timeout(timeout):
        while True:
            event = await queue.get()
            if isinstance(event, events.AlertEvent):
                narrator.say(f"ALERT {describe(event)}")
            elif isinstance(event, events.CycleEvent):
                narrator.say(f"cycle {describe(event)}")
            if predicate(event):
                return event
    raise TimeoutError(what)  # pragma: no cover - asyncio.timeout raises first


def _metrics_summary(stack: LocalStack) -> list[str]:
    wanted = (
        "clearance_dispatcher_requeues_total",
        "clearance_dispatcher_dispatches_total",
        "clearance_dispatcher_redispatch_latency_seconds_sum",
        "clearance_tracker_teardowns_started_total",
        "clearance_cleared_total",
        "clearance_escalations_total",
        "clearance_objects_stuck ",
        "clearance_teardown_duration_seconds_sum",
        "clearance_tracker_confirmations_total",
        "clearance_watcher_tombstones_total",
        "clearance_watcher_relists_total",
    )
    lines: list[str] = []
    for name, process in stack.services.items():
        with contextlib.suppress(OSError):
            status, body = process.http_get("/metrics")
            if status != 200:
                continue
            for line in body.splitlines():
                if line.startswith(wanted):
                    lines.append(f"  {name:<11} {line}")
    return lines


async def run_scenario(
    *, workdir: Path, stuck_for: timedelta, out: Callable[[str], None] = print
) -> int:
    narrator = Narrator(out)
    narrator.say("starting embedded nats-server, kubesim (2 nodes) and the three services …")
    stack = LocalStack(
        StackConfig(workdir=workdir, nodes=2, kubesim_flags=KUBESIM_FLAGS, env=SERVICE_ENV)
    )
    async with stack:
        narrator.say(
            f"ready: NATS {stack.nats_url}, kubesim {stack.kubesim_url}, "
            + ", ".join(f"{n} :{p.http_port}" for n, p in stack.services.items())
        )
        settings = CommonSettings(nats_url=stack.nats_url)
        nc = await bus.connect(settings, name="clearance-demo", first_connect_timeout=10)
        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        queue: asyncio.Queue[events.Event] = asyncio.Queue()
        followers = [
            asyncio.create_task(_follow(nc, subjects.CYCLE_STREAM, "clearance.cycle.v1.>", queue)),
            asyncio.create_task(_follow(nc, subjects.ALERT_STREAM, "clearance.alert.v1.>", queue)),
        ]
        try:
            await _scenario(stack, kube, queue, narrator, stuck_for)
        finally:
            for task in followers:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*followers, return_exceptions=True)
            await kube.close()
            with contextlib.suppress(Exception):
                await nc.drain()
        await _print_trace(stack, narrator)
        out("\nkey metrics:")
        for line in _metrics_summary(stack) or ["  (no metrics read)"]:
            out(line)
        narrator.say("stopping everything …")
    narrator.say("done: every process stopped")
    return 0


async def _scenario(
    stack: LocalStack,
    kube: Kube,
    queue: asyncio.Queue[events.Event],
    narrator: Narrator,
    stuck_for: timedelta,
) -> None:
    narrator.step(
        f"submit AppWrapper {NAMESPACE}/{APPWRAPPER}: one pod, minAvailable 1, "
        "requeue wait 3s, stuck alert 3s, force delete 6s, pause 2s"
    )
    await kube.create(APPWRAPPERS, seed_appwrapper(), namespace=NAMESPACE)
    await _await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleDispatched), timeout=60,
        what="the first dispatch",
    )  # fmt: skip
    pod = await _wait_pod(
        kube, lambda p: _pod_state(p) == "Running", timeout=60, what="the pod to run"
    )
    assert pod is not None
    node = str(pod.spec.get("nodeName"))
    narrator.say(f"pod {POD} Running on {node} (attempt 1)")

    narrator.step(f"lose {node}: its kubelet stops (kubesim ctl lose-node {node})")
    stack.kubesim_ctl("lose-node", node)
    await _wait_pod(kube, lambda p: _pod_state(p) == "Terminating", timeout=60, what="the eviction")
    narrator.say(
        f"pod {POD} evicted: Terminating, held by the dead kubelet and finalizer {FINALIZER}"
    )
    await _await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleTeardownStarted), timeout=60,
        what="the requeue",
    )  # fmt: skip
    narrator.say(
        f"MCAD would now redispatch into the same pod name ('409 object is being deleted'); "
        f"Clearance holds attempt 2 until the pod is confirmed gone. Leaving it stuck for "
        f"{stuck_for.total_seconds():.0f}s …"
    )
    stuck_until = time.monotonic() + stuck_for.total_seconds()
    with contextlib.suppress(TimeoutError):
        await _await_event(
            queue, narrator, lambda e: False, timeout=stuck_for.total_seconds(), what="-"
        )
    if await _pod(kube) is None:
        raise RuntimeError("the stuck pod vanished on its own; the scenario is broken")
    narrator.say(f"after {stuck_for.total_seconds():.0f}s: still Terminating, still attempt 1")
    _ = stuck_until

    narrator.step(f"the volume finally detaches: its owner removes {FINALIZER} ({node} stays lost)")
    await kube.patch(
        PODS,
        POD,
        [{"op": "remove", "path": "/metadata/finalizers"}],
        namespace=NAMESPACE,
        content_type="application/json-patch+json",
    )
    await _wait_pod(kube, lambda p: p is None or _pod_state(p) != "Terminating", timeout=30,
                    what="the old pod to go")  # fmt: skip
    narrator.say(f"old pod {POD} is gone from the API")
    await _await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleRedispatched), timeout=60,
        what="the redispatch",
    )  # fmt: skip
    pod = await _wait_pod(
        kube, lambda p: _pod_state(p) == "Running", timeout=60, what="the new pod to run"
    )
    assert pod is not None
    labels = pod.metadata.get("labels", {})
    narrator.say(
        f"pod {POD} Running again on {pod.spec.get('nodeName')}, same name, "
        f"attempt {labels.get('clearance.dev/attempt')}"
    )
    aw = msgspec.json.decode(
        await kube.get(APPWRAPPERS, APPWRAPPER, namespace=NAMESPACE), type=dict[str, Any]
    )
    status = aw.get("status", {})
    narrator.say(
        f"AppWrapper state {status.get('state')}, requeues {status.get('numberOfRequeueings')}"
    )


async def _print_trace(stack: LocalStack, narrator: Narrator) -> None:
    receiver = stack.receiver
    if receiver is None:
        return
    from clearance.traces import waterfall

    with contextlib.suppress(TimeoutError):
        await receiver.wait_for("redispatch", timeout=10)
    roots = [s for s in receiver.spans if s.name == "requeue.cycle"]
    if not roots:
        narrator.say("no requeue.cycle trace received (is tracing enabled in the services?)")
        return
    spans = receiver.trace(roots[0].trace_id)
    services = sorted({s.service for s in spans})
    narrator.say(
        f"trace {roots[0].trace_id}: {len(spans)} spans from {len(services)} services "
        f"({', '.join(services)})"
    )
    narrator.out(waterfall(spans))


def run_demo(*, stuck_for: timedelta, workdir: str | None = None) -> int:
    """Entry point of ``clearance demo``; returns the exit code."""
    path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="clearance-demo-"))
    try:
        code = asyncio.run(
            run_scenario(workdir=path, stuck_for=stuck_for, out=lambda s: print(s, flush=True))
        )
    except KeyboardInterrupt:
        print("\ninterrupted: every process was stopped", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"logs kept in {path / 'logs'}", file=sys.stderr)
        return 1
    if workdir is None:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"logs kept in {path / 'logs'}", flush=True)
    return code
