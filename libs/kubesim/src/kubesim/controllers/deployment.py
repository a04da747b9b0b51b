"""Deployment controller (apps/v1): one ReplicaSet per pod template, rolled over on change.

Mirrors `deployment-controller` (pkg/controller/deployment), simplified where Clearance does
not look:

* the ReplicaSet for the current template is `<deployment>-<pod-template-hash>`, with the
  `pod-template-hash` label on itself, its selector and its template, the annotations
  `deployment.kubernetes.io/revision|desired-replicas|max-replicas`, and a controller
  ownerReference (blockOwnerDeletion) to the Deployment; pods are then `<rs>-<5 chars>`;
* a template change creates a new ReplicaSet and moves replicas over: `RollingUpdate` scales the
  new one up within `maxSurge` (default 25 %, rounded up) and the old ones down while
  `maxUnavailable` (default 25 %, rounded down; 1 if both are 0) allows, unhealthy old replicas
  first; `Recreate` scales the old ones to 0 and waits until their pods are gone;
* no template change: the ReplicaSet is scaled to `spec.replicas` (a scaling event);
* old ReplicaSets scaled to 0 beyond `revisionHistoryLimit` (default 10) are deleted;
* status `replicas`/`updatedReplicas`/`readyReplicas`/`availableReplicas`/
  `unavailableReplicas`/`observedGeneration`, conditions `Available`
  (MinimumReplicasAvailable / MinimumReplicasUnavailable) and `Progressing`
  (NewReplicaSetCreated → ReplicaSetUpdated → NewReplicaSetAvailable);
* a Deployment being deleted only gets its status synced.

Out of scope: `paused`, `progressDeadlineSeconds` (no ProgressDeadlineExceeded), proportional
scaling during a rollout, rollback annotations, adoption of ReplicaSets by selector. The
template hash is fnv32a over canonical JSON (`podtemplates.hash_template`). Pure logic:
`plan_deployment`; the controller loop is `deployment_controller.py`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.client import Resource
from kubesim.controllers.objects import Obj, format_time, parse_time
from kubesim.controllers.podtemplates import controller_reference, hash_template

__all__ = [
    "DEPLOYMENTS",
    "DESIRED",
    "HASH_LABEL",
    "DeploymentPlan",
    "new_replicaset",
    "plan_deployment",
    "surge_and_unavailable",
]

DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
COMPONENT = "deployment-controller"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"


@dataclass(slots=True)
class DeploymentPlan:
    status: Obj
    status_changed: bool
    create: Obj | None = None
    scale: list[tuple[Obj, int]] = field(default_factory=list)  # (replica set, new replicas)
    delete: list[Obj] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def _int(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _resolve(value: Any, total: int, *, round_up: bool) -> int:
    """An IntOrString (`2`, `"25%"`) against `total`."""
    if isinstance(value, str) and value.endswith("%"):
        scaled = total * int(value[:-1]) / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value)


def surge_and_unavailable(deploy: Mapping[str, Any]) -> tuple[int, int]:
    """`ResolveFenceposts` for RollingUpdate; Recreate has no surge."""
    spec = deploy.get("spec") or {}
    strategy = spec.get("strategy") or {}
    replicas = _int(spec.get("replicas"), 1)
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}
    surge = _resolve(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _without_hash(template: Mapping[str, Any]) -> Obj:
    out = copy.deepcopy(dict(template))
    labels = (out.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
        if not labels:
            out["metadata"].pop("labels")
    if out.get("metadata") == {}:
        out.pop("metadata")
    return out


def _spec_replicas(rs: Mapping[str, Any]) -> int:
    return _int((rs.get("spec") or {}).get("replicas"), 1)


def _status_count(rs: Mapping[str, Any], key: str) -> int:
    return int((rs.get("status") or {}).get(key) or 0)


def _revision(rs: Mapping[str, Any]) -> int:
    raw = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def _created(rs: Mapping[str, Any]) -> tuple[float, str]:
    meta = rs.get("metadata") or {}
    return parse_time(meta.get("creationTimestamp")) or 0.0, str(meta.get("name"))


def new_replicaset(
    deploy: Mapping[str, Any], pod_hash: str, *, replicas: int, revision: int
) -> Obj:
    """The ReplicaSet object for the deployment's current template."""
    meta = deploy.get("metadata") or {}
    spec = deploy.get("spec") or {}
    surge, _ = surge_and_unavailable(deploy)
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH_LABEL: pod_hash}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: pod_hash}
    desired = _int(spec.get("replicas"), 1)
    rs_spec: Obj = {"replicas": replicas, "selector": selector, "template": template}
    if spec.get("minReadySeconds"):
        rs_spec["minReadySeconds"] = spec["minReadySeconds"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta.get('name')}-{pod_hash}",
            "namespace": meta.get("namespace"),
            "labels": dict(tmeta["labels"]),
            "annotations": {
                REVISION: str(revision),
                DESIRED: str(desired),
                MAX_REPLICAS: str(desired + surge),
            },
            "ownerReferences": [
                controller_reference(deploy, api_version="apps/v1", kind="Deployment")
            ],
        },
        "spec": rs_spec,
    }


def _set_condition(
    conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: float
) -> None:
    """`SetDeploymentCondition`: same status and reason → untouched."""
    stamp = format_time(now)
    for cond in conditions:
        if cond.get("type") != kind:
            continue
        if cond.get("status") == status and cond.get("reason") == reason:
            return
        if cond.get("status") != status:
            cond["lastTransitionTime"] = stamp
        cond.update(status=status, reason=reason, message=message, lastUpdateTime=stamp)
        return
    conditions.append(
        {
            "type": kind,
            "status": status,
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
    )


def _rolling_targets(
    deploy: Mapping[str, Any], new: Obj, olds: list[Obj]
) -> tuple[int, list[tuple[Obj, int]]]:
    """New replica count and old scale-downs for one RollingUpdate step."""
    replicas = _int((deploy.get("spec") or {}).get("replicas"), 1)
    surge, unavailable = surge_and_unavailable(deploy)
    new_now = _spec_replicas(new)
    total = new_now + sum(_spec_replicas(o) for o in olds)
    if new_now < replicas:
        scale_up = min(replicas + surge - total, replicas - new_now)
        if scale_up > 0:
            return new_now + scale_up, []  # scale up first, like reconcileNewReplicaSet
    elif new_now > replicas:
        return replicas, []
    min_available = replicas - unavailable
    new_unavailable = new_now - _status_count(new, "availableReplicas")
    budget = total - min_available - new_unavailable
    downs: list[tuple[Obj, int]] = []
    targets = {id(o): _spec_replicas(o) for o in olds}
    ordered = sorted(olds, key=_created)
    # cleanupUnhealthyReplicas: replicas that are not available go first.
    for old in ordered:
        if budget <= 0:
            break
        unhealthy = targets[id(old)] - _status_count(old, "availableReplicas")
        cut = min(max(unhealthy, 0), budget)
        targets[id(old)] -= cut
        budget -= cut
    # scaleDownOldReplicaSetsForRollingUpdate: available ones within maxUnavailable.
    available = sum(_status_count(r, "availableReplicas") for r in [new, *olds])
    room = min(available - min_available, budget)
    for old in ordered:
        if room <= 0:
            break
        cut = min(targets[id(old)], room)
        targets[id(old)] -= cut
        room -= cut
    for old in olds:
        if targets[id(old)] != _spec_replicas(old):
            downs.append((old, targets[id(old)]))
    return new_now, downs


def plan_deployment(
    deploy: Mapping[str, Any], replicasets: Sequence[Mapping[str, Any]], *, now: float
) -> DeploymentPlan:
    """Everything the controller should do for one Deployment given its ReplicaSets."""
    spec = deploy.get("spec") or {}
    meta = deploy.get("metadata") or {}
    old_status: Obj = copy.deepcopy(dict(deploy.get("status") or {}))
    replicas = _int(spec.get("replicas"), 1)
    collisions = old_status.get("collisionCount")
    pod_hash = hash_template(spec.get("template") or {}, collision_count=collisions)
    template = _without_hash(spec.get("template") or {})
    rss = [dict(r) for r in replicasets]
    new = next(
        (r for r in rss if _without_hash((r.get("spec") or {}).get("template") or {}) == template),
        None,
    )
    olds = [r for r in rss if r is not new]
    plan = DeploymentPlan(status={}, status_changed=False)
    planned = {id(r): _spec_replicas(r) for r in rss}
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    created_name = ""
    if not meta.get("deletionTimestamp"):
        old_active = [o for o in olds if _spec_replicas(o) > 0]
        if recreate:
            plan.scale += [(o, 0) for o in old_active]
            for o in old_active:
                planned[id(o)] = 0
        if new is None:
            if recreate:
                first = (
                    0
                    if any(_status_count(o, "replicas") or _spec_replicas(o) for o in olds)
                    else replicas
                )
            elif old_active:
                surge, _ = surge_and_unavailable(deploy)
                total = sum(_spec_replicas(o) for o in olds)
                first = max(0, min(replicas + surge - total, replicas))
            else:
                first = replicas
            revision = max((_revision(r) for r in rss), default=0) + 1
            plan.create = new_replicaset(deploy, pod_hash, replicas=first, revision=revision)
            created_name = str(plan.create["metadata"]["name"])
            plan.events.append(f"Scaled up replica set {created_name} from 0 to {first}")
        elif recreate:
            if (
                not any(_status_count(o, "replicas") for o in olds)
                and _spec_replicas(new) != replicas
            ):
                plan.scale.append((new, replicas))
        elif not old_active:
            if _spec_replicas(new) != replicas:
                plan.scale.append((new, replicas))  # a scaling event
        else:
            target, downs = _rolling_targets(deploy, new, olds)
            if target != _spec_replicas(new):
                plan.scale.append((new, target))
            plan.scale += downs
        for rs, target in plan.scale:
            planned[id(rs)] = target
            before = _spec_replicas(rs)
            verb = "up" if target > before else "down"
            plan.events.append(
                f"Scaled {verb} replica set {rs['metadata']['name']} from {before} to {target}"
            )
        limit = _int(spec.get("revisionHistoryLimit"), 10)
        idle = sorted(
            (o for o in olds if planned[id(o)] == 0 and _status_count(o, "replicas") == 0),
            key=_created,
        )
        plan.delete = idle[: max(0, len(idle) - limit)]
    plan.status = _status(deploy, new, rss, planned, old_status, created_name=created_name, now=now)
    plan.status_changed = plan.status != old_status
    return plan


def _status(
    deploy: Mapping[str, Any],
    new: Obj | None,
    rss: list[Obj],
    planned: dict[int, int],
    old_status: Obj,
    *,
    created_name: str,
    now: float,
) -> Obj:
    spec = deploy.get("spec") or {}
    replicas = _int(spec.get("replicas"), 1)
    _, max_unavailable = surge_and_unavailable(deploy)
    available = sum(_status_count(r, "availableReplicas") for r in rss)
    total = sum(planned.values())
    status: Obj = {
        "observedGeneration": int((deploy.get("metadata") or {}).get("generation") or 1),
        "replicas": sum(_status_count(r, "replicas") for r in rss),
        "updatedReplicas": _status_count(new, "replicas") if new is not None else 0,
        "readyReplicas": sum(_status_count(r, "readyReplicas") for r in rss),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total - available),
    }
    if old_status.get("collisionCount") is not None:
        status["collisionCount"] = old_status["collisionCount"]
    conditions = copy.deepcopy(list(old_status.get("conditions") or []))
    if available >= replicas - max_unavailable:
        _set_condition(
            conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    else:
        _set_condition(
            conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    name = created_name or (str(new["metadata"]["name"]) if new is not None else "")
    if created_name:
        _set_condition(
            conditions,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            f'Created new replica set "{name}"',
            now,
        )
    elif new is not None:
        olds_left = sum(_status_count(r, "replicas") for r in rss if r is not new)
        done = (
            status["updatedReplicas"] == replicas
            and _status_count(new, "availableReplicas") == replicas
            and olds_left == 0
        )
        if done:
            _set_condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{name}" has successfully progressed.',
                now,
            )
        else:
            _set_condition(
                conditions,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{name}" is progressing.',
                now,
            )
    if conditions:
        status["conditions"] = conditions
    for key in (
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ):
        if status[key] == 0:
            del status[key]  # DeploymentStatus counters are all omitempty
    return status
