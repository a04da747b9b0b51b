"""The judge of a schedule (pure): S1, S2, S3, L1, L2 and T1 over an :class:`Observation`.

Every object is attributed to an AppWrapper and an attempt by what the API server committed:
its AppWrapper and attempt labels, or — for an unlabelled object a controller made — the
attribution of its owner (by UID). The invariants (issue #14, Build 4):

* **S1** — no object of attempt N+1 is created while any object of an earlier attempt of the
  same AppWrapper exists (commit order, by UID).
* **S2** — every ``cleared`` of attempt N is stored after the commit that removed the last
  object of attempts ≤ N (stream timestamp vs. commit time, one clock), and at most once per
  (AppWrapper UID, attempt) in the stream after dedup.
* **S3** — no delete by a Clearance client of an object of the AppWrapper's *current* attempt:
  before the delete's commit the AppWrapper must have recorded the teardown of that attempt
  (``status.clearance.tearingDown``, a later attempt, ``Failed``) or be deleted itself. A
  frozen leader's stale delete is judged the same way.
* **L1** — once faults stop, every AppWrapper reaches the state its plan expects (Running,
  Completed, Failed by its own ``maxNumRequeuings``, or gone with its objects when its owner
  deleted it) within :attr:`Observation.l1_bound` seconds.
* **L2** — no storm: ``numberOfRequeueings`` equals the number of attempts requeued (each
  requeued once); a crashing AppWrapper is requeued exactly ``maxNumRequeuings`` times; every
  requeue of another AppWrapper had a failure the schedule induced in that attempt (a pod
  failed, a pod removed by someone other than Clearance, or a fault in force between its
  dispatch and its requeue).
* **T1** — exactly one ``requeue.cycle`` root span per cycle (each torn-down attempt of an
  AppWrapper its owner did not delete).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.chaos.history import Observation, Published, Write

from clearance import attributes, events

INVARIANTS = ("S1", "S2", "S3", "L1", "L2", "T1")
ITEM_KINDS = frozenset({"Pod", "Job", "Service", "ConfigMap"})


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    appwrapper: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant} {self.appwrapper}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Life:
    """One object's life in the API server, from the history."""

    kind: str
    name: str
    uid: str
    appwrapper: str
    attempt: int
    created: float
    created_rv: int
    removed: float | None
    removed_rv: int | None

    def alive_at(self, moment: float) -> bool:
        return self.created <= moment and (self.removed is None or self.removed > moment)


def lives(writes: Iterable[Write]) -> tuple[list[Life], list[Violation]]:
    """Every object with an AppWrapper (its label, or its owner's), with its attempt."""
    owner_of: dict[str, tuple[str, int]] = {}
    open_: dict[str, Life] = {}
    done: list[Life] = []
    problems: list[Violation] = []
    for w in writes:
        if w.kind not in ITEM_KINDS:
            continue
        if w.uid not in open_ and w.type != "DELETED":
            attribution = _attribute(w, owner_of)
            if attribution is None:
                if w.appwrapper is not None:
                    problems.append(
                        Violation("S1", w.appwrapper, f"{w.kind} {w.name} has no attempt label")
                    )
                continue
            owner_of[w.uid] = attribution
            open_[w.uid] = Life(w.kind, w.name, w.uid, *attribution, w.time, w.rv, None, None)
        elif w.type == "DELETED" and w.uid in open_:
            life = open_.pop(w.uid)
            done.append(
                Life(**{**_fields(life), "removed": w.time, "removed_rv": w.rv})  # type: ignore[arg-type]
            )
    return [*done, *open_.values()], problems


def _fields(life: Life) -> dict[str, object]:
    return {name: getattr(life, name) for name in Life.__slots__}


def _attribute(w: Write, owner_of: Mapping[str, tuple[str, int]]) -> tuple[str, int] | None:
    if w.appwrapper is not None and w.attempt is not None:
        return (w.appwrapper, w.attempt)
    for owner in w.owners:
        if owner in owner_of:
            return owner_of[owner]
    return None


def check_s1(writes: list[Write]) -> list[Violation]:
    found, problems = lives(writes)
    by_uid = {life.uid: life for life in found}
    alive: dict[str, dict[str, Life]] = defaultdict(dict)
    for w in writes:
        life = by_uid.get(w.uid)
        if life is None:
            continue
        if w.rv == life.created_rv:
            older = [o for o in alive[life.appwrapper].values() if o.attempt < life.attempt]
            if older:
                names = ", ".join(f"{o.kind} {o.name} (attempt {o.attempt})" for o in older)
                problems.append(
                    Violation(
                        "S1",
                        life.appwrapper,
                        f"rv {w.rv}: {life.kind} {life.name} of attempt {life.attempt} created "
                        f"by {w.user_agent or '?'} while {names} existed",
                    )
                )
            alive[life.appwrapper][life.uid] = life
        elif w.rv == life.removed_rv:
            alive[life.appwrapper].pop(life.uid, None)
    return problems


def appwrapper_names(writes: Iterable[Write]) -> dict[str, str]:
    """AppWrapper UID → name."""
    return {w.uid: w.name for w in writes if w.kind == "AppWrapper"}


def check_s2(writes: list[Write], cycle: list[Published]) -> list[Violation]:
    names = appwrapper_names(writes)
    found, _ = lives(writes)
    problems: list[Violation] = []
    cleared = [p for p in cycle if isinstance(p.event, events.CycleCleared)]
    cleared_events = [p.event for p in cleared if isinstance(p.event, events.CycleCleared)]
    seen = Counter((e.appwrapper.uid, e.attempt) for e in cleared_events)
    for (uid, attempt), count in sorted(seen.items()):
        if count > 1:
            problems.append(
                Violation(
                    "S2", names.get(uid, uid), f"cleared of attempt {attempt} stored {count}x"
                )
            )
    for p in cleared:
        event = p.event
        assert isinstance(event, events.CycleCleared)
        name = names.get(event.appwrapper.uid, event.appwrapper.name)
        left = [
            life
            for life in found
            if life.appwrapper == name and life.attempt <= event.attempt and life.alive_at(p.time)
        ]
        for life in left:
            when = "never" if life.removed is None else f"{life.removed - p.time:+.3f}s later"
            problems.append(
                Violation(
                    "S2",
                    name,
                    f"cleared of attempt {event.attempt} stored at seq {p.seq} while "
                    f"{life.kind} {life.name} (attempt {life.attempt}) existed (removed {when})",
                )
            )
    return problems


def _teardown_recorded(aw: Write, attempt: int) -> bool:
    cl = aw.clearance_status
    if aw.terminating or aw.type == "DELETED":
        return True
    if cl.get("tearingDown") is not None and int(cl["tearingDown"]) >= attempt:
        return True
    if int(cl.get("attempt") or 0) > attempt:
        return True
    return aw.status.get("state") == "Failed" or cl.get("phase") in ("Failed", "Invalid")


def check_s3(writes: list[Write]) -> list[Violation]:
    found, _ = lives(writes)
    by_uid = {life.uid: life for life in found}
    recorded: dict[str, set[int]] = defaultdict(set)
    """AppWrapper → attempts whose teardown its status has recorded so far (commit order)."""
    problems: list[Violation] = []
    attempts_seen: dict[str, int] = defaultdict(int)
    for w in writes:
        if w.kind == "AppWrapper":
            attempts_seen[w.name] = max(
                attempts_seen[w.name], int(w.clearance_status.get("attempt") or 0)
            )
            for attempt in range(1, attempts_seen[w.name] + 2):
                if _teardown_recorded(w, attempt):
                    recorded[w.name].add(attempt)
            continue
        if w.verb != "delete" or not w.by_clearance:
            continue
        life = by_uid.get(w.uid)
        if life is None or life.attempt in recorded[life.appwrapper]:
            continue
        problems.append(
            Violation(
                "S3",
                life.appwrapper,
                f"rv {w.rv}: {w.user_agent} deleted {life.kind} {life.name} of attempt "
                f"{life.attempt}, whose teardown the AppWrapper had not recorded",
            )
        )
    return problems


def check_l1(observation: Observation) -> list[Violation]:
    problems = []
    for plan in observation.plans:
        at = observation.settled_at.get(plan.name)
        if at is None or at - observation.healed_at > observation.l1_bound:
            problems.append(
                Violation(
                    "L1",
                    plan.name,
                    f"not {plan.expected} within {observation.l1_bound:.0f}s after the last fault",
                )
            )
    return problems


def recovery_seconds(observation: Observation) -> float | None:
    """From the last fault's end to every AppWrapper in its expected state (None: never)."""
    times = [observation.settled_at.get(p.name) for p in observation.plans]
    if any(t is None for t in times):
        return None
    return max(0.0, max(t for t in times if t is not None) - observation.healed_at)


def _final(writes: list[Write], name: str) -> Write | None:
    found = [w for w in writes if w.kind == "AppWrapper" and w.name == name and w.object]
    return found[-1] if found else None


def _requeues(cycle: list[Published], name: str) -> Counter[int]:
    return Counter(
        p.event.attempt
        for p in cycle
        if isinstance(p.event, events.CycleRequeued) and p.event.appwrapper.name == name
    )


def _caused(observation: Observation, name: str, attempt: int, requeued_at: float) -> bool:
    """Did the schedule induce a failure in ``attempt`` of ``name`` before its requeue?"""
    pods = [
        w
        for w in observation.writes
        if w.kind == "Pod"
        and w.appwrapper == name
        and w.attempt == attempt
        and w.time <= requeued_at
    ]
    if any((w.status.get("phase") == "Failed") for w in pods):
        return True
    if any(
        (w.verb == "delete" and not w.by_clearance)
        or (w.type == "DELETED" and w.user_agent == "kubesim")
        for w in pods
    ):
        return True
    if attempt == 1 and name in observation.induced:
        return True
    created = min((w.time for w in pods), default=requeued_at)
    return any(
        i.injected and i.started <= requeued_at and (i.ended or requeued_at) >= created - 3.0
        for i in observation.injections
    )


def check_l2(observation: Observation) -> list[Violation]:
    problems = []
    for plan in observation.plans:
        requeues = _requeues(observation.cycle, plan.name)
        for attempt, count in sorted(requeues.items()):
            if count > 1:
                problems.append(
                    Violation("L2", plan.name, f"attempt {attempt} requeued {count} times")
                )
        final = _final(observation.writes, plan.name)
        if final is None or plan.name in observation.deleted:
            continue
        number = int(final.status.get("numberOfRequeueings") or 0)
        if number != len(requeues):
            problems.append(
                Violation(
                    "L2",
                    plan.name,
                    f"numberOfRequeueings {number} but {len(requeues)} attempts requeued",
                )
            )
        if plan.behaviour == "crashing" and number != plan.max_requeuings:
            problems.append(
                Violation(
                    "L2",
                    plan.name,
                    f"crashing: numberOfRequeueings {number}, "
                    f"maxNumRequeuings {plan.max_requeuings}",
                )
            )
        if plan.behaviour == "crashing":
            continue
        for p in observation.cycle:
            event = p.event
            if not isinstance(event, events.CycleRequeued) or event.appwrapper.name != plan.name:
                continue
            if not _caused(observation, plan.name, event.attempt, p.time):
                problems.append(
                    Violation(
                        "L2",
                        plan.name,
                        f"attempt {event.attempt} requeued at seq {p.seq} with no failure induced",
                    )
                )
    return problems


def cycles(observation: Observation) -> set[tuple[str, int]]:
    """(AppWrapper, attempt) of every teardown the dispatcher started."""
    return {
        (p.event.appwrapper.name, p.event.attempt)
        for p in observation.cycle
        if isinstance(p.event, events.CycleTeardownStarted)
    }


def check_t1(observation: Observation) -> list[Violation]:
    roots: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    for span in observation.spans:
        if span.name != "requeue.cycle" or span.parent_span_id is not None:
            continue
        name = span.attributes.get(attributes.APPWRAPPER_NAME)
        attempt = span.attributes.get("clearance.attempt")
        if isinstance(name, str) and isinstance(attempt, int):
            roots[(name, attempt)].add((span.trace_id, span.span_id))
    problems = []
    for name, attempt in sorted(cycles(observation)):
        if name in observation.deleted:
            continue
        found = len(roots.get((name, attempt), ()))
        if found != 1:
            problems.append(
                Violation("T1", name, f"{found} requeue.cycle roots for attempt {attempt}")
            )
    return problems


def check(observation: Observation) -> list[Violation]:
    """Every violation of the schedule, by invariant."""
    return [
        *check_s1(observation.writes),
        *check_s2(observation.writes, observation.cycle),
        *check_s3(observation.writes),
        *check_l1(observation),
        *check_l2(observation),
        *check_t1(observation),
    ]
