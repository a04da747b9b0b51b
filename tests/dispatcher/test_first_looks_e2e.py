"""Issue 13 Acceptance 2 (found by the fuzz): an invalid AppWrapper fails at once even while the
dispatcher is busy dispatching large ones at its client rate limit (default 50 requests/s).

Before the intake lane, a refusal waited in the same work queue as the dispatches: in a burst
of 20 generated AppWrappers of 30 ConfigMaps each, no invalid AppWrapper submitted behind them
had a condition 16 s later. Judged from outside: the AppWrappers' status via the API.
"""

from __future__ import annotations

import time
from typing import Any

from tests.support.dispatcher_env import condition, job_appwrapper
from tests.support.polling import eventually

BIG = 6
ITEMS = 40
"""BIG AppWrappers of ITEMS ConfigMaps: about 2 requests per item (the leftovers read, the
create), ~500 requests, ~8 s of the dispatcher's default 50 requests/s."""
REFUSED_WITHIN = 2.5


def _big(name: str, namespace: str) -> dict[str, Any]:
    items = [
        {
            "generictemplate": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-{i}"},
                "data": {"i": str(i)},
            }
        }
        for i in range(ITEMS)
    ]
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingSpec": {}, "resources": {"GenericItems": items}},
    }


def _invalid(namespace: str) -> dict[str, tuple[dict[str, Any], str]]:
    out_of_range = job_appwrapper("bad-duration", namespace)
    out_of_range["spec"]["schedulingSpec"]["requeuing"] = {"timeInSeconds": 2**63 - 1}
    unknown = job_appwrapper("bad-kind", namespace)
    template = unknown["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    template.update(apiVersion="example.com/v1", kind="Widget")
    elsewhere = job_appwrapper("bad-namespace", namespace)
    template = elsewhere["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    template["metadata"]["namespace"] = "default"
    return {
        "bad-duration": (out_of_range, "OutOfRange"),
        "bad-kind": (unknown, "UnknownKind"),
        "bad-namespace": (elsewhere, "NamespaceMismatch"),
    }


def _dispatched(aw: dict[str, Any]) -> bool:
    return (condition(aw, "Dispatched") or {}).get("status") == "True"


async def test_invalid_appwrappers_fail_at_once_behind_a_burst_of_large_dispatches(
    make_env: Any,
) -> None:
    env = await make_env()
    await env.start_dispatcher()  # the default client rate limit: CLEARANCE_KUBE_QPS 50
    for i in range(BIG):
        await env.create_aw(_big(f"big-{i}", env.namespace))

    async def dispatching() -> bool:
        return (await env.get_aw("big-0")).get("status") is not None

    await eventually(dispatching, timeout=10, what="the first large AppWrapper picked up")
    cases = _invalid(env.namespace)
    submitted = time.monotonic()
    for body, _ in cases.values():
        await env.create_aw(body)
    for name, (_, reason) in cases.items():
        failed = await env.wait_aw(
            name,
            lambda aw: (condition(aw, "Failed") or {}).get("status") == "True",
            timeout=max(0.1, submitted + REFUSED_WITHIN - time.monotonic()),
            what=f"Failed/{reason} within {REFUSED_WITHIN}s of submission",
        )
        assert (condition(failed, "Failed") or {}).get("reason") == reason, failed["status"]
    late = [i for i in range(BIG) if not _dispatched(await env.get_aw(f"big-{i}"))]
    assert late, "every large AppWrapper was dispatched already: the burst proved nothing"
    for i in range(BIG):
        await env.wait_aw(f"big-{i}", _dispatched, timeout=30, what="the large one dispatched")
