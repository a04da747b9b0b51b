"""Fencing (issue 12, Acceptance 2): a dispatcher leader frozen past its lease makes no API
write after it wakes — judged from kubesim's request log by the client's User-Agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import msgspec
from tests.dispatcher.test_leadership_e2e import _is_leader, _leader_of
from tests.support.dispatcher_env import job_appwrapper

from clearance.kube import PODS

LEASE = 3.0
WRITES = ("POST", "PUT", "PATCH", "DELETE")


async def _requests_of(env: Any, pid: int) -> list[dict[str, Any]]:
    data = await env.kube.request("GET", "/kubesim/v1/requests", query={"userAgent": f"pid {pid})"})
    return list(json.loads(data)["items"])


async def _freeze_the_leader_mid_teardown(env: Any, **fault: str) -> tuple[int, float]:
    """Two dispatchers; the leader is SIGSTOPped for 2x its lease while a teardown waits on a
    held pod, the standby takes over and redispatches, then the old leader is SIGCONTed.
    Returns the old leader's pid and the wall-clock moment it was woken."""
    a = await env.start_dispatcher(name="replica-a", CLEARANCE_LEASE_DURATION=f"{LEASE}s", **fault)
    b = await env.start_dispatcher(name="replica-b", CLEARANCE_LEASE_DURATION=f"{LEASE}s", **fault)
    leader = await _leader_of([a, b])
    standby = b if leader is a else a
    # Two pods run, three are required: each attempt is requeued after the 1 s wait.
    await env.create_aw(
        job_appwrapper(
            "fenced",
            env.namespace,
            parallelism=2,
            min_available=3,
            requeuing={"timeInSeconds": 1, "growthType": "none"},
            completion=False,
        )
    )
    await env.wait_aw(
        "fenced", lambda aw: (aw.get("status") or {}).get("running") == 2, what="2 running pods"
    )
    pods = [
        msgspec.json.decode(r) for r in (await env.kube.list(PODS, namespace=env.namespace)).items
    ]
    victim = pods[0]["metadata"]["name"]
    await env.kube.patch(
        PODS, victim, {"metadata": {"finalizers": ["clearance.test/hold"]}}, namespace=env.namespace
    )
    await env.wait_aw(
        "fenced",
        lambda aw: (aw["status"].get("clearance") or {}).get("tearingDown") == 1,
        what="attempt 1 tearing down",
    )
    assert leader.pid is not None
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(LEASE * 2 / 3)
        await env.kube.patch(
            PODS, victim, {"metadata": {"finalizers": None}}, namespace=env.namespace
        )
        await env.wait_aw(
            "fenced",
            lambda aw: (aw["status"].get("clearance") or {}).get("attempt", 0) >= 2,
            timeout=LEASE * 2,
            what="attempt 2 dispatched by the standby",
        )
        assert await _is_leader(standby)
        await asyncio.sleep(max(0.0, LEASE * 2 - LEASE * 2 / 3 - 1.0))
    finally:
        woken_at = time.time()
        os.kill(leader.pid, signal.SIGCONT)
    await asyncio.sleep(3.0)  # time for whatever the woken process had pending
    return leader.pid, woken_at


async def _writes_after(env: Any, pid: int, moment: float) -> list[str]:
    return [
        f"{r['method']} {r['path']} -> {r['code']}"
        for r in await _requests_of(env, pid)
        if r["method"] in WRITES
        and r["started"] >= moment
        and not ("/leases" in r["path"] and r["code"] >= 400)
    ]


async def test_a_leader_frozen_past_its_lease_makes_no_api_write_after_waking(
    make_env: Any,
) -> None:
    env = await make_env(pod_run_time=60.0)
    pid, woken_at = await _freeze_the_leader_mid_teardown(env)
    assert await _writes_after(env, pid, woken_at) == []
    before = [r for r in await _requests_of(env, pid) if r["method"] in WRITES]
    assert before, "the frozen replica never wrote while leading: the check proves nothing"
    await env.assert_safety()


async def test_the_check_catches_an_unfenced_leader(make_env: Any) -> None:
    """The same scenario with fencing switched off (test-only) must show stale writes."""
    env = await make_env(pod_run_time=60.0)
    pid, woken_at = await _freeze_the_leader_mid_teardown(env, CLEARANCE_TEST_FAULT="unfenced")
    stale = await _writes_after(env, pid, woken_at)
    assert stale != []
