"""Under MCAD v1's upstream AppWrapper CRD, applied unchanged (issue 17, acceptance 1 and 2).

That schema prunes ``status.clearance`` and Clearance's teardown fields in ``spec.schedulingSpec.
requeuing``. With the default ``CLEARANCE_BOOKKEEPING=auto`` the dispatcher reads the served CRD,
keeps its bookkeeping in the ``clearance.dev/bookkeeping`` annotation, and takes the per-AppWrapper
policy from ``clearance.dev/*`` annotations: the seed scenario then runs exactly as under the
project's CRD (same assertions, :func:`test_seed_scenario.check_seed_run`), with the deadlines the
annotations give (2 s alert, 4 s force, not the operator's 60 s / 570 s).

With the bookkeeping forced into ``status`` (no other store) the user is told, on the AppWrapper
and in the log, within 10 s — and the dispatcher does not spin (its write count is bounded).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Launch,
    Scenario,
    appwrapper,
    condition,
    dump_logs,
    failed,
    item,
    pod_template,
    requeuing,
    stack_config,
)
from test_seed_scenario import FORCE, SEED, STUCK_ALERT, SeedRun, check_seed_run, drive

from clearance import events
from clearance.stack import LocalStack
from clearance_dispatcher.appwrapper import parse_time

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_CRD = (REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml").read_text()
BOOKKEEPING = "clearance.dev/bookkeeping"
PRUNED = "pruned-job"

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


SPIN_BOUND = 10
"""Most API requests on AppWrappers the dispatcher may make in :data:`QUIET` seconds once it
has said the bookkeeping is pruned (a hot loop makes hundreds)."""
QUIET = 3.0


async def _pruned_run(launch: Launch, *, fault: str = "") -> tuple[Scenario, int]:
    """An AppWrapper under the upstream CRD with the bookkeeping forced into status (only the
    dispatcher runs, on its own informers); returns the dispatcher's AppWrapper requests in
    :data:`QUIET` seconds from 5 s after the submission."""
    env = {"CLEARANCE_BOOKKEEPING": "status", "CLEARANCE_INTAKE": "kube"}
    if fault:
        env["CLEARANCE_TEST_FAULT"] = fault
    scenario = await launch(
        nodes=1, crd=UPSTREAM_CRD, services=("dispatcher",), service_env={"dispatcher": env}
    )
    body = appwrapper(
        PRUNED,
        [item(pod_template(f"{PRUNED}-0"), pods=1)],
        min_available=1,
        requeue=requeuing(),
        policy_in="annotations",
    )
    submitted = time.monotonic()
    await scenario.submit(body, ledger=False)
    await asyncio.sleep(max(0.0, submitted + 5 - time.monotonic()))
    before = await _dispatcher_requests(scenario)
    await asyncio.sleep(QUIET)
    after = await _dispatcher_requests(scenario)
    return scenario, len([r for r in after if r["id"] not in {b["id"] for b in before}])


async def test_bookkeeping_forced_into_a_pruning_status_is_reported_within_10s_without_spinning(
    launch: Launch,
) -> None:
    started = time.monotonic()
    scenario, requests = await _pruned_run(launch)
    cond = condition(await scenario.status(PRUNED), "FieldsPruned")
    assert cond is not None and cond["status"] == "True", await scenario.status(PRUNED)
    assert cond["reason"] == "PrunedBySchema"
    assert "status.clearance" in str(cond["message"])
    assert "kubectl apply -k deploy/crd" in str(cond["message"])
    when = parse_time(cond["lastTransitionMicroTime"])
    created = parse_time((await scenario.appwrapper(PRUNED))["metadata"]["creationTimestamp"])
    assert when is not None and created is not None
    assert (when - created).total_seconds() < 10, (created, when)
    warnings = [e for e in await scenario.kube_events(PRUNED) if e["reason"] == "FieldsPruned"]
    assert [e["type"] for e in warnings] == ["Warning"], warnings
    assert "status.clearance" in warnings[0]["message"]
    # One start-up line names the cause (what the served CRD prunes) and the fix.
    lines = [
        line
        for line in scenario.stack.services["dispatcher"].output(tail=500).splitlines()
        if "the served AppWrapper CRD prunes" in line
    ]
    assert len(lines) == 1, lines
    assert "status.clearance" in lines[0] and "kubectl apply -k deploy/crd" in lines[0]
    # No hot loop, and nothing dispatched without a place to keep the attempt.
    assert requests <= SPIN_BOUND, requests
    assert not await scenario.objects(PRUNED)
    assert time.monotonic() - started < 60


async def test_without_the_read_back_a_pruned_status_spins_silently(launch: Launch) -> None:
    """The checks above catch the issue's behaviour: no condition, a hot requeue loop."""
    scenario, requests = await _pruned_run(launch, fault="ignore-pruned")
    assert condition(await scenario.status(PRUNED), "FieldsPruned") is None
    assert requests > SPIN_BOUND, requests


async def _dispatcher_requests(scenario: Scenario) -> list[dict[str, Any]]:
    url = f"{scenario.stack.kubesim_url}/kubesim/v1/requests"
    params = {"userAgent": "clearance-dispatcher/"}
    async with scenario.http.get(url, params=params) as response:
        response.raise_for_status()
        body = await response.json()
    return [r for r in body["items"] if f"/appwrappers/{PRUNED}" in r["path"]]
