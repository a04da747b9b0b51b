"""Teardown scenarios of issue #7 (reference §7 a-f), each against a whole local installation.

Every test starts its own stack (``launch``), submits one AppWrapper and provokes a requeue in
a way a real cluster would: a lost node, a pod whose container fails, a gang that cannot form
because one member is unschedulable. It then asserts DESIGN §5 on what users see: the cycle
events and alerts on NATS, the objects in the API server, and kubesim's write history (Safety:
no object of attempt N+1 while one of attempt ≤ N exists).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    EXIT_CODE,
    HOLD,
    RUN_TIME,
    UNSCHEDULABLE,
    Launch,
    Scenario,
    appwrapper,
    check_cycle_trace,
    condition,
    eventually,
    item,
    pod_state,
    pod_template,
    requeuing,
)

from clearance import events

pytestmark = pytest.mark.slow


async def running_pod(scenario: Scenario, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        pod = await scenario.pod(name)
        return pod if pod_state(pod) == "Running" else None

    result: dict[str, Any] = await eventually(probe, timeout=30, what=f"pod {name} to run")
    return result


def gang(name: str, *, grace: int, finalizers: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Two pods, minAvailable 2: the second can never be scheduled, so the gang never forms."""
    return [
        item(pod_template(f"{name}-0", grace=grace, finalizers=finalizers), pods=1),
        item(pod_template(f"{name}-1", node_selector=UNSCHEDULABLE), pods=1),
    ]


async def test_finalizer_held_pod_blocks_redispatch_until_the_opt_in_strip_clears_it(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    # The container fails; the pod's finalizer is never removed by its owner.
    crashing = pod_template(
        "held-0", finalizers=(HOLD,), annotations={RUN_TIME: "500ms", EXIT_CODE: "1"}
    )
    force = 3
    await scenario.submit(
        appwrapper(
            "held",
            [item(crashing, pods=1)],
            min_available=1,
            requeue=requeuing(
                wait=2, stuck_alert=2, force=force, finalizer_removal="AfterForceDeletion"
            ),
        )
    )
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=40)
    removed = await log.wait_for(events.CycleFinalizersRemoved, attempt=1, timeout=30)

    # While the finalizer held the pod: alerts, a force delete that could not help, no churn.
    stuck = log.of(events.AlertDeletionStuck, attempt=1, step="stuck_alert")
    assert len(stuck) == 1
    causes = [c for s in stuck[0].stuck for c in s.reasons]
    assert any(isinstance(c, events.Finalizers) and HOLD in c.finalizers for c in causes)
    forced = log.of(events.CycleDeletionForced, attempt=1)
    assert len(forced) == 1
    assert forced[0].occurred_at.timestamp() >= teardown.occurred_at.timestamp() + force
    assert removed.occurred_at >= forced[0].occurred_at
    stripped = {(r.object.name, f) for r in removed.removed for f in r.finalizers}
    assert ("held-0", HOLD) in stripped
    before_strip = [r.event for r in log.received if r.wall <= log.arrival(removed)]
    assert not [e for e in before_strip if isinstance(e, events.CycleCleared)]
    assert not [e for e in before_strip if isinstance(e, events.CycleDispatched) and e.attempt > 1]

    # The strip resolves it: cleared, then the redispatch under the same name.
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=20)
    assert cleared.cleared_at >= removed.occurred_at
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=20)
    pod = await eventually(lambda: scenario.pod("held-0"), timeout=20, what="the new pod")
    assert pod["metadata"]["labels"]["clearance.dev/attempt"] == "2"
    assert [e.attempt for e in log.of(events.CycleRequeued)] == [1]
    assert Counter(e.step for e in log.of(events.AlertDeletionStuck, attempt=1))["stuck_alert"] == 1
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "held", 1)


async def test_lost_node_pod_is_force_deleted_at_the_deadline_and_cleared_soon_after(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    force = 4
    await scenario.submit(
        appwrapper(
            "lost",
            [item(pod_template("lost-0", grace=30), pods=1)],
            min_available=1,
            requeue=requeuing(wait=2, stuck_alert=2, force=force),
        )
    )
    node = (await running_pod(scenario, "lost-0"))["spec"]["nodeName"]
    scenario.lose_node(node)
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)
    started = teardown.occurred_at.timestamp()

    forced = await log.wait_for(events.CycleDeletionForced, attempt=1, timeout=20)
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=20)
    # Not before the deadline (the dead kubelet would never finish the 30 s grace) …
    assert forced.occurred_at.timestamp() >= started + force
    assert cleared.cleared_at.timestamp() >= started + force
    assert cleared.cleared_at >= forced.occurred_at
    assert [o.name for o in forced.objects] == ["lost-0"]
    # … and soon after it: a grace-0 delete of a finalizer-free pod is immediate.
    assert (cleared.cleared_at - forced.occurred_at).total_seconds() < 3.0
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=20)
    assert len(log.of(events.AlertDeletionForced, attempt=1)) == 1
    assert [a.node for a in log.of(events.AlertNodeLost, attempt=1)] == [node]
    assert (await running_pod(scenario, "lost-0"))["spec"]["nodeName"] != node
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "lost", 1)


async def test_slow_graceful_termination_within_the_deadline_is_never_forced(
    launch: Launch,
) -> None:
    # A live kubelet needs 3 s to stop the pod (its grace period); force deletion is at 6 s.
    scenario = await launch(kubesim_flags=("--kubelet-termination-delay", "3s"))
    log = scenario.log
    force = 6
    await scenario.submit(
        appwrapper(
            "slow",
            gang("slow", grace=3),
            min_available=2,
            requeue=requeuing(wait=2, stuck_alert=5, force=force),
        )
    )
    await running_pod(scenario, "slow-0")
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)
    await asyncio.sleep(1.0)
    assert pod_state(await scenario.pod("slow-0")) == "Terminating"
    last_seen = time.time()

    async def gone_or_new() -> bool:
        pod = await scenario.pod("slow-0")
        return pod is None or pod["metadata"]["labels"]["clearance.dev/attempt"] != "1"

    await eventually(gone_or_new, timeout=20, what="the slow pod to finish")
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=20)
    assert cleared.cleared_at.timestamp() >= last_seen
    # Past the force deadline of attempt 1: still never forced, never alerted.
    deadline = teardown.occurred_at.timestamp() + force + 1.0
    await asyncio.sleep(max(0.0, deadline - time.time()))
    assert not log.of(events.CycleDeletionForced, attempt=1)
    assert not log.of(events.AlertDeletionForced, attempt=1)
    assert not log.of(events.AlertDeletionStuck, attempt=1)
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=20)
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "slow", 1)


async def test_requeue_limit_fails_the_appwrapper_with_one_critical_alert(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    await scenario.submit(
        appwrapper(
            "limited",
            gang("limited", grace=1),
            min_available=2,
            requeue=requeuing(wait=2, pause=1, max_requeuings=1),
        )
    )
    failed = await log.wait_for(events.CycleFailed, timeout=40)
    assert failed.attempt == 2
    assert failed.reason == "MaxNumRequeuingsReached"
    alert = await log.wait_for(events.AlertRequeueLimit, timeout=10)
    assert alert.attempt == 2
    assert alert.severity == "critical"
    assert (alert.number_of_requeueings, alert.max_num_requeuings) == (1, 1)

    status = await scenario.status("limited")
    assert status.get("state") == "Failed"
    assert status.get("numberOfRequeueings") == 1
    failed_condition = condition(status, "Failed")
    assert failed_condition is not None and failed_condition.get("status") == "True"
    # A Failed AppWrapper is torn down and never dispatched again.
    await eventually(
        lambda: _none_left(scenario, "limited"), timeout=20, what="the failed job's teardown"
    )
    await asyncio.sleep(2.5)
    assert [e.attempt for e in log.of(events.CycleDispatched)] == [1, 2]
    assert [e.attempt for e in log.of(events.CycleRequeued)] == [1]
    assert len(log.of(events.AlertRequeueLimit)) == 1
    assert await scenario.objects("limited") == []
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "limited", 1)
    # The failed attempt's cycle ends with its cleared teardown: no redispatch closes it.
    await check_cycle_trace(scenario, "limited", 2, closing=None)


async def _none_left(scenario: Scenario, name: str) -> bool:
    return not await scenario.objects(name)


async def test_redispatch_pause_is_counted_from_cleared_not_from_the_requeue_decision(
    launch: Launch,
) -> None:
    # The teardown itself takes ~2 s (graceful stop), so the two clocks differ measurably.
    scenario = await launch(kubesim_flags=("--kubelet-termination-delay", "2s"))
    log = scenario.log
    pause = 3
    await scenario.submit(
        appwrapper(
            "paused",
            gang("paused", grace=2),
            min_available=2,
            requeue=requeuing(wait=2, pause=pause, stuck_alert=10, force=20),
        )
    )
    requeued = await log.wait_for(events.CycleRequeued, attempt=1, timeout=30)
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=30)
    redispatched = await log.wait_for(events.CycleRedispatched, attempt=2, timeout=30)
    dispatched = await log.wait_for(events.CycleDispatched, attempt=2, timeout=5)

    teardown_seconds = (cleared.cleared_at - requeued.occurred_at).total_seconds()
    assert teardown_seconds >= 1.5, "the teardown was too fast to tell the clocks apart"
    assert redispatched.cleared_at == cleared.cleared_at
    assert (redispatched.occurred_at - cleared.cleared_at).total_seconds() >= pause
    assert (dispatched.occurred_at - cleared.cleared_at).total_seconds() >= pause
    assert redispatched.pause_seconds >= pause
    assert (redispatched.occurred_at - requeued.occurred_at).total_seconds() >= (
        teardown_seconds + pause
    )
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "paused", 1)


async def test_blind_watcher_never_yields_an_early_cleared(launch: Launch) -> None:
    scenario = await launch()
    log = scenario.log
    await scenario.submit(
        appwrapper(
            "blind",
            gang("blind", grace=1, finalizers=(HOLD,)),
            min_available=2,
            # No force deletion: only the test can make the held pod go.
            requeue=requeuing(wait=2, pause=1, stuck_alert=2, force=0),
        )
    )
    await running_pod(scenario, "blind-0")
    await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)

    async def only_held_pod_left() -> bool:
        left = await scenario.objects("blind")
        return [(o.name, o.terminating) for o in left] == [("blind-0", True)]

    await eventually(only_held_pod_left, timeout=20, what="only the held pod to remain")
    # The watcher dies: from now on nothing tells NATS that pods change or go. (A moment
    # first, so the spans it already ended are exported: SIGKILL loses the rest.)
    await asyncio.sleep(0.5)
    scenario.stack.services["watcher"].kill()
    await asyncio.sleep(2.5)
    assert not log.of(events.CycleCleared, attempt=1)

    released_at = time.time()
    await scenario.strip_finalizers("blind-0")
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=20)
    # At the moment cleared is observed the API has nothing of attempt 1 (quorum LIST) …
    assert [o for o in await scenario.objects("blind") if o.attempt == 1] == []
    # … it was published after the object really went, and not on a watch event nobody sent.
    assert cleared.cleared_at.timestamp() >= released_at
    held = [
        c
        for e in log.of(events.CycleDeletionConfirmed, attempt=1)
        for c in e.confirmed
        if c.object.name == "blind-0"
    ]
    assert [c.how for c in held if c.how == "watch_deleted"] == []
    history = await scenario.history()
    assert any(w.type == "DELETED" and w.name == "blind-0" for w in history)

    # The watcher comes back (relist, inferred tombstones): still one cleared, then redispatch.
    scenario.stack.services["watcher"].start()
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=30)
    await running_pod(scenario, "blind-0")
    assert len(log.of(events.CycleCleared, attempt=1)) == 1
    assert not log.of(events.CycleCleared, attempt=2)
    assert await scenario.safety_violations() == []
    await check_cycle_trace(scenario, "blind", 1)


async def test_multi_item_appwrapper_is_torn_down_completely_before_the_next_attempt(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "multi-job"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {RUN_TIME: "1h"}},
                "spec": pod_template("unused", grace=1)["spec"],
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "multi-svc"},
        "spec": {"selector": {"app": "multi"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "multi-config"}}
    await scenario.submit(
        appwrapper(
            "multi",
            # minAvailable 3 against 2 Job pods: the job is requeued after the wait.
            [item(job, pods=2), item(service), item(config)],
            min_available=3,
            requeue=requeuing(wait=2, pause=1, stuck_alert=5, force=10),
        )
    )

    async def first_attempt_running() -> bool:
        objects = await scenario.objects("multi")
        kinds = Counter(o.kind for o in objects if o.attempt == 1)
        return kinds == Counter({"Pod": 2, "Job": 1, "Service": 1, "ConfigMap": 1})

    await eventually(first_attempt_running, timeout=30, what="attempt 1 with its Job pods")
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=40)
    left = [o for o in await scenario.objects("multi") if o.attempt == 1]
    assert left == []
    confirmed = Counter(o.kind for o in cleared.confirmed)
    assert confirmed == Counter({"Pod": 2, "Job": 1, "Service": 1, "ConfigMap": 1}), confirmed

    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=20)

    async def second_attempt_complete() -> bool:
        objects = await scenario.objects("multi")
        names = {(o.kind, o.name) for o in objects if o.attempt == 2}
        pods = [o for o in objects if o.attempt == 2 and o.kind == "Pod"]
        return {("Job", "multi-job"), ("Service", "multi-svc"), ("ConfigMap", "multi-config")} <= (
            names
        ) and len(pods) == 2

    await eventually(second_attempt_complete, timeout=30, what="attempt 2 with its Job pods")
    violations = await scenario.safety_violations()
    assert violations == []
    # The history really contains both attempts (the check above is not vacuous).
    assert set(scenario.attempts().values()) == {1, 2}
    await check_cycle_trace(scenario, "multi", 1)
