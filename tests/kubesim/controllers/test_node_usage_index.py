"""The scheduler's running per-node usage equals a fresh sum over the cached pods, always."""

from __future__ import annotations

import itertools
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from kubesim.client import PODS, Informer, KubeClient
from kubesim.controllers.node_usage import UsageIndex
from kubesim.controllers.placement import Usage, node_usage
from kubesim.controllers.scheduler import decide_placements, place_pending

NODES = ("n1", "n2", "n3")
QUANTITIES = ("0", "100m", "250m", "1", "64Mi", "1Gi")


def _pod(name: str, uid: int, rv: int, *, node: str | None, requests: dict[str, str]) -> Any:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"u{uid}",
            "resourceVersion": str(rv),
            "creationTimestamp": f"2026-01-01T00:00:{uid % 60:02d}Z",
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _expected(store: dict[str, Any]) -> dict[str, Usage]:
    by_node: dict[str, list[Any]] = {}
    for pod in store.values():
        if pod["spec"].get("nodeName"):
            by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    sums = {name: node_usage(pods) for name, pods in by_node.items()}
    return {name: usage for name, usage in sums.items() if usage[1] > 0}


requests_st = st.dictionaries(
    st.sampled_from(("cpu", "memory", "nvidia.com/gpu")), st.sampled_from(QUANTITIES), max_size=3
)
step_st = st.tuples(
    st.sampled_from(("add", "bind", "phase", "deleting", "delete", "recreate", "write-through")),
    st.integers(0, 7),
    st.sampled_from((None, *NODES)),
    st.sampled_from(("Pending", "Running", "Succeeded", "Failed")),
    requests_st,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(step_st, max_size=60))
def test_running_usage_equals_a_fresh_sum_after_any_sequence_of_pod_changes(
    steps: list[tuple[str, int, str | None, str, dict[str, str]]],
) -> None:
    informer = Informer(cast(KubeClient, None), PODS)
    index = UsageIndex()
    informer.add_observer(index)
    counter = itertools.count(1)
    for action, slot, node, phase, requests in steps:
        name = f"p{slot}"
        key = f"default/{name}"
        current = informer.get(key)
        rv = next(counter)
        if action == "add" or (current is None and action != "delete"):
            informer._apply("ADDED", _pod(name, rv, rv, node=node, requests=requests))
        elif action == "delete":
            if current is not None:
                informer._apply("DELETED", current)
        elif action == "recreate":  # same name, new uid, no DELETED seen in between
            informer._apply("MODIFIED", _pod(name, rv, rv, node=node, requests=requests))
        else:
            changed = {**current, "metadata": {**current["metadata"], "resourceVersion": str(rv)}}
            if action == "bind" and not current["spec"].get("nodeName") and node:
                changed["spec"] = {**current["spec"], "nodeName": node}
            elif action == "phase":
                changed["status"] = {"phase": phase}
            elif action == "deleting":
                changed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            if action == "write-through":
                changed["status"] = {"phase": phase}
                informer.observe(changed)
            else:
                informer._apply("MODIFIED", changed)
        assert index.snapshot() == _expected(informer.store)
        unbound = {p["metadata"]["uid"] for p in index.unbound()}
        assert unbound == {
            p["metadata"]["uid"] for p in informer.store.values() if not p["spec"].get("nodeName")
        }


def test_a_reset_forgets_the_pods_of_the_old_store() -> None:
    index = UsageIndex()
    index.replace("default/a", None, _pod("a", 1, 1, node="n1", requests={"cpu": "1"}))
    index.reset([("default/b", _pod("b", 2, 2, node="n2", requests={"cpu": "250m"}))])
    assert set(index.snapshot()) == {"n2"}
    assert index.usage("n1") == ({}, 0)


def _node(name: str, cpu: str) -> Any:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from((None, *NODES)), requests_st, st.booleans()), max_size=20),
    st.lists(st.sampled_from(("1", "2", "500m")), min_size=3, max_size=3),
)
def test_placing_from_running_usage_decides_as_summing_every_bound_pod(
    specs: list[tuple[str | None, dict[str, str], bool]], cpus: list[str]
) -> None:
    pods = []
    for i, (node, requests, done) in enumerate(specs):
        pod = _pod(f"p{i}", i, i + 1, node=node, requests=requests)
        if done:
            pod["status"]["phase"] = "Succeeded"
        pods.append(pod)
    nodes = [_node(name, cpu) for name, cpu in zip(NODES, cpus, strict=True)]
    index = UsageIndex()
    index.reset((f"default/{p['metadata']['name']}", p) for p in pods)
    running = place_pending(index.unbound(), nodes, index.snapshot())
    assert running == decide_placements(pods, nodes)
