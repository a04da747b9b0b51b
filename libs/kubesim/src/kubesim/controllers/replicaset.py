"""ReplicaSet controller (apps/v1): keep `spec.replicas` active pods named `<rs>-<5 chars>`.

Mirrors `replicaset-controller` (pkg/controller/replicaset/replica_set.go):

* the pods it counts are the ones with a controller ownerReference to the ReplicaSet that are
  *active* (`controller.IsPodActive`: no deletionTimestamp, not Succeeded/Failed) — so a pod
  stuck Terminating on a lost node does not count, and a replacement with a **new random name**
  is created at once (reference cluster-faults-and-workloads.md §3, "ReplicaSet contrast");
* missing pods are created from the template with `generateName: <rs>-`, the template's
  labels/annotations/finalizers and a controller ownerReference with `blockOwnerDeletion`;
  surplus pods are deleted (gracefully) unscheduled first, then pending, not ready, newest;
* status: `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`
  (`minReadySeconds`), `observedGeneration`;
* a ReplicaSet being deleted gets no new pods (its pods go through the garbage collector).

Out of scope: adopting orphans or releasing pods by selector (pods are matched by owner UID),
slow-start batches and expectations (the informer write-through plays their part), the
`ReplicaFailure` condition, `terminatingReplicas`. Pure logic: `plan_replicaset`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.client import PODS, ApiError, Informer, KubeClient, Resource
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj
from kubesim.controllers.owner import CONTROLLER_UID_INDEX, OwnerController
from kubesim.controllers.podtemplates import (
    controller_reference,
    is_pod_active,
    is_pod_available,
    is_pod_ready,
    pod_from_template,
    removal_rank,
)
from kubesim.controllers.writes import replace_status

__all__ = ["REPLICASETS", "ReplicaSetController", "ReplicaSetPlan", "plan_replicaset", "rs_pod"]

REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
COMPONENT = "replicaset-controller"


@dataclass(slots=True)
class ReplicaSetPlan:
    status: Obj
    status_changed: bool
    create: int = 0
    delete: list[Obj] = field(default_factory=list)


def _replicas(spec: Mapping[str, Any]) -> int:
    value = spec.get("replicas")
    return 1 if value is None else int(value)


def plan_replicaset(
    rs: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, now: float
) -> ReplicaSetPlan:
    """What to create/delete for one ReplicaSet given its controlled pods, and its new status."""
    spec = rs.get("spec") or {}
    meta = rs.get("metadata") or {}
    old_status: Obj = copy.deepcopy(dict(rs.get("status") or {}))
    active = [p for p in pods if is_pod_active(p)]
    plan = ReplicaSetPlan(status={}, status_changed=False)
    want = _replicas(spec)
    if not meta.get("deletionTimestamp"):
        if len(active) < want:
            plan.create = want - len(active)
        elif len(active) > want:
            plan.delete = [dict(p) for p in sorted(active, key=removal_rank)[: len(active) - want]]
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    status: Obj = {
        "replicas": len(active),
        "fullyLabeledReplicas": sum(
            1
            for p in active
            if all(
                ((p.get("metadata") or {}).get("labels") or {}).get(k) == v
                for k, v in template_labels.items()
            )
        ),
        "readyReplicas": sum(1 for p in active if is_pod_ready(p)),
        "availableReplicas": sum(
            1 for p in active if is_pod_available(p, min_ready_seconds=min_ready, now=now)
        ),
        "observedGeneration": int(meta.get("generation") or 1),
    }
    if old_status.get("conditions"):
        status["conditions"] = old_status["conditions"]
    # Go's omitempty: zero counters other than `replicas` are not serialized.
    for key in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
        if status[key] == 0:
            del status[key]
    plan.status = status
    plan.status_changed = status != old_status
    return plan


def rs_pod(rs: Mapping[str, Any]) -> Obj:
    """The pod the controller creates for `rs` (the server appends the 5 random chars)."""
    template = (rs.get("spec") or {}).get("template") or {}
    name = str((rs.get("metadata") or {}).get("name"))
    ref = controller_reference(rs, api_version="apps/v1", kind="ReplicaSet")
    return pod_from_template(template, owner=rs, owner_ref=ref, generate_name=f"{name}-")


class ReplicaSetController(OwnerController):
    """Syncs every ReplicaSet on each change of a ReplicaSet or of a pod it controls."""

    name = COMPONENT
    kind = "ReplicaSet"
    api_version = "apps/v1"

    def __init__(
        self,
        client: KubeClient,
        *,
        replicasets: Informer,
        pods: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client, owners=replicasets, owned=[pods], recorder=recorder, clock=clock)
        self.pods = pods

    async def _sync(self, owners: Informer, rs: Obj, now: float) -> float | None:
        uid = str(rs["metadata"].get("uid"))
        pods = self.pods.by_index(CONTROLLER_UID_INDEX, uid)
        plan = plan_replicaset(rs, pods, now=now)
        subject = self.subject(rs)
        for pod in plan.delete:
            await self.delete_owned(subject, pod, informer=self.pods)
        namespace = rs["metadata"].get("namespace")
        for _ in range(plan.create):
            try:
                created = await self.client.create(PODS.path(namespace=namespace), rs_pod(rs))
            except ApiError as exc:
                if exc.status == 409:
                    continue  # generated-name clash: next pass retries
                raise
            self.observe_created(subject, created, informer=self.pods)
        if plan.status_changed:
            await replace_status(self.client, REPLICASETS, rs, plan.status, informer=owners)
        # Availability after minReadySeconds needs a pass without any event.
        return now + 1.0 if int((rs.get("spec") or {}).get("minReadySeconds") or 0) else None
