"""Reference §2.4 (WATCH) and §4.1 (kubernetes_asyncio's watch loop), incl. issue 3 Acceptance 2:
list → watch with bookmarks → forced compaction → 410 → relist, with no missed event."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from typing import Any

import pytest
from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    Http,
    JsonObj,
    Kubectl,
    ServerHandle,
    appwrapper,
    configmap,
    eventually,
    pod,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.dynamic import DynamicClient

SERVER_OPTIONS = {"bookmark_interval": 0.5}
TOO_OLD = re.compile(
    r"^(too old resource version: \d+ \(\d+\)"
    r"|The resourceVersion for the provided watch is too old\.)$"
)


async def _post(http: Http, path: str, body: JsonObj) -> JsonObj:
    resp = await http.request("POST", path, json_body=body)
    assert resp.status == 201, resp.body
    obj: JsonObj = resp.json()
    return obj


def _pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def _rv(obj: JsonObj) -> int:
    return int(obj["metadata"]["resourceVersion"])


# --- wire format and start semantics ----------------------------------------------------------


async def test_watch_wire_format_is_chunked_ndjson(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    result = await http.watch(_pods(ns), {"watch": "true"}, max_events=1)
    assert result.status == 200
    assert result.headers["Content-Type"].startswith("application/json")
    assert result.headers.get("Transfer-Encoding") == "chunked"
    line = result.raw_lines[0]
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    event = json.loads(line)
    assert set(event) == {"type", "object"}
    assert event["type"] == "ADDED"
    assert (event["object"]["kind"], event["object"]["apiVersion"]) == ("Pod", "v1")


@pytest.mark.parametrize("rv", [None, "0"])
async def test_watch_without_rv_or_rv0_starts_with_synthetic_added(
    http: Http, ns: str, rv: str | None
) -> None:
    for name in ("p1", "p2"):
        await _post(http, _pods(ns), pod(name, ns))
    params = {"watch": "1"} | ({"resourceVersion": rv} if rv is not None else {})

    async def write_after_open() -> None:
        await _post(http, _pods(ns), pod("p3", ns))

    result = await http.watch(_pods(ns), params, max_events=3, after_open=write_after_open)
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in result.events]
    assert sorted(got[:2]) == [("ADDED", "p1"), ("ADDED", "p2")]
    assert got[2] == ("ADDED", "p3")


async def test_watch_from_rv_n_has_no_synthetic_added(http: Http, ns: str) -> None:
    first = await _post(http, _pods(ns), pod("p1", ns))
    await _post(http, _pods(ns), pod("p2", ns))
    result = await http.watch(
        _pods(ns),
        {"watch": "true", "resourceVersion": first["metadata"]["resourceVersion"]},
        timeout=0.5,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in result.events] == [
        ("ADDED", "p2")
    ]


async def test_single_object_watch_by_metadata_name(http: Http, ns: str) -> None:
    for name in ("p1", "p2"):
        await _post(http, _pods(ns), pod(name, ns))
    result = await http.watch(
        _pods(ns), {"watch": "true", "fieldSelector": "metadata.name=p2"}, timeout=0.5
    )
    assert [e["object"]["metadata"]["name"] for e in result.events] == ["p2"]


@pytest.mark.parametrize("value", ["1", "t", "T", "true", "TRUE", "True"])
async def test_watch_parameter_parses_like_go_parsebool(http: Http, ns: str, value: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    result = await http.watch(
        _pods(ns), {"watch": value, "allowWatchBookmarks": value}, max_events=1
    )
    assert result.status == 200
    assert result.events[0]["type"] == "ADDED"


@pytest.mark.parametrize("value", ["0", "f", "false", "False"])
async def test_watch_false_is_a_plain_list(http: Http, ns: str, value: str) -> None:
    resp = await http.request("GET", _pods(ns), params={"watch": value})
    assert resp.status == 200
    assert resp.json()["kind"] == "PodList"


# --- event semantics --------------------------------------------------------------------------


async def test_events_arrive_in_increasing_rv_with_shared_counter(http: Http, ns: str) -> None:
    start = await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c0", ns))

    async def interleave() -> None:
        for i in range(3):
            await _post(http, _pods(ns), pod(f"p{i}", ns))
            await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap(f"c{i + 1}", ns))

    result = await http.watch(
        _pods(ns),
        {"watch": "true", "resourceVersion": str(_rv(start))},
        max_events=3,
        after_open=interleave,
    )
    rvs = [_rv(e["object"]) for e in result.events]
    assert rvs == sorted(rvs)
    # configmap writes in between consume revisions: pod revisions are not consecutive
    assert all(b - a >= 2 for a, b in itertools.pairwise(rvs))


async def test_deleted_event_carries_last_state_with_delete_revision(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = await _post(http, path, configmap("c1", ns, data={"k": "v1"}))
    events: list[JsonObj] = []

    async def mutate() -> None:
        patched = await http.request(
            "PATCH",
            f"{path}/c1",
            json_body={"data": {"k": "v2"}},
            content_type="application/merge-patch+json",
        )
        assert patched.status == 200
        assert (await http.request("DELETE", f"{path}/c1")).status == 200

    result = await http.watch(
        path,
        {"watch": "true", "resourceVersion": str(_rv(created))},
        max_events=2,
        after_open=mutate,
    )
    events = result.events
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    deleted = events[1]["object"]
    assert deleted["data"] == {"k": "v2"}  # last state
    assert _rv(deleted) > _rv(events[0]["object"])  # revision of the delete itself
    after = await _post(http, path, configmap("c2", ns))
    assert _rv(after) > _rv(deleted)


async def test_label_selector_transitions_become_added_and_deleted(http: Http, ns: str) -> None:
    start = await _post(http, _pods(ns), pod("p1", ns, labels={"app": "other"}))

    async def relabel(value: str) -> None:
        resp = await http.request(
            "PATCH",
            f"{_pods(ns)}/p1",
            json_body={"metadata": {"labels": {"app": value}}},
            content_type="application/merge-patch+json",
        )
        assert resp.status == 200

    async def transitions() -> None:
        await relabel("web")  # enters the selection → ADDED
        await relabel("web")  # no-op patch may or may not write; either way not an exit
        await http.request(
            "PATCH",
            f"{_pods(ns)}/p1",
            json_body={"metadata": {"annotations": {"x": "1"}}},
            content_type="application/merge-patch+json",
        )  # stays in → MODIFIED
        await relabel("gone")  # leaves → DELETED with the old state
        await relabel("still-gone")  # outside before and after → nothing

    result = await http.watch(
        _pods(ns),
        {"watch": "true", "labelSelector": "app=web", "resourceVersion": str(_rv(start))},
        timeout=0.8,
        after_open=transitions,
    )
    types = [e["type"] for e in result.events]
    assert types[0] == "ADDED"
    assert types[-1] == "DELETED"
    assert set(types[1:-1]) <= {"MODIFIED"} and "MODIFIED" in types
    assert result.events[-1]["object"]["metadata"]["labels"] == {"app": "web"}


async def test_field_selector_transition_on_node_name(http: Http, ns: str) -> None:
    start = await _post(http, _pods(ns), pod("p1", ns))

    async def bind() -> None:
        resp = await http.request(
            "POST",
            f"{_pods(ns)}/p1/binding",
            json_body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
            },
        )
        assert resp.status == 201, resp.body

    result = await http.watch(
        _pods(ns),
        {"watch": "true", "fieldSelector": "spec.nodeName=", "resourceVersion": str(_rv(start))},
        max_events=1,
        after_open=bind,
    )
    assert result.events[0]["type"] == "DELETED"
    assert "nodeName" not in result.events[0]["object"]["spec"]


async def test_bookmark_shape_and_rv(http: Http, ns: str) -> None:
    created = await _post(http, _pods(ns), pod("p1", ns))
    result = await http.watch(
        _pods(ns),
        {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": "0"},
        until=lambda e: e["type"] == "BOOKMARK",
        timeout=3.0,
    )
    bookmark = result.events[-1]
    assert bookmark["type"] == "BOOKMARK"
    obj = bookmark["object"]
    assert (obj["kind"], obj["apiVersion"]) == ("Pod", "v1")
    assert set(obj) == {"kind", "apiVersion", "metadata"}
    assert _rv(obj) >= _rv(created)
    assert all(_rv(obj) >= _rv(e["object"]) for e in result.events[:-1])


async def test_no_bookmarks_unless_asked(http: Http, ns: str) -> None:
    result = await http.watch(_pods(ns), {"watch": "true", "timeoutSeconds": "1"}, timeout=3.0)
    assert [e for e in result.events if e["type"] == "BOOKMARK"] == []


async def test_timeout_seconds_ends_body_cleanly(http: Http, ns: str) -> None:
    started = time.monotonic()
    result = await http.watch(_pods(ns), {"watch": "true", "timeoutSeconds": "1"}, timeout=5.0)
    elapsed = time.monotonic() - started
    assert result.status == 200
    assert result.eof, "server did not end the watch"
    assert 0.8 <= elapsed < 3.5, elapsed


async def test_expired_rv_is_http_200_plus_one_error_event(
    http: Http, server: ServerHandle, ns: str
) -> None:
    old = await _post(http, _pods(ns), pod("p1", ns))
    await _post(http, _pods(ns), pod("p2", ns))
    server.compact()
    result = await http.watch(
        _pods(ns), {"watch": "true", "resourceVersion": str(_rv(old))}, timeout=3.0
    )
    assert result.status == 200
    assert len(result.events) == 1
    assert result.eof, "the watch must close after the ERROR event"
    event = result.events[0]
    assert event["type"] == "ERROR"
    status = event["object"]
    assert {k: v for k, v in status.items() if k != "message"} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    assert TOO_OLD.match(status["message"]), status["message"]


async def test_watch_from_current_rv_survives_compaction(
    http: Http, server: ServerHandle, ns: str
) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    server.compact()
    rv = (await http.request("GET", _pods(ns))).json()["metadata"]["resourceVersion"]

    async def write() -> None:
        await _post(http, _pods(ns), pod("p2", ns))

    result = await http.watch(
        _pods(ns), {"watch": "true", "resourceVersion": rv}, max_events=1, after_open=write
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in result.events] == [
        ("ADDED", "p2")
    ]


# --- kubernetes_asyncio -----------------------------------------------------------------------


async def test_typed_watch_deserialises_pods_and_ends_on_timeout(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    await _post(http, _pods(ns), pod("p1", ns, labels={"a": "b"}))
    seen: list[tuple[str, Any]] = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for event in w.stream(core.list_namespaced_pod, ns, timeout_seconds=1):
            seen.append((event["type"], event["object"]))
    assert [t for t, _ in seen] == ["ADDED"]
    assert isinstance(seen[0][1], k8s.V1Pod)
    assert seen[0][1].metadata.labels == {"a": "b"}


async def test_custom_objects_watch_yields_dicts(
    custom: k8s.CustomObjectsApi, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    async with asyncio.timeout(10), watch.Watch() as w:
        events = [
            e
            async for e in w.stream(
                custom.list_namespaced_custom_object,
                AW_GROUP,
                AW_VERSION,
                ns,
                AW_PLURAL,
                timeout_seconds=1,
            )
        ]
    assert [e["type"] for e in events] == ["ADDED"]
    assert events[0]["object"]["kind"] == "AppWrapper"
    assert w.resource_version == events[0]["object"]["metadata"]["resourceVersion"]


async def test_dynamic_client_watch(dyn: DynamicClient, http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    pods = await dyn.resources.get(api_version="v1", kind="Pod")
    async with asyncio.timeout(10):
        events = [e async for e in dyn.watch(pods, namespace=ns, timeout=1)]
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "p1")]


async def test_watch_forever_retries_410_once_then_raises(
    core: k8s.CoreV1Api, http: Http, server: ServerHandle, ns: str
) -> None:
    old = await _post(http, _pods(ns), pod("p1", ns))
    await _post(http, _pods(ns), pod("p2", ns))
    server.compact()
    with pytest.raises(ApiException) as info:
        async with asyncio.timeout(10), watch.Watch() as w:
            async for _ in w.stream(
                core.list_namespaced_pod, ns, resource_version=old["metadata"]["resourceVersion"]
            ):
                pass
    assert info.value.status == 410
    assert "Expired" in str(info.value.reason)


async def test_bookmarks_advance_the_client_resource_version(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    created = await _post(http, _pods(ns), pod("p1", ns))
    # Writes elsewhere move the global revision; bookmarks may carry it.
    await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    types: list[str] = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for event in w.stream(
            core.list_namespaced_pod,
            ns,
            resource_version=created["metadata"]["resourceVersion"],
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        ):
            types.append(event["type"])
            if event["type"] == "BOOKMARK":
                w.stop()
    assert "BOOKMARK" in types
    assert int(w.resource_version) >= _rv(created)


class Informer:
    """The loop reference §4.1 recommends, written as a controller would: list → watch from the
    list RV with bookmarks → on EOF resume from the last RV → on 410 relist.

    `gate` lets the test hold the informer between an EOF and its reconnect."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self.state: dict[str, str] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.relists = 0
        self.expired = 0
        self.eofs = 0
        self.bookmarks = 0

    async def run(self) -> None:
        while True:
            listed = await self.core.list_namespaced_pod(self.namespace)
            self.relists += 1
            self.state = {p.metadata.name: p.metadata.resource_version for p in listed.items}
            rv = listed.metadata.resource_version
            try:
                while True:
                    async with watch.Watch() as w:
                        async for event in w.stream(
                            self.core.list_namespaced_pod,
                            self.namespace,
                            resource_version=rv,
                            allow_watch_bookmarks=True,
                            timeout_seconds=30,
                        ):
                            self._apply(event)
                        rv = w.resource_version or rv
                    self.eofs += 1
                    await self.gate.wait()
            except ApiException as exc:
                if exc.status != 410:
                    raise
                self.expired += 1

    def _apply(self, event: JsonObj) -> None:
        if event["type"] == "BOOKMARK":
            self.bookmarks += 1
            return
        obj = event["object"]
        if event["type"] == "DELETED":
            self.state.pop(obj.metadata.name, None)
        else:
            self.state[obj.metadata.name] = obj.metadata.resource_version


async def test_watch_loop_recovers_from_compaction_by_relisting(
    core: k8s.CoreV1Api, http: Http, server: ServerHandle, ns: str
) -> None:
    """Acceptance 2: list → watch(bookmarks) → compaction → 410 → relist, nothing missed."""

    async def truth() -> dict[str, str]:
        listed = (await http.request("GET", _pods(ns))).json()
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in listed["items"]}

    informer = Informer(core, ns)
    task = asyncio.create_task(informer.run())
    try:
        for name in ("a0", "a1"):
            await _post(http, _pods(ns), pod(name, ns))

        async def in_sync() -> bool:
            return informer.state == await truth()

        await eventually(in_sync, what="informer to see the first pods")
        await eventually(_async(lambda: informer.bookmarks > 0), what="a bookmark")

        # Hold the informer after the EOF that drop-watches causes, change things while it is
        # disconnected, then compact so that its last RV is too old.
        informer.gate.clear()
        server.drop_watches()
        await eventually(_async(lambda: informer.eofs >= 1), what="EOF after drop-watches")
        await _post(http, _pods(ns), pod("b0", ns))
        resp = await http.request(
            "PATCH",
            f"{_pods(ns)}/a0",
            json_body={"metadata": {"labels": {"v": "2"}}},
            content_type="application/merge-patch+json",
        )
        assert resp.status == 200
        assert (await http.request("DELETE", f"{_pods(ns)}/a1")).status == 200
        server.compact()
        informer.gate.set()

        await eventually(in_sync, what="informer to relist after 410")
        assert informer.expired >= 1
        assert informer.relists >= 2

        # And it keeps watching after the relist.
        await _post(http, _pods(ns), pod("c0", ns))
        assert (await http.request("DELETE", f"{_pods(ns)}/b0")).status == 200
        await eventually(in_sync, what="informer to follow changes after the relist")
        assert set(informer.state) == {"a0", "c0"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def _async(check: Any) -> Any:
    async def wrapped() -> bool:
        return bool(check())

    return wrapped


# --- kubectl get -w ---------------------------------------------------------------------------


async def test_kubectl_get_watch_prints_new_objects(kubectl: Kubectl, http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    async with kubectl.watch("get", "pods", "-n", ns, "-w", "-o", "name") as lines:
        await lines.read_until(lambda line: line == "pod/p1")
        await _post(http, _pods(ns), pod("p2", ns))
        await lines.read_until(lambda line: line == "pod/p2")


async def test_kubectl_watch_events_show_deletion(kubectl: Kubectl, http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    async with kubectl.watch(
        "get", "pods", "-n", ns, "-w", "--output-watch-events", "-o", "json"
    ) as lines:
        await lines.read_json_objects(lambda e: e.get("type") == "ADDED")
        assert (await http.request("DELETE", f"{_pods(ns)}/p1")).status == 200
        event = await lines.read_json_objects(lambda e: e.get("type") == "DELETED")
        assert event["object"]["metadata"]["name"] == "p1"


async def test_custom_resource_bookmark_names_its_kind(http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    await _post(http, path, appwrapper("a1", ns))
    result = await http.watch(
        path,
        {"watch": "true", "allowWatchBookmarks": "true"},
        until=lambda e: e["type"] == "BOOKMARK",
        timeout=3.0,
    )
    assert [e["type"] for e in result.events] == ["ADDED", "BOOKMARK"]
    assert result.events[0]["object"]["kind"] == "AppWrapper"
    bookmark = result.events[1]["object"]
    assert (bookmark["kind"], bookmark["apiVersion"]) == ("AppWrapper", AW_API_VERSION)


async def test_all_namespaces_watch(http: Http, server: ServerHandle, ns: str) -> None:
    start = await _post(http, _pods(ns), pod("p1", ns))
    other = server.make_namespace(f"{ns[:55]}-b")

    async def write() -> None:
        await _post(http, _pods(other), pod("p2", other))

    result = await http.watch(
        "/api/v1/pods",
        {"watch": "true", "resourceVersion": str(_rv(start))},
        until=lambda e: e["object"]["metadata"]["name"] == "p2",
        after_open=write,
    )
    assert result.events[-1]["object"]["metadata"]["namespace"] == other


async def test_custom_objects_watch_from_compacted_rv_raises_410(
    custom: k8s.CustomObjectsApi, http: Http, server: ServerHandle, ns: str
) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    old = await _post(http, path, appwrapper("a1", ns))
    await _post(http, path, appwrapper("a2", ns))
    server.compact()
    with pytest.raises(ApiException) as info:
        async with asyncio.timeout(10), watch.Watch() as w:
            async for _ in w.stream(
                custom.list_namespaced_custom_object,
                AW_GROUP,
                AW_VERSION,
                ns,
                AW_PLURAL,
                resource_version=old["metadata"]["resourceVersion"],
                timeout_seconds=5,
            ):
                pass
    assert info.value.status == 410


async def test_live_watch_survives_compaction(http: Http, server: ServerHandle, ns: str) -> None:
    start = await _post(http, _pods(ns), pod("p1", ns))

    async def compact_then_write() -> None:
        server.compact()
        await _post(http, _pods(ns), pod("p2", ns))

    result = await http.watch(
        _pods(ns),
        {"watch": "true", "resourceVersion": str(_rv(start))},
        max_events=1,
        after_open=compact_then_write,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in result.events] == [
        ("ADDED", "p2")
    ]


async def test_drop_watches_ends_streams_cleanly(http: Http, server: ServerHandle, ns: str) -> None:
    async def drop() -> None:
        await asyncio.sleep(0.2)
        server.drop_watches()

    result = await http.watch(_pods(ns), {"watch": "true"}, timeout=5.0, after_open=drop)
    assert result.status == 200
    assert result.eof
    assert [e for e in result.events if e["type"] == "ERROR"] == []


async def test_http_error_on_watch_reaches_the_client_as_api_exception(
    core: k8s.CoreV1Api, ns: str
) -> None:
    """§4.1: with _preload_content=False the watch reads the error body as a line; a compact
    Status with `code` turns into ApiException."""
    with pytest.raises(ApiException) as info:
        async with asyncio.timeout(10), watch.Watch() as w:
            async for _ in w.stream(
                core.list_namespaced_pod, ns, label_selector="a in (b", timeout_seconds=2
            ):
                pass
    assert info.value.status == 400


async def test_injected_fault_on_watch_reaches_the_client(
    core: k8s.CoreV1Api, server: ServerHandle, ns: str
) -> None:
    server.fail(f"/api/v1/namespaces/{ns}/pods", 503, count=1)
    with pytest.raises(ApiException) as info:
        async with asyncio.timeout(10), watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, ns, timeout_seconds=2):
                pass
    assert info.value.status == 503


async def test_selector_exit_event_has_old_state_but_the_write_revision(
    http: Http, ns: str
) -> None:
    """An object leaving the selection is DELETED with its previous content, stamped with the
    revision of the write that moved it out, so watch RVs keep increasing (§2.4)."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = await _post(http, path, configmap("c1", ns, labels={"app": "web"}))
    write_rv: list[int] = []

    async def move_out() -> None:
        resp = await http.request(
            "PATCH",
            f"{path}/c1",
            json_body={"metadata": {"labels": {"app": "other"}}},
            content_type="application/merge-patch+json",
        )
        write_rv.append(_rv(resp.json()))

    result = await http.watch(
        path,
        {"watch": "true", "labelSelector": "app=web", "resourceVersion": str(_rv(created))},
        max_events=1,
        after_open=move_out,
    )
    [event] = result.events
    assert event["type"] == "DELETED"
    assert event["object"]["metadata"]["labels"] == {"app": "web"}
    assert _rv(event["object"]) == write_rv[0]


async def test_watch_headers_are_sent_before_any_event(http: Http, ns: str) -> None:
    """§2.4: status and headers go out at once, not with the first event (clients block on them)."""
    started = time.monotonic()
    async with http.session.get(
        f"{http.url}{_pods(ns)}", params={"watch": "true", "timeoutSeconds": "5"}
    ) as resp:
        assert resp.status == 200
        assert time.monotonic() - started < 1.0


async def test_concurrent_writes_reach_every_watcher_in_the_same_increasing_order(
    http: Http, ns: str
) -> None:
    """§2.4 "one watch emits events in increasing RV": 5 watchers, 120 concurrent creates."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    start = (await http.request("GET", path)).json()["metadata"]["resourceVersion"]
    count = 120

    async def burst() -> None:
        await asyncio.sleep(0.2)  # let every watcher connect
        results = await asyncio.gather(
            *(http.request("POST", path, json_body=configmap(f"c{i}", ns)) for i in range(count))
        )
        assert all(r.status == 201 for r in results)

    writer = asyncio.create_task(burst())
    watches = await asyncio.gather(
        *(
            http.watch(
                path, {"watch": "true", "resourceVersion": start}, max_events=count, timeout=15
            )
            for _ in range(5)
        )
    )
    await writer
    sequences = [[_rv(e["object"]) for e in w.events] for w in watches]
    assert all(len(s) == count for s in sequences), [len(s) for s in sequences]
    assert all(s == sorted(s) and len(set(s)) == count for s in sequences)
    assert all(s == sequences[0] for s in sequences)


async def test_kubectl_get_watch_table_output(kubectl: Kubectl, http: Http, ns: str) -> None:
    """Default `kubectl get -w` asks for server-side Tables on the watch as well."""
    await _post(http, _pods(ns), pod("p1", ns))
    async with kubectl.watch("get", "pods", "-n", ns, "-w") as lines:
        await lines.read_until(lambda line: line.split()[:1] == ["NAME"])
        await lines.read_until(lambda line: line.split()[:1] == ["p1"])
        await _post(http, _pods(ns), pod("p2", ns))
        row = await lines.read_until(lambda line: line.split()[:1] == ["p2"])
        assert "Pending" in row
