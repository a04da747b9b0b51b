"""The kubelet's node side: its state, the fault switch (`lose`/`recover`), the informer
handlers, and registering the Node, posting node status and renewing the Lease in
`kube-node-lease` on the heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from kubesim.client import LEASES, NODES, ApiError, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.kubelet.model import (
    KUBELET_VERSION,
    NODE_CONDITIONS,
    KubeletTimings,
    NodeShape,
    PodRecord,
    _digest,
)
from kubesim.controllers.objects import (
    Obj,
    format_micro_time,
    format_time,
    set_condition,
)
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_status
from kubesim.quantity import canonical_resource

log = logging.getLogger(__package__)


class KubeletNode(Reconciler):
    """One node's kubelet: state, fault switch, Node registration and heartbeats."""

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

    def _record(
        self,
        obj: Obj,
        reason: str,
        message: str,
        *,
        event_type: str = "Normal",
        field_path: str | None = None,
    ) -> None:
        """An Event about `obj` from this node's kubelet (source: kubelet on this host)."""
        self.recorder.record(
            obj,
            reason=reason,
            message=message,
            component="kubelet",
            host=self.shape.name,
            event_type=event_type,
            field_path=field_path,
        )

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
                    message = f"Node {self.shape.name} status is now: NodeReady"
                    self._record(result, "NodeReady", message)

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
