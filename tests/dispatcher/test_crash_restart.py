"""Acceptance 6: ``kill -9`` of the dispatcher at each step of the cycle, then a restart: the
cycle continues and nothing is dispatched twice.

The dispatcher SIGKILLs itself at a named step (``CLEARANCE_TEST_CRASH_AT``, fault injection
for tests), so every step is hit exactly instead of by a timing guess; each restart runs with
the next crash point, so one AppWrapper walks through the whole cycle crashing at every step.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from tests.support.dispatcher_env import job_appwrapper

STEPS = (
    "dispatch.started",
    "dispatch.created",
    "dispatch.published",
    "requeue.decided",
    "teardown.deleted",
    "teardown.published",
    "cleared.recorded",
    "dispatch.started",  # attempt 2: the redispatch after cleared
    "dispatch.published",  # redispatched published, Dispatched not yet written
)


async def _wait_exit(proc: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while proc.running and time.monotonic() < deadline:  # noqa: ASYNC110 - polling a process
        await asyncio.sleep(0.05)
    assert not proc.running, f"dispatcher did not crash\n{proc.output()}"
    assert proc.process.returncode == -9, proc.process.returncode


async def test_kill_at_every_step_then_restart_continues_without_double_dispatch(
    make_env: Any,
) -> None:
    env = await make_env()
    requeuing = {"timeInSeconds": 1, "growthType": "none"}
    await env.create_aw(
        job_appwrapper(
            "crashy",
            env.namespace,
            unschedulable=True,
            min_available=1,
            requeuing=requeuing,
            completion=False,
        )
    )
    for step in STEPS:
        proc = await env.start_dispatcher(
            name=f"dispatcher-{len(env.processes)}",
            wait=False,
            CLEARANCE_TEST_CRASH_AT=step,
            CLEARANCE_LEASE_DURATION="1s",
            CLEARANCE_LEASE_RETRY_PERIOD="200ms",
        )
        await _wait_exit(proc)
        assert f"point={step}" in proc.output(tail=400), proc.output()
    await env.start_dispatcher(
        name="dispatcher-final", CLEARANCE_LEASE_DURATION="1s", CLEARANCE_LEASE_RETRY_PERIOD="200ms"
    )
    await env.wait_event("cycle.dispatched", "crashy", count=3, timeout=30)
    await env.wait_aw(
        "crashy", lambda aw: aw["status"]["clearance"]["attempt"] >= 3, what="attempt 3"
    )
    attempts = Counter(e.attempt for e in env.cycle_events("cycle.dispatched", "crashy"))
    assert all(n == 1 for n in attempts.values()), attempts
    jobs = Counter(
        env.objects.attempts.get(e["uid"], ("?", 0))[1]
        for e in await env.history(namespace=env.namespace, name="crashy-job")
        if e["type"] == "ADDED"
    )
    assert all(n == 1 for n in jobs.values()), jobs  # one Job per attempt, never two
    assert {1, 2, 3} <= set(jobs)
    requeues = [e.attempt for e in env.cycle_events("cycle.requeued", "crashy")]
    assert requeues[:2] == [1, 2]
    await env.assert_safety()
