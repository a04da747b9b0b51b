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
and stops everything on exit or Ctrl-C. ``--workload pytorchjob`` runs the same story with the
seed's own example, a PyTorchJob (:mod:`clearance.trainingdemo`). With ``--workdir`` the demo
keeps, besides the logs, every cycle event and alert it saw (``events.jsonl``) and kubesim's
write history (``kubesim-history.json``), so the run can be judged from the outside afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from clearance import bus, events, hademo, narration, subjects
from clearance.kube import PODS, Kube, KubeConfig, KubeError, Resource
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig

NAMESPACE = "default"
APPWRAPPER = "seed-job"
POD = "seed-job-0"
FINALIZER = "demo.clearance.dev/volume-detach"
APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
Workload = Literal["pod", "pytorchjob"]
WORKLOADS: Final[tuple[Workload, ...]] = ("pod", "pytorchjob")
EVENTS_FILE: Final = "events.jsonl"
HISTORY_FILE: Final = "kubesim-history.json"
DRAIN_TIMEOUT_S: Final = 2.0
"""How long the demo waits for its NATS connection to drain before closing it."""

KUBESIM_FLAGS: tuple[str, ...] = (
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


async def _pod(kube: Kube) -> narration.PodView | None:
    try:
        return msgspec.json.decode(
            await kube.get(PODS, POD, namespace=NAMESPACE), type=narration.PodView
        )
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


async def _wait_pod(
    kube: Kube, predicate: Callable[[narration.PodView | None], bool], *, timeout: float, what: str
) -> narration.PodView | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = await _pod(kube)
        if predicate(pod):
            return pod
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


async def run_scenario(
    *,
    workdir: Path,
    stuck_for: timedelta,
    out: Callable[[str], None] = print,
    workload: Workload = "pod",
    ha: bool = False,
) -> int:
    narrator = narration.Narrator(out)
    # The PyTorchJob needs the CRD of kubesim's training-operator stand-in, and a third node:
    # losing one node of two would leave one node for four pods and the demo's story uneven.
    nodes, flags = 2, KUBESIM_FLAGS
    if workload == "pytorchjob":
        nodes, flags = (3, (*KUBESIM_FLAGS, "--builtin-crd", "pytorchjob"))
    nats = f"a {hademo.NATS_NODES}-node NATS cluster" if ha else "embedded nats-server"
    narrator.say(f"starting {nats}, kubesim ({nodes} nodes) and the three services …")
    stack = LocalStack(
        StackConfig(
            workdir=workdir,
            nodes=nodes,
            kubesim_flags=flags,
            env=SERVICE_ENV,
            nats_nodes=hademo.NATS_NODES if ha else 1,
        )
    )
    async with stack:
        if ha:
            hademo.add_replicas(stack, narrator)
        narrator.say(
            f"ready: NATS {stack.nats_url}, kubesim {stack.kubesim_url}, "
            + ", ".join(f"{n} :{p.http_port}" for n, p in stack.services.items())
        )
        settings = CommonSettings(nats_url=stack.nats_url)
        nc = await bus.connect(settings, name="clearance-demo", first_connect_timeout=10)
        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        queue: asyncio.Queue[events.Event] = asyncio.Queue()
        keep = (workdir / EVENTS_FILE).open("wb")
        followers = [
            asyncio.create_task(
                narration.follow(nc, subjects.CYCLE_STREAM, "clearance.cycle.v1.>", queue, keep)
            ),
            asyncio.create_task(
                narration.follow(nc, subjects.ALERT_STREAM, "clearance.alert.v1.>", queue, keep)
            ),
        ]
        try:
            if ha:
                await hademo.describe_topology(stack, narrator)
            if workload == "pytorchjob":
                from clearance.trainingdemo import pytorchjob_scenario

                await pytorchjob_scenario(stack, kube, queue, narrator, stuck_for)
            else:
                failed: list[str] = []

                async def fail() -> None:
                    failed.append(await hademo.fail_mid_cycle(stack, narrator))

                await _scenario(
                    stack, kube, queue, narrator, stuck_for, after_requeue=fail if ha else None
                )
                for node in failed:
                    await hademo.rejoin(stack, narrator, node)
            await narration.keep_history(stack, workdir / HISTORY_FILE)
        finally:
            for task in followers:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*followers, return_exceptions=True)
            await kube.close()
            # Bounded: after Ctrl-C the nats-server got the SIGINT too, and an unbounded
            # drain would wait out nats-py's 30 s drain timeout on a server that is gone.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(DRAIN_TIMEOUT_S):
                    await nc.drain()
            if not nc.is_closed:
                with contextlib.suppress(Exception):
                    await nc.close()
            keep.close()
        await narration.print_trace(stack, narrator)
        out("\nkey metrics:")
        for line in narration.metrics_summary(stack) or ["  (no metrics read)"]:
            out(line)
        narrator.say("stopping everything …")
    narrator.say("done: every process stopped")
    return 0


async def _scenario(
    stack: LocalStack,
    kube: Kube,
    queue: asyncio.Queue[events.Event],
    narrator: narration.Narrator,
    stuck_for: timedelta,
    *,
    after_requeue: Callable[[], Awaitable[None]] | None = None,
) -> None:
    narrator.step(
        f"submit AppWrapper {NAMESPACE}/{APPWRAPPER}: one pod, minAvailable 1, "
        "requeue wait 3s, stuck alert 3s, force delete 6s, pause 2s"
    )
    await kube.create(APPWRAPPERS, seed_appwrapper(), namespace=NAMESPACE)
    await narration.await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleDispatched), timeout=60,
        what="the first dispatch",
    )  # fmt: skip
    pod = await _wait_pod(
        kube, lambda p: narration.pod_state(p) == "Running", timeout=60, what="the pod to run"
    )
    assert pod is not None
    node = str(pod.spec.get("nodeName"))
    narrator.say(f"pod {POD} Running on {node} (attempt 1)")

    narrator.step(f"lose {node}: its kubelet stops (kubesim ctl lose-node {node})")
    stack.kubesim_ctl("lose-node", node)
    await _wait_pod(
        kube, lambda p: narration.pod_state(p) == "Terminating", timeout=60, what="the eviction"
    )
    narrator.say(
        f"pod {POD} evicted: Terminating, held by the dead kubelet and finalizer {FINALIZER}"
    )
    await narration.await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleTeardownStarted), timeout=60,
        what="the requeue",
    )  # fmt: skip
    if after_requeue is not None:
        await after_requeue()
    narrator.say(
        f"MCAD would now redispatch into the same pod name ('409 object is being deleted'); "
        f"Clearance holds attempt 2 until the pod is confirmed gone. Leaving it stuck for "
        f"{stuck_for.total_seconds():.0f}s …"
    )
    stuck_until = time.monotonic() + stuck_for.total_seconds()
    with contextlib.suppress(TimeoutError):
        await narration.await_event(
            queue, narrator, lambda e: False, timeout=stuck_for.total_seconds(), what="-"
        )
    if await _pod(kube) is None:
        raise RuntimeError("the stuck pod vanished on its own; the scenario is broken")
    narrator.say(f"after {stuck_for.total_seconds():.0f}s: still Terminating, still attempt 1")
    _ = stuck_until

    narrator.step(f"the volume finally detaches: its owner removes {FINALIZER} ({node} stays lost)")
    await narration.remove_finalizers(kube, POD, namespace=NAMESPACE)
    await _wait_pod(
        kube,
        lambda p: p is None or narration.pod_state(p) != "Terminating",
        timeout=30,
        what="the old pod to go",
    )
    narrator.say(f"old pod {POD} is gone from the API")
    await narration.await_event(
        queue, narrator, lambda e: isinstance(e, events.CycleRedispatched), timeout=60,
        what="the redispatch",
    )  # fmt: skip
    pod = await _wait_pod(
        kube, lambda p: narration.pod_state(p) == "Running", timeout=60, what="the new pod to run"
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


def run_demo(
    *,
    stuck_for: timedelta,
    workdir: str | None = None,
    workload: Workload = "pod",
    ha: bool = False,
) -> int:
    """Entry point of ``clearance demo``; returns the exit code."""
    path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="clearance-demo-"))
    try:
        code = asyncio.run(
            run_scenario(
                workdir=path,
                stuck_for=stuck_for,
                out=lambda s: print(s, flush=True),
                workload=workload,
                ha=ha,
            )
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
        print(f"logs, {EVENTS_FILE} and {HISTORY_FILE} kept in {path}", flush=True)
    return code
