"""PyTorchJob (`kubeflow.org/v1`): the pods and status the Kubeflow training operator makes.

A **stand-in for the training operator** (kubeflow/training-operator v1 with kubeflow/common),
written from its source (reference cluster-faults-and-workloads.md §4), for the seed scenario's
own workload. Pure logic here; the controller loop is `pytorchjob_controller.py`.

* replica specs `spec.pytorchReplicaSpecs.{Master,Worker}` (lower-case keys accepted) with
  `replicas` (default 1), `restartPolicy` (default `OnFailure`; `ExitCode` runs pods with
  `Never` and decides by exit code) and `template`;
* pod `<job>-<type lower-case>-<index>` with the template's labels plus
  `training.kubeflow.org/operator-name: pytorchjob-controller`, `…/job-name`,
  `…/replica-type` (`master`/`worker`), `…/replica-index`, and `…/job-role: master` on the
  master; env `PYTHONUNBUFFERED`, `MASTER_PORT`, `MASTER_ADDR` (`<job>-master-0`),
  `WORLD_SIZE` (Σ replicas), `RANK` (index, +1 for workers) appended to every container;
  a controller ownerReference with blockOwnerDeletion;
* one headless Service (`clusterIP: None`) named like the pod, **for the Master replica only**
  ("Service is in need only for Master", kubeflow/common `ReconcileJobs`;
  training-operator `ReconcileServices` is called for Master only);
* reconcile by replica-index buckets, **Terminating pods included**: an empty bucket gets a pod;
  so a Terminating worker blocks its own re-creation (same name), and a pod of a deleted
  same-name job (another UID, not adopted) makes the create fail with 409 until it is gone;
  an index ≥ replicas is deleted; a Failed pod under `OnFailure`/`Always`/retryable `ExitCode`
  (130, 137, 138, 143) is deleted and re-created on a later pass, with condition `Restarting`;
* replica statuses `active`/`succeeded`/`failed` per type (a Running pod with a
  deletionTimestamp counts as failed, kubeflow/common#214); conditions `Created`, `Running`,
  `Restarting`, `Succeeded` (when the Master succeeded, or all Workers without a Master),
  `Failed` (restartPolicy `Never` or a permanent exit code); `startTime`, `completionTime`;
* a finished job creates nothing; `runPolicy.cleanPodPolicy` `None` (default) keeps the pods,
  `Running` deletes the running/pending ones, `All` deletes all (with their services).

Out of scope: elastic policy, gang scheduling / PodGroups, `suspend`, `activeDeadlineSeconds`,
`backoffLimit`, `ttlSecondsAfterFinished`, validation webhooks (a template without a container
named `pytorch` is accepted; MASTER_PORT then falls back to the default 23456).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.controllers.objects import Obj, condition, format_time
from kubesim.controllers.podtemplates import controller_reference, is_terminating, pod_from_template

__all__ = [
    "API_VERSION",
    "GROUP",
    "JOB_NAME_LABEL",
    "KIND",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "PyTorchJobPlan",
    "job_pod",
    "job_service",
    "plan_pytorchjob",
    "replica_specs",
]

GROUP = "kubeflow.org"
API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
OPERATOR_NAME = "pytorchjob-controller"
DEFAULT_CONTAINER = "pytorch"
DEFAULT_PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456
MASTER = "Master"
WORKER = "Worker"
RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
_ORDER = {MASTER: 0, WORKER: 1}


@dataclass(slots=True)
class PyTorchJobPlan:
    status: Obj
    status_changed: bool
    create_pods: list[tuple[str, int]] = field(default_factory=list)
    create_services: list[tuple[str, int]] = field(default_factory=list)
    delete_pods: list[Obj] = field(default_factory=list)
    delete_services: list[Obj] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def replica_specs(job: Mapping[str, Any]) -> dict[str, Obj]:
    """The replica specs with the operator's defaults (camel-cased type names, replicas 1,
    restartPolicy OnFailure), Master first."""
    raw = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    out: dict[str, Obj] = {}
    for key, spec in raw.items():
        if not isinstance(spec, dict):
            continue
        rtype = {"master": MASTER, "worker": WORKER}.get(str(key).lower(), str(key))
        out[rtype] = {
            "replicas": 1 if spec.get("replicas") is None else int(spec["replicas"]),
            "restartPolicy": str(spec.get("restartPolicy") or "OnFailure"),
            "template": spec.get("template") or {},
        }
    return dict(sorted(out.items(), key=lambda kv: (_ORDER.get(kv[0], 2), kv[0])))


def _job_labels(name: str) -> dict[str, str]:
    return {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: name}


def _master_port(specs: Mapping[str, Obj]) -> int:
    spec = specs.get(MASTER) or next(iter(specs.values()), {})
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    ordered = sorted(containers, key=lambda c: c.get("name") != DEFAULT_CONTAINER)
    for container in ordered:
        for port in container.get("ports") or []:
            if port.get("name") == DEFAULT_PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


def _general_name(job_name: str, rtype: str, index: int) -> str:
    return f"{job_name}-{rtype.lower()}-{index}".replace("/", "-")


def job_pod(job: Mapping[str, Any], rtype: str, index: int) -> Obj:
    """`createNewPod` + `SetClusterSpec`: the pod of one replica."""
    name = str((job.get("metadata") or {}).get("name"))
    specs = replica_specs(job)
    spec = specs[rtype]
    labels = {
        **_job_labels(name),
        REPLICA_TYPE_LABEL: rtype.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }
    if rtype == MASTER:
        labels[JOB_ROLE_LABEL] = "master"
    ref = controller_reference(job, api_version=API_VERSION, kind=KIND)
    pod = pod_from_template(
        spec["template"],
        owner=job,
        owner_ref=ref,
        name=_general_name(name, rtype, index),
        extra_labels=labels,
    )
    policy = spec["restartPolicy"]
    pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    port = _master_port(specs)
    for container in pod["spec"].get("containers") or []:
        if container.get("name") == DEFAULT_CONTAINER and not any(
            p.get("name") == DEFAULT_PORT_NAME for p in container.get("ports") or []
        ):
            container.setdefault("ports", []).append(
                {"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT}
            )
        env = list(container.get("env") or [])
        env.append({"name": "PYTHONUNBUFFERED", "value": "0"})
        if MASTER in specs:
            rank = index + 1 if rtype == WORKER else index
            env += [
                {"name": "MASTER_PORT", "value": str(port)},
                {"name": "MASTER_ADDR", "value": _general_name(name, MASTER, 0)},
                {"name": "WORLD_SIZE", "value": str(sum(s["replicas"] for s in specs.values()))},
                {"name": "RANK", "value": str(rank)},
            ]
        container["env"] = env
    return pod


def job_service(job: Mapping[str, Any], rtype: str, index: int) -> Obj:
    """`CreateNewService`: headless, selecting exactly this replica's pod."""
    meta = job.get("metadata") or {}
    name = str(meta.get("name"))
    labels = {
        **_job_labels(name),
        REPLICA_TYPE_LABEL: rtype.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }
    port = _master_port(replica_specs(job))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": _general_name(name, rtype, index),
            "namespace": meta.get("namespace"),
            "labels": dict(labels),
            "ownerReferences": [controller_reference(job, api_version=API_VERSION, kind=KIND)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [{"name": DEFAULT_PORT_NAME, "port": port}],
        },
    }


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(key)
    return None if value is None else str(value)


def _buckets(objs: Sequence[Mapping[str, Any]], rtype: str, replicas: int) -> list[list[Obj]]:
    """`GetPodSlices`: by replica-index label; size max(replicas, highest index + 1)."""
    indexed: list[tuple[int, Obj]] = []
    for obj in objs:
        if _label(obj, REPLICA_TYPE_LABEL) != rtype.lower():
            continue
        raw = _label(obj, REPLICA_INDEX_LABEL)
        if raw is None or not raw.isdigit():
            continue
        indexed.append((int(raw), dict(obj)))
    size = max([replicas] + [i + 1 for i, _ in indexed])
    buckets: list[list[Obj]] = [[] for _ in range(size)]
    for index, obj in indexed:
        buckets[index].append(obj)
    return buckets


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == DEFAULT_CONTAINER and terminated:
            return int(terminated.get("exitCode") or 0)
    return None


def _is_failed_job(status: Mapping[str, Any]) -> bool:
    return (condition({"status": status}, "Failed") or {}).get("status") == "True"


def set_job_condition(status: Obj, kind: str, reason: str, message: str, now: float) -> None:
    """kubeflow/common `UpdateJobConditions`: Running and Restarting replace each other;
    Succeeded/Failed turn Running False; nothing changes once the job Failed."""
    if _is_failed_job(status):
        return
    conditions: list[Obj] = list(status.get("conditions") or [])
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and current.get("status") == "True" and current.get("reason") == reason:
        return
    stamp = format_time(now)
    new = {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }
    if current is not None and current.get("status") == "True":
        new["lastTransitionTime"] = current.get("lastTransitionTime", stamp)
    kept: list[Obj] = []
    for cond in conditions:
        other = cond.get("type")
        if other == kind or {kind, other} == {"Running", "Restarting"}:
            continue
        if kind in ("Failed", "Succeeded") and other == "Running":
            cond = {**cond, "status": "False"}
        kept.append(cond)
    status["conditions"] = [*kept, new]


def is_finished(status: Mapping[str, Any]) -> bool:
    return any(
        (condition({"status": status}, kind) or {}).get("status") == "True"
        for kind in ("Succeeded", "Failed")
    )


def plan_pytorchjob(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> PyTorchJobPlan:
    """Everything the operator would do for one PyTorchJob given the pods/services it owns."""
    meta = job.get("metadata") or {}
    name = str(meta.get("name"))
    old_status: Obj = copy.deepcopy(dict(job.get("status") or {}))
    status: Obj = copy.deepcopy(old_status)
    plan = PyTorchJobPlan(status=status, status_changed=False)
    specs = replica_specs(job)
    if not status.get("conditions"):
        set_job_condition(
            status, "Created", "PyTorchJobCreated", f"PyTorchJob {name} is created.", now
        )
    status.setdefault("startTime", format_time(now))
    if is_finished(status):
        _cleanup(plan, job, pods, services)
        if (condition({"status": status}, "Succeeded") or {}).get("status") == "True":
            for counts in (status.get("replicaStatuses") or {}).values():
                if counts.get("active"):
                    counts["succeeded"] = int(counts.get("succeeded") or 0) + counts.pop("active")
    elif not meta.get("deletionTimestamp"):
        replica_statuses: Obj = {}
        for rtype, spec in specs.items():
            replica_statuses[rtype] = _reconcile_type(plan, name, rtype, spec, pods, services, now)
        status["replicaStatuses"] = replica_statuses
        _update_job_status(plan, name, specs, replica_statuses, now)
    plan.status_changed = status != old_status
    if plan.status_changed:
        status["lastReconcileTime"] = format_time(now)
    return plan


def _reconcile_type(
    plan: PyTorchJobPlan,
    name: str,
    rtype: str,
    spec: Obj,
    pods: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]],
    now: float,
) -> Obj:
    replicas = int(spec["replicas"])
    policy = spec["restartPolicy"]
    counts = {"active": 0, "succeeded": 0, "failed": 0}
    for index, bucket in enumerate(_buckets(pods, rtype, replicas)):
        if not bucket:
            if index < replicas:
                plan.create_pods.append((rtype, index))
            continue
        if len(bucket) > 1:
            continue  # "We have too many pods for <type> <index>": only a warning
        pod = bucket[0]
        phase = (pod.get("status") or {}).get("phase")
        if index >= replicas and not is_terminating(pod):
            plan.delete_pods.append(pod)
        exit_code = _exit_code(pod)
        retryable = exit_code is not None and exit_code in RETRYABLE_EXIT_CODES
        if phase == "Failed" and (
            policy in ("OnFailure", "Always") or (policy == "ExitCode" and retryable)
        ):
            if not is_terminating(pod) and pod not in plan.delete_pods:
                plan.delete_pods.append(pod)
            message = f"PyTorchJob {name} is restarting because {rtype} replica(s) failed."
            plan.events.append(("Warning", "PyTorchJobRestarting", message))
            set_job_condition(plan.status, "Restarting", "PyTorchJobRestarting", message, now)
        elif phase == "Failed" and policy == "ExitCode":
            message = f"PyTorchJob {name} is failing because {rtype} replica(s) failed."
            plan.events.append(("Warning", "PyTorchJobFailed", message))
            set_job_condition(plan.status, "Failed", "PyTorchJobFailed", message, now)
        if phase == "Running":
            counts["failed" if is_terminating(pod) else "active"] += 1
        elif phase == "Succeeded":
            counts["succeeded"] += 1
        elif phase == "Failed":
            counts["failed"] += 1
    if rtype == MASTER:
        for index, bucket in enumerate(_buckets(services, rtype, replicas)):
            if not bucket and index < replicas:
                plan.create_services.append((rtype, index))
    labels = {**_job_labels(name), REPLICA_TYPE_LABEL: rtype.lower()}
    out: Obj = {k: v for k, v in counts.items() if v}
    out["labelSelector"] = {"matchLabels": labels}
    out["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return out


def _update_job_status(
    plan: PyTorchJobPlan, name: str, specs: Mapping[str, Obj], replica_statuses: Obj, now: float
) -> None:
    """`PyTorchJobReconciler.UpdateJobStatus`."""
    status = plan.status
    has_master = MASTER in specs
    for rtype, spec in specs.items():
        counts = replica_statuses[rtype]
        replicas = int(spec["replicas"])
        succeeded, running, failed = (
            int(counts.get(k) or 0) for k in ("succeeded", "active", "failed")
        )
        expected = replicas - succeeded
        if (has_master and rtype == MASTER) or (not has_master and rtype == WORKER):
            if running > 0 and not (not has_master and expected == 0):
                set_job_condition(
                    status, "Running", "PyTorchJobRunning", f"PyTorchJob {name} is running.", now
                )
            if expected == 0:
                message = f"PyTorchJob {name} is successfully completed."
                if not is_finished(status):
                    plan.events.append(("Normal", "PyTorchJobSucceeded", message))
                status.setdefault("completionTime", format_time(now))
                set_job_condition(status, "Succeeded", "PyTorchJobSucceeded", message, now)
                return
        if failed > 0 and replicas > succeeded + running:
            if spec["restartPolicy"] != "Never":
                message = (
                    f"PyTorchJob {name} is restarting because {failed} {rtype} replica(s) failed."
                )
                set_job_condition(status, "Restarting", "PyTorchJobRestarting", message, now)
            else:
                message = f"PyTorchJob {name} is failed because {failed} {rtype} replica(s) failed."
                if not _is_failed_job(status):
                    plan.events.append(("Normal", "PyTorchJobFailed", message))
                status.setdefault("completionTime", format_time(now))
                set_job_condition(status, "Failed", "PyTorchJobFailed", message, now)


def _cleanup(
    plan: PyTorchJobPlan,
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]],
) -> None:
    """`deletePodsAndServices` for a finished job, per `runPolicy.cleanPodPolicy`."""
    policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None"
    if policy == "None":
        return
    by_name = {str(s["metadata"]["name"]): dict(s) for s in services}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if policy == "Running" and phase not in ("Running", "Pending"):
            continue
        if not is_terminating(pod):
            plan.delete_pods.append(dict(pod))
        service = by_name.get(str(pod["metadata"]["name"]))
        if service is not None:
            plan.delete_services.append(service)
