"""StatefulSet controller (apps/v1): stable pod names `<set>-<ordinal>`, one pod per slot.

Mirrors `statefulset-controller` (pkg/controller/statefulset/stateful_set_control.go,
stateful_set_utils.go; reference cluster-faults-and-workloads.md §3):

* pods go into slots by the ordinal in their name; an empty slot gets a new pod with that very
  name. `isCreated` is "phase set", which the API server does on create (`Pending`);
* **a Terminating pod still fills its slot**: no replacement until the old object is gone from
  storage — the same-name interplay of the seed scenario (creating it earlier would be a 409);
* Failed or Succeeded pods are deleted; the new pod comes on a later pass, after the removal;
* `OrderedReady` (default) walks ordinals upwards and stops at the first pod that was just
  created, is Terminating, or is not Running+Ready (+`minReadySeconds`); scale-down deletes the
  highest ordinal first, one at a time, waiting for it to be gone. `Parallel` creates and
  deletes all at once and waits only per slot;
* `RollingUpdate` (default; `partition` honoured) deletes the highest-ordinal pod whose
  `controller-revision-hash` is not the update revision, once every pod is healthy; `OnDelete`
  leaves pods alone;
* pods carry the template's labels plus `statefulset.kubernetes.io/pod-name`,
  `apps.kubernetes.io/pod-index`, `controller-revision-hash: <set>-<hash>`, `hostname`/
  `subdomain` (serviceName), and a controller ownerReference with blockOwnerDeletion;
* status `replicas` (created pods, Terminating ones included), `readyReplicas`,
  `availableReplicas`, `currentReplicas`, `updatedReplicas`, `currentRevision`,
  `updateRevision`, `observedGeneration`; a StatefulSet being deleted is left to the GC.

Out of scope: ControllerRevision objects (the revision name is computed, not stored),
volumeClaimTemplates/PVCs and their retention policy, adoption by selector,
`maxUnavailable` (alpha). Pure logic: `plan_statefulset`.
"""

from __future__ import annotations

import copy
import re
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
    hash_template,
    is_pod_available,
    is_pod_ready,
    is_terminating,
    pod_from_template,
)
from kubesim.controllers.writes import replace_status

__all__ = [
    "POD_INDEX_LABEL",
    "POD_NAME_LABEL",
    "REVISION_LABEL",
    "STATEFULSETS",
    "StatefulSetController",
    "StatefulSetPlan",
    "plan_statefulset",
    "statefulset_pod",
]

STATEFULSETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")
COMPONENT = "statefulset-controller"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"


@dataclass(slots=True)
class StatefulSetPlan:
    status: Obj
    status_changed: bool
    create: list[int] = field(default_factory=list)  # ordinals
    delete: list[Obj] = field(default_factory=list)


def update_revision(sts: Mapping[str, Any]) -> str:
    spec = sts.get("spec") or {}
    name = str((sts.get("metadata") or {}).get("name"))
    collisions = (sts.get("status") or {}).get("collisionCount")
    return f"{name}-{hash_template(spec.get('template') or {}, collision_count=collisions)}"


def ordinal_of(set_name: str, pod: Mapping[str, Any]) -> int | None:
    """`getParentNameAndOrdinal`: the ordinal of `<set>-<n>`, or None."""
    name = str((pod.get("metadata") or {}).get("name"))
    match = re.fullmatch(rf"{re.escape(set_name)}-(\d+)", name)
    return int(match.group(1)) if match else None


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _is_created(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) != ""


def _running_and_ready(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) == "Running" and is_pod_ready(pod)


def _healthy(pod: Mapping[str, Any], *, min_ready: int, now: float) -> bool:
    return (
        _running_and_ready(pod)
        and not is_terminating(pod)
        and is_pod_available(pod, min_ready_seconds=min_ready, now=now)
    )


def _revision_of(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, ""))


def plan_statefulset(
    sts: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, now: float
) -> StatefulSetPlan:
    """What the controller does next for one StatefulSet given its controlled pods."""
    spec = sts.get("spec") or {}
    meta = sts.get("metadata") or {}
    name = str(meta.get("name"))
    old_status: Obj = copy.deepcopy(dict(sts.get("status") or {}))
    replicas = 1 if spec.get("replicas") is None else int(spec["replicas"])
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    parallel = spec.get("podManagementPolicy") == "Parallel"
    min_ready = int(spec.get("minReadySeconds") or 0)
    target_rev = update_revision(sts)
    current_rev = str(old_status.get("currentRevision") or target_rev)
    slots: dict[int, Obj] = {}
    condemned: list[tuple[int, Obj]] = []
    for pod in pods:
        ordinal = ordinal_of(name, pod)
        if ordinal is None:
            continue
        if start <= ordinal < start + replicas:
            slots[ordinal] = dict(pod)
        else:
            condemned.append((ordinal, dict(pod)))
    plan = StatefulSetPlan(status={}, status_changed=False)
    if not meta.get("deletionTimestamp"):
        _plan_pods(plan, slots, condemned, start, replicas, parallel, min_ready, now)
        if not plan.create and not plan.delete:
            _plan_rolling_update(plan, spec, slots, start, replicas, target_rev, min_ready, now)
    plan.status = _status(sts, pods, old_status, current_rev, target_rev, replicas, min_ready, now)
    plan.status_changed = plan.status != old_status
    return plan


def _plan_pods(
    plan: StatefulSetPlan,
    slots: dict[int, Obj],
    condemned: list[tuple[int, Obj]],
    start: int,
    replicas: int,
    parallel: bool,
    min_ready: int,
    now: float,
) -> None:
    for ordinal in range(start, start + replicas):
        pod = slots.get(ordinal)
        if pod is not None and _phase(pod) in ("Failed", "Succeeded") and not is_terminating(pod):
            plan.delete.append(pod)  # recreated once it is gone (a later pass)
            if not parallel:
                return
            continue
        if pod is None or not _is_created(pod):
            if pod is None:
                plan.create.append(ordinal)
            if not parallel:
                return  # OrderedReady: one creation, then wait for it
            continue
        unhealthy = is_terminating(pod) or not _healthy(pod, min_ready=min_ready, now=now)
        if unhealthy and not parallel:
            return  # a Terminating pod holds its slot and the ordinals above it
    # Scale down, highest ordinal first.
    for _ordinal, pod in sorted(condemned, key=lambda item: -item[0]):
        if is_terminating(pod):
            if not parallel:
                return  # wait until it is gone
            continue
        plan.delete.append(pod)
        if not parallel:
            return


def _plan_rolling_update(
    plan: StatefulSetPlan,
    spec: Mapping[str, Any],
    slots: dict[int, Obj],
    start: int,
    replicas: int,
    target_rev: str,
    min_ready: int,
    now: float,
) -> None:
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type") == "OnDelete":
        return
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    if any(not _healthy(p, min_ready=min_ready, now=now) for p in slots.values()):
        return
    for ordinal in range(start + replicas - 1, start + partition - 1, -1):
        pod = slots.get(ordinal)
        if pod is not None and _revision_of(pod) != target_rev:
            plan.delete.append(pod)
            return


def _status(
    sts: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    old_status: Obj,
    current_rev: str,
    target_rev: str,
    replicas: int,
    min_ready: int,
    now: float,
) -> Obj:
    """`computeReplicaStatus` plus the revision bookkeeping of `updateStatefulSet`."""
    created = [p for p in pods if _is_created(p)]
    ready = [p for p in created if _running_and_ready(p)]
    live = [p for p in created if not is_terminating(p)]
    updated = sum(1 for p in live if _revision_of(p) == target_rev)
    current = sum(1 for p in live if _revision_of(p) == current_rev)
    if updated == replicas and len(live) == replicas:
        current_rev, current = target_rev, updated  # rollout complete
    status: Obj = {
        "observedGeneration": int((sts.get("metadata") or {}).get("generation") or 1),
        "replicas": len(created),
        "readyReplicas": len(ready),
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": target_rev,
        "availableReplicas": sum(
            1 for p in ready if is_pod_available(p, min_ready_seconds=min_ready, now=now)
        ),
    }
    for key in ("collisionCount", "conditions"):
        if old_status.get(key) is not None:
            status[key] = old_status[key]
    for key in ("readyReplicas", "currentReplicas", "updatedReplicas"):
        if status[key] == 0:
            del status[key]  # omitempty; `replicas` and `availableReplicas` are not
    return status


def statefulset_pod(sts: Mapping[str, Any], ordinal: int) -> Obj:
    """`newVersionedStatefulSetPod`: the pod for one ordinal, at the update revision."""
    spec = sts.get("spec") or {}
    set_name = str((sts.get("metadata") or {}).get("name"))
    pod_name = f"{set_name}-{ordinal}"
    ref = controller_reference(sts, api_version="apps/v1", kind="StatefulSet")
    pod = pod_from_template(
        spec.get("template") or {},
        owner=sts,
        owner_ref=ref,
        name=pod_name,
        extra_labels={
            POD_NAME_LABEL: pod_name,
            POD_INDEX_LABEL: str(ordinal),
            REVISION_LABEL: update_revision(sts),
        },
    )
    pod["spec"]["hostname"] = pod_name
    if spec.get("serviceName"):
        pod["spec"]["subdomain"] = spec["serviceName"]
    return pod


class StatefulSetController(OwnerController):
    """Syncs every StatefulSet on each change of a StatefulSet or of a pod it controls."""

    name = COMPONENT
    kind = "StatefulSet"
    api_version = "apps/v1"

    def __init__(
        self,
        client: KubeClient,
        *,
        statefulsets: Informer,
        pods: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client, owners=statefulsets, owned=[pods], recorder=recorder, clock=clock)
        self.pods = pods

    async def _sync(self, owners: Informer, sts: Obj, now: float) -> float | None:
        uid = str(sts["metadata"].get("uid"))
        plan = plan_statefulset(sts, self.pods.by_index(CONTROLLER_UID_INDEX, uid), now=now)
        set_name = sts["metadata"]["name"]
        subject = self.subject(sts)
        for pod in plan.delete:
            name = pod["metadata"]["name"]
            await self.delete_owned(
                subject,
                pod,
                informer=self.pods,
                message=f"delete Pod {name} in StatefulSet {set_name} successful",
            )
        namespace = sts["metadata"].get("namespace")
        for ordinal in plan.create:
            try:
                created = await self.client.create(
                    PODS.path(namespace=namespace), statefulset_pod(sts, ordinal)
                )
            except ApiError as exc:
                if exc.status == 409:
                    # The name is still taken (a Terminating pod our cache already lost):
                    # the next pod event retries.
                    self.record(
                        subject,
                        "FailedCreate",
                        f"create Pod {set_name}-{ordinal} in StatefulSet {set_name} "
                        f"failed error: {exc.message}",
                        event_type="Warning",
                    )
                    continue
                raise
            name = created["metadata"]["name"]
            self.observe_created(
                subject,
                created,
                informer=self.pods,
                message=f"create Pod {name} in StatefulSet {set_name} successful",
            )
        if plan.status_changed:
            await replace_status(self.client, STATEFULSETS, sts, plan.status, informer=owners)
        return now + 1.0 if (sts.get("spec") or {}).get("minReadySeconds") else None
