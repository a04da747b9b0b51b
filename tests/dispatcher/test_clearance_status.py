"""The bookkeeping in ``status.clearance``: one meaning per field, the old layout read once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.dispatcher.unit_support import T0

from clearance.bookkeeping import (
    LAYOUT,
    PHASES,
    ClearanceStatus,
    StuckEntry,
    parse,
    render,
)
from clearance_dispatcher.status import Patch, observe
from clearance_dispatcher.status import render as render_patch
from clearance_dispatcher.storage import STATUS_STORAGE

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
moments = st.integers(0, 10**6).map(lambda s: T0 + timedelta(microseconds=s * 1000))
statuses = st.builds(
    ClearanceStatus,
    phase=st.none() | st.sampled_from(PHASES),
    attempt=st.integers(0, 50),
    tearing_down=st.none() | st.integers(1, 50),
    dispatched_at=st.none() | moments,
    teardown_started_at=st.none() | moments,
    teardown_published=st.booleans(),
    cleared_at=st.none() | moments,
    cycle_traceparent=st.none() | st.just(TRACEPARENT),
    cycle_started_at=st.none() | moments,
    cycle_attempt=st.none() | st.integers(1, 50),
    reason=st.none() | st.sampled_from(["MinPodsNotRunning", "MaxNumRequeuingsReached"]),
    stuck=st.lists(
        st.builds(
            StuckEntry,
            kind=st.just("Pod"),
            name=st.text("abc-", min_size=1, max_size=8),
            uid=st.text("0123456789abcdef", min_size=1, max_size=8),
            node=st.none() | st.just("n1"),
            reason=st.just("node_lost"),
        ),
        max_size=3,
    ).map(tuple),
    terminating=st.integers(0, 8),
    invalid_generation=st.none() | st.integers(1, 9),
)


def _aw(clearance: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "aw"}, "status": {"clearance": clearance}}


@given(statuses)
def test_every_field_survives_a_write_and_a_read(status: ClearanceStatus) -> None:
    assert parse(render(status)) == status
    assert STATUS_STORAGE.read(_aw(render(status))) == status


def test_a_dispatch_creates_the_next_attempt_or_resumes_the_decided_one() -> None:
    assert ClearanceStatus().attempt_to_dispatch == 1
    assert ClearanceStatus(phase="Queued", attempt=3).attempt_to_dispatch == 4
    assert ClearanceStatus(phase="Dispatching", attempt=4).attempt_to_dispatch == 4
    for phase in ("Dispatched", "TearingDown", "Completed", "Failed"):
        assert ClearanceStatus(phase=phase, attempt=4).attempt_to_dispatch is None


def test_a_refused_spec_is_about_the_attempt_that_would_have_been_dispatched() -> None:
    assert ClearanceStatus().refused_attempt == 1
    assert ClearanceStatus(phase="Queued", attempt=2).refused_attempt == 3


def test_only_the_cleared_of_the_attempt_being_torn_down_is_awaited() -> None:
    status = ClearanceStatus(phase="TearingDown", attempt=2, tearing_down=2)
    assert status.awaits_cleared_of(2)
    assert not status.awaits_cleared_of(1) and not status.awaits_cleared_of(3)
    assert not ClearanceStatus(phase="Queued", attempt=2).awaits_cleared_of(2)


def test_an_old_layout_mid_teardown_reads_as_tearing_down_that_attempt() -> None:
    old = {
        "phase": "TearingDown",
        "attempt": 2,
        "teardownStartedAt": "2026-01-01T00:00:05.000000Z",
        "teardownPublished": True,
        "clearedAt": None,
        "cycleTraceparent": TRACEPARENT,
        "cycleStartedAt": "2026-01-01T00:00:05.000000Z",
        "reason": "MinPodsNotRunning",
        "stuck": [],
    }
    status = parse(old)
    assert status.legacy
    assert (status.attempt, status.tearing_down, status.cycle_attempt) == (2, 2, 2)
    assert status.teardown_published and status.cycle_open


def test_an_old_layout_after_cleared_dispatches_the_next_attempt() -> None:
    old = {
        "phase": "Queued",
        "attempt": 1,
        "teardownStartedAt": "2026-01-01T00:00:05.000000Z",
        "clearedAt": "2026-01-01T00:00:09.000000Z",
        "cycleTraceparent": TRACEPARENT,
        "cycleStartedAt": "2026-01-01T00:00:05.000000Z",
    }
    status = parse(old)
    assert status.tearing_down is None and status.cycle_attempt == 1
    assert status.attempt_to_dispatch == 2


def test_an_old_layout_of_a_redispatch_names_the_cycle_of_the_attempt_before() -> None:
    dispatching = parse({"phase": "Dispatching", "attempt": 3, "cycleTraceparent": TRACEPARENT})
    assert dispatching.cycle_attempt == 2 and dispatching.tearing_down is None
    failed = parse(
        {
            "phase": "Failed",
            "attempt": 3,
            "teardownStartedAt": "2026-01-01T00:01:00.000000Z",
            "cycleTraceparent": TRACEPARENT,
            "cycleStartedAt": "2026-01-01T00:00:05.000000Z",
        }
    )
    assert (failed.tearing_down, failed.cycle_attempt) == (3, 2)


def test_an_old_layout_is_rewritten_in_the_new_one_by_the_next_write() -> None:
    raw = _aw({"phase": "TearingDown", "attempt": 1, "teardownStartedAt": "2026-01-01T00:00:05Z"})
    obs = observe(raw)
    fields, clearance = render_patch(
        obs, Patch(at=T0, conditions={"DeletionStuck": (True, "stuck", "x")})
    )
    assert clearance is not None and render(clearance)["version"] == LAYOUT
    assert render(clearance)["tearingDown"] == 1
    (write,) = STATUS_STORAGE.writes(fields, clearance)
    assert write.subresource == "status"
    assert write.body["status"]["clearance"]["version"] == LAYOUT
    assert parse(write.body["status"]["clearance"]).legacy is False


def test_a_new_appwrapper_is_not_read_as_an_old_layout() -> None:
    assert not observe({"metadata": {}}).clearance.legacy
    assert observe({"metadata": {}}).clearance == ClearanceStatus()


def test_wrong_types_read_as_absent() -> None:
    status = parse(
        {
            "version": LAYOUT,
            "phase": "Sideways",
            "attempt": "3",
            "tearingDown": True,
            "clearedAt": "yesterday",
            "teardownPublished": "yes",
            "stuck": "none",
        }
    )
    assert status == ClearanceStatus()
