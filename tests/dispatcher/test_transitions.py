"""Status transitions, pure: each applies only from its phase and attempt, and no order of
``cleared`` events, duplicates or restarts lets attempt N+1 begin before ``cleared`` of N."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from tests.dispatcher.unit_support import T0
from tests.support.modelcheck import model_settings

from clearance.bookkeeping import ClearanceStatus, parse, render
from clearance_dispatcher import transitions as tr
from clearance_dispatcher.requeueing import Counts, Fail, Requeue
from clearance_dispatcher.status import Observed, Patch, observe
from clearance_dispatcher.status import render as render_patch

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
REQUEUE = Requeue("MinPodsNotRunning", "too few pods", number_of_requeueings=1, next_wait=20)


def _obs(**clearance: Any) -> Observed:
    return Observed(clearance=ClearanceStatus(**clearance))


def _apply(obs: Observed, patch: Patch | None) -> Observed:
    """What a successful write leaves in the status (as the API would store it)."""
    assert patch is not None
    fields, clearance = render_patch(obs, patch)
    status: dict[str, Any] = {"clearance": render(clearance or obs.clearance)}
    for name in ("numberOfRequeueings", "requeueingTimeInSeconds", "message"):
        if name in fields:
            status[name] = fields[name]
    return observe({"status": status})


def test_a_dispatch_begins_only_from_the_queue_for_the_next_attempt() -> None:
    queued = _obs(phase="Queued", attempt=1)
    assert tr.begin_dispatch(queued, attempt=1, now=T0) is None
    patch = tr.begin_dispatch(queued, attempt=2, now=T0)
    assert patch is not None and patch.clearance is not None
    assert (patch.clearance.phase, patch.clearance.attempt) == ("Dispatching", 2)
    assert tr.begin_dispatch(_obs(phase="Dispatched", attempt=1), attempt=2, now=T0) is None


def test_no_dispatch_begins_while_a_teardown_awaits_its_cleared() -> None:
    tearing = _obs(phase="Queued", attempt=1, tearing_down=1)
    assert tr.begin_dispatch(tearing, attempt=2, now=T0) is None


def test_a_teardown_decision_records_the_attempt_torn_down_and_opens_its_cycle() -> None:
    obs = _obs(phase="Dispatched", attempt=3)
    patch = tr.start_teardown(
        obs, attempt=3, decision=REQUEUE, cycle_traceparent=TRACEPARENT, now=T0
    )
    assert patch is not None and patch.clearance is not None
    cl = patch.clearance
    assert (cl.phase, cl.attempt, cl.tearing_down, cl.cycle_attempt) == ("TearingDown", 3, 3, 3)
    assert cl.cycle_traceparent == TRACEPARENT and cl.cycle_started_at == T0
    assert patch.status["numberOfRequeueings"] == 1
    assert (
        tr.start_teardown(obs, attempt=2, decision=REQUEUE, cycle_traceparent=None, now=T0) is None
    )


def test_a_teardown_decision_writes_the_counts_it_was_taken_on_in_the_same_patch() -> None:
    obs = Observed(
        clearance=ClearanceStatus(phase="Dispatched", attempt=1),
        counts={"pending": 0, "running": 8, "Succeeded": 0, "failed": 0},
    )
    counts = Counts(pending=0, running=5, terminating=3)
    patch = tr.start_teardown(
        obs, attempt=1, decision=REQUEUE, cycle_traceparent=TRACEPARENT, counts=counts, now=T0
    )
    assert patch is not None and patch.clearance is not None
    assert patch.status["running"] == 5 and "pending" not in patch.status
    assert patch.clearance.terminating == 3 and patch.clearance.phase == "TearingDown"


def test_a_failed_redispatch_keeps_the_open_cycle_of_the_attempt_before() -> None:
    obs = _obs(
        phase="Dispatching",
        attempt=2,
        cycle_traceparent=TRACEPARENT,
        cycle_started_at=T0,
        cycle_attempt=1,
    )
    later = T0 + timedelta(seconds=9)
    patch = tr.fail_creation(obs, attempt=2, reason="UnknownKind", message="no", now=later)
    assert patch is not None and patch.clearance is not None
    cl = patch.clearance
    assert (cl.phase, cl.tearing_down, cl.cycle_attempt, cl.cycle_started_at) == (
        "Failed",
        2,
        1,
        T0,
    )


def test_cleared_of_the_awaited_attempt_requeues_and_a_duplicate_is_ignored() -> None:
    obs = _obs(phase="TearingDown", attempt=2, tearing_down=2, teardown_started_at=T0)
    at = T0 + timedelta(seconds=3)
    patch = tr.accept_cleared(obs, attempt=2, cleared_at=at, now=at)
    assert patch is not None and patch.clearance is not None
    assert (patch.clearance.phase, patch.clearance.tearing_down) == ("Queued", None)
    assert patch.clearance.cleared_at == at and patch.clearance.attempt_to_dispatch == 3
    after = _apply(obs, patch)
    assert tr.accept_cleared(after, attempt=2, cleared_at=at, now=at) is None
    assert tr.accept_cleared(obs, attempt=1, cleared_at=at, now=at) is None


def test_cleared_of_a_failed_attempt_keeps_it_failed_and_closes_the_cycle() -> None:
    obs = _obs(
        phase="Failed",
        attempt=2,
        tearing_down=2,
        cycle_traceparent=TRACEPARENT,
        cycle_started_at=T0,
    )
    patch = tr.accept_cleared(obs, attempt=2, cleared_at=T0, now=T0)
    assert patch is not None and patch.clearance is not None
    assert (patch.clearance.phase, patch.clearance.tearing_down) == ("Failed", None)
    assert patch.clearance.cycle_started_at is None
    assert patch.clearance.attempt_to_dispatch is None


def test_cleared_with_room_requeues_and_begins_the_next_attempt_in_one_write() -> None:
    obs = _obs(phase="TearingDown", attempt=2, tearing_down=2, teardown_started_at=T0)
    at = T0 + timedelta(seconds=3)
    patch = tr.redispatch_on_cleared(obs, attempt=2, cleared_at=at, now=at)
    assert patch is not None and patch.clearance is not None
    cl = patch.clearance
    assert (cl.phase, cl.attempt, cl.tearing_down, cl.cleared_at) == ("Dispatching", 3, None, at)
    assert patch.conditions["Queueing"][0] is False  # the later change (FrontOfQueue) wins
    # Exactly the two transitions in a row: same bookkeeping as Queued, then Dispatching.
    queued = _apply(obs, tr.accept_cleared(obs, attempt=2, cleared_at=at, now=at))
    two = tr.begin_dispatch(queued, attempt=3, now=at)
    assert two is not None and two.clearance == cl
    after = _apply(obs, patch)
    assert tr.redispatch_on_cleared(after, attempt=2, cleared_at=at, now=at) is None


def test_cleared_of_a_failed_or_other_attempt_never_begins_a_dispatch() -> None:
    failed = _obs(phase="Failed", attempt=2, tearing_down=2)
    assert tr.redispatch_on_cleared(failed, attempt=2, cleared_at=T0, now=T0) is None
    tearing = _obs(phase="TearingDown", attempt=2, tearing_down=2)
    assert tr.redispatch_on_cleared(tearing, attempt=1, cleared_at=T0, now=T0) is None


def test_stuck_objects_are_recorded_only_for_the_open_teardown() -> None:
    obs = _obs(phase="TearingDown", attempt=2, tearing_down=2)
    assert tr.record_stuck(obs, attempt=1, stuck=(), step="stuck", summary="s", now=T0) is None
    assert tr.record_stuck(obs, attempt=2, stuck=(), step="stuck", summary="s", now=T0)


def test_unchanged_counts_write_nothing() -> None:
    obs = Observed(
        clearance=ClearanceStatus(phase="Dispatched", attempt=1),
        counts={"pending": 0, "running": 0, "Succeeded": 0, "failed": 0},
    )
    assert tr.record_counts(obs, attempt=1, counts=Counts(), min_available=2, now=T0) is None
    assert tr.record_counts(obs, attempt=1, counts=Counts(running=1), min_available=2, now=T0)


def _counts_patch(running: int, *, min_available: int) -> tr.Patch:
    obs = Observed(
        clearance=ClearanceStatus(phase="Dispatched", attempt=1),
        counts={"pending": 2, "running": 0, "Succeeded": 0, "failed": 0},
    )
    patch = tr.record_counts(
        obs, attempt=1, counts=Counts(running=running), min_available=min_available, now=T0
    )
    assert patch is not None
    return patch


def test_a_counts_only_write_waits_out_the_interval_since_the_last_one() -> None:
    patch = _counts_patch(1, min_available=2)
    assert tr.counts_write_delay(patch, since_last=0.25, interval=1.0) == 0.75
    assert tr.counts_write_delay(patch, since_last=1.5, interval=1.0) == 0.0
    assert tr.counts_write_delay(patch, since_last=0.0, interval=0.0) == 0.0


def test_a_running_condition_or_a_corrected_count_is_written_at_once() -> None:
    running = _counts_patch(2, min_available=2)
    assert "Running" in running.conditions
    assert tr.counts_write_delay(running, since_last=0.0, interval=1.0) == 0.0
    corrected = _counts_patch(1, min_available=2)
    assert tr.counts_write_delay(corrected, since_last=0.0, interval=1.0, at_once=True) == 0.0


# -------------------------------------------------------------------- orders of events


def _legacy(status: ClearanceStatus) -> ClearanceStatus:
    """The same status as a dispatcher before the explicit fields wrote it, read back."""
    old = render(status)
    for field in ("version", "tearingDown", "cycleAttempt"):
        old.pop(field)
    return parse(old)


class CycleOrders(RuleBasedStateMachine):
    """One AppWrapper's bookkeeping driven by every transition in any order the world allows,
    ``cleared`` of any attempt at any time (stale, duplicate, early, forged), restarts that
    re-read the status, and restarts that read the old layout of the same state."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = T0
        self.obs = _apply(Observed(), tr.enqueue(Observed(), reason="AwaitingHeadOfLine", now=T0))
        self.accepted: list[int] = []
        self.dispatched: list[int] = []

    def _tick(self) -> None:
        self.clock += timedelta(seconds=1)

    def _step(self, patch: Patch | None) -> None:
        if patch is not None:
            self.obs = _apply(self.obs, patch)

    @property
    def cl(self) -> ClearanceStatus:
        return self.obs.clearance

    @rule()
    def dispatch(self) -> None:
        self._tick()
        attempt = self.cl.attempt_to_dispatch
        patch = (
            None
            if attempt is None
            else tr.begin_dispatch(self.obs, attempt=attempt, now=self.clock)
        )
        if patch is not None:
            assert attempt == len(self.dispatched) + 1, "attempts count up by one"
            assert attempt == 1 or attempt - 1 in self.accepted, "dispatched before cleared"
            self.dispatched.append(attempt)
        self._step(patch)

    @rule(ok=st.booleans())
    def create(self, ok: bool) -> None:
        self._tick()
        attempt, now = self.cl.attempt, self.clock
        if ok:
            self._step(
                tr.finish_dispatch(self.obs, attempt=attempt, items=1, min_available=1, now=now)
            )
        else:
            self._step(
                tr.fail_creation(self.obs, attempt=attempt, reason="X", message="x", now=now)
            )

    @rule(requeue=st.booleans())
    def decide(self, requeue: bool) -> None:
        self._tick()
        decision = REQUEUE if requeue else Fail("MaxNumRequeuingsReached", "limit")
        self._step(
            tr.start_teardown(
                self.obs,
                attempt=self.cl.attempt,
                decision=decision,
                cycle_traceparent=TRACEPARENT,
                now=self.clock,
            )
        )

    @rule()
    def announce(self) -> None:
        if self.cl.tearing_down is not None:
            self._step(tr.announce_teardown(self.obs, attempt=self.cl.tearing_down, now=self.clock))

    @rule(which=st.sampled_from(["awaited", "again"]) | st.integers(0, 6))
    def cleared(self, which: str | int) -> None:
        self._tick()
        cl = self.cl
        if which == "awaited":
            attempt = cl.tearing_down if cl.tearing_down is not None else cl.attempt
        elif which == "again":
            attempt = self.accepted[-1] if self.accepted else 0
        else:
            assert isinstance(which, int)
            attempt = which
        patch = tr.accept_cleared(self.obs, attempt=attempt, cleared_at=self.clock, now=self.clock)
        if patch is None:
            return
        assert attempt not in self.accepted, "a cleared accepted twice"
        assert attempt == cl.tearing_down
        self.accepted.append(attempt)
        self._step(patch)
        if cl.phase == "TearingDown":  # and the next attempt may go now
            nxt = self.cl.attempt_to_dispatch
            assert nxt is not None
            assert tr.begin_dispatch(self.obs, attempt=nxt, now=self.clock) is not None

    @rule()
    def restart(self) -> None:
        """A new process reads what the last one wrote."""
        cl = self.cl
        self.obs = observe({"status": {"clearance": render(cl)}})
        assert self.cl == dataclasses.replace(cl, legacy=False)

    @rule()
    def restart_from_old_layout(self) -> None:
        """The old code's layout of this state reads the same; go on from it."""
        cl = self.cl
        old = _legacy(cl)
        assert old.tearing_down == cl.tearing_down
        assert old.attempt_to_dispatch == cl.attempt_to_dispatch
        if cl.cycle_open:
            assert old.cycle_attempt == cl.cycle_attempt
        self.obs = dataclasses.replace(self.obs, clearance=old)

    @invariant()
    def one_meaning(self) -> None:
        cl = self.cl
        assert cl.attempt == (self.dispatched[-1] if self.dispatched else 0)
        assert cl.tearing_down in (None, cl.attempt)
        assert cl.phase not in ("TearingDown",) or cl.tearing_down == cl.attempt


# Issue 14 Acceptance 3: at least 2,000 examples per state machine in `make test`.
CycleOrders.TestCase.settings = model_settings(examples=2000, steps=30)
test_no_order_of_events_dispatches_an_attempt_before_the_previous_one_cleared = CycleOrders.TestCase
