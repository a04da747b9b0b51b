"""The tracker's state machine: the rules that schedule the model world, the tracker and faults.

This module owns the schedule side of the tracker's model check (test_model_teardown): one
AppWrapper that a model dispatcher dispatches and requeues, attempt after attempt; a world
(:mod:`model_world`) where controllers create pods during teardown, objects hang on
finalizers and lost nodes, the garbage collector and kubelets work when they get to it; a
watch stream that reorders, duplicates, drops, replays stale events and relists; two tracker
replicas (:mod:`model_tracker`) that evaluate, verify in two halves with anything in between,
escalate in three, crash (losing in-flight work; state is reloaded from the KV bytes), restart
and take records over; a clock that jumps past deadlines. The invariants are the judge's
(:mod:`model_judge`); at the end of every example faults stop and liveness is checked.

Each rule is enabled only when it can do something and picks one operation with weights
(repeats in a list), so that an example of a few dozen steps goes through cycles with faults
in between rather than spending its steps on no-ops.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from model_judge import TeardownJudge
from model_tracker import REPLICAS, ModelTracker, Rules
from model_world import AW, ITEMS, JOB, OTHER_AW, POD, Cluster, Obj, WatchEvent, at

from clearance.events import CycleTeardownStarted, TeardownPolicy
from clearance_tracker.escalation import after
from clearance_tracker.teardown import STEPS, Teardown, record_key

HOLD = ("example.com/hold",)
T = TypeVar("T")

policies = st.builds(
    TeardownPolicy,
    stuck_alert_seconds=st.sampled_from([0, 20, 60]),
    force_deletion_seconds=st.sampled_from([0, 90, 570]),
    finalizer_removal=st.sampled_from(["Never", "AfterForceDeletion"]),
    pause_seconds=st.just(0),
)
picks = st.integers(min_value=0, max_value=63)
replicas = st.sampled_from(REPLICAS)


def held_by(index: int) -> frozenset[str]:
    """The items created with a finalizer: those whose bit is set in ``index``."""
    return frozenset(name for i, (_, name) in enumerate(ITEMS) if index >> i & 1)


class Choices:
    """The arguments of one step, from a generator seeded by one drawn integer (one cheap draw
    per step; every argument uniform whatever the integer's size)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def number(self, n: int) -> int:
        """A number in [0, n)."""
        return self.random.randrange(n)

    def flag(self) -> bool:
        return self.number(2) == 1

    def pick(self, options: Sequence[T]) -> T:
        return options[self.number(len(options))]


SLOWNESS = (0, 0, 0, 1, 2, 4, 8)
"""Steps a verification's reads take to come back: mostly at once, sometimes a while."""

FATES = ("on_time",) * 6 + ("late",) * 3 + ("lost",)
"""How a watch event travels under stream faults: mostly on time, sometimes late or lost."""


def pick(data: Choices, objects: list[Obj]) -> Obj | None:
    if not objects:
        return None
    ordered = sorted(objects, key=lambda o: o.uid)
    return ordered[data.number(64) % len(ordered)]


FAULTS = ("stream", "crashes", "stuck", "controllers", "slow")
"""Fault classes; each schedule draws a subset and only their operations occur (swarm testing):
``stream`` reorders, duplicates, replays stale, drops and relists watch events; ``crashes``
kills replicas (also between publishing `cleared` and marking it) and moves records to the
other; ``stuck`` holds objects with finalizers and lost nodes; ``controllers`` creates pods
during teardown and churns another AppWrapper's pods; ``slow`` lets time pass without the
garbage collector, kubelets or scans catching up."""

EMPHASIS = (1, 2, 4)
"""Factors on an operation's weight, one drawn per operation and schedule."""

OPS: dict[str, tuple[int, str | None]] = {
    # operation: (weight, fault class; None = progress, in every schedule)
    "clock": (5, None),
    "next": (3, None),
    "sweep": (3, None),
    "started": (3, None),
    "requeue": (2, None),
    "scan": (2, None),
    "catch_up": (2, None),
    "evaluate": (1, None),
    "list": (3, None),
    "commit": (3, None),
    "act": (1, None),
    "complete": (1, None),
    "twice": (2, "stream"),
    "stale": (2, "stream"),
    "late": (3, "stream"),
    "relist": (1, "stream"),
    "crash": (2, "crashes"),
    "start": (2, "crashes"),
    "take_over": (1, "crashes"),
    "publish_crash": (1, "crashes"),
    "kubelet": (2, "stuck"),
    "node": (2, "stuck"),
    "finalizer": (3, "stuck"),
    "job_pod": (4, "controllers"),
    "other": (1, "controllers"),
}


class TeardownMachine(TeardownJudge, RuleBasedStateMachine):
    """One AppWrapper cycling through attempts; the tracker's pure rules decide its teardowns."""

    rules_under_test = Rules()

    def __init__(self) -> None:
        TeardownJudge.__init__(self)
        RuleBasedStateMachine.__init__(self)
        self.seconds = 0.0
        self.violated = False
        self.reads = 0
        self.cluster = Cluster()
        self.tracker = ModelTracker(
            self.cluster, judge=self, clock=self.now, rules=self.rules_under_test
        )
        self.policy = TeardownPolicy()
        self.attempt = 0
        self.running = False  # else: tearing down `attempt`, waiting for its `cleared`
        self.announcements: list[CycleTeardownStarted] = []  # teardown.started not acked yet
        self.faults: frozenset[str] = frozenset()
        self.ops: list[str] = []
        self.pods_created = 0
        self.staleness = 0

    def now(self) -> datetime:
        """The model clock: each read a microsecond later (a real clock never repeats)."""
        self.reads += 1
        return at(self.seconds) + timedelta(microseconds=self.reads)

    # ------------------------------------------------------------ the dispatcher

    def dispatch(self, attempt: int, held: frozenset[str]) -> None:
        left = self.cluster.alive_of(AW, up_to=attempt - 1)
        assert not left, f"S1: attempt {attempt} created while {[o.name for o in left]} exist"
        for kind, name in ITEMS:
            created = self.cluster.create(
                kind, name, appwrapper=AW, attempt=attempt, finalizers=HOLD if name in held else ()
            )
            assert created is not None, f"S1: {name} of attempt {attempt} collides by name"
        self.attempt, self.running = attempt, True

    def redispatch(self, record: Teardown) -> None:
        """The model dispatcher takes `cleared` of the attempt it waits for at once (stale and
        duplicate `cleared` are the dispatcher machine's business)."""
        if not self.running and record.attempt == self.attempt:
            held = held_by(self.reads % 64) if "stuck" in self.faults else frozenset()
            self.dispatch(self.attempt + 1, held)

    @initialize(
        policy=policies,
        index=picks,
        faults=st.frozensets(st.sampled_from(FAULTS)),
        emphasis=st.lists(st.sampled_from(EMPHASIS), min_size=len(OPS), max_size=len(OPS)),
    )
    def first_dispatch(
        self, policy: TeardownPolicy, index: int, faults: frozenset[str], emphasis: list[int]
    ) -> None:
        """Attempt 1 dispatched; the schedule's fault classes and the emphasis of each
        operation are drawn (our own swarm testing: Hypothesis' would switch off steps of
        progress too, and a schedule that leans on a few operations reaches their rare
        interleavings far more often than an even mix)."""
        self.configure(policy, faults, OPS, emphasis)
        self.dispatch(1, held_by(index) if "stuck" in faults else frozenset())

    def configure(
        self,
        policy: TeardownPolicy,
        faults: frozenset[str],
        ops: dict[str, tuple[int, str | None]],
        emphasis: list[int],
    ) -> None:
        self.policy = policy
        self.faults = faults
        self.ops = [
            op
            for (op, (weight, fault)), factor in zip(ops.items(), emphasis, strict=True)
            if fault in faults | {None}
            for _ in range(weight * factor)
        ]

    @rule(choice=st.integers(0, 2**32), fates=st.integers(0, 2**32))
    def step(self, choice: int, fates: int) -> None:
        """One operation, chosen with its arguments by ``choice``; ``fates`` decides how the
        watch events it causes travel (one cheap draw each)."""
        try:
            data = Choices(choice)
            op = data.pick(self.ops)
            getattr(self, f"op_{op}")(data)
            self.route_fresh_events(Choices(fates))
            self.answer_reads()
        except AssertionError:
            self.violated = True  # the liveness check in teardown() must not mask it
            raise

    # ------------------------------------------------------------ the dispatcher

    def op_requeue(self, data: Choices) -> None:
        if self.running:
            self.requeue(data.number(64))

    def requeue(self, index: int) -> None:
        """Delete the items, announce the teardown with the inventory the dispatcher knew (the
        items, and the pods whose bit is set in ``index``)."""
        now = self.now()
        refs = []
        for kind, name in ITEMS:
            item = self.cluster.by_name(*kind, name)
            if item is not None and item.attempt == self.attempt:
                refs.append(item.ref())
                self.cluster.delete(item.uid, now=now)
        pods = sorted(
            (o for o in self.cluster.alive_of(AW, up_to=self.attempt) if o.is_pod),
            key=lambda o: o.uid,
        )
        refs += [p.ref() for i, p in enumerate(pods) if index >> i & 1]
        self.running = False
        self.announcements.append(
            CycleTeardownStarted(
                appwrapper=AW,
                attempt=self.attempt,
                occurred_at=now,
                inventory=tuple(refs),
                policy=self.policy,
            )
        )

    def op_started(self, data: Choices) -> None:
        """`teardown.started`, redelivered until acked; the first evaluation before the ack."""
        if not self.announcements:
            return
        by = self.replica(data)
        redelivered = "stream" in self.faults and data.flag()
        evaluate = "crashes" not in self.faults or data.flag()
        announcement = self.announcements[0]
        me = self.tracker.replicas[by]
        if me.up:
            self.tracker.record_teardown(me, announcement, evaluate=evaluate)
            if not redelivered and me.up:
                self.announcements.remove(announcement)

    # ----------------------------------------------------------------- the world

    def op_job_pod(self, data: Choices) -> None:
        """The Job's controller creates a pod, also while the Job is being deleted."""
        job = self.cluster.by_name(*JOB, "job1-job")
        if job is None:
            return
        if len([o for o in self.cluster.objects.values() if o.owner == job.key]) >= 8:
            return  # its parallelism
        held = "stuck" in self.faults and data.flag()
        self.pods_created += 1
        name = f"job1-job-{self.pods_created}"  # a fresh name, as the Job controller makes
        self.cluster.create(
            POD, name, appwrapper=AW, attempt=job.attempt, owner=job, finalizers=HOLD * held
        )

    def op_kubelet(self, data: Choices) -> None:
        pods = [o for o in self.cluster.objects.values() if o.is_pod and o.deleting_since]
        if pod := pick(data, pods):
            self.cluster.kubelet_finish(pod.uid)

    def op_node(self, data: Choices) -> None:
        if pod := pick(data, [o for o in self.cluster.objects.values() if o.is_pod]):
            if data.flag():
                self.cluster.lose_node(pod.uid)
            else:
                self.cluster.recover_node(pod.uid)

    def op_finalizer(self, data: Choices) -> None:
        if held := pick(data, [o for o in self.cluster.objects.values() if o.finalizers]):
            self.cluster.drop_finalizers(held.uid)

    def op_other(self, data: Choices) -> None:
        """Churn of another AppWrapper's pod in the same namespace."""
        theirs = self.cluster.by_name(*POD, "job2-w-0")
        if theirs is None:
            self.cluster.create(POD, "job2-w-0", appwrapper=OTHER_AW, attempt=1)
        else:
            self.cluster.delete(theirs.uid, now=self.now(), grace=False)

    def op_catch_up(self, data: Choices) -> None:
        self.cluster_catches_up(data)

    def cluster_catches_up(self, data: Choices | None = None) -> None:
        """The garbage collector does its work, and healthy kubelets finish terminating pods
        (each of them, or with ``data`` some of them: kubelets are not in step)."""
        self.cluster.collect_garbage(now=self.now())
        for pod in [o for o in self.cluster.objects.values() if o.is_pod and o.deleting_since]:
            if data is None or data.flag():
                self.cluster.kubelet_finish(pod.uid)

    def op_clock(self, data: Choices) -> None:
        """Time passes; meanwhile (unless the schedule says otherwise) the garbage collector
        and healthy kubelets do their work, then every live replica's scan runs."""
        self.seconds += data.pick((1, 5, 11, 31, 61, 200, 600))
        busy = "all"
        if "slow" in self.faults:
            busy = data.pick(("all", "kubelets", "scans", "none"))
        if busy in ("all", "kubelets"):
            self.cluster_catches_up(data)
            self.route_fresh_events(data)
            self.op_sweep(data)
        if busy in ("all", "scans"):
            for by in REPLICAS:
                self.scan(by, data)

    # ---------------------------------------------------------------- the stream

    def route_fresh_events(self, data: Choices) -> None:
        """Each event the step emitted goes on time, or (stream faults) late or lost."""
        while self.cluster.fresh:
            fate = "on_time"
            if "stream" in self.faults:
                fate = data.pick(FATES)
            self.cluster.route(fate)  # type: ignore[arg-type]

    def op_next(self, data: Choices) -> None:
        """The next on-time watch event."""
        if delivered := self.cluster.next_event():
            self.deliver(data, delivered)

    def op_sweep(self, data: Choices) -> None:
        """The consumer catches up with every on-time event."""
        while delivered := self.cluster.next_event():
            self.deliver(data, delivered)

    def op_late(self, data: Choices) -> None:
        """A held-back event finally arrives (after later ones: reordering)."""
        if delivered := self.cluster.late_event(data.number(64)):
            self.deliver(data, delivered)

    def op_twice(self, data: Choices) -> None:
        """The next on-time event, delivered twice."""
        if delivered := self.cluster.next_event():
            self.deliver(data, delivered)
            self.deliver(data, delivered)

    def op_stale(self, data: Choices) -> None:
        """An event delivered before comes again (republished with a new Msg-Id)."""
        if self.cluster.delivered:
            index = data.number(64)
            self.deliver(data, self.cluster.delivered[index % len(self.cluster.delivered)])

    def op_relist(self, data: Choices) -> None:
        self.cluster.relist()

    def deliver(self, data: Choices, delivered: WatchEvent) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if me.up:
            self.tracker.observe(me, delivered.action, delivered.snapshot)

    # --------------------------------------------------------------- the tracker

    def replica(self, data: Choices) -> str:
        return data.pick(REPLICAS) if "crashes" in self.faults else "r1"

    def scan(self, by: str, data: Choices | None = None) -> None:
        """The replica's scan: every record it owns evaluated, a due step carried out. With
        ``data``, a verification it starts may be slow: its reads are answered (and the rest
        of the evaluation done) only some steps later, anything in between."""
        tracker, me = self.tracker, self.tracker.replicas[by]
        for key in tracker.kv.record_keys():
            record = tracker.kv.get(key)
            if record is not None and record.owner == by and me.idle:
                slow = 0 if data is None else data.pick(SLOWNESS)
                tracker.evaluate(me, key, split=slow > 0)
                if me.verifying is not None:
                    me.verifying.steps_left = slow
                if me.escalating is not None:
                    tracker.act(me)
                    tracker.complete(me)

    def answer_reads(self) -> None:
        """Verifications under way whose reads come back now commit."""
        for me in self.tracker.replicas.values():
            if me.up and me.verifying is not None:
                me.verifying.steps_left -= 1
                if me.verifying.steps_left <= 0:
                    self.tracker.finish_verify(me)

    def op_scan(self, data: Choices) -> None:
        self.scan(self.replica(data), data)

    def _record(self, data: Choices) -> str | None:
        keys = self.tracker.kv.record_keys()
        return keys[data.number(64) % len(keys)] if keys else None

    def op_evaluate(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if (key := self._record(data)) and me.idle:
            self.tracker.evaluate(me, key)

    def op_list(self, data: Choices) -> None:
        """The first half of a verification: its LIST (the GETs and the commit come later)."""
        me = self.tracker.replicas[self.replica(data)]
        if (key := self._record(data)) and me.idle:
            record = self.tracker.kv.get(key)
            assert record is not None
            work = self.tracker.rules.next_work(
                record, now=self.now(), me=me.name, timing=self.tracker.timing
            )
            if work == "verify":
                self.tracker.begin_verify(me, key)
                assert me.verifying is not None
                me.verifying.steps_left = data.pick(SLOWNESS[1:])

    def op_commit(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if me.verifying is not None:
            self.tracker.finish_verify(me)

    def op_act(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if me.escalating is not None and me.escalating.acted is None:
            self.tracker.act(me)

    def op_complete(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if me.escalating is not None and me.escalating.acted is not None:
            self.tracker.complete(me)

    def op_crash(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if me.up:
            me.crash()
            self.crashes += 1

    def op_start(self, data: Choices) -> None:
        self.tracker.replicas[self.replica(data)].up = True

    def op_take_over(self, data: Choices) -> None:
        me = self.tracker.replicas[self.replica(data)]
        if (key := self._record(data)) and me.up:
            self.tracker.take_over(me, key)

    def op_publish_crash(self, data: Choices) -> None:
        """`cleared` published, then the replica dies before it marks it published."""
        me = self.tracker.replicas[self.replica(data)]
        key = self._record(data)
        record = self.tracker.kv.get(key) if key else None
        due = record is not None and record.clearing is not None and not record.cleared
        if key and record and due and me.idle and record.owner == me.name:
            self.tracker.publish_cleared(me, key, crash_before_marking=True)
            self.crashes += 1

    # ---------------------------------------------------------------- invariants

    @invariant()
    def tracked_objects_are_this_teardowns_and_confirmations_true(self) -> None:
        try:
            self.check_tracked_objects_are_this_teardowns_and_confirmations_true()
        except AssertionError:
            self.violated = True
            raise

    def check_tracked_objects_are_this_teardowns_and_confirmations_true(self) -> None:
        self.check_records(
            [r for k in self.tracker.kv.record_keys() if (r := self.tracker.kv.get(k))]
        )
        self.staleness = max(self.staleness, self.stale_reads())

    def stale_reads(self) -> int:
        """How many objects an in-flight verification's reads are behind on: shown alive but
        since confirmed gone, or of the teardown, alive and known to neither (reported as an
        event: the statistics show how often schedules reach the races around a
        verification)."""
        behind = 0
        for me in self.tracker.replicas.values():
            verifying = me.verifying
            record = self.tracker.kv.get(verifying.key) if verifying else None
            if verifying is None or record is None or record.clearing is not None:
                continue
            shown = {s.metadata.uid for s in verifying.listed}
            since = sum(1 for o in record.objects.values() if o.uid in shown and o.gone)
            unknown = sum(
                1
                for o in self.cluster.alive_of(AW, up_to=record.attempt)
                if o.uid not in shown and o.uid not in record.objects
            )
            behind = max(behind, since + unknown)
        return behind

    # ------------------------------------------------------------------ liveness

    def teardown(self) -> None:
        """L1: faults stop; the ladder acts at its deadlines while the world stays stuck; then
        healed, `cleared` and the redispatch follow."""
        if self.violated:
            return  # a step already failed: report that, not its aftermath
        if currently_in_test_context():
            event(f"attempts dispatched by the schedule: {min(self.attempt, 4)}")
            event(f"verification reads overtaken by events: {min(self.staleness, 3)}")
        if self.running:
            self.requeue(0)
        waiting = self.attempt
        for me in self.tracker.replicas.values():
            me.up = True
        for _ in range(10):  # from deadline to deadline
            self.settle()
            if self.attempt != waiting:
                break
            self.check_ladder_kept_time(self.awaited())
            moment = self.next_moment()
            if moment is None:
                break
            self.seconds = max(self.seconds, (moment - at(0)).total_seconds() + 1)
        for obj in list(self.cluster.objects.values()):
            obj.node_lost = False
            if obj.finalizers:
                self.cluster.drop_finalizers(obj.uid)
        for _ in range(6):
            if self.attempt != waiting:
                break
            self.settle()
            self.seconds += self.tracker.timing.verify_interval
        assert self.attempt == waiting + 1, f"L1: attempt {waiting} never redispatched"
        if currently_in_test_context():
            for step in sorted({s for a, s in self.completed if a == waiting}):
                event(f"ladder step of the last teardown: {step}")

    def awaited(self) -> Teardown | None:
        return self.tracker.kv.get(record_key(AW.uid, self.attempt))

    def next_moment(self) -> datetime | None:
        """The next deadline or claim expiry of the awaited teardown, if any is ahead."""
        record = self.awaited()
        if record is None or record.clearing is not None:
            return None
        moments = [d for s in STEPS if (d := record.deadlines.get(s)) and not record.step_done(s)]
        moments += [
            after(s.claimed_at, self.tracker.timing.claim_timeout) for s in record.steps.values()
        ]
        ahead = [m for m in moments if m > self.now()]
        return min(ahead) if ahead else None

    def drain(self, by: str) -> None:
        """The replica's in-flight work runs to its end."""
        tracker, me = self.tracker, self.tracker.replicas[by]
        if me.verifying is not None:
            tracker.finish_verify(me)
        if me.escalating is not None and me.escalating.acted is None:
            tracker.act(me)
        if me.escalating is not None:
            tracker.complete(me)

    def settle(self) -> None:
        """Everything in flight finishes, every message is delivered, everyone catches up."""
        tracker, cluster = self.tracker, self.cluster
        r1 = tracker.replicas["r1"]
        for _ in range(3):
            for by in REPLICAS:
                self.drain(by)
            for announcement in self.announcements:
                tracker.record_teardown(r1, announcement, evaluate=True)
                self.drain("r1")
            self.announcements.clear()
            self.cluster_catches_up()
            while cluster.fresh:
                cluster.route("on_time")
            while delivered := cluster.next_event() or cluster.late_event(0):
                tracker.observe(r1, delivered.action, delivered.snapshot)
                self.drain("r1")
            for _ in range(4):
                for by in REPLICAS:
                    self.scan(by)
                    self.drain(by)
