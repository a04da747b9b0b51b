"""One schedule against the real stack: start, drive, inject, heal, wait, collect, judge, stop.

:func:`run_schedule` starts a fresh :class:`~clearance.stack.LocalStack` in its own directory
(nats-server, ``kubesim serve`` keeping AppWrapper and Pod bodies in its history, the three
services — two replicas of the tracker and the dispatcher when the schedule says so — and the
OTLP receiver), lets the :class:`~tests.chaos.workload.Driver` play the owners while the
:class:`~tests.chaos.nemesis.Nemesis` injects the faults, heals everything, waits until every
AppWrapper is in its expected state (or the L1 bound passes), stops the services gracefully so
their last spans are exported, then reads the history, the cycle stream and the spans and hands
them to the checker. Its directory (logs of every process) is removed unless the schedule failed
or ``keep`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos import checker, history
from tests.chaos.nemesis import Nemesis
from tests.chaos.plan import LEASE_SECONDS, Schedule
from tests.chaos.workload import Driver
from tests.e2e.e2e_support import KUBESIM_FLAGS, SERVICE_ENV

from clearance import bus
from clearance.processes import ServiceProcess
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig

L1_BOUND = 60.0
"""Seconds after the last fault within which every AppWrapper must reach its expected state:
the longest legitimate path is a crashing AppWrapper's remaining requeue cycles (wait 2 s,
teardown up to the 3 s force deadline plus a late finalizer, pause 1 s, each) behind a
lease hand-over."""
SETTLE_HOLD = 1.5
"""An AppWrapper counts as settled once it has stayed in its expected state this long."""


def chaos_env() -> dict[str, str]:
    lease = f"{LEASE_SECONDS:g}s"
    return {**SERVICE_ENV, "CLEARANCE_LEASE_DURATION": lease, "CLEARANCE_LOG_LEVEL": "INFO"}


@dataclass
class ScheduleResult:
    seed: int
    description: str
    violations: list[checker.Violation]
    faults: Counter[str]
    fault_kinds: Counter[str]
    cycles: int
    recovery: float | None
    wall: float
    workdir: Path
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Things seen that no invariant judges (a replica that ignored SIGTERM)."""

    @property
    def ok(self) -> bool:
        return not self.violations and not self.errors


async def run_schedule(
    schedule: Schedule, workdir: Path, *, fault_env: str = "", keep: bool = False
) -> ScheduleResult:
    began = time.monotonic()
    shutil.rmtree(workdir, ignore_errors=True)  # a fresh store: nothing of an earlier run
    env = chaos_env()
    if fault_env:
        env["CLEARANCE_TEST_FAULT"] = fault_env
    stack = LocalStack(
        StackConfig(
            workdir=workdir,
            nodes=schedule.nodes,
            kubesim_flags=(*KUBESIM_FLAGS, "--audit-objects", history.AUDITED_KINDS),
            env=env,
        )
    )
    errors: list[str] = []
    notes: list[str] = []
    try:
        await stack.start()
        if schedule.two_replicas:
            for name in ("tracker", "dispatcher"):
                stack.add_replica(name, 1)
        observation = await _play(stack, schedule, errors, notes)
    except Exception as exc:
        errors.append(f"harness: {exc!r}")
        observation = None
    finally:
        await stack.stop()
    violations = checker.check(observation) if observation is not None else []
    faults: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for injection in observation.injections if observation else ():
        if injection.injected:
            faults[injection.fault.cls] += 1
            kinds[f"{injection.fault.cls}/{injection.fault.kind}"] += 1
    result = ScheduleResult(
        seed=schedule.seed,
        description=schedule.describe(),
        violations=violations,
        faults=faults,
        fault_kinds=kinds,
        cycles=len(checker.cycles(observation)) if observation else 0,
        recovery=checker.recovery_seconds(observation) if observation else None,
        wall=time.monotonic() - began,
        workdir=workdir,
        errors=errors,
        notes=notes,
    )
    if result.ok and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    elif observation is not None:
        _keep_evidence(observation, workdir)
    return result


STOP_TIMEOUT = 10.0


async def _terminate(name: str, process: ServiceProcess, notes: list[str]) -> None:
    """SIGTERM and wait; a replica that is still running after :data:`STOP_TIMEOUT` is killed
    and noted (a graceful stop that hangs is a defect of its own)."""
    began = time.monotonic()
    code = await asyncio.to_thread(process.terminate, timeout=STOP_TIMEOUT)
    if code == -9:
        notes.append(f"{name} did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM (killed)")
    elif time.monotonic() - began > STOP_TIMEOUT / 2:
        notes.append(f"{name} took {time.monotonic() - began:.1f}s to stop")


def _keep_evidence(observation: history.Observation, workdir: Path) -> None:
    """What the checker judged, beside the logs: the writes and the cycle stream, as text."""
    with (workdir / "writes.txt").open("w") as out:
        for w in observation.writes:
            extra = ""
            if w.kind == "AppWrapper" and w.object:
                extra = f" state={w.status.get('state')} clearance={dict(w.clearance_status)}"
            elif w.kind == "Pod" and w.object:
                extra = f" phase={w.status.get('phase')}"
            out.write(
                f"{w.time:.3f} rv={w.rv} {w.type} {w.kind}/{w.name} {w.uid[:8]} "
                f"attempt={w.attempt} by={w.user_agent[:40]} verb={w.verb} "
                f"term={w.terminating}{extra}\n"
            )
    with (workdir / "cycle.txt").open("w") as out:
        for p in observation.cycle:
            event = p.event
            out.write(
                f"{p.time:.3f} seq={p.seq} {event.event_type} "
                f"{getattr(getattr(event, 'appwrapper', None), 'name', '-')} "
                f"attempt={getattr(event, 'attempt', '-')} id={p.msg_id}\n"
            )
    with (workdir / "spans.txt").open("w") as out:
        for span in sorted(observation.spans, key=lambda x: x.start_ns):
            out.write(
                f"{span.start_ns / 1e9:.3f}-{span.end_ns / 1e9:.3f} {span.service} {span.name} "
                f"trace={span.trace_id[:12]} span={span.span_id} parent={span.parent_span_id} "
                f"{span.attributes}\n"
            )
    with (workdir / "faults.txt").open("w") as out:
        for i in observation.injections:
            out.write(
                f"{i.started:.3f}-{i.ended:.3f} {i.fault.describe()} "
                f"injected={i.injected} {i.error}\n"
            )
        out.write(f"healed at {observation.healed_at:.3f}\n")
        for name, at in sorted(observation.settled_at.items()):
            out.write(f"settled {name} at {at:.3f}\n")


async def _play(
    stack: LocalStack, schedule: Schedule, errors: list[str], notes: list[str]
) -> history.Observation:
    nc = await bus.connect(
        CommonSettings(nats_url=stack.nats_url, nats_reconnect_wait=0.1),
        name="chaos",
        first_connect_timeout=10,
    )
    try:
        async with Driver(stack.kubesim_url, schedule.appwrappers) as driver:
            nemesis = Nemesis(stack, schedule, nc)
            origin = time.time()
            submitting = asyncio.create_task(driver.submit())
            acting = asyncio.create_task(driver.run())
            nemesis.start(origin)
            try:
                async with asyncio.timeout(schedule.window + 30):
                    await nemesis.finish()
            except TimeoutError:
                errors.append("a fault did not finish within 30 s of the window")
            healed_at = await nemesis.heal()
            await submitting
            deadline = healed_at + L1_BOUND + SETTLE_HOLD
            await driver.wait_settled(hold=SETTLE_HOLD, deadline=deadline)
            acting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acting
            await nemesis.stop_supervising()
            errors.extend(driver.errors[:5])
            # Graceful stop: the services export their last spans to the receiver.
            await asyncio.gather(
                *(_terminate(name, p, notes) for name, p in stack.services.items())
            )
            writes = await history.read_history(stack.kubesim_url)
            cycle, bad = await history.read_cycle_stream(nc)
            assert stack.receiver is not None
            return history.Observation(
                plans=schedule.appwrappers,
                writes=writes,
                cycle=cycle,
                spans=list(stack.receiver.spans),
                injections=nemesis.injections,
                healed_at=healed_at,
                settled_at=dict(driver.settled_at),
                induced=dict(driver.induced),
                deleted=dict(driver.deleted),
                l1_bound=L1_BOUND,
                undecodable=bad,
            )
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
