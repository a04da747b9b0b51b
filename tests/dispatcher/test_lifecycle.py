"""Acceptance 1: an AppWrapper wrapping a Job runs, shows its pod counts, and completes."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.dispatcher_env import AW, condition, job_appwrapper, phase_is, state_is

from clearance.kube import JOBS, PODS


async def test_job_appwrapper_runs_with_counts_and_completes(make_env: Any) -> None:
    env = await make_env(pod_run_time=2.5)
    proc = await env.start_dispatcher()
    await env.create_aw(job_appwrapper("happy", env.namespace, parallelism=2, min_available=2))

    running = await env.wait_aw(
        "happy", lambda aw: (aw.get("status") or {}).get("running") == 2, what="2 running pods"
    )
    status = running["status"]
    assert status["state"] == "Running"
    assert status["clearance"]["attempt"] == 1
    assert (condition(running, "Running") or {}).get("status") == "True"
    assert (condition(running, "Dispatched") or {}).get("status") == "True"

    done = await env.wait_aw("happy", state_is("Completed"), timeout=20, what="Completed")
    assert phase_is("Completed", 1)(done)
    assert done["status"]["Succeeded"] == 2
    assert done["status"].get("numberOfRequeueings", 0) == 0
    await env.wait_event("cycle.completed", "happy")
    assert len(env.cycle_events("cycle.dispatched", "happy")) == 1
    status_code, metrics = await asyncio.to_thread(proc.http_get, "/metrics")
    assert status_code == 200
    assert 'clearance_dispatcher_dispatches_total{kind="first"} 1.0' in metrics
    assert "clearance_dispatcher_completions_total 1.0" in metrics
    assert await asyncio.to_thread(proc.terminate) == 0  # SIGTERM: orderly shutdown, exit 0


async def test_deleting_the_appwrapper_removes_its_objects(make_env: Any) -> None:
    env = await make_env(pod_run_time=60.0)
    proc = await env.start_dispatcher()
    await env.create_aw(job_appwrapper("doomed", env.namespace, parallelism=2))
    await env.wait_aw(
        "doomed", lambda aw: (aw.get("status") or {}).get("running") == 2, what="running"
    )
    await env.kube.delete(AW, "doomed", namespace=env.namespace)
    for _ in range(200):
        jobs = (await env.kube.list(JOBS, namespace=env.namespace)).items
        pods = (await env.kube.list(PODS, namespace=env.namespace)).items
        if not jobs and not pods:
            break
        await asyncio.sleep(0.1)
    assert not jobs and not pods, "the AppWrapper's Job and pods should be gone"
    assert proc.running
    # The dispatcher forgot it: a new AppWrapper of the same name starts again at attempt 1.
    await env.create_aw(job_appwrapper("doomed", env.namespace, parallelism=1, min_available=1))
    again = await env.wait_aw(
        "doomed", lambda aw: (aw.get("status") or {}).get("running") == 1, what="re-created"
    )
    assert again["status"]["clearance"]["attempt"] == 1
