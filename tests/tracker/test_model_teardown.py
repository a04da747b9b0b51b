"""Model-level schedules of the tracker: its pure rules against a world that misbehaves.

The state machine (:mod:`model_machine`) drives the tracker's pure modules (inventory,
confirmation, escalation) the way the service does, through thousands of schedules of a
dispatcher requeueing attempt after attempt, controllers creating pods during teardown,
finalizers and lost nodes, a watch stream that reorders, duplicates, drops, replays stale
events and relists, two replicas that crash mid-verification, mid-escalation and
mid-publication, reload everything from the KV bytes and take records over, and a clock that
jumps past deadlines. Its judge (:mod:`model_judge`) checks after every step and at every
effect:

* S1 — no object of attempt N+1 is created while an object of attempt ≤ N exists;
* S2 — `clearing` is fixed only when no object of attempts ≤ N exists, one `cleared_at` per
  attempt, and every confirmation is true (a UID confirmed gone does not exist);
* S3 — only objects of the teardown are tracked and touched (never another AppWrapper's, a
  later attempt's or the running attempt's);
* ladder — each step claimed not before its deadline, in order, done at most once per attempt,
  repeated only after a crash;
* records — what a restart reloads is what was written; confirmations, steps and
  `cleared_at` are never undone;
* L1 — at the end of every example, faults stopped: each step whose deadline passed with
  objects open is done, and once the world is healed `cleared` and the redispatch follow.

The proofs at the bottom run the same machine with one rule deliberately broken (a test-only
variant passed in through :class:`model_tracker.Rules`) and assert that the machine finds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import Phase
from hypothesis.stateful import run_state_machine_as_test
from model_machine import OPS, SLOWNESS, TeardownMachine
from model_tracker import Rules
from model_world import AW
from tests.support.modelcheck import model_settings, model_timeout

from clearance.events import EscalationStep, TeardownPolicy
from clearance_tracker import confirmation, escalation
from clearance_tracker.confirmation import Confirmation, Outcome
from clearance_tracker.escalation import Timing
from clearance_tracker.teardown import STEPS, Clearing, StepState, Teardown, record_key

T = TypeVar("T")

MODEL_EXAMPLES = 2000
"""Schedules per `make test` (at the default profile; ``nightly`` runs ten times as many)."""
MODEL_STEPS = 50
"""Steps per schedule at most: a few cycles of requeue, teardown and redispatch with faults."""

pytestmark = pytest.mark.timeout(model_timeout(120))
"""The machine takes ~25 s here at the default profile; a profile with more examples waits
proportionally longer."""

TestTrackerModel = TeardownMachine.TestCase
TestTrackerModel.settings = model_settings(examples=MODEL_EXAMPLES, steps=MODEL_STEPS)


# --------------------------------------------------------------------------- the proofs


def _finds(rules: Rules, invariant: str) -> None:
    """The machine, run with ``rules``, fails with the violation ``invariant`` (a regex)."""

    class Broken(TeardownMachine):
        rules_under_test = rules

    proof = model_settings(
        examples=600, steps=MODEL_STEPS, scaled=False, phases=[Phase.generate], database=None
    )
    with pytest.raises(AssertionError, match=rf"^{invariant}"):
        run_state_machine_as_test(Broken, settings=proof)


def _clears_one_object_early(record: Teardown, **kw: Any) -> Outcome | None:
    outcome = confirmation.apply_verification(record, **kw)
    if outcome is None or outcome.record.clearing is not None:
        return outcome
    if len(outcome.record.open_objects) == 1:
        early = Clearing(cleared_at=kw["now"], by=kw["by"])
        return Outcome(msgspec.structs.replace(outcome.record, clearing=early))
    return outcome


def test_model_catches_a_cleared_rule_that_clears_one_object_early() -> None:
    _finds(Rules(apply_verification=_clears_one_object_early), r"S2: attempt \d+ cleared while")


def _terminating_counts_as_gone(record: Teardown, **kw: Any) -> Outcome:
    outcome = confirmation.apply_event(record, **kw)
    meta = kw["snapshot"].metadata
    tracked = outcome.record.objects.get(meta.uid)
    if meta.deletion_timestamp is None or tracked is None or tracked.gone:
        return outcome
    done = msgspec.structs.replace(tracked, confirmed_at=kw["now"], confirmed_how="watch_deleted")
    objects = outcome.record.objects | {meta.uid: done}
    return Outcome(
        msgspec.structs.replace(outcome.record, objects=objects),
        (*outcome.confirmed, Confirmation(done, "watch_deleted")),
    )


def test_model_catches_a_deletion_timestamp_taken_as_proof_of_deletion() -> None:
    _finds(Rules(apply_event=_terminating_counts_as_gone), "S2: .* confirmed gone but exists")


def _first_open_step(record: Teardown) -> EscalationStep | None:
    if record.clearing is not None or not record.open_objects:
        return None
    for step in STEPS:
        if step in record.deadlines and not record.step_done(step):
            return step
    return None


def _next_work_ignoring_deadlines(
    record: Teardown, *, now: datetime, me: str, timing: Timing, verified: bool = False
) -> escalation.Work | None:
    work = escalation.next_work(record, now=now, me=me, timing=timing, verified=verified)
    if work is None and record.owner == me and (step := _first_open_step(record)):
        return step
    return work


def _claim_ignoring_deadlines(
    record: Teardown, step: EscalationStep, *, now: datetime, me: str, timing: Timing
) -> Teardown | None:
    if record.owner != me or _first_open_step(record) != step or step in record.steps:
        return None
    steps = record.steps | {step: StepState(claimed_by=me, claimed_at=now)}
    return msgspec.structs.replace(record, steps=steps)


def test_model_catches_a_ladder_that_escalates_before_the_deadline() -> None:
    rules = Rules(next_work=_next_work_ignoring_deadlines, claim=_claim_ignoring_deadlines)
    _finds(rules, "ladder: .* claimed before its deadline")


# --------------------------------------------------------------- replayed schedules


class Script:
    """Scripted arguments for the machine's operations: one schedule, replayed exactly."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)

    def number(self, n: int) -> int:
        value = self.values.pop(0) if self.values else 0
        assert value < n
        return value

    def flag(self) -> bool:
        return self.number(2) == 1

    def pick(self, options: Sequence[T]) -> T:
        return options[self.number(len(options))]


def test_model_replays_a_verification_overtaken_by_a_deletion_and_a_new_pod() -> None:
    """The schedule of the defect the model found (docs/DECISIONS.md, model checking): a slow
    verification LISTs while the Job hangs on a finalizer; the Job's controller adds a pod
    whose ADDED is late; the Job and the bare pod go and their DELETED events are committed;
    then the verification commits. Its reads predate those deletions, so it must not clear."""
    machine = TeardownMachine()
    faults = frozenset({"stuck", "controllers", "slow", "stream"})
    machine.configure(TeardownPolicy(pause_seconds=0), faults, OPS, [1] * len(OPS))
    machine.dispatch(1, frozenset({"job1-job"}))

    def run(op: str, *values: int, fates: tuple[str, ...] = ()) -> None:
        getattr(machine, f"op_{op}")(Script(*values))
        for fate in fates:
            machine.cluster.route(fate)  # type: ignore[arg-type]
        while machine.cluster.fresh:
            machine.cluster.route("on_time")
        machine.tracked_objects_are_this_teardowns_and_confirmations_true()

    run("requeue", 0)
    run("sweep")
    run("started", 0, 1)  # acked, evaluated: the first verification
    run("clock", 2, 3)  # 11 s pass; no kubelet, no scan
    run("scan", SLOWNESS.index(8))  # a verification whose LIST is slow
    me = machine.tracker.replicas["r1"]
    assert me.verifying is not None
    assert [s.metadata.name for s in me.verifying.listed] == ["job1-job", "job1-solo"]
    run("job_pod", 0, fates=("late",))  # its ADDED is held back
    run("finalizer", 0)  # the Job goes
    run("kubelet", 0)  # and the bare pod
    run("sweep")  # both DELETED events are committed
    record = machine.tracker.kv.get(record_key(AW.uid, 1))
    assert record is not None and record.all_confirmed
    run("commit")  # the judge fails here if the verification clears
    record = machine.tracker.kv.get(record_key(AW.uid, 1))
    assert record is not None and record.clearing is None
    machine.teardown()  # liveness: once the pod goes too, cleared and the redispatch follow
    assert machine.attempt == 2
