"""The dispatcher's state machine: one AppWrapper's requeue cycles under faults, judged.

This module owns the schedule and the judge of the dispatcher's model check
(test_model_cycle). The world (:mod:`model_api`) runs the pods of an attempt or fails them
(also later: pods fail or are evicted), a truthful model tracker publishes `cleared` of an
attempt once nothing of it is left, and the schedule delivers watch events to the cache on
time, late, never or again, delivers `cleared` once, twice, stale, or for another AppWrapper
or attempt, stretches time, loses nodes, and restarts the dispatcher between any two steps of
its work (the cache is rebuilt from a LIST, the status is what was last written). The
dispatcher (:mod:`model_dispatcher`) is the service's glue over its pure modules.

The judge checks at every status write, creation and publication, and after every step:

* S1 — no item of attempt N+1 is created while an object of an attempt ≤ N exists, and no
  dispatch of N+1 begins before the tracker published `cleared` of N and it was accepted;
* attempts — ``attempt`` counts the dispatches begun, ``tearingDown`` is the attempt torn
  down, a `cleared` is accepted only for it and only once, announcements name it;
* L2 — a requeue only for an attempt the world failed, at most one decision per attempt,
  ``numberOfRequeueings`` equals the requeues, never before the wait, the wait grown as
  ``growthType`` says, ``maxNumRequeuings`` requeues at most and then Failed for good;
* records — the bookkeeping reads back as written (a restart sees the same status);
* L1 (at the end of every example) — faults stop: a teardown's `cleared` is followed by the
  redispatch, a failed attempt by its requeue (or Failed at the limit), until one runs.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from tests.dispatcher.model_api import KEY, UID, Api, Fate, appwrapper, at
from tests.dispatcher.model_dispatcher import Abort, Decisions, ModelDispatcher, Published

from clearance.bookkeeping import parse, render
from clearance_dispatcher.status import Observed

T = TypeVar("T")


class Choices:
    """The arguments of one step, from a generator seeded by one drawn integer."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def number(self, n: int) -> int:
        return self.random.randrange(n)

    def flag(self) -> bool:
        return self.number(2) == 1

    def pick(self, options: Sequence[T]) -> T:
        return options[self.number(len(options))]


FAULTS = ("stream", "cleared", "crashes", "failures", "stuck", "slow")
"""Fault classes, a subset per schedule: ``stream`` (cache events late, lost, replayed),
``cleared`` (duplicate, stale and foreign `cleared`), ``crashes`` (restarts between any two
steps), ``failures`` (pods of a running attempt fail or are evicted), ``stuck`` (lost nodes
hold pods), ``slow`` (time passes without the world or the tracker catching up)."""

OPS: dict[str, tuple[int, str | None]] = {
    "reconcile": (4, None),
    "run": (4, None),
    "clock": (5, None),
    "sweep": (3, None),
    "tracker": (1, None),
    "resync": (1, None),
    "cleared": (3, None),
    "late": (2, "stream"),
    "stale": (2, "stream"),
    "again": (2, "cleared"),
    "foreign": (2, "cleared"),
    "crash": (2, "crashes"),
    "fail": (2, "failures"),
    "evict": (2, "failures"),
    "node": (2, "stuck"),
}
FATES: tuple[Fate, ...] = ("on_time",) * 6 + ("late",) * 3 + ("lost",)


@dataclass(frozen=True)
class Policy:
    """The AppWrapper's gang size and ``requeuing`` spec for one schedule."""

    pods: int
    wait: int
    growth: str
    max_wait: int
    limit: int
    pause: int


policies = st.builds(
    Policy,
    pods=st.sampled_from([1, 2, 3]),
    wait=st.sampled_from([10, 30]),
    growth=st.sampled_from(["exponential", "linear", "none"]),
    max_wait=st.sampled_from([0, 45]),
    limit=st.sampled_from([0, 1, 3]),
    pause=st.sampled_from([0, 5]),
)


def expected_wait(requeues: int, policy: Policy) -> int:
    """The requeue wait after ``requeues`` requeues, as MCAD v1 grows it (own arithmetic)."""
    value = policy.wait
    for _ in range(requeues):
        if policy.growth == "exponential":
            value = max(value, 1) * 2
        elif policy.growth == "linear":
            value += policy.wait
        if policy.max_wait > 0:
            value = min(value, policy.max_wait)
    return value


class CycleMachine(RuleBasedStateMachine):
    decisions = Decisions()

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self.violated = False
        self.reads = 0
        self.faults: frozenset[str] = frozenset()
        self.ops: list[str] = []
        self.fates: list[bool] = []
        self.healthy_from: int | None = None
        self.induced: set[int] = set()
        self.begun: list[int] = []
        self.decided: dict[int, str] = {}
        self.requeues = 0
        self.messages: dict[str, Published] = {}
        self.announced: set[int] = set()
        self.cleared_published: dict[int, datetime] = {}
        self.cleared_stream: list[tuple[str, int, datetime]] = []
        self.delivered_cleared = 0
        self.accepted: list[int] = []
        self.work: Iterator[str] | None = None

    def now(self) -> datetime:
        self.reads += 1
        return at(self.seconds) + timedelta(microseconds=self.reads)

    def runs(self, attempt: int) -> bool:
        if self.healthy_from is not None and attempt >= self.healthy_from:
            return True
        return self.fates[(attempt - 1) % len(self.fates)]

    def fails(self, attempt: int) -> bool:
        return attempt in self.induced or not self.runs(attempt)

    @initialize(
        policy=policies,
        faults=st.frozensets(st.sampled_from(FAULTS)),
        fates=st.lists(st.booleans(), min_size=1, max_size=6),
    )
    def submit(self, policy: Policy, faults: frozenset[str], fates: list[bool]) -> None:
        self.policy = policy
        self.faults = faults
        self.fates = fates
        self.ops = [op for op, (w, f) in OPS.items() if f in faults | {None} for _ in range(w)]
        self.api = Api(aw=appwrapper(**dataclasses.asdict(policy)))
        self.dispatcher = self.start_dispatcher()

    def start_dispatcher(self) -> ModelDispatcher:
        return ModelDispatcher(
            self.api, judge=self, clock=self.now, runs=self.runs, decisions=self.decisions
        )

    @rule(choice=st.integers(0, 2**32), fates=st.integers(0, 2**32))
    def step(self, choice: int, fates: int) -> None:
        """One operation chosen (with its arguments) by ``choice``; ``fates`` decides how the
        watch events it causes travel."""
        try:
            data = Choices(choice)
            getattr(self, f"op_{data.pick(self.ops)}")(data)
            routing = Choices(fates)
            while self.api.fresh:
                self.api.route(routing.pick(FATES) if "stream" in self.faults else "on_time")
        except AssertionError:
            self.violated = True  # the liveness check in teardown() must not mask it
            raise

    # ------------------------------------------------------------ the dispatcher

    def advance(self) -> bool:
        """One step of the reconcile in progress (a new one if none); False when it ended."""
        if self.work is None:
            self.work = self.dispatcher.reconcile()
        try:
            next(self.work)
            return True
        except (StopIteration, Abort):
            self.work = None
            return False

    def op_reconcile(self, data: Choices) -> None:
        self.advance()

    def op_run(self, data: Choices) -> None:
        while self.advance():
            pass

    def op_crash(self, data: Choices) -> None:
        """kill -9 between two steps; the new process lists the API and reads the status."""
        self.work = None
        self.dispatcher = self.start_dispatcher()

    # ----------------------------------------------------------------- the world

    def current_pods(self) -> list[str]:
        attempt = self.dispatcher.observed.clearance.attempt
        return sorted(
            u for u, p in self.api.pods.items() if p.attempt == attempt and not p.deleting
        )

    def op_fail(self, data: Choices) -> None:
        """The pods of the running attempt fail (a node dies, the job crashes)."""
        if pods := self.current_pods():
            self.induced.add(self.api.pods[pods[0]].attempt)
            for uid in pods:
                self.api.touch(self.api.pods[uid], phase="Failed")

    def op_evict(self, data: Choices) -> None:
        """One pod of the running attempt is evicted and deleted."""
        if pods := self.current_pods():
            pod = self.api.pods[data.pick(pods)]
            self.induced.add(pod.attempt)
            self.api.remove_pod(pod)

    def op_node(self, data: Choices) -> None:
        if pods := sorted(self.api.pods):
            pod = self.api.pods[data.pick(pods)]
            pod.node_lost = data.flag()

    def catch_up(self) -> None:
        """The garbage collector and healthy kubelets, then the model tracker."""
        self.api.collect_garbage()
        self.api.kubelets_finish()
        self.op_tracker(Choices(0))

    def op_clock(self, data: Choices) -> None:
        self.seconds += data.pick((1, 3, 7, 15, 40, 120))
        if "slow" not in self.faults or data.flag():
            self.catch_up()
            self.op_sweep(data)

    def op_tracker(self, data: Choices) -> None:
        """The tracker (truthful): `cleared` of an announced attempt once nothing of it is left."""
        for attempt in sorted(self.announced - set(self.cleared_published)):
            if not self.api.objects_of(before=attempt + 1):
                cleared_at = self.now()
                self.cleared_published[attempt] = cleared_at
                self.cleared_stream.append((UID, attempt, cleared_at))

    # ---------------------------------------------------------------- the streams

    def op_sweep(self, data: Choices) -> None:
        while change := self.api.next_change():
            self.dispatcher.apply(change.kind, change.body)

    def op_resync(self, data: Choices) -> None:
        self.dispatcher.resync()

    def op_late(self, data: Choices) -> None:
        if change := self.api.late_change(data.number(64)):
            self.dispatcher.apply(change.kind, change.body)

    def op_stale(self, data: Choices) -> None:
        """A cache event delivered before comes again (republished with a new Msg-Id)."""
        if self.api.delivered:
            change = data.pick(self.api.delivered)
            self.dispatcher.apply(change.kind, change.body)

    def deliver_cleared(self, uid: str, attempt: int, cleared_at: datetime) -> None:
        if self.dispatcher.handle_cleared(uid=uid, attempt=attempt, cleared_at=cleared_at):
            self.accepted.append(attempt)

    def op_cleared(self, data: Choices) -> None:
        """The next `cleared` on the stream reaches the dispatcher."""
        if self.delivered_cleared < len(self.cleared_stream):
            self.delivered_cleared += 1
            self.deliver_cleared(*self.cleared_stream[self.delivered_cleared - 1])

    def op_again(self, data: Choices) -> None:
        """A `cleared` delivered before comes again (a redelivery, a stale attempt)."""
        if self.delivered_cleared:
            self.deliver_cleared(*self.cleared_stream[data.number(self.delivered_cleared)])

    def op_foreign(self, data: Choices) -> None:
        """`cleared` of an earlier AppWrapper of the name, or of an attempt never torn down."""
        attempt = data.number(self.dispatcher.observed.clearance.attempt + 3)
        uid = data.pick([UID, "aw-uid-earlier"])
        truth = parse(self.api.aw.get("status", {}).get("clearance") or {})
        if uid == UID and (attempt in self.announced or attempt == truth.tearing_down):
            return  # indistinguishable from the genuine one (`again` replays those)
        self.deliver_cleared(uid, attempt, self.now())

    # ---------------------------------------------------------------- the judge

    def on_status(self, before: Observed, after: Observed) -> None:
        b, a = before.clearance, after.clearance
        assert parse(render(a)) == a, "records: the bookkeeping reads back differently"
        assert a.tearing_down in (None, a.attempt), "attempts: tearingDown is not the attempt"
        if a.attempt != b.attempt:
            assert a.attempt == b.attempt + 1 and a.phase == "Dispatching", "attempts: jumped"
            assert b.phase != "Failed", "attempts: a Failed AppWrapper dispatched again"
            previous = a.attempt - 1
            assert previous == 0 or previous in self.cleared_published, (
                f"S1: attempt {a.attempt} begun without the tracker's cleared of {previous}"
            )
            assert previous == 0 or previous in self.accepted, (
                f"S1: attempt {a.attempt} begun before cleared of {previous} was accepted"
            )
            self.begun.append(a.attempt)
        if b.tearing_down is None and a.tearing_down is not None:
            self.on_decision(before, after)
        if b.tearing_down is not None and a.tearing_down is None:
            attempt = b.tearing_down
            assert attempt in self.cleared_published, f"S1: cleared of {attempt} never published"
            assert a.cleared_at == self.cleared_published[attempt], "attempts: wrong clearedAt"
        requeues = after.number_of_requeueings
        assert requeues == self.requeues, f"L2: numberOfRequeueings {requeues} != {self.requeues}"

    def on_decision(self, before: Observed, after: Observed) -> None:
        attempt, phase = after.clearance.tearing_down, after.clearance.phase
        assert attempt is not None
        assert attempt not in self.decided, f"L2: attempt {attempt} decided twice"
        self.decided[attempt] = str(phase)
        if before.clearance.phase == "Dispatching":
            return  # a creation failure (not modelled: items always create)
        policy = self.policy
        waited = expected_wait(before.number_of_requeueings, policy)
        dispatched_at = before.clearance.dispatched_at
        assert dispatched_at is not None
        assert self.now() > dispatched_at + timedelta(seconds=waited), "L2: before the wait"
        assert self.fails(attempt), f"L2: attempt {attempt} requeued while its pods run"
        limit = policy.limit
        if phase == "TearingDown":
            self.requeues += 1
            assert limit == 0 or self.requeues <= limit, "L2: more requeues than the limit"
            grown = expected_wait(self.requeues, policy)
            assert after.requeueing_time_in_seconds == grown, "L2: wait not grown as specified"
        else:
            assert phase == "Failed" and limit > 0 and self.requeues >= limit, "L2: failed early"

    def on_create(self, attempt: int) -> None:
        left = self.api.objects_of(before=attempt)
        assert not left, f"S1: attempt {attempt} created while {left} exist"

    def on_publish(self, message: Published) -> None:
        if message.msg_id in self.messages:
            return  # deduplicated by JetStream
        self.messages[message.msg_id] = message
        cl = self.dispatcher.observed.clearance
        if message.type == "cycle.teardown.started":
            assert message.attempt == cl.tearing_down, "attempts: announced another attempt"
            self.announced.add(message.attempt)
        elif message.type == "cycle.dispatched":
            assert message.attempt == cl.attempt, "attempts: dispatched announces another"

    @invariant()
    def attempts_count_dispatches(self) -> None:
        try:
            self.check_attempts_count_dispatches()
        except AssertionError:
            self.violated = True
            raise

    def check_attempts_count_dispatches(self) -> None:
        if not hasattr(self, "api"):
            return
        cl = parse(self.api.aw.get("status", {}).get("clearance") or {})
        assert cl.attempt == len(self.begun), "attempts: attempt is not the dispatches begun"
        assert self.begun == list(range(1, len(self.begun) + 1)), "attempts: not 1, 2, 3, ..."
        assert len(set(self.accepted)) == len(self.accepted), "attempts: cleared accepted twice"

    # ------------------------------------------------------------------ liveness

    def settled(self) -> bool:
        """An attempt runs, or the AppWrapper Failed and its last teardown cleared."""
        cl = self.dispatcher.observed.clearance
        running = cl.phase == "Dispatched" and not self.fails(cl.attempt)
        return running or (cl.phase == "Failed" and cl.tearing_down is None)

    def teardown(self) -> None:
        """L1: faults stop; every teardown's `cleared` is followed by the redispatch, every
        failed attempt by its requeue (or Failed at the limit), until an attempt runs."""
        if self.violated:
            return  # a step already failed: report that, not its aftermath
        if not hasattr(self, "api"):
            return
        if currently_in_test_context():
            event(f"attempts dispatched by the schedule: {min(len(self.begun), 4)}")
        self.healthy_from = len(self.begun) + 1
        for pod in self.api.pods.values():
            pod.node_lost = False
        for _ in range(40):
            if self.settled():
                break
            self.seconds += 60
            self.catch_up()
            while self.api.fresh:
                self.api.route("on_time")
            self.api.pending += self.api.late
            self.api.late.clear()
            self.op_sweep(Choices(0))
            self.dispatcher.resync()
            while self.delivered_cleared < len(self.cleared_stream):
                self.op_cleared(Choices(0))
            self.op_run(Choices(0))
        cl = self.dispatcher.observed.clearance
        assert self.settled(), (
            f"L1: stuck in {cl.phase} at attempt {cl.attempt} (tearing down {cl.tearing_down})"
        )
        if currently_in_test_context():
            event(f"requeues: {min(self.requeues, 3)}; ends {cl.phase}")


__all__ = ["KEY", "CycleMachine"]
