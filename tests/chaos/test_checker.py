"""The chaos checker on hand-made histories: each invariant passes a clean one and catches its
violation (so no check of the harness is one that cannot fail)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.chaos import checker, plan
from tests.chaos.history import Observation, Published, Write

from clearance import events, labels
from clearance.traces import ReceivedSpan

AW_UID = "aw-uid-1"
DISPATCHER = "clearance-dispatcher/0.1.0 (x; pid 1)"
REF = events.AppWrapperRef(namespace="default", name="aw0", uid=AW_UID)


def pod(rv: int, type_: str, name: str, *, attempt: int, t: float, **kw: Any) -> Write:
    stamp = labels.stamp(appwrapper="aw0", namespace="default", attempt=attempt)
    return Write(
        rv=rv,
        type=type_,
        kind="Pod",
        name=name,
        uid=kw.pop("uid", f"uid-{name}"),
        time=t,
        user_agent=kw.pop("by", DISPATCHER),
        verb=kw.pop("verb", "create" if type_ == "ADDED" else "update"),
        labels=stamp,
        owners=(),
        terminating=kw.pop("terminating", type_ == "DELETED"),
        object=kw.pop("object", None),
    )


def aw(rv: int, *, t: float, clearance: dict[str, Any], **status: Any) -> Write:
    body = {"status": {"clearance": clearance, **status}}
    return Write(
        rv, "MODIFIED", "AppWrapper", "aw0", AW_UID, t, DISPATCHER, "patch", {}, (), False, body
    )


def cleared(seq: int, *, attempt: int, t: float) -> Published:
    moment = datetime.fromtimestamp(t, UTC)
    event = events.CycleCleared(
        appwrapper=REF, attempt=attempt, occurred_at=moment, cleared_at=moment
    )
    return Published(seq, t, "s", f"{AW_UID}:{attempt}:cycle.cleared", event)


def requeued(seq: int, *, attempt: int, t: float) -> Published:
    moment = datetime.fromtimestamp(t, UTC)
    event = events.CycleRequeued(
        appwrapper=REF, attempt=attempt, occurred_at=moment, reason="x", number_of_requeueings=1
    )
    return Published(seq, t, "s", f"{AW_UID}:{attempt}:cycle.requeued", event)


def observation(**kw: Any) -> Observation:
    steady = plan.AppWrapperPlan("aw0", "steady", "pods", 1, 1, None, False, 0.0, 0, 1.0)
    defaults: dict[str, Any] = {
        "plans": (steady,),
        "writes": [],
        "cycle": [],
        "spans": [],
        "injections": [],
        "healed_at": 100.0,
        "settled_at": {"aw0": 105.0},
        "induced": {},
        "deleted": {},
        "l1_bound": 60.0,
    }
    return Observation(**{**defaults, **kw})


def test_s1_accepts_an_attempt_created_after_the_old_one_is_gone() -> None:
    writes = [pod(1, "ADDED", "p", attempt=1, t=1), pod(2, "DELETED", "p", attempt=1, t=2)]
    writes.append(pod(3, "ADDED", "p", attempt=2, t=3, uid="uid-p2"))
    assert checker.check_s1(writes) == []


def test_s1_catches_a_create_of_attempt_two_while_an_attempt_one_pod_exists() -> None:
    writes = [pod(1, "ADDED", "p", attempt=1, t=1), pod(2, "ADDED", "q", attempt=2, t=2)]
    (violation,) = checker.check_s1(writes)
    assert violation.invariant == "S1" and "Pod p (attempt 1)" in violation.detail


def test_s2_catches_a_cleared_stored_before_the_last_object_was_removed() -> None:
    writes = [pod(1, "ADDED", "p", attempt=1, t=1), pod(2, "DELETED", "p", attempt=1, t=5)]
    assert checker.check_s2(writes, [cleared(1, attempt=1, t=6)]) == []
    (violation,) = checker.check_s2(writes, [cleared(1, attempt=1, t=4)])
    assert "while Pod p (attempt 1) existed" in violation.detail


def test_s2_catches_a_cleared_stored_twice() -> None:
    found = checker.check_s2([], [cleared(1, attempt=1, t=6), cleared(2, attempt=1, t=7)])
    assert [v.detail for v in found] == ["cleared of attempt 1 stored 2x"]


def test_s3_catches_a_delete_of_the_current_attempt_before_its_teardown_is_recorded() -> None:
    writes = [
        aw(1, t=0, clearance={"attempt": 1, "phase": "Dispatched"}),
        pod(2, "ADDED", "p", attempt=1, t=1),
        pod(3, "MODIFIED", "p", attempt=1, t=2, verb="delete", terminating=True),
    ]
    (violation,) = checker.check_s3(writes)
    assert violation.invariant == "S3"


def test_s3_accepts_a_delete_after_the_teardown_is_recorded() -> None:
    writes = [
        aw(1, t=0, clearance={"attempt": 1, "phase": "Dispatched"}),
        pod(2, "ADDED", "p", attempt=1, t=1),
        aw(3, t=1.5, clearance={"attempt": 1, "phase": "TearingDown", "tearingDown": 1}),
        pod(4, "MODIFIED", "p", attempt=1, t=2, verb="delete", terminating=True),
    ]
    assert checker.check_s3(writes) == []


def test_l1_catches_an_appwrapper_not_settled_within_the_bound() -> None:
    assert checker.check_l1(observation()) == []
    late = observation(settled_at={"aw0": 161.0})
    assert [v.invariant for v in checker.check_l1(late)] == ["L1"]
    assert [v.invariant for v in checker.check_l1(observation(settled_at={}))] == ["L1"]


def test_l2_catches_a_requeue_count_beyond_the_attempts_requeued() -> None:
    writes = [aw(1, t=0, clearance={"attempt": 2}, numberOfRequeueings=2)]
    found = checker.check_l2(
        observation(writes=writes, cycle=[requeued(1, attempt=1, t=3)], induced={"aw0": 2.0})
    )
    assert [v.detail for v in found] == ["numberOfRequeueings 2 but 1 attempts requeued"]


def test_l2_catches_a_requeue_no_failure_of_the_schedule_explains() -> None:
    writes = [
        pod(1, "ADDED", "p", attempt=1, t=1),
        aw(2, t=4, clearance={"attempt": 2}, numberOfRequeueings=1),
    ]
    found = checker.check_l2(observation(writes=writes, cycle=[requeued(1, attempt=1, t=3)]))
    assert [v.detail for v in found] == ["attempt 1 requeued at seq 1 with no failure induced"]


def _root(span_id: str, *, attempt: int) -> ReceivedSpan:
    attrs = {"clearance.appwrapper.name": "aw0", "clearance.attempt": attempt}
    return ReceivedSpan(
        "clearance-dispatcher", "requeue.cycle", "t" * 32, span_id, None, 0, 1, attrs
    )


def _teardown(attempt: int) -> Published:
    moment = datetime.now(UTC)
    event = events.CycleTeardownStarted(
        appwrapper=REF, attempt=attempt, occurred_at=moment, inventory=()
    )
    return Published(1, 0.0, "s", "id", event)


def test_t1_wants_exactly_one_cycle_root_per_teardown() -> None:
    one = observation(cycle=[_teardown(1)], spans=[_root("a" * 16, attempt=1)])
    assert checker.check_t1(one) == []
    two = observation(
        cycle=[_teardown(1)], spans=[_root("a" * 16, attempt=1), _root("b" * 16, attempt=1)]
    )
    assert [v.detail for v in checker.check_t1(two)] == ["2 requeue.cycle roots for attempt 1"]
    none = observation(cycle=[_teardown(1)])
    assert [v.detail for v in checker.check_t1(none)] == ["0 requeue.cycle roots for attempt 1"]


def test_a_seed_always_draws_the_same_schedule_with_every_fault_class() -> None:
    first = plan.schedule_for(42)
    assert first == plan.schedule_for(42)
    assert first != plan.schedule_for(43)
    assert {f.cls for f in first.faults} == set(plan.FAULT_CLASSES)
