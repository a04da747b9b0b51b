"""ReplicaSet and Deployment controllers end to end, through kubernetes-asyncio (and the GC).

Reference cluster-faults-and-workloads.md §3 "ReplicaSet contrast": a Terminating pod is not
active, so a ReplicaSet replaces it at once under a new random name.
"""

from __future__ import annotations

import copy
from typing import Any

from cluster_support import eventually
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from kubesim.cluster import Cluster

NS = "default"
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": 0.1}}}
        ],
    },
}


def deployment(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": copy.deepcopy(TEMPLATE),
            **spec,
        },
    }


async def pods_of(core: k8s.CoreV1Api, selector: str = "app=web") -> list[k8s.V1Pod]:
    return list((await core.list_namespaced_pod(NS, label_selector=selector)).items)


async def until_available(apps: k8s.AppsV1Api, name: str, replicas: int) -> k8s.V1Deployment:
    async def ready() -> k8s.V1Deployment | None:
        d = await apps.read_namespaced_deployment(name, NS)
        s = d.status
        done = (
            s.available_replicas == replicas
            and s.updated_replicas == replicas
            and s.replicas == replicas
            and s.observed_generation == d.metadata.generation
        )
        return d if done else None

    return await eventually(ready, timeout=15, what=f"deployment {name} available")


async def test_deployment_creates_a_hashed_replicaset_and_its_pods(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 3))
    d = await until_available(apps, "web", 3)
    rss = (await apps.list_namespaced_replica_set(NS)).items
    assert len(rss) == 1
    rs = rss[0]
    pod_hash = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{pod_hash}"
    ref = rs.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid) == ("Deployment", "web", d.metadata.uid)
    assert ref.controller is True and ref.block_owner_deletion is True
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert rs.status.ready_replicas == 3 and rs.status.available_replicas == 3
    pods = await pods_of(core)
    assert len(pods) == 3
    for pod in pods:
        assert pod.metadata.name.startswith(f"web-{pod_hash}-")
        assert len(pod.metadata.name) == len(f"web-{pod_hash}-") + 5
        assert pod.metadata.owner_references[0].kind == "ReplicaSet"
        assert pod.metadata.owner_references[0].block_owner_deletion is True
        assert pod.metadata.labels["pod-template-hash"] == pod_hash
        assert pod.spec.containers[0].resources.requests == {"cpu": "100m"}
    conditions = {c.type: (c.status, c.reason) for c in d.status.conditions}
    assert conditions["Available"] == ("True", "MinimumReplicasAvailable")
    assert conditions["Progressing"] == ("True", "NewReplicaSetAvailable")


async def test_a_terminating_replicaset_pod_is_replaced_at_once_under_a_new_name(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    manifest = deployment("web", 2)
    manifest["spec"]["template"]["metadata"]["finalizers"] = ["kubesim.dev/hold"]
    await apps.create_namespaced_deployment(NS, manifest)
    await until_available(apps, "web", 2)
    victim = (await pods_of(core))[0]
    await core.delete_namespaced_pod(victim.metadata.name, NS)

    async def replaced() -> list[k8s.V1Pod] | None:
        pods = await pods_of(core)
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        return pods if len(live) == 2 and len(pods) == 3 else None

    pods = await eventually(replaced, timeout=10, what="replacement next to the Terminating pod")
    names = {p.metadata.name for p in pods}
    assert victim.metadata.name in names  # still there, held by its finalizer

    async def counted() -> int | None:
        # The ReplicaSet's status is written after the replacement exists, not with it.
        rs = (await apps.list_namespaced_replica_set(NS)).items[0]
        return rs.status.replicas if rs.status.replicas in (2, 3) else None

    # the Terminating one is not counted
    assert await eventually(counted, timeout=10, what="the ReplicaSet's count") == 2


async def test_lost_node_pods_are_replaced_elsewhere(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    """Node loss → taint eviction → Terminating forever; the ReplicaSet does not wait."""
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 1))
    await until_available(apps, "web", 1)
    original = (await pods_of(core))[0]
    cluster.lose_node(original.spec.node_name)  # the other node stays healthy

    async def stuck_and_replaced() -> bool:
        pods = {p.metadata.name: p for p in await pods_of(core)}
        old = pods.get(original.metadata.name)
        fresh = [p for n, p in pods.items() if n != original.metadata.name]
        return bool(old and old.metadata.deletion_timestamp and fresh)

    await eventually(stuck_and_replaced, timeout=15, what="old pod Terminating + replacement")
    await until_available(apps, "web", 1)
    fresh = [p for p in await pods_of(core) if p.metadata.name != original.metadata.name]
    assert fresh[0].spec.node_name != original.spec.node_name


async def test_a_template_change_rolls_over_to_a_new_replicaset(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 2))
    await until_available(apps, "web", 2)
    old_rs = (await apps.list_namespaced_replica_set(NS)).items[0]
    await apps.patch_namespaced_deployment(
        "web",
        NS,
        {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}},
    )

    async def rolled() -> list[k8s.V1ReplicaSet] | None:
        d = await apps.read_namespaced_deployment("web", NS)
        rss = (await apps.list_namespaced_replica_set(NS)).items
        old = next((r for r in rss if r.metadata.name == old_rs.metadata.name), None)
        done = d.status.updated_replicas == 2 and d.status.available_replicas == 2
        return rss if done and old is not None and old.spec.replicas == 0 else None

    rss = await eventually(rolled, timeout=20, what="rollout to the new ReplicaSet")
    new = next(r for r in rss if r.metadata.name != old_rs.metadata.name)
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"

    async def old_pods_gone() -> bool:
        pods = await pods_of(
            core, f"pod-template-hash={old_rs.metadata.labels['pod-template-hash']}"
        )
        return not pods

    await eventually(old_pods_gone, timeout=10, what="old pods removed")
    images = {p.spec.containers[0].image for p in await pods_of(core)}
    assert images == {"nginx:1.28"}


async def test_scaling_a_deployment_resizes_its_replicaset(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 1))
    await until_available(apps, "web", 1)
    await apps.patch_namespaced_deployment("web", NS, {"spec": {"replicas": 3}})
    await until_available(apps, "web", 3)
    assert len(await pods_of(core)) == 3


async def gone(read: Any, name: str) -> bool:
    try:
        await read(name, NS)
    except ApiException as exc:
        return exc.status == 404
    return False


async def test_background_deletion_cascades_deployment_replicaset_pods(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 2))
    await until_available(apps, "web", 2)
    await apps.delete_namespaced_deployment("web", NS, propagation_policy="Background")

    async def all_gone() -> bool:
        rss = (await apps.list_namespaced_replica_set(NS)).items
        return not rss and not await pods_of(core)

    await eventually(all_gone, timeout=15, what="ReplicaSet and pods collected")


async def test_foreground_deletion_waits_for_the_pods(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    manifest = deployment("web", 1)
    manifest["spec"]["template"]["metadata"]["finalizers"] = ["kubesim.dev/hold"]
    await apps.create_namespaced_deployment(NS, manifest)
    await until_available(apps, "web", 1)
    await apps.delete_namespaced_deployment("web", NS, propagation_policy="Foreground")

    async def pod_terminating() -> k8s.V1Pod | None:
        pods = await pods_of(core)
        return pods[0] if pods and pods[0].metadata.deletion_timestamp else None

    pod = await eventually(pod_terminating, timeout=10, what="pod Terminating")
    d = await apps.read_namespaced_deployment("web", NS)
    assert "foregroundDeletion" in (d.metadata.finalizers or [])  # blocked by the pod
    await core.patch_namespaced_pod(
        pod.metadata.name,
        NS,
        [{"op": "remove", "path": "/metadata/finalizers"}],
    )
    await eventually(
        lambda: gone(apps.read_namespaced_deployment, "web"), timeout=15, what="deployment gone"
    )


async def test_orphan_deletion_keeps_replicaset_and_pods(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web", 2))
    await until_available(apps, "web", 2)
    await apps.delete_namespaced_deployment("web", NS, propagation_policy="Orphan")
    await eventually(
        lambda: gone(apps.read_namespaced_deployment, "web"), timeout=10, what="deployment gone"
    )

    async def orphaned() -> bool:
        rss = (await apps.list_namespaced_replica_set(NS)).items
        return len(rss) == 1 and not rss[0].metadata.owner_references

    await eventually(orphaned, timeout=10, what="ReplicaSet orphaned")
    pods = await pods_of(core)
    assert len(pods) == 2 and all(p.metadata.deletion_timestamp is None for p in pods)
