"""Pure escalation ladder: deadlines from teardownStartedAt, each step once, claims."""

from __future__ import annotations

import msgspec
from tracker_builders import at, record, tracked

from clearance_tracker.escalation import (
    Timing,
    claim,
    complete,
    deadline,
    due_step,
    next_wakeup,
    stuck_objects_count,
    verification_due,
)
from clearance_tracker.teardown import Clearing

TIMING = Timing(finalizer_removal_delay=10, claim_timeout=30, verify_interval=5)


def _done(rec, step, when):  # type: ignore[no-untyped-def]
    claimed = claim(rec, step, now=when, me="r1", timing=TIMING)
    assert claimed is not None
    done = complete(claimed, step, now=when, me="r1")
    assert done is not None
    return done


def test_nothing_is_due_before_the_stuck_alert_deadline() -> None:
    rec = record(tracked("w-0", "u1"))
    assert due_step(rec, now=at(59), me="r1", timing=TIMING) is None
    assert due_step(rec, now=at(60), me="r1", timing=TIMING) == "stuck_alert"


def test_ladder_runs_in_order_each_step_once() -> None:
    rec = record(tracked("w-0", "u1"), finalizers="AfterForceDeletion")
    rec = _done(rec, "stuck_alert", at(60))
    assert due_step(rec, now=at(569), me="r1", timing=TIMING) is None
    assert due_step(rec, now=at(570), me="r1", timing=TIMING) == "force_deletion"
    rec = _done(rec, "force_deletion", at(570))
    assert due_step(rec, now=at(579), me="r1", timing=TIMING) is None
    assert due_step(rec, now=at(580), me="r1", timing=TIMING) == "finalizer_removal"
    rec = _done(rec, "finalizer_removal", at(580))
    assert due_step(rec, now=at(10_000), me="r1", timing=TIMING) is None


def test_finalizer_removal_never_happens_with_policy_never() -> None:
    rec = record(tracked("w-0", "u1"))
    rec = _done(_done(rec, "stuck_alert", at(60)), "force_deletion", at(570))
    assert deadline(rec, "finalizer_removal", TIMING) is None
    assert due_step(rec, now=at(100_000), me="r1", timing=TIMING) is None


def test_force_deletion_disabled_by_zero_disables_finalizer_removal_too() -> None:
    rec = record(tracked("w-0", "u1"), force=0, finalizers="AfterForceDeletion")
    rec = _done(rec, "stuck_alert", at(60))
    assert deadline(rec, "force_deletion", TIMING) is None
    assert due_step(rec, now=at(100_000), me="r1", timing=TIMING) is None


def test_stuck_alert_zero_disables_it_and_force_still_comes() -> None:
    rec = record(tracked("w-0", "u1"), stuck=0, force=5)
    assert due_step(rec, now=at(5), me="r1", timing=TIMING) == "force_deletion"


def test_nothing_is_due_when_every_object_is_confirmed_or_clearing() -> None:
    rec = record(tracked("w-0", "u1", confirmed=True))
    assert due_step(rec, now=at(1000), me="r1", timing=TIMING) is None
    rec = msgspec.structs.replace(
        record(tracked("w-0", "u1")), clearing=Clearing(cleared_at=at(3), by="r1")
    )
    assert due_step(rec, now=at(1000), me="r1", timing=TIMING) is None


def test_a_live_claim_of_another_replica_blocks_and_an_expired_one_does_not() -> None:
    rec = record(tracked("w-0", "u1"), owner="r2")
    claimed = claim(rec, "stuck_alert", now=at(60), me="r2", timing=TIMING)
    assert claimed is not None
    claimed = msgspec.structs.replace(claimed, owner="r1")  # r2 died, r1 took over
    assert claim(claimed, "stuck_alert", now=at(61), me="r1", timing=TIMING) is None
    assert due_step(claimed, now=at(89), me="r1", timing=TIMING) is None
    assert due_step(claimed, now=at(90), me="r1", timing=TIMING) == "stuck_alert"


def test_only_the_owner_claims() -> None:
    rec = record(tracked("w-0", "u1"), owner="r2")
    assert claim(rec, "stuck_alert", now=at(60), me="r1", timing=TIMING) is None


def test_own_unfinished_claim_is_resumed_at_once_after_a_restart() -> None:
    claimed = claim(record(tracked("w-0", "u1")), "stuck_alert", now=at(60), me="r1", timing=TIMING)
    assert claimed is not None
    assert due_step(claimed, now=at(60.5), me="r1", timing=TIMING) == "stuck_alert"


def test_complete_is_idempotent() -> None:
    rec = _done(record(tracked("w-0", "u1")), "stuck_alert", at(60))
    assert complete(rec, "stuck_alert", now=at(70), me="r1") is None


def test_next_wakeup_is_the_earlier_of_verification_and_next_deadline() -> None:
    rec = msgspec.structs.replace(record(tracked("w-0", "u1")), last_verified_at=at(58))
    assert next_wakeup(rec, now=at(58), me="r1", timing=TIMING) == at(60)
    rec = msgspec.structs.replace(rec, last_verified_at=at(50))
    assert next_wakeup(rec, now=at(50), me="r1", timing=TIMING) == at(55)


def test_periodic_verification_waits_while_events_still_confirm_objects() -> None:
    gone = msgspec.structs.replace(tracked("w-1", "u2"), confirmed_at=at(53))
    rec = msgspec.structs.replace(record(tracked("w-0", "u1"), gone), last_verified_at=at(50))
    # A confirmation at 53 (after the verification at 50): due 5 s after it, not at 55.
    assert not verification_due(rec, now=at(57), timing=TIMING)
    assert verification_due(rec, now=at(58), timing=TIMING)
    assert next_wakeup(rec, now=at(51), me="r1", timing=TIMING) == at(58)
    # Confirmations going on and on postpone it by one interval at most.
    busy = msgspec.structs.replace(
        rec, objects={**rec.objects, "u2": msgspec.structs.replace(gone, confirmed_at=at(59))}
    )
    assert not verification_due(busy, now=at(59), timing=TIMING)
    assert verification_due(busy, now=at(60), timing=TIMING)
    # No confirmation since the last verification: the plain interval.
    quiet = msgspec.structs.replace(rec, last_verified_at=at(54))
    assert verification_due(quiet, now=at(59), timing=TIMING)


def test_stuck_gauge_counts_open_objects_after_the_alert_deadline() -> None:
    rec = record(tracked("a", "u1"), tracked("b", "u2"), tracked("c", "u3", confirmed=True))
    assert stuck_objects_count(rec, now=at(59), timing=TIMING) == 0
    assert stuck_objects_count(rec, now=at(61), timing=TIMING) == 2


def test_recorded_deadlines_win_over_this_replicas_settings() -> None:
    from clearance_tracker.escalation import fix_deadlines

    rec = fix_deadlines(record(tracked("w-0", "u1"), finalizers="AfterForceDeletion"), TIMING)
    assert rec.deadlines == {
        "stuck_alert": at(60),
        "force_deletion": at(570),
        "finalizer_removal": at(580),
    }
    other = Timing(finalizer_removal_delay=99, claim_timeout=30, verify_interval=5)
    assert deadline(rec, "finalizer_removal", other) == at(580)
    assert "finalizer_removal" not in fix_deadlines(record(tracked("w-0", "u1")), TIMING).deadlines
