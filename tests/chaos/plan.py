"""One chaos schedule, drawn from its seed alone: the workload and the faults, with their instants.

A :class:`Schedule` is pure data. :func:`schedule_for` draws it with ``random.Random(seed)``, so
the same seed always gives the same AppWrappers, the same fault classes, targets and instants
(relative to the moment the workload is submitted) — the replay command of a failing schedule is
its seed and nothing else. What the processes then do under those faults is real, so a replay
reproduces the schedule, not every interleaving; a defect it exposed shows again within a few
replays.

Workload (issue #14, Build 2): several AppWrappers at once, each with a *behaviour* (what its
pods do) and a *shape* (what it wraps):

* behaviours — ``steady`` (pods run until the end), ``flaky`` (the owner deletes one pod of the
  first attempt: one induced failure), ``crashing`` (every attempt's pods exit 1: requeued
  ``maxNumRequeuings`` times, then Failed), ``completing`` (a Job whose pods exit 0, with
  ``completionstatus: Complete``: Completed);
* shapes — ``pods`` (a gang of bare Pod items), ``job`` (one batch/v1 Job, parallelism = gang),
  ``multi`` (Pods + a Service + a ConfigMap);
* gangs of 1-8 pods, long grace periods (force-deleted at the deadline), a finalizer the owner
  releases some seconds after the pod starts terminating, and AppWrappers their owner deletes
  while their teardown is under way.

Faults (Build 3), each class in every schedule at least once, at random overlapping instants:
:data:`FAULT_CLASSES`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final, Literal

FaultClass = Literal["kill", "freeze", "nats", "watch", "api", "redeliver", "node"]
FAULT_CLASSES: Final[tuple[FaultClass, ...]] = (
    "kill",  # kill -9 + restart of a replica: running, during start-up, during hand-over
    "freeze",  # SIGSTOP longer than the lease, then SIGCONT (a frozen leader wakes up)
    "nats",  # nats-server kill -9, restarted on the same store
    "watch",  # watch compaction (410 on resume) or every watch connection dropped
    "api",  # kubesim fault rules: 429 + Retry-After, 500, slow, failed DELETE, failed status
    "redeliver",  # kube events already published, republished (duplicated or reordered)
    "node",  # a node lost (kubelet stops), recovered later
)
FAULT_KINDS: Final[dict[FaultClass, tuple[str, ...]]] = {
    "kill": ("crash", "startup", "handover"),
    "freeze": ("stop",),
    "nats": ("crash",),
    "watch": ("compact", "drop"),
    "api": ("429", "500", "slow", "delete", "status"),
    "redeliver": ("duplicate", "reorder"),
    "node": ("loss",),
}
Behaviour = Literal["steady", "flaky", "crashing", "completing"]
Shape = Literal["pods", "job", "multi"]

LEASE_SECONDS: Final = 2.0
"""The services' lease duration in chaos runs; a freeze outlasts it."""


@dataclass(frozen=True, slots=True)
class Length:
    """How long a schedule's fault window is and how much runs in it."""

    window: float = 4.5
    """Faults start within this many seconds after the workload is submitted."""
    appwrappers: tuple[int, int] = (3, 4)
    extra_faults: int = 3
    """Faults beyond one per class, drawn from any class."""
    two_replicas: float = 0.5
    """Share of schedules that run two replicas of the tracker and the dispatcher."""
    node_loss: tuple[float, float] = (1.0, 6.0)
    """Seconds a lost node stays lost (past ~4 s its pods are evicted)."""


SHORT: Final = Length(window=2.5, appwrappers=(2, 2), extra_faults=0, node_loss=(1.0, 2.5))
DEFAULT: Final = Length()


@dataclass(frozen=True, slots=True)
class AppWrapperPlan:
    name: str
    behaviour: Behaviour
    shape: Shape
    gang: int
    grace: int
    """``terminationGracePeriodSeconds`` of its pods (30: only force deletion ends them)."""
    finalizer_release: float | None
    """Seconds after a pod starts terminating that its owner removes the hold finalizer;
    None: the pods carry no finalizer."""
    delete_mid_teardown: bool
    """The owner deletes the AppWrapper once its first teardown is decided."""
    submit_at: float
    max_requeuings: int
    run_time: float
    """How long crashing / completing pods run before they exit."""

    @property
    def expected(self) -> str:
        """The state L1 expects once faults stop: Running, Completed, Failed or Deleted."""
        if self.delete_mid_teardown:
            return "Deleted"
        return {"steady": "Running", "flaky": "Running", "crashing": "Failed"}.get(
            self.behaviour, "Completed"
        )


@dataclass(frozen=True, slots=True)
class Fault:
    at: float
    """Seconds after the workload's start."""
    cls: FaultClass
    kind: str
    target: str = ""
    """A service replica (``tracker-1``), a node name, or empty."""
    duration: float = 0.0
    """How long it lasts (frozen, down, lost), or the delay of the second kill."""
    count: int = 0
    """Requests an API rule fails, or events republished."""

    def describe(self) -> str:
        parts = [f"+{self.at:.2f}s {self.cls}/{self.kind}"]
        if self.target:
            parts.append(self.target)
        if self.duration:
            parts.append(f"{self.duration:.2f}s")
        if self.count:
            parts.append(f"x{self.count}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    nodes: int
    two_replicas: bool
    appwrappers: tuple[AppWrapperPlan, ...]
    faults: tuple[Fault, ...]
    window: float
    length: Length = field(default=DEFAULT)

    @property
    def replicas(self) -> tuple[str, ...]:
        """Every service replica of this schedule, by its stack name."""
        base = ("watcher", "tracker", "dispatcher")
        return (*base, "tracker-1", "dispatcher-1") if self.two_replicas else base

    @property
    def nodes_names(self) -> tuple[str, ...]:
        return tuple(f"node-{i}" for i in range(1, self.nodes + 1))

    def describe(self) -> str:
        aws = ", ".join(
            f"{a.name}:{a.behaviour}/{a.shape}x{a.gang}"
            + (f" grace{a.grace}" if a.grace > 1 else "")
            + (" fin" if a.finalizer_release is not None else "")
            + (" del" if a.delete_mid_teardown else "")
            for a in self.appwrappers
        )
        faults = "; ".join(f.describe() for f in self.faults)
        replicas = "2 replicas" if self.two_replicas else "1 replica"
        return f"seed {self.seed}: {self.nodes} nodes, {replicas}; {aws}; faults: {faults}"


def _appwrapper(rng: random.Random, index: int) -> AppWrapperPlan:
    behaviour: Behaviour = rng.choice(("steady", "flaky", "crashing", "crashing", "completing"))
    table: dict[Behaviour, tuple[Shape, ...]] = {
        "steady": ("pods", "job", "multi"),
        "flaky": ("pods", "multi"),  # a Job would replace the deleted pod itself
        "crashing": ("pods", "job", "multi"),
        "completing": ("job",),  # completion is an item's condition (a Job's Complete)
    }
    shape: Shape = rng.choice(table[behaviour])
    gang = rng.randint(1, 3) if shape == "multi" else rng.choice((1, 1, 2, 3, 4, 6, 8))
    torn_down = behaviour in ("flaky", "crashing")
    return AppWrapperPlan(
        name=f"aw{index}",
        behaviour=behaviour,
        shape=shape,
        gang=gang,
        grace=30 if rng.random() < 0.25 else 1,
        finalizer_release=round(rng.uniform(0.5, 4.0), 2) if rng.random() < 0.3 else None,
        delete_mid_teardown=torn_down and rng.random() < 0.15,
        submit_at=round(rng.uniform(0.0, 1.0), 2),
        max_requeuings=rng.choice((1, 1, 2)) if behaviour == "crashing" else 0,
        run_time=round(rng.uniform(0.3, 1.0) if behaviour == "crashing" else rng.uniform(1, 3), 2),
    )


def _fault(rng: random.Random, cls: FaultClass, *, schedule: Schedule) -> Fault:
    window = schedule.length.window
    at = round(rng.uniform(0.3, window), 2)
    kind = rng.choice(FAULT_KINDS[cls])
    if cls == "kill":
        target = rng.choice(schedule.replicas)
        return Fault(at, cls, kind, target, duration=round(rng.uniform(0.0, 1.5), 2))
    if cls == "freeze":
        # watcher, tracker(s), dispatcher(s): every one of them holds a lease
        target = rng.choice(schedule.replicas)
        span = LEASE_SECONDS + rng.uniform(0.5, 2.0)
        return Fault(at, cls, kind, target, duration=round(span, 2))
    if cls == "nats":
        return Fault(at, cls, kind, duration=round(rng.uniform(0.2, 1.5), 2))
    if cls == "api":
        count = rng.randint(3, 8) if kind in ("delete", "status") else rng.randint(5, 25)
        return Fault(at, cls, kind, count=count, duration=round(rng.uniform(0.2, 1.0), 2))
    if cls == "redeliver":
        return Fault(at, cls, kind, count=rng.randint(5, 40))
    if cls == "node":
        target = rng.choice(schedule.nodes_names)
        low, high = schedule.length.node_loss
        return Fault(at, cls, kind, target, duration=round(rng.uniform(low, high), 2))
    return Fault(at, cls, kind)


def schedule_for(seed: int, *, length: Length = DEFAULT) -> Schedule:
    """The schedule of ``seed``: the same seed, the same schedule, on every machine."""
    rng = random.Random(seed)
    low, high = length.appwrappers
    appwrappers = tuple(_appwrapper(rng, i) for i in range(rng.randint(low, high)))
    bare = Schedule(
        seed=seed,
        nodes=3,
        two_replicas=rng.random() < length.two_replicas,
        appwrappers=appwrappers,
        faults=(),
        window=length.window,
        length=length,
    )
    classes: list[FaultClass] = [*FAULT_CLASSES]
    classes += [rng.choice(FAULT_CLASSES) for _ in range(length.extra_faults)]
    faults = sorted(
        (_fault(rng, cls, schedule=bare) for cls in classes),
        key=lambda f: f.at,
    )
    return Schedule(
        seed=seed,
        nodes=bare.nodes,
        two_replicas=bare.two_replicas,
        appwrappers=appwrappers,
        faults=tuple(faults),
        window=length.window,
        length=length,
    )
