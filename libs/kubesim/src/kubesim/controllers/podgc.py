"""PodGC: force-deletes pods nothing else will ever clean up.

Mirrors `pod-garbage-collector` (pkg/controller/podgc/gc_controller.go), run every
`gc_check_period` (real 20 s):

* gcOrphaned — pods bound to a Node that no longer exists, after a quarantine (real 40 s) and
  a live GET that still answers 404; condition `DisruptionTarget` (reason `DeletionByPodGC`,
  "PodGC: node no longer exists").
* gcTerminating — Terminating pods on a node that is not Ready and carries the
  `node.kubernetes.io/out-of-service` taint (non-graceful node shutdown, KEP-2268).
* gcUnscheduledTerminating — Terminating pods that were never bound to a node.
* gcTerminated — the oldest terminal pods beyond `terminated_pod_threshold` (real 12500).

Each first sets `phase=Failed` (plus the condition) through `pods/status` when the pod is not
terminal, then deletes it with grace 0. Finalizers still hold the object; PodGC retries on later
passes like the real one. Pure logic: `decide_podgc`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesim.client import NODES, PODS, ApiError, Informer, KubeClient
from kubesim.controllers.objects import Obj, condition, is_terminal, set_condition
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_status

__all__ = ["GcAction", "PodGCController", "PodGCPlan", "decide_podgc"]

log = logging.getLogger(__name__)
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
ORPHANED_CONDITION: Obj = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
}


@dataclass(frozen=True, slots=True)
class GcAction:
    """Force-delete `pod` (after marking it Failed, with `condition` when given)."""

    pod: Obj
    reason: str  # orphaned | terminating-out-of-service | unscheduled-terminating | terminated
    condition: Obj | None = None


@dataclass(slots=True)
class PodGCPlan:
    actions: list[GcAction] = field(default_factory=list)
    # Pods on missing nodes whose quarantine is over: confirm the node is gone with a live GET.
    confirm_orphans: list[Obj] = field(default_factory=list)
    next_at: float | None = None


def _already_done(pod: Mapping[str, Any]) -> bool:
    """Failed and deleted with grace 0: only a finalizer keeps it, nothing more to do."""
    meta = pod.get("metadata") or {}
    return (
        is_terminal(pod)
        and bool(meta.get("deletionTimestamp"))
        and meta.get("deletionGracePeriodSeconds") == 0
    )


def decide_podgc(
    pods: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    *,
    now: float,
    missing_since: dict[str, float],
    quarantine: float,
    terminated_threshold: int,
) -> PodGCPlan:
    """Classify pods. `missing_since` (node name -> first seen missing) is updated in place."""
    plan = PodGCPlan()
    terminated: list[Mapping[str, Any]] = []
    missing_now: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        terminating = bool(meta.get("deletionTimestamp"))
        if is_terminal(pod) and not terminating:
            terminated.append(pod)
        if _already_done(pod):
            continue
        if node_name and node_name not in nodes:
            missing_now.add(node_name)
            since = missing_since.setdefault(node_name, now)
            due = since + quarantine
            if now >= due:
                plan.confirm_orphans.append(dict(pod))
            else:
                plan.next_at = due if plan.next_at is None else min(plan.next_at, due)
            continue
        if terminating and not node_name:
            plan.actions.append(GcAction(dict(pod), "unscheduled-terminating"))
            continue
        if terminating and node_name:
            node = nodes[node_name]
            ready = condition(node, "Ready")
            out_of_service = any(
                t.get("key") == OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or []
            )
            if out_of_service and (ready is None or ready.get("status") != "True"):
                plan.actions.append(GcAction(dict(pod), "terminating-out-of-service"))
    for name in [n for n in missing_since if n not in missing_now]:
        del missing_since[name]  # node came back (or its pods are gone): restart quarantine
    if terminated_threshold > 0 and len(terminated) > terminated_threshold:
        terminated.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        for pod in terminated[: len(terminated) - terminated_threshold]:
            plan.actions.append(GcAction(dict(pod), "terminated"))
    return plan


class PodGCController(Reconciler):
    """Runs `decide_podgc` every `gc_check_period` and on node deletions."""

    name = "podgc"

    def __init__(
        self,
        client: KubeClient,
        *,
        pods: Informer,
        nodes: Informer,
        gc_check_period: float = 20.0,
        quarantine: float = 40.0,
        terminated_threshold: int = 12500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=gc_check_period, clock=clock)
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.quarantine = quarantine
        self.terminated_threshold = terminated_threshold
        self._missing_since: dict[str, float] = {}
        self.deleted: list[tuple[str, str]] = []  # (pod key, reason), for tests and debugging
        nodes.add_handler(self._on_node)

    def _on_node(self, kind: str, node: Obj) -> None:
        if kind == "DELETED" or any(
            t.get("key") == OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or []
        ):
            self.trigger()

    async def reconcile(self) -> float | None:
        if not (self.pods.synced.is_set() and self.nodes.synced.is_set()):
            return None
        now = self.clock()
        nodes = {str(n["metadata"]["name"]): n for n in self.nodes.items()}
        plan = decide_podgc(
            self.pods.items(),
            nodes,
            now=now,
            missing_since=self._missing_since,
            quarantine=self.quarantine,
            terminated_threshold=self.terminated_threshold,
        )
        actions = list(plan.actions)
        confirmed: dict[str, bool] = {}
        for pod in plan.confirm_orphans:
            node_name = str(pod["spec"]["nodeName"])
            if node_name not in confirmed:
                confirmed[node_name] = await self._node_gone(node_name)
            if confirmed[node_name]:
                actions.append(GcAction(pod, "orphaned", dict(ORPHANED_CONDITION)))
        for action in actions:
            await self._mark_failed_and_delete(action)
        return plan.next_at

    async def _node_gone(self, name: str) -> bool:
        try:
            await self.client.get(NODES.path(name=name))
        except ApiError as exc:
            if exc.not_found:
                return True
            raise
        return False

    async def _mark_failed_and_delete(self, action: GcAction) -> None:
        pod = action.pod
        uid = str(pod["metadata"].get("uid"))
        now = self.clock()
        if not is_terminal(pod):

            def mutate(current: Obj) -> bool:
                if current["metadata"].get("uid") != uid:
                    return False
                status = current.setdefault("status", {})
                changed: bool = status.get("phase") != "Failed"
                status["phase"] = "Failed"
                if action.condition is not None:
                    cond = action.condition
                    changed |= set_condition(
                        status.setdefault("conditions", []),
                        kind=str(cond["type"]),
                        status=str(cond["status"]),
                        reason=str(cond["reason"]),
                        message=str(cond["message"]),
                        now=now,
                        probe=True,
                    )
                return changed

            if await update_status(self.client, PODS, pod, mutate, informer=self.pods) is None:
                return
        try:
            # The real PodGC sends no precondition; the UID guard only protects a new pod that
            # reused the name in between, which the real one would (rarely) delete by mistake.
            await self.client.delete(PODS.path_of(pod), grace_period_seconds=0, uid=uid)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
            return
        self.deleted.append(
            (f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}", action.reason)
        )
