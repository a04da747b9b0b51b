"""The bookkeeping forced into a status the CRD prunes (issue 17, acceptance 2).

With ``CLEARANCE_BOOKKEEPING=status`` under MCAD v1's upstream CRD (which prunes
``status.clearance``) and no other store, the dispatcher cannot keep an attempt. The user is told
within 10 s — condition ``FieldsPruned`` and a Warning Event on the AppWrapper naming the field and
the fix, one start-up log line naming what the served CRD prunes — and the dispatcher does not
spin: its requests on the AppWrapper stay bounded (the issue reported ~70 % of a core). The
``ignore-pruned`` test fault (no read-back) shows the same checks catching the old behaviour.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Launch,
    Scenario,
    appwrapper,
    condition,
    eventually,
    item,
    pod_template,
    requeuing,
)

from clearance.timestamps import parse_time

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_CRD = (REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml").read_text()
PRUNED = "pruned-job"

pytestmark = [pytest.mark.slow]


SPIN_BOUND = 8
"""Most API requests on the AppWrapper the dispatcher may make in :data:`QUIET` seconds once it
has said the bookkeeping is pruned (the issue's hot loop makes hundreds)."""
QUIET = 2.0


async def _pruned_run(launch: Launch, *, fault: str = "") -> tuple[Scenario, int]:
    """An AppWrapper under the upstream CRD with the bookkeeping forced into status (only the
    dispatcher runs, on its own informers). Waits for the FieldsPruned condition (at most
    10 s; 2 s with a fault that suppresses it), then returns the dispatcher's requests on the
    AppWrapper in the next :data:`QUIET` seconds."""
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
    await scenario.submit(body, ledger=False)

    async def told() -> object:
        return condition(await scenario.status(PRUNED), "FieldsPruned")

    if fault:
        await asyncio.sleep(2.0)
    else:
        await eventually(told, timeout=10, what="the FieldsPruned condition")
    before = {r["id"] for r in await _dispatcher_requests(scenario)}
    await asyncio.sleep(QUIET)
    after = await _dispatcher_requests(scenario)
    return scenario, len([r for r in after if r["id"] not in before])


async def test_bookkeeping_forced_into_a_pruning_status_is_reported_within_10s_without_spinning(
    launch: Launch,
) -> None:
    started = time.monotonic()
    scenario, requests = await _pruned_run(launch)
    print(f"dispatcher requests on the AppWrapper in {QUIET}s after the condition: {requests}")
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
    print(f"ignore-pruned: dispatcher requests on the AppWrapper in {QUIET}s: {requests}")
    assert condition(await scenario.status(PRUNED), "FieldsPruned") is None
    assert requests > SPIN_BOUND, requests


async def _dispatcher_requests(scenario: Scenario) -> list[dict[str, Any]]:
    url = f"{scenario.stack.kubesim_url}/kubesim/v1/requests"
    params = {"userAgent": "clearance-dispatcher/"}
    async with scenario.http.get(url, params=params) as response:
        response.raise_for_status()
        body = await response.json()
    return [r for r in body["items"] if f"/appwrappers/{PRUNED}" in r["path"]]
