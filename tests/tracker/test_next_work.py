"""Pure: what an owned record needs next (verify, publish `cleared`, a ladder step), and clamps."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from tracker_builders import T0, at, record, tracked

from clearance_tracker.escalation import NEVER, Timing, after, claim, complete, next_work
from clearance_tracker.teardown import Clearing

TIMING = Timing(finalizer_removal_delay=10, claim_timeout=30, verify_interval=5)


def _verified(rec, when):  # type: ignore[no-untyped-def]
    return msgspec.structs.replace(rec, last_verified_at=when)


def test_another_replicas_record_needs_nothing_from_me() -> None:
    rec = record(tracked("w-0", "u1"), owner="r2")
    assert next_work(rec, now=at(1000), me="r1", timing=TIMING) is None


def test_a_new_record_is_verified_first() -> None:
    rec = record(tracked("w-0", "u1"))
    assert next_work(rec, now=at(0), me="r1", timing=TIMING) == "verify"


def test_every_uid_confirmed_asks_for_the_final_verification_at_once() -> None:
    rec = _verified(record(tracked("w-0", "u1", confirmed=True)), at(1))
    assert next_work(rec, now=at(1), me="r1", timing=TIMING) == "verify"


def test_a_fixed_clearing_is_published_before_anything_else() -> None:
    rec = msgspec.structs.replace(
        record(tracked("w-0", "u1", confirmed=True)), clearing=Clearing(cleared_at=at(2), by="r1")
    )
    assert next_work(rec, now=at(10_000), me="r1", timing=TIMING) == "publish_cleared"
    published = msgspec.structs.replace(
        rec, clearing=Clearing(cleared_at=at(2), by="r1", published=True)
    )
    assert next_work(published, now=at(10_000), me="r1", timing=TIMING) is None


def test_between_verifications_only_a_due_step_is_work() -> None:
    rec = _verified(record(tracked("w-0", "u1")), at(58))
    assert next_work(rec, now=at(59), me="r1", timing=TIMING) is None
    assert next_work(rec, now=at(60), me="r1", timing=TIMING) == "stuck_alert"
    assert next_work(rec, now=at(63), me="r1", timing=TIMING) == "verify"


def test_after_a_verification_in_the_same_pass_the_due_step_comes_next() -> None:
    rec = record(tracked("w-0", "u1"))  # never verified: verification is due too
    assert next_work(rec, now=at(60), me="r1", timing=TIMING) == "verify"
    assert next_work(rec, now=at(60), me="r1", timing=TIMING, verified=True) == "stuck_alert"


def test_a_claimed_then_completed_step_is_not_work_again() -> None:
    rec = _verified(record(tracked("w-0", "u1")), at(60))
    claimed = claim(rec, "stuck_alert", now=at(60), me="r1", timing=TIMING)
    assert claimed is not None
    done = complete(claimed, "stuck_alert", now=at(61), me="r1")
    assert done is not None
    assert next_work(done, now=at(62), me="r1", timing=TIMING) is None


def test_durations_past_what_a_datetime_holds_are_clamped_not_raised() -> None:
    assert after(T0, 2**63 - 1) > at(99 * 365 * 86400)
    assert after(T0, 2**63 - 1) < NEVER
    assert after(datetime(9999, 12, 31, tzinfo=UTC), 86400 * 2) == NEVER
    assert after(T0, float("nan")) == NEVER
    assert after(T0, -(2**63)) < T0
    assert after(T0, 10**400) > at(99 * 365 * 86400)
