"""Schedules side by side: each in its own ``python -m tests.chaos --replay SEED`` child.

One schedule keeps about 40% of one core busy (the services mostly wait: for leases, grace
periods, redeliveries), so a 2-core machine runs two at once. A schedule runs in a process of
its own, not beside another on one event loop: the stack's start-up waits block, and a
blocked loop would shift the other schedule's faults. The child writes its
:class:`~tests.chaos.runner.ScheduleResult` as JSON (:func:`dump`), the parent reads it back
(:func:`load`); the child's output goes to ``<workdir>/seed-S.out``, kept beside its logs when
the schedule failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.chaos.checker import Violation
from tests.chaos.runner import ScheduleResult


def dump(result: ScheduleResult, path: Path) -> None:
    data = {
        "seed": result.seed,
        "description": result.description,
        "violations": [[v.invariant, v.appwrapper, v.detail] for v in result.violations],
        "faults": dict(result.faults),
        "fault_kinds": dict(result.fault_kinds),
        "cycles": result.cycles,
        "recovery": result.recovery,
        "wall": result.wall,
        "workdir": str(result.workdir),
        "errors": result.errors,
        "notes": result.notes,
    }
    path.write_text(json.dumps(data))


def load(path: Path) -> ScheduleResult:
    data: dict[str, Any] = json.loads(path.read_text())
    return ScheduleResult(
        seed=int(data["seed"]),
        description=str(data["description"]),
        violations=[Violation(*v) for v in data["violations"]],
        faults=Counter(data["faults"]),
        fault_kinds=Counter(data["fault_kinds"]),
        cycles=int(data["cycles"]),
        recovery=data["recovery"],
        wall=float(data["wall"]),
        workdir=Path(data["workdir"]),
        errors=list(data["errors"]),
        notes=list(data["notes"]),
    )


async def run_in_child(
    seed: int, root: Path, *, short: bool, fault: str, keep: bool
) -> ScheduleResult:
    """One schedule in a child process; a child that dies without a result is a harness
    error of that schedule (never a silent pass)."""
    result_file = root / f"seed-{seed}.result.json"
    out_file = root / f"seed-{seed}.out"
    args = [sys.executable, "-m", "tests.chaos", "--replay", str(seed), "--no-report"]
    args += ["--workdir", str(root), "--result", str(result_file)]
    args += ["--short"] if short else []
    args += ["--fault", fault] if fault else []
    args += ["--keep"] if keep else []
    with out_file.open("wb") as out:
        child = await asyncio.create_subprocess_exec(*args, stdout=out, stderr=out)
        code = await child.wait()
    if result_file.exists():
        result = load(result_file)
        result_file.unlink()
        if result.ok:
            out_file.unlink(missing_ok=True)
        return result
    return ScheduleResult(
        seed=seed,
        description="(the schedule's process ended without a result)",
        violations=[],
        faults=Counter(),
        fault_kinds=Counter(),
        cycles=0,
        recovery=None,
        wall=0.0,
        workdir=root / f"seed-{seed}",
        errors=[f"harness: child exited {code} without a result; output in {out_file}"],
    )


async def run_all(
    seeds: list[int],
    *,
    jobs: int,
    one: Callable[[int], Awaitable[ScheduleResult]],
    done: Callable[[int, ScheduleResult], None],
) -> list[ScheduleResult]:
    """Run ``one(seed)`` for every seed, at most ``jobs`` at once; ``done(count, result)`` as
    each ends; the results in seed order."""
    gate = asyncio.Semaphore(max(1, jobs))
    finished = 0

    async def guarded(seed: int) -> ScheduleResult:
        nonlocal finished
        async with gate:
            result = await one(seed)
        finished += 1
        done(finished, result)
        return result

    return list(await asyncio.gather(*(guarded(s) for s in seeds)))
