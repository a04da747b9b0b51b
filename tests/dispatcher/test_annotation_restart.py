"""Bookkeeping in the annotation survives a crash between its two writes (issue 17 Build 1).

The annotation patch is a transition's commit point; the ``/status`` write follows. A dispatcher
SIGKILLed right between them (crash point ``committed.TearingDown``) leaves the MCAD status one
step behind — ``numberOfRequeueings`` still 0 — while the annotation says the teardown is decided
and counted. The next dispatcher must decide from the annotation, not from the lagging status:
it finishes the teardown, redispatches once, repairs the status and, with ``maxNumRequeuings: 1``,
fails attempt 2 instead of requeueing it (a decision read from the stale count would requeue
again and create an attempt 3).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.support.dispatcher_env import job_appwrapper

BOOKKEEPING = "clearance.dev/bookkeeping"


async def _crash_between_commit_and_status(env: Any, **after: str) -> dict[str, Any]:
    """Crash at ``committed.TearingDown``, restart; the AppWrapper once attempt 2 is decided."""
    requeuing = {"timeInSeconds": 1, "growthType": "none", "maxNumRequeuings": 1}
    await env.create_aw(
        job_appwrapper(
            "committed",
            env.namespace,
            unschedulable=True,
            min_available=1,
            requeuing=requeuing,
            completion=False,
        )
    )
    common = {
        "CLEARANCE_BOOKKEEPING": "annotations",
        "CLEARANCE_LEASE_DURATION": "1s",
        "CLEARANCE_LEASE_RETRY_PERIOD": "200ms",
    }
    crashing = await env.start_dispatcher(
        name="crashing", wait=False, CLEARANCE_TEST_CRASH_AT="committed.TearingDown", **common
    )
    deadline = time.monotonic() + 30
    while crashing.running and time.monotonic() < deadline:  # noqa: ASYNC110 - a process
        await asyncio.sleep(0.05)
    assert crashing.process.returncode == -9, crashing.output()

    aw = await env.get_aw("committed")
    document = json.loads(aw["metadata"]["annotations"][BOOKKEEPING])
    assert document["clearance"]["phase"] == "TearingDown"
    assert document["status"]["numberOfRequeueings"] == 1
    assert aw["status"].get("numberOfRequeueings", 0) == 0  # the /status write never happened
    assert "clearance" not in aw["status"]

    await env.start_dispatcher(name="after", **common, **after)
    await env.wait_event("cycle.dispatched", "committed", count=2, timeout=30)
    await asyncio.sleep(3)  # attempt 2's wait (1 s) passes: failed, or requeued by a stale count
    return dict(await env.get_aw("committed"))


async def test_a_crash_between_the_commit_and_the_status_write_loses_no_requeue_count(
    make_env: Any,
) -> None:
    env = await make_env()
    final = await _crash_between_commit_and_status(env)
    assert final["status"]["state"] == "Failed", final["status"]
    assert final["status"]["numberOfRequeueings"] == 1  # repaired from the committed mirror
    dispatched = sorted(e.attempt for e in env.cycle_events("cycle.dispatched", "committed"))
    assert dispatched == [1, 2], dispatched
    requeued = [e.attempt for e in env.cycle_events("cycle.requeued", "committed")]
    assert requeued == [1], requeued
    await env.assert_safety()


async def test_deciding_from_the_lagging_status_requeues_past_the_limit(make_env: Any) -> None:
    """The checks above catch a dispatcher that trusts ``/status`` after such a crash."""
    env = await make_env()
    await _crash_between_commit_and_status(env, CLEARANCE_TEST_FAULT="lagging-status")
    requeued = [e.attempt for e in env.cycle_events("cycle.requeued", "committed")]
    assert requeued[:2] == [1, 2], requeued
