"""Acceptance 2 and 3: stuck pods on a lost node and behind a finalizer (tracker subprocess)."""

from __future__ import annotations

import asyncio

import msgspec
from tracker_support import NAMESPACE, Stack, eventually

from clearance import bus
from clearance.events import (
    AlertDeletionStuck,
    CycleCleared,
    CycleDeletionForced,
    CycleFinalizersRemoved,
    Finalizers,
    NodeNotReady,
    NodeUnreachable,
    TeardownPolicy,
    encode,
)

FAST = TeardownPolicy(stuck_alert_seconds=1, force_deletion_seconds=2, pause_seconds=0)


async def test_pod_on_lost_node_alerts_then_is_force_deleted_then_cleared(stack: Stack) -> None:
    tracker = await stack.start_tracker()
    healthy = await stack.create_pod("lost-w-0", aw="lost", node="node-2")
    stuck = await stack.create_pod("lost-w-1", aw="lost", node="node-1")
    await stack.wait_pod_running("lost-w-1")
    stack.cluster.lose_node("node-1")
    await stack.delete_pod("lost-w-0")
    await stack.delete_pod("lost-w-1")
    started = await stack.start_teardown("lost", inventory=[healthy, stuck], policy=FAST)

    cleared = await stack.cleared("lost", timeout=15)
    alerts = stack.recorder.of("alert.deletion.stuck", aw="lost")
    forced = stack.recorder.of("cycle.deletion.forced", aw="lost")
    assert len(alerts) == 1 and len(forced) == 1
    assert alerts[0].subject == "clearance.alert.v1.warning.team-a.lost.deletion.stuck"
    alert = alerts[0].event
    assert isinstance(alert, AlertDeletionStuck) and alert.step == "stuck_alert"
    assert [s.object.name for s in alert.stuck] == ["lost-w-1"]
    reasons = alert.stuck[0].reasons
    assert any(isinstance(r, NodeNotReady | NodeUnreachable) for r in reasons), reasons
    assert alert.stuck[0].node == "node-1"
    assert stack.recorder.of("alert.node.lost", aw="lost")
    force = forced[0].event
    assert isinstance(force, CycleDeletionForced)
    assert [o.name for o in force.objects] == ["lost-w-1"]
    # at the deadlines, counted from teardownStartedAt, and cleared only after the removal
    assert (alert.occurred_at - started.occurred_at).total_seconds() >= 1
    assert (force.occurred_at - started.occurred_at).total_seconds() >= 2
    event = cleared.event
    assert isinstance(event, CycleCleared)
    assert event.cleared_at >= force.occurred_at
    assert stack.recorder.items.index(cleared) > stack.recorder.items.index(forced[0])
    assert {o.name for o in event.confirmed} == {"lost-w-0", "lost-w-1"}
    assert await stack.pod("lost-w-1") is None
    _, metrics = tracker.http_get("/metrics")
    for line in (
        'clearance_escalations_total{step="stuck_alert"} 1.0',
        'clearance_escalations_total{step="force_deletion"} 1.0',
        "clearance_cleared_total 1.0",
        "clearance_tracker_teardowns_started_total 1.0",
    ):
        assert line in metrics, line
    assert "clearance_teardown_duration_seconds_bucket" in metrics


async def test_finalizer_with_never_alerts_once_per_step_and_never_clears(stack: Stack) -> None:
    await stack.start_tracker()
    pod = await stack.create_pod("fin-w-0", aw="fin", finalizers=("example.com/hold",), grace=1)
    await stack.wait_pod_running("fin-w-0")
    await stack.delete_pod("fin-w-0")
    await stack.start_teardown("fin", inventory=[pod], policy=FAST)

    await asyncio.sleep(20)  # 10x the force deadline
    assert not stack.recorder.of("cycle.cleared", aw="fin")
    alerts = stack.recorder.of("alert.deletion.stuck", aw="fin")
    steps = sorted(a.event.step for a in alerts)  # type: ignore[union-attr]
    assert steps == ["force_deletion", "stuck_alert"], steps
    for alert in alerts:
        assert isinstance(alert.event, AlertDeletionStuck)
        assert Finalizers(finalizers=("example.com/hold",)) in alert.event.stuck[0].reasons
        assert "example.com/hold" in alert.event.summary
    assert len(stack.recorder.of("cycle.deletion.forced", aw="fin")) == 1
    assert len(stack.recorder.of("alert.deletion.forced", aw="fin")) == 1
    assert not stack.recorder.of("cycle.finalizers.removed", aw="fin")
    assert await stack.pod("fin-w-0") is not None
    # one Warning Event per step on the AppWrapper, none repeated
    events = await stack.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")
    reasons = [
        e["reason"]
        for e in __import__("json").loads(events)["items"]
        if e["involvedObject"].get("kind") == "AppWrapper"
    ]
    assert sorted(reasons) == ["DeletionForced", "DeletionStuck"]
    # no repeated force deletes: one escalate span per step
    escalations = [s.attributes["clearance.step"] for s in stack.otlp.named("deletion.escalate")]
    assert sorted(escalations) == ["force_deletion", "stuck_alert"]


async def test_finalizer_with_after_force_deletion_is_stripped_then_cleared(stack: Stack) -> None:
    await stack.start_tracker()
    pod = await stack.create_pod("strip-w-0", aw="strip", finalizers=("example.com/hold",), grace=1)
    await stack.wait_pod_running("strip-w-0")
    await stack.delete_pod("strip-w-0")
    policy = TeardownPolicy(
        stuck_alert_seconds=1,
        force_deletion_seconds=2,
        finalizer_removal="AfterForceDeletion",
        pause_seconds=0,
    )
    await stack.start_teardown("strip", inventory=[pod], policy=policy)

    cleared = await stack.cleared("strip", timeout=15)
    removed = stack.recorder.of("cycle.finalizers.removed", aw="strip")
    assert len(removed) == 1
    event = removed[0].event
    assert isinstance(event, CycleFinalizersRemoved)
    assert event.removed[0].finalizers == ("example.com/hold",)
    assert event.removed[0].object.name == "strip-w-0"
    assert stack.recorder.items.index(cleared) > stack.recorder.items.index(removed[0])
    assert await stack.pod("strip-w-0") is None
    await eventually(lambda: stack.otlp.named("cleared", aw="strip"), timeout=5)


async def test_operator_defaults_apply_when_the_event_carries_no_policy(stack: Stack) -> None:
    await stack.start_tracker(CLEARANCE_STUCK_ALERT_TIME="1s", CLEARANCE_FORCE_DELETION_TIME="0")
    pod = await stack.create_pod("dflt-w-0", aw="dflt", finalizers=("example.com/hold",))
    await stack.delete_pod("dflt-w-0", grace=0)
    event = await stack.start_teardown("dflt", inventory=[pod], aw_uid="dflt-uid", attempt=1)
    # Republish the same teardown without a `policy` field under another attempt.
    raw = msgspec.json.decode(encode(event))
    raw.pop("policy")
    raw["attempt"] = 2
    await bus.publish(
        stack.js, event.subject(), msgspec.json.encode(raw), msg_id="dflt-uid:2:no-policy"
    )
    alerts = await eventually(
        lambda: [
            a for a in stack.recorder.of("alert.deletion.stuck", aw="dflt") if a.event.attempt == 2
        ],  # type: ignore[union-attr]
        timeout=10,
    )
    assert alerts[0].event.step == "stuck_alert"  # type: ignore[union-attr]
    await asyncio.sleep(1.5)
    assert not stack.recorder.of("cycle.deletion.forced", aw="dflt")  # force disabled by env


async def test_an_int64_max_deadline_neither_stalls_the_teardown_nor_alerts(stack: Stack) -> None:
    # issue 13: 2**63-1 s made timedelta overflow; teardown.started was redelivered forever.
    await stack.start_tracker()
    pod = await stack.create_pod("huge-w-0", aw="huge", grace=1)
    await stack.delete_pod("huge-w-0", grace=0)
    forever = TeardownPolicy(
        stuck_alert_seconds=2**63 - 1, force_deletion_seconds=2**63 - 1, pause_seconds=0
    )
    event = await stack.start_teardown("huge", inventory=[pod], policy=forever)
    cleared = await stack.cleared("huge", timeout=15)
    assert isinstance(cleared.event, CycleCleared)
    record = await stack.record(event)
    assert record is not None and record.deadlines["stuck_alert"] > event.occurred_at
    assert not stack.recorder.of("alert.deletion.stuck", aw="huge")


async def test_a_force_deletion_is_due_at_its_deadline_not_at_the_next_scan(stack: Stack) -> None:
    # The scan (the timer of record) runs at start and then only every 30 s: the steps at 1 s
    # and 2 s come from the record's alarm.
    await stack.start_tracker(CLEARANCE_SCAN_INTERVAL="30s")
    stuck = await stack.create_pod("late-w-0", aw="late", node="node-1")
    await stack.wait_pod_running("late-w-0")
    stack.cluster.lose_node("node-1")
    await stack.delete_pod("late-w-0")
    started = await stack.start_teardown("late", inventory=[stuck], policy=FAST)

    await stack.cleared("late", timeout=15)
    [forced] = stack.recorder.of("cycle.deletion.forced", aw="late")
    assert isinstance(forced.event, CycleDeletionForced)
    late = (forced.event.occurred_at - started.occurred_at).total_seconds() - 2
    assert 0 <= late < 1.5, late
