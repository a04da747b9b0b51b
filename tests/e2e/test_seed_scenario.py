"""The seed scenario of MCAD issue #599, end to end, and ``clearance events`` reading its alerts.

One AppWrapper, one pod (minAvailable 1) that carries a finalizer nobody removes; its node is
lost, the pod is evicted and stays ``Terminating`` far past the stuck-alert and force-deletion
deadlines (grace 0 does not get past a finalizer). Then the finalizer's owner finally lets go,
the pod disappears, and the job must run again under the same names: requeued exactly once,
one alert per escalation step, never a new object while an old one exists.

The scenario is driven once per module (:func:`seed_run`) and recorded; the tests assert on the
record, and the CLI test reads the alerts the run left in JetStream.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    HOLD,
    ApiObject,
    Scenario,
    appwrapper,
    check_cycle_trace,
    condition,
    dump_logs,
    eventually,
    failed,
    item,
    pod_state,
    pod_template,
    requeuing,
    stack_config,
)

from clearance import events
from clearance.processes import venv_script
from clearance.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
SEED = "seed-job"
POD = "seed-job-0"
STUCK_ALERT, FORCE, PAUSE = 2, 4, 1
HOLD_PAST_FORCE = 5.0
"""How long the pod stays stuck after the last deadline (force deletion) passed."""

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class SeedRun:
    scenario: Scenario
    node: str
    first_pod_uid: str
    teardown: events.CycleTeardownStarted
    held_pod: dict[str, Any] | None
    held_status: dict[str, Any]
    held_objects: list[ApiObject]
    held_types: list[tuple[str, int]]
    released_at: float
    cleared: events.CycleCleared
    redispatched: events.CycleRedispatched
    final_pod: dict[str, Any]
    final_status: dict[str, Any]
    safety: list[str]
    warnings: list[dict[str, Any]]


async def drive(scenario: Scenario, *, policy_in: str = "spec") -> SeedRun:
    """The seed scenario; ``policy_in="annotations"`` gives the teardown policy as
    ``clearance.dev/*`` annotations (for CRDs that prune the spec fields)."""
    log = scenario.log
    pod = pod_template(POD, grace=5, finalizers=[HOLD], cpu="1")
    await scenario.submit(
        appwrapper(
            SEED,
            [item(pod, pods=1, cpu="1")],
            min_available=1,
            requeue=requeuing(wait=2, pause=PAUSE, stuck_alert=STUCK_ALERT, force=FORCE),
            policy_in=policy_in,
        )
    )
    await log.wait_for(events.CycleDispatched, attempt=1, timeout=30)
    running = await eventually(
        lambda: _pod_if(scenario, "Running"), timeout=30, what="the first pod to run"
    )
    node = running["spec"]["nodeName"]
    first_uid = running["metadata"]["uid"]

    scenario.lose_node(node)
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)
    # Stuck far past every deadline (alert, force deletion), with the node still lost.
    hold_until = teardown.occurred_at.timestamp() + FORCE + HOLD_PAST_FORCE
    await asyncio.sleep(max(0.0, hold_until - time.time()))
    held_pod = await scenario.pod(POD)
    held_status = await scenario.status(SEED)
    held_objects = await scenario.objects(SEED)
    held_types = [(r.event.event_type, getattr(r.event, "attempt", 0)) for r in log.received]

    released_at = time.time()
    await scenario.strip_finalizers(POD)
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=30)
    redispatched = await log.wait_for(events.CycleRedispatched, attempt=2, timeout=30)
    final_pod = await eventually(
        lambda: _pod_if(scenario, "Running", not_uid=first_uid),
        timeout=30,
        what="the new pod to run",
    )
    # Leave the escalation machinery time to misbehave (a late duplicate alert, a requeue).
    await asyncio.sleep(1.5)
    return SeedRun(
        scenario=scenario,
        node=node,
        first_pod_uid=first_uid,
        teardown=teardown,
        held_pod=held_pod,
        held_status=held_status,
        held_objects=held_objects,
        held_types=held_types,
        released_at=released_at,
        cleared=cleared,
        redispatched=redispatched,
        final_pod=final_pod,
        final_status=await scenario.status(SEED),
        safety=await scenario.safety_violations(),
        warnings=await scenario.kube_events(SEED),
    )


async def _pod_if(scenario: Scenario, state: str, *, not_uid: str = "") -> dict[str, Any] | None:
    pod = await scenario.pod(POD)
    if pod_state(pod) == state and pod is not None and pod["metadata"]["uid"] != not_uid:
        return pod
    return None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def seed_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SeedRun]:
    stack = LocalStack(stack_config(tmp_path_factory.mktemp("seed"), nodes=2))
    scenario: Scenario | None = None
    broken = False
    try:
        await stack.start()
        scenario = await Scenario.open(stack)
        try:
            run = await drive(scenario)
        except BaseException:
            broken = True
            raise
        yield run
    finally:
        if scenario is not None:
            await scenario.close()
        module_items = [
            i for i in request.session.items if getattr(i, "module", None) is request.module
        ]
        if broken or any(failed(i) for i in module_items):
            dump_logs(stack)
            if scenario is not None:
                print(scenario.log.timeline())
        await stack.stop()


async def test_stuck_pod_holds_the_job_without_churn_and_it_resumes_under_the_same_names(
    seed_run: SeedRun,
) -> None:
    await check_seed_run(seed_run)


async def check_seed_run(run: SeedRun) -> None:
    """Everything the seed scenario promises, judged from the record of one run."""
    log = run.scenario.log

    # While stuck, far past every deadline: the old pod is still there, nothing new exists.
    assert pod_state(run.held_pod) == "Terminating"
    assert run.held_pod is not None and run.held_pod["metadata"]["uid"] == run.first_pod_uid
    assert {o.attempt for o in run.held_objects} == {1}, run.held_objects
    assert ("cycle.cleared", 1) not in run.held_types
    assert not [t for t in run.held_types if t[0] == "cycle.dispatched" and t[1] == 2]
    assert run.held_status.get("numberOfRequeueings") == 1
    waiting = [condition(run.held_status, c) for c in ("AwaitingDeletion", "DeletionStuck")]
    assert any(c is not None and c.get("status") == "True" for c in waiting), run.held_status

    # It resumes by itself once the pod goes: cleared only after that, then the redispatch.
    assert run.cleared.cleared_at.timestamp() >= run.released_at
    assert run.redispatched.cleared_at == run.cleared.cleared_at
    assert run.final_pod["metadata"]["name"] == POD
    assert run.final_pod["metadata"]["labels"]["clearance.dev/attempt"] == "2"
    assert run.final_status.get("numberOfRequeueings") == 1
    assert run.final_status.get("state") == "Running"

    # The bare-Pod item is one object: one inventory entry (issue 17 Build 5).
    assert [(o.kind, o.name) for o in run.teardown.inventory] == [("Pod", POD)]

    # Bounded requeue count: one decision, one teardown, one redispatch.
    assert [e.attempt for e in log.of(events.CycleRequeued)] == [1]
    assert [e.attempt for e in log.of(events.CycleTeardownStarted)] == [1]
    assert [e.attempt for e in log.of(events.CycleRedispatched)] == [2]
    assert [e.attempt for e in log.of(events.CycleDispatched)] == [1, 2]

    # Exactly one alert per escalation step (Never: no finalizer removal step).
    stuck_steps = Counter(e.step for e in log.of(events.AlertDeletionStuck, attempt=1))
    assert stuck_steps == Counter({"stuck_alert": 1, "force_deletion": 1})
    assert len(log.of(events.CycleDeletionForced, attempt=1)) == 1
    assert len(log.of(events.AlertDeletionForced, attempt=1)) == 1
    assert [e.node for e in log.of(events.AlertNodeLost, attempt=1)] == [run.node]
    assert not log.of(events.CycleFinalizersRemoved)
    assert {a.attempt for a in log.alerts()} == {1}

    # Each escalation step is also one Kubernetes Warning Event on the AppWrapper.
    warnings = Counter(
        (e["reason"], e.get("count", 1))
        for e in run.warnings
        if e.get("type") == "Warning" and e["reason"] in ("DeletionStuck", "DeletionForced")
    )
    assert warnings == Counter({("DeletionStuck", 1): 1, ("DeletionForced", 1): 1}), warnings

    # Safety, from the API server's own write history.
    assert run.safety == []
    await check_cycle_trace(run.scenario, SEED, 1)


async def test_events_cli_prints_each_alert_as_one_json_object(seed_run: SeedRun) -> None:
    scenario = seed_run.scenario
    env = {**os.environ, "CLEARANCE_NATS_URL": scenario.stack.nats_url}
    result = await asyncio.to_thread(
        subprocess.run,
        [venv_script("clearance"), "events", "--alerts", "--json", "--no-follow", "--since", "1h"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    schema = json.loads((REPO / "proto" / "events.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    printed = []
    for line in lines:
        document = json.loads(line)
        validator.validate(document)
        event = events.decode(line)
        assert isinstance(event, events.AlertEvent), line
        printed.append(event.msg_id())
    stored = [e.msg_id() for e in scenario.log.alerts()]
    assert len(stored) >= 3
    assert printed == stored
