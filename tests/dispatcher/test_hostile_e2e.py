"""Issue 13: hostile but API-accepted AppWrappers end Failed with a reason at once, never stalled;
a good AppWrapper beside them still runs. Real watcher, tracker and dispatcher over kubesim."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from tests.support.dispatcher_env import condition, job_appwrapper, state_is

INT64_MAX = 2**63 - 1
FAILED_WITHIN = 5.0
"""Seconds from create to the Failed condition (DESIGN §5 "bad input ... within seconds")."""


async def _failed_with(env: Any, name: str, reason: str, created: float) -> dict[str, Any]:
    aw = await env.wait_aw(name, state_is("Failed"), timeout=FAILED_WITHIN + 5, what="Failed")
    took = time.monotonic() - created
    assert took <= FAILED_WITHIN, f"{name} Failed after {took:.1f}s"
    cond = condition(aw, "Failed") or {}
    assert cond.get("reason") == reason, (name, cond)
    return cond


async def _warning(env: Any, name: str, reason: str) -> dict[str, Any]:
    for _ in range(50):  # the Event follows the status write
        for event in await env.warning_events(name):
            if event["reason"] == reason:
                return dict(event)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no Warning {reason} for {name}")


async def test_int64_max_durations_and_counts_fail_at_once_naming_field_and_range(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()
    fields = {
        "time": ("requeuing", "timeInSeconds", "0s..30d"),
        "stuck": ("requeuing", "stuckAlertTimeInSeconds", "0s..30d"),
        "force": ("requeuing", "forceDeletionTimeInSeconds", "-30d..30d"),
        "pause": ("requeuing", "pauseTimeInSeconds", "0s..30d"),
        "limit": ("dispatchDuration", "limit", "1s..30d"),
    }
    created: dict[str, float] = {}
    for short, (section, key, _) in fields.items():
        body = job_appwrapper(f"max-{short}", env.namespace)
        body["spec"]["schedulingSpec"].setdefault(section, {})[key] = INT64_MAX
        await env.create_aw(body)
        created[short] = time.monotonic()
    body = job_appwrapper("max-min", env.namespace, min_available=INT64_MAX)
    await env.create_aw(body)
    created["min"] = time.monotonic()
    await env.create_aw(job_appwrapper("good", env.namespace))
    for short, (section, key, shown) in fields.items():
        cond = await _failed_with(env, f"max-{short}", "OutOfRange", created[short])
        path = f"spec.schedulingSpec.{section}.{key}"
        assert path in cond["message"] and f"outside {shown}" in cond["message"], cond
        event = await _warning(env, f"max-{short}", "OutOfRange")
        assert path in event["message"] and shown in event["message"], event
        assert not env.cycle_events("cycle.dispatched", f"max-{short}")
    cond = await _failed_with(env, "max-min", "OutOfRange", created["min"])
    assert "spec.schedulingSpec.minAvailable" in cond["message"], cond
    await env.wait_aw("good", state_is("Completed"), what="good completes")
    assert all(p.running for p in env.processes), env.logs()


def _long_name(tag: str) -> str:
    """A legal AppWrapper name of the maximum length, 253 characters."""
    return f"{tag}-{'n' * (253 - len(tag) - 1)}"


async def test_a_253_character_appwrapper_is_counted_requeued_cleared_and_completes(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()
    runs, loops = _long_name("runs"), _long_name("loops")
    body = job_appwrapper(runs, env.namespace)
    body["spec"]["resources"]["GenericItems"][0]["generictemplate"]["metadata"]["name"] = "runs"
    await env.create_aw(body)
    body = job_appwrapper(
        loops,
        env.namespace,
        unschedulable=True,
        completion=False,
        requeuing={"timeInSeconds": 1, "maxNumRequeuings": 1, "growthType": "none"},
    )
    body["spec"]["resources"]["GenericItems"][0]["generictemplate"]["metadata"]["name"] = "loops"
    await env.create_aw(body)
    running = await env.wait_aw(
        runs, lambda aw: (condition(aw, "Running") or {}).get("status") == "True", what="Running"
    )
    assert "running=2" in (condition(running, "Running") or {}).get("message", ""), running
    await env.wait_aw(runs, state_is("Completed"), what="Completed")
    failed = await env.wait_aw(loops, state_is("Failed"), timeout=30, what="Failed")
    assert (condition(failed, "Failed") or {}).get("reason") == "MaxNumRequeuingsReached"
    assert failed["status"]["numberOfRequeueings"] == 1
    await env.wait_event("cycle.cleared", loops)
    assert await env.warning_events(loops), "no Warning Event recorded on the long-named AW"
    await env.assert_safety()


CRD_PATH = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/appwrappers.workload.codeflare.dev"
)


async def _put_crd(env: Any, crd: dict[str, Any]) -> dict[str, Any]:
    body = await env.kube.request("PUT", CRD_PATH, body=crd)
    return dict(msgspec.json.decode(body))


async def _create_under_loosened_crd(env: Any, body: dict[str, Any]) -> None:
    """Store ``body`` (``requeuing.growthType`` not a string) the way such AppWrappers exist in
    real clusters: under an earlier, looser CRD, tightened afterwards (stored objects are never
    revalidated). The deployed CRD makes the API answer 422 to it."""
    crd = msgspec.json.decode(await env.kube.request("GET", CRD_PATH))
    requeuing = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["schedulingSpec"]["properties"]["requeuing"]["properties"]
    typed = requeuing["growthType"]
    requeuing["growthType"] = {"x-kubernetes-preserve-unknown-fields": True}
    crd = await _put_crd(env, crd)
    try:
        await env.create_aw(body)
    finally:
        requeuing = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"
        ]["schedulingSpec"]["properties"]["requeuing"]["properties"]
        requeuing["growthType"] = typed
        await _put_crd(env, crd)


async def test_a_stored_spec_the_watcher_cannot_decode_fails_within_5s_naming_the_field(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()
    body = job_appwrapper("undecodable", env.namespace)
    body["spec"]["schedulingSpec"]["requeuing"] = {"growthType": False}
    await _create_under_loosened_crd(env, body)
    created = time.monotonic()
    await env.create_aw(job_appwrapper("good", env.namespace))
    cond = await _failed_with(env, "undecodable", "InvalidField", created)
    assert "spec.schedulingSpec.requeuing.growthType" in cond["message"], cond
    event = await _warning(env, "undecodable", "InvalidField")
    assert "growthType" in event["message"], event
    assert not env.cycle_events("cycle.dispatched", "undecodable")
    await env.wait_aw("good", state_is("Completed"), what="good completes")
