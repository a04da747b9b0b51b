"""The tracker under test: its pure rules, driven in the order the service drives them.

This module owns the glue between the model world (:mod:`model_world`) and the tracker's pure
modules. Each operation mirrors one path of the service with the same reads, pure calls and
compare-and-swap writes: :meth:`ModelTracker.record_teardown` (handlers.record_teardown),
:meth:`~ModelTracker.observe` (handlers.observe, hot path included), ``evaluate`` / the
verification in two halves (tracking.evaluate, verification.verify: the LIST, then the GETs of
what it did not show and a commit against the *current* record), the ladder in three
(ladder.escalate: claim, act on the world, complete), `cleared` published then marked, and
ownership.take_over. The KV bucket holds encoded bytes; every read decodes them, so a replica
is nothing but its in-flight work and a restart is dropping it (what a crash does).

A :class:`Judge` is told about every write and effect when it happens; the state machine is
one and checks the invariants there. :class:`Rules` names the pure decisions called, so a
proof test can swap one for a deliberately broken variant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import msgspec
from model_world import AW, Cluster, Obj

from clearance import labels
from clearance.events import CycleTeardownStarted, EscalationStep, ObjectRef, PodObject
from clearance_tracker import confirmation, escalation, inventory
from clearance_tracker.confirmation import Missing, Snapshot, apply_get, apply_list, unseen
from clearance_tracker.escalation import Timing
from clearance_tracker.reads import kinds
from clearance_tracker.teardown import Teardown, decode_record, encode

TIMING = Timing(finalizer_removal_delay=10.0, claim_timeout=30.0, verify_interval=10.0)
REPLICAS = ("r1", "r2")


@dataclass(frozen=True)
class Rules:
    """The pure decisions the driver calls; the real ones unless a proof test swaps one."""

    open_teardown: Callable[..., Teardown] = inventory.open_teardown
    apply_event: Callable[..., confirmation.Outcome] = confirmation.apply_event
    apply_verification: Callable[..., confirmation.Outcome | None] = confirmation.apply_verification
    next_work: Callable[..., escalation.Work | None] = escalation.next_work
    claim: Callable[..., Teardown | None] = escalation.claim


class Judge(Protocol):
    def on_write(self, old: Teardown, new: Teardown) -> None: ...
    def on_claim(self, record: Teardown, step: EscalationStep) -> None: ...
    def on_act(self, record: Teardown, step: EscalationStep, *, alerted: bool) -> None: ...
    def on_complete(self, record: Teardown, step: EscalationStep) -> None: ...
    def on_touch(self, record: Teardown, target: Obj, what: str) -> None: ...
    def on_cleared(self, record: Teardown) -> None: ...


class Kv:
    """The `clearance-teardowns` bucket: encoded records with revisions, CAS writes."""

    def __init__(self, judge: Judge) -> None:
        self.data: dict[str, tuple[int, bytes]] = {}
        self.judge = judge

    def get(self, key: str) -> Teardown | None:
        entry = self.data.get(key)
        return None if entry is None else decode_record(entry[1])

    def record_keys(self) -> list[str]:
        return sorted(self.data)

    def create(self, record: Teardown) -> bool:
        if record.key in self.data:
            return False
        self.data[record.key] = (1, encode(record))
        return True

    def mutate(self, key: str, change: Callable[[Teardown], Teardown | None]) -> bool:
        """Apply ``change`` to the latest record (what a CAS loop converges to); True if written."""
        current = self.get(key)
        if current is None:
            return False
        new = change(current)
        if new is None or new == current:
            return False
        revision, _ = self.data[key]
        self.data[key] = (revision + 1, encode(new))
        self.judge.on_write(current, new)
        return True


@dataclass
class Verifying:
    key: str
    begun: Teardown
    listed: list[Snapshot]
    steps_left: int = 1
    """Schedule steps until the reads are answered (a slow API server: anything in between)."""


@dataclass
class Escalating:
    key: str
    step: EscalationStep
    acted: tuple[ObjectRef, ...] | None = None


@dataclass
class Replica:
    name: str
    up: bool = True
    verifying: Verifying | None = None
    escalating: Escalating | None = None

    @property
    def idle(self) -> bool:
        return self.up and self.verifying is None and self.escalating is None

    def crash(self) -> None:
        self.up = False
        self.verifying = None
        self.escalating = None


@dataclass
class ModelTracker:
    cluster: Cluster
    judge: Judge
    clock: Callable[[], datetime]
    rules: Rules = field(default_factory=Rules)
    replicas: dict[str, Replica] = field(
        default_factory=lambda: {name: Replica(name) for name in REPLICAS}
    )
    timing: Timing = TIMING

    def __post_init__(self) -> None:
        self.kv = Kv(self.judge)

    # ------------------------------------------------------------ messages in

    def record_teardown(self, me: Replica, event: CycleTeardownStarted, *, evaluate: bool) -> None:
        """handlers.record_teardown: create the record (idempotent), evaluate it before the ack."""
        record = self.rules.open_teardown(
            event,
            policy=event.policy,
            owner=me.name,
            recorded_at=self.clock(),
            trace_id="0" * 31 + "1",
            await_span_id="0" * 15 + "1",
            traceparent=None,
            timing=self.timing,
        )
        self.kv.create(record)
        current = self.kv.get(record.key)
        if evaluate and current is not None and current.owner == me.name and not current.cleared:
            self.evaluate(me, record.key)

    def _concerns(self, record: Teardown, snapshot: Snapshot) -> bool:
        meta = snapshot.metadata
        value = labels.value_for(record.appwrapper.name)
        if value in (
            meta.labels.get(labels.MCAD_APPWRAPPER),
            meta.labels.get(labels.CODEFLARE_APPWRAPPER),
        ):
            return True
        return any(ref.uid in record.objects for ref in meta.owner_references)

    def observe(self, me: Replica, action: str, snapshot: Snapshot) -> None:
        """handlers.observe: apply a watch event to every open record it concerns."""
        for key in self.kv.record_keys():
            cached = self.kv.get(key)
            if (
                cached is None
                or cached.clearing is not None
                or not self._concerns(cached, snapshot)
            ):
                continue
            now = self.clock()
            if not self.rules.apply_event(
                cached, action=action, snapshot=snapshot, now=now
            ).changed:
                continue

            def change(record: Teardown, now: datetime = now) -> Teardown | None:
                if record.clearing is not None:
                    return None
                return self.rules.apply_event(
                    record, action=action, snapshot=snapshot, now=now
                ).record

            self.kv.mutate(key, change)
            record = self.kv.get(key)
            if (
                record is not None
                and record.owner == me.name
                and record.all_confirmed
                and not record.cleared
                and me.idle
            ):
                self.evaluate(me, key)  # the hot path: LIST after this DELETED, then cleared

    # -------------------------------------------------------------- evaluation

    def evaluate(self, me: Replica, key: str, *, split: bool = False) -> None:
        """tracking.evaluate: verify if due, then publish `cleared` or claim the due step.

        ``split``: the verification's LIST is under way when this returns; :meth:`finish_verify`
        (the GETs, the commit and the rest of the evaluation) comes later, anything between."""
        record = self.kv.get(key)
        if record is None or not me.idle:
            return
        work = self.rules.next_work(record, now=self.clock(), me=me.name, timing=self.timing)
        if work == "verify":
            self.begin_verify(me, key)
            if not split:
                self.finish_verify(me)
            return
        self._proceed(me, key, work)

    def _proceed(self, me: Replica, key: str, work: escalation.Work | None) -> None:
        if work == "publish_cleared":
            self.publish_cleared(me, key)
        elif work is not None and work != "verify":
            self.claim(me, key, work)

    def begin_verify(self, me: Replica, key: str) -> None:
        """The quorum LIST of every kind the record knows, by the AppWrapper label."""
        record = self.kv.get(key)
        assert record is not None
        listed = self.cluster.list_by_label(kinds(record), record.appwrapper.name)
        me.verifying = Verifying(key, record, listed)

    def finish_verify(self, me: Replica) -> None:
        """GETs of the open objects the LIST did not show, one commit, then what is due next."""
        verifying = me.verifying
        assert verifying is not None
        me.verifying = None
        now = self.clock()
        listed = verifying.listed
        list_outcome, _ = apply_list(verifying.begun, items=listed, now=now)
        gets = [
            (o.uid, self._get(o.api_version, o.kind, o.name, o.uid))
            for o in unseen(list_outcome.record, [s.metadata.uid for s in listed])
        ]

        def change(current: Teardown) -> Teardown | None:
            outcome = self.rules.apply_verification(
                current, listed=listed, gets=gets, now=now, by=me.name
            )
            return None if outcome is None else outcome.record

        self.kv.mutate(verifying.key, change)
        record = self.kv.get(verifying.key)
        assert record is not None
        work = self.rules.next_work(record, now=now, me=me.name, timing=self.timing, verified=True)
        self._proceed(me, verifying.key, work)

    def _get(self, api_version: str, kind: str, name: str, uid: str) -> confirmation.GetResult:
        result = self.cluster.get(api_version, kind, name)
        return Missing(uid) if isinstance(result, Missing) else result

    def publish_cleared(self, me: Replica, key: str, *, crash_before_marking: bool = False) -> None:
        """reporting.cleared (the publish), then `published` set with CAS."""
        record = self.kv.get(key)
        assert record is not None and record.clearing is not None
        self.judge.on_cleared(record)
        if crash_before_marking:
            me.crash()
            return

        def change(current: Teardown) -> Teardown | None:
            if current.clearing is None or current.clearing.published:
                return None
            clearing = msgspec.structs.replace(current.clearing, published=True)
            return msgspec.structs.replace(current, clearing=clearing)

        self.kv.mutate(key, change)

    # ------------------------------------------------------------------ ladder

    def claim(self, me: Replica, key: str, step: EscalationStep) -> None:
        before = self.kv.get(key)
        assert before is not None
        now = self.clock()
        rule = self.rules.claim
        if self.kv.mutate(key, lambda r: rule(r, step, now=now, me=me.name, timing=self.timing)):
            self.judge.on_claim(before, step)
            me.escalating = Escalating(key, step)

    def act(self, me: Replica) -> None:
        """ladder: a fresh GET of every open object (merged), then the step's effects."""
        escalating = me.escalating
        assert escalating is not None and escalating.acted is None
        record = self.kv.get(escalating.key)
        assert record is not None
        now = self.clock()
        results = [
            (o.uid, self._get(o.api_version, o.kind, o.name, o.uid)) for o in record.open_objects
        ]

        def merge(current: Teardown) -> Teardown | None:
            for uid, result in results:
                current = apply_get(current, uid=uid, result=result, now=now).record
            return current

        self.kv.mutate(escalating.key, merge)
        record = self.kv.get(escalating.key)
        assert record is not None
        alive = {
            uid: r for uid, r in results if not isinstance(r, Missing) and r.metadata.uid == uid
        }
        step = escalating.step
        acted: list[ObjectRef] = []
        for obj in record.open_objects:  # pods first, then items
            snapshot = alive.get(obj.uid)
            if snapshot is None:
                continue
            target = self.cluster.objects.get(obj.uid)
            if step == "stuck_alert":
                acted.append(obj.ref())
            elif step == "force_deletion" and target is not None:
                self.judge.on_touch(record, target, "force-delete")
                answer = self.cluster.delete_by_name(
                    obj.api_version, obj.kind, obj.name, uid=obj.uid, now=now, grace=False
                )
                if answer in ("deleted", "terminating"):
                    acted.append(obj.ref())
            elif step == "finalizer_removal" and snapshot.metadata.finalizers:
                if target is not None:
                    self.judge.on_touch(record, target, "unfinalize")
                if self.cluster.unfinalize_by_name(
                    obj.api_version, obj.kind, obj.name, uid=obj.uid
                ):
                    acted.append(obj.ref())
        self.judge.on_act(record, step, alerted=bool(acted))
        escalating.acted = tuple(acted)

    def complete(self, me: Replica) -> None:
        escalating = me.escalating
        assert escalating is not None and escalating.acted is not None
        me.escalating = None
        now = self.clock()
        step, acted = escalating.step, escalating.acted
        if self.kv.mutate(
            escalating.key,
            lambda r: escalation.complete(r, step, now=now, me=me.name, objects=acted),
        ):
            record = self.kv.get(escalating.key)
            assert record is not None
            self.judge.on_complete(record, step)

    # --------------------------------------------------------------- ownership

    def take_over(self, me: Replica, key: str) -> None:
        """ownership.take_over: a live replica becomes the owner of a dead one's record."""
        record = self.kv.get(key)
        if record is None or record.owner == me.name or self.replicas[record.owner].up:
            return
        dead = record.owner

        def change(current: Teardown) -> Teardown | None:
            if current.owner != dead or current.cleared:
                return None
            return msgspec.structs.replace(current, owner=me.name)

        self.kv.mutate(key, change)


def is_pod(snapshot: Snapshot) -> bool:
    return isinstance(snapshot, PodObject)


__all__ = ["AW", "REPLICAS", "TIMING", "ModelTracker", "Replica", "Rules"]
