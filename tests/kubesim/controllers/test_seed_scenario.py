"""Issue #3 acceptance 3, the seed scenario at simulator level.

Pods run on nodes that are then lost; after the node monitor grace plus the default toleration
the taint-eviction controller deletes them gracefully and, with their kubelet gone, they stay
Terminating; a same-name create answers 409 "object is being deleted"; a grace-0 delete removes a
pod unless a finalizer holds it; the out-of-service taint or deleting the Node makes PodGC remove
them. One cluster for the module (node-1, node-2, node-3 lost, node-4 healthy so the cluster is
not in full-disruption mode), one pod per behaviour; the timing of the eviction itself, through
the CLI, is in `test_seed_timing.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from cluster_support import FAST, eventually, kubesim_command, pod_manifest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from kubesim.cluster import Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")

NS = "default"
HOLD = "example.com/hold"
# pod name -> (node, finalizers)
PODS: dict[str, tuple[str, list[str]]] = {
    "stuck": ("node-1", []),
    "same": ("node-1", []),
    "forced": ("node-1", []),
    "held": ("node-1", [HOLD]),
    "oos": ("node-2", []),
    "orphan": ("node-3", []),
    "marked": ("node-3", [HOLD]),
}


@dataclass
class Seed:
    cluster: Cluster
    core: k8s.CoreV1Api
    node3_deleted_before: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def delete_node_3(self) -> float:
        """Delete node-3 once, with the real CLI; return the time just before."""
        async with self.lock:
            if self.node3_deleted_before is None:
                before = time.monotonic()
                proc = await asyncio.create_subprocess_exec(
                    *kubesim_command(),
                    "ctl",
                    "--server",
                    self.cluster.url,
                    "delete-node",
                    "node-3",
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                _, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()
                self.node3_deleted_before = before
            return self.node3_deleted_before


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seed() -> AsyncIterator[Seed]:
    cluster = Cluster(dataclasses.replace(FAST, nodes=4))
    await cluster.start()
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(cluster.kubeconfig_path), client_configuration=configuration
    )
    try:
        async with k8s.ApiClient(configuration) as api_client:
            core = k8s.CoreV1Api(api_client)
            for name, (node, finalizers) in PODS.items():
                manifest = pod_manifest(
                    name,
                    grace=1,
                    finalizers=finalizers,
                    node_selector={"kubernetes.io/hostname": node},
                )
                await core.create_namespaced_pod(NS, manifest)

            async def all_running() -> bool:
                pods = (await core.list_namespaced_pod(NS)).items
                return sum(p.status.phase == "Running" for p in pods) == len(PODS)

            await eventually(all_running, what="seed pods Running")
            for node in ("node-1", "node-2", "node-3"):
                cluster.lose_node(node)

            async def all_terminating() -> bool:
                pods = (await core.list_namespaced_pod(NS)).items
                return sum(p.metadata.deletion_timestamp is not None for p in pods) == len(PODS)

            await eventually(all_terminating, timeout=10, what="seed pods Terminating")
            yield Seed(cluster, core)
    finally:
        await cluster.stop()


async def read(seed: Seed, name: str) -> k8s.V1Pod:
    return await seed.core.read_namespaced_pod(name, NS)


async def gone(seed: Seed, name: str) -> bool:
    try:
        await read(seed, name)
    except ApiException as exc:
        return exc.status == 404
    return False


async def test_lost_node_is_unknown_and_tainted_unreachable(seed: Seed) -> None:
    node = await seed.core.read_node("node-1")
    conditions = {c.type: c for c in node.status.conditions}
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        assert conditions[kind].status == "Unknown"
        assert conditions[kind].reason == "NodeStatusUnknown"
    taints = {(t.key, t.effect): t for t in node.spec.taints}
    assert ("node.kubernetes.io/unreachable", "NoSchedule") in taints
    assert taints["node.kubernetes.io/unreachable", "NoExecute"].time_added is not None


async def test_pods_of_a_lost_node_are_marked_not_ready(seed: Seed) -> None:
    pod = await read(seed, "stuck")
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"


async def test_evicted_pod_stays_terminating_with_disruption_target(seed: Seed) -> None:
    pod = await read(seed, "stuck")
    assert pod.metadata.deletion_grace_period_seconds == 1
    target = {c.type: c for c in pod.status.conditions}["DisruptionTarget"]
    assert target.status == "True" and target.reason == "DeletionByTaintManager"
    # Wait until well past the end of the 1 s grace period: nobody finishes the deletion.
    past_grace = pod.metadata.deletion_timestamp + dt.timedelta(seconds=1.5)
    await asyncio.sleep(max(0.0, (past_grace - dt.datetime.now(dt.UTC)).total_seconds()))
    still = await read(seed, "stuck")
    assert still.metadata.deletion_timestamp is not None
    assert still.status.phase == "Running"
    events = await seed.core.list_namespaced_event(NS, field_selector="involvedObject.name=stuck")
    assert "TaintManagerEviction" in {e.reason for e in events.items}


async def test_same_name_create_answers_409_object_is_being_deleted(seed: Seed) -> None:
    with pytest.raises(ApiException) as info:
        await seed.core.create_namespaced_pod(NS, pod_manifest("same"))
    assert info.value.status == 409
    assert "object is being deleted" in info.value.body


async def test_grace_zero_delete_removes_the_stuck_pod(seed: Seed) -> None:
    await seed.core.delete_namespaced_pod("forced", NS, grace_period_seconds=0)
    assert await gone(seed, "forced")


async def test_grace_zero_delete_leaves_a_pod_held_by_a_finalizer(seed: Seed) -> None:
    await seed.core.delete_namespaced_pod("held", NS, grace_period_seconds=0)
    pod = await read(seed, "held")
    assert pod.metadata.finalizers == [HOLD]
    await seed.core.patch_namespaced_pod(
        "held", NS, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    assert await eventually(lambda: gone(seed, "held"), what="pod removed")


async def test_out_of_service_taint_makes_podgc_remove_the_stuck_pod(seed: Seed) -> None:
    node = await seed.core.read_node("node-2")
    taints: list[dict[str, Any]] = [t.to_dict() for t in node.spec.taints or []]
    taints.append(
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    )
    await seed.core.patch_node("node-2", {"spec": {"taints": taints}})
    assert await eventually(lambda: gone(seed, "oos"), timeout=5, what="PodGC removal")
    assert seed.cluster.podgc is not None
    assert (f"{NS}/oos", "terminating-out-of-service") in seed.cluster.podgc.deleted


async def test_deleting_the_node_makes_podgc_remove_its_pods_after_quarantine(seed: Seed) -> None:
    before = await seed.delete_node_3()
    assert await eventually(lambda: gone(seed, "orphan"), timeout=5, what="PodGC removal")
    assert time.monotonic() - before >= 0.5  # the quarantine
    assert seed.cluster.podgc is not None
    assert (f"{NS}/orphan", "orphaned") in seed.cluster.podgc.deleted


async def test_podgc_marks_the_pod_failed_before_deleting_it(seed: Seed) -> None:
    await seed.delete_node_3()

    async def failed() -> k8s.V1Pod | None:
        current = await read(seed, "marked")
        return current if current.status.phase == "Failed" else None

    current = await eventually(failed, timeout=5, what="phase Failed")
    target = {c.type: c for c in current.status.conditions}["DisruptionTarget"]
    assert target.reason == "DeletionByPodGC"
    assert target.message == "PodGC: node no longer exists"
    assert current.metadata.deletion_grace_period_seconds == 0  # force-deleted; finalizer holds it
