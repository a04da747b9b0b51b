"""Reference §2.4 and §4.1: watch wire format and semantics, and kubernetes_asyncio's watch loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import aiohttp
import pytest
from api_support import pod_body
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.rest import ApiException

from kubesim.apiserver import ApiServer


async def _raw_watch(
    http: aiohttp.ClientSession, path: str, *, limit: int = 100
) -> tuple[aiohttp.ClientResponse, list[dict[str, Any]]]:
    """Read the whole body of a (timeout-bounded) raw watch as NDJSON events."""
    resp = await http.get(path)
    events: list[dict[str, Any]] = []
    async for line in resp.content:
        if line.strip():
            events.append(json.loads(line))
        if len(events) >= limit:
            resp.close()  # seen all that was expected; do not wait for timeoutSeconds
            break
    return resp, events


async def test_watch_without_rv_sends_synthetic_added_then_changes(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})

    async def later() -> None:
        await asyncio.sleep(0.2)
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})

    task = asyncio.create_task(later())
    resp, events = await _raw_watch(
        http, f"/api/v1/namespaces/{ns}/configmaps?watch=true&timeoutSeconds=1", limit=2
    )
    await task
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert events[0]["object"]["kind"] == "ConfigMap" and events[0]["object"]["apiVersion"] == "v1"


async def test_watch_from_rv_sends_only_newer_changes(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    rv = (await core_api.list_namespaced_config_map(ns)).metadata.resource_version
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    await core_api.delete_namespaced_config_map("a", ns)
    _, events = await _raw_watch(
        http,
        f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=1",
        limit=2,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    revs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert revs == sorted(revs) and revs[0] > int(rv)


async def test_deleted_event_carries_last_state_with_delete_revision(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    rv = apiserver.store.rev
    await core_api.delete_namespaced_config_map("a", ns)
    _, events = await _raw_watch(
        http,
        f"/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1",
        limit=1,
    )
    assert events[0]["type"] == "DELETED"
    assert events[0]["object"]["data"] == {"k": "v"}
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(apiserver.store.rev)


async def test_expired_rv_is_http_200_with_one_error_event(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    await http.post("/kubesim/v1/compact")
    resp, events = await _raw_watch(
        http, f"/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion=2"
    )
    assert resp.status == 200
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["apiVersion"] == "v1" and status["metadata"] == {}
    assert status["status"] == "Failure" and status["reason"] == "Expired" and status["code"] == 410
    assert status["message"].startswith("too old resource version: 2 (")


@pytest.mark.parametrize("apiserver_options", [{"history_limit": 5}], indirect=True)
async def test_history_ring_is_bounded(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    for i in range(10):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    _, events = await _raw_watch(
        http, f"/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion=1"
    )
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


async def test_selector_transitions_become_added_and_deleted(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    await core_api.create_namespaced_config_map(
        ns, {"metadata": {"name": "a", "labels": {"app": "x"}}}
    )
    rv = apiserver.store.rev
    await core_api.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"app": "y"}}})
    await core_api.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"app": "x"}}})
    await core_api.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}})
    _, events = await _raw_watch(
        http,
        f"/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={rv}"
        "&labelSelector=app%3Dx&timeoutSeconds=1",
        limit=3,
    )
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "MODIFIED"]
    assert events[0]["object"]["metadata"]["labels"] == {"app": "x"}  # old state
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == rv + 1


async def test_single_object_watch_by_metadata_name(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    for name in ("a", "b"):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    _, events = await _raw_watch(
        http,
        f"/api/v1/namespaces/{ns}/configmaps?watch=True&fieldSelector=metadata.name%3Db"
        "&timeoutSeconds=1",
        limit=1,
    )
    assert [e["object"]["metadata"]["name"] for e in events] == ["b"]


@pytest.mark.parametrize("flag", ["1", "t", "T", "true", "TRUE", "True"])
async def test_watch_flag_parses_leniently(http: aiohttp.ClientSession, ns: str, flag: str) -> None:
    resp = await http.get(f"/api/v1/namespaces/{ns}/configmaps?watch={flag}&timeoutSeconds=0")
    assert resp.status == 200
    assert resp.headers.get("Transfer-Encoding") == "chunked"


async def test_timeout_seconds_ends_the_stream_cleanly(
    http: aiohttp.ClientSession, ns: str
) -> None:
    start = time.monotonic()
    resp = await http.get(f"/api/v1/namespaces/{ns}/configmaps?watch=true&timeoutSeconds=1")
    body = await resp.read()
    assert 0.9 < time.monotonic() - start < 3
    assert body == b""


@pytest.mark.parametrize("apiserver_options", [{"bookmark_interval": 0.2}], indirect=True)
async def test_bookmarks_carry_current_revision_when_allowed(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    await core_api.create_namespace({"metadata": {"name": "other"}})
    _, events = await _raw_watch(
        http,
        f"/api/v1/namespaces/{ns}/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=3",
        limit=1,
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert bookmarks[0]["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(apiserver.store.rev)},
    }
    _, events = await _raw_watch(http, f"/api/v1/namespaces/{ns}/pods?watch=true&timeoutSeconds=1")
    assert events == []


async def test_bookmark_sent_shortly_before_timeout(http: aiohttp.ClientSession, ns: str) -> None:
    start = time.monotonic()
    resp = await http.get(
        f"/api/v1/namespaces/{ns}/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=3"
    )
    line = await resp.content.readline()
    assert json.loads(line)["type"] == "BOOKMARK"
    assert 0.7 < time.monotonic() - start < 2.0


async def test_events_are_ordered_and_complete_under_concurrent_writes(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    rv = apiserver.store.rev
    resp = await http.get(
        f"/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=3"
    )

    async def writer(prefix: str) -> None:
        for i in range(30):
            await core_api.create_namespaced_config_map(ns, {"metadata": {"name": f"{prefix}{i}"}})

    await asyncio.gather(*(writer(p) for p in "abcd"))
    seen: list[int] = []
    async for line in resp.content:
        if line.strip():
            seen.append(int(json.loads(line)["object"]["metadata"]["resourceVersion"]))
        if len(seen) == 120:
            break
    assert seen == sorted(seen) and len(set(seen)) == 120


async def test_drop_watches_closes_streams_with_eof(http: aiohttp.ClientSession, ns: str) -> None:
    resp = await http.get(f"/api/v1/namespaces/{ns}/pods?watch=true")
    await asyncio.sleep(0.1)
    dropped = await (await http.post("/kubesim/v1/drop-watches")).json()
    assert dropped["dropped"] >= 1
    assert await asyncio.wait_for(resp.read(), 2) == b""


@pytest.mark.parametrize("apiserver_options", [{"watch_queue_limit": 3}], indirect=True)
async def test_slow_watcher_overflow_is_closed_with_410(apiserver: ApiServer, ns: str) -> None:
    _, watcher = apiserver.registry.start_watch(
        apiserver.resources.lookup("", "v1", "configmaps"), ns, None, str(apiserver.store.rev)
    )  # type: ignore[arg-type]
    for i in range(5):
        apiserver.registry.create(
            apiserver.resources.lookup("", "v1", "configmaps"), ns, {"metadata": {"name": f"c{i}"}}
        )  # type: ignore[arg-type]
    assert watcher.overflowed and not watcher.queue
    apiserver.store.remove_watcher(watcher)


async def test_stop_closes_open_watches(
    apiserver: ApiServer, http: aiohttp.ClientSession, ns: str
) -> None:
    resp = await http.get(f"/api/v1/namespaces/{ns}/pods?watch=true")
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await apiserver.stop()
    assert time.monotonic() - start < 2
    with contextlib.suppress(aiohttp.ClientError):
        assert await asyncio.wait_for(resp.read(), 1) == b""


async def test_typed_watch_stream_deserializes_events(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    w = watch.Watch()
    seen = []
    async for event in w.stream(core_api.list_namespaced_pod, ns, timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.name, event["object"].status.phase))
    assert seen == [("ADDED", "p", "Pending")]


async def test_asyncio_watch_loop_list_bookmark_compact_410_relist(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, apiserver: ApiServer, ns: str
) -> None:
    """Issue 3 acceptance 2: list → watch with bookmarks → forced compaction → 410 → relist."""
    apiserver.bookmark_interval = 0.2
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    listing = await core_api.list_namespaced_config_map(ns)
    rv = listing.metadata.resource_version
    known = {i.metadata.name for i in listing.items}

    # 1. watch from the list's RV with bookmarks; see a change and a bookmark.
    w = watch.Watch()
    got_bookmark = False
    async for event in w.stream(
        core_api.list_namespaced_config_map,
        ns,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    ):
        if event["type"] == "BOOKMARK":
            got_bookmark = True
            await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
        elif event["type"] == "ADDED":
            known.add(event["object"].metadata.name)
            break
    assert got_bookmark and known == {"a", "b"}
    resume = w.resource_version
    w.stop()

    # 2. compaction while "disconnected", plus a change the client has not seen.
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    await http.post("/kubesim/v1/compact")

    # 3. resuming from the stale RV raises 410 (kubernetes_asyncio retries once, then raises).
    with pytest.raises(ApiException) as err:
        async for _ in watch.Watch().stream(
            core_api.list_namespaced_config_map, ns, resource_version=resume, timeout_seconds=1
        ):
            pass
    assert err.value.status == 410

    # 4. relist and resume: nothing was missed.
    relist = await core_api.list_namespaced_config_map(ns)
    assert {i.metadata.name for i in relist.items} == {"a", "b", "c"}
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "d"}})
    names = [
        e["object"].metadata.name
        async for e in watch.Watch().stream(
            core_api.list_namespaced_config_map,
            ns,
            resource_version=relist.metadata.resource_version,
            timeout_seconds=1,
        )
    ]
    assert names == ["d"]


async def test_watch_forever_reconnects_after_dropped_watches(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    rv = (await core_api.list_namespaced_config_map(ns)).metadata.resource_version
    w = watch.Watch()
    names: list[str] = []

    async def consume() -> None:
        async for event in w.stream(core_api.list_namespaced_config_map, ns, resource_version=rv):
            names.append(event["object"].metadata.name)
            if len(names) == 2:
                w.stop()
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    await asyncio.sleep(0.1)
    await http.post("/kubesim/v1/drop-watches")
    await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    await asyncio.wait_for(task, 5)
    assert names == ["a", "b"]


async def test_watch_from_future_rv_waits_for_it(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    future = apiserver.store.rev + 2
    resp = await http.get(
        f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={future}&timeoutSeconds=1"
    )
    for name in ("a", "b", "c"):
        await core_api.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    names = [
        json.loads(line)["object"]["metadata"]["name"]
        async for line in resp.content
        if line.strip()
    ]
    assert names == ["c"]
