"""Real-process chaos in ``make test``: two short schedules pass, and a broken build is caught.

The full run is ``make chaos`` (docs/chaos.md); these keep the harness itself working on every
change: the same stack, driver, nemesis and checker, with short schedules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.chaos import plan
from tests.chaos.__main__ import replay_command
from tests.chaos.runner import run_schedule

pytestmark = pytest.mark.slow

CLEAN_SEEDS = (1, 3)
BROKEN_SEED = 188
"""A short schedule with a crashing single-pod AppWrapper whose pod a finalizer holds: the
``cleared-early`` build clears its teardown while that pod still exists (S2)."""


@pytest.mark.parametrize("seed", CLEAN_SEEDS)
async def test_a_short_chaos_schedule_keeps_every_invariant(seed: int, tmp_path: Path) -> None:
    result = await run_schedule(plan.schedule_for(seed, length=plan.SHORT), tmp_path / "run")
    replay = replay_command(seed, short=True, fault="")
    assert result.errors == [], f"{result.errors}\nreplay: {replay}"
    assert [str(v) for v in result.violations] == [], f"{result.description}\nreplay: {replay}"
    assert sum(result.faults.values()) >= len(plan.FAULT_CLASSES) - 1


async def test_the_checker_catches_a_tracker_that_clears_one_object_early(tmp_path: Path) -> None:
    schedule = plan.schedule_for(BROKEN_SEED, length=plan.SHORT)
    result = await run_schedule(schedule, tmp_path / "run", fault_env="cleared-early")
    caught = [v for v in result.violations if v.invariant == "S2"]
    assert caught, f"cleared-early went unnoticed: {result.description}"
    assert "existed" in caught[0].detail
