"""Issue 13 Build 5 / Acceptance 3: an AppWrapper deleted and re-applied under the same name
while its old ConfigMap is held by a finalizer is held (``Blocked``, visible in ``kubectl
describe``) until the ConfigMap is gone, then runs; the write history shows no object of the new
incarnation created beside the old one (``Env.assert_safety``; the judge itself is shown catching
a violation in tests/clearance/test_incarnation_judge.py)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

import msgspec
from tests.support.dispatcher_env import AW, condition
from tests.support.incarnations import incarnation_violations
from tests.support.polling import eventually

from clearance.kube import PODS, KubeError, Resource

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
HOLD = "test.clearance.dev/hold"


def _appwrapper(namespace: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "again-0"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}},
                }
            ],
        },
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "again-cfg", "finalizers": [HOLD]},
        "data": {"k": "v"},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": "again", "namespace": namespace},
        "spec": {
            "schedulingSpec": {"minAvailable": 1},
            "resources": {"GenericItems": [{"generictemplate": config}, {"generictemplate": pod}]},
        },
    }


async def _get(env: Any, resource: Resource, name: str) -> dict[str, Any] | None:
    try:
        return dict(
            msgspec.json.decode(await env.kube.get(resource, name, namespace=env.namespace))
        )
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


async def _resubmit_beside_a_held_configmap(env: Any) -> str:
    """First incarnation running, deleted, its ConfigMap Terminating; the second submitted."""
    first = await env.create_aw(_appwrapper(env.namespace))

    async def running() -> bool:
        pod = await _get(env, PODS, "again-0")
        return pod is not None and (pod.get("status") or {}).get("phase") == "Running"

    await eventually(running, timeout=20, what="first incarnation's pod Running")
    await env.kube.delete(AW, "again", namespace=env.namespace)

    async def held() -> bool:
        aw = await _get(env, AW, "again")
        cfg = await _get(env, CONFIGMAPS, "again-cfg")
        return aw is None and cfg is not None and bool(cfg["metadata"].get("deletionTimestamp"))

    await eventually(held, timeout=20, what="old AppWrapper gone, its ConfigMap Terminating")
    second = await env.create_aw(_appwrapper(env.namespace))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    return str(second["metadata"]["uid"])


def _describe(env: Any) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not on PATH"
    return subprocess.run(
        [
            kubectl,
            *("--kubeconfig", str(env.cluster.kubeconfig_path), "-n", env.namespace),
            *("describe", "appwrappers.workload.codeflare.dev", "again"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


async def test_a_resubmitted_appwrapper_waits_for_the_old_held_configmap_then_runs(
    make_env: Any,
) -> None:
    env = await make_env(pod_run_time=60.0)
    await env.start_dispatcher()
    uid = await _resubmit_beside_a_held_configmap(env)
    blocked = await env.wait_aw(
        "again",
        lambda aw: (condition(aw, "Blocked") or {}).get("status") == "True",
        what="Blocked by the old ConfigMap",
    )
    message = (condition(blocked, "Blocked") or {}).get("message", "")
    assert "ConfigMap again-cfg" in message and HOLD in message, message
    described = await asyncio.to_thread(_describe, env)
    assert "Blocked" in described and "again-cfg" in described, described
    await asyncio.sleep(1.0)  # several dispatch retries (backoff ≤ 1 s) stay held
    pod = await _get(env, PODS, "again-0")
    assert pod is None or all(o["uid"] != uid for o in pod["metadata"]["ownerReferences"]), pod
    await env.kube.patch(
        CONFIGMAPS, "again-cfg", {"metadata": {"finalizers": None}}, namespace=env.namespace
    )

    async def new_pod_running() -> bool:
        pod = await _get(env, PODS, "again-0")
        return (
            pod is not None
            and any(o["uid"] == uid for o in pod["metadata"]["ownerReferences"])
            and (pod.get("status") or {}).get("phase") == "Running"
        )

    await eventually(new_pod_running, timeout=20, what="the new incarnation's pod Running")
    after = await env.get_aw("again")
    assert (condition(after, "Blocked") or {}).get("status") == "False", after["status"]
    await env.assert_safety()


def _three_configmaps(namespace: str) -> dict[str, Any]:
    items = [
        {
            "generictemplate": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"race-{n}"},
                "data": {"n": str(n)},
            }
        }
        for n in range(3)
    ]
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": "race", "namespace": namespace},
        "spec": {"schedulingSpec": {}, "resources": {"GenericItems": items}},
    }


async def test_a_409_mid_creation_rolls_back_what_the_attempt_created_then_it_runs(
    make_env: Any,
) -> None:
    """Issue 13 Build 5: a foreign ConfigMap appears under the third item's name after the
    pre-check passed (kubesim holds the dispatcher's creates 1.5 s — the three go out at once;
    the test creates it then). The third create answers 409: the two ConfigMaps this attempt
    created are deleted (the write history shows them ADDED then DELETED by the dispatcher),
    the AppWrapper says why, and it is dispatched once the foreign object is gone.
    ``CLEARANCE_TEST_FAULT=incarnation-blind`` (no rollback) fails this test: race-0 and
    race-1 stay."""
    env = await make_env()
    await env.start_dispatcher()
    path = f"/api/v1/namespaces/{env.namespace}/configmaps$"
    rule = {"path": path, "method": "POST", "latency": 1.5, "count": 3}
    await env.kube.request("POST", "/kubesim/v1/fail", body=rule | {"userAgent": "dispatcher"})
    await env.create_aw(_three_configmaps(env.namespace))
    await env.wait_aw(
        "race",
        lambda aw: ((aw.get("status") or {}).get("clearance") or {}).get("phase") == "Dispatching",
        what="the pre-check passed (Dispatching)",
    )
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "race-2"}}
    await env.kube.create(CONFIGMAPS, foreign, namespace=env.namespace)
    held = await env.wait_aw(
        "race",
        lambda aw: "race-2" in str((aw.get("status") or {}).get("conditions")),
        what="the AppWrapper names the conflicting ConfigMap",
    )

    async def rolled_back() -> bool:
        return all([await _get(env, CONFIGMAPS, f"race-{n}") is None for n in (0, 1)])

    await eventually(rolled_back, timeout=10, what="race-0 and race-1 rolled back")
    history = await env.history(namespace=env.namespace, kind="ConfigMap")
    for n in (0, 1):
        writes = [
            (e["type"], e["userAgent"].split("/")[0]) for e in history if e["name"] == f"race-{n}"
        ]
        assert writes[0] == ("ADDED", "clearance-dispatcher"), writes
        assert ("DELETED", "clearance-dispatcher") in writes, writes
    assert (held.get("status") or {}).get("state") != "Failed", held["status"]
    await env.kube.delete(CONFIGMAPS, "race-2", namespace=env.namespace)

    async def dispatched() -> bool:
        cms = [await _get(env, CONFIGMAPS, f"race-{n}") for n in range(3)]
        return all(cm is not None and cm["metadata"].get("ownerReferences") for cm in cms)

    await eventually(dispatched, timeout=20, what="all three created once race-2 is gone")
    assert not incarnation_violations(await env.history(namespace=env.namespace))
