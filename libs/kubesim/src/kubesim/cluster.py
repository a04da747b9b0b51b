"""The fake cluster: API server + controllers + fault injection, in one asyncio process.

`Cluster` starts the kubesim `ApiServer`, then the controllers of a real control plane as HTTP
clients of it (scheduler, one kubelet per node, node lifecycle, taint eviction, PodGC, garbage
collector, Job, ReplicaSet, Deployment, StatefulSet and PyTorchJob controllers, event
recording). Every timing is a `ClusterConfig` field whose
default is the real Kubernetes default where one exists, so tests shorten exactly the timings
they need. Node faults (`lose_node`, `recover_node`) are methods and HTTP routes
(`POST /kubesim/v1/nodes/{name}/lose|recover`) added to the API server's app before it starts.

    async with Cluster(ClusterConfig(nodes=2, node_monitor_grace=1.0)) as cluster:
        ...  # cluster.url, cluster.kubeconfig_path
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from kubesim.builtin_crds import builtin_crd_path
from kubesim.client import (
    CRDS,
    JOBS,
    LEASES,
    NODES,
    PODS,
    ApiError,
    Informer,
    KubeClient,
    Resource,
    cancel_tasks,
)
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.garbagecollector import BUILTIN_RESOURCES, GarbageCollector
from kubesim.controllers.job import JobController
from kubesim.controllers.kubelet import Kubelet, KubeletTimings, NodeShape
from kubesim.controllers.nodelifecycle import NodeLifecycleController, is_ready
from kubesim.controllers.objects import Obj
from kubesim.controllers.podgc import PodGCController
from kubesim.controllers.scheduler import Scheduler
from kubesim.controllers.tainteviction import TaintEvictionController
from kubesim.controllers.workloads import WorkloadControllers, workload_controllers
from kubesim.flowcontrol import FlowControlConfig
from kubesim.quantity import QuantityError, canonical_resource

__all__ = ["Cluster", "ClusterConfig", "ClusterError", "load_crd_documents"]

log = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """The cluster could not start (bad CRD file, nodes never ready, …)."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Shape and timings of the fake cluster. Durations are seconds.

    Real defaults are noted; fields without a real counterpart say so.
    """

    nodes: int = 3
    node_name_prefix: str = "node-"
    node_cpu: str = "8"
    node_memory: str = "32Gi"
    node_gpu: int = 0
    node_max_pods: int = 110  # kubelet --max-pods default
    # node-lifecycle-controller --node-monitor-grace-period (40s in-tree default; some
    # distributions and Kueue's KEP-6757 cite 50s).
    node_monitor_grace: float = 40.0
    node_monitor_period: float = 5.0  # --node-monitor-period, real 5s
    # DefaultTolerationSeconds admission: --default-not-ready-toleration-seconds and
    # --default-unreachable-toleration-seconds, real 300s.
    default_toleration: float = 300.0
    pod_start_delay: float = 1.0  # no real default: image pull + container start
    pod_run_time: float = 5.0  # no real default: how long Job pods' containers "run"
    # Cap on how long the kubelet takes to stop a deleted pod; the real kubelet takes as long
    # as the containers need, up to terminationGracePeriodSeconds (default 30s).
    kubelet_termination_delay: float = 1.0
    heartbeat_interval: float = 10.0  # kubelet Lease renew interval, real 10s (leaseDuration/4)
    node_status_report_frequency: float = 300.0  # kubelet --node-status-report-frequency, 5m
    node_lease_duration: int = 40  # kubelet --node-lease-duration-seconds, real 40
    podgc_period: float = 20.0  # PodGC gcCheckPeriod, real 20s (not a flag)
    podgc_quarantine: float = 40.0  # PodGC quarantineTime, real 40s (not a flag)
    terminated_pod_threshold: int = 12500  # --terminated-pod-gc-threshold, real 12500
    scheduler_retry: float = 1.0  # scheduler podInitialBackoffSeconds, real 1s
    model_full_disruption: bool = True  # stop NoExecute tainting when every node is down
    history_limit: int = 10_000
    # Kinds whose committed bodies the write history keeps ("*" all; kubesim.audit).
    audit_objects: tuple[str, ...] = ()
    bookmark_interval: float = 60.0  # apiserver watch bookmark frequency, real ~1 min
    crd_files: tuple[str, ...] = ()
    # Bundled CRDs to register after crd_files (kubesim.builtin_crds.BUILTIN_CRDS: "pytorchjob").
    builtin_crds: tuple[str, ...] = ()
    enable_controllers: bool = True
    node_labels: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # Request limits answered with 429 (kubesim.flowcontrol); all off by default.
    flow_control: FlowControlConfig = field(default_factory=FlowControlConfig)

    def node_names(self) -> list[str]:
        return [f"{self.node_name_prefix}{i}" for i in range(1, self.nodes + 1)]


def load_crd_documents(paths: Sequence[str | Path]) -> list[Obj]:
    """Read CRDs from YAML files (multi-document allowed); raise ClusterError with the reason."""
    crds: list[Obj] = []
    for raw in paths:
        path = Path(raw)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ClusterError(f"cannot read CRD file {path}: {exc.strerror or exc}") from exc
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise ClusterError(f"CRD file {path} is not valid YAML: {exc}") from exc
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise ClusterError(
                    f"CRD file {path} holds a {kind!s} document, expected CustomResourceDefinition"
                )
            crds.append(doc)
    return crds


class Cluster:
    """ApiServer + controllers; start with `await cluster.start()` or `async with`."""

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        kubeconfig_path: str | Path | None = None,
    ) -> None:
        from kubesim.apiserver import ApiServer  # the server module is the heavy import

        self.config = config or ClusterConfig()
        for name in ("node_cpu", "node_memory"):
            try:
                canonical_resource(getattr(self.config, name))
            except QuantityError as exc:
                raise ClusterError(f"{name} {getattr(self.config, name)!r}: {exc}") from exc
        self._kubeconfig_arg = Path(kubeconfig_path) if kubeconfig_path else None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path: Path = self._kubeconfig_arg or Path("kubeconfig")
        self.server = ApiServer(
            history_limit=self.config.history_limit,
            bookmark_interval=self.config.bookmark_interval,
            default_toleration_seconds=int(self.config.default_toleration),
            flow_control=self.config.flow_control,
        )
        self.server.store.audit_objects = frozenset(k.strip() for k in self.config.audit_objects)
        self.url = ""
        self.client: KubeClient | None = None
        self.kubelets: dict[str, Kubelet] = {}
        self.informers: dict[Resource, Informer] = {}
        self.recorder: EventRecorder | None = None
        self.scheduler: Scheduler | None = None
        self.node_lifecycle: NodeLifecycleController | None = None
        self.taint_eviction: TaintEvictionController | None = None
        self.podgc: PodGCController | None = None
        self.garbage_collector: GarbageCollector | None = None
        self.job_controller: JobController | None = None
        self.workloads: WorkloadControllers | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        try:
            builtin = [builtin_crd_path(name) for name in self.config.builtin_crds]
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from exc
        self._crds = load_crd_documents([*self.config.crd_files, *builtin])
        self._add_routes(self.server.app)

    # ---- fault injection -------------------------------------------------------------------
    def lose_node(self, name: str) -> None:
        """The node's kubelet stops everything: heartbeats, status, pod processing."""
        self._kubelet(name).lose()

    def recover_node(self, name: str) -> None:
        """The kubelet comes back (re-registering its Node if it was deleted meanwhile)."""
        kubelet = self._kubelet(name)
        kubelet.recover()
        self._tasks.append(asyncio.get_running_loop().create_task(self._reregister(kubelet)))

    async def _reregister(self, kubelet: Kubelet) -> None:
        with contextlib.suppress(Exception):
            await kubelet.ensure_registered()

    def _kubelet(self, name: str) -> Kubelet:
        try:
            return self.kubelets[name]
        except KeyError:
            raise KeyError(f"no kubelet for node {name!r}") from None

    def _add_routes(self, app: web.Application) -> None:
        async def lose(request: web.Request) -> web.Response:
            return self._node_fault(request.match_info["name"], lose=True)

        async def recover(request: web.Request) -> web.Response:
            return self._node_fault(request.match_info["name"], lose=False)

        async def nodes(request: web.Request) -> web.Response:
            return web.json_response(
                {"items": [{"name": n, "lost": k.lost} for n, k in sorted(self.kubelets.items())]}
            )

        app.router.add_post("/kubesim/v1/nodes/{name}/lose", lose)
        app.router.add_post("/kubesim/v1/nodes/{name}/recover", recover)
        app.router.add_get("/kubesim/v1/nodes", nodes)

    def _node_fault(self, name: str, *, lose: bool) -> web.Response:
        if name not in self.kubelets:
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f'no fake kubelet for node "{name}"',
                    "reason": "NotFound",
                    "details": {"name": name, "kind": "nodes"},
                    "code": 404,
                },
                status=404,
            )
        if lose:
            self.lose_node(name)
        else:
            self.recover_node(name)
        return web.json_response({"node": name, "lost": lose})

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start the API server, preload CRDs, start controllers, wait for Ready nodes."""
        try:
            self.url = await self.server.start(host=host, port=port)
            if self._kubeconfig_arg is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="kubesim-")
                self.kubeconfig_path = Path(self._tmpdir.name) / "kubeconfig"
            self.server.write_kubeconfig(self.kubeconfig_path)
            self.client = KubeClient(self.url)
            await self._preload_crds()
            if self.config.enable_controllers:
                await self._start_controllers()
        except BaseException:
            await self.stop()
            raise
        return self.url

    async def _preload_crds(self) -> None:
        assert self.client is not None
        for crd in self._crds:
            try:
                await self.client.create(CRDS.path(), crd)
            except ApiError as exc:
                if exc.status == 409:
                    continue
                name = (crd.get("metadata") or {}).get("name")
                raise ClusterError(f"CRD {name} rejected by the API server: {exc.message}") from exc

    def _spawn(self, coro: Any) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def _start_controllers(self) -> None:
        client = self.client
        assert client is not None
        cfg = self.config
        pods = Informer(client, PODS)
        pods.add_indexer(
            "node",
            lambda p: [str(p["spec"]["nodeName"])] if (p.get("spec") or {}).get("nodeName") else [],
        )
        nodes = Informer(client, NODES)
        leases = Informer(client, LEASES, namespace="kube-node-lease")
        jobs = Informer(client, JOBS)
        crds = Informer(client, CRDS)
        self.informers = {PODS: pods, NODES: nodes, LEASES: leases, JOBS: jobs}
        for resource in BUILTIN_RESOURCES:
            if not any(
                r.plural == resource.plural and r.group == resource.group for r in self.informers
            ):
                self.informers[resource] = Informer(client, resource)
        recorder = self.recorder = EventRecorder(client)
        self._spawn(recorder.run())

        timings = KubeletTimings(
            pod_start_delay=cfg.pod_start_delay,
            pod_run_time=cfg.pod_run_time,
            termination_delay=cfg.kubelet_termination_delay,
            heartbeat_interval=cfg.heartbeat_interval,
            node_status_report_frequency=cfg.node_status_report_frequency,
            lease_duration_seconds=cfg.node_lease_duration,
        )
        for index, name in enumerate(cfg.node_names()):
            shape = NodeShape(
                name=name,
                index=index,
                cpu=cfg.node_cpu,
                memory=cfg.node_memory,
                gpu=cfg.node_gpu,
                max_pods=cfg.node_max_pods,
                labels=dict(cfg.node_labels),
            )
            self.kubelets[name] = Kubelet(
                client, shape=shape, pods=pods, nodes=nodes, recorder=recorder, timings=timings
            )
        self.scheduler = Scheduler(
            client, pods=pods, nodes=nodes, recorder=recorder, retry_interval=cfg.scheduler_retry
        )
        self.node_lifecycle = NodeLifecycleController(
            client,
            nodes=nodes,
            leases=leases,
            pods=pods,
            recorder=recorder,
            monitor_grace=cfg.node_monitor_grace,
            monitor_period=cfg.node_monitor_period,
            model_full_disruption=cfg.model_full_disruption,
        )
        self.taint_eviction = TaintEvictionController(
            client, nodes=nodes, pods=pods, recorder=recorder
        )
        self.podgc = PodGCController(
            client,
            pods=pods,
            nodes=nodes,
            gc_check_period=cfg.podgc_period,
            quarantine=cfg.podgc_quarantine,
            terminated_threshold=cfg.terminated_pod_threshold,
        )
        self.garbage_collector = GarbageCollector(client, informers=self.informers, crds=crds)
        self.job_controller = JobController(client, jobs=jobs, pods=pods, recorder=recorder)
        self.workloads = workload_controllers(
            client, informers=self.informers, crds=crds, recorder=recorder
        )

        for informer in [*self.informers.values(), crds]:
            self._spawn(informer.run())
        async with asyncio.timeout(30):
            await asyncio.gather(*(i.synced.wait() for i in (pods, nodes, leases, jobs)))
        await asyncio.gather(*(k.register() for k in self.kubelets.values()))
        for kubelet in self.kubelets.values():
            self._spawn(kubelet.run())
            self._spawn(kubelet.run_heartbeats())
        for controller in (
            self.scheduler,
            self.node_lifecycle,
            self.taint_eviction,
            self.podgc,
            self.garbage_collector,
            self.job_controller,
            *self.workloads.all(),
        ):
            self._spawn(controller.run())
        await self.wait_nodes_ready(timeout=30)

    async def wait_nodes_ready(self, *, timeout: float = 30.0) -> None:
        """Until every non-lost node is Ready in the controllers' cache."""
        nodes = self.informers[NODES]
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            ready = {str(n["metadata"]["name"]) for n in nodes.items() if is_ready(n)}
            wanted = {n for n, k in self.kubelets.items() if not k.lost}
            if wanted <= ready:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise ClusterError(f"nodes not ready after {timeout}s: {sorted(wanted - ready)}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_tasks(tasks)
        if self.garbage_collector is not None:
            await self.garbage_collector.stop()
        if self.workloads is not None:
            await self.workloads.stop()
        if self.client is not None:
            await self.client.close()
            self.client = None
        with contextlib.suppress(Exception):
            await self.server.stop()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
