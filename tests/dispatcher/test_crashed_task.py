"""A leader whose background task crashed exits (code 1) so a fresh replica leads; it does not
hold the lease while its cycles stall (the work-queue workers died this way once, on uvloop's
timer handles, and the dispatcher stayed up and healthy doing nothing)."""

from __future__ import annotations

from typing import Any

from tests.support.dispatcher_env import job_appwrapper
from tests.support.polling import eventually


async def test_a_leader_whose_workers_crash_exits_with_code_1(make_env: Any) -> None:
    env = await make_env()
    proc = await env.start_dispatcher(CLEARANCE_TEST_FAULT="worker-crash")
    await env.create_aw(job_appwrapper("first", env.namespace))
    await eventually(lambda: not proc.running, timeout=20)
    assert proc.process.returncode == 1
    log = proc.output(tail=400)
    assert "background task crashed" in log
    assert "a background task crashed; exiting so a fresh replica leads" in log
