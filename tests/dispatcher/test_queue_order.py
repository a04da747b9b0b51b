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


def test_a_size_judged_to_fit_is_judged_again_once_an_admission_shrinks_what_is_free() -> None:
    # Three of one size and a smaller one behind: the third no longer fits after two were
    # admitted, the small one still does (the per-size verdict is not reused past an
    # admission), and every waiting one of a size gets the same message.
    cands = [_cand(f"same-{i}", 1, 800, i) for i in range(4)] + [_cand("small", 1, 300, 9)]
    result = plan(cands, {"cpu": 2000})
    assert [c.key[1] for c in result.admit] == ["same-0", "same-1", "small"]
    assert result.waiting[("ns", "same-2")] == result.waiting[("ns", "same-3")]
    assert result.waiting[("ns", "same-2")] == "insufficient capacity: not enough cpu"
