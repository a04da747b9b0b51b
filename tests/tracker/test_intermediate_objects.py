"""Issue 19 Build 5: `cleared` waits for the objects between a wrapped kind and its pods.

A wrapped Deployment's ReplicaSet carries the AppWrapper label (the dispatcher stamps the pod
template, the Deployment controller copies the template's labels onto the ReplicaSet) but is no
generic item, so no inventory names it. Here the ReplicaSet is held by a finalizer after its
Deployment is deleted and its pods are gone (the force deletion's job): the tracker must keep the
teardown open until the ReplicaSet is gone too. On the code before this change the teardown
cleared as soon as the Deployment and the pods were gone (the final LIST never looked at
ReplicaSets).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tracker_support import NAMESPACE, Stack, eventually, pods_of

from clearance import labels
from clearance.events import CycleCleared, TeardownPolicy
from clearance.kube import PODS, Resource

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
HOLD = "e2e.clearance.dev/hold"
SLOW = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)


async def _deployment(stack: Stack, name: str, *, replicas: int) -> dict[str, Any]:
    stamp = labels.stamp(appwrapper=name, namespace=NAMESPACE, attempt=1)
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": stamp},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **stamp}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        },
    }
    return dict(json.loads(await stack.kube.create(DEPLOYMENTS, body, namespace=NAMESPACE)))


async def _replicasets(stack: Stack, aw: str) -> list[dict[str, Any]]:
    listed = await stack.kube.list(
        REPLICASETS, namespace=NAMESPACE, label_selector=labels.selector_for(aw)
    )
    return [json.loads(bytes(raw)) for raw in listed.items]


async def test_a_replicaset_left_behind_by_its_deployment_holds_cleared(stack: Stack) -> None:
    await stack.start_tracker()
    deployment = await _deployment(stack, "web", replicas=2)

    async def running() -> list[dict[str, Any]] | None:
        pods = await pods_of(stack, "web")
        up = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return up if len(up) == 2 else None

    pods = await eventually(running, timeout=15)
    [rs] = await _replicasets(stack, "web")
    rs_name, rs_uid = rs["metadata"]["name"], rs["metadata"]["uid"]
    await stack.kube.patch(
        REPLICASETS, rs_name, {"metadata": {"finalizers": [HOLD]}}, namespace=NAMESPACE
    )
    # The teardown as the dispatcher does it: the item (Background), then, past the force
    # deadline, the pods with grace 0. The ReplicaSet is being deleted, so it makes no new pod.
    await stack.kube.delete(
        DEPLOYMENTS, "web", namespace=NAMESPACE, propagation_policy="Background"
    )

    async def rs_terminating() -> bool:
        found = await _replicasets(stack, "web")
        return bool(found) and bool(found[0]["metadata"].get("deletionTimestamp"))

    await eventually(rs_terminating, timeout=10)
    for pod in pods:
        await stack.kube.delete(PODS, pod["metadata"]["name"], namespace=NAMESPACE,
                                grace_period_seconds=0)  # fmt: skip
    await eventually(lambda: _no_pods(stack), timeout=10)
    started = await stack.start_teardown("web", inventory=[deployment, *pods], policy=SLOW)

    # Verification rounds (CLEARANCE_VERIFY_INTERVAL=1s) with only the ReplicaSet left.
    await asyncio.sleep(2.5)
    assert not stack.recorder.of("cycle.cleared", aw="web"), "cleared while a ReplicaSet exists"
    record = await stack.record(started)
    assert record is not None and rs_uid in record.objects, record

    await stack.kube.patch(
        REPLICASETS, rs_name, {"metadata": {"finalizers": None}}, namespace=NAMESPACE
    )
    cleared = (await stack.cleared("web", timeout=15)).event
    assert isinstance(cleared, CycleCleared)
    assert rs_uid in {o.uid for o in cleared.confirmed}
    assert await _replicasets(stack, "web") == []


async def _no_pods(stack: Stack) -> bool:
    return not await pods_of(stack, "web")
