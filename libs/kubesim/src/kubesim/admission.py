"""Defaulting and mutating admission applied on create, per resource type.

What the real API server does before storing: SetDefaults_* for pods and jobs, the
DefaultTolerationSeconds plugin, Job selector generation, namespace finalizers, and the
status reset of PrepareForCreate. Pure functions that mutate the dict they are given.
"""

from __future__ import annotations

import base64
from typing import Any

from kubesim.resources import ResourceType

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def _quantity_nonzero(value: Any) -> bool:
    return value not in (None, "", 0, "0")


def default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image", ""))
    if "imagePullPolicy" not in container:
        last = image.rsplit("/", 1)[-1]
        tagged = ":" in last and not last.endswith(":latest")
        container["imagePullPolicy"] = "IfNotPresent" if tagged or "@" in image else "Always"
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, qty in limits.items():
            requests.setdefault(name, qty)


def default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                default_container(c)


def qos_class(spec: dict[str, Any]) -> str:
    requests_seen = False
    guaranteed = True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if any(_quantity_nonzero(v) for v in req.values()) or any(
            _quantity_nonzero(v) for v in lim.values()
        ):
            requests_seen = True
        for name in ("cpu", "memory"):
            if name not in lim or str(req.get(name, lim[name])) != str(lim[name]):
                guaranteed = False
    if not requests_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def add_default_tolerations(spec: dict[str, Any], seconds: int) -> None:
    """DefaultTolerationSeconds: not-ready/unreachable NoExecute unless already tolerated."""
    tolerations = spec.get("tolerations") or []
    not_ready = unreachable = False
    for t in tolerations:
        key = t.get("key") or ""
        effect = t.get("effect") or ""
        if effect not in ("", "NoExecute"):
            continue
        if key in ("", NOT_READY_TAINT):
            not_ready = True
        if key in ("", UNREACHABLE_TAINT):
            unreachable = True
    added = list(tolerations)
    if not not_ready:
        added.append(
            {
                "key": NOT_READY_TAINT,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": seconds,
            }
        )
    if not unreachable:
        added.append(
            {
                "key": UNREACHABLE_TAINT,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": seconds,
            }
        )
    spec["tolerations"] = added


def prepare_pod(obj: dict[str, Any], *, toleration_seconds: int) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    add_default_tolerations(spec, toleration_seconds)
    spec.setdefault("priority", 0)
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def prepare_job(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = (
            "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        )
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    if tmeta.get("labels") and not meta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    default_pod_spec(template.setdefault("spec", {}))
    if not spec.get("manualSelector"):
        uid = meta["uid"]
        labels = dict(tmeta.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": uid,
                "job-name": meta["name"],
            }
        )
        tmeta["labels"] = labels
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    obj["status"] = {}


def fold_secret_string_data(obj: dict[str, Any]) -> None:
    """Secret.stringData is write-only: merged into data (base64) on every write."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def default_apps(plural: str, spec: dict[str, Any]) -> None:
    """apps/v1 SetDefaults_Deployment/ReplicaSet/StatefulSet/DaemonSet (+ the pod template)."""
    if plural != "daemonsets" and spec.get("replicas") is None:
        spec["replicas"] = 1
    if plural == "deployments":
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif plural == "statefulsets":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault(
            "persistentVolumeClaimRetentionPolicy",
            {"whenDeleted": "Retain", "whenScaled": "Retain"},
        )
    elif plural == "daemonsets":
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])


# PrepareForCreate resets status to the empty Go struct; its non-omitempty fields serialize as 0
# (kubernetes-asyncio's V1StatefulSetStatus/V1ReplicaSetStatus refuse a missing `replicas`).
EMPTY_APPS_STATUS: dict[str, dict[str, int]] = {
    "deployments": {},
    "replicasets": {"replicas": 0},
    "statefulsets": {"replicas": 0, "availableReplicas": 0},
    "daemonsets": {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
}


def prepare_create(rt: ResourceType, obj: dict[str, Any], *, toleration_seconds: int) -> None:
    """PrepareForCreate + defaulting for the types that have it."""
    if rt.group == "" and rt.plural == "pods":
        prepare_pod(obj, toleration_seconds=toleration_seconds)
    elif rt.group == "batch" and rt.plural == "jobs":
        prepare_job(obj)
    elif rt.group == "" and rt.plural == "namespaces":
        spec = obj.setdefault("spec", {})
        spec["finalizers"] = ["kubernetes"]
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.group == "" and rt.plural == "secrets":
        fold_secret_string_data(obj)
        obj.setdefault("type", "Opaque")
    elif rt.group == "" and rt.plural == "nodes":
        obj.setdefault("status", {})
    elif rt.group == "apps" and rt.plural in EMPTY_APPS_STATUS:
        default_apps(rt.plural, obj.setdefault("spec", {}))
        obj["status"] = dict(EMPTY_APPS_STATUS[rt.plural])
    elif rt.has_status and rt.custom:
        obj.pop("status", None)
    elif rt.group == "apiextensions.k8s.io":
        obj["status"] = {
            "acceptedNames": dict((obj.get("spec") or {}).get("names") or {}),
            "conditions": [],
            "storedVersions": [
                v.get("name")
                for v in (obj.get("spec") or {}).get("versions") or []
                if v.get("storage")
            ],
        }
