"""Job controller and garbage collector end to end, through kubernetes-asyncio."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cluster_support import eventually
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from kubesim.client import ApiError
from kubesim.cluster import Cluster
from kubesim.controllers.job import TRACKING_FINALIZER

NS = "default"


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "work", "image": "busybox:1.36"}],
        },
    }
    if annotations:
        template["metadata"]["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


async def job_pods(core: k8s.CoreV1Api, name: str) -> list[k8s.V1Pod]:
    pods = await core.list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={name}")
    return list(pods.items)


async def job_gone(batch: k8s.BatchV1Api, name: str) -> bool:
    try:
        await batch.read_namespaced_job(name, NS)
    except ApiException as exc:
        return exc.status == 404
    return False


async def running_job_pod(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod:
    async def running() -> k8s.V1Pod | None:
        pods = [p for p in await job_pods(core, name) if p.status.phase == "Running"]
        return pods[0] if pods else None

    return await eventually(running, what=f"{name} pod Running")


async def test_job_runs_to_completion_with_its_pods(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    await batch.create_namespaced_job(NS, job_manifest("work", completions=3, parallelism=2))

    async def complete() -> k8s.V1Job | None:
        job = await batch.read_namespaced_job("work", NS)
        conds = {c.type for c in job.status.conditions or [] if c.status == "True"}
        return job if "Complete" in conds else None

    job = await eventually(complete, timeout=10, what="Job Complete")
    assert job.status.succeeded == 3 and not job.status.active
    assert job.status.start_time and job.status.completion_time
    pods = await job_pods(core, "work")
    assert len(pods) == 3
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert pod.metadata.name.startswith("work-") and len(pod.metadata.name) == len("work-") + 5
        assert pod.metadata.labels["app"] == "work"
        assert pod.metadata.owner_references[0].kind == "Job"
        assert pod.metadata.owner_references[0].controller is True
        assert TRACKING_FINALIZER not in (pod.metadata.finalizers or [])
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    await asyncio.sleep(0.2)
    events = await core.list_namespaced_event(NS, field_selector="involvedObject.name=work")
    reasons = [e.reason for e in events.items]
    assert reasons.count("SuccessfulCreate") == 3 and "Completed" in reasons


async def test_running_job_pods_carry_the_tracking_finalizer(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    await batch.create_namespaced_job(
        NS, job_manifest("tracked", annotations={"kubesim.dev/run-time": "1h"})
    )
    pod = await running_job_pod(core, "tracked")
    assert pod.metadata.finalizers == [TRACKING_FINALIZER]
    job = await batch.read_namespaced_job("tracked", NS)
    assert job.status.active == 1


async def test_backoff_limit_fails_the_job(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    manifest = job_manifest("flaky", backoffLimit=1, annotations={"kubesim.dev/exit-code": "1"})
    await batch.create_namespaced_job(NS, manifest)

    async def failed() -> k8s.V1Job | None:
        job = await batch.read_namespaced_job("flaky", NS)
        conds = {c.type: c for c in job.status.conditions or [] if c.status == "True"}
        return job if "Failed" in conds else None

    job = await eventually(failed, timeout=10, what="Job Failed")
    assert job.status.failed == 2
    assert {c.type: c.reason for c in job.status.conditions}["Failed"] == "BackoffLimitExceeded"


async def test_background_deletion_removes_pods_through_the_gc(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    await batch.create_namespaced_job(
        NS, job_manifest("bg", parallelism=2, annotations={"kubesim.dev/run-time": "1h"})
    )
    await running_job_pod(core, "bg")
    await batch.delete_namespaced_job("bg", NS, propagation_policy="Background")
    assert await job_gone(batch, "bg")

    async def no_pods() -> bool:
        return not await job_pods(core, "bg")

    assert await eventually(no_pods, timeout=5, what="dependents collected")


async def test_foreground_deletion_blocks_while_a_pod_is_terminating(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    await batch.create_namespaced_job(
        NS, job_manifest("fg", annotations={"kubesim.dev/run-time": "1h"})
    )
    pod = await running_job_pod(core, "fg")
    cluster.lose_node(pod.spec.node_name)  # its kubelet will never finish the pod
    await batch.delete_namespaced_job("fg", NS, propagation_policy="Foreground")

    async def pod_terminating() -> bool:
        current = await core.read_namespaced_pod(pod.metadata.name, NS)
        return current.metadata.deletion_timestamp is not None

    await eventually(pod_terminating, what="GC deleted the pod")
    await asyncio.sleep(1.0)
    job = await batch.read_namespaced_job("fg", NS)
    assert job.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in job.metadata.finalizers
    cluster.recover_node(pod.spec.node_name)
    assert await eventually(lambda: job_gone(batch, "fg"), timeout=5, what="Job removed")


async def test_orphan_deletion_keeps_pods_and_strips_owner_references(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    await batch.create_namespaced_job(
        NS, job_manifest("orph", annotations={"kubesim.dev/run-time": "1h"})
    )
    pod = await running_job_pod(core, "orph")
    await batch.delete_namespaced_job("orph", NS)  # batch/v1 default: orphan
    assert await eventually(lambda: job_gone(batch, "orph"), timeout=5, what="Job removed")

    async def released() -> k8s.V1Pod | None:
        current = await core.read_namespaced_pod(pod.metadata.name, NS)
        meta = current.metadata
        return current if not meta.owner_references and not meta.finalizers else None

    current = await eventually(released, timeout=5, what="pod orphaned")
    assert current.status.phase == "Running" and current.metadata.deletion_timestamp is None


async def test_failed_replacement_policy_waits_for_the_stuck_pod(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    manifest = job_manifest(
        "strict", podReplacementPolicy="Failed", annotations={"kubesim.dev/run-time": "1h"}
    )
    await batch.create_namespaced_job(NS, manifest)
    pod = await running_job_pod(core, "strict")
    cluster.lose_node(pod.spec.node_name)

    async def terminating_counted() -> k8s.V1Job | None:
        job = await batch.read_namespaced_job("strict", NS)
        return job if job.status.terminating == 1 else None

    await eventually(terminating_counted, timeout=6, what="status.terminating=1")
    await asyncio.sleep(0.5)
    pods = await job_pods(core, "strict")
    assert [p.metadata.name for p in pods] == [pod.metadata.name]  # no replacement
    job = await batch.read_namespaced_job("strict", NS)
    assert not job.status.active and not job.status.failed


async def test_terminating_or_failed_policy_replaces_the_stuck_pod_at_once(
    cluster: Cluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    manifest = job_manifest("eager", annotations={"kubesim.dev/run-time": "1h"})
    await batch.create_namespaced_job(NS, manifest)
    pod = await running_job_pod(core, "eager")
    cluster.lose_node(pod.spec.node_name)

    async def replaced() -> list[k8s.V1Pod]:
        pods = await job_pods(core, "eager")
        return [
            p for p in pods if p.metadata.name != pod.metadata.name and p.status.phase == "Running"
        ]

    [replacement] = await eventually(replaced, timeout=6, what="replacement Running")
    assert replacement.spec.node_name != pod.spec.node_name
    job = await batch.read_namespaced_job("eager", NS)
    assert job.status.failed == 1 and job.status.terminating == 1 and job.status.active == 1
    stuck = await core.read_namespaced_pod(pod.metadata.name, NS)
    assert TRACKING_FINALIZER not in (stuck.metadata.finalizers or [])  # counted, released


async def test_custom_resource_owner_deletion_collects_its_dependents(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    crd_file = (
        Path(__file__).parent.parent
        / "fidelity"
        / "data"
        / "workload.codeflare.dev_appwrappers.yaml"
    )
    cluster = await cluster_factory(crd_files=(str(crd_file),))
    client = cluster.client
    assert client is not None
    base = "/apis/workload.codeflare.dev/v1beta1/namespaces/default/appwrappers"
    owner = await client.create(
        base,
        {
            "apiVersion": "workload.codeflare.dev/v1beta1",
            "kind": "AppWrapper",
            "metadata": {"name": "aw"},
            "spec": {},
        },
    )
    ref = {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "name": "aw",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    await client.create(
        "/api/v1/namespaces/default/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "wrapped", "ownerReferences": [ref]},
        },
    )
    await client.delete(f"{base}/aw")  # custom resources default to Background

    async def collected() -> bool:
        try:
            await client.get("/api/v1/namespaces/default/configmaps/wrapped")
        except ApiError as exc:
            return exc.not_found
        return False

    assert await eventually(collected, timeout=5, what="dependent of the AppWrapper collected")
