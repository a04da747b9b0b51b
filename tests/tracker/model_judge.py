"""The tracker model's judge: the invariants, checked against ground truth when things happen.

This module owns what counts as a violation in the tracker's state machine (DESIGN §5,
issue 14's S1 to S3 and the ladder's rules). :class:`model_tracker.ModelTracker` tells the judge
about every KV write, ladder claim, act and completion, every object the ladder touches and
every `cleared` it publishes; the checks run at that instant against the model world, so a
violation is reported at the step that commits it. Messages start with the invariant's name
(S1, S2, S3, ladder, records, L1) — the proof tests match on them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from model_tracker import ModelTracker
from model_world import AW, Cluster, Obj

from clearance.events import EscalationStep
from clearance_tracker.escalation import Timing, after
from clearance_tracker.teardown import STEPS, Teardown, decode_record, encode


class TeardownJudge:
    """Mixed into the state machine: it supplies ``cluster``, ``attempt``, ``running``, ``now``."""

    cluster: Cluster
    tracker: ModelTracker
    attempt: int
    running: bool

    def __init__(self) -> None:
        self.cleared_at: dict[int, datetime] = {}
        self.completed: set[tuple[int, EscalationStep]] = set()
        self.acts: dict[tuple[int, EscalationStep], int] = {}
        self.crashes = 0

    def now(self) -> datetime:
        raise NotImplementedError

    def redispatch(self, record: Teardown) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ records

    def on_write(self, old: Teardown, new: Teardown) -> None:
        assert decode_record(encode(new)) == new, "records: a reload differs from the write"
        assert (old.key, old.attempt, old.teardown_started_at, old.deadlines) == (
            new.key,
            new.attempt,
            new.teardown_started_at,
            new.deadlines,
        ), "records: identity or deadlines changed"
        for uid, obj in old.objects.items():
            assert uid in new.objects, f"records: {obj.name} forgotten"
            if obj.gone:
                assert new.objects[uid].confirmed_at == obj.confirmed_at, "records: unconfirmed"
        for step, state in old.steps.items():
            if state.done_at is not None:
                assert new.steps[step] == state, f"ladder: {step} undone"
        if old.clearing is not None:
            assert new.clearing is not None, "S2: clearing undone"
            assert new.clearing.cleared_at == old.clearing.cleared_at, "S2: cleared_at moved"
        elif new.clearing is not None:
            left = self.cluster.alive_of(AW, up_to=new.attempt)
            assert not left, (
                f"S2: attempt {new.attempt} cleared while "
                f"{[(o.name, o.uid, o.attempt) for o in left]} exist"
            )

    def check_records(self, records: list[Teardown]) -> None:
        """Every tracked object is an object of this teardown; every confirmation is true."""
        for record in records:
            for obj in record.objects.values():
                truth = self.cluster.objects.get(obj.uid) or self.cluster.removed.get(obj.uid)
                assert truth is not None, f"records: {obj.uid} never existed"
                assert truth.appwrapper == AW, f"S3: tracks another AppWrapper's {obj.name}"
                assert truth.attempt <= record.attempt, f"S3: tracks a later {obj.name}"
                if obj.gone:
                    assert obj.uid not in self.cluster.objects, (
                        f"S2: {obj.name} ({obj.uid}) confirmed gone but exists"
                    )

    # ------------------------------------------------------------------- ladder

    def on_claim(self, record: Teardown, step: EscalationStep) -> None:
        due = record.deadlines.get(step)
        assert due is not None and self.now() >= due, f"ladder: {step} claimed before its deadline"
        assert due == expected_deadline(record, step, self.tracker.timing), (
            f"ladder: {step} deadline drifted"
        )
        for earlier in STEPS[: STEPS.index(step)]:
            if earlier in record.deadlines:
                assert record.step_done(earlier), f"ladder: {step} before {earlier}"
        assert (record.attempt, step) not in self.completed, f"ladder: {step} claimed again"
        assert record.clearing is None and record.open_objects, f"ladder: {step} claimed idle"

    def on_act(self, record: Teardown, step: EscalationStep, *, alerted: bool) -> None:
        assert not record.step_done(step), f"ladder: {step} acted after it was done"
        key = (record.attempt, step)
        self.acts[key] = self.acts.get(key, 0) + 1
        assert self.acts[key] <= 1 + self.crashes, f"ladder: {step} repeated without a crash"

    def on_complete(self, record: Teardown, step: EscalationStep) -> None:
        key = (record.attempt, step)
        assert key not in self.completed, f"ladder: {step} done twice"
        self.completed.add(key)

    def on_touch(self, record: Teardown, target: Obj, what: str) -> None:
        assert target.appwrapper == AW, f"S3: {what} of another AppWrapper's {target.name}"
        assert target.attempt <= record.attempt, f"S3: {what} of a later attempt's {target.name}"
        assert not (self.running and target.attempt == self.attempt), (
            f"S3: {what} of {target.name} of the running attempt {self.attempt}"
        )

    def check_ladder_kept_time(self, record: Teardown | None) -> None:
        """L1: a step whose time has come is done, unless another replica's claim is live."""
        if record is None or record.clearing is not None or not record.open_objects:
            return
        now = self.now()
        for step in STEPS:
            due = record.deadlines.get(step)
            if due is None or record.step_done(step):
                continue
            if now < due:
                return
            state = record.steps.get(step)
            held = (
                state is not None
                and state.claimed_by != record.owner
                and now < after(state.claimed_at, self.tracker.timing.claim_timeout)
            )
            assert held, f"L1: {step} due at {due} and not done at {now}"
            return

    # ------------------------------------------------------------------ cleared

    def on_cleared(self, record: Teardown) -> None:
        assert record.clearing is not None
        first = self.cleared_at.setdefault(record.attempt, record.clearing.cleared_at)
        assert first == record.clearing.cleared_at, "S2: two different cleared for one attempt"
        left = self.cluster.alive_of(AW, up_to=record.attempt)
        assert not left, f"S2: cleared published while {[o.name for o in left]} exist"
        self.redispatch(record)


def expected_deadline(record: Teardown, step: EscalationStep, timing: Timing) -> datetime:
    """DESIGN §4.3: counted from teardownStartedAt; finalizer removal after force deletion."""
    policy, start = record.policy, record.teardown_started_at
    if step == "stuck_alert":
        return start + timedelta(seconds=policy.stuck_alert_seconds)
    force = start + timedelta(seconds=policy.force_deletion_seconds)
    return force if step == "force_deletion" else after(force, timing.finalizer_removal_delay)
