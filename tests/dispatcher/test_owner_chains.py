"""Issue 19 Build 5: pods of any owner chain count for their AppWrapper, in capacity and gangs.

The dispatcher finds an AppWrapper's pods by label, never by walking ownerReferences. That is
right only if every controller between a wrapped object and its pods copies the pod template's
labels (which :func:`~clearance_dispatcher.dispatching.build_object` stamps): Deployment →
ReplicaSet → Pod, StatefulSet → Pod, PyTorchJob → Pod. These tests build the pods with kubesim's
own controller functions (the ones `kubesim serve` runs), from the objects the dispatcher would
create, and feed them through the watcher's snapshot into the dispatcher's cluster view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from clearance.events import snapshot_node, snapshot_pod
from clearance_dispatcher.appwrapper import AppWrapperSpec, parse_appwrapper
from clearance_dispatcher.capacity import free_capacity, reservation
from clearance_dispatcher.dispatching import build_object
from clearance_dispatcher.requeueing import enough
from clearance_dispatcher.state import ClusterState
from kubesim.controllers.deployment import new_replicaset
from kubesim.controllers.podtemplates import hash_template
from kubesim.controllers.pytorchjob import job_pod
from kubesim.controllers.replicaset import rs_pod
from kubesim.controllers.statefulset import statefulset_pod

NS, AW = "team-a", "gang"
KEY = (NS, AW)
AW_VERSION = "workload.codeflare.dev/v1beta1"


def _pod_template(app: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [
                {"name": "pytorch", "image": "t:1", "resources": {"requests": {"cpu": "500m"}}}
            ]
        },
    }


def _deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": _pod_template("web"),
        },
    }


def _statefulset(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": _pod_template("db"),
        },
    }


def _pytorchjob(workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _pod_template("train")},
                "Worker": {"replicas": workers, "template": _pod_template("train")},
            }
        },
    }


def _spec(template: dict[str, Any], *, min_available: int) -> AppWrapperSpec:
    raw = {
        "apiVersion": AW_VERSION,
        "kind": "AppWrapper",
        "metadata": {"name": AW, "namespace": NS, "uid": "aw-uid", "generation": 1},
        "spec": {
            "schedulingSpec": {"minAvailable": min_available},
            "resources": {"GenericItems": [{"replicas": 1, "generictemplate": template}]},
        },
    }
    spec = parse_appwrapper(raw)
    assert isinstance(spec, AppWrapperSpec), spec
    return spec


def _created(spec: AppWrapperSpec) -> dict[str, Any]:
    """The item as the dispatcher creates it for attempt 1, as the API server returns it."""
    obj = build_object(spec.items[0], spec, attempt=1, aw_api_version=AW_VERSION)
    obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
    return obj


def deployment_pods(spec: AppWrapperSpec) -> list[dict[str, Any]]:
    deploy = _created(spec)
    template = deploy["spec"]["template"]
    rs = new_replicaset(deploy, hash_template(template), replicas=3, revision=1)
    rs["metadata"]["uid"] = "uid-rs"
    pods = [rs_pod(rs) for _ in range(deploy["spec"]["replicas"])]
    for i, pod in enumerate(pods):
        pod["metadata"]["name"] = f"{pod['metadata']['generateName']}{i:05d}"
    return pods


def statefulset_pods(spec: AppWrapperSpec) -> list[dict[str, Any]]:
    sts = _created(spec)
    return [statefulset_pod(sts, i) for i in range(sts["spec"]["replicas"])]


def pytorchjob_pods(spec: AppWrapperSpec) -> list[dict[str, Any]]:
    job = _created(spec)
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return [job_pod(job, "Master", 0), *(job_pod(job, "Worker", i) for i in range(workers))]


CHAINS: dict[str, tuple[dict[str, Any], Callable[[AppWrapperSpec], list[dict[str, Any]]], str]]
CHAINS = {
    "Deployment→ReplicaSet→Pod": (_deployment(3), deployment_pods, "ReplicaSet"),
    "StatefulSet→Pod": (_statefulset(4), statefulset_pods, "StatefulSet"),
    "PyTorchJob→Pod": (_pytorchjob(3), pytorchjob_pods, "PyTorchJob"),
}


def _observe(
    state: ClusterState, pods: list[dict[str, Any]], *, terminating: int = -1
) -> list[str]:
    uids = []
    for i, raw in enumerate(pods):
        meta = raw["metadata"]
        meta.update(uid=f"pod-{i}", resourceVersion=str(10 + i))
        if i == terminating:
            meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
        raw["spec"]["nodeName"] = "node-1"
        raw["status"] = {"phase": "Running"}
        state.apply_pod(snapshot_pod(raw))
        uids.append(meta["uid"])
    return uids


@pytest.mark.parametrize("chain", list(CHAINS))
def test_every_pod_of_the_chain_counts_for_the_gang(chain: str) -> None:
    template, make_pods, owner_kind = CHAINS[chain]
    spec = _spec(template, min_available=spec_pods(template))
    pods = make_pods(spec)
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {owner_kind}
    state = ClusterState()
    _observe(state, pods)
    counts = state.counts(KEY, 1)
    assert counts.running == len(pods) == spec.min_available
    assert enough(counts, spec.min_available)


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_terminating_pod_of_the_chain_leaves_the_gang_short(chain: str) -> None:
    template, make_pods, _ = CHAINS[chain]
    spec = _spec(template, min_available=spec_pods(template))
    state = ClusterState()
    _observe(state, make_pods(spec), terminating=1)
    counts = state.counts(KEY, 1)
    assert (counts.running, counts.terminating) == (spec.min_available - 1, 1)
    assert not enough(counts, spec.min_available)


@pytest.mark.parametrize("chain", list(CHAINS))
def test_the_chains_pods_replace_the_reservation_in_free_capacity(chain: str) -> None:
    template, make_pods, _ = CHAINS[chain]
    spec = _spec(template, min_available=1)
    expected = spec_pods(template)
    assert spec.requests == {"cpu": 500 * expected}  # read from the template(s)
    state = ClusterState()
    _observe(state, make_pods(spec), terminating=0)  # a Terminating pod still holds its cpu
    created = state.created_requests(KEY, 1)
    assert created == spec.requests
    assert reservation(spec.requests, created) == {}
    node = snapshot_node(
        {
            "metadata": {"name": "node-1", "uid": "n1", "resourceVersion": "1"},
            "status": {
                "allocatable": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    free = free_capacity([node], state.pods.values(), [reservation(spec.requests, created)])
    assert free == {"cpu": 8000 - 500 * expected}  # the pods' requests, counted once


def spec_pods(template: dict[str, Any]) -> int:
    spec = template["spec"]
    if "pytorchReplicaSpecs" in spec:
        return sum(r["replicas"] for r in spec["pytorchReplicaSpecs"].values())
    return int(spec["replicas"])
