"""Pure: the `cleared` rule — every tracked UID confirmed AND a fresh verification left nothing.

The last tests drive the confirmation rules the way issue 14's state machines will: every
order of a small set of facts, then random sequences of duplicated, reordered and stale events,
with the record reloaded from its KV encoding between facts (a restart), must keep the same
invariants and end in the same decision.
"""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from tracker_builders import at, job, pod, record, tracked

from clearance_tracker.confirmation import (
    Missing,
    apply_event,
    apply_verification,
    decide_cleared,
)
from clearance_tracker.teardown import Clearing, Teardown, decode_record, encode


def test_a_verification_that_leaves_nothing_open_fixes_cleared_at() -> None:
    rec = record(tracked("w-0", "u1", confirmed=True), tracked("w-1", "u2", confirmed=True))
    outcome = apply_verification(rec, listed=[], gets=[], now=at(5), by="r1")
    assert outcome is not None
    assert outcome.record.clearing == Clearing(cleared_at=at(5), by="r1")
    assert outcome.record.last_verified_at == at(5)


def test_a_listed_member_keeps_the_teardown_open_even_if_every_known_uid_is_confirmed() -> None:
    rec = record(tracked("w-0", "u1", confirmed=True))
    late = pod("w-1", "u-late")  # created after the inventory, never seen by a watch event
    outcome = apply_verification(rec, listed=[late], gets=[], now=at(5), by="r1")
    assert outcome is not None
    assert outcome.record.clearing is None
    assert [o.uid for o in outcome.added] == ["u-late"]


def test_an_open_object_the_list_missed_is_cleared_only_by_a_404() -> None:
    rec = record(tracked("w-0", "u1"))
    alive = apply_verification(rec, listed=[], gets=[("u1", pod("w-0", "u1"))], now=at(5), by="r1")
    assert alive is not None and alive.record.clearing is None
    gone = apply_verification(rec, listed=[], gets=[("u1", Missing("u1"))], now=at(5), by="r1")
    assert gone is not None
    assert [c.how for c in gone.confirmed] == ["get_404"]
    assert gone.record.clearing is not None


def test_all_confirmed_by_events_alone_is_not_cleared() -> None:
    rec = record(tracked("w-0", "u1"))
    outcome = apply_event(rec, action="DELETED", snapshot=pod("w-0", "u1"), now=at(2))
    assert outcome.record.all_confirmed
    assert outcome.record.clearing is None


def test_cleared_at_is_never_moved() -> None:
    rec = msgspec.structs.replace(
        record(tracked("w-0", "u1", confirmed=True)), clearing=Clearing(cleared_at=at(5), by="r2")
    )
    assert apply_verification(rec, listed=[], gets=[], now=at(9), by="r1") is None
    assert decide_cleared(rec, now=at(9), by="r1") is rec


def test_decide_cleared_needs_every_uid_confirmed() -> None:
    rec = record(tracked("w-0", "u1", confirmed=True), tracked("w-1", "u2"))
    assert decide_cleared(rec, now=at(5), by="r1") is rec


def _facts() -> list[tuple[str, str, str]]:
    return [
        ("DELETED", "w-0", "u1"),
        ("DELETED", "w-1", "u2"),
        ("MODIFIED", "w-0", "u1"),  # stale replay of a state before the deletion
        ("DELETED", "w-0", "u1"),  # duplicate delivery
        ("ADDED", "w-2", "u3"),  # a member created after the inventory
    ]


def _reloaded(rec: Teardown) -> Teardown:
    return decode_record(encode(rec))  # a restart rebuilds the record from KV


def test_every_order_of_duplicated_and_stale_facts_reaches_the_same_decision() -> None:
    start = record(tracked("w-0", "u1"), tracked("w-1", "u2"))
    finals: set[tuple[tuple[str, bool], ...]] = set()
    for order in itertools.permutations(_facts()):
        rec = start
        for i, (action, name, uid) in enumerate(order):
            rec = apply_event(rec, action=action, snapshot=pod(name, uid), now=at(i + 1)).record
            rec = _reloaded(rec)
            assert rec.clearing is None, "events alone never clear"
        finals.add(tuple(sorted((o.uid, o.gone) for o in rec.objects.values())))
        # u3 is still there: a verification that lists it keeps the teardown open ...
        kept = apply_verification(rec, listed=[pod("w-2", "u3")], gets=[], now=at(9), by="r1")
        assert kept is not None and kept.record.clearing is None
        # ... and one that proves it gone clears it.
        done = apply_verification(rec, listed=[], gets=[("u3", Missing("u3"))], now=at(9), by="r1")
        assert done is not None and done.record.clearing == Clearing(cleared_at=at(9), by="r1")
    assert finals == {(("u1", True), ("u2", True), ("u3", False))}


_NAMES = {"u1": "w-0", "u2": "w-1", "u3": "w-2", "u4": "w-0"}  # u4 reuses u1's name
_EVENTS = st.tuples(
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.sampled_from(sorted(_NAMES))
)


@given(facts=st.lists(st.tuples(_EVENTS, st.booleans()), max_size=14))
def test_any_event_sequence_with_restarts_keeps_the_confirmation_invariants(
    facts: list[tuple[tuple[str, str], bool]],
) -> None:
    rec = record(tracked("w-0", "u1"), tracked("w-1", "u2"))
    gone: set[str] = set()
    for i, ((action, uid), restart) in enumerate(facts):
        rec = apply_event(rec, action=action, snapshot=pod(_NAMES[uid], uid), now=at(i + 1)).record
        if restart:
            rec = _reloaded(rec)
        gone |= {uid} if action == "DELETED" else set()
        assert rec.clearing is None, "events alone never clear"
        # Only a DELETED proves an event's object gone; once gone, always gone.
        assert {o.uid for o in rec.objects.values() if o.gone} == gone
    seen = {uid for _, uid in (f for f, _ in facts)}
    assert set(rec.objects) == {"u1", "u2"} | seen
    still = rec.open_objects
    # One object per name in the API: a LIST shows one of u1/u4 (and proves the other gone).
    listed = list({o.name: pod(o.name, o.uid) for o in still}.values())
    kept = apply_verification(rec, listed=listed, gets=[], now=at(99), by="r1")
    assert kept is not None and (kept.record.clearing is None) == bool(still)
    proven = [(o.uid, Missing(o.uid)) for o in still]
    done = apply_verification(rec, listed=[], gets=proven, now=at(99), by="r1")
    assert done is not None and done.record.clearing == Clearing(cleared_at=at(99), by="r1")


def test_a_verification_whose_reads_predate_a_confirmed_deletion_does_not_clear() -> None:
    # The verification LISTs while the Job still exists (terminating, held by a finalizer);
    # the Job's controller then creates a pod, the Job goes, and its DELETED is committed
    # before the verification is. The LIST cannot show the new pod (its ADDED is still on
    # the way): a `cleared` now would let attempt 2 start beside it.
    begun = record(tracked("job1-job", "u-job", kind="Job", api_version="batch/v1"))
    listed = [job("job1-job", "u-job")]
    current = apply_event(
        begun, action="DELETED", snapshot=job("job1-job", "u-job"), now=at(2)
    ).record
    stale = apply_verification(current, listed=listed, gets=[], now=at(3), by="r1")
    assert stale is not None and stale.record.clearing is None
    assert stale.record.last_verified_at == at(3)
    # The next verification reads after that deletion: nothing is left, it clears.
    fresh = apply_verification(stale.record, listed=[], gets=[], now=at(4), by="r1")
    assert fresh is not None and fresh.record.clearing == Clearing(cleared_at=at(4), by="r1")


def test_a_verification_whose_get_predates_a_confirmed_deletion_does_not_clear() -> None:
    begun = record(tracked("w-0", "u1"))
    current = apply_event(begun, action="DELETED", snapshot=pod("w-0", "u1"), now=at(2)).record
    alive_then = [("u1", pod("w-0", "u1"))]
    stale = apply_verification(current, listed=[], gets=alive_then, now=at(3), by="r1")
    assert stale is not None and stale.record.clearing is None
