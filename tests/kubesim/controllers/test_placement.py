"""Scheduling predicates: tolerations, node selection, resource fit (pure functions)."""

from __future__ import annotations

from typing import Any

from kubesim.controllers.placement import (
    choose_node,
    fits,
    format_unschedulable,
    matching_tolerations,
    pod_requests,
    tolerates,
)
from kubesim.controllers.scheduler import decide_placements
from kubesim.quantity import parse_quantity

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def node(
    name: str = "n1",
    *,
    cpu: str = "2",
    memory: str = "4Gi",
    gpu: int = 0,
    ready: str = "True",
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    pods: int = 110,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]},
    }


def pod(
    name: str = "p",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    gpu: int | None = None,
    node_name: str | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    limits = {"nvidia.com/gpu": str(gpu)} if gpu else {}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}],
        "tolerations": tolerations or [],
    }
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    meta: dict[str, Any] = {"name": name, "uid": name, "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_exists_toleration_with_empty_key_tolerates_every_taint() -> None:
    assert tolerates({"operator": "Exists"}, UNREACHABLE)


def test_equal_toleration_needs_the_same_value() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates({"key": "k", "operator": "Equal", "value": "v"}, taint)
    assert not tolerates({"key": "k", "operator": "Equal", "value": "w"}, taint)


def test_toleration_with_another_effect_does_not_tolerate() -> None:
    assert not tolerates(
        {"key": UNREACHABLE["key"], "operator": "Exists", "effect": "NoSchedule"}, UNREACHABLE
    )


def test_matching_tolerations_reports_the_ones_used() -> None:
    used_toleration = {"key": UNREACHABLE["key"], "operator": "Exists", "tolerationSeconds": 300}
    ok, used = matching_tolerations(pod(tolerations=[used_toleration]), [UNREACHABLE])
    assert ok and used == [used_toleration]
    assert matching_tolerations(pod(), [UNREACHABLE]) == (False, [])


def test_pod_requests_take_max_of_init_containers_and_limits_as_default() -> None:
    p = pod(cpu="500m", gpu=1)
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    requests = pod_requests(p)
    assert requests["cpu"] == 2
    assert requests["nvidia.com/gpu"] == 1


def test_pod_fits_when_requests_are_within_free_allocatable() -> None:
    assert fits(pod(cpu="1"), node(cpu="2"), [pod("other", cpu="1", node_name="n1")]).ok


def test_terminating_pods_still_hold_their_requests() -> None:
    holder = pod("old", cpu="1500m", node_name="n1", phase="Running", deleting=True)
    result = fits(pod(cpu="1"), node(cpu="2"), [holder])
    assert result.reasons == ["Insufficient cpu"]


def test_terminal_pods_release_their_requests() -> None:
    done = pod("old", cpu="2", node_name="n1", phase="Succeeded")
    assert fits(pod(cpu="1"), node(cpu="2"), [done]).ok


def test_gpu_requests_count_against_gpu_allocatable() -> None:
    assert fits(pod(gpu=1), node(gpu=1), []).ok
    assert fits(pod(gpu=1), node(gpu=0), []).reasons == ["Insufficient nvidia.com/gpu"]


def test_memory_is_compared_in_bytes_across_suffixes() -> None:
    assert fits(pod(memory="4096Mi"), node(memory="4Gi"), []).ok
    assert not fits(pod(memory="4097Mi"), node(memory="4Gi"), []).ok


def test_untolerated_noschedule_taint_filters_the_node() -> None:
    tainted = node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    assert fits(pod(), tainted, []).reasons == ["node(s) had untolerated taint {gpu: yes}"]
    tolerant = pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert fits(tolerant, tainted, []).ok


def test_prefer_noschedule_taints_do_not_filter() -> None:
    assert fits(pod(), node(taints=[{"key": "k", "effect": "PreferNoSchedule"}]), []).ok


def test_not_ready_and_unschedulable_nodes_are_filtered() -> None:
    assert "node(s) were not ready" in fits(pod(), node(ready="Unknown"), []).reasons
    assert "node(s) were unschedulable" in fits(pod(), node(unschedulable=True), []).reasons


def test_node_selector_must_match_labels() -> None:
    labelled = node(labels={"pool": "gpu"})
    assert fits(pod(selector={"pool": "gpu"}), labelled, []).ok
    assert fits(pod(selector={"pool": "cpu"}), labelled, []).reasons == [
        "node(s) didn't match Pod's node affinity/selector"
    ]


def test_required_node_affinity_expressions_are_honoured() -> None:
    p = pod()
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    assert fits(p, node(labels={"zone": "a"}), []).ok
    assert not fits(p, node(labels={"zone": "b"}), []).ok


def test_pod_count_limit_is_enforced() -> None:
    assert fits(pod(), node(pods=1), [pod("x", node_name="n1", phase="Running")]).reasons == [
        "Too many pods"
    ]


def test_least_allocated_node_is_chosen() -> None:
    busy = {"n1": [pod("x", cpu="1500m", node_name="n1")], "n2": []}
    chosen, failures = choose_node(pod(cpu="100m"), [node("n1"), node("n2")], busy)
    assert chosen == "n2" and not failures


def test_unschedulable_message_counts_reasons_per_node() -> None:
    chosen, failures = choose_node(
        pod(cpu="3"), [node("n1"), node("n2", ready="Unknown", cpu="8")], {}
    )
    assert chosen is None
    message = format_unschedulable(2, failures)
    assert message.startswith(
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were not ready."
    )


def test_decisions_account_for_pods_placed_earlier_in_the_same_pass() -> None:
    pods = [pod("a", cpu="1500m"), pod("b", cpu="1500m"), pod("c", cpu="1500m")]
    for i, p in enumerate(pods):
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
    decisions = decide_placements(pods, [node("n1"), node("n2")])
    assert [d.node for d in decisions] == ["n1", "n2", None]
    assert "Insufficient cpu" in decisions[2].message


def test_quantity_parser_is_the_one_used_for_fit() -> None:
    assert parse_quantity(node()["status"]["allocatable"]["memory"]) == 4 * 2**30


def test_gated_pods_wait_with_the_scheduling_gated_reason() -> None:
    gated = pod("g", cpu="100m")
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    [decision] = decide_placements([gated], [node("n1")])
    assert decision.node is None and decision.reason == "SchedulingGated"
    assert decision.message == "Scheduling is blocked due to non-empty scheduling gates"
