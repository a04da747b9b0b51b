"""Reference §2.11: namespace deletion, /finalize, and immortal namespaces."""

from __future__ import annotations

import aiohttp
from api_support import api_error
from kubernetes_asyncio import client as k8s


async def test_namespace_gets_kubernetes_finalizer_and_active_phase(
    core_api: k8s.CoreV1Api,
) -> None:
    ns = await core_api.create_namespace({"metadata": {"name": "n1"}})
    assert ns.spec.finalizers == ["kubernetes"]
    assert ns.status.phase == "Active"
    assert ns.metadata.labels == {"kubernetes.io/metadata.name": "n1"}


async def test_namespace_delete_is_terminating_until_finalized(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api
) -> None:
    await core_api.create_namespace({"metadata": {"name": "n1"}})
    await core_api.delete_namespace("n1")
    ns = await core_api.read_namespace("n1")
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    body = core_api.api_client.sanitize_for_serialization(ns)
    body["spec"]["finalizers"] = []
    resp = await http.put("/api/v1/namespaces/n1/finalize", json=body)
    assert resp.status == 200
    code, _ = await api_error(core_api.read_namespace("n1"))
    assert code == 404


async def test_immortal_namespace_delete_is_forbidden(core_api: k8s.CoreV1Api) -> None:
    code, status = await api_error(core_api.delete_namespace("default"))
    assert code == 403
    assert (
        status["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    )


async def test_namespace_status_subresource(core_api: k8s.CoreV1Api) -> None:
    await core_api.create_namespace({"metadata": {"name": "n1"}})
    out = await core_api.patch_namespace_status(
        "n1", {"status": {"conditions": [{"type": "X", "status": "True"}]}}
    )
    assert out.status.conditions[0].type == "X"
