"""The dispatch queue: priority then age, backfill within a priority, strict head of line."""

from __future__ import annotations

from datetime import timedelta

from tests.dispatcher.unit_support import T0

from clearance_dispatcher.queueing import Candidate, ordered, plan


def _cand(name: str, priority: int, cpu: int, age: int = 0) -> Candidate:
    return Candidate(("ns", name), priority, T0 + timedelta(seconds=age), {"cpu": cpu})


def test_queue_order_is_priority_then_creation_time() -> None:
    names = [
        c.key[1]
        for c in ordered(
            [_cand("old-low", 1, 1, 0), _cand("new-high", 5, 1, 9), _cand("old-high", 5, 1, 1)]
        )
    ]
    assert names == ["old-high", "new-high", "old-low"]


def test_backfill_within_a_priority_never_past_a_blocked_higher_one() -> None:
    cands = [
        _cand("big-high", 5, 10_000),
        _cand("small-high", 5, 500, 1),
        _cand("small-low", 1, 500, 2),
    ]
    result = plan(cands, {"cpu": 2000})
    assert [c.key[1] for c in result.admit] == ["small-high"]
    assert "insufficient capacity" in result.waiting[("ns", "big-high")]
    assert "waiting behind ns/big-high" in result.waiting[("ns", "small-low")]


def test_strict_policy_stops_at_the_first_that_does_not_fit() -> None:
    cands = [_cand("big", 5, 10_000), _cand("small", 5, 500, 1)]
    assert plan(cands, {"cpu": 2000}, policy="strict").admit == ()


def test_admitted_appwrappers_consume_capacity_in_order() -> None:
    cands = [_cand("a", 1, 1500, 0), _cand("b", 1, 1500, 1)]
    assert [c.key[1] for c in plan(cands, {"cpu": 2000}).admit] == ["a"]
