"""A watcher whose leader-election campaign crashed exits (code 1) so that it is restarted; it
does not publish on without a campaign keeping its Lease (``clearance.tasks.CrashWatch``)."""

from __future__ import annotations

from tests.support.polling import eventually
from tests.support.processes import log_records
from watcher_support import KubeSim


async def test_a_watcher_whose_campaign_crashes_exits_with_code_1(
    kubesim: KubeSim, start_watcher
) -> None:
    watcher = start_watcher(CLEARANCE_TEST_FAULT="campaign-crash")  # ready: it leads
    await eventually(lambda: not watcher.running, timeout=20)
    assert watcher.process is not None
    assert watcher.process.returncode == 1, watcher.output()
    lines = log_records(watcher)
    crashed = [x for x in lines if x["msg"] == "background task crashed"]
    assert [x.get("task") for x in crashed] == ["leader-election"], watcher.output()
    failed = [x for x in lines if x["msg"] == "watcher failed"]
    assert failed and "TaskCrashed" in failed[0]["error"], watcher.output()
