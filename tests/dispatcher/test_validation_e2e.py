"""Acceptance 5: every malformed AppWrapper gets its condition and a Warning Event; a good one
submitted alongside still runs."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.support.dispatcher_env import AW, condition, job_appwrapper, state_is

from clearance.kube import KubeError


def _template(aw: dict[str, Any]) -> dict[str, Any]:
    return aw["spec"]["resources"]["GenericItems"][0]["generictemplate"]  # type: ignore[no-any-return]


def _malformed(ns: str) -> dict[str, tuple[dict[str, Any], str]]:
    base = job_appwrapper("x", ns)
    cases: dict[str, tuple[dict[str, Any], str]] = {}

    def case(name: str, reason: str) -> dict[str, Any]:
        aw = copy.deepcopy(base)
        aw["metadata"]["name"] = name
        _template(aw)["metadata"]["name"] = f"{name}-job"
        cases[name] = (aw, reason)
        return aw

    case("no-items", "NoGenericItems")["spec"]["resources"]["GenericItems"] = []
    del _template(case("no-kind", "MissingKind"))["kind"]
    del _template(case("no-apiversion", "MissingApiVersion"))["apiVersion"]
    del _template(case("no-name", "MissingName"))["metadata"]["name"]
    unknown = _template(case("unknown-kind", "UnknownKind"))
    unknown.update(apiVersion="example.com/v1", kind="Widget")
    case("negative-min", "NegativeMinAvailable")["spec"]["schedulingSpec"]["minAvailable"] = -2
    _template(case("other-namespace", "NamespaceMismatch"))["metadata"]["namespace"] = "default"
    bad_qty = case("bad-quantity", "InvalidQuantity")
    bad_qty["spec"]["resources"]["GenericItems"][0]["custompodresources"] = [
        {"replicas": 2, "requests": {"cpu": "lots"}}
    ]
    return cases


async def test_each_malformed_case_gets_condition_and_warning_while_good_one_runs(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()
    rejected_by_api: list[str] = []
    cases = _malformed(env.namespace)
    for name, (body, _) in cases.items():
        try:
            await env.create_aw(body)
        except KubeError as exc:
            assert exc.code == 422, exc
            rejected_by_api.append(name)
    await env.create_aw(job_appwrapper("good", env.namespace))
    for name, (_, reason) in cases.items():
        if name in rejected_by_api:
            continue
        aw = await env.wait_aw(name, state_is("Failed"), what=f"{name} Failed")
        cond = condition(aw, "Failed") or {}
        assert cond.get("reason") == reason, (name, cond)
        assert cond.get("message"), name
        for _ in range(50):  # the Event follows the status write
            warnings = await env.warning_events(name)
            if any(e["reason"] == reason for e in warnings):
                break
            await asyncio.sleep(0.1)
        assert any(e["reason"] == reason for e in warnings), (name, warnings)
        assert not env.cycle_events("cycle.dispatched", name)
    await env.wait_aw("good", state_is("Completed"), what="good completes")
    # The API server itself refuses embedded resources without apiVersion/kind; the
    # dispatcher's validation of those cases is covered by the unit tests.
    assert set(rejected_by_api) <= {"no-kind", "no-apiversion"}, rejected_by_api
    env.processes[0].http_get("/readyz")
    assert env.processes[0].running


async def test_a_bad_policy_annotation_fails_the_appwrapper_until_it_is_fixed(
    make_env: Any,
) -> None:
    """Annotations do not bump ``metadata.generation``: fixing one re-queues the AppWrapper
    all the same (issue 17)."""
    env = await make_env()
    await env.start_dispatcher()
    key = "clearance.dev/stuck-alert-time-in-seconds"
    body = job_appwrapper("bad-annotation", env.namespace)
    body["metadata"]["annotations"] = {key: "soon"}
    await env.create_aw(body)
    aw = await env.wait_aw("bad-annotation", state_is("Failed"), what="refused")
    cond = condition(aw, "Failed") or {}
    assert cond.get("reason") == "InvalidField", cond
    assert f"metadata.annotations[{key}]: expected whole seconds" in str(cond.get("message"))
    await env.kube.patch(
        AW, "bad-annotation", {"metadata": {"annotations": {key: "30"}}}, namespace=env.namespace
    )
    await env.wait_aw("bad-annotation", state_is("Completed"), what="runs once fixed")
