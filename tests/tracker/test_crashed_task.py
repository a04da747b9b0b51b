"""A tracker whose background task crashed exits (code 1) so that it is restarted; it does not
stay up and answer /healthz while its heartbeat, scan, KV watch or a consumer loop is dead
(the dispatcher's rule, now one rule for every service: ``clearance.tasks.CrashWatch``)."""

from __future__ import annotations

from tracker_support import Stack, eventually

from support.processes import log_records


async def test_a_tracker_whose_heartbeat_loop_crashes_exits_with_code_1(stack: Stack) -> None:
    # Started without waiting for readiness: the fault may end the loop before it.
    proc = stack.tracker("tracker-0", CLEARANCE_TEST_FAULT="heartbeat-crash").start()
    await eventually(lambda: not proc.running, timeout=20)
    assert proc.process is not None
    assert proc.process.returncode == 1, proc.output()
    lines = log_records(proc)
    crashed = [x for x in lines if x["msg"] == "background task crashed"]
    assert [x.get("task") for x in crashed] == ["tracker:heartbeat"], proc.output()
    assert any(
        x["msg"] == "a background task crashed; exiting so the replica restarts" for x in lines
    ), proc.output()
