"""Issue 13 Build 6: every service exits within its grace (CLEARANCE_SHUTDOWN_GRACE, ≤ 5 s) on
SIGTERM when NATS and the Kubernetes API are already gone. The grace is set to 1 s here, so a
service that merely happens to stop in a few seconds (the old, unbounded shutdown) is caught."""

from __future__ import annotations

import asyncio
import time
from typing import Any

GRACE = 1.0
SLACK = 0.7
"""Interpreter teardown after the watchdog fires (and the SIGTERM round trip)."""


async def test_each_service_exits_within_its_grace_with_nats_and_the_api_gone(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher(CLEARANCE_SHUTDOWN_GRACE=f"{GRACE}s")
    names = {p.name for p in env.processes}
    assert names >= {"clearance-tracker", "clearance-watcher", "clearance-dispatcher"}, names
    for process in env.processes:
        if process.name != "clearance-dispatcher":  # started by make_env: restart with the grace
            process.env["CLEARANCE_SHUTDOWN_GRACE"] = f"{GRACE}s"
            process.restart()
            await asyncio.to_thread(process.wait_ready, timeout=30)
    await env.nc.close()
    env.nats_server.stop()
    await env.cluster.stop()
    await asyncio.sleep(0.5)  # let every service notice
    took: dict[str, float] = {}

    def terminate_all() -> None:
        for process in env.processes:
            started = time.monotonic()
            process.terminate(timeout=GRACE + 10)
            took[process.name] = time.monotonic() - started

    await asyncio.to_thread(terminate_all)
    assert all(t <= GRACE + SLACK for t in took.values()), took
