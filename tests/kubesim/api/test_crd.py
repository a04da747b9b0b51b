"""Reference §2.11 (CRDs): registering serves the plural with its scope, versions, kinds and
status subresource; deleting the CRD stops serving and removes its objects."""

from __future__ import annotations

import aiohttp
from api_support import AW_GROUP, AW_PLURAL, AW_VERSION, api_error, appwrapper, appwrapper_crd
from kubernetes_asyncio import client as k8s

AW = (AW_GROUP, AW_VERSION)


async def test_crd_is_established_and_serves_plural(
    api_client: k8s.ApiClient, custom_api: k8s.CustomObjectsApi, ns: str
) -> None:
    ext = k8s.ApiextensionsV1Api(api_client)
    crd = await ext.create_custom_resource_definition(appwrapper_crd())
    assert {c.type: c.status for c in crd.status.conditions} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    obj = await custom_api.create_namespaced_custom_object(*AW, ns, AW_PLURAL, appwrapper("a"))
    assert obj["kind"] == "AppWrapper" and obj["apiVersion"] == f"{AW_GROUP}/{AW_VERSION}"
    assert obj["metadata"]["generation"] == 1


async def test_cluster_scoped_crd(
    api_client: k8s.ApiClient, custom_api: k8s.CustomObjectsApi
) -> None:
    await k8s.ApiextensionsV1Api(api_client).create_custom_resource_definition(
        appwrapper_crd(scope="Cluster")
    )
    obj = await custom_api.create_cluster_custom_object(*AW, AW_PLURAL, appwrapper("a"))
    assert "namespace" not in obj["metadata"]
    listing = await custom_api.list_cluster_custom_object(*AW, AW_PLURAL)
    assert [i["metadata"]["name"] for i in listing["items"]] == ["a"]


async def test_crd_without_status_subresource_keeps_status_on_main_endpoint(
    api_client: k8s.ApiClient,
    custom_api: k8s.CustomObjectsApi,
    http: aiohttp.ClientSession,
    ns: str,
) -> None:
    await k8s.ApiextensionsV1Api(api_client).create_custom_resource_definition(
        appwrapper_crd(status=False)
    )
    body = appwrapper("a")
    body["status"] = {"state": "kept"}
    obj = await custom_api.create_namespaced_custom_object(*AW, ns, AW_PLURAL, body)
    assert obj["status"] == {"state": "kept"}
    resp = await http.get(f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{ns}/{AW_PLURAL}/a/status")
    assert resp.status == 404


async def test_deleting_crd_stops_serving_and_removes_objects(
    api_client: k8s.ApiClient,
    custom_api: k8s.CustomObjectsApi,
    http: aiohttp.ClientSession,
    ns: str,
) -> None:
    ext = k8s.ApiextensionsV1Api(api_client)
    await ext.create_custom_resource_definition(appwrapper_crd())
    await custom_api.create_namespaced_custom_object(*AW, ns, AW_PLURAL, appwrapper("a"))
    await ext.delete_custom_resource_definition(f"{AW_PLURAL}.{AW_GROUP}")
    code, _ = await api_error(custom_api.list_namespaced_custom_object(*AW, ns, AW_PLURAL))
    assert code == 404
    resp = await http.get("/apis")
    assert AW_GROUP not in [g["name"] for g in (await resp.json())["groups"]]
    await ext.create_custom_resource_definition(appwrapper_crd())
    listing = await custom_api.list_namespaced_custom_object(*AW, ns, AW_PLURAL)
    assert listing["items"] == []


async def test_cr_watch_returns_dicts_with_kind(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    from kubernetes_asyncio import watch

    await custom_api.create_namespaced_custom_object(*AW, ns, AW_PLURAL, appwrapper("a"))
    events = [
        e
        async for e in watch.Watch().stream(
            custom_api.list_namespaced_custom_object, *AW, ns, AW_PLURAL, timeout_seconds=1
        )
    ]
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "AppWrapper", "a")
    ]


async def test_crd_name_must_match_plural_and_group(api_client: k8s.ApiClient) -> None:
    bad = appwrapper_crd()
    bad["metadata"]["name"] = "wrong.example.com"
    code, status = await api_error(
        k8s.ApiextensionsV1Api(api_client).create_custom_resource_definition(bad)
    )
    assert code == 422 and status["details"]["kind"] == "CustomResourceDefinition"


async def test_deleting_crd_ends_open_watches_on_its_resource(
    api_client: k8s.ApiClient, http: aiohttp.ClientSession, aw_crd: object, ns: str
) -> None:
    import asyncio

    resp = await http.get(f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{ns}/{AW_PLURAL}?watch=true")
    await asyncio.sleep(0.05)
    await k8s.ApiextensionsV1Api(api_client).delete_custom_resource_definition(
        f"{AW_PLURAL}.{AW_GROUP}"
    )
    assert await asyncio.wait_for(resp.read(), 2) == b""
