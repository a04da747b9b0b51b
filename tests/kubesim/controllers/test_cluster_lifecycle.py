"""Nodes, kubelets, scheduler, node lifecycle and events, through kubernetes-asyncio."""

from __future__ import annotations

import asyncio
import dataclasses

from cluster_support import eventually, pod_manifest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from kubesim.cluster import Cluster

NS = "default"


async def phase_of(core: k8s.CoreV1Api, name: str) -> str | None:
    pod = await core.read_namespaced_pod(name, NS)
    return str(pod.status.phase)


async def wait_running(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod:
    async def running() -> k8s.V1Pod | None:
        pod = await core.read_namespaced_pod(name, NS)
        return pod if pod.status.phase == "Running" else None

    return await eventually(running, what=f"{name} Running")


async def test_nodes_register_ready_with_capacity_addresses_and_node_info(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    nodes = (await core.list_node()).items
    assert sorted(n.metadata.name for n in nodes) == ["node-1", "node-2"]
    node = nodes[0]
    assert node.status.capacity["cpu"] == "8" and node.status.allocatable["memory"] == "32Gi"
    assert node.status.capacity["pods"] == "110"
    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    assert {a.type for a in node.status.addresses} == {"InternalIP", "Hostname"}
    assert node.status.node_info.kubelet_version.startswith("v1.")
    assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name


async def test_gpu_nodes_advertise_nvidia_gpus(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = await cluster_factory(nodes=1, node_gpu=4)
    assert cluster.client is not None
    node = await cluster.client.get("/api/v1/nodes/node-1")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"


async def test_kubelets_renew_their_leases(cluster: Cluster, api: k8s.ApiClient) -> None:
    coordination = k8s.CoordinationV1Api(api)
    first = await coordination.read_namespaced_lease("node-1", "kube-node-lease")
    assert first.spec.holder_identity == "node-1"
    assert first.metadata.owner_references[0].kind == "Node"

    async def renewed() -> bool:
        lease = await coordination.read_namespaced_lease("node-1", "kube-node-lease")
        return bool(lease.spec.renew_time > first.spec.renew_time)

    assert await eventually(renewed, what="lease renewal")


async def test_pod_goes_running_with_complete_container_statuses(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    await core.create_namespaced_pod(NS, pod_manifest("web", cpu="250m"))
    pod = await wait_running(core, "web")
    status = pod.status
    assert pod.spec.node_name in cluster.kubelets
    assert status.pod_ip and status.host_ip and status.start_time
    assert {c.type: c.status for c in status.conditions} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    [container] = status.container_statuses
    assert container.name == "main" and container.image == "busybox:1.36"
    assert container.image_id and container.container_id.startswith("containerd://")
    assert container.ready and container.started and container.restart_count == 0
    assert container.state.running.started_at is not None
    await asyncio.sleep(0.3)
    events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=web")
    reasons = {e.reason for e in events.items}
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons
    scheduled = next(e for e in events.items if e.reason == "Scheduled")
    assert scheduled.source.component == "default-scheduler"
    assert scheduled.reporting_component == "default-scheduler"
    assert scheduled.count == 1 and scheduled.first_timestamp is not None


async def test_deleted_pod_on_live_node_is_terminated_and_removed_by_its_kubelet(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    await core.create_namespaced_pod(NS, pod_manifest("short", grace=30))
    await wait_running(core, "short")
    deleted = await core.delete_namespaced_pod("short", NS)
    assert deleted.metadata.deletion_timestamp is not None

    async def gone() -> bool:
        try:
            await core.read_namespaced_pod("short", NS)
        except ApiException as exc:
            return exc.status == 404
        return False

    assert await eventually(gone, timeout=3, what="kubelet final delete")


async def test_run_time_annotation_completes_a_never_restart_pod(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    manifest = pod_manifest(
        "once", restart_policy="Never", annotations={"kubesim.dev/run-time": "200ms"}
    )
    await core.create_namespaced_pod(NS, manifest)
    await eventually(lambda: _is(core, "once", "Succeeded"), what="Succeeded")
    pod = await core.read_namespaced_pod("once", NS)
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"


async def _is(core: k8s.CoreV1Api, name: str, phase: str) -> bool:
    return await phase_of(core, name) == phase


async def test_unschedulable_pod_gets_condition_and_failed_scheduling_event(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    await core.create_namespaced_pod(NS, pod_manifest("huge", cpu="100"))

    async def unschedulable() -> k8s.V1PodCondition | None:
        pod = await core.read_namespaced_pod("huge", NS)
        return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)

    cond = await eventually(unschedulable, what="PodScheduled condition")
    assert cond.status == "False" and cond.reason == "Unschedulable"
    assert cond.message.startswith("0/2 nodes are available: 2 Insufficient cpu.")
    await asyncio.sleep(0.2)
    events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=huge")
    failed = [e for e in events.items if e.reason == "FailedScheduling"]
    assert failed and failed[0].type == "Warning"


async def test_scheduler_avoids_a_lost_node(cluster: Cluster, core: k8s.CoreV1Api) -> None:
    cluster.lose_node("node-1")

    async def tainted() -> bool:
        node = await core.read_node("node-1")
        return bool(node.spec.taints)

    await eventually(tainted, what="node-1 tainted")
    for i in range(3):
        await core.create_namespaced_pod(NS, pod_manifest(f"spread-{i}"))
    for i in range(3):
        pod = await wait_running(core, f"spread-{i}")
        assert pod.spec.node_name == "node-2"


async def test_terminating_pods_keep_their_requests_on_the_node(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    cluster = await cluster_factory(nodes=1, node_cpu="2", kubelet_termination_delay=1.5)
    assert cluster.client is not None
    client = cluster.client
    await client.create(
        f"/api/v1/namespaces/{NS}/pods", pod_manifest("first", cpu="1500m", grace=30)
    )
    await eventually(lambda: _phase_raw(cluster, "first", "Running"), what="first Running")
    await client.delete(f"/api/v1/namespaces/{NS}/pods/first")  # Terminating for 1.5 s
    await client.create(f"/api/v1/namespaces/{NS}/pods", pod_manifest("second", cpu="1"))

    async def unschedulable() -> str:
        pod = await client.get(f"/api/v1/namespaces/{NS}/pods/second")
        conds = pod.get("status", {}).get("conditions") or []
        return next(
            (str(c.get("message")) for c in conds if c.get("reason") == "Unschedulable"), ""
        )

    message = await eventually(unschedulable, timeout=1.2, what="second Unschedulable")
    assert "Insufficient cpu" in message
    await eventually(
        lambda: _phase_raw(cluster, "second", "Running"), timeout=5, what="second Running"
    )


async def _phase_raw(cluster: Cluster, name: str, phase: str) -> bool:
    assert cluster.client is not None
    pod = await cluster.client.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    return bool(pod.get("status", {}).get("phase") == phase)


async def _terminating_raw(cluster: Cluster, name: str) -> bool:
    assert cluster.client is not None
    pod = await cluster.client.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    return bool(pod["metadata"].get("deletionTimestamp"))


async def test_recovered_node_is_ready_again_and_untainted(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    cluster.lose_node("node-2")

    async def state() -> tuple[str, list[str]]:
        node = await core.read_node("node-2")
        ready = next(c.status for c in node.status.conditions if c.type == "Ready")
        return ready, sorted(f"{t.key}:{t.effect}" for t in node.spec.taints or [])

    async def lost() -> bool:
        return (await state())[0] == "Unknown" and bool((await state())[1])

    await eventually(lost, what="node-2 Unknown")
    cluster.recover_node("node-2")

    async def healthy() -> bool:
        return await state() == ("True", [])

    assert await eventually(healthy, timeout=5, what="node-2 healthy")
    events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=node-2")
    assert {"NodeNotReady", "NodeReady"} <= {e.reason for e in events.items}


async def test_full_disruption_stops_noexecute_tainting(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    cluster.lose_node("node-1")
    cluster.lose_node("node-2")

    async def both_unknown() -> bool:
        nodes = (await core.list_node()).items
        return all(
            next(c.status for c in n.status.conditions if c.type == "Ready") == "Unknown"
            for n in nodes
        )

    await eventually(both_unknown, what="all nodes Unknown")
    await asyncio.sleep(0.3)
    for node in (await core.list_node()).items:
        assert {t.effect for t in node.spec.taints or []} == {"NoSchedule"}


async def test_controllers_ride_out_injected_api_failures(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    assert cluster.client is not None
    await cluster.client.request(
        "POST",
        "/kubesim/v1/fail",
        body={"path": "/pods/[^/]+/(binding|status)$", "code": 500, "count": 4},
    )
    await core.create_namespaced_pod(NS, pod_manifest("resilient"))
    pod = await wait_running(core, "resilient")
    assert pod.spec.node_name in cluster.kubelets


async def test_repeated_events_are_aggregated_with_a_count(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    assert cluster.recorder is not None
    node = await cluster.client.get("/api/v1/nodes/node-1") if cluster.client else {}
    for _ in range(3):
        cluster.recorder.record(node, reason="Rebooted", message="again", component="kubesim-test")
    await cluster.recorder.flush()
    events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=node-1")
    [event] = [e for e in events.items if e.reason == "Rebooted"]
    assert event.count == 3
    assert event.involved_object.kind == "Node" and event.source.component == "kubesim-test"
    assert event.last_timestamp >= event.first_timestamp


async def test_gated_pod_waits_until_its_gates_are_removed(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    manifest = pod_manifest("gated")
    manifest["spec"]["schedulingGates"] = [{"name": "example.com/admission"}]
    await core.create_namespaced_pod(NS, manifest)

    async def gated_condition() -> k8s.V1PodCondition | None:
        pod = await core.read_namespaced_pod("gated", NS)
        return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)

    cond = await eventually(gated_condition, what="SchedulingGated condition")
    assert cond.status == "False" and cond.reason == "SchedulingGated"
    await core.patch_namespaced_pod(
        "gated",
        NS,
        [{"op": "remove", "path": "/spec/schedulingGates"}],
        _content_type="application/json-patch+json",
    )
    await wait_running(core, "gated")


async def test_cluster_works_as_an_async_context_manager(fast_config) -> None:  # type: ignore[no-untyped-def]
    async with Cluster(dataclasses.replace(fast_config, nodes=1)) as cluster:
        assert cluster.kubeconfig_path.exists()
        assert cluster.client is not None
        nodes = await cluster.client.list("/api/v1/nodes")
        assert [n["metadata"]["name"] for n in nodes["items"]] == ["node-1"]
        faults = await cluster.client.request("POST", "/kubesim/v1/nodes/node-1/lose")
        assert faults == {"node": "node-1", "lost": True}
        assert cluster.kubelets["node-1"].lost
    assert not cluster.kubeconfig_path.exists()  # the temporary kubeconfig is removed
