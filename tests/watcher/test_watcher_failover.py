"""Acceptance 4: two replicas, one Lease; the standby takes over within the lease duration."""

from __future__ import annotations

import asyncio
import time

from nats.js import JetStreamContext
from watcher_support import (
    Churn,
    KubeSim,
    metric,
    pod,
    pod_history,
    pods_path,
    published_by_uid,
    wait_stream,
)

LEASE = 2.0  # CLEARANCE_LEASE_DURATION in the test env


async def test_standby_is_ready_but_does_not_publish(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    kubesim.namespace("team-a")
    leader = start_watcher(identity="watcher-a")
    standby = start_watcher(identity="watcher-b")
    assert metric(leader, "clearance_watcher_leader") == 1
    assert metric(standby, "clearance_watcher_leader") == 0
    assert metric(standby, "clearance_watcher_informers") == 0
    status, body = standby.http_get("/readyz")
    assert status == 200, body


async def test_standby_takes_over_after_leader_kill_9_and_nothing_is_lost(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    leader = start_watcher(identity="watcher-a")
    standby = start_watcher(identity="watcher-b")
    with Churn(kubesim, ns):
        await asyncio.sleep(1.0)
        leader.kill()
        killed_at = time.monotonic()
        probe = kubesim.create(pods_path(ns), pod("after-kill"))
        await wait_stream(
            js,
            lambda ps: any(p.uid == probe["metadata"]["uid"] for p in ps),
            timeout=LEASE + 10,
            what="the standby to publish",
        )
        took = time.monotonic() - killed_at
        await asyncio.sleep(0.5)
    # Within the lease duration plus one retry period and the standby's start-up work.
    assert took < LEASE + 2.0, f"standby took {took:.1f}s"
    assert metric(standby, "clearance_watcher_leader") == 1
    expected = pod_history(kubesim, ns)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps, "pod") == expected, what="every pod change"
    )
    assert not any(p.event.inferred for p in published)


async def test_sigterm_hands_the_lease_over_at_once(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    leader = start_watcher(identity="watcher-a", CLEARANCE_LEASE_DURATION="30s")
    standby = start_watcher(identity="watcher-b", CLEARANCE_LEASE_DURATION="30s")
    assert leader.terminate() == 0, leader.output()
    probe = kubesim.create(pods_path(ns), pod("after-handover"))
    await wait_stream(
        js,
        lambda ps: any(p.uid == probe["metadata"]["uid"] for p in ps),
        timeout=10,  # far below the 30 s lease: the Lease was released, not left to expire
        what="the standby to publish",
    )
    assert metric(standby, "clearance_watcher_leader") == 1
