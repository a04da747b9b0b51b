"""StatefulSet controller end to end, through kubernetes-asyncio and the write history.

Reference cluster-faults-and-workloads.md §3: stable names `<set>-<n>`; OrderedReady creates
ordinal n+1 only once n is Running and Ready; a Terminating pod still fills its slot, so a
missing ordinal is re-created (same name, new UID) only after the old object is gone.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import aiohttp
from cluster_support import eventually
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from kubesim.client import KubeClient
from kubesim.cluster import Cluster

NS = "default"
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "db"}},
    "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "db", "image": "postgres:16"}],
    },
}


def statefulset(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": "db"}},
            "template": copy.deepcopy(TEMPLATE),
            **spec,
        },
    }


async def pods_by_name(core: k8s.CoreV1Api) -> dict[str, k8s.V1Pod]:
    pods = (await core.list_namespaced_pod(NS, label_selector="app=db")).items
    return {p.metadata.name: p for p in pods}


async def until_ready(apps: k8s.AppsV1Api, name: str, replicas: int) -> k8s.V1StatefulSet:
    async def ready() -> k8s.V1StatefulSet | None:
        s = await apps.read_namespaced_stateful_set(name, NS)
        return s if (s.status.ready_replicas or 0) == replicas == s.status.replicas else None

    return await eventually(ready, timeout=15, what=f"statefulset {name} ready")


async def history(cluster: Cluster, **params: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{cluster.url}/kubesim/v1/history", params=params) as resp,
    ):
        body = await resp.json()
    items: list[dict[str, Any]] = body["items"]
    return items


async def test_pods_get_stable_ordinal_names_and_identity_labels(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 3))
    sts = await until_ready(apps, "db", 3)
    pods = await pods_by_name(core)
    assert sorted(pods) == ["db-0", "db-1", "db-2"]
    for i in range(3):
        pod = pods[f"db-{i}"]
        labels = pod.metadata.labels
        assert labels["statefulset.kubernetes.io/pod-name"] == f"db-{i}"
        assert labels["apps.kubernetes.io/pod-index"] == str(i)
        assert labels["controller-revision-hash"] == sts.status.update_revision
        assert pod.spec.hostname == f"db-{i}" and pod.spec.subdomain == "db"
        ref = pod.metadata.owner_references[0]
        assert (ref.kind, ref.uid, ref.controller) == ("StatefulSet", sts.metadata.uid, True)
    assert sts.status.current_revision == sts.status.update_revision
    assert sts.status.current_replicas == 3 and sts.status.updated_replicas == 3
    assert sts.status.available_replicas == 3


async def rejected_pod_creates(cluster: Cluster) -> int:
    """POSTs to the pods collection the API server answered 409 (its request log)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{cluster.url}/kubesim/v1/requests") as resp,
    ):
        records = (await resp.json())["items"]
    return sum(
        1
        for r in records
        if r["method"] == "POST"
        and r["path"].endswith(f"/namespaces/{NS}/pods")
        and r["code"] == 409
    )


async def watch_pods(cluster: Cluster, seen: list[tuple[str, str, bool]]) -> None:
    """Record (event type, pod name, Ready) for every pod change in NS, in RV order."""
    client = KubeClient(cluster.url)
    try:
        listing = await client.list(f"/api/v1/namespaces/{NS}/pods")
        rv = listing["metadata"]["resourceVersion"]
        async for event in client.watch(f"/api/v1/namespaces/{NS}/pods", resource_version=rv):
            obj = event.get("object") or {}
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                conds = (obj.get("status") or {}).get("conditions") or []
                ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
                seen.append((event["type"], obj["metadata"]["name"], ready))
    finally:
        await client.close()


async def test_ordered_ready_creates_each_ordinal_after_the_previous_is_ready(
    cluster: Cluster, api: k8s.ApiClient
) -> None:
    apps = k8s.AppsV1Api(api)
    seen: list[tuple[str, str, bool]] = []
    watcher = asyncio.create_task(watch_pods(cluster, seen))
    await asyncio.sleep(0.2)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 3))
    await until_ready(apps, "db", 3)
    watcher.cancel()
    for previous, following in (("db-0", "db-1"), ("db-1", "db-2")):
        added = seen.index(("ADDED", following, False))
        became_ready = next(
            i for i, (kind, name, ready) in enumerate(seen) if name == previous and ready
        )
        assert became_ready < added, seen


UNSCHEDULABLE = {"nodeSelector": {"kubesim.dev/no-such-node": "true"}}
"""A pod spec that no node matches: its pods stay Pending, never Ready."""


async def _create_unschedulable_set(apps: k8s.AppsV1Api, policy: str) -> None:
    """A 3-replica set of ``policy`` whose pods can never be scheduled, hence never Ready."""
    manifest = statefulset("db", 3, podManagementPolicy=policy)
    manifest["spec"]["template"]["spec"].update(UNSCHEDULABLE)
    await apps.create_namespaced_stateful_set(NS, manifest)


async def _pods_once_at_least(core: k8s.CoreV1Api, count: int) -> set[str]:
    async def enough() -> set[str] | None:
        names = set(await pods_by_name(core))
        return names if len(names) >= count else None

    return await eventually(enough, timeout=10, what=f"{count} pods created")


async def test_parallel_creates_all_pods_without_waiting(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    """Parallel does not wait for an ordinal to be Ready: with pods that can never be scheduled,
    all three exist (judged without racing the scheduler: nothing here is ever Ready)."""
    await _create_unschedulable_set(k8s.AppsV1Api(api), "Parallel")
    assert await _pods_once_at_least(core, 3) == {"db-0", "db-1", "db-2"}


async def test_ordered_ready_holds_the_next_ordinal_while_the_previous_is_not_ready(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    """The same set under OrderedReady stops at db-0: the contrast that gives the Parallel test
    its meaning."""
    await _create_unschedulable_set(k8s.AppsV1Api(api), "OrderedReady")
    assert await _pods_once_at_least(core, 1) == {"db-0"}
    await asyncio.sleep(1.0)  # several controller passes (its resync included) later
    assert set(await pods_by_name(core)) == {"db-0"}


async def test_a_terminating_pod_holds_its_slot_until_it_is_gone(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    """The seed's same-name interplay: no replacement while the old object exists."""
    apps = k8s.AppsV1Api(api)
    manifest = statefulset("db", 2, podManagementPolicy="Parallel")
    manifest["spec"]["template"]["metadata"]["finalizers"] = ["kubesim.dev/hold"]
    await apps.create_namespaced_stateful_set(NS, manifest)
    await until_ready(apps, "db", 2)
    old = (await pods_by_name(core))["db-1"]
    await core.delete_namespaced_pod("db-1", NS)

    async def terminated() -> k8s.V1Pod | None:
        pod = (await pods_by_name(core)).get("db-1")
        return pod if pod is not None and pod.status.phase == "Failed" else None

    held = await eventually(terminated, timeout=10, what="db-1 stopped but held")
    assert held.metadata.uid == old.metadata.uid and held.metadata.deletion_timestamp
    sts = await apps.read_namespaced_stateful_set("db", NS)
    assert sts.status.replicas == 2  # the held pod still counts
    # Nothing tried to create db-1 again while it exists (not even a rejected attempt).
    creates = [
        w for w in await history(cluster, resource="pods", name="db-1") if w["type"] == "ADDED"
    ]
    assert len(creates) == 1
    assert await rejected_pod_creates(cluster) == 0
    await core.patch_namespaced_pod("db-1", NS, [{"op": "remove", "path": "/metadata/finalizers"}])

    async def recreated() -> k8s.V1Pod | None:
        pod = (await pods_by_name(core)).get("db-1")
        fresh = pod is not None and pod.metadata.uid != old.metadata.uid
        return pod if fresh and pod.status.phase == "Running" else None

    new = await eventually(recreated, timeout=10, what="db-1 re-created")
    assert new.metadata.name == "db-1" and new.metadata.deletion_timestamp is None


async def test_a_pod_on_a_lost_node_stays_terminating_and_is_not_replaced(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 1))
    await until_ready(apps, "db", 1)
    pod = (await pods_by_name(core))["db-0"]
    cluster.lose_node(pod.spec.node_name)

    async def evicted() -> k8s.V1Pod | None:
        current = (await pods_by_name(core)).get("db-0")
        return current if current is not None and current.metadata.deletion_timestamp else None

    stuck = await eventually(evicted, timeout=15, what="db-0 evicted (Terminating)")
    assert stuck.metadata.uid == pod.metadata.uid
    # Still the same object a while later: the controller waits for it to go, without trying.
    await asyncio.sleep(0.5)
    current = (await pods_by_name(core))["db-0"]
    assert current.metadata.uid == pod.metadata.uid
    assert await rejected_pod_creates(cluster) == 0
    # Force delete (no kubelet needed): the slot frees and db-0 comes back elsewhere.
    await core.delete_namespaced_pod("db-0", NS, grace_period_seconds=0)

    async def back() -> k8s.V1Pod | None:
        again = (await pods_by_name(core)).get("db-0")
        fresh = again is not None and again.metadata.uid != pod.metadata.uid
        return again if fresh and again.status.phase == "Running" else None

    again = await eventually(back, timeout=15, what="db-0 re-created on a healthy node")
    assert again.spec.node_name != pod.spec.node_name


async def test_scaling_down_removes_the_highest_ordinals(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 3))
    await until_ready(apps, "db", 3)
    await apps.patch_namespaced_stateful_set("db", NS, {"spec": {"replicas": 1}})

    async def scaled() -> bool:
        return sorted(await pods_by_name(core)) == ["db-0"]

    await eventually(scaled, timeout=15, what="scaled down to db-0")


async def test_a_template_change_rolls_pods_from_the_highest_ordinal(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 2))
    before = await until_ready(apps, "db", 2)
    await apps.patch_namespaced_stateful_set(
        "db",
        NS,
        {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}}},
    )

    async def rolled() -> k8s.V1StatefulSet | None:
        s = await apps.read_namespaced_stateful_set("db", NS)
        done = (
            s.status.update_revision != before.status.update_revision
            and s.status.current_revision == s.status.update_revision
            and (s.status.ready_replicas or 0) == 2
        )
        return s if done else None

    after = await eventually(rolled, timeout=20, what="rolling update complete")
    pods = await pods_by_name(core)
    assert {p.metadata.labels["controller-revision-hash"] for p in pods.values()} == {
        after.status.update_revision
    }
    assert {p.spec.containers[0].image for p in pods.values()} == {"postgres:17"}
    deletes = [w["name"] for w in await history(cluster, resource="pods") if w["type"] == "DELETED"]
    assert deletes[:2] == ["db-1", "db-0"]


async def test_deleting_a_statefulset_collects_its_pods(
    cluster: Cluster, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    apps = k8s.AppsV1Api(api)
    await apps.create_namespaced_stateful_set(NS, statefulset("db", 2))
    await until_ready(apps, "db", 2)
    await apps.delete_namespaced_stateful_set("db", NS)  # apps/v1 default: Background

    async def collected() -> bool:
        try:
            await apps.read_namespaced_stateful_set("db", NS)
        except ApiException as exc:
            return exc.status == 404 and not await pods_by_name(core)
        return False

    await eventually(collected, timeout=15, what="statefulset and pods gone")
