"""Under MCAD v1's upstream AppWrapper CRD, applied unchanged (issue 17, acceptance 1 and 2).

That schema prunes ``status.clearance`` and Clearance's teardown fields in ``spec.schedulingSpec.
requeuing``. With the default ``CLEARANCE_BOOKKEEPING=auto`` the dispatcher reads the served CRD,
keeps its bookkeeping in the ``clearance.dev/bookkeeping`` annotation, and takes the per-AppWrapper
policy from ``clearance.dev/*`` annotations: the seed scenario then runs exactly as under the
project's CRD (same assertions, :func:`test_seed_scenario.check_seed_run`), with the deadlines the
annotations give (2 s alert, 4 s force, not the operator's 60 s / 570 s).

The bookkeeping forced into a pruning status: test_pruned_bookkeeping.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Scenario,
    dump_logs,
    failed,
    stack_config,
)
from test_seed_scenario import FORCE, SEED, STUCK_ALERT, SeedRun, check_seed_run, drive

from clearance import events
from clearance.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_CRD = (REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml").read_text()
BOOKKEEPING = "clearance.dev/bookkeeping"

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def upstream_seed_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SeedRun]:
    stack = LocalStack(
        stack_config(tmp_path_factory.mktemp("upstream-seed"), nodes=2, crd=UPSTREAM_CRD)
    )
    scenario = None
    broken = False
    try:
        await stack.start()
        scenario = await Scenario.open(stack)
        try:
            run = await drive(scenario, policy_in="annotations")
        except BaseException:
            broken = True
            raise
        yield run
    finally:
        if scenario is not None:
            await scenario.close()
        items = [i for i in request.session.items if getattr(i, "module", None) is request.module]
        if broken or any(failed(i) for i in items):
            dump_logs(stack)
            if scenario is not None:
                print(scenario.log.timeline())
        await stack.stop()


async def test_seed_scenario_completes_with_one_requeue_under_the_upstream_crd(
    upstream_seed_run: SeedRun,
) -> None:
    await check_seed_run(upstream_seed_run)
    aw = await upstream_seed_run.scenario.appwrapper(SEED)
    assert "clearance" not in aw.get("status", {}), "the upstream schema prunes status.clearance"
    bookkeeping = json.loads(aw["metadata"]["annotations"][BOOKKEEPING])
    assert bookkeeping["clearance"]["attempt"] == 2
    assert bookkeeping["clearance"]["phase"] == "Dispatched"
    assert bookkeeping["status"]["numberOfRequeueings"] == 1


async def test_policy_annotations_give_the_appwrapper_its_own_deadlines(
    upstream_seed_run: SeedRun,
) -> None:
    run = upstream_seed_run
    aw = await run.scenario.appwrapper(SEED)
    requeue = aw["spec"]["schedulingSpec"]["requeuing"]
    assert "stuckAlertTimeInSeconds" not in requeue  # pruned: only the annotation gives it
    assert run.teardown.policy.stuck_alert_seconds == STUCK_ALERT
    assert run.teardown.policy.force_deletion_seconds == FORCE
    started = run.teardown.occurred_at
    log = run.scenario.log
    (alert,) = [e for e in log.of(events.AlertDeletionStuck) if e.step == "stuck_alert"]
    (forced,) = log.of(events.CycleDeletionForced, attempt=1)
    # Due at +2 s and +4 s; the operator defaults (60 s, 570 s) would be far later.
    assert STUCK_ALERT <= (alert.occurred_at - started).total_seconds() < STUCK_ALERT + 5
    assert FORCE <= (forced.occurred_at - started).total_seconds() < FORCE + 5
