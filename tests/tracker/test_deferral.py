"""The deferral rule (which failures are expected unavailability) and its throttled line."""

from __future__ import annotations

import logging

import nats.errors
import nats.js.errors
import pytest
from prometheus_client import CollectorRegistry

from clearance import bus
from clearance.fencing import Fenced
from clearance.kube import KubeError
from clearance_tracker.deferral import REASONS, DeferralLog, reason_of
from clearance_tracker.metrics import TrackerMetrics


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (Fenced("term 2 is not held"), "term"),
        (nats.errors.NoRespondersError(), "nats"),
        (nats.js.errors.ServiceUnavailableError(), "nats"),
        (nats.errors.TimeoutError(), "nats"),
        (bus.StreamUnavailableError("no leader"), "nats"),
        (KubeError(code=0, reason="Unreachable", message="refused"), "api"),
        (KubeError(code=429, reason="TooManyRequests", message="slow down"), "api"),
        (KubeError(code=503, reason="ServiceUnavailable", message="down"), "api"),
        (TimeoutError(), "timeout"),
    ],
)
def test_expected_unavailability_has_a_reason(exc: BaseException, reason: str) -> None:
    assert reason_of(exc) == reason


@pytest.mark.parametrize(
    "exc",
    [
        KubeError(code=403, reason="Forbidden", message="no"),
        KubeError(code=422, reason="Invalid", message="bad"),
        ValueError("a bug"),
        nats.js.errors.KeyWrongLastSequenceError(),
    ],
)
def test_anything_else_is_an_error(exc: BaseException) -> None:
    assert reason_of(exc) is None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _deferred(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value(
        "clearance_tracker_evaluations_deferred_total", {"reason": reason}
    )
    assert value is not None
    return value


def _deferrals(clock: _Clock) -> tuple[DeferralLog, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = TrackerMetrics(registry)
    log = DeferralLog(
        logging.getLogger("test.deferral"), metrics.evaluations_deferred, interval=10, clock=clock
    )
    return log, registry


def test_one_line_per_reason_per_interval_and_every_deferral_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    deferrals, registry = _deferrals(clock)
    with caplog.at_level(logging.WARNING, logger="test.deferral"):
        for _ in range(5):
            assert deferrals.failed(Fenced("x"), what="teardown evaluation", key="k")
            clock.now += 1
        deferrals.failed(nats.errors.NoRespondersError(), what="teardown evaluation", key="k")
        clock.now += 10
        deferrals.failed(Fenced("x"), what="teardown evaluation", key="k")
    lines = [r for r in caplog.records if r.name == "test.deferral"]
    assert [(r.levelname, r.__dict__["reason"]) for r in lines] == [
        ("WARNING", "term"),
        ("WARNING", "nats"),
        ("WARNING", "term"),
    ]
    assert lines[-1].__dict__["deferred_since_last_line"] == 4
    assert all(r.exc_info is None for r in lines)
    assert _deferred(registry, "term") == 6


def test_a_real_failure_is_an_error_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    deferrals, registry = _deferrals(_Clock())
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        with caplog.at_level(logging.WARNING, logger="test.deferral"):
            assert not deferrals.failed(exc, what="teardown evaluation", key="k")
    (line,) = [r for r in caplog.records if r.name == "test.deferral"]
    assert line.levelname == "ERROR" and line.exc_info is not None
    assert sum(_deferred(registry, reason) for reason in REASONS) == 0
