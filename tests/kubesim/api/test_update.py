"""Reference §2.6: PUT semantics — optimistic concurrency, status separation, immutability,
finalizer removal deleting the object, generation rules."""

from __future__ import annotations

import aiohttp
from api_support import api_error, appwrapper, pod_body
from kubernetes_asyncio import client as k8s

from kubesim.apiserver import ApiServer

AW = ("workload.codeflare.dev", "v1beta1")


async def test_stale_resource_version_is_409_conflict(core_api: k8s.CoreV1Api, ns: str) -> None:
    cm = await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    stale = cm.metadata.resource_version
    await core_api.patch_namespaced_config_map("c", ns, {"data": {"a": "1"}})
    body = {"metadata": {"name": "c", "resourceVersion": stale}, "data": {"a": "2"}}
    code, status = await api_error(core_api.replace_namespaced_config_map("c", ns, body))
    assert code == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


async def test_builtin_update_without_resource_version_is_unconditional(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    out = await core_api.replace_namespaced_config_map(
        "c", ns, {"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    assert out.data == {"a": "1"}


async def test_cr_update_without_resource_version_is_422(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    await custom_api.create_namespaced_custom_object(*AW, ns, "appwrappers", appwrapper("a"))
    code, status = await api_error(
        custom_api.replace_namespaced_custom_object(
            *AW, ns, "appwrappers", "a", appwrapper("a", priority=5)
        )
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    assert "must be specified for an update" in status["message"]


async def test_cr_conflict_message_names_qualified_resource(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    created = await custom_api.create_namespaced_custom_object(
        *AW, ns, "appwrappers", appwrapper("a")
    )
    body = appwrapper("a", priority=2)
    body["metadata"]["resourceVersion"] = str(int(created["metadata"]["resourceVersion"]) - 1)
    code, status = await api_error(
        custom_api.replace_namespaced_custom_object(*AW, ns, "appwrappers", "a", body)
    )
    assert code == 409
    assert status["message"].startswith(
        'Operation cannot be fulfilled on appwrappers.workload.codeflare.dev "a"'
    )


async def test_main_endpoint_ignores_status_and_status_endpoint_ignores_spec(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    pod = await core_api.create_namespaced_pod(ns, pod_body("p"))
    raw = core_api.api_client.sanitize_for_serialization(pod)
    raw["status"]["phase"] = "Running"
    raw["metadata"]["labels"] = {"a": "b"}
    updated = await core_api.replace_namespaced_pod("p", ns, raw)
    assert updated.status.phase == "Pending" and updated.metadata.labels == {"a": "b"}
    raw = core_api.api_client.sanitize_for_serialization(updated)
    raw["status"]["phase"] = "Running"
    raw["spec"]["activeDeadlineSeconds"] = 5
    raw["metadata"]["labels"] = {"c": "d"}
    status_updated = await core_api.replace_namespaced_pod_status("p", ns, raw)
    assert status_updated.status.phase == "Running"
    assert status_updated.spec.active_deadline_seconds is None
    assert status_updated.metadata.labels == {"a": "b"}


async def test_cr_status_subresource_separation_and_generation(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    body = appwrapper("a")
    body["status"] = {"state": "ignored"}
    created = await custom_api.create_namespaced_custom_object(*AW, ns, "appwrappers", body)
    assert "status" not in created and created["metadata"]["generation"] == 1
    created["status"] = {"state": "Running"}
    after_status = await custom_api.replace_namespaced_custom_object_status(
        *AW, ns, "appwrappers", "a", created
    )
    assert (
        after_status["status"] == {"state": "Running"}
        and after_status["metadata"]["generation"] == 1
    )
    after_status["spec"]["priority"] = 9
    after_status["status"] = {"state": "dropped"}
    after_spec = await custom_api.replace_namespaced_custom_object(
        *AW, ns, "appwrappers", "a", after_status
    )
    assert after_spec["status"] == {"state": "Running"}
    assert after_spec["metadata"]["generation"] == 2
    after_spec["metadata"]["labels"] = {"x": "y"}
    after_meta = await custom_api.replace_namespaced_custom_object(
        *AW, ns, "appwrappers", "a", after_spec
    )
    assert after_meta["metadata"]["generation"] == 2


async def test_job_generation_bumps_only_on_spec_change(batch_api: k8s.BatchV1Api, ns: str) -> None:
    job = await batch_api.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                }
            },
        },
    )
    labelled = await batch_api.patch_namespaced_job("j", ns, {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == job.metadata.generation == 1
    suspended = await batch_api.patch_namespaced_job("j", ns, {"spec": {"suspend": True}})
    assert suspended.metadata.generation == 2


async def test_pod_node_name_cannot_change_once_set(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    code, status = await api_error(
        core_api.patch_namespaced_pod(
            "p", ns, {"spec": {"nodeName": "n2"}}, _content_type="application/merge-patch+json"
        )
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec"
    assert "pod updates may not change fields" in status["message"]


async def test_pod_image_may_change(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    out = await core_api.patch_namespaced_pod(
        "p", ns, {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    )
    assert out.spec.containers[0].image == "busybox:2"


async def test_removing_last_finalizer_of_deleted_object_removes_it(
    core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "finalizers": ["example.com/f"]}}
    )
    await core_api.delete_namespaced_config_map("c", ns)
    stored = await core_api.read_namespaced_config_map("c", ns)
    assert (
        stored.metadata.deletion_timestamp is not None
        and stored.metadata.deletion_grace_period_seconds == 0
    )
    rv = apiserver.store.rev
    await core_api.patch_namespaced_config_map("c", ns, {"metadata": {"finalizers": None}})
    code, _ = await api_error(core_api.read_namespaced_config_map("c", ns))
    assert code == 404
    types = [e.type for e in apiserver.store.audit if e.rev > rv]
    assert types == ["MODIFIED", "DELETED"]


async def test_removing_finalizers_while_grace_pending_keeps_pod(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    body = pod_body("p", node="n1")
    body["metadata"]["finalizers"] = ["example.com/f"]
    await core_api.create_namespaced_pod(ns, body)
    await core_api.delete_namespaced_pod("p", ns)
    await core_api.patch_namespaced_pod(
        "p", ns, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    pod = await core_api.read_namespaced_pod("p", ns)
    assert pod.metadata.deletion_grace_period_seconds == 30 and not pod.metadata.finalizers


async def test_no_new_finalizers_on_deleting_object(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "finalizers": ["a/f"]}}
    )
    await core_api.delete_namespaced_config_map("c", ns)
    code, status = await api_error(
        core_api.patch_namespaced_config_map("c", ns, {"metadata": {"finalizers": ["a/f", "b/g"]}})
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "metadata.finalizers"


async def test_update_of_missing_object_is_404_but_events_create_on_update(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    code, _ = await api_error(
        core_api.replace_namespaced_config_map("nope", ns, {"metadata": {"name": "nope"}})
    )
    assert code == 404
    resp = await http.put(
        f"/api/v1/namespaces/{ns}/events/e1",
        json={"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"}},
    )
    assert resp.status == 201


async def test_name_mismatch_between_body_and_url_is_400(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    code, status = await api_error(
        core_api.replace_namespaced_config_map("c", ns, {"metadata": {"name": "d"}})
    )
    assert code == 400
    assert "does not match the name on the URL" in status["message"]
