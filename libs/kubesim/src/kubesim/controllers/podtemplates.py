"""What the workload controllers share: pods from templates, controller ownerReferences, label
selectors, template hashes, and the pod predicates of `controller_utils.go`.

Pure functions over raw object dicts (see `objects.py` for why there are no client models).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubesim.controllers.objects import Obj, condition, controller_ref, parse_time

__all__ = [
    "SAFE_ALPHABET",
    "controller_reference",
    "hash_template",
    "is_pod_active",
    "is_pod_available",
    "is_pod_ready",
    "is_terminating",
    "owned_pods",
    "pod_from_template",
    "removal_rank",
    "selector_matches",
]

# k8s.io/apimachinery/pkg/util/rand: the alphabet of generateName and of SafeEncodeString.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def controller_reference(owner: Mapping[str, Any], *, api_version: str, kind: str) -> Obj:
    """`metav1.NewControllerRef`: controller and blockOwnerDeletion both true.

    apiVersion/kind are passed in: objects from a list carry none (the server drops them).
    """
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": str(meta.get("name")),
        "uid": str(meta.get("uid")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_pods(pods: Sequence[Mapping[str, Any]], owner_uid: str) -> list[Obj]:
    """Pods whose controller ownerReference points at `owner_uid`."""
    out: list[Obj] = []
    for pod in pods:
        ref = controller_ref(pod)
        if ref is not None and str(ref.get("uid")) == owner_uid:
            out.append(dict(pod))
    return out


def pod_from_template(
    template: Mapping[str, Any],
    *,
    owner: Mapping[str, Any],
    owner_ref: Obj,
    name: str | None = None,
    generate_name: str | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> Obj:
    """`GetPodFromTemplate`: labels, annotations, finalizers and spec from the template."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {
        "namespace": (owner.get("metadata") or {}).get("namespace"),
        "labels": {**(tmeta.get("labels") or {}), **(extra_labels or {})},
        "ownerReferences": [owner_ref],
    }
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """`metav1.LabelSelectorAsSelector(...).Matches`; an empty selector matches nothing here,
    as workload controllers treat it (apps/v1 validation forbids it anyway)."""
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    return all(_expression_matches(e, labels) for e in expressions)


def _fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def hash_template(template: Mapping[str, Any], *, collision_count: int | None = None) -> str:
    """A pod-template-hash / revision hash: fnv32a, then `rand.SafeEncodeString(decimal)`.

    The real controllers hash the Go struct with spew, which cannot be reproduced from JSON;
    kubesim hashes the canonical JSON of the template instead. Same shape (`5d4b7c9f8`), same
    property: a template change gives a new name.
    """
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    digits = str(_fnv32a(data))
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in digits)


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_pod_active(pod: Mapping[str, Any]) -> bool:
    """`controller.IsPodActive`: not Succeeded/Failed and no deletionTimestamp."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not is_terminating(pod)


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    return (condition(pod, "Ready") or {}).get("status") == "True"


def is_pod_available(pod: Mapping[str, Any], *, min_ready_seconds: int, now: float) -> bool:
    """`podutil.IsPodAvailable`: Ready for at least `minReadySeconds`."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time((condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return since is not None and since + min_ready_seconds <= now


def removal_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, float]:
    """`ActivePods` ordering for scale-down: unscheduled, pending, not ready, newest first."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or 0.0
    return (
        1 if spec.get("nodeName") else 0,
        0 if status.get("phase") in (None, "Pending") else 1,
        1 if is_pod_ready(pod) else 0,
        -created,
    )
