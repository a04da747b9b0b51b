"""Node lifecycle controller: notices silent nodes, taints them, marks their pods not ready.

Mirrors kube-controller-manager's `node-lifecycle-controller` (pkg/controller/nodelifecycle):
when neither the node's Lease nor its Ready heartbeat moved for `node_monitor_grace`
(real default 40 s) the Ready/MemoryPressure/DiskPressure/PIDPressure conditions become
`Unknown` (reason `NodeStatusUnknown`, "Kubelet stopped posting node status."), the node gets
`node.kubernetes.io/unreachable:NoExecute` (with `timeAdded`) and `…:NoSchedule`, and its pods
get `Ready=False`. A node that posted `Ready=False` gets the `not-ready` taints instead. When the
kubelet posts Ready again the taints go. Condition → NoSchedule taints (`memory-pressure`, …) and
`spec.unschedulable` → `unschedulable:NoSchedule` follow TaintNodesByCondition. If every node is
not ready at once the real controller assumes a control-plane-side network problem ("master
disruption mode") and stops NoExecute tainting; that rule is modelled too (`full_disruption`).

The decisions are the pure functions `observe_health`, `unknown_conditions` and `desired_taints`.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubesim.client import NODES, PODS, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj, condition, format_time, is_terminal
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_object, update_status

__all__ = [
    "NOT_READY",
    "UNREACHABLE",
    "NodeHealth",
    "NodeLifecycleController",
    "desired_taints",
    "observe_health",
    "unknown_conditions",
]

log = logging.getLogger(__name__)

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
COMPONENT = "node-controller"
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
# TaintNodesByCondition: condition (type, status) -> NoSchedule taint key.
CONDITION_TAINTS: tuple[tuple[str, str, str], ...] = (
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
)
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MANAGED_KEYS = frozenset({key for _, _, key in CONDITION_TAINTS} | {UNSCHEDULABLE})


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What the controller last saw of a node's heartbeats, and when it saw them change."""

    ready_heartbeat: str | None
    lease_renew: str | None
    probe_time: float


def observe_health(
    previous: NodeHealth | None,
    node: Mapping[str, Any],
    lease: Mapping[str, Any] | None,
    *,
    now: float,
) -> NodeHealth:
    """`tryUpdateNodeHealth`: the probe time moves to *now* whenever the Ready condition's
    `lastHeartbeatTime` or the Lease `renewTime` changed since the last look.

    Using the controller's own observation time (not the timestamps themselves) is what the
    real controller does to be immune to clock skew; it also sidesteps the whole-second
    precision of `lastHeartbeatTime`, which would make a fresh node look up to 1 s old.
    """
    ready = condition(node, "Ready") or {}
    beat = ready.get("lastHeartbeatTime")
    renew = ((lease or {}).get("spec") or {}).get("renewTime")
    beat_s = str(beat) if beat is not None else None
    renew_s = str(renew) if renew is not None else None
    if previous is None or previous.ready_heartbeat != beat_s or previous.lease_renew != renew_s:
        return NodeHealth(beat_s, renew_s, now)
    return previous


def unknown_conditions(
    node: Mapping[str, Any], *, last_probe: float, now: float, grace: float
) -> tuple[list[Obj] | None, float | None]:
    """(new condition list if the node must be marked Unknown, time of the next check)."""
    deadline = last_probe + grace
    if now < deadline:
        return None, deadline
    conditions = copy.deepcopy((node.get("status") or {}).get("conditions") or [])
    stamp = format_time(now)
    changed = False
    present = {c.get("type") for c in conditions}
    for cond in conditions:
        if cond.get("type") in MONITORED_CONDITIONS and cond.get("status") != "Unknown":
            cond.update(
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
                lastTransitionTime=stamp,
            )
            changed = True
    created = (node.get("metadata") or {}).get("creationTimestamp") or stamp
    for kind in MONITORED_CONDITIONS:
        if kind not in present:
            conditions.append(
                {
                    "type": kind,
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": created,
                    "lastTransitionTime": stamp,
                }
            )
            changed = True
    return (conditions if changed else None), None


def desired_taints(
    node: Mapping[str, Any], *, now: float, full_disruption: bool = False
) -> list[Obj]:
    """The node's taints after the NoSchedule and NoExecute tainting passes.

    Taints not managed by the controller are kept as they are; managed ones keep their
    `timeAdded` when already present. In full-disruption mode NoExecute taints are removed.
    """
    current: list[Obj] = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    kept = [t for t in current if t.get("key") not in MANAGED_KEYS]
    existing = {(t.get("key"), t.get("effect")): t for t in current}
    wanted: list[tuple[str, str]] = []
    for kind, status, key in CONDITION_TAINTS:
        cond = condition(node, kind)
        if cond is not None and cond.get("status") == status:
            wanted.append((key, "NoSchedule"))
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append((UNSCHEDULABLE, "NoSchedule"))
    ready = condition(node, "Ready")
    if not full_disruption and ready is not None:
        if ready.get("status") == "Unknown":
            wanted.append((UNREACHABLE, "NoExecute"))
        elif ready.get("status") == "False":
            wanted.append((NOT_READY, "NoExecute"))
    out = list(kept)
    for key, effect in wanted:
        previous = existing.get((key, effect))
        if previous is not None:
            out.append(previous)
            continue
        taint: Obj = {"key": key, "effect": effect}
        if effect == "NoExecute":
            taint["timeAdded"] = format_time(now)
        out.append(taint)
    return out


def _same_taints(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    def norm(taints: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted(
            (str(t.get("key")), str(t.get("effect")), str(t.get("value") or "")) for t in taints
        )

    return norm(a) == norm(b)


def is_ready(node: Mapping[str, Any]) -> bool:
    ready = condition(node, "Ready")
    return ready is not None and ready.get("status") == "True"


class NodeLifecycleController(Reconciler):
    """Monitors nodes every `monitor_period` (real 5 s) and at each heartbeat deadline."""

    name = "node-lifecycle"

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Informer,
        leases: Informer,
        pods: Informer,
        recorder: EventRecorder,
        monitor_grace: float = 40.0,
        monitor_period: float = 5.0,
        model_full_disruption: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=monitor_period, clock=clock)
        self.client = client
        self.nodes = nodes
        self.leases = leases
        self.pods = pods
        self.recorder = recorder
        self.monitor_grace = monitor_grace
        self.model_full_disruption = model_full_disruption
        self._health: dict[str, NodeHealth] = {}
        nodes.add_handler(self.trigger)
        leases.add_handler(self.trigger)
        pods.add_handler(self._on_pod)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        node = self.nodes.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None and not is_ready(node):
            self.trigger()

    async def reconcile(self) -> float | None:
        if not (self.nodes.synced.is_set() and self.leases.synced.is_set()):
            return None
        now = self.clock()
        next_at: float | None = None
        nodes = self.nodes.items()
        for gone in set(self._health) - {str(n["metadata"]["name"]) for n in nodes}:
            del self._health[gone]
        for node in nodes:
            name = str(node["metadata"]["name"])
            lease = self.leases.get(f"kube-node-lease/{name}")
            health = observe_health(self._health.get(name), node, lease, now=now)
            self._health[name] = health
            conditions, check_at = unknown_conditions(
                node, last_probe=health.probe_time, now=now, grace=self.monitor_grace
            )
            if check_at is not None:
                next_at = check_at if next_at is None else min(next_at, check_at)
            if conditions is not None and is_ready(node):
                await self._mark_unknown(node, conditions)
        nodes = self.nodes.items()
        full_disruption = (
            self.model_full_disruption and bool(nodes) and not any(is_ready(n) for n in nodes)
        )
        for node in nodes:
            await self._taint(node, now=now, full_disruption=full_disruption)
            if not is_ready(node):
                await self._mark_pods_not_ready(node)
        return next_at

    async def _mark_unknown(self, node: Obj, conditions: list[Obj]) -> None:
        def mutate(current: Obj) -> bool:
            current.setdefault("status", {})["conditions"] = conditions
            return True

        result = await update_status(self.client, NODES, node, mutate, informer=self.nodes)
        if result is not None:
            name = node["metadata"]["name"]
            self.recorder.record(
                result,
                reason="NodeNotReady",
                message=f"Node {name} status is now: NodeNotReady",
                component=COMPONENT,
            )

    async def _taint(self, node: Obj, *, now: float, full_disruption: bool) -> None:
        wanted = desired_taints(node, now=now, full_disruption=full_disruption)
        if _same_taints(wanted, (node.get("spec") or {}).get("taints") or []):
            return

        def mutate(current: Obj) -> bool:
            target = desired_taints(current, now=now, full_disruption=full_disruption)
            if _same_taints(target, (current.get("spec") or {}).get("taints") or []):
                return False
            spec = current.setdefault("spec", {})
            if target:
                spec["taints"] = target
            else:
                spec.pop("taints", None)
            return True

        await update_object(self.client, NODES, node, mutate, informer=self.nodes)

    async def _mark_pods_not_ready(self, node: Obj) -> None:
        now = self.clock()
        for pod in self.pods.by_index("node", str(node["metadata"]["name"])):
            ready = condition(pod, "Ready")
            if is_terminal(pod) or ready is None or ready.get("status") == "False":
                continue

            def mutate(current: Obj) -> bool:
                changed = False
                for cond in (current.get("status") or {}).get("conditions") or []:
                    if cond.get("type") == "Ready" and cond.get("status") != "False":
                        cond["status"] = "False"
                        cond["lastTransitionTime"] = format_time(now)
                        changed = True
                return changed

            result = await update_status(self.client, PODS, pod, mutate, informer=self.pods)
            if result is not None:
                self.recorder.record(
                    result,
                    reason="NodeNotReady",
                    message="Node is not ready",
                    component=COMPONENT,
                    event_type="Warning",
                )
