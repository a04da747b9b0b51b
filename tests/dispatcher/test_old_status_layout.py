"""A dispatcher restarted on an AppWrapper whose ``status.clearance`` an older dispatcher wrote
(no ``version``, no ``tearingDown``) resumes the cycle where it was and writes the new layout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.dispatcher_env import AW, Env, job_appwrapper

from clearance.bookkeeping import LAYOUT
from clearance.kube import JOBS
from clearance.timestamps import micro_time
from clearance_dispatcher.appwrapper import AppWrapperSpec, parse_appwrapper
from clearance_dispatcher.dispatching import build_object

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _old_status(env: Env, name: str, clearance: dict[str, Any]) -> None:
    """The status as the dispatcher before the layout version wrote it."""
    body = {
        "status": {
            "state": "Pending",
            "queuejobstate": "Backoff",
            "numberOfRequeueings": 1,
            "requeueingTimeInSeconds": 60,
            "message": "Insufficient number of Running and Completed pods, minimum=1.",
            "clearance": clearance,
        }
    }
    await env.kube.patch(AW, name, body, namespace=env.namespace, subresource="status")


async def _appwrapper(env: Env, name: str) -> AppWrapperSpec:
    created = await env.create_aw(
        job_appwrapper(
            name,
            env.namespace,
            unschedulable=True,
            min_available=1,
            completion=False,
            requeuing={"timeInSeconds": 60, "growthType": "none"},
        )
    )
    spec = parse_appwrapper(created)
    assert isinstance(spec, AppWrapperSpec)
    return spec


def _new_layout_at(attempt: int, phase: str) -> Any:
    def check(aw: dict[str, Any]) -> bool:
        cl = (aw.get("status") or {}).get("clearance") or {}
        return (cl.get("version"), cl.get("attempt"), cl.get("phase")) == (LAYOUT, attempt, phase)

    return check


async def test_an_old_layout_mid_teardown_is_torn_down_cleared_and_redispatched(
    make_env: Any,
) -> None:
    env = await make_env()
    spec = await _appwrapper(env, "legacy-teardown")
    # Attempt 1 as the old dispatcher created it, then its requeue decision (not yet announced).
    job = build_object(spec.items[0], spec, attempt=1, aw_api_version=AW.api_version)
    await env.kube.create(JOBS, job, namespace=env.namespace)
    decided = datetime.now(UTC) - timedelta(seconds=1)
    await _old_status(
        env,
        spec.name,
        {
            "phase": "TearingDown",
            "attempt": 1,
            "dispatchedAt": micro_time(decided - timedelta(seconds=60)),
            "teardownStartedAt": micro_time(decided),
            "teardownPublished": False,
            "clearedAt": None,
            "cycleTraceparent": TRACEPARENT,
            "cycleStartedAt": micro_time(decided),
            "reason": "MinPodsNotRunning",
            "stuck": [],
        },
    )
    await env.start_dispatcher()
    done = await env.wait_aw(
        spec.name, _new_layout_at(2, "Dispatched"), timeout=40, what="attempt 2 dispatched"
    )
    assert done["status"]["clearance"].get("tearingDown") is None
    await env.wait_event("cycle.dispatched", spec.name)
    (started,) = env.cycle_events("cycle.teardown.started", spec.name)
    (cleared,) = env.cycle_events("cycle.cleared", spec.name)
    (dispatched,) = env.cycle_events("cycle.dispatched", spec.name)
    assert (started.attempt, cleared.attempt, dispatched.attempt) == (1, 1, 2)
    assert started.cycle_traceparent == TRACEPARENT
    assert {r.name for r in started.inventory} >= {job["metadata"]["name"]}
    await env.assert_safety()


async def test_an_old_layout_after_cleared_dispatches_the_next_attempt(make_env: Any) -> None:
    env = await make_env()
    spec = await _appwrapper(env, "legacy-queued")
    decided = datetime.now(UTC) - timedelta(seconds=5)
    await _old_status(
        env,
        spec.name,
        {
            "phase": "Queued",
            "attempt": 1,
            "teardownStartedAt": micro_time(decided),
            "teardownPublished": True,
            "clearedAt": micro_time(decided + timedelta(seconds=2)),
            "cycleTraceparent": TRACEPARENT,
            "cycleStartedAt": micro_time(decided),
            "reason": "MinPodsNotRunning",
            "stuck": [],
        },
    )
    await env.start_dispatcher()
    await env.wait_aw(
        spec.name, _new_layout_at(2, "Dispatched"), timeout=30, what="attempt 2 dispatched"
    )
    await env.wait_event("cycle.redispatched", spec.name)
    (dispatched,) = env.cycle_events("cycle.dispatched", spec.name)
    (redispatched,) = env.cycle_events("cycle.redispatched", spec.name)
    assert dispatched.attempt == redispatched.attempt == 2
    assert redispatched.cycle_traceparent == TRACEPARENT
    assert not env.cycle_events("cycle.teardown.started", spec.name)
