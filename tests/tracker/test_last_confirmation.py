"""The last confirmation and `clearing` go out in one KV write (issue 16: one NATS round trip
fewer between the last removal and `cleared`), judged from the bucket's own history."""

from __future__ import annotations

from tracker_support import Stack, StandInWatcher, eventually

from clearance.events import CycleCleared, CycleTeardownStarted, TeardownPolicy
from clearance_tracker.teardown import decode_record, record_key


async def _verified_once(stack: Stack, started: CycleTeardownStarted) -> bool:
    """The tracker's first verification (at `teardown.started`) is over: the pod deleted
    from now on is confirmed by its DELETED event."""
    record = await stack.record(started)
    return record is not None and record.last_verified_at is not None


SLOW = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)


async def test_the_last_deleted_event_is_written_with_the_clearing_it_makes_due(
    stack: Stack,
) -> None:
    await stack.start_tracker(CLEARANCE_VERIFY_INTERVAL="60s")
    watcher = await StandInWatcher(stack.kube, stack.js).start()
    try:
        pod = await stack.create_pod("last-0", aw="last", grace=0)
        await stack.wait_pod_running("last-0")
        started = await stack.start_teardown("last", inventory=[pod], policy=SLOW)
        await eventually(lambda: _verified_once(stack, started), timeout=10)
        await stack.delete_pod("last-0", grace=0)
        cleared = await stack.cleared("last", timeout=15)
        assert isinstance(cleared.event, CycleCleared)
    finally:
        await watcher.stop()

    kv = await stack.js.key_value("clearance-teardowns")
    key = record_key(started.appwrapper.uid, started.attempt)
    revisions = [decode_record(e.value) for e in await kv.history(key) if e.value]
    assert revisions[0].objects and not revisions[0].all_confirmed  # the history starts here
    confirmed = [r for r in revisions if r.all_confirmed]
    assert confirmed, "no revision confirms the pod"
    how = {o.confirmed_how for r in confirmed for o in r.objects.values()}
    assert how == {"watch_deleted"}, how  # confirmed by its DELETED, not by a later read
    assert all(r.clearing is not None for r in confirmed), [
        (r.all_confirmed, r.clearing) for r in revisions
    ]
