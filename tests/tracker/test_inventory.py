"""Pure: the record a `teardown.started` opens (inventory, wrapped kinds, trace, deadlines)."""

from __future__ import annotations

from datetime import UTC, datetime

from tracker_builders import AW, T0, at

from clearance.events import CycleTeardownStarted, ObjectRef, TeardownPolicy
from clearance_tracker.escalation import NEVER, Timing, due_step
from clearance_tracker.inventory import cycle_traceparent, open_teardown, unique_inventory
from clearance_tracker.teardown import KindRef, decode_record, encode

TIMING = Timing(finalizer_removal_delay=10, claim_timeout=30, verify_interval=5)
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
INT64_MAX = 2**63 - 1


def _pod(name: str, uid: str) -> ObjectRef:
    return ObjectRef(kind="Pod", api_version="v1", namespace="team-a", name=name, uid=uid)


def _started(
    *refs: ObjectRef, policy: TeardownPolicy | None = None, occurred_at: datetime = T0
) -> CycleTeardownStarted:
    return CycleTeardownStarted(
        appwrapper=AW,
        attempt=1,
        occurred_at=occurred_at,
        inventory=refs,
        policy=policy or TeardownPolicy(),
    )


def _open(event: CycleTeardownStarted, *, traceparent: str | None = None):  # type: ignore[no-untyped-def]
    return open_teardown(
        event,
        policy=event.policy,
        owner="r1",
        recorded_at=at(1),
        trace_id="a" * 32,
        await_span_id="c" * 16,
        traceparent=traceparent,
        timing=TIMING,
    )


def test_a_bare_pod_listed_as_item_and_as_pod_is_tracked_once() -> None:
    pod = _pod("seed-job-0", "uid-seed")
    rec = _open(_started(pod, pod))
    assert list(rec.objects) == ["uid-seed"]
    assert rec.wrapped_kinds == ()


def test_duplicates_are_dropped_first_entry_first_order_kept() -> None:
    job = ObjectRef(kind="Job", api_version="batch/v1", namespace="team-a", name="j", uid="u-j")
    refs = (job, _pod("p-0", "u-0"), job, _pod("p-1", "u-1"), _pod("p-0", "u-0"))
    assert unique_inventory(refs) == (job, _pod("p-0", "u-0"), _pod("p-1", "u-1"))


def test_the_same_name_under_two_uids_is_two_objects() -> None:
    # A name reused by a new object: both must go, neither entry may hide the other.
    rec = _open(_started(_pod("p-0", "u-old"), _pod("p-0", "u-new")))
    assert set(rec.objects) == {"u-old", "u-new"}


def test_entries_without_a_uid_are_the_same_object_by_group_kind_namespace_and_name() -> None:
    v1 = ObjectRef(kind="Job", api_version="batch/v1", namespace="team-a", name="j", uid="")
    v2 = ObjectRef(kind="Job", api_version="batch/v2", namespace="team-a", name="j", uid="")
    other = ObjectRef(kind="Job", api_version="batch/v1", namespace="team-b", name="j", uid="")
    assert unique_inventory((v1, v2, other)) == (v1, other)


def test_wrapped_kinds_are_every_non_pod_kind_once() -> None:
    job = ObjectRef(kind="Job", api_version="batch/v1", namespace="team-a", name="j", uid="u-j")
    other = ObjectRef(kind="Job", api_version="batch/v1", namespace="team-a", name="k", uid="u-k")
    rec = _open(_started(job, other, _pod("p-0", "u-0")))
    assert rec.wrapped_kinds == (KindRef(api_version="batch/v1", kind="Job"),)
    assert {o.source for o in rec.objects.values()} == {"inventory"}
    assert {o.attempt for o in rec.objects.values()} == {1}


def test_the_cycle_traceparent_is_the_events_else_the_headers_and_never_malformed() -> None:
    header = "00-" + "d" * 32 + "-" + "e" * 16 + "-01"
    assert cycle_traceparent(TRACEPARENT, header) == TRACEPARENT
    assert cycle_traceparent(None, header) == header
    assert cycle_traceparent("garbage", None) is None
    assert cycle_traceparent(None, None) is None


def test_deadlines_are_fixed_from_the_policy_when_the_record_is_opened() -> None:
    policy = TeardownPolicy(
        stuck_alert_seconds=3, force_deletion_seconds=6, finalizer_removal="AfterForceDeletion"
    )
    rec = _open(_started(_pod("p-0", "u-0"), policy=policy), traceparent=TRACEPARENT)
    assert rec.deadlines == {
        "stuck_alert": at(3),
        "force_deletion": at(6),
        "finalizer_removal": at(16),
    }
    assert (rec.teardown_started_at, rec.recorded_at, rec.owner) == (T0, at(1), "r1")
    assert rec.cycle_traceparent == TRACEPARENT


def test_an_int64_max_stuck_alert_opens_a_record_whose_alert_never_comes() -> None:
    # issue 13: this value made timedelta overflow and teardown.started redeliver forever.
    policy = TeardownPolicy(stuck_alert_seconds=INT64_MAX, force_deletion_seconds=INT64_MAX)
    rec = _open(_started(_pod("p-0", "u-0"), policy=policy))
    assert decode_record(encode(rec)) == rec
    assert due_step(rec, now=at(10 * 365 * 86400), me="r1", timing=TIMING) is None
    assert rec.deadlines["stuck_alert"] > at(99 * 365 * 86400)


def test_a_start_at_the_end_of_time_clamps_every_deadline_to_never() -> None:
    end = datetime(9999, 12, 31, 23, 59, 0, tzinfo=UTC)
    policy = TeardownPolicy(finalizer_removal="AfterForceDeletion")
    rec = _open(_started(_pod("p-0", "u-0"), policy=policy, occurred_at=end))
    assert set(rec.deadlines.values()) == {NEVER}
    assert decode_record(encode(rec)) == rec


def _ref(kind: str, api_version: str, name: str) -> ObjectRef:
    return ObjectRef(
        kind=kind, api_version=api_version, namespace="team-a", name=name, uid=f"u-{name}"
    )


def test_a_wrapped_deployment_makes_the_final_list_cover_its_replicasets() -> None:
    rec = _open(_started(_ref("Deployment", "apps/v1", "web"), _pod("web-abc-x", "u-x")))
    assert rec.wrapped_kinds == (
        KindRef(api_version="apps/v1", kind="Deployment"),
        KindRef(api_version="apps/v1", kind="ReplicaSet"),
    )


def test_statefulsets_and_pytorchjobs_add_no_kind_besides_their_own_and_pods() -> None:
    rec = _open(
        _started(
            _ref("StatefulSet", "apps/v1", "db"),
            _ref("PyTorchJob", "kubeflow.org/v1", "train"),
            _ref("Deployment", "apps/v1", "a"),
            _ref("Deployment", "apps/v1", "b"),
        )
    )
    assert rec.wrapped_kinds == (
        KindRef(api_version="apps/v1", kind="StatefulSet"),
        KindRef(api_version="kubeflow.org/v1", kind="PyTorchJob"),
        KindRef(api_version="apps/v1", kind="Deployment"),
        KindRef(api_version="apps/v1", kind="ReplicaSet"),
    )
