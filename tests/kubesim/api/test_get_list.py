"""Reference §2.3: GET/LIST shapes, selectors, pagination and resourceVersion semantics."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from api_support import api_error, appwrapper, pod_body
from kubernetes_asyncio import client as k8s

from kubesim.apiserver import ApiServer


async def test_list_shape_uses_global_revision_and_sorted_items(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    for name in ("b", "a", "c"):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    await core_api.create_namespace({"metadata": {"name": "zz"}})  # bumps the global revision
    resp = await http.get(f"/api/v1/namespaces/{ns}/configmaps")
    body = await resp.json()
    assert resp.headers["Content-Type"].startswith("application/json")
    assert body["kind"] == "ConfigMapList" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"resourceVersion": str(apiserver.store.rev)}
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b", "c"]
    assert "kind" not in body["items"][0]


async def test_all_namespaces_list_sorts_by_namespace_then_name(core_api: k8s.CoreV1Api) -> None:
    for namespace in ("n2", "n1"):
        await core_api.create_namespace({"metadata": {"name": namespace}})
        for name in ("y", "x"):
            await core_api.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    listing = await core_api.list_config_map_for_all_namespaces()
    keys = [(i.metadata.namespace, i.metadata.name) for i in listing.items]
    assert keys == [("n1", "x"), ("n1", "y"), ("n2", "x"), ("n2", "y")]


async def test_cr_list_items_carry_kind_and_list_kind(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    await custom_api.create_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", ns, "appwrappers", appwrapper("a")
    )
    listing = await custom_api.list_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", ns, "appwrappers"
    )
    assert listing["kind"] == "AppWrapperList"
    assert listing["apiVersion"] == "workload.codeflare.dev/v1beta1"
    assert listing["items"][0]["kind"] == "AppWrapper"


async def test_get_missing_is_404_with_resource_name(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.read_namespaced_pod("x", ns))
    assert code == 404
    assert status["message"] == 'pods "x" not found'
    assert status["details"] == {"name": "x", "kind": "pods"}


async def test_label_selector_filters_list(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "a", "labels": {"app": "x", "tier": "1"}}}
    )
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "b", "labels": {"app": "y"}}}
    )
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    names = lambda lst: [i.metadata.name for i in lst.items]  # noqa: E731
    assert names(
        await core_api.list_namespaced_config_map(ns, label_selector="app in (x,y),!tier")
    ) == ["b"]
    assert names(await core_api.list_namespaced_config_map(ns, label_selector="app notin (x)")) == [
        "b",
        "c",
    ]
    assert names(await core_api.list_namespaced_config_map(ns, label_selector="app")) == ["a", "b"]


async def test_malformed_label_selector_is_400(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.list_namespaced_pod(ns, label_selector="a in (b"))
    assert code == 400 and status["reason"] == "BadRequest"


async def test_field_selector_on_pod_fields(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("bound", node="n1"))
    await core_api.create_namespaced_pod(ns, pod_body("free"))
    listing = await core_api.list_namespaced_pod(ns, field_selector="spec.nodeName=")
    assert [p.metadata.name for p in listing.items] == ["free"]
    listing = await core_api.list_namespaced_pod(
        ns, field_selector="spec.nodeName=n1,status.phase=Pending"
    )
    assert [p.metadata.name for p in listing.items] == ["bound"]


async def test_unsupported_field_label_is_400(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.list_namespaced_pod(ns, field_selector="spec.foo=1"))
    assert code == 400
    assert status["message"] == "field label not supported: spec.foo"


async def test_event_field_selector_on_involved_object(core_api: k8s.CoreV1Api, ns: str) -> None:
    for name, target in (("e1", "p1"), ("e2", "p2")):
        await core_api.create_namespaced_event(
            ns,
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": target, "namespace": ns},
                "reason": "R",
            },
        )
    listing = await core_api.list_namespaced_event(
        ns, field_selector="involvedObject.name=p2,involvedObject.kind=Pod"
    )
    assert [e.metadata.name for e in listing.items] == ["e2"]


async def test_pagination_serves_later_pages_at_first_page_revision(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    for i in range(5):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    page1 = await core_api.list_namespaced_config_map(ns, limit=2)
    assert [i.metadata.name for i in page1.items] == ["c0", "c1"]
    assert page1.metadata.remaining_item_count == 3
    await core_api.delete_namespaced_config_map("c3", ns)
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c9"}})
    page2 = await core_api.list_namespaced_config_map(
        ns, limit=2, _continue=page1.metadata._continue
    )
    page3 = await core_api.list_namespaced_config_map(
        ns, limit=2, _continue=page2.metadata._continue
    )
    assert [i.metadata.name for i in page2.items + page3.items] == ["c2", "c3", "c4"]
    assert page2.metadata.resource_version == page1.metadata.resource_version
    assert page3.metadata._continue is None


async def test_expired_continue_token_is_410(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    for i in range(3):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    page1 = await core_api.list_namespaced_config_map(ns, limit=1)
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "later"}})
    await http.post("/kubesim/v1/compact")
    code, status = await api_error(
        core_api.list_namespaced_config_map(ns, limit=1, _continue=page1.metadata._continue)
    )
    assert code == 410 and status["reason"] == "Expired"


async def test_exact_resource_version_list_serves_the_past(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    then = (await core_api.list_namespaced_config_map(ns)).metadata.resource_version
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    past = await core_api.list_namespaced_config_map(
        ns, resource_version=then, resource_version_match="Exact"
    )
    assert [i.metadata.name for i in past.items] == ["a"]
    assert past.metadata.resource_version == then
    newest = await core_api.list_namespaced_config_map(
        ns, resource_version=then, resource_version_match="NotOlderThan"
    )
    assert [i.metadata.name for i in newest.items] == ["a", "b"]


async def test_resource_version_zero_serves_latest(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    listing = await core_api.list_namespaced_config_map(ns, resource_version="0")
    assert [i.metadata.name for i in listing.items] == ["a"]


async def test_unknown_resource_is_404_and_unsupported_verb_405(
    http: aiohttp.ClientSession,
) -> None:
    resp = await http.get("/api/v1/namespaces/default/widgets")
    assert resp.status == 404
    assert (await resp.json())["reason"] == "NotFound"
    resp = await http.put("/api/v1/namespaces/default/pods", json={})
    assert resp.status == 405
    assert (await resp.json())["reason"] == "MethodNotAllowed"


async def test_default_namespaces_exist_at_start(core_api: k8s.CoreV1Api) -> None:
    names = {n.metadata.name for n in (await core_api.list_namespace()).items}
    assert {"default", "kube-system", "kube-node-lease", "kube-public"} <= names


@pytest.mark.parametrize("apiserver_options", [{"too_large_rv_wait": 0.3}], indirect=True)
async def test_list_at_future_resource_version_waits_then_504(
    core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    future = str(apiserver.store.rev + 5)
    code, status = await api_error(core_api.list_namespaced_config_map(ns, resource_version=future))
    assert code == 504
    assert status["reason"] == "Timeout"
    assert status["message"].startswith(f"Too large resource version: {future}, current: ")


async def test_list_at_future_resource_version_answers_once_reached(
    core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    future = apiserver.store.rev + 1

    async def write_soon() -> None:
        await asyncio.sleep(0.2)
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})

    task = asyncio.create_task(write_soon())
    listing = await core_api.list_namespaced_config_map(ns, resource_version=str(future))
    await task
    assert [i.metadata.name for i in listing.items] == ["late"]


async def test_namespaced_list_shows_exactly_the_namespaces_current_objects(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    # The namespace index must follow creates, deletes and re-creates, and keep namespaces
    # apart; a LIST at an older resourceVersion still answers from history.
    await core_api.create_namespace({"metadata": {"name": "other"}})
    for name in ("a", "b", "c"):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    await core_api.create_namespaced_config_map("other", {"metadata": {"name": "a"}})
    before = await core_api.list_namespaced_config_map(ns)
    await core_api.delete_namespaced_config_map("b", ns)
    await core_api.delete_namespaced_config_map("a", ns)
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    now = await core_api.list_namespaced_config_map(ns)
    assert [i.metadata.name for i in now.items] == ["a", "c"]
    other = await core_api.list_namespaced_config_map("other")
    assert [i.metadata.name for i in other.items] == ["a"]
    old = await core_api.list_namespaced_config_map(
        ns, resource_version=before.metadata.resource_version, resource_version_match="Exact"
    )
    assert [i.metadata.name for i in old.items] == ["a", "b", "c"]
