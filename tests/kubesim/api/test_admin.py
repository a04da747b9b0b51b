"""Fault injection and inspection under /kubesim/v1/ (DESIGN §9)."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
from api_support import api_error
from kubernetes_asyncio import client as k8s


async def test_injected_failure_answers_status_with_code_for_count_requests(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await http.post(
        "/kubesim/v1/fail", json={"path": "/configmaps$", "code": 503, "count": 2, "method": "GET"}
    )
    for _ in range(2):
        code, status = await api_error(core_api.list_namespaced_config_map(ns))
        assert code == 503
        assert (
            status["kind"] == "Status"
            and status["reason"] == "ServiceUnavailable"
            and status["code"] == 503
        )
    await core_api.list_namespaced_config_map(ns)
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})


async def test_injected_failure_until_cleared_and_latency(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await http.post("/kubesim/v1/fail", json={"path": "configmaps", "code": 500, "count": None})
    for _ in range(3):
        code, _ = await api_error(core_api.list_namespaced_config_map(ns))
        assert code == 500
    await http.delete("/kubesim/v1/fail")
    await http.post("/kubesim/v1/fail", json={"path": "configmaps", "latency": 0.3, "count": 1})
    start = time.monotonic()
    await core_api.list_namespaced_config_map(ns)
    assert time.monotonic() - start >= 0.3


async def test_history_lists_changes_and_survives_compaction(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    cm = await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    await core_api.delete_namespaced_config_map("c", ns)
    await http.post("/kubesim/v1/compact")
    doc = await (await http.get(f"/kubesim/v1/history?namespace={ns}&kind=ConfigMap")).json()
    assert [(e["type"], e["name"], e["uid"]) for e in doc["items"]] == [
        ("ADDED", "c", cm.metadata.uid),
        ("DELETED", "c", cm.metadata.uid),
    ]
    revs = [int(e["rv"]) for e in doc["items"]]
    assert revs == sorted(revs)


def test_write_kubeconfig_is_usable(kubeconfig: object) -> None:
    from pathlib import Path

    import yaml

    cfg = yaml.safe_load(Path(str(kubeconfig)).read_text())
    assert cfg["current-context"] == "kubesim"
    assert cfg["clusters"][0]["cluster"]["server"].startswith("http://127.0.0.1:")


async def test_history_names_the_writing_client_and_commit_time(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    core_api.api_client.user_agent = "writer-a/1 (replica-a)"
    before = time.time()
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "labels": {"clearance.dev/attempt": "2"}}}
    )
    core_api.api_client.user_agent = "writer-b/1 (replica-b)"
    await core_api.delete_namespaced_config_map("c", ns)
    after = time.time()
    doc = await (await http.get(f"/kubesim/v1/history?namespace={ns}&kind=ConfigMap")).json()
    added, deleted = doc["items"]
    assert (added["userAgent"], added["verb"]) == ("writer-a/1 (replica-a)", "create")
    assert (deleted["userAgent"], deleted["verb"]) == ("writer-b/1 (replica-b)", "delete")
    assert added["labels"] == {"clearance.dev/attempt": "2"}
    assert before <= added["time"] <= deleted["time"] <= after
    assert added["terminating"] is False


async def test_request_log_records_reads_and_failed_writes_by_client(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    core_api.api_client.user_agent = "reader-x/1"
    await core_api.list_namespaced_config_map(ns)
    code, _ = await api_error(core_api.delete_namespaced_config_map("missing", ns))
    assert code == 404
    doc = await (await http.get("/kubesim/v1/requests?userAgent=reader-x")).json()
    assert [(r["verb"], r["code"]) for r in doc["items"]] == [("list", 200), ("delete", 404)]
    assert all(r["started"] <= r["ended"] for r in doc["items"])


async def test_injected_failure_with_a_user_agent_hits_only_those_clients(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    rule = {"path": "/configmaps$", "code": 500, "count": None, "userAgent": "clearance-"}
    await http.post("/kubesim/v1/fail", json=rule)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    hit = await http.get(path, headers={"User-Agent": "clearance-tracker/1 (x; pid 1)"})
    spared = await http.get(path, headers={"User-Agent": "chaos-driver/1"})
    assert (hit.status, spared.status) == (500, 200)


async def test_history_keeps_the_committed_body_of_the_kinds_it_is_told_to(
    apiserver: Any, http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    apiserver.store.audit_objects = frozenset({"ConfigMap"})
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"k": "1"}})
    await core_api.patch_namespaced_config_map("c", ns, {"data": {"k": "2"}})
    await core_api.create_namespaced_secret(ns, {"metadata": {"name": "s"}})
    doc = await (await http.get(f"/kubesim/v1/history?namespace={ns}")).json()
    bodies = {(e["kind"], e["type"]): e.get("object") for e in doc["items"]}
    assert bodies[("ConfigMap", "ADDED")]["data"] == {"k": "1"}
    assert bodies[("ConfigMap", "MODIFIED")]["data"] == {"k": "2"}
    assert bodies[("Secret", "ADDED")] is None
