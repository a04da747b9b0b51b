"""Reference §2.12/§2.13: discovery and OpenAPI v3 for kubectl and the dynamic client."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from api_support import AW_GROUP, AW_VERSION
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient


async def test_version_and_core_discovery(http: aiohttp.ClientSession) -> None:
    version = await (await http.get("/version")).json()
    assert version["major"] == "1" and version["minor"] == "32"
    api = await (await http.get("/api")).json()
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]


async def test_core_resource_list_includes_subresources_and_short_names(
    http: aiohttp.ClientSession,
) -> None:
    doc = await (await http.get("/api/v1")).json()
    assert doc["kind"] == "APIResourceList" and doc["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["kind"] == "Pod"
    assert by_name["pods"]["namespaced"] is True and "watch" in by_name["pods"]["verbs"]
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["pods/binding"]["verbs"] == ["create"]
    assert by_name["nodes"]["namespaced"] is False
    assert by_name["namespaces/finalize"]["verbs"] == ["update"]


async def test_group_list_includes_builtin_and_crd_groups(
    http: aiohttp.ClientSession, aw_crd: object
) -> None:
    doc = await (await http.get("/apis")).json()
    groups = {g["name"]: g for g in doc["groups"]}
    for name in (
        "apps",
        "batch",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        AW_GROUP,
    ):
        assert name in groups
    assert groups[AW_GROUP]["preferredVersion"] == {
        "groupVersion": f"{AW_GROUP}/{AW_VERSION}",
        "version": AW_VERSION,
    }
    resources = await (await http.get(f"/apis/{AW_GROUP}/{AW_VERSION}")).json()
    assert {r["name"] for r in resources["resources"]} == {"appwrappers", "appwrappers/status"}


async def test_openapi_v3_paths_carry_gvk_and_field_validation(http: aiohttp.ClientSession) -> None:
    index = await (await http.get("/openapi/v3")).json()
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    assert "?hash=" in url
    doc = await (await http.get(url)).json()
    item = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert patch["x-kubernetes-action"] == "patch"
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    assert "io.k8s.api.core.v1.Pod" in doc["components"]["schemas"]


async def test_openapi_for_crd_has_no_strategic_patch_and_hash_changes(
    http: aiohttp.ClientSession, api_client: k8s.ApiClient
) -> None:
    from api_support import appwrapper_crd

    before = await (await http.get("/openapi/v3")).json()
    assert f"apis/{AW_GROUP}/{AW_VERSION}" not in before["paths"]
    await k8s.ApiextensionsV1Api(api_client).create_custom_resource_definition(appwrapper_crd())
    after = await (await http.get("/openapi/v3")).json()
    doc = await (
        await http.get(after["paths"][f"apis/{AW_GROUP}/{AW_VERSION}"]["serverRelativeURL"])
    ).json()
    patch = doc["paths"][
        f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{{namespace}}/appwrappers/{{name}}"
    ]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert (
        f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{{namespace}}/appwrappers/{{name}}/status"
        in doc["paths"]
    )


async def test_dynamic_client_discovers_and_uses_resources(
    api_client: k8s.ApiClient, aw_crd: object, ns: str, tmp_path: Path
) -> None:
    dyn = await DynamicClient(api_client, cache_file=str(tmp_path / "discovery.json"))
    pods = await dyn.resources.get(api_version="v1", kind="Pod")
    await dyn.create(
        pods,
        body={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        namespace=ns,
    )
    got = await dyn.get(pods, name="p", namespace=ns)
    assert got.status.phase == "Pending"
    aws = await dyn.resources.get(api_version=f"{AW_GROUP}/{AW_VERSION}", kind="AppWrapper")
    await dyn.create(
        aws,
        body={
            "apiVersion": f"{AW_GROUP}/{AW_VERSION}",
            "kind": "AppWrapper",
            "metadata": {"name": "a"},
            "spec": {},
        },
        namespace=ns,
    )
    listing = await dyn.get(aws, namespace=ns)
    assert [i.metadata.name for i in listing.items] == ["a"]


async def test_table_output_for_kubectl_get(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(
        ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    resp = await http.get(
        f"/api/v1/namespaces/{ns}/pods",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    table = await resp.json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    assert table["rows"][0]["cells"][:3] == ["p", "0/1", "Pending"]
