"""Scheduling predicates: taints and tolerations, node selection, resource fit.

Pure functions over raw dicts, used by the scheduler (NoSchedule/NoExecute filtering and
resource fit) and by taint eviction (NoExecute toleration and `tolerationSeconds`). The
messages are the real scheduler plugins' messages, so a `FailedScheduling` event reads like one
from a real cluster.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from kubesim.controllers.objects import Obj, condition, is_terminal
from kubesim.quantity import QuantityError, parse_quantity

__all__ = [
    "FitResult",
    "Resources",
    "Usage",
    "allocatable_of",
    "choose_node",
    "fits",
    "format_unschedulable",
    "matches_node_affinity",
    "matching_tolerations",
    "node_usage",
    "pod_requests",
    "resource_reasons",
    "static_reasons",
    "tolerates",
    "untolerated_taints",
]

Resources = dict[str, Fraction]
Usage = tuple[Resources, int]
"""A node's load: the requests of its counted pods summed, and how many pods they are."""


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """`Toleration.ToleratesTaint` from k8s.io/api/core/v1/toleration.go.

    Empty effect matches every effect; empty key with `Exists` matches every key; operator
    `Equal` (or empty) compares values; `Exists` ignores the value.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taints(
    pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]], *, effects: Sequence[str]
) -> list[Obj]:
    """Taints with one of `effects` that none of the pod's tolerations tolerates."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return [
        dict(taint)
        for taint in taints
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations)
    ]


def matching_tolerations(
    pod: Mapping[str, Any], taints: Iterable[Mapping[str, Any]]
) -> tuple[bool, list[Obj]]:
    """`v1helper.GetMatchingTolerations`: (all tolerated?, the tolerations that were used)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    used: list[Obj] = []
    for taint in taints:
        match = next((t for t in tolerations if tolerates(t, taint)), None)
        if match is None:
            return False, []
        used.append(dict(match))
    return True, used


def _label_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key", "")
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """`nodeSelector` plus `requiredDuringSchedulingIgnoredDuringExecution` node affinity."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": str(meta.get("name", ""))}
    for term in terms:  # terms are ORed, expressions inside a term ANDed
        exprs = term.get("matchExpressions") or []
        field_exprs = term.get("matchFields") or []
        if not exprs and not field_exprs:
            continue
        if all(_label_matches(e, labels) for e in exprs) and all(
            _label_matches(e, fields) for e in field_exprs
        ):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _amount(value: str | int | float) -> Fraction | None:
    """``parse_quantity`` remembered: a scheduling pass re-reads the requests of every bound pod,
    and a cluster has few distinct quantity strings (4,000 pods cost 0.2 s a pass unremembered).
    """
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _quantities(raw: Mapping[str, Any]) -> Resources:
    """Resource name → amount, leaving out the values that are no quantity."""
    out: Resources = {}
    for name, value in raw.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            amount = _amount(value)
        else:
            try:  # whatever else parse_quantity accepts or refuses, unremembered
                amount = parse_quantity(value)
            except QuantityError:
                amount = None
        if amount is not None:
            out[name] = amount
    return out


def _container_resources(container: Mapping[str, Any]) -> Resources:
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    # API defaulting copies limits into unset requests; do it here too in case the pod skipped it.
    for name, value in (resources.get("limits") or {}).items():
        requests.setdefault(name, value)
    return _quantities(requests)


_REQUESTS: dict[tuple[str, str], Resources] = {}
"""Requests of pods already read, by (uid, resourceVersion): a scheduling pass reads every bound
pod's. Bounded: cleared when it holds more than :data:`_REQUESTS_LIMIT` pods."""
_REQUESTS_LIMIT = 100_000


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """`computePodResourceRequest`: containers summed, max with each init container, + overhead.

    The returned mapping may be shared between calls: read it, never change it."""
    meta = pod.get("metadata") or {}
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not rv:
        return _pod_requests(pod)
    key = (str(uid), str(rv))
    found = _REQUESTS.get(key)
    if found is None:
        if len(_REQUESTS) >= _REQUESTS_LIMIT:
            _REQUESTS.clear()
        found = _REQUESTS[key] = _pod_requests(pod)
    return found


def _pod_requests(pod: Mapping[str, Any]) -> Resources:
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_resources(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_resources(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    for name, amount in _quantities(spec.get("overhead") or {}).items():
        total[name] = total.get(name, Fraction(0)) + amount
    return total


def _allocatable(node: Mapping[str, Any]) -> Resources:
    status = node.get("status") or {}
    return _quantities(status.get("allocatable") or status.get("capacity") or {})


def _counts_on_node(pod: Mapping[str, Any]) -> bool:
    # The scheduler's pod informer excludes Succeeded/Failed pods; Terminating pods still count:
    # their containers may be running, so their resources are not free yet.
    return not is_terminal(pod)


class FitResult:
    """Why a pod does (not) fit a node: the list of failure reasons (empty means it fits)."""

    __slots__ = ("free", "reasons")

    def __init__(self, reasons: list[str], free: Resources) -> None:
        self.reasons = reasons
        self.free = free

    @property
    def ok(self) -> bool:
        return not self.reasons


def node_usage(pods_on_node: Iterable[Mapping[str, Any]]) -> tuple[Resources, int]:
    """Requests held on a node and the pod count: every non-terminal pod, Terminating included."""
    used: Resources = {}
    count = 0
    for other in pods_on_node:
        if not _counts_on_node(other):
            continue
        count += 1
        for name, amount in pod_requests(other).items():
            used[name] = used.get(name, Fraction(0)) + amount
    return used, count


def fits(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods_on_node: Iterable[Mapping[str, Any]],
    *,
    usage: tuple[Resources, int] | None = None,
) -> FitResult:
    """Run the filter plugins the simulator models against one node.

    NodeReady (kubesim's own: a lost node is not a candidate even before it is tainted),
    NodeUnschedulable, NodeAffinity (nodeSelector + required affinity), TaintToleration
    (NoSchedule/NoExecute) and NodeResourcesFit (requests vs allocatable minus the requests of
    every non-terminal pod bound to the node, Terminating ones included, plus the pod count).
    `usage` (from `node_usage`) saves recomputing the node's load for every pending pod.
    """
    reasons = static_reasons(pod, node)
    allocatable = _allocatable(node)
    used, count = usage if usage is not None else node_usage(pods_on_node)
    free = {name: allocatable[name] - used.get(name, Fraction(0)) for name in allocatable}
    reasons += resource_reasons(
        sorted(pod_requests(pod).items()), free, count, allocatable.get("pods")
    )
    return FitResult(reasons, free)


def static_reasons(pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    """The filters that read no usage: readiness, unschedulable, affinity, taints, in order.

    They read only the pod's tolerations, nodeSelector and affinity, so pods alike in those
    get the same answer from the same node."""
    reasons: list[str] = []
    ready = condition(node, "Ready")
    if ready is None or ready.get("status") != "True":
        reasons.append("node(s) were not ready")
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and untolerated_taints(
        pod,
        [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        effects=("NoSchedule",),
    ):
        reasons.append("node(s) were unschedulable")
    if not matches_node_affinity(pod, node):
        reasons.append("node(s) didn't match Pod's node affinity/selector")
    bad = untolerated_taints(pod, spec.get("taints") or [], effects=("NoSchedule", "NoExecute"))
    if bad:
        taint = bad[0]
        reasons.append(
            f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
        )
    return reasons


def resource_reasons(
    requests: Sequence[tuple[str, Fraction]],
    free: Mapping[str, Fraction],
    count: int,
    max_pods: Fraction | None,
) -> list[str]:
    """NodeResourcesFit: the pod count, then each positive request (sorted by name) vs free."""
    reasons: list[str] = []
    if max_pods is not None and count + 1 > max_pods:
        reasons.append("Too many pods")
    for name, amount in requests:
        if amount <= 0:
            continue
        if amount > free.get(name, Fraction(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def allocatable_of(node: Mapping[str, Any]) -> Resources:
    """The node's allocatable (capacity when unset) as amounts."""
    return _allocatable(node)


def choose_node(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    pods_by_node: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    usage: Mapping[str, tuple[Resources, int]] | None = None,
) -> tuple[str | None, Counter[str]]:
    """Pick the feasible node with the most free cpu+memory share (LeastAllocated scoring).

    Returns (node name or None, failure reasons counted over nodes). Ties go to the name that
    sorts first, so test runs are deterministic (the real scheduler breaks ties at random).
    """
    failures: Counter[str] = Counter()
    best: tuple[float, str] | None = None
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        result = fits(
            pod, node, pods_by_node.get(name, ()), usage=usage.get(name) if usage else None
        )
        if not result.ok:
            for reason in set(result.reasons):
                failures[reason] += 1
            continue
        allocatable = _allocatable(node)
        share = 0.0
        for resource in ("cpu", "memory"):
            total = allocatable.get(resource)
            if total:
                share += float(result.free.get(resource, Fraction(0)) / total)
        candidate = (-share, name)
        if best is None or candidate < best:
            best = candidate
    return (best[1] if best else None), failures


def format_unschedulable(total_nodes: int, failures: Counter[str]) -> str:
    """The FailedScheduling message: `0/3 nodes are available: 1 Insufficient cpu, …`."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(failures.items()))
    return (
        f"0/{total_nodes} nodes are available: {parts}. preemption: 0/{total_nodes} nodes are "
        f"available: {total_nodes} Preemption is not helpful for scheduling."
    )
