"""kubesim's own controller client against the real API server: informer, errors, writes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from cluster_support import eventually

from kubesim.apiserver import ApiServer
from kubesim.client import CONFIGMAPS, PODS, ApiError, Informer, KubeClient

NS = "default"


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    server = ApiServer()
    url = await server.start()
    kube = KubeClient(url)
    yield kube
    await kube.close()
    await server.stop()


def configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def test_api_error_carries_the_status_object(client: KubeClient) -> None:
    with pytest.raises(ApiError) as info:
        await client.get(CONFIGMAPS.path(namespace=NS, name="missing"))
    assert info.value.status == 404 and info.value.not_found
    assert info.value.reason == "NotFound"
    assert info.value.body["kind"] == "Status"


async def test_delete_with_a_wrong_uid_precondition_conflicts(client: KubeClient) -> None:
    await client.create(CONFIGMAPS.path(namespace=NS), configmap("guarded"))
    with pytest.raises(ApiError) as info:
        await client.delete(CONFIGMAPS.path(namespace=NS, name="guarded"), uid="not-the-uid")
    assert info.value.conflict


async def test_status_update_with_a_stale_resource_version_conflicts(client: KubeClient) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    created = await client.create(PODS.path(namespace=NS), pod)
    created["status"] = {"phase": "Running"}
    await client.replace_status(PODS.path_of(created), created)
    with pytest.raises(ApiError) as info:
        await client.replace_status(PODS.path_of(created), created)  # same, now stale, RV
    assert info.value.conflict


async def test_informer_resumes_after_dropped_watches_without_relisting(client: KubeClient) -> None:
    informer = Informer(client, CONFIGMAPS, namespace=NS)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        await client.request("POST", "/kubesim/v1/drop-watches")
        await client.create(CONFIGMAPS.path(namespace=NS), configmap("after-drop"))
        await eventually(lambda: _has(informer, "default/after-drop"), what="event after EOF")
        assert informer.relists == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_informer_relists_after_410_and_reports_what_changed(client: KubeClient) -> None:
    await client.create(CONFIGMAPS.path(namespace=NS), configmap("doomed"))
    informer = Informer(client, CONFIGMAPS, namespace=NS)
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 5)
    task.cancel()  # the informer is away while history moves on and is compacted
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await client.delete(CONFIGMAPS.path(namespace=NS, name="doomed"))
    await client.create(CONFIGMAPS.path(namespace=NS), configmap("newcomer"))
    await client.request("POST", "/kubesim/v1/compact")
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: _has(informer, "default/newcomer"), what="relist")
        assert informer.relists == 2
        assert informer.get("default/doomed") is None
        assert ("DELETED", "doomed") in seen and ("ADDED", "newcomer") in seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _has(informer: Informer, key: str) -> bool:
    return informer.get(key) is not None
