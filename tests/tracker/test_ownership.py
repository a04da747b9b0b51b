"""Pure: when an owner counts as alive, and when a cleared record may be deleted."""

from __future__ import annotations

import msgspec
from tracker_builders import at, record, tracked

from clearance_tracker.ownership import owner_alive, retention_over
from clearance_tracker.teardown import Clearing


def _alive(owner: str, *, beats: dict[str, int], now: int, started: int = 0) -> bool:
    return owner_alive(
        owner,
        me="r1",
        heartbeats={r: at(t) for r, t in beats.items()},
        now=at(now),
        started_at=at(started),
        timeout=20,
    )


def test_i_am_always_alive_to_myself() -> None:
    assert _alive("r1", beats={}, now=10_000)


def test_an_owner_is_dead_once_its_heartbeat_is_older_than_the_timeout() -> None:
    assert _alive("r2", beats={"r2": 100}, now=119)
    assert not _alive("r2", beats={"r2": 100}, now=120)


def test_an_owner_never_seen_is_alive_for_the_timeout_after_my_start() -> None:
    assert _alive("r2", beats={}, now=19, started=0)
    assert not _alive("r2", beats={}, now=20, started=0)


def test_only_a_published_cleared_past_the_retention_may_be_deleted() -> None:
    rec = record(tracked("w-0", "u1", confirmed=True))
    assert not retention_over(rec, now=at(10**6), retention=60)
    fixed = msgspec.structs.replace(rec, clearing=Clearing(cleared_at=at(0), by="r1"))
    assert not retention_over(fixed, now=at(10**6), retention=60), "not yet published"
    published = msgspec.structs.replace(
        rec, clearing=Clearing(cleared_at=at(0), by="r1", published=True)
    )
    assert not retention_over(published, now=at(60), retention=60)
    assert retention_over(published, now=at(61), retention=60)
