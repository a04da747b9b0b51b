"""Reference §2.4 with server limits close to real ones: the one-minute bookmark interval (a
watch that asked for bookmarks still gets one ~2 s before its `timeoutSeconds` deadline, so a
client can resume) and a bounded history ring (falling out of it means 410, no compaction)."""

from __future__ import annotations

from fidelity_support import Http, configmap, pod

SERVER_OPTIONS = {"bookmark_interval": 60.0, "history_limit": 20}


async def test_bookmark_is_sent_before_the_watch_deadline(http: Http, ns: str) -> None:
    created = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=pod("p1", ns))
    assert created.status == 201
    result = await http.watch(
        f"/api/v1/namespaces/{ns}/pods",
        {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "3"},
        timeout=6.0,
    )
    assert result.eof
    types = [e["type"] for e in result.events]
    assert types[0] == "ADDED"
    assert "BOOKMARK" in types, types
    bookmark = next(e for e in result.events if e["type"] == "BOOKMARK")
    rv = int(bookmark["object"]["metadata"]["resourceVersion"])
    assert rv >= int(created.json()["metadata"]["resourceVersion"])


async def test_rv_older_than_the_history_ring_is_expired(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    first = await http.request("POST", path, json_body=configmap("c0", ns))
    for i in range(1, 30):
        assert (await http.request("POST", path, json_body=configmap(f"c{i}", ns))).status == 201
    rv = first.json()["metadata"]["resourceVersion"]
    result = await http.watch(path, {"watch": "true", "resourceVersion": rv}, timeout=3.0)
    assert result.status == 200
    assert [e["type"] for e in result.events] == ["ERROR"]
    assert result.events[0]["object"]["code"] == 410
    assert result.events[0]["object"]["reason"] == "Expired"


async def test_recent_rv_within_the_history_ring_replays(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    for i in range(30):
        assert (await http.request("POST", path, json_body=configmap(f"c{i}", ns))).status == 201
    listed = (await http.request("GET", path)).json()
    rvs = sorted(int(i["metadata"]["resourceVersion"]) for i in listed["items"])
    rv = str(rvs[-5])  # four newer writes remain to replay
    result = await http.watch(
        path, {"watch": "true", "resourceVersion": rv}, max_events=4, timeout=3.0
    )
    assert [int(e["object"]["metadata"]["resourceVersion"]) for e in result.events] == rvs[-4:]
    assert all(e["type"] == "ADDED" for e in result.events)
