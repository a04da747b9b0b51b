"""Acceptance 7: two replicas, one Lease; kill -9 of the leader, the standby takes over."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.support.dispatcher_env import job_appwrapper, state_is


async def _is_leader(proc: Any) -> bool:
    status, body = await asyncio.to_thread(proc.http_get, "/metrics")
    return status == 200 and "clearance_dispatcher_leader 1.0" in body


async def _leader_of(procs: list[Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leaders = [p for p in procs if p.running and await _is_leader(p)]
        if len(leaders) == 1:
            return leaders[0]
        assert len(leaders) <= 1, "two leaders at once"
        await asyncio.sleep(0.1)
    raise AssertionError("no leader elected")


async def test_standby_takes_over_after_the_leader_is_killed(make_env: Any) -> None:
    env = await make_env(pod_run_time=1.5)
    a = await env.start_dispatcher(name="replica-a")
    b = await env.start_dispatcher(name="replica-b")
    leader = await _leader_of([a, b])
    standby = b if leader is a else a
    await env.create_aw(job_appwrapper("before", env.namespace))
    await env.wait_aw("before", state_is("Completed"), what="completed under the first leader")
    assert not await _is_leader(standby)

    leader.kill()  # kill -9: the Lease is not released, the standby waits for it to expire
    killed_at = time.monotonic()
    await env.create_aw(job_appwrapper("after", env.namespace))
    await env.wait_aw("after", state_is("Completed"), timeout=20, what="completed by the standby")
    assert await _leader_of([standby]) is standby
    took = time.monotonic() - killed_at
    assert took < 3 + 1 + 6, took  # lease duration + retry + the Job's run time, with slack
    assert len(env.cycle_events("cycle.dispatched", "before")) == 1  # not dispatched again
    assert len(env.cycle_events("cycle.dispatched", "after")) == 1
