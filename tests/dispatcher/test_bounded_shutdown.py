"""Issue 13 Build 6: every service exits within its grace (CLEARANCE_SHUTDOWN_GRACE, ≤ 5 s) on
SIGTERM when NATS and the Kubernetes API are already gone."""

from __future__ import annotations

import asyncio
import time
from typing import Any

GRACE = 5.0


async def test_each_service_exits_within_its_grace_with_nats_and_the_api_gone(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()
    names = {p.name for p in env.processes}
    assert names >= {"clearance-tracker", "clearance-watcher", "clearance-dispatcher"}, names
    await env.nc.close()
    env.nats_server.stop()
    await env.cluster.stop()
    await asyncio.sleep(0.5)  # let every service notice
    took: dict[str, float] = {}

    def terminate_all() -> None:
        for process in env.processes:
            started = time.monotonic()
            process.terminate(timeout=GRACE + 5)
            took[process.name] = time.monotonic() - started

    await asyncio.to_thread(terminate_all)
    assert all(t <= GRACE + 0.5 for t in took.values()), took  # + process teardown
