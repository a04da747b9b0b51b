"""What the tracker says while NATS is away: a deferral, in WARNING lines, never a traceback."""

from __future__ import annotations

import asyncio
import os
import signal

from tracker_support import Stack, eventually

from clearance.events import TeardownPolicy
from support.processes import log_records

SLOW = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)


async def test_a_nats_outage_is_logged_as_deferrals_without_tracebacks(stack: Stack) -> None:
    tracker = await stack.start_tracker()
    pod = await stack.create_pod("quiet-w-0", aw="quiet", finalizers=("example.com/hold",))
    await stack.delete_pod("quiet-w-0", grace=0)
    started = await stack.start_teardown("quiet", inventory=[pod], policy=SLOW)
    await eventually(lambda: stack.record(started), timeout=10)

    pid = stack.nats.pid
    assert pid is not None
    # Longer than the owner timeout: the term lapses, and the scans' writes are refused
    # until the next heartbeat (the old code logged each at ERROR with a traceback).
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(4.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    await stack.strip_finalizers("quiet-w-0")

    async def cleared() -> bool:
        record = await stack.record(started)
        return record is not None and record.cleared

    await eventually(cleared, timeout=20)
    lines = log_records(tracker)
    deferred = [x for x in lines if "deferred:" in x["msg"]]
    assert deferred, "no deferral was said"
    assert {x["level"] for x in deferred} == {"WARNING"}
    assert not [x for x in lines if x["level"] == "ERROR" or "exc" in x]
