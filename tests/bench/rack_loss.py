"""Rack loss (issue 16 Build 3, Acceptance 4): half the cluster's kubelets stop at once.

The whole system as deployed (:class:`~clearance.stack.LocalStack`: nats-server, ``kubesim
serve`` and the three services as processes). ``appwrappers`` gangs of ``pods`` pods
(minAvailable = pods) run spread over ``nodes`` nodes; then ``lost`` nodes stop their
heartbeats at the same moment (``POST /kubesim/v1/nodes/<n>/lose``, all in parallel). The node
lifecycle controller marks them NotReady and taints them, the taint evicts their pods — which
stay Terminating, since no kubelet is left to finish them — and the dispatcher requeues every
gang that lost a pod. Each of those teardowns is held until its force deadline (``teardown
.started`` + ``forceDeletionTimeInSeconds``, short here), when the tracker deletes the
remaining pods with grace 0, clears, and the dispatcher creates attempt N+1 on the surviving
nodes (each has room: ``--node-max-pods`` is sized for all gangs on half the nodes).

Before the loss the API server's own limit is switched on (``kubesim`` flow control: one
token bucket per User-Agent — one per service process, as API Priority and Fairness gives
each flow its queue — answering 429 with Retry-After), and every service runs with a client
rate limit (``CLEARANCE_KUBE_QPS`` / ``CLEARANCE_KUBE_BURST``). Everything judged is read
afterwards from the servers' records (:mod:`tests.bench.rack_analysis`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import pickle
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from tests.chaos.history import read_cycle_stream, read_history

from clearance import bus, events
from clearance.kube import Kube, KubeConfig
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig

from .clearance_latency import APPWRAPPERS, NAMESPACE, SERVICE_ENV, _close
from .common import progress
from .observing import CycleFollower, cycle_filter
from .rack_analysis import Limits, Request, breakdown, judge
from .rack_sampling import StormSampler

KUBESIM_FLAGS: tuple[str, ...] = (
    "--pod-start-delay", "50ms",
    "--kubelet-termination-delay", "300ms",
    "--heartbeat-interval", "1s",
    "--node-monitor-grace", "3s",
    "--node-monitor-period", "500ms",
    "--default-toleration", "1s",
    "--scheduler-retry", "200ms",
    "--bookmark-interval", "10s",
    "--node-cpu", "64",
    "--node-memory", "256Gi",
)  # fmt: skip


@dataclass(frozen=True)
class RackConfig:
    nodes: int = 64
    appwrappers: int = 500
    pods: int = 8
    lost: int = 32
    force_seconds: int = 5
    """``forceDeletionTimeInSeconds`` of every AppWrapper: the evicted pods' grace (30 s)
    outlasts it, so every teardown that lost a pod is held until it."""
    wait_seconds: int = 30
    """``requeuing.timeInSeconds``: pods are counted this long after a dispatch (long enough
    that no gang is requeued while the whole cluster is still starting up)."""
    qps: float = 200.0
    """Each service's client limit (CLEARANCE_KUBE_QPS)."""
    burst: int = 200
    server_qps: float = 200.0
    """kubesim's limit per User-Agent from the loss on (0: none). The judged run grants each
    service its own configured rate (as a platform team sizes API Priority and Fairness for a
    controller it runs); ``make bench`` runs the storm a second time with half of it, so that
    bursts meet 429s and the services must back off (docs/DECISIONS.md, rack loss)."""
    server_burst: int = 200
    redispatch_bound: float = 10.0
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment per service (a test-only fault, an experiment)."""
    settle_timeout: float = 300.0
    setup_timeout: float = 240.0
    """The gangs must all run within this; past it the run reports where the time went."""

    @property
    def max_pods(self) -> int:
        """Room for every gang on the surviving nodes, with a margin."""
        survivors = max(1, self.nodes - self.lost)
        return max(110, math.ceil(self.appwrappers * self.pods / survivors * 1.2) + 8)


def appwrapper(name: str, config: RackConfig) -> dict[str, Any]:
    """One gang of ``config.pods`` pods, all needed (minAvailable = pods); a 30 s grace."""
    items = []
    for i in range(config.pods):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-{i}"},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/trainer:1.0",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    }
                ],
            },
        }
        items.append(
            {
                "replicas": 1,
                "generictemplate": pod,
                "custompodresources": [
                    {"replicas": 1, "requests": {"cpu": "100m", "memory": "64Mi"}}
                ],
            }
        )
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "priority": 5,
            "schedulingSpec": {
                "minAvailable": config.pods,
                "requeuing": {
                    "timeInSeconds": config.wait_seconds,
                    "growthType": "none",
                    "maxNumRequeuings": 0,
                    "pauseTimeInSeconds": 0,
                    "stuckAlertTimeInSeconds": max(1, config.force_seconds - 2),
                    "forceDeletionTimeInSeconds": config.force_seconds,
                },
            },
            "resources": {"GenericItems": items},
        },
    }


class _Status(msgspec.Struct):
    phase: str = ""


class _Meta(msgspec.Struct, rename="camel"):
    deletion_timestamp: str | None = None


class _Spec(msgspec.Struct, rename="camel"):
    node_name: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


class _PodList(msgspec.Struct):
    items: list[_Pod]


async def _list_pods(kube: Kube) -> list[_Pod]:
    raw = await kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
    return msgspec.json.decode(raw, type=_PodList).items


async def _running_pods(kube: Kube) -> int:
    return sum(p.status.phase == "Running" for p in await _list_pods(kube))


async def _back_to_strength(kube: Kube, *, total: int, lost: set[str]) -> bool:
    """Exactly ``total`` pods, each Running on a surviving node and none Terminating: every
    gang the loss hit is back (not merely quiet: a gang whose pods the node controller
    evicts late is requeued only a requeuing wait later)."""
    pods = await _list_pods(kube)
    healthy = [
        p
        for p in pods
        if p.status.phase == "Running"
        and p.metadata.deletion_timestamp is None
        and p.spec.node_name not in lost
    ]
    return len(pods) == len(healthy) == total


async def _post(http: aiohttp.ClientSession, url: str, body: Any = None) -> Any:
    async with http.post(url, json=body) as answer:
        answer.raise_for_status()
        return await answer.json(content_type=None)


async def _requests(http: aiohttp.ClientSession, url: str) -> list[Request]:
    async with http.get(f"{url}/kubesim/v1/requests", params={"userAgent": "clearance-"}) as r:
        r.raise_for_status()
        body = await r.json()
    items = body["items"] if isinstance(body, dict) else body
    return [Request.from_json(e) for e in items]


async def _wait_running(kube: Kube, total: int, *, timeout: float) -> float:
    started = time.monotonic()
    last = -1
    while time.monotonic() - started < timeout:
        running = await _running_pods(kube)
        if running != last:
            progress(f"rack: {running}/{total} pods running")
            last = running
        if running >= total:
            return time.monotonic() - started
        # A LIST of every pod costs the simulator's one core: look less often when large.
        await asyncio.sleep(2.0 if total < 1000 else 5.0)
    raise TimeoutError(f"only {last}/{total} pods running after {timeout:.0f} s")


def _settled(follower: CycleFollower, quiet: float) -> bool:
    """Every torn-down gang redispatched, and no cycle event for ``quiet`` seconds."""
    torn: set[tuple[str, int]] = set()
    back: set[tuple[str, int]] = set()
    for seen in follower.seen:
        e = seen.event
        if isinstance(e, events.CycleTeardownStarted):
            torn.add((e.appwrapper.name, e.attempt))
        elif isinstance(e, events.CycleRedispatched):
            back.add((e.appwrapper.name, e.attempt - 1))
    if not torn or not torn <= back:
        return False
    return time.time() - max(s.arrived for s in follower.seen) > quiet


async def _wait_settled(
    kube: Kube, follower: CycleFollower, *, total: int, lost: set[str], timeout: float
) -> bool:
    """Until every torn-down gang is back, the cycle stream is quiet and every gang runs at
    full strength on the surviving nodes (False: not within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not await follower.wait_until(
            lambda: _settled(follower, quiet=3.0), timeout=remaining
        ):
            return False
        if await _back_to_strength(kube, total=total, lost=lost):
            return True
        await asyncio.sleep(2.0)


async def run(config: RackConfig) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="clearance-rack-"))
    total = config.appwrappers * config.pods
    env = {
        **SERVICE_ENV,
        "CLEARANCE_KUBE_QPS": str(config.qps),
        "CLEARANCE_KUBE_BURST": str(config.burst),
        # client-go's lease timings (the other benchmarks' 3 s lease is for fast failover):
        # a storm must not cost a leader its term.
        "CLEARANCE_LEASE_DURATION": "15s",
        "CLEARANCE_LEASE_RETRY_PERIOD": "2s",
        "CLEARANCE_LEASE_RETRY": "2s",
    }
    stack_config = StackConfig(
        workdir=workdir,
        nodes=config.nodes,
        kubesim_flags=(*KUBESIM_FLAGS, "--node-max-pods", str(config.max_pods)),
        env=env,
        service_env=config.service_env,
        traces=False,
    )
    progress(
        f"rack: {config.nodes} nodes, {config.appwrappers} AppWrappers x {config.pods} pods, "
        f"{config.lost} nodes to lose"
    )
    result: dict[str, Any] = {"config": {**config.__dict__, "max_pods": config.max_pods}}
    async with LocalStack(stack_config) as stack:
        assert stack.kubesim is not None and stack.nats is not None
        pids = {name: p.pid for name, p in stack.services.items() if p.pid}
        pids |= {"kubesim": stack.kubesim.pid or 0, "nats-server": stack.nats.pid or 0}
        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        nc = await bus.connect(
            CommonSettings(nats_url=stack.nats_url), name="bench", first_connect_timeout=10
        )
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        try:
            setup_began = time.time()
            setup_cpu = await StormSampler(pids, nats_monitor=stack.nats.monitor_url).start()
            for i in range(config.appwrappers):
                await kube.create(
                    APPWRAPPERS, appwrapper(f"rack-{i:03d}", config), namespace=NAMESPACE
                )
            try:
                result["setup_running_s"] = round(
                    await _wait_running(kube, total, timeout=config.setup_timeout), 1
                )
            except TimeoutError as exc:
                # Say where the time went (requests per service and verb, CPU per process)
                # instead of only that it ran out.
                result["setup_processes"] = (await setup_cpu.stop())["processes"]
                requests = await _requests(http, stack.kubesim_url)
                result["setup_requests"] = breakdown(requests, (setup_began, time.time()))
                result["failures"] = [f"setup: {exc}"]
                return result
            await setup_cpu.stop()
            # A gang whose requeuing wait is not over yet notices the loss when it ends: its
            # teardown (and force deadline) is later, which the figures allow for.
            await asyncio.sleep(2.0)
            flow: dict[str, Any] = {"resetCounters": True}
            if config.server_qps > 0:
                flow |= {
                    "rateLimit": config.server_qps,
                    "rateBurst": config.server_burst,
                    "rateScope": "user-agent",
                }
            await _post(http, f"{stack.kubesim_url}/kubesim/v1/flowcontrol", flow)
            follower = await CycleFollower(nc, cycle_filter(NAMESPACE)).start()
            sampler = await StormSampler(pids, nats_monitor=stack.nats.monitor_url).start()
            lost_at = time.time()
            names = [f"node-{i}" for i in range(1, config.lost + 1)]
            await asyncio.gather(
                *(_post(http, f"{stack.kubesim_url}/kubesim/v1/nodes/{n}/lose") for n in names)
            )
            progress(f"rack: {config.lost} nodes lost; waiting for every gang to come back")
            settled = await _wait_settled(
                kube, follower, total=total, lost=set(names), timeout=config.settle_timeout
            )
            ended_at = time.time()
            storm = await sampler.stop()
            await follower.stop()
            result["settled"] = settled
            result["storm_seconds"] = round(ended_at - lost_at, 1)
            async with http.get(f"{stack.kubesim_url}/kubesim/v1/flowcontrol") as answer:
                result["server_flow_control"] = await answer.json()
            progress("rack: reading the write history, the cycle stream and the request log")
            writes = await read_history(stack.kubesim_url)
            cycle, _bad = await read_cycle_stream(nc)
            requests = await _requests(http, stack.kubesim_url)
        finally:
            await http.close()
            await kube.close()
            await _close(nc)
        progress("rack: stopping the stack")
    # the raw inputs of the verdict, for reading one slow gang's timeline afterwards
    with (workdir / "raw.pickle").open("wb") as raw:
        pickle.dump(
            {"writes": writes, "cycle": cycle, "requests": requests, "window": (lost_at, ended_at)},
            raw,
        )
    verdict = judge(
        writes=writes,
        cycle=cycle,
        requests=requests,
        limits=Limits(
            qps=config.qps,
            burst=config.burst,
            force_seconds=config.force_seconds,
            redispatch_bound=config.redispatch_bound,
        ),
        window=(lost_at, ended_at),
    )
    if not settled:
        verdict.failures.append(f"not every gang was back within {config.settle_timeout:g} s")
    result |= verdict.figures
    result |= storm
    result["clock_sources"] = {
        "force_deadline": "teardown start carried by cycle.teardown.started (the dispatcher's "
        "clock, this host's) + forceDeletionTimeInSeconds, as the tracker counts it",
        "cleared": "JetStream store time of cycle.cleared",
        "redispatch": "kubesim API commit of the attempt N+1 pods' ADDED (write history)",
        "api_requests": "kubesim request log (server start time, by User-Agent)",
    }
    result["failures"] = verdict.failures
    with contextlib.suppress(Exception):
        result["workdir"] = str(workdir)
    return result
