"""Reference §2.8 and §0.3/§0.5: DELETE options, preconditions, graceful pod deletion,
finalizers, propagation policies and response shapes."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
from api_support import api_error, appwrapper, pod_body
from kubernetes_asyncio import client as k8s

from kubesim.apiserver import ApiServer

AW = ("workload.codeflare.dev", "v1beta1")
JOB = {
    "metadata": {"name": "j"},
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
        }
    },
}


async def test_scheduled_pod_graceful_delete_sets_timestamp_and_stays(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    out = await core_api.delete_namespaced_pod("p", ns)
    assert out.kind == "Pod"
    meta = out.metadata
    assert meta.deletion_grace_period_seconds == 30
    assert (
        timedelta(seconds=28)
        < meta.deletion_timestamp - meta.creation_timestamp
        < timedelta(seconds=32)
    )
    still = await core_api.read_namespaced_pod("p", ns)
    assert still.metadata.deletion_timestamp is not None


async def test_unscheduled_pod_is_deleted_at_once_returning_the_object(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    out = await core_api.delete_namespaced_pod("p", ns)
    assert out.metadata.name == "p"
    code, _ = await api_error(core_api.read_namespaced_pod("p", ns))
    assert code == 404


async def test_terminal_pod_is_deleted_at_once(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    await core_api.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Succeeded"}})
    await core_api.delete_namespaced_pod("p", ns)
    code, _ = await api_error(core_api.read_namespaced_pod("p", ns))
    assert code == 404


async def test_grace_zero_removes_terminating_pod_with_modified_then_deleted(
    core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    await core_api.delete_namespaced_pod("p", ns)
    rv = apiserver.store.rev
    await core_api.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    code, _ = await api_error(core_api.read_namespaced_pod("p", ns))
    assert code == 404
    assert [e.type for e in apiserver.store.audit if e.rev > rv] == ["MODIFIED", "DELETED"]


async def test_second_graceful_delete_only_shortens(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    first = await core_api.delete_namespaced_pod("p", ns)
    longer = await core_api.delete_namespaced_pod("p", ns, grace_period_seconds=100)
    assert longer.metadata.deletion_timestamp == first.metadata.deletion_timestamp
    assert longer.metadata.resource_version == first.metadata.resource_version
    shorter = await core_api.delete_namespaced_pod("p", ns, grace_period_seconds=10)
    assert shorter.metadata.deletion_grace_period_seconds == 10
    assert first.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp == timedelta(
        seconds=20
    )


async def test_grace_zero_with_finalizer_keeps_pod_until_finalizer_removed(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    body = pod_body("p", node="n1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await core_api.create_namespaced_pod(ns, body)
    await core_api.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    held = await core_api.read_namespaced_pod("p", ns)
    assert held.metadata.deletion_grace_period_seconds == 0
    await core_api.patch_namespaced_pod("p", ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    code, _ = await api_error(core_api.read_namespaced_pod("p", ns))
    assert code == 404


async def test_body_options_win_over_query(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    resp = await http.delete(
        f"/api/v1/namespaces/{ns}/pods/p?gracePeriodSeconds=0", json={"gracePeriodSeconds": 7}
    )
    assert resp.status == 200
    assert (await resp.json())["metadata"]["deletionGracePeriodSeconds"] == 7


async def test_uid_precondition_mismatch_is_409(core_api: k8s.CoreV1Api, ns: str) -> None:
    pod = await core_api.create_namespaced_pod(ns, pod_body("p"))
    opts = k8s.V1DeleteOptions(
        preconditions=k8s.V1Preconditions(uid="00000000-0000-0000-0000-000000000000")
    )
    code, status = await api_error(core_api.delete_namespaced_pod("p", ns, body=opts))
    assert code == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on Pod "p": the UID in the precondition '
        "(00000000-0000-0000-0000-000000000000) does not match the UID in record "
        f"({pod.metadata.uid}). "
        "The object might have been deleted and then recreated"
    )


async def test_matching_uid_precondition_deletes(core_api: k8s.CoreV1Api, ns: str) -> None:
    pod = await core_api.create_namespaced_pod(ns, pod_body("p"))
    opts = k8s.V1DeleteOptions(
        grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=pod.metadata.uid)
    )
    await core_api.delete_namespaced_pod("p", ns, body=opts)
    code, _ = await api_error(core_api.read_namespaced_pod("p", ns))
    assert code == 404


async def test_resource_version_precondition_mismatch_is_409(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    opts = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version="1"))
    code, status = await api_error(core_api.delete_namespaced_config_map("c", ns, body=opts))
    assert code == 409 and "ResourceVersion in the precondition (1)" in status["message"]


async def test_finalizer_keeps_any_object_with_deletion_timestamp(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "finalizers": ["a/f"]}}
    )
    await core_api.delete_namespaced_config_map("c", ns)
    cm = await core_api.read_namespaced_config_map("c", ns)
    assert cm.metadata.deletion_timestamp is not None


async def test_job_delete_without_policy_orphans(
    http: aiohttp.ClientSession, batch_api: k8s.BatchV1Api, ns: str
) -> None:
    await batch_api.create_namespaced_job(ns, JOB)
    resp = await http.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/j")
    assert resp.status == 200
    body = await resp.json()
    assert body["kind"] == "Job"
    assert body["metadata"]["finalizers"] == ["orphan"]
    assert body["metadata"]["deletionTimestamp"]


async def test_job_background_delete_answers_status_success(
    http: aiohttp.ClientSession, batch_api: k8s.BatchV1Api, ns: str
) -> None:
    job = await batch_api.create_namespaced_job(ns, JOB)
    resp = await http.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/j?propagationPolicy=Background")
    assert resp.status == 200
    assert await resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "j", "group": "batch", "kind": "jobs", "uid": job.metadata.uid},
    }


async def test_foreground_delete_adds_foreground_finalizer(
    batch_api: k8s.BatchV1Api, ns: str
) -> None:
    await batch_api.create_namespaced_job(ns, JOB)
    await batch_api.delete_namespaced_job("j", ns, propagation_policy="Foreground")
    job = await batch_api.read_namespaced_job("j", ns)
    assert job.metadata.finalizers == ["foregroundDeletion"]


async def test_explicit_orphan_dependents_false_pending_is_202(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "finalizers": ["a/f"]}}
    )
    resp = await http.delete(f"/api/v1/namespaces/{ns}/configmaps/c?orphanDependents=false")
    assert resp.status == 202


async def test_cr_delete_answers_status_success_with_group(
    http: aiohttp.ClientSession, custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    created = await custom_api.create_namespaced_custom_object(
        *AW, ns, "appwrappers", appwrapper("a")
    )
    out = await custom_api.delete_namespaced_custom_object(*AW, ns, "appwrappers", "a")
    assert out["status"] == "Success"
    assert out["details"] == {
        "name": "a",
        "group": "workload.codeflare.dev",
        "kind": "appwrappers",
        "uid": created["metadata"]["uid"],
    }


async def test_delete_missing_is_404(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.delete_namespaced_pod("nope", ns))
    assert code == 404 and status["message"] == 'pods "nope" not found'


async def test_delete_collection_by_label(core_api: k8s.CoreV1Api, ns: str) -> None:
    for name, app in (("a", "x"), ("b", "y")):
        await core_api.create_namespaced_config_map(
            ns, {"metadata": {"name": name, "labels": {"app": app}}}
        )
    await core_api.delete_collection_namespaced_config_map(ns, label_selector="app=x")
    names = [c.metadata.name for c in (await core_api.list_namespaced_config_map(ns)).items]
    assert names == ["b"]


async def test_binding_sets_node_name_and_scheduled_condition(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    resp = await http.post(
        f"/api/v1/namespaces/{ns}/pods/p/binding",
        json={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"},
        },
    )
    assert resp.status == 201
    pod = await core_api.read_namespaced_pod("p", ns)
    assert pod.spec.node_name == "n1"
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]
    again = await http.post(
        f"/api/v1/namespaces/{ns}/pods/p/binding",
        json={"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n2"}},
    )
    assert again.status == 409


async def test_eviction_deletes_gracefully_and_is_discoverable(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    doc = await (await http.get("/api/v1")).json()
    eviction = next(r for r in doc["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    out = await core_api.create_namespaced_pod_eviction(
        "p",
        ns,
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": ns}},
    )
    assert out is not None
    pod = await core_api.read_namespaced_pod("p", ns)
    assert pod.metadata.deletion_grace_period_seconds == 30
