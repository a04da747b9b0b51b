"""Pure confirmation rules: what joins a teardown and what proves an object gone."""

from __future__ import annotations

from tracker_builders import at, job, pod, record, tracked

from clearance import labels
from clearance_tracker.confirmation import (
    Missing,
    apply_event,
    apply_get,
    apply_list,
    belongs,
    labelled_attempt,
    unseen,
)


def test_deleted_event_with_the_uid_confirms_the_object() -> None:
    rec = record(tracked("w-0", "u1"))
    out = apply_event(rec, action="DELETED", snapshot=pod("w-0", "u1"), now=at(2))
    assert [c.how for c in out.confirmed] == ["watch_deleted"]
    assert out.record.all_confirmed


def test_deletion_timestamp_is_not_gone() -> None:
    rec = record(tracked("w-0", "u1"))
    out = apply_event(rec, action="MODIFIED", snapshot=pod("w-0", "u1", deletion=at(30)), now=at(2))
    assert out.confirmed == ()
    assert not out.record.all_confirmed
    out = apply_get(rec, uid="u1", result=pod("w-0", "u1", deletion=at(30)), now=at(2))
    assert out.confirmed == ()
    assert out.record.objects["u1"].deletion_timestamp == at(30)


def test_get_404_confirms_and_get_of_same_uid_does_not() -> None:
    rec = record(tracked("w-0", "u1"), tracked("w-1", "u2"))
    out = apply_get(rec, uid="u1", result=Missing("u1"), now=at(2))
    assert [c.object.uid for c in out.confirmed] == ["u1"]
    out = apply_get(out.record, uid="u2", result=pod("w-1", "u2", deletion=at(1)), now=at(3))
    assert out.confirmed == ()
    assert [o.uid for o in out.record.open_objects] == ["u2"]


def test_get_returning_another_uid_confirms_the_old_and_tracks_the_new_member() -> None:
    rec = record(tracked("w-0", "old"))
    out = apply_get(rec, uid="old", result=pod("w-0", "new"), now=at(2))
    assert [(c.object.uid, c.how) for c in out.confirmed] == [("old", "uid_changed")]
    assert [o.uid for o in out.record.open_objects] == ["new"]


def test_event_about_a_new_uid_with_the_same_name_does_not_confirm_the_old_one() -> None:
    # Events can be stale or reordered: only a fresh read proves a name was reused.
    rec = record(tracked("w-0", "old"))
    out = apply_event(rec, action="ADDED", snapshot=pod("w-0", "new"), now=at(2))
    assert out.confirmed == ()
    assert {o.uid for o in out.record.open_objects} == {"old", "new"}


def test_deleted_event_of_the_old_uid_does_not_confirm_the_new_pod_with_that_name() -> None:
    rec = record(tracked("w-0", "old"), tracked("w-0", "new", source="watch"))
    out = apply_event(rec, action="DELETED", snapshot=pod("w-0", "old"), now=at(2))
    assert [c.object.uid for c in out.confirmed] == ["old"]
    assert [o.uid for o in out.record.open_objects] == ["new"]


def test_a_confirmed_uid_stays_confirmed_whatever_arrives_later() -> None:
    # UIDs are never reused: an event or a LIST showing it alive was read before the proof.
    rec = record(tracked("w-0", "u1", confirmed=True))
    out = apply_event(rec, action="MODIFIED", snapshot=pod("w-0", "u1"), now=at(2))
    assert out.record.all_confirmed
    out, _ = apply_list(rec, items=[pod("w-0", "u1")], now=at(2))
    assert out.record.all_confirmed


def test_pods_of_attempts_up_to_n_join_and_later_attempts_do_not() -> None:
    rec = record(attempt=2)
    for uid, attempt in (("a1", 1), ("a2", 2), ("a3", 3)):
        rec = apply_event(
            rec, action="ADDED", snapshot=pod(f"p-{uid}", uid, attempt=attempt), now=at(1)
        ).record
    assert set(rec.objects) == {"a1", "a2"}


def test_pod_without_attempt_label_joins_conservatively() -> None:
    out = apply_event(record(), action="ADDED", snapshot=pod("x", "u9", attempt=None), now=at(1))
    assert [o.uid for o in out.added] == ["u9"]


def test_objects_of_other_appwrappers_or_namespaces_are_ignored() -> None:
    rec = record()
    for snap in (
        pod("x", "u1", appwrapper="other"),
        pod("x", "u2", namespace="team-b"),
        pod("x", "u3", labelled=False),
        pod(
            "x",
            "u4",
            owners=(
                {
                    "apiVersion": "workload.codeflare.dev/v1beta1",
                    "kind": "AppWrapper",
                    "name": "job1",
                    "uid": "a-recreated-appwrapper",
                },
            ),
        ),
    ):
        rec = apply_event(rec, action="ADDED", snapshot=snap, now=at(1)).record
    assert rec.objects == {}


def test_unlabelled_pod_owned_by_a_tracked_object_joins() -> None:
    rec = record(tracked("j", "job-uid", kind="Job", api_version="batch/v1"))
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid"}
    out = apply_event(
        rec, action="ADDED", snapshot=pod("j-x", "p1", labelled=False, owners=(owner,)), now=at(1)
    )
    assert out.record.objects["p1"].source == "owner"


def test_deleted_event_of_an_unseen_member_is_recorded_as_confirmed() -> None:
    out = apply_event(record(), action="DELETED", snapshot=pod("late", "u5"), now=at(3))
    assert out.record.objects["u5"].gone
    assert out.record.all_confirmed


def test_list_adds_members_and_unseen_names_what_needs_a_get() -> None:
    rec = record(tracked("j", "job-uid", kind="Job", api_version="batch/v1"))
    out, members = apply_list(rec, items=[pod("j-0", "p0"), job("j", "job-uid")], now=at(5))
    assert {m.metadata.uid for m in members} == {"p0", "job-uid"}
    assert "p0" in out.record.objects
    assert [o.uid for o in unseen(out.record, ["p0"])] == ["job-uid"]


def test_open_objects_list_pods_before_items() -> None:
    rec = record(
        tracked("a-job", "j1", kind="Job", api_version="batch/v1"),
        tracked("z-pod", "p1"),
    )
    assert [o.kind for o in rec.open_objects] == ["Pod", "Job"]


def test_a_pod_of_a_253_character_appwrapper_joins_its_teardown() -> None:
    name = "l" * 253
    meta = pod("p", "u1", appwrapper=name).metadata
    assert labelled_attempt(meta, appwrapper=name) == (True, 1)
    assert labelled_attempt(meta, appwrapper=name[:-1]) == (False, None)


def test_a_pod_of_a_resubmitted_appwrapper_with_the_same_name_does_not_join_the_old_teardown() -> (
    None
):

    old = record()
    newer = pod("job1-job-x", "u9", attempt=1)
    newer.metadata.labels[labels.APPWRAPPER_UID] = "another-uid"  # owner: the new Job
    assert belongs(old, newer.metadata) is None
    same = pod("job1-job-y", "u8", attempt=1)
    same.metadata.labels[labels.APPWRAPPER_UID] = old.appwrapper.uid
    assert belongs(old, same.metadata) == "watch"
