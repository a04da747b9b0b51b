"""Acceptance 2 and 3: 410 with deletions in the gap, dropped watches, kill -9 mid-stream."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext
from watcher_support import (
    Churn,
    KubeSim,
    appwrapper,
    aws_path,
    job,
    jobs_path,
    metric,
    node,
    nodes_path,
    pod,
    pod_history,
    pods_path,
    published_by_uid,
    wait_stream,
)


async def test_deletions_inside_a_compacted_gap_become_tombstones(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    aw = kubesim.create(aws_path(ns), appwrapper("aw-1", job("job-1")))
    await wait_stream(js, lambda ps: any(p.uid == aw["metadata"]["uid"] for p in ps))
    doomed = [
        kubesim.create(pods_path(ns), pod("p-1")),
        kubesim.create(pods_path(ns), pod("p-2")),
        kubesim.create(jobs_path(ns), job("job-1")),
        kubesim.create(nodes_path(), node("n-1")),
    ]
    survivor = kubesim.create(pods_path(ns), pod("p-3"))
    uids = {o["metadata"]["uid"] for o in [*doomed, survivor]}
    await wait_stream(js, lambda ps: uids <= {p.uid for p in ps}, what="the objects")

    # A gap: the API refuses pod/node/job watches and lists, the open watches drop.
    refuse = {"path": "^/api/v1/(pods|nodes)|^/apis/batch/", "code": 503, "method": "GET"}
    kubesim.ok("POST", "/kubesim/v1/fail", refuse)
    kubesim.drop_watches()
    for o in doomed:
        kind = o["kind"]
        name = o["metadata"]["name"]
        paths = {"Pod": pods_path, "Job": jobs_path}
        path = nodes_path(name) if kind == "Node" else paths[kind](ns, name)
        kubesim.delete(path)
    await asyncio.sleep(0.5)
    kubesim.compact()  # the deletions are no longer in the history: resuming answers 410
    kubesim.ok("DELETE", "/kubesim/v1/fail")

    doomed_uids = {o["metadata"]["uid"]: o for o in doomed}
    published = await wait_stream(
        js,
        lambda ps: {p.uid for p in ps if p.action == "DELETED"} >= set(doomed_uids),
        what="a tombstone per vanished object",
    )
    tombstones = [p for p in published if p.action == "DELETED"]
    assert sorted(p.uid for p in tombstones) == sorted(doomed_uids)
    for p in tombstones:
        assert p.event.inferred
        # The last known state: the rv the object had when it was last published.
        assert p.rv == doomed_uids[p.uid]["metadata"]["resourceVersion"]
    assert all(p.action != "DELETED" for p in published if p.uid == survivor["metadata"]["uid"])
    assert metric(watcher, "clearance_watcher_tombstones_total") == len(doomed)
    assert metric(watcher, "clearance_watcher_relists_total") > 4


async def test_dropped_watches_resume_without_duplicate_or_missing_event(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    with Churn(kubesim, ns):
        for _ in range(5):
            await asyncio.sleep(0.3)
            kubesim.drop_watches()
        await asyncio.sleep(0.3)
    expected = pod_history(kubesim, ns)
    assert len(expected) > 10
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps, "pod") == expected, what="every pod change"
    )
    assert not any(p.event.inferred for p in published)
    assert metric(watcher, "clearance_watcher_watch_restarts_total") >= 5
    # Resumed exactly where it stopped: nothing was published twice (not even deduped).
    assert metric(watcher, "clearance_events_duplicate_total") == 0
    assert metric(watcher, "clearance_watcher_relists_total") == 3  # the initial ones only


async def test_kill_9_mid_stream_then_restart_loses_nothing(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    with Churn(kubesim, ns):
        await asyncio.sleep(1.0)
        watcher.kill()
        await asyncio.sleep(0.5)  # changes while no watcher runs
        restarted = start_watcher()
        await asyncio.sleep(1.0)
    expected = pod_history(kubesim, ns)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps, "pod") == expected, what="every pod change"
    )
    assert not any(p.event.inferred for p in published)
    assert metric(restarted, "clearance_watcher_resumes_total") >= 1


async def test_nats_outage_holds_events_back_and_loses_none(
    kubesim: KubeSim, js: JetStreamContext, start_watcher, nats_private
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher(CLEARANCE_MAX_IN_FLIGHT="8", CLEARANCE_PUBLISH_TIMEOUT="500ms")
    with Churn(kubesim, ns):
        await asyncio.sleep(0.5)
        nats_private.kill()  # the store survives: a crash, not a wipe
        await asyncio.sleep(1.5)  # changes keep coming; at most 8 wait for NATS
        status, _ = watcher.http_get("/readyz")
        assert status == 503  # NATS is not connected
        nats_private.start()
        await asyncio.sleep(0.5)
    expected = pod_history(kubesim, ns)
    published = await wait_stream(
        js,
        lambda ps: published_by_uid(ps, "pod") == expected,
        timeout=30,
        what="every pod change after the outage",
    )
    assert not any(p.event.inferred for p in published)
    assert metric(watcher, "clearance_watcher_in_flight") == 0
