"""The monitor's verdict: the wait and its growth, too few pods, the requeue limit, the deadline."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.dispatcher.unit_support import T0

from clearance_dispatcher import appwrapper as aw_mod
from clearance_dispatcher.requeueing import (
    Counts,
    Fail,
    Keep,
    Requeue,
    current_wait,
    decide,
    grown_wait,
)


def test_exponential_growth_is_capped() -> None:
    rq = aw_mod.Requeuing(time_in_seconds=60, growth_type="exponential", max_time_in_seconds=200)
    waits = [current_wait(None, rq, 300)]
    for _ in range(3):
        waits.append(grown_wait(waits[-1], rq, 300))
    assert waits == [60, 120, 200, 200]


def test_linear_and_none_growth() -> None:
    linear = aw_mod.Requeuing(time_in_seconds=10, growth_type="linear")
    assert grown_wait(grown_wait(10, linear, 300), linear, 300) == 30
    none = aw_mod.Requeuing(time_in_seconds=10, growth_type="none")
    assert grown_wait(10, none, 300) == 10
    assert current_wait(None, aw_mod.Requeuing(), 300) == 300


def _decide(
    counts: Counts,
    *,
    at: float,
    requeues: int = 0,
    limit: int = 0,
    min_available: int = 2,
    dispatch_limit: int | None = None,
) -> Any:
    rq = aw_mod.Requeuing(time_in_seconds=60, max_num_requeuings=limit)
    return decide(
        now=T0 + timedelta(seconds=at),
        dispatched_at=T0,
        first_dispatched_at=T0,
        counts=counts,
        min_available=min_available,
        requeuing=rq,
        wait_seconds=60,
        default_wait=300,
        number_of_requeueings=requeues,
        dispatch_limit_seconds=dispatch_limit,
    )


def test_no_requeue_before_the_wait_and_none_with_enough_pods() -> None:
    early = _decide(Counts(running=0), at=30)
    assert isinstance(early, Keep) and early.recheck_at == T0 + timedelta(seconds=60)
    assert isinstance(_decide(Counts(running=1, succeeded=1), at=90), Keep)


def test_requeue_after_the_wait_with_too_few_pods() -> None:
    verdict = _decide(Counts(running=1, terminating=1), at=61)
    assert isinstance(verdict, Requeue)
    assert verdict.number_of_requeueings == 1 and verdict.next_wait == 120
    assert "minimum=2, running=1" in verdict.message


def test_min_available_zero_still_needs_one_pod() -> None:
    assert isinstance(_decide(Counts(), at=61, min_available=0), Requeue)


def test_max_num_requeuings_fires_after_exactly_that_many_requeues() -> None:
    assert isinstance(_decide(Counts(), at=61, requeues=0, limit=2), Requeue)
    assert isinstance(_decide(Counts(), at=61, requeues=1, limit=2), Requeue)
    verdict = _decide(Counts(), at=61, requeues=2, limit=2)
    assert isinstance(verdict, Fail) and verdict.reason == "MaxNumRequeuingsReached"


def test_dispatch_duration_limit_fails() -> None:
    verdict = _decide(Counts(running=2), at=31, dispatch_limit=30)
    assert isinstance(verdict, Fail) and verdict.reason == "DispatchDeadlineExceeded"


def test_exponential_growth_without_a_cap_stops_at_30_days() -> None:
    rq = aw_mod.Requeuing(time_in_seconds=300, growth_type="exponential")
    wait = current_wait(None, rq, 300)
    for _ in range(200):  # 2**200 * 300 s would overflow any timedelta
        wait = grown_wait(wait, rq, 300)
    assert wait == 30 * 86400


def test_a_huge_wait_read_back_from_status_decides_without_raising() -> None:
    rq = aw_mod.Requeuing()
    wait = current_wait(2**63 - 1, rq, 300)
    verdict = decide(
        now=T0,
        dispatched_at=T0,
        first_dispatched_at=T0,
        counts=Counts(),
        min_available=1,
        requeuing=rq,
        wait_seconds=2**63 - 1,
        default_wait=300,
        number_of_requeueings=0,
        dispatch_limit_seconds=2**63 - 1,
    )
    assert wait == 30 * 86400
    assert isinstance(verdict, Keep)
