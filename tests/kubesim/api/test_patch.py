"""Reference §2.7: PATCH content types, errors, preconditions and subresources."""

from __future__ import annotations

import aiohttp
from api_support import api_error, appwrapper, pod_body
from kubernetes_asyncio import client as k8s

AW = ("workload.codeflare.dev", "v1beta1")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


async def test_merge_patch_null_deletes_key(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}}
    )
    out = await core_api.patch_namespaced_config_map(
        "c", ns, {"metadata": {"labels": {"a": None}}}, _content_type=MERGE
    )
    assert out.metadata.labels == {"b": "2"}


async def test_json_patch_with_test_op_applies(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
    ]
    out = await core_api.patch_namespaced_config_map("c", ns, ops)
    assert out.data == {"k": "w"}


async def test_json_patch_failed_test_is_422(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    code, status = await api_error(
        core_api.patch_namespaced_config_map(
            "c", ns, [{"op": "test", "path": "/data/k", "value": "x"}]
        )
    )
    assert code == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["message"] == "testing value /data/k failed: test failed"


async def test_json_patch_object_body_is_400(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    resp = await http.patch(
        f"/api/v1/namespaces/{ns}/configmaps/c",
        data=b'{"data":{"a":"b"}}',
        headers={"Content-Type": JSON_PATCH},
    )
    assert resp.status == 400
    assert (await resp.json())["reason"] == "BadRequest"


async def test_custom_objects_dict_patch_without_content_type_is_400(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    # CustomObjectsApi falls back to application/json-patch+json for a dict body (reference §4.2).
    await custom_api.create_namespaced_custom_object(*AW, ns, "appwrappers", appwrapper("a"))
    code, _ = await api_error(
        custom_api.patch_namespaced_custom_object(
            *AW, ns, "appwrappers", "a", {"spec": {"priority": 3}}
        )
    )
    assert code == 400


async def test_strategic_merge_patch_on_cr_is_415(
    http: aiohttp.ClientSession, custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    await custom_api.create_namespaced_custom_object(*AW, ns, "appwrappers", appwrapper("a"))
    resp = await http.patch(
        f"/apis/workload.codeflare.dev/v1beta1/namespaces/{ns}/appwrappers/a",
        data=b'{"spec":{"priority":3}}',
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert resp.status == 415
    status = await resp.json()
    assert status["reason"] == "UnsupportedMediaType"
    assert status["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


async def test_merge_patch_on_cr_status_subresource(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    await custom_api.create_namespaced_custom_object(*AW, ns, "appwrappers", appwrapper("a"))
    out = await custom_api.patch_namespaced_custom_object_status(
        *AW,
        ns,
        "appwrappers",
        "a",
        {"status": {"state": "Running"}, "spec": {"priority": 99}},
        _content_type=MERGE,
    )
    assert out["status"] == {"state": "Running"} and out["spec"]["priority"] == 1


async def test_smp_empty_finalizers_keeps_finalizers_over_http(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "finalizers": ["a/f"]}}
    )
    out = await core_api.patch_namespaced_config_map("c", ns, {"metadata": {"finalizers": []}})
    assert out.metadata.finalizers == ["a/f"]
    out = await core_api.patch_namespaced_config_map(
        "c", ns, {"metadata": {"finalizers": []}}, _content_type=MERGE
    )
    assert out.metadata.finalizers is None


async def test_smp_merges_pod_status_conditions_by_type(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    await core_api.patch_namespaced_pod_status(
        "p", ns, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    out = await core_api.patch_namespaced_pod_status(
        "p", ns, {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    assert [(c.type, c.status) for c in out.status.conditions] == [
        ("Ready", "False"),
        ("PodScheduled", "True"),
    ]


async def test_patch_with_stale_resource_version_is_409(core_api: k8s.CoreV1Api, ns: str) -> None:
    cm = await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    await core_api.patch_namespaced_config_map("c", ns, {"data": {"a": "1"}})
    code, status = await api_error(
        core_api.patch_namespaced_config_map(
            "c",
            ns,
            {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"a": "2"}},
        )
    )
    assert code == 409 and status["reason"] == "Conflict"


async def test_patch_missing_object_is_404(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.patch_namespaced_config_map("nope", ns, {"data": {}}))
    assert code == 404 and status["message"] == 'configmaps "nope" not found'


async def test_apply_patch_is_unsupported_415(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    resp = await http.patch(
        f"/api/v1/namespaces/{ns}/configmaps/c?fieldManager=x",
        data=b"data: {}",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert resp.status == 415


async def test_patch_status_does_not_bump_resource_version_when_unchanged(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    cm = await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "labels": {"a": "b"}}}
    )
    out = await core_api.patch_namespaced_config_map("c", ns, {"metadata": {"labels": {"a": "b"}}})
    assert out.metadata.resource_version == cm.metadata.resource_version
