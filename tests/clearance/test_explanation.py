"""The pure parts of ``clearance explain``: reading the status, the cycle, the ladder, the
diagnosis and the commands, and the screen for an AppWrapper without a cycle.

The whole command against a running stack is tests/e2e/test_explain.py."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta

from clearance import events
from clearance.appwrapper_status import AppWrapperStatus, parse_appwrapper, parse_status
from clearance.blockers import NodeUnreadable, PresentObject, diagnose, unblock_commands
from clearance.bookkeeping import parse as parse_bookkeeping
from clearance.explanation import Facts, explain, next_escalation
from clearance.explanation_text import render

T0 = datetime(2026, 12, 3, 6, 0, 0, tzinfo=UTC)
AW = events.AppWrapperRef(namespace="team-a", name="train", uid="aw-1")
POD = events.ObjectRef(kind="Pod", api_version="v1", namespace="team-a", name="train-0", uid="p1")


def teardown(
    *, attempt: int = 1, force: int = 60, removal: str = "Never"
) -> events.CycleTeardownStarted:
    policy = events.TeardownPolicy(
        stuck_alert_seconds=10,
        force_deletion_seconds=force,
        finalizer_removal="AfterForceDeletion" if removal != "Never" else "Never",
        pause_seconds=5,
    )
    return events.CycleTeardownStarted(
        appwrapper=AW, attempt=attempt, occurred_at=T0, inventory=(POD,), policy=policy
    )


def stuck_alert(*, causes: tuple[events.Cause, ...]) -> events.AlertDeletionStuck:
    return events.AlertDeletionStuck(
        appwrapper=AW,
        attempt=1,
        occurred_at=T0 + timedelta(seconds=10),
        summary="stuck",
        elapsed_seconds=10,
        stuck=(events.StuckObject(object=POD, node="n1", reasons=causes),),
    )


def pod(**overrides: object) -> PresentObject:
    fields: dict[str, object] = {
        "kind": "Pod",
        "resource": "pod",
        "namespace": "team-a",
        "name": "train-0",
        "uid": "p1",
        "attempt": 1,
        "node": "n1",
        "finalizers": (),
        "deletion_timestamp": T0 + timedelta(seconds=30),
        "deletion_grace_seconds": 30,
    }
    fields.update(overrides)
    return PresentObject(**fields)  # type: ignore[arg-type]


def healthy_node() -> events.NodeObject:
    return events.NodeObject(
        metadata=events.ObjectMeta(name="n1", uid="n1", resource_version="1"),
        status=events.NodeStatus(conditions=(events.Condition(type="Ready", status="True"),)),
    )


def test_status_reads_the_layout_2_bookkeeping() -> None:
    status = parse_status(
        {
            "state": "Pending",
            "numberOfRequeueings": 2,
            "conditions": [{"type": "AwaitingDeletion", "status": "True"}, {"type": "Running"}],
            "clearance": {
                "version": 2,
                "phase": "TearingDown",
                "attempt": 3,
                "tearingDown": 3,
                "cycleAttempt": 3,
                "teardownStartedAt": "2026-12-03T06:00:00.000000Z",
                "cycleTraceparent": f"00-{'a' * 32}-{'b' * 16}-01",
            },
        }
    )
    assert (status.state, status.requeues, status.conditions) == (
        "Pending",
        2,
        ("AwaitingDeletion",),
    )
    book = status.bookkeeping
    assert (book.phase, book.attempt, book.tearing_down, book.cycle_of) == ("TearingDown", 3, 3, 3)
    assert book.teardown_started_at == T0 and book.trace_id == "a" * 32 and not book.legacy


def test_status_of_the_old_layout_derives_the_open_teardown() -> None:
    book = parse_bookkeeping(
        {"phase": "TearingDown", "attempt": 2, "teardownStartedAt": "2026-12-03T06:00:00Z"}
    )
    assert book.legacy and book.tearing_down == 2


def test_the_bookkeeping_annotation_wins_over_a_pruned_status() -> None:
    document = {
        "clearance": {"version": 2, "phase": "TearingDown", "attempt": 1, "tearingDown": 1},
        "status": {"state": "Pending", "numberOfRequeueings": 1},
    }
    status = parse_appwrapper(
        {
            "metadata": {"annotations": {"clearance.dev/bookkeeping": json.dumps(document)}},
            "status": {"state": "Running", "numberOfRequeueings": 0},
        }
    )
    assert (status.state, status.requeues, status.bookkeeping.tearing_down) == ("Pending", 1, 1)


def test_status_fields_of_the_wrong_type_read_as_absent() -> None:
    status = parse_status(
        {"numberOfRequeueings": "2", "clearance": {"version": 2, "attempt": True}}
    )
    assert status.requeues == 0 and status.bookkeeping.attempt == 0
    assert parse_status(["not", "a", "mapping"]) == AppWrapperStatus()


def test_the_next_step_is_the_first_one_not_taken_and_says_when_it_fell_due() -> None:
    step = next_escalation(teardown(), done={"stuck_alert"}, now=T0 + timedelta(seconds=65))
    assert (step.what, step.at) == ("force deletion", T0 + timedelta(seconds=60))
    assert step.due is not None and step.due.startswith("due 5s ago")


def test_finalizer_removal_follows_the_force_deadline_by_the_tracker_default_delay() -> None:
    step = next_escalation(
        teardown(removal="AfterForceDeletion"),
        done={"stuck_alert", "force_deletion"},
        now=T0,
    )
    assert (step.what, step.at) == ("finalizer removal", T0 + timedelta(seconds=70))


def test_a_disabled_force_deletion_leaves_nothing_after_the_stuck_alert() -> None:
    step = next_escalation(teardown(force=0), done={"stuck_alert"}, now=T0)
    assert step.what == "none" and step.at is None


def test_the_finalizer_patch_tests_the_uid_and_removes_each_finalizer_by_index() -> None:
    obj = pod(finalizers=("a.example/one", "b.example/two"), deletion_grace_seconds=0)
    [command] = unblock_commands(obj, (events.Finalizers(finalizers=obj.finalizers),))
    argv = shlex.split(command)
    assert argv[:7] == ["kubectl", "-n", "team-a", "patch", "pod", "train-0", "--type=json"]
    assert json.loads(argv[-1]) == [
        {"op": "test", "path": "/metadata/uid", "value": "p1"},
        {"op": "test", "path": "/metadata/finalizers/1", "value": "b.example/two"},
        {"op": "remove", "path": "/metadata/finalizers/1"},
        {"op": "test", "path": "/metadata/finalizers/0", "value": "a.example/one"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]


def test_a_pod_on_a_healthy_node_in_its_grace_period_gets_a_grace_0_delete() -> None:
    blocker = diagnose(pod(), nodes={"n1": healthy_node()}, history=(), now=T0)
    assert blocker.causes == (events.InGracePeriod(seconds_left=30.0),)
    assert blocker.commands == ("kubectl -n team-a delete pod train-0 --grace-period=0 --force",)


def test_a_pod_whose_deletion_was_never_requested_is_diagnosed_so() -> None:
    blocker = diagnose(
        pod(deletion_timestamp=None, deletion_grace_seconds=None),
        nodes={"n1": healthy_node()},
        history=(),
        now=T0,
    )
    [cause] = blocker.causes
    assert isinstance(cause, events.UnknownCause) and "never requested" in cause.detail


def test_an_unreadable_node_keeps_the_node_causes_of_the_trackers_diagnosis() -> None:
    lost = events.NodeUnreachable(node="n1")
    history = (stuck_alert(causes=(lost, events.InGracePeriod(seconds_left=20))),)
    blocker = diagnose(
        pod(deletion_grace_seconds=0, deletion_timestamp=T0),
        nodes={"n1": NodeUnreadable("403 Forbidden")},
        history=history,
        now=T0 + timedelta(seconds=40),
    )
    assert blocker.causes == (lost,)
    assert blocker.node_note == (
        "node n1 not readable (403 Forbidden); node causes from the tracker's last diagnosis"
    )


def facts(*history: events.CycleEvent | events.AlertEvent, **status: object) -> Facts:
    return Facts(
        namespace="team-a",
        name="train",
        uid="aw-1",
        status=parse_status(status),
        max_requeuings=0,
        history=history,
        objects=(),
        nodes={},
        now=T0 + timedelta(seconds=20),
    )


def test_the_timeline_holds_the_cycle_of_the_torn_down_attempt_and_its_redispatch() -> None:
    dispatched = events.CycleDispatched(appwrapper=AW, attempt=2, occurred_at=T0)
    older = events.CycleRequeued(
        appwrapper=AW, attempt=1, occurred_at=T0, reason="x", number_of_requeueings=1
    )
    redispatched = events.CycleRedispatched(
        appwrapper=AW, attempt=3, occurred_at=T0 + timedelta(seconds=9), cleared_at=T0
    )
    x = explain(
        facts(
            older,
            dispatched,
            teardown(attempt=2),
            redispatched,
            clearance={"version": 2, "phase": "Dispatched", "attempt": 3, "cycleAttempt": 2},
        )
    )
    assert [(e.event, e.attempt) for e in x.timeline] == [
        ("teardown.started", 2),
        ("redispatched", 3),
    ]
    assert x.next.detail == "attempt 3 was dispatched at 06:00:09Z"


def test_facts_stamped_at_once_are_listed_cause_before_effect() -> None:
    stamp = T0 + timedelta(seconds=9)
    cleared = events.CycleCleared(appwrapper=AW, attempt=1, occurred_at=stamp, cleared_at=stamp)
    gone = events.CycleDeletionConfirmed(
        appwrapper=AW,
        attempt=1,
        occurred_at=stamp,
        confirmed=(events.ConfirmedObject(object=POD, how="get_404"),),
    )
    x = explain(
        facts(
            teardown(),
            cleared,
            gone,
            clearance={"version": 2, "phase": "Queued", "attempt": 1, "cycleAttempt": 1},
        )
    )
    assert [e.event for e in x.timeline] == ["teardown.started", "deletion.confirmed", "cleared"]


def test_an_open_teardown_with_nothing_left_awaits_cleared() -> None:
    x = explain(
        facts(
            teardown(),
            clearance={"version": 2, "phase": "TearingDown", "attempt": 1, "tearingDown": 1},
        )
    )
    assert x.blocking == () and x.next.what == "cleared"


def test_the_screen_of_an_appwrapper_never_dispatched() -> None:
    lines = render(explain(facts(state="Pending")))
    assert lines[1:] == [
        "state       Pending · phase - · attempt 0 · requeues 0 (no limit)",
        "cycle       none: never requeued",
        "next        none: not dispatched yet",
    ]
