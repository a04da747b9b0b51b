"""A fake kubelet per node: Node registration, Lease/Ready heartbeats, the pod lifecycle.

What a real kubelet shows the API, without containers: it registers its Node (capacity,
allocatable, conditions, addresses, nodeInfo), renews its Lease in `kube-node-lease` every
`heartbeat_interval` and re-posts node status on change or every
`node_status_report_frequency`; it moves pods bound to it Pending → Running after
`pod_start_delay` with complete container statuses; run-to-completion pods finish after
`pod_run_time`; a pod with a `deletionTimestamp` is stopped after min(grace,
`termination_delay`), given a terminal status, then removed with the kubelet's final
`DELETE gracePeriodSeconds=0` with a UID precondition. A *lost* kubelet does nothing at all,
which is exactly what leaves pods Terminating forever (reference §1.1).

The per-pod decision is the pure function `decide_pod_step`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesim.client import LEASES, NODES, PODS, ApiError, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import (
    Obj,
    controller_ref,
    format_micro_time,
    format_time,
    is_terminal,
    parse_time,
    set_condition,
)
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_status
from kubesim.durations import DurationError, parse_duration
from kubesim.quantity import canonical_resource

__all__ = [
    "EXIT_CODE_ANNOTATION",
    "RUN_TIME_ANNOTATION",
    "Kubelet",
    "KubeletTimings",
    "NodeShape",
    "PodStep",
    "decide_pod_step",
    "run_time_of",
]

log = logging.getLogger(__name__)

RUN_TIME_ANNOTATION = "kubesim.dev/run-time"
EXIT_CODE_ANNOTATION = "kubesim.dev/exit-code"
NODE_CONDITIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
KUBELET_VERSION = "v1.32.0"
# Exit code of a container stopped by SIGTERM (128 + 15): a killed pod ends Failed, which is also
# what the real kubelet reports for a deleted running pod whose process does not trap SIGTERM.
KILLED_EXIT_CODE = 143


@dataclass(frozen=True, slots=True)
class KubeletTimings:
    """Per-node timings; see `ClusterConfig` for the real defaults."""

    pod_start_delay: float = 1.0
    pod_run_time: float = 5.0
    termination_delay: float = 1.0
    heartbeat_interval: float = 10.0
    node_status_report_frequency: float = 300.0
    lease_duration_seconds: int = 40


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What a node looks like: name, resources, labels, addresses, pod CIDR."""

    name: str
    index: int
    cpu: str = "8"
    memory: str = "32Gi"
    gpu: int = 0
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def internal_ip(self) -> str:
        return f"10.0.{self.index // 250}.{self.index % 250 + 2}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"


@dataclass(slots=True)
class PodRecord:
    """What this kubelet remembers about one pod (by UID), as the real pod workers do."""

    seen_at: float
    started_at: float | None = None
    deletion_seen_at: float | None = None
    killing_reported: bool = False


@dataclass(frozen=True, slots=True)
class PodStep:
    """`action` is one of initialize, start, complete, stop, delete, or None (wait)."""

    action: str | None
    next_at: float | None = None


def run_time_of(pod: Mapping[str, Any], *, default: float) -> float | None:
    """How long the pod's containers run before exiting, or None for "until deleted".

    Job-owned pods run for `default` (`--pod-run-time`); any pod with restartPolicy Never or
    OnFailure can set the `kubesim.dev/run-time` annotation (a duration) to finish on its own.
    restartPolicy Always pods never complete (their containers would be restarted).
    """
    spec = pod.get("spec") or {}
    if (spec.get("restartPolicy") or "Always") == "Always":
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(RUN_TIME_ANNOTATION)
    if raw is not None:
        try:
            return max(0.0, parse_duration(str(raw)))
        except DurationError:
            return default
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "Job":
        return default
    return None


def decide_pod_step(
    pod: Mapping[str, Any],
    record: PodRecord,
    *,
    now: float,
    timings: KubeletTimings,
) -> PodStep:
    """The next thing the kubelet does for `pod`, given what it remembers and the time."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        if is_terminal(pod):
            return PodStep("delete")
        seen = record.deletion_seen_at if record.deletion_seen_at is not None else now
        grace = meta.get("deletionGracePeriodSeconds")
        grace_s = float(grace) if isinstance(grace, int | float) else 0.0
        due = seen + max(0.0, min(grace_s, timings.termination_delay))
        return PodStep("stop") if now >= due else PodStep(None, due)
    if is_terminal(pod):
        return PodStep(None)
    if phase == "Pending":
        if not status.get("startTime") and timings.pod_start_delay > 0:
            return PodStep("initialize", record.seen_at + timings.pod_start_delay)
        due = record.seen_at + timings.pod_start_delay
        return PodStep("start") if now >= due else PodStep(None, due)
    if phase == "Running":
        run_time = run_time_of(pod, default=timings.pod_run_time)
        if run_time is None:
            return PodStep(None)
        started = record.started_at
        if started is None:
            started = _container_started_at(pod) or now
            record.started_at = started
        due = started + run_time
        return PodStep("complete") if now >= due else PodStep(None, due)
    return PodStep(None)


def _container_started_at(pod: Mapping[str, Any]) -> float | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        started = parse_time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
        if started is not None:
            return started
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    return f"{repo}@sha256:{_digest(image)}"


def qos_class(pod: Mapping[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort from requests and limits (cpu and memory)."""
    containers = [
        *((pod.get("spec") or {}).get("containers") or []),
        *((pod.get("spec") or {}).get("initContainers") or []),
    ]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class Kubelet(Reconciler):
    """One node's kubelet. `lose()` freezes it; `recover()` brings it back."""

    def __init__(
        self,
        client: KubeClient,
        *,
        shape: NodeShape,
        pods: Informer,
        nodes: Informer,
        recorder: EventRecorder,
        timings: KubeletTimings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=None, clock=clock)
        self.name = f"kubelet/{shape.name}"
        self.client = client
        self.shape = shape
        self.pods = pods
        self.nodes = nodes
        self.recorder = recorder
        self.timings = timings
        self.lost = False
        self.registered = asyncio.Event()
        self._records: dict[str, PodRecord] = {}
        self._ip_counter = 0
        self._lease: Obj | None = None
        self._last_status_report = 0.0
        self._heartbeat_wake = asyncio.Event()
        self._boot_id = _digest(f"{shape.name}-{clock()}")[:32]
        pods.add_handler(self._on_pod)
        nodes.add_handler(self._on_node)

    # ---- fault injection -------------------------------------------------------------------
    def lose(self) -> None:
        """Stop everything: no heartbeat, no status, no pod processing (a dead or cut-off node)."""
        self.lost = True

    def recover(self) -> None:
        """Resume like a restarted kubelet: re-register if needed, heartbeat now, resync pods."""
        self.lost = False
        for record in self._records.values():
            record.deletion_seen_at = None  # a restarted kubelet starts grace periods afresh
            record.killing_reported = False
        self._last_status_report = 0.0
        self._heartbeat_wake.set()
        self.trigger()

    # ---- informer handlers -----------------------------------------------------------------
    def _on_pod(self, kind: str, pod: Obj) -> None:
        if (pod.get("spec") or {}).get("nodeName") != self.shape.name:
            return
        if kind == "DELETED":
            self._records.pop(str(pod["metadata"].get("uid")), None)
        self.trigger()

    def _on_node(self, kind: str, node: Obj) -> None:
        if (node.get("metadata") or {}).get("name") != self.shape.name:
            return
        ready = next(
            (
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            None,
        )
        # The kubelet re-posts status as soon as what is stored differs from its own view
        # (e.g. the node lifecycle controller marked it Unknown, or the Node was re-created).
        if kind == "DELETED" or ready is None or ready.get("status") != "True":
            self._heartbeat_wake.set()

    # ---- node registration and heartbeats ----------------------------------------------------
    def node_object(self) -> Obj:
        now = self.clock()
        capacity: dict[str, str] = {
            # As the API server stores them, so re-posting status is a no-op when unchanged.
            "cpu": canonical_resource(self.shape.cpu),
            "memory": canonical_resource(self.shape.memory),
            "pods": str(self.shape.max_pods),
            "ephemeral-storage": "100Gi",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        }
        if self.shape.gpu:
            capacity["nvidia.com/gpu"] = str(self.shape.gpu)
        labels = {
            "kubernetes.io/hostname": self.shape.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "kubesim",
            **dict(self.shape.labels),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.shape.name,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kubesim.dev/node": "fake"},
            },
            "spec": {"podCIDR": self.shape.pod_cidr, "podCIDRs": [self.shape.pod_cidr]},
            "status": self._node_status(now, capacity=capacity),
        }

    def _node_status(self, now: float, *, capacity: Mapping[str, str]) -> Obj:
        conditions: list[Obj] = []
        for kind, status, reason, message in NODE_CONDITIONS:
            set_condition(
                conditions,
                kind=kind,
                status=status,
                reason=reason,
                message=message,
                now=now,
                heartbeat=True,
            )
        return {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.shape.internal_ip},
                {"type": "Hostname", "address": self.shape.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _digest(f"machine-{self.shape.name}")[:32],
                "systemUUID": _digest(f"uuid-{self.shape.name}")[:32],
                "bootID": self._boot_id,
                "kernelVersion": "6.1.0-kubesim",
                "osImage": "kubesim fake node",
                "containerRuntimeVersion": "containerd://1.7.0-kubesim",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [],
        }

    async def register(self) -> None:
        """Create the Node (or adopt an existing one) and post its status, like kubelet start."""
        desired = self.node_object()
        try:
            created = await self.client.create(NODES.path(), desired)
        except ApiError as exc:
            if exc.status != 409:
                raise
            created = await self.client.get(NODES.path(name=self.shape.name))
        self.nodes.observe(created)
        await self._post_node_status(created, force=True)
        await self._renew_lease(created)
        self.registered.set()

    async def _post_node_status(self, node: Obj, *, force: bool) -> None:
        now = self.clock()
        desired = self.node_object()["status"]

        def mutate(current: Obj) -> bool:
            status = current.setdefault("status", {})
            changed = False
            for key in ("capacity", "allocatable", "addresses", "daemonEndpoints", "nodeInfo"):
                if status.get(key) != desired[key]:
                    status[key] = desired[key]
                    changed = True
            conditions = status.setdefault("conditions", [])
            for kind, cond_status, reason, message in NODE_CONDITIONS:
                changed |= set_condition(
                    conditions,
                    kind=kind,
                    status=cond_status,
                    reason=reason,
                    message=message,
                    now=now,
                )
            if changed or force:
                for cond in conditions:
                    cond["lastHeartbeatTime"] = format_time(now)
            return changed or force

        result = await update_status(self.client, NODES, node, mutate, informer=self.nodes)
        if result is not None:
            self._last_status_report = now
            if result.get("status") and node.get("status", {}).get("conditions"):
                before = {c["type"]: c.get("status") for c in node["status"]["conditions"]}
                if before.get("Ready") not in (None, "True"):
                    self.recorder.record(
                        result,
                        reason="NodeReady",
                        message=f"Node {self.shape.name} status is now: NodeReady",
                        component="kubelet",
                        host=self.shape.name,
                    )

    async def _renew_lease(self, node: Obj | None) -> None:
        now = self.clock()
        name = self.shape.name
        path = LEASES.path(namespace="kube-node-lease", name=name)
        lease = self._lease
        if lease is None:
            try:
                lease = await self.client.get(path)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                lease = None
        if lease is None:
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": self.timings.lease_duration_seconds,
                    "renewTime": format_micro_time(now),
                },
            }
            if node is not None:
                body["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": name,
                        "uid": node["metadata"]["uid"],
                    }
                ]
            try:
                self._lease = await self.client.create(
                    LEASES.path(namespace="kube-node-lease"), body
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
                self._lease = None
            return
        updated = dict(lease)
        updated["spec"] = {
            **(lease.get("spec") or {}),
            "renewTime": format_micro_time(now),
            "holderIdentity": name,
        }
        try:
            self._lease = await self.client.replace(path, updated)
        except ApiError as exc:
            if exc.status in (404, 409):
                self._lease = None  # gone (GC'd with its Node) or raced: re-read next beat
                return
            raise

    async def heartbeat(self) -> None:
        """One heartbeat: renew the Lease; post node status when changed or when due."""
        if self.lost:
            return
        node = self.nodes.get(self.shape.name)
        if node is None:
            try:
                node = await self.client.get(NODES.path(name=self.shape.name))
            except ApiError as exc:
                if not exc.not_found:
                    raise
                node = None
        await self._renew_lease(node)
        if node is None:
            return  # deleted: like a real kubelet, do not re-register until restarted (recover)
        ready = next(
            (
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            None,
        )
        due = self.clock() - self._last_status_report >= self.timings.node_status_report_frequency
        if due or ready is None or ready.get("status") != "True":
            await self._post_node_status(node, force=due)

    async def run_heartbeats(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timings.heartbeat_interval):
                    await self._heartbeat_wake.wait()
            self._heartbeat_wake.clear()
            if self.lost:
                continue
            try:
                if self.nodes.get(self.shape.name) is None and not self.registered.is_set():
                    await self.register()
                else:
                    await self.heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("%s heartbeat failed: %r", self.name, exc)

    async def ensure_registered(self) -> None:
        """Re-register after recovery if the Node object was deleted meanwhile."""
        try:
            await self.client.get(NODES.path(name=self.shape.name))
        except ApiError as exc:
            if exc.not_found:
                self._lease = None
                await self.register()
                return
            raise

    # ---- pods ------------------------------------------------------------------------------
    async def reconcile(self) -> float | None:
        if self.lost or not self.pods.synced.is_set():
            return None
        now = self.clock()
        next_at: float | None = None
        for pod in self.pods.by_index("node", self.shape.name):
            uid = str(pod["metadata"].get("uid"))
            record = self._records.get(uid)
            if record is None:
                record = self._records[uid] = PodRecord(seen_at=now)
            if pod["metadata"].get("deletionTimestamp") and record.deletion_seen_at is None:
                record.deletion_seen_at = now
            step = decide_pod_step(pod, record, now=now, timings=self.timings)
            if step.action is not None:
                try:
                    await self._act(step.action, pod, record)
                except ApiError as exc:
                    log.debug("%s %s %s: %s", self.name, step.action, uid, exc)
                    if exc.status >= 500 or exc.status == 429:
                        raise
                if step.action in ("initialize",):
                    step = PodStep(None, step.next_at)
            if step.next_at is not None:
                next_at = step.next_at if next_at is None else min(next_at, step.next_at)
        return next_at

    async def _act(self, action: str, pod: Obj, record: PodRecord) -> None:
        now = self.clock()
        if action == "initialize":
            await self._write_status(pod, self._pending_status(pod, now))
        elif action == "start":
            record.started_at = now
            result = await self._write_status(pod, self._running_status(pod, now))
            if result is not None:
                for c in (pod.get("spec") or {}).get("containers") or []:
                    path = f"spec.containers{{{c.get('name')}}}"
                    image = c.get("image", "")
                    for reason, message in (
                        ("Pulled", f'Container image "{image}" already present on machine'),
                        ("Created", f"Created container {c.get('name')}"),
                        ("Started", f"Started container {c.get('name')}"),
                    ):
                        self.recorder.record(
                            pod,
                            reason=reason,
                            message=message,
                            component="kubelet",
                            host=self.shape.name,
                            field_path=path,
                        )
        elif action == "complete":
            await self._complete(pod, record, now)
        elif action == "stop":
            if not record.killing_reported:
                record.killing_reported = True
                for c in (pod.get("spec") or {}).get("containers") or []:
                    self.recorder.record(
                        pod,
                        reason="Killing",
                        message=f"Stopping container {c.get('name')}",
                        component="kubelet",
                        host=self.shape.name,
                        field_path=f"spec.containers{{{c.get('name')}}}",
                    )
            result = await self._write_status(pod, self._killed_status(pod, now))
            if result is not None:
                await self._final_delete(result)
        elif action == "delete":
            await self._final_delete(pod)

    async def _final_delete(self, pod: Obj) -> None:
        try:
            await self.client.delete(
                PODS.path_of(pod), grace_period_seconds=0, uid=str(pod["metadata"].get("uid"))
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    async def _write_status(self, pod: Obj, new_status: Obj) -> Obj | None:
        def mutate(current: Obj) -> bool:
            if current["metadata"].get("uid") != pod["metadata"].get("uid"):
                return False
            merged = {**(current.get("status") or {}), **new_status}
            merged["conditions"] = _merge_conditions(
                (current.get("status") or {}).get("conditions") or [],
                new_status.get("conditions") or [],
            )
            if merged == current.get("status"):
                return False
            current["status"] = merged
            return True

        return await update_status(self.client, PODS, pod, mutate, informer=self.pods)

    def _next_pod_ip(self) -> str:
        self._ip_counter += 1
        return f"10.244.{self.shape.index}.{self._ip_counter % 253 + 1}"

    def _ips(self, pod: Obj) -> Obj:
        status = pod.get("status") or {}
        pod_ip = status.get("podIP") or self._next_pod_ip()
        host_ip = self.shape.internal_ip
        if (pod.get("spec") or {}).get("hostNetwork"):
            pod_ip = host_ip
        return {
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
        }

    def _base_status(self, pod: Obj, now: float) -> Obj:
        status = pod.get("status") or {}
        out: Obj = {
            **self._ips(pod),
            "startTime": status.get("startTime") or format_time(now),
            "qosClass": status.get("qosClass") or qos_class(pod),
        }
        return out

    def _pending_status(self, pod: Obj, now: float) -> Obj:
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or []]
        stamp = format_time(now)
        unready = f"containers with unready status: [{' '.join(str(n) for n in names)}]"
        return {
            **self._base_status(pod, now),
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodReadyToStartContainers",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": "ContainersNotReady",
                    "message": unready,
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": "ContainersNotReady",
                    "message": unready,
                },
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
            ],
            "containerStatuses": [
                _container_status(
                    c,
                    state={"waiting": {"reason": "ContainerCreating"}},
                    ready=False,
                    started=False,
                )
                for c in spec.get("containers") or []
            ],
        }

    def _running_status(self, pod: Obj, now: float) -> Obj:
        spec = pod.get("spec") or {}
        stamp = format_time(now)
        status: Obj = {
            **self._base_status(pod, now),
            "phase": "Running",
            "conditions": [
                {
                    "type": "PodReadyToStartContainers",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Ready",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "ContainersReady",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
            ],
            "containerStatuses": [
                _container_status(
                    c,
                    state={"running": {"startedAt": stamp}},
                    ready=True,
                    started=True,
                    container_id=_container_id(pod, c),
                )
                for c in spec.get("containers") or []
            ],
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                _container_status(
                    c,
                    state={
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": stamp,
                            "finishedAt": stamp,
                            "containerID": _container_id(pod, c),
                        }
                    },
                    ready=True,
                    started=False,
                    container_id=_container_id(pod, c),
                )
                for c in spec["initContainers"]
            ]
        return status

    def _terminated_status(self, pod: Obj, now: float, *, exit_code: int, reason: str) -> Obj:
        spec = pod.get("spec") or {}
        stamp = format_time(now)
        started_by_name = {
            cs.get("name"): ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        }
        statuses = []
        for c in spec.get("containers") or []:
            previous = next(
                (
                    cs
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []
                    if cs.get("name") == c.get("name")
                ),
                None,
            )
            if previous and (previous.get("state") or {}).get("terminated"):
                statuses.append(previous)  # already exited: keep how it ended
                continue
            terminated: Obj = {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started_by_name.get(c.get("name")) or stamp,
                "finishedAt": stamp,
                "containerID": _container_id(pod, c),
            }
            statuses.append(
                _container_status(
                    c,
                    state={"terminated": terminated},
                    ready=False,
                    started=False,
                    container_id=_container_id(pod, c),
                )
            )
        all_zero = all(
            ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
            for cs in statuses
        )
        phase = "Succeeded" if all_zero else "Failed"
        ready_reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        return {
            **self._base_status(pod, now),
            "phase": phase,
            "conditions": [
                {
                    "type": "PodReadyToStartContainers",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": ready_reason,
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": ready_reason,
                },
            ],
            "containerStatuses": statuses,
        }

    def _killed_status(self, pod: Obj, now: float) -> Obj:
        return self._terminated_status(pod, now, exit_code=KILLED_EXIT_CODE, reason="Error")

    async def _complete(self, pod: Obj, record: PodRecord, now: float) -> None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, 0))
        except (TypeError, ValueError):
            exit_code = 1
        if exit_code != 0 and (pod.get("spec") or {}).get("restartPolicy") == "OnFailure":
            # The container is restarted in place: restartCount goes up, the pod stays Running.
            record.started_at = now
            status = self._running_status(pod, now)
            previous = {
                cs.get("name"): cs
                for cs in (pod.get("status") or {}).get("containerStatuses") or []
            }
            stamp = format_time(now)
            for cs in status["containerStatuses"]:
                old = previous.get(cs["name"]) or {}
                cs["restartCount"] = int(old.get("restartCount") or 0) + 1
                cs["lastState"] = {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Error",
                        "startedAt": ((old.get("state") or {}).get("running") or {}).get(
                            "startedAt"
                        )
                        or stamp,
                        "finishedAt": stamp,
                        "containerID": cs.get("containerID", ""),
                    }
                }
            await self._write_status(pod, status)
            return
        reason = "Completed" if exit_code == 0 else "Error"
        await self._write_status(
            pod, self._terminated_status(pod, now, exit_code=exit_code, reason=reason)
        )
        if exit_code != 0:
            self.recorder.record(
                pod,
                reason="Failed",
                message=f"Error: container exited with code {exit_code}",
                component="kubelet",
                host=self.shape.name,
                event_type="Warning",
            )


def _container_id(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    uid = str((pod.get("metadata") or {}).get("uid"))
    return "containerd://" + _digest(f"{uid}/{container.get('name')}")


def _container_status(
    container: Mapping[str, Any],
    *,
    state: Obj,
    ready: bool,
    started: bool,
    container_id: str | None = None,
) -> Obj:
    image = str(container.get("image", ""))
    out: Obj = {
        "name": container.get("name"),
        "image": image,
        "imageID": _image_id(image) if container_id else "",
        "ready": ready,
        "restartCount": 0,
        "started": started,
        "state": state,
        "lastState": {},
    }
    if container_id:
        out["containerID"] = container_id
    return out


def _merge_conditions(old: list[Obj], new: list[Obj]) -> list[Obj]:
    """New kubelet-owned conditions replace same-type ones; others (DisruptionTarget…) stay.

    lastTransitionTime is kept when the status did not change, as the real status manager does.
    """
    by_type = {c.get("type"): dict(c) for c in old}
    for cond in new:
        previous = by_type.get(cond.get("type"))
        merged = dict(cond)
        if previous is not None and previous.get("status") == cond.get("status"):
            merged["lastTransitionTime"] = previous.get(
                "lastTransitionTime", cond.get("lastTransitionTime")
            )
        by_type[cond.get("type")] = merged
    order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    return sorted(
        by_type.values(), key=lambda c: order.index(c["type"]) if c.get("type") in order else 99
    )
