"""The rack-loss judge on hand-made records: each check passes a clean case and catches its
failure (the latency bound, a missing redispatch, an S1 breach, a rate above the client's
bucket, a 429 retried before its Retry-After)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.bench.rack_analysis import Limits, RackVerdict, Request, judge, manners, peak_window
from tests.chaos.history import Published
from tests.chaos.test_checker import REF, cleared, pod

from clearance import events

LIMITS = Limits(qps=10, burst=10, force_seconds=5, redispatch_bound=10)
AGENT = "clearance-dispatcher/0.1.0 (x; pid 1)"


def teardown(*, attempt: int, t: float) -> Published:
    event = events.CycleTeardownStarted(
        appwrapper=REF, attempt=attempt, occurred_at=datetime.fromtimestamp(t, UTC), inventory=()
    )
    return Published(1, t + 0.2, "s", "id", event)


def request(at: float, *, code: int = 200, digest: str = "d", retry_after: int = 0) -> Request:
    return Request(at, at + 0.01, code, AGENT, digest, retry_after)


def rack(*, recreated_at: float) -> RackVerdict:
    writes = [
        pod(1, "ADDED", "aw0-0", attempt=1, t=1.0),
        pod(2, "DELETED", "aw0-0", attempt=1, t=105.5),
        pod(3, "ADDED", "aw0-0-2", attempt=2, t=recreated_at),
    ]
    cycle = [teardown(attempt=1, t=100.0), cleared(2, attempt=1, t=105.6)]
    return judge(writes=writes, cycle=cycle, requests=[], limits=LIMITS, window=(99, 120))


def test_a_gang_back_within_the_bound_after_its_force_deadline_passes() -> None:
    verdict = rack(recreated_at=106.0)
    assert verdict.failures == []
    assert verdict.figures["force_deadline_to_last_redispatch_create_s"]["max"] == 1.0
    assert verdict.figures["held_past_force_deadline"] == 1


def test_a_gang_back_later_than_the_bound_fails() -> None:
    assert any("redispatched > 10 s" in f for f in rack(recreated_at=116.0).failures)


def test_a_gang_never_back_fails() -> None:
    cycle = [teardown(attempt=1, t=100.0)]
    writes = [pod(1, "ADDED", "aw0-0", attempt=1, t=1.0)]
    verdict = judge(writes=writes, cycle=cycle, requests=[], limits=LIMITS, window=(99, 120))
    assert any("never redispatched" in f for f in verdict.failures)


def test_attempt_two_created_while_attempt_one_exists_is_a_safety_failure() -> None:
    writes = [
        pod(1, "ADDED", "aw0-0", attempt=1, t=1.0),
        pod(2, "ADDED", "aw0-0-2", attempt=2, t=105.0),
        pod(3, "DELETED", "aw0-0", attempt=1, t=105.5),
    ]
    cycle = [teardown(attempt=1, t=100.0)]
    verdict = judge(writes=writes, cycle=cycle, requests=[], limits=LIMITS, window=(99, 120))
    assert verdict.figures["safety_violation_count"] == 1


def test_the_busiest_second_is_counted_over_sliding_windows() -> None:
    assert peak_window([0.0, 0.5, 0.9, 1.4, 1.45, 3.0]) == 4
    assert peak_window([]) == 0


def test_a_burst_above_the_client_bucket_fails_and_one_within_it_passes() -> None:
    allowed = int((LIMITS.burst + LIMITS.qps) * 1.05 + 2)
    for count, fails in ((allowed, False), (allowed + 1, True)):
        verdict = RackVerdict()
        burst = [request(i * 0.001, digest=str(i)) for i in range(count)]
        manners(burst, LIMITS, verdict, window=(0, 10))
        assert bool(verdict.failures) is fails, count


def test_a_429_must_be_retried_no_sooner_than_its_retry_after() -> None:
    polite, rude = RackVerdict(), RackVerdict()
    manners([request(0, code=429, retry_after=1), request(1.02)], LIMITS, polite, window=(0, 5))
    manners([request(0, code=429, retry_after=1), request(0.3)], LIMITS, rude, window=(0, 5))
    assert polite.failures == []
    assert polite.figures["answered_429_total"] == 1
    assert any("before Retry-After" in f for f in rude.failures)


def test_another_request_on_the_same_path_is_not_taken_for_the_retry() -> None:
    verdict = RackVerdict()
    log = [request(0, code=429, retry_after=1, digest="a"), request(0.1, digest="b")]
    manners([*log, request(1.1, digest="a")], LIMITS, verdict, window=(0, 5))
    assert verdict.failures == []


def test_an_identical_request_of_another_task_is_not_taken_for_the_retry() -> None:
    verdict = RackVerdict()
    throttled = Request(0, 0.01, 429, AGENT, "same", 1, request_id="1-7")
    other = Request(0.02, 0.03, 200, AGENT, "same", 0, request_id="1-8")
    retry = Request(1.05, 1.06, 200, AGENT, "same", 0, request_id="1-7")
    manners([throttled, other, retry], LIMITS, verdict, window=(0, 5))
    assert verdict.failures == []
    early = RackVerdict()
    manners([throttled, Request(0.02, 0.03, 200, AGENT, "same", 0, request_id="1-7")], LIMITS,
            early, window=(0, 5))  # fmt: skip
    assert early.failures
