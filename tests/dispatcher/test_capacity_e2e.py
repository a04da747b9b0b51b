"""Acceptance 4: capacity — too large waits, Terminating pods still count, priority first."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from tests.support.dispatcher_env import condition, job_appwrapper, phase_is, state_is

from clearance.kube import PODS


def _queued_for_capacity(aw: dict[str, Any]) -> bool:
    cond = condition(aw, "Queueing") or {}
    return phase_is("Queued")(aw) and cond.get("reason") == "InsufficientCapacity"


async def test_too_large_waits_while_a_smaller_one_backfills(make_env: Any) -> None:
    env = await make_env(nodes=2, node_cpu="4")  # 8 cpu in all
    await env.start_dispatcher()
    await env.create_aw(job_appwrapper("huge", env.namespace, parallelism=2, custom_cpu="5"))
    await env.create_aw(job_appwrapper("small", env.namespace, parallelism=2, cpu="500m"))
    waiting = await env.wait_aw("huge", _queued_for_capacity, what="huge waits for capacity")
    assert "cpu" in (condition(waiting, "Queueing") or {}).get("message", "")
    await env.wait_aw("small", state_is("Completed"), what="small completes")
    assert phase_is("Queued")(await env.get_aw("huge"))
    assert not env.cycle_events("cycle.dispatched", "huge")


async def test_terminating_pods_still_hold_capacity(make_env: Any) -> None:
    # The kubelet takes 4 s to stop a deleted pod: it is Terminating (phase Running) meanwhile.
    env = await make_env(nodes=2, node_cpu="4", termination_delay=5.0)
    await env.start_dispatcher()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "3"}}}
            ],
            "terminationGracePeriodSeconds": 30,
        },
    }
    await env.kube.create(PODS, pod, namespace=env.namespace)
    for _ in range(100):
        got = msgspec.json.decode(await env.kube.get(PODS, "hog", namespace=env.namespace))
        if (got.get("status") or {}).get("phase") == "Running":
            break
        await asyncio.sleep(0.05)
    await env.kube.delete(PODS, "hog", namespace=env.namespace)
    # 2 x 3 cpu = 6 fits 8, but not the 5 left while the Terminating pod exists.
    await env.create_aw(job_appwrapper("needs6", env.namespace, parallelism=2, cpu="3"))
    await env.wait_aw("needs6", _queued_for_capacity, what="waits behind the Terminating pod")
    await env.wait_aw(
        "needs6",
        lambda aw: (aw.get("status") or {}).get("state") in ("Running", "Completed"),
        what="dispatched once the pod is gone",
    )
    gone = [
        e for e in await env.history(namespace=env.namespace, name="hog") if e["type"] == "DELETED"
    ]
    assert gone, "the Terminating pod should be gone before the dispatch"
    # The recorder reads the cycle stream on its own connection: wait for it, then count.
    await env.wait_event("cycle.dispatched", "needs6", timeout=5)
    assert len(env.cycle_events("cycle.dispatched", "needs6")) == 1
    jobs = [
        e
        for e in await env.history(namespace=env.namespace, name="needs6-job")
        if e["type"] == "ADDED"
    ]
    assert int(jobs[0]["rv"]) > int(gone[0]["rv"])


async def test_higher_priority_goes_first(make_env: Any) -> None:
    env = await make_env(nodes=2, node_cpu="4", pod_run_time=1.5)
    # Both queued before the dispatcher starts; only one fits at a time (6 of 8 cpu each).
    await env.create_aw(job_appwrapper("low", env.namespace, parallelism=2, cpu="3", priority=1))
    await asyncio.sleep(0.05)
    await env.create_aw(job_appwrapper("high", env.namespace, parallelism=2, cpu="3", priority=10))
    await env.start_dispatcher()
    await env.wait_aw("high", state_is("Completed"), what="high completes")
    await env.wait_aw("low", state_is("Completed"), what="low completes after it")
    order = [ev.appwrapper.name for ev in env.cycle_events("cycle.dispatched")]
    assert order == ["high", "low"]
