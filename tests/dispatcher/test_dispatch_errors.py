"""Item creation errors: transient ones back off and retry, permanent ones (422) fail the
AppWrapper with a Warning Event and an ``alert.dispatch.failed``."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.dispatcher_env import condition, job_appwrapper, state_is


async def test_permanent_creation_error_fails_with_event_and_alert(make_env: Any) -> None:
    env = await make_env()
    await env.start_dispatcher()
    aw = job_appwrapper("bad-pod", env.namespace)
    aw["spec"]["resources"]["GenericItems"][0]["generictemplate"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "Not_A_DNS_Name"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    del aw["spec"]["resources"]["GenericItems"][0]["completionstatus"]
    await env.create_aw(aw)
    failed = await env.wait_aw("bad-pod", state_is("Failed"), what="Failed on 422")
    cond = condition(failed, "Failed") or {}
    assert cond.get("reason") == "ItemCreationFailure"
    assert "422" in cond.get("message", "")
    (alert,) = await env.wait_event("alert.dispatch.failed", "bad-pod")
    assert alert.severity == "critical"
    for _ in range(50):
        if any(e["reason"] == "ItemCreationFailure" for e in await env.warning_events("bad-pod")):
            break
        await asyncio.sleep(0.1)
    assert any(e["reason"] == "ItemCreationFailure" for e in await env.warning_events("bad-pod"))


async def test_transient_creation_errors_back_off_then_dispatch(make_env: Any) -> None:
    env = await make_env()
    await env.kube.request(
        "POST",
        "/kubesim/v1/fail",
        body={
            "path": f"/namespaces/{env.namespace}/jobs$",
            "code": 503,
            "count": 3,
            "method": "POST",
        },
    )
    await env.start_dispatcher()
    await env.create_aw(job_appwrapper("flaky", env.namespace))
    await env.wait_aw(
        "flaky",
        lambda aw: (
            (condition(aw, "Backoff") or {}).get("reason") == "ItemCreationFailure"
            or (aw.get("status") or {}).get("state") in ("Running", "Completed")
        ),
        what="Backoff or dispatched",
    )
    await env.wait_aw("flaky", state_is("Completed"), what="dispatched after the errors")
    assert len(env.cycle_events("cycle.dispatched", "flaky")) == 1
    alerts = env.cycle_events("alert.dispatch.failed", "flaky")
    assert alerts and all(a.severity == "warning" for a in alerts)
