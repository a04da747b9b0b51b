"""The Lease rule: who may act, and when a standby takes over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from clearance.leadership import LeaseSpec, Step, decide

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def held_by(holder: str | None, *, renewed_ago: float, duration: int = 15) -> LeaseSpec:
    return LeaseSpec(
        holderIdentity=holder,
        leaseDurationSeconds=duration,
        renewTime=NOW - timedelta(seconds=renewed_ago),
    )


def test_missing_lease_is_created() -> None:
    assert decide(None, identity="a", now=NOW) is Step.CREATE


def test_holder_renews_its_own_lease() -> None:
    assert decide(held_by("a", renewed_ago=3), identity="a", now=NOW) is Step.RENEW


def test_standby_follows_a_live_holder() -> None:
    assert decide(held_by("a", renewed_ago=14.9), identity="b", now=NOW) is Step.FOLLOW


def test_standby_takes_over_once_the_lease_expired() -> None:
    assert decide(held_by("a", renewed_ago=15), identity="b", now=NOW) is Step.TAKE_OVER


def test_released_lease_is_taken_at_once() -> None:
    assert decide(held_by(None, renewed_ago=0), identity="b", now=NOW) is Step.TAKE_OVER
