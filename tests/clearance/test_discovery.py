"""The one API discovery, against kubesim over HTTP; request counts from kubesim's request log."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from clearance.discovery import Discovery, UnknownKind
from clearance.kube import JOBS, PODS, Kube, KubeError, Resource
from kubesim.apiserver import ApiServer

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
DISCOVERY = re.compile(r"^/api/v1$|^/apis/[^/]+/[^/]+$")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)

Admin = Callable[..., Awaitable[None]]
"""The ``admin`` fixture (conftest.py): kubesim's fault injection."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def discovery_gets(server: ApiServer) -> list[str]:
    """Paths of the discovery documents fetched so far, from kubesim's request log."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/kubesim/v1/requests") as response,
    ):
        items = (await response.json())["items"]
    return [r["path"] for r in items if r["method"] == "GET" and DISCOVERY.match(r["path"])]


async def test_resolves_plural_and_scope_of_builtin_kinds(kube: Kube) -> None:
    discovery = Discovery(kube)
    assert await discovery.resolve("batch/v1", "Job") == JOBS
    nodes = await discovery.resolve("v1", "Node")
    assert (nodes.plural, nodes.namespaced) == ("nodes", False)


async def test_one_request_answers_every_kind_of_a_group_version(
    apiserver: ApiServer, kube: Kube
) -> None:
    discovery = Discovery(kube)
    for kind in ("Pod", "Node", "Service", "Pod"):
        await discovery.resolve("v1", kind)
    await discovery.resolve("batch/v1", "Job")
    assert await discovery_gets(apiserver) == ["/api/v1", "/apis/batch/v1"]


async def test_unknown_kind_is_a_clear_error_and_find_answers_none(kube: Kube) -> None:
    discovery = Discovery(kube)
    with pytest.raises(UnknownKind) as caught:
        await discovery.resolve("batch/v1", "Widget")
    assert str(caught.value) == "the API server does not serve kind Widget in batch/v1"
    assert (caught.value.api_version, caught.value.kind) == ("batch/v1", "Widget")
    assert await discovery.find("nosuch.example.com/v1", "Thing") is None  # 404 group
    assert await discovery.find("", "Pod") is None
    assert await discovery.find("v1", "") is None


async def test_a_kind_registered_later_is_found_on_a_miss_after_miss_retry(
    apiserver: ApiServer, kube: Kube
) -> None:
    clock = Clock()
    discovery = Discovery(kube, miss_retry=5.0, clock=clock)
    assert await discovery.find("example.com/v1", "Widget") is None
    await kube.create(CRDS, WIDGET_CRD)
    clock.now = 1.0
    assert await discovery.find("example.com/v1", "Widget") is None  # no storm of re-asks
    assert await discovery_gets(apiserver) == ["/apis/example.com/v1"]
    clock.now = 6.0
    widget = await discovery.resolve("example.com/v1", "Widget")
    assert (widget.plural, widget.namespaced) == ("widgets", False)
    assert len(await discovery_gets(apiserver)) == 2


async def test_miss_retry_zero_asks_the_server_on_every_miss(
    apiserver: ApiServer, kube: Kube
) -> None:
    discovery = Discovery(kube, miss_retry=0.0, preload=(PODS,))
    assert await discovery.find("v1", "Pod") == PODS  # preloaded: no request
    for _ in range(3):
        assert await discovery.find("batch/v1", "Widget") is None
    assert await discovery_gets(apiserver) == ["/apis/batch/v1"] * 3


async def test_a_hit_is_fetched_again_only_after_ttl(apiserver: ApiServer, kube: Kube) -> None:
    clock = Clock()
    discovery = Discovery(kube, ttl=30.0, clock=clock)
    await discovery.resolve("batch/v1", "Job")
    clock.now = 29.0
    await discovery.resolve("batch/v1", "Job")
    assert len(await discovery_gets(apiserver)) == 1
    clock.now = 31.0
    await discovery.resolve("batch/v1", "Job")
    assert len(await discovery_gets(apiserver)) == 2


async def test_failing_discovery_is_a_kube_error_not_an_unknown_kind(
    kube: Kube, admin: Admin
) -> None:
    await admin("POST", "fail", {"path": "^/apis/batch/v1$", "code": 503, "method": "GET"})
    discovery = Discovery(kube)
    with pytest.raises(KubeError) as caught:
        await discovery.resolve("batch/v1", "Job")
    assert not isinstance(caught.value, UnknownKind) and caught.value.code == 503
