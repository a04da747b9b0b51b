"""Acceptance 2 and 3: requeue after the wait, MCAD v1 growth with its cap, a limit that
actually fires, and safety against kubesim's write history."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
from tests.support.dispatcher_env import condition, job_appwrapper, state_is

from clearance import bus, events
from clearance.kube import PODS


def _by_attempt(evts: list[events.Event]) -> dict[int, Any]:
    return {e.attempt: e for e in evts}  # type: ignore[union-attr]


async def test_requeue_wait_grows_exponentially_capped_and_limit_fails_it(make_env: Any) -> None:
    env = await make_env()
    await env.start_dispatcher()
    requeuing = {
        "timeInSeconds": 1,
        "growthType": "exponential",
        "maxTimeInSeconds": 3,
        "maxNumRequeuings": 3,
    }
    await env.create_aw(
        job_appwrapper(
            "grow",
            env.namespace,
            unschedulable=True,
            min_available=2,
            requeuing=requeuing,
            completion=False,
        )
    )
    failed = await env.wait_aw("grow", state_is("Failed"), timeout=40, what="Failed")
    status = failed["status"]
    assert status["numberOfRequeueings"] == 3
    assert status["requeueingTimeInSeconds"] == 3  # 1 → 2 → 4 capped at 3
    assert (condition(failed, "Failed") or {}).get("reason") == "MaxNumRequeuingsReached"

    dispatched = _by_attempt(env.cycle_events("cycle.dispatched", "grow"))
    requeued = _by_attempt(env.cycle_events("cycle.requeued", "grow"))
    assert sorted(dispatched) == [1, 2, 3, 4]
    assert sorted(requeued) == [1, 2, 3]
    (fail,) = await env.wait_event("cycle.failed", "grow")
    waits = [1, 2, 3]  # the wait in force for attempts 1, 2, 3 (the 4th also waits 3)
    for attempt, wait in enumerate(waits, start=1):
        took = (requeued[attempt].occurred_at - dispatched[attempt].occurred_at).total_seconds()
        assert wait - 0.2 <= took <= wait + 1.5, (attempt, wait, took)
    took = (fail.occurred_at - dispatched[4].occurred_at).total_seconds()
    assert 3 - 0.2 <= took <= 3 + 1.5
    await env.wait_event("alert.requeue.limit", "grow")
    await env.assert_safety()


async def test_max_num_requeuings_two_fails_after_exactly_two_requeues(make_env: Any) -> None:
    env = await make_env()
    await env.start_dispatcher()
    requeuing = {
        "timeInSeconds": 1,
        "growthType": "none",
        "maxNumRequeuings": 2,
        "pauseTimeInSeconds": 1,
    }
    await env.create_aw(
        job_appwrapper(
            "limit", env.namespace, unschedulable=True, requeuing=requeuing, completion=False
        )
    )
    failed = await env.wait_aw("limit", state_is("Failed"), timeout=30, what="Failed")
    assert failed["status"]["numberOfRequeueings"] == 2
    assert failed["status"]["clearance"]["attempt"] == 3
    assert len(env.cycle_events("cycle.requeued", "limit")) == 2
    # pauseTimeInSeconds from the spec, counted from clearedAt (the operator default is 0 here).
    redispatched = env.cycle_events("cycle.redispatched", "limit")
    assert [e.attempt for e in redispatched] == [2, 3]
    for event in redispatched:
        assert event.pause_seconds == 1.0
        assert (event.occurred_at - event.cleared_at).total_seconds() >= 1.0
    (alert,) = await env.wait_event("alert.requeue.limit", "limit")
    assert alert.max_num_requeuings == 2
    # Failed still tears down: its teardown is cleared and nothing of the AppWrapper is left.
    cleared = await env.wait_aw(
        "limit",
        lambda aw: bool((aw["status"].get("clearance") or {}).get("clearedAt")),
        what="teardown of the failed attempt cleared",
    )
    assert cleared["status"]["state"] == "Failed"
    assert not (await env.kube.list(PODS, namespace=env.namespace)).items
    await env.assert_safety()


async def test_stuck_pod_holds_the_redispatch_and_a_forged_cleared_cannot_break_safety(
    make_env: Any,
) -> None:
    env = await make_env(pod_run_time=30.0)
    await env.start_dispatcher()
    # Two pods run, three are required: every attempt is requeued after the 1 s wait.
    requeuing = {"timeInSeconds": 1, "growthType": "none"}
    await env.create_aw(
        job_appwrapper(
            "stuck",
            env.namespace,
            parallelism=2,
            min_available=3,
            requeuing=requeuing,
            completion=False,
        )
    )
    await env.wait_aw(
        "stuck", lambda aw: (aw.get("status") or {}).get("running") == 2, what="2 running pods"
    )
    pods = [
        msgspec.json.decode(r) for r in (await env.kube.list(PODS, namespace=env.namespace)).items
    ]
    victim = pods[0]["metadata"]["name"]
    await env.kube.patch(
        PODS, victim, {"metadata": {"finalizers": ["clearance.test/hold"]}}, namespace=env.namespace
    )
    tearing = await env.wait_aw(
        "stuck",
        lambda aw: (aw["status"].get("clearance") or {}).get("phase") == "TearingDown",
        what="TearingDown",
    )
    assert (condition(tearing, "AwaitingDeletion") or {}).get("status") == "True"
    stuck = await env.wait_aw(
        "stuck",
        lambda aw: (condition(aw, "DeletionStuck") or {}).get("status") == "True",
        what="DeletionStuck from the tracker's alert",
    )
    assert victim in {s["name"] for s in stuck["status"]["clearance"]["stuck"]}
    # A stale cleared (another attempt) is ignored; a forged one for the current attempt is
    # recorded, but the pre-dispatch LIST still sees the held pod and refuses to dispatch.
    aw_ref = events.AppWrapperRef(
        namespace=env.namespace, name="stuck", uid=tearing["metadata"]["uid"]
    )
    for attempt in (7, 1):
        forged = events.CycleCleared(
            appwrapper=aw_ref,
            attempt=attempt,
            occurred_at=datetime.now(UTC),
            cleared_at=datetime.now(UTC),
        )
        await bus.publish(
            env.js, forged.subject(), events.encode(forged), msg_id=f"forged-{attempt}"
        )
    blocked = await env.wait_aw(
        "stuck",
        lambda aw: (condition(aw, "Backoff") or {}).get("reason") == "OldObjectsPresent",
        what="dispatch blocked by the held pod",
    )
    assert blocked["status"]["clearance"]["attempt"] == 1
    await asyncio.sleep(1.5)
    assert [e.attempt for e in env.cycle_events("cycle.dispatched", "stuck")] == [1]
    # The held pod goes: attempt 2 follows.
    await env.kube.patch(PODS, victim, {"metadata": {"finalizers": None}}, namespace=env.namespace)
    await env.wait_aw(
        "stuck",
        lambda aw: (
            (aw["status"].get("clearance") or {}).get("attempt") == 2
            and aw["status"]["clearance"].get("phase") in ("Dispatched", "TearingDown")
        ),
        what="attempt 2 dispatched",
    )
    await env.assert_safety()
