"""Reference §2.7 (PATCH: merge, JSON patch, strategic merge with its merge keys, 415 on CRs) and
§4.2 (what kubernetes_asyncio sends: SMP for dicts on built-ins, JSON patch for dicts on
CustomObjectsApi unless told otherwise)."""

from __future__ import annotations

import pytest
from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    UNSUPPORTED_MEDIA_MESSAGE,
    Client,
    Http,
    JsonObj,
    Kubectl,
    appwrapper,
    configmap,
    pod,
    status_from_exception,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.dynamic import DynamicClient


async def _post(http: Http, path: str, body: JsonObj) -> JsonObj:
    resp = await http.request("POST", path, json_body=body)
    assert resp.status == 201, resp.body
    obj: JsonObj = resp.json()
    return obj


async def _patch(http: Http, path: str, body: object, content_type: str) -> tuple[int, JsonObj]:
    resp = await http.request("PATCH", path, json_body=body, content_type=content_type)
    out: JsonObj = resp.json()
    return resp.status, out


def _cm_path(ns: str, name: str = "c1") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps/{name}"


# --- merge patch (RFC 7386) -------------------------------------------------------------------


async def test_merge_patch_null_deletes_and_lists_are_replaced(
    client: Client, http: Http, ns: str
) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap(
            "c1", ns, labels={"keep": "1", "drop": "1"}, finalizers=["a/x", "b/y"], data={"k": "v"}
        ),
    )
    patched = (
        await client.patch(
            "configmaps",
            "c1",
            ns,
            {
                "metadata": {"labels": {"drop": None, "new": "1"}, "finalizers": ["c/z"]},
                "data": {"k2": "v2"},
            },
            patch_type="merge",
        )
    ).value()
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "1"}
    assert patched["metadata"]["finalizers"] == ["c/z"]
    assert patched["data"] == {"k": "v", "k2": "v2"}


async def test_merge_patch_on_custom_resource(client: Client, http: Http, ns: str) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    patched = (
        await client.patch("appwrappers", "a1", ns, {"spec": {"priority": 8}}, patch_type="merge")
    ).value()
    assert patched["spec"]["priority"] == 8
    assert patched["metadata"]["generation"] == 2


async def test_patch_with_stale_resource_version_is_409(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    await _patch(http, _cm_path(ns), {"data": {"a": "1"}}, MERGE_PATCH)
    code, status = await _patch(
        http,
        _cm_path(ns),
        {
            "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
            "data": {"a": "2"},
        },
        MERGE_PATCH,
    )
    assert code == 409
    assert status["reason"] == "Conflict"


async def test_patch_missing_object_is_404(client: Client, ns: str) -> None:
    outcome = await client.patch("configmaps", "nope", ns, {"data": {"a": "1"}}, patch_type="merge")
    outcome.expect_failure(code=404, reason="NotFound", message='configmaps "nope" not found')


# --- JSON patch (RFC 6902) --------------------------------------------------------------------


async def test_json_patch_ops_including_test(client: Client, http: Http, ns: str) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, labels={"a": "1"}, data={"k": "v", "gone": "x"}),
    )
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "replace", "path": "/data/k", "value": "v2"},
        {"op": "remove", "path": "/data/gone"},
        {"op": "copy", "from": "/data/k", "path": "/data/k3"},
        {"op": "move", "from": "/data/k3", "path": "/data/k4"},
    ]
    patched = (await client.patch("configmaps", "c1", ns, ops, patch_type="json")).value()
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert patched["data"] == {"k": "v2", "k4": "v2"}


async def test_json_patch_failed_test_op_is_422(client: Client, http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns, data={"k": "v"}))
    ops = [
        {"op": "test", "path": "/data/k", "value": "other"},
        {"op": "replace", "path": "/data/k", "value": "x"},
    ]
    outcome = await client.patch("configmaps", "c1", ns, ops, patch_type="json")
    outcome.expect_failure(code=422, reason="Invalid")
    assert (await http.request("GET", _cm_path(ns))).json()["data"] == {"k": "v"}


async def test_json_patch_remove_missing_path_is_422(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    code, status = await _patch(
        http, _cm_path(ns), [{"op": "remove", "path": "/data/none"}], JSON_PATCH
    )
    assert code == 422
    assert status["reason"] == "Invalid"


async def test_json_patch_with_object_body_is_400(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    code, status = await _patch(http, _cm_path(ns), {"data": {"a": "1"}}, JSON_PATCH)
    assert code == 400
    assert status["kind"] == "Status" and status["reason"] == "BadRequest"


# --- strategic merge patch --------------------------------------------------------------------


async def test_strategic_patch_merges_containers_by_name(
    client: Client, http: Http, ns: str
) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns, containers=("a", "b")))
    patched = (
        await client.patch(
            "pods",
            "p1",
            ns,
            {"spec": {"containers": [{"name": "b", "image": "busybox:new"}]}},
            patch_type="strategic",
        )
    ).value()
    images = {c["name"]: c["image"] for c in patched["spec"]["containers"]}
    assert images == {"a": "busybox:a", "b": "busybox:new"}


async def test_strategic_patch_empty_finalizers_does_not_remove(
    client: Client, http: Http, ns: str
) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, finalizers=["example.com/a", "example.com/b"]),
    )
    patched = (
        await client.patch(
            "configmaps", "c1", ns, {"metadata": {"finalizers": []}}, patch_type="strategic"
        )
    ).value()
    assert patched["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]


async def test_strategic_patch_null_finalizers_removes(client: Client, http: Http, ns: str) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, finalizers=["example.com/a", "example.com/b"]),
    )
    patched = (
        await client.patch(
            "configmaps", "c1", ns, {"metadata": {"finalizers": None}}, patch_type="strategic"
        )
    ).value()
    assert not patched["metadata"].get("finalizers")


async def test_strategic_patch_unions_finalizers(http: Http, ns: str) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, finalizers=["example.com/a"]),
    )
    code, patched = await _patch(
        http, _cm_path(ns), {"metadata": {"finalizers": ["example.com/b"]}}, STRATEGIC_PATCH
    )
    assert code == 200, patched
    assert sorted(patched["metadata"]["finalizers"]) == ["example.com/a", "example.com/b"]


async def test_strategic_patch_delete_from_primitive_list(http: Http, ns: str) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, finalizers=["example.com/a", "example.com/b"]),
    )
    code, patched = await _patch(
        http,
        _cm_path(ns),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}},
        STRATEGIC_PATCH,
    )
    assert code == 200, patched
    assert patched["metadata"]["finalizers"] == ["example.com/b"]


async def test_typed_client_dict_patch_is_strategic(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    """§0.6: kubernetes_asyncio sends SMP for dicts, so `finalizers: []` silently does nothing."""
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns, finalizers=["example.com/a"]))
    patched = await core.patch_namespaced_pod("p1", ns, {"metadata": {"finalizers": []}})
    assert patched.metadata.finalizers == ["example.com/a"]
    merged = await core.patch_namespaced_pod(
        "p1", ns, {"metadata": {"finalizers": []}}, _content_type=MERGE_PATCH
    )
    assert not merged.metadata.finalizers


async def test_strategic_patch_node_taints_merge_by_key_and_patch_delete(
    http: Http, ns: str
) -> None:
    node = f"{ns}-node"[:63]
    await _post(
        http,
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "spec": {
                "taints": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "b", "effect": "NoSchedule"},
                ]
            },
        },
    )
    code, patched = await _patch(
        http,
        f"/api/v1/nodes/{node}",
        {
            "spec": {
                "taints": [{"key": "b", "effect": "NoExecute"}, {"key": "a", "$patch": "delete"}]
            }
        },
        STRATEGIC_PATCH,
    )
    assert code == 200, patched
    assert [(t["key"], t["effect"]) for t in patched["spec"]["taints"]] == [("b", "NoExecute")]


async def test_strategic_patch_pod_status_conditions_merge_by_type(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns))
    status_path = f"/api/v1/namespaces/{ns}/pods/p1/status"
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    code, _ = await _patch(
        http, status_path, {"status": {"conditions": conditions}}, STRATEGIC_PATCH
    )
    assert code == 200
    code, patched = await _patch(
        http,
        status_path,
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        STRATEGIC_PATCH,
    )
    assert code == 200
    by_type = {c["type"]: c["status"] for c in patched["status"]["conditions"]}
    assert by_type == {"PodScheduled": "True", "Ready": "True"}


async def test_strategic_patch_owner_references_merge_by_uid(http: Http, ns: str) -> None:
    def ref(uid: str, name: str) -> JsonObj:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}

    body = configmap("c1", ns)
    body["metadata"]["ownerReferences"] = [ref("00000000-0000-0000-0000-00000000000a", "a")]
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", body)
    code, patched = await _patch(
        http,
        _cm_path(ns),
        {"metadata": {"ownerReferences": [ref("00000000-0000-0000-0000-00000000000b", "b")]}},
        STRATEGIC_PATCH,
    )
    assert code == 200, patched
    assert sorted(r["name"] for r in patched["metadata"]["ownerReferences"]) == ["a", "b"]


async def test_strategic_patch_tolerations_are_atomic_and_lists_without_strategy_replaced(
    http: Http, ns: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d1", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {
                "metadata": {"labels": {"app": "d1"}},
                "spec": {
                    "containers": [{"name": "a", "image": "busybox", "args": ["1", "2"]}],
                    "tolerations": [{"key": "t1", "operator": "Exists"}],
                },
            },
        },
    }
    await _post(http, f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    code, patched = await _patch(
        http,
        f"/apis/apps/v1/namespaces/{ns}/deployments/d1",
        {
            "spec": {
                "template": {
                    "spec": {
                        "tolerations": [{"key": "t2", "operator": "Exists"}],
                        "containers": [{"name": "a", "args": ["3"]}],
                    }
                }
            }
        },
        STRATEGIC_PATCH,
    )
    assert code == 200, patched
    spec = patched["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "t2", "operator": "Exists"}]
    [container] = spec["containers"]
    assert (container["name"], container["image"], container["args"]) == ("a", "busybox", ["3"])


# --- CRs: 415 and the CustomObjectsApi content-type trap --------------------------------------


async def test_strategic_patch_on_cr_is_415_exact_message(http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    await _post(http, path, appwrapper("a1", ns))
    code, status = await _patch(http, f"{path}/a1", {"spec": {"priority": 1}}, STRATEGIC_PATCH)
    assert code == 415
    assert status["reason"] == "UnsupportedMediaType"
    assert status["message"] == UNSUPPORTED_MEDIA_MESSAGE


async def test_strategic_patch_on_cr_is_415_for_every_client(
    client: Client, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    outcome = await client.patch(
        "appwrappers", "a1", ns, {"spec": {"priority": 1}}, patch_type="strategic"
    )
    outcome.expect_failure(
        code=415, reason="UnsupportedMediaType", message=UNSUPPORTED_MEDIA_MESSAGE
    )


async def test_dynamic_client_default_patch_on_cr_is_415(
    dyn: DynamicClient, http: Http, ns: str
) -> None:
    """§4.2: DynamicClient.patch defaults to SMP. (kubernetes_asyncio 36 returns the Status as the
    result instead of raising — see FINDINGS.md, client notes.)"""
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    aws = await dyn.resources.get(api_version=AW_API_VERSION, kind="AppWrapper")
    result = await dyn.patch(aws, body={"spec": {"priority": 1}}, name="a1", namespace=ns)
    assert (result.kind, result.code, result.reason) == ("Status", 415, "UnsupportedMediaType")


async def test_kubectl_default_patch_on_cr_reports_415(
    kubectl: Kubectl, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    proc = kubectl.run(
        "patch",
        "appwrappers.workload.codeflare.dev",
        "a1",
        "-n",
        ns,
        "-p",
        '{"spec":{"priority":1}}',
    )
    assert proc.returncode != 0
    assert UNSUPPORTED_MEDIA_MESSAGE in proc.stderr


async def test_custom_objects_dict_patch_without_content_type_is_400(
    custom: k8s.CustomObjectsApi, http: Http, ns: str
) -> None:
    """§4.2: the client falls back to application/json-patch+json with an object body."""
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    with pytest.raises(ApiException) as info:
        await custom.patch_namespaced_custom_object(
            AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1", {"spec": {"priority": 1}}
        )
    status_from_exception(info.value).expect_failure(code=400, reason="BadRequest")


async def test_custom_objects_dict_patch_with_merge_content_type_works(
    custom: k8s.CustomObjectsApi, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    patched = await custom.patch_namespaced_custom_object(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "a1",
        {"spec": {"priority": 1}},
        _content_type=MERGE_PATCH,
    )
    assert patched["spec"]["priority"] == 1


async def test_json_patch_over_10000_operations_is_rejected(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns, data={"k": "v"}))
    ops = [{"op": "test", "path": "/data/k", "value": "v"}] * 10_001
    resp = await http.request("PATCH", _cm_path(ns), json_body=ops, content_type=JSON_PATCH)
    assert 400 <= resp.status < 500
    assert resp.json()["kind"] == "Status"


async def test_strategic_patch_replace_directive(http: Http, ns: str) -> None:
    await _post(
        http,
        f"/api/v1/namespaces/{ns}/configmaps",
        configmap("c1", ns, labels={"a": "1", "b": "2"}),
    )
    code, patched = await _patch(
        http,
        _cm_path(ns),
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        STRATEGIC_PATCH,
    )
    assert code == 200, patched
    assert patched["metadata"]["labels"] == {"c": "3"}


async def test_json_patch_pointer_escaping(http: Http, ns: str) -> None:
    """RFC 6901: `~1` is `/`, `~0` is `~` (a `~` key only fits in a free-form CR field)."""
    body = appwrapper("a1", ns, labels={"app.kubernetes.io/name": "x"})
    body["spec"]["resources"]["GenericItems"][0]["generictemplate"]["a~b"] = "y"
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    await _post(http, path, body)
    ops = [
        {"op": "replace", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "z"},
        {"op": "remove", "path": "/spec/resources/GenericItems/0/generictemplate/a~0b"},
    ]
    code, patched = await _patch(http, f"{path}/a1", ops, JSON_PATCH)
    assert code == 200, patched
    assert patched["metadata"]["labels"] == {"app.kubernetes.io/name": "z"}
    assert "a~b" not in patched["spec"]["resources"]["GenericItems"][0]["generictemplate"]


async def test_strategic_patch_env_and_volume_mounts_merge_and_container_delete(
    http: Http, ns: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d1", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {
                "metadata": {"labels": {"app": "d1"}},
                "spec": {
                    "containers": [
                        {
                            "name": "a",
                            "image": "busybox",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ],
                    "volumes": [{"name": "v", "emptyDir": {}}],
                },
            },
        },
    }
    await _post(http, f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "a",
                            "env": [{"name": "B", "value": "3"}],
                            "volumeMounts": [{"name": "w", "mountPath": "/other"}],
                        },
                        {"name": "sidecar", "$patch": "delete"},
                    ],
                    "volumes": [{"name": "w", "emptyDir": {}}],
                }
            }
        }
    }
    code, patched = await _patch(
        http, f"/apis/apps/v1/namespaces/{ns}/deployments/d1", patch, STRATEGIC_PATCH
    )
    assert code == 200, patched
    spec = patched["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["a"]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env == {"A": "1", "B": "3"}
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts == {"/data", "/other"}
    assert {v["name"] for v in spec["volumes"]} == {"v", "w"}


async def test_patch_with_plain_json_content_type_is_415(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    code, status = await _patch(http, _cm_path(ns), {"data": {"a": "b"}}, "application/json")
    assert code == 415
    assert status["reason"] == "UnsupportedMediaType"
