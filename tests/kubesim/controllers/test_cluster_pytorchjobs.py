"""The PyTorchJob stand-in for the Kubeflow training operator, end to end over HTTP.

Reference cluster-faults-and-workloads.md §4 (names, labels, env, Terminating pods in the
replica-index buckets, restart policies, conditions) and §2 (the job's template keeps its
quantities as written; the pods built from it are canonical).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from cluster_support import eventually
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from kubesim.cluster import Cluster

NS = "default"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
HOLD = "kubesim.dev/hold"


def replica(replicas: int, *, policy: str = "OnFailure", **template_meta: Any) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": policy,
        "template": {
            "metadata": {"labels": {"team": "ml"}, **template_meta},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "pytorch/pytorch:2.3",
                        "resources": {"limits": {"cpu": "1000m", "nvidia.com/gpu": 0}},
                    }
                ],
            },
        },
    }


def pytorchjob(
    name: str, *, master: dict[str, Any] | None, worker: dict[str, Any] | None
) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if master is not None:
        specs["Master"] = master
    if worker is not None:
        specs["Worker"] = worker
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs},
    }


@pytest.fixture
async def pj_cluster(cluster_factory: Callable[..., Awaitable[Cluster]]) -> Cluster:
    return await cluster_factory(builtin_crds=("pytorchjob",))


@pytest.fixture
async def pj_api(pj_cluster: Cluster) -> Any:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(pj_cluster.kubeconfig_path), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def pj_core(pj_api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(pj_api)


@pytest.fixture
def pj_custom(pj_api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(pj_api)


async def job_pods(core: k8s.CoreV1Api, name: str) -> dict[str, k8s.V1Pod]:
    pods = await core.list_namespaced_pod(
        NS, label_selector=f"training.kubeflow.org/job-name={name}"
    )
    return {p.metadata.name: p for p in pods.items}


async def read_job(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any]:
    job: dict[str, Any] = await custom.get_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, name
    )
    return job


def conditions(job: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}


async def until_running(core: k8s.CoreV1Api, name: str, count: int) -> dict[str, k8s.V1Pod]:
    async def running() -> dict[str, k8s.V1Pod] | None:
        pods = await job_pods(core, name)
        live = [
            p
            for p in pods.values()
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]
        return pods if len(live) == count else None

    return await eventually(running, timeout=15, what=f"{count} pods of {name} Running")


async def test_master_and_workers_get_operator_names_labels_env_and_a_master_service(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, pytorchjob("pj", master=replica(1), worker=replica(3))
    )
    pods = await until_running(pj_core, "pj", 4)
    assert sorted(pods) == ["pj-master-0", "pj-worker-0", "pj-worker-1", "pj-worker-2"]
    job = await read_job(pj_custom, "pj")
    for name, pod in pods.items():
        rtype, index = name.split("-")[1:]
        labels = pod.metadata.labels
        assert labels["training.kubeflow.org/job-name"] == "pj"
        assert labels["training.kubeflow.org/replica-type"] == rtype
        assert labels["training.kubeflow.org/replica-index"] == index
        assert labels["team"] == "ml"  # template labels are kept (an AppWrapper's, too)
        assert (labels.get("training.kubeflow.org/job-role") == "master") == (rtype == "master")
        ref = pod.metadata.owner_references[0]
        assert (ref.api_version, ref.kind, ref.name, ref.uid) == (
            "kubeflow.org/v1",
            "PyTorchJob",
            "pj",
            job["metadata"]["uid"],
        )
        assert ref.controller is True and ref.block_owner_deletion is True
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        rank = int(index) + (1 if rtype == "worker" else 0)
        assert env["MASTER_ADDR"] == "pj-master-0" and env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == "4" and env["RANK"] == str(rank)
        assert pod.spec.restart_policy == "OnFailure"
        # The pod is canonical; the job's own template keeps what was written (§2).
        assert pod.spec.containers[0].resources.limits == {"cpu": "1", "nvidia.com/gpu": "0"}
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert template["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "1000m",
        "nvidia.com/gpu": 0,
    }
    services = (await pj_core.list_namespaced_service(NS)).items
    mine = [
        s
        for s in services
        if (s.metadata.labels or {}).get("training.kubeflow.org/job-name") == "pj"
    ]
    assert [s.metadata.name for s in mine] == ["pj-master-0"]
    assert mine[0].spec.cluster_ip == "None"
    assert mine[0].spec.selector["training.kubeflow.org/replica-type"] == "master"

    async def running_status() -> dict[str, Any] | None:
        current = await read_job(pj_custom, "pj")
        statuses = (current.get("status") or {}).get("replicaStatuses") or {}
        ok = (statuses.get("Worker") or {}).get("active") == 3 and conditions(current).get(
            "Running"
        ) == "True"
        return current if ok else None

    current = await eventually(running_status, timeout=10, what="job Running with 3 workers")
    assert conditions(current)["Created"] == "True"
    assert current["status"]["replicaStatuses"]["Master"]["active"] == 1


async def test_the_job_succeeds_when_its_master_completes(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    master = replica(1, annotations={"kubesim.dev/run-time": "500ms"})
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, pytorchjob("pj", master=master, worker=replica(1))
    )

    async def succeeded() -> dict[str, Any] | None:
        job = await read_job(pj_custom, "pj")
        return job if conditions(job).get("Succeeded") == "True" else None

    job = await eventually(succeeded, timeout=15, what="job Succeeded")
    assert conditions(job)["Running"] == "False"
    assert job["status"]["completionTime"]
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    pods = await job_pods(pj_core, "pj")
    assert pods["pj-master-0"].status.phase == "Succeeded"  # cleanPodPolicy None keeps pods


async def test_a_terminating_worker_blocks_its_own_recreation_until_it_is_gone(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    await pj_custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        pytorchjob("pj", master=replica(1), worker=replica(2, finalizers=[HOLD])),
    )
    pods = await until_running(pj_core, "pj", 3)
    old = pods["pj-worker-1"]
    await pj_core.delete_namespaced_pod("pj-worker-1", NS)

    async def held() -> k8s.V1Pod | None:
        pod = (await job_pods(pj_core, "pj")).get("pj-worker-1")
        return pod if pod is not None and pod.status.phase == "Failed" else None

    stopped = await eventually(held, timeout=10, what="worker-1 stopped, held by its finalizer")
    assert stopped.metadata.uid == old.metadata.uid

    async def restarting() -> dict[str, Any] | None:
        job = await read_job(pj_custom, "pj")
        worker = job["status"]["replicaStatuses"]["Worker"]
        return (
            job
            if worker.get("failed") == 1 and conditions(job).get("Restarting") == "True"
            else None
        )

    await eventually(restarting, timeout=10, what="Worker failed=1 and Restarting")
    await pj_core.patch_namespaced_pod(
        "pj-worker-1", NS, [{"op": "remove", "path": "/metadata/finalizers"}]
    )

    async def recreated() -> k8s.V1Pod | None:
        pod = (await job_pods(pj_core, "pj")).get("pj-worker-1")
        fresh = pod is not None and pod.metadata.uid != old.metadata.uid
        return pod if fresh and pod.status.phase == "Running" else None

    await eventually(recreated, timeout=10, what="worker-1 re-created under the same name")


def exiting(code: int) -> dict[str, Any]:
    annotations = {"kubesim.dev/run-time": "200ms", "kubesim.dev/exit-code": str(code)}
    return replica(1, policy="ExitCode", annotations=annotations)


async def test_a_permanent_exit_code_fails_the_job(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, pytorchjob("perm", master=exiting(1), worker=None)
    )

    async def failed() -> dict[str, Any] | None:
        job = await read_job(pj_custom, "perm")
        return job if conditions(job).get("Failed") == "True" else None

    await eventually(failed, timeout=15, what="job Failed on exit code 1")
    pod = (await job_pods(pj_core, "perm"))["perm-master-0"]
    assert pod.status.phase == "Failed" and pod.spec.restart_policy == "Never"


async def test_a_retryable_exit_code_recreates_the_replica(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, pytorchjob("retry", master=exiting(137), worker=None)
    )
    uids: set[str] = set()

    async def recreated() -> bool:
        pod = (await job_pods(pj_core, "retry")).get("retry-master-0")
        if pod is not None:
            uids.add(pod.metadata.uid)
        return len(uids) >= 2

    await eventually(recreated, timeout=15, interval=0.02, what="master-0 re-created after 137")
    job = await read_job(pj_custom, "retry")
    assert conditions(job).get("Failed") != "True"


async def test_deleting_the_job_collects_its_pods_and_service(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, pytorchjob("pj", master=replica(1), worker=replica(1))
    )
    await until_running(pj_core, "pj", 2)
    await pj_custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pj")

    async def collected() -> bool:
        services = (await pj_core.list_namespaced_service(NS)).items
        return not await job_pods(pj_core, "pj") and not [
            s for s in services if s.metadata.name == "pj-master-0"
        ]

    await eventually(collected, timeout=15, what="pods and service collected")


async def test_a_same_name_job_cannot_reuse_a_name_still_held_by_a_terminating_pod(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    """The seed collision: the relaunched job's worker-1 gets 409 until the old one is gone."""
    manifest = pytorchjob("pj", master=replica(1), worker=replica(2, finalizers=[HOLD]))
    await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, copy.deepcopy(manifest)
    )
    first = await until_running(pj_core, "pj", 3)
    await pj_custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pj")

    async def workers_held() -> bool:
        pods = await job_pods(pj_core, "pj")
        return set(pods) == {"pj-worker-0", "pj-worker-1"} and all(
            p.metadata.deletion_timestamp for p in pods.values()
        )

    await eventually(workers_held, timeout=15, what="old workers Terminating, held")
    await pj_core.patch_namespaced_pod(
        "pj-worker-0", NS, [{"op": "remove", "path": "/metadata/finalizers"}]
    )
    second = await pj_custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, copy.deepcopy(manifest)
    )

    async def partly_running() -> dict[str, k8s.V1Pod] | None:
        pods = await job_pods(pj_core, "pj")
        ok = {"pj-master-0", "pj-worker-0"} <= {
            n
            for n, p in pods.items()
            if p.status.phase == "Running" and p.metadata.uid != first[n].metadata.uid
        }
        return pods if ok else None

    pods = await eventually(partly_running, timeout=15, what="new master and worker-0")
    assert (
        pods["pj-worker-1"].metadata.uid == first["pj-worker-1"].metadata.uid
    )  # still the old one

    async def failed_create() -> bool:
        events = await pj_core.list_namespaced_event(NS, field_selector="involvedObject.name=pj")
        return any(
            e.reason == "FailedCreatePod" and "object is being deleted" in (e.message or "")
            for e in events.items
        )

    await eventually(failed_create, timeout=10, what="FailedCreatePod with the 409 message")
    await pj_core.patch_namespaced_pod(
        "pj-worker-1", NS, [{"op": "remove", "path": "/metadata/finalizers"}]
    )

    async def relaunched() -> k8s.V1Pod | None:
        pod = (await job_pods(pj_core, "pj")).get("pj-worker-1")
        if pod is None or pod.metadata.uid == first["pj-worker-1"].metadata.uid:
            return None
        return pod if pod.status.phase == "Running" else None

    pod = await eventually(relaunched, timeout=15, what="worker-1 of the new job")
    assert pod.metadata.owner_references[0].uid == second["metadata"]["uid"]


async def test_the_crd_is_only_served_when_asked_for(cluster: Cluster, api: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(api)
    with pytest.raises(ApiException) as caught:
        await custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert caught.value.status == 404


async def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(
    pj_cluster: Cluster, pj_core: k8s.CoreV1Api, pj_custom: k8s.CustomObjectsApi
) -> None:
    manifest = pytorchjob("pj", master=replica(1), worker=replica(1, finalizers=[HOLD]))
    await pj_custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, manifest)
    await until_running(pj_core, "pj", 2)
    await pj_custom.delete_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "pj", propagation_policy="Foreground"
    )

    async def worker_held() -> bool:
        pods = await job_pods(pj_core, "pj")
        return set(pods) == {"pj-worker-0"} and bool(
            pods["pj-worker-0"].metadata.deletion_timestamp
        )

    await eventually(worker_held, timeout=15, what="master gone, worker Terminating")
    job = await read_job(pj_custom, "pj")
    assert "foregroundDeletion" in job["metadata"]["finalizers"]  # blocked by the worker
    await pj_core.patch_namespaced_pod(
        "pj-worker-0", NS, [{"op": "remove", "path": "/metadata/finalizers"}]
    )

    async def job_gone() -> bool:
        try:
            await read_job(pj_custom, "pj")
        except ApiException as exc:
            return exc.status == 404
        return False

    await eventually(job_gone, timeout=15, what="job removed once its pods are gone")
