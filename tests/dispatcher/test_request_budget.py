"""Issue 16 (API manners): what a requeue cycle of a gang costs the dispatcher in API requests,
read from kubesim's request log (every request with its User-Agent), not from the dispatcher.

A gang of four bare pods, one of which can never be scheduled, is requeued after its wait:
the teardown reads the gang with one LIST (no GET per pod) and deletes the four pods; the
item events of labelled pods are not re-read from the API (their pod events carry them); the
four pods of the next attempt are created. The only reads by name are the pre-dispatch check's
(``leftovers.GETS_PER_KIND``), once per attempt. And the batched read still finds an item someone
stripped of its labels: the teardown deletes it by name.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.dispatcher_env import Env, condition, phase_is

from clearance.kube import PODS

WAIT = 1  # requeuing.timeInSeconds
GANG = 4


def gang_appwrapper(name: str, namespace: str) -> dict[str, Any]:
    """``GANG`` bare pods, all required; the last one asks for a node label no node has."""
    items = []
    for index in range(GANG):
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        }
        if index == GANG - 1:
            spec["nodeSelector"] = {"clearance.test/never": "true"}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{index}"}}
        items.append({"replicas": 1, "generictemplate": pod | {"spec": spec}})
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingSpec": {
                "minAvailable": GANG,
                "requeuing": {"timeInSeconds": WAIT, "growthType": "none"},
            },
            "resources": {"GenericItems": items},
        },
    }


async def _dispatcher_requests(env: Env) -> list[dict[str, Any]]:
    data = await env.kube.request(
        "GET", "/kubesim/v1/requests", query={"userAgent": "clearance-dispatcher"}
    )
    return list(json.loads(data)["items"])


def _count(requests: list[dict[str, Any]], method: str, pattern: str) -> int:
    return sum(1 for r in requests if r["method"] == method and re.fullmatch(pattern, r["path"]))


async def test_a_gang_requeue_reads_its_pods_by_list_never_one_get_per_pod(make_env: Any) -> None:
    env = await make_env(pod_run_time=3600.0)
    await env.start_dispatcher()
    await env.create_aw(gang_appwrapper("budget", env.namespace))
    await env.wait_event("cycle.redispatched", "budget", timeout=30)
    await env.wait_aw("budget", phase_is("Dispatched", 2), what="attempt 2 Dispatched")
    requests = await _dispatcher_requests(env)
    pods = f"/api/v1/namespaces/{env.namespace}/pods"
    # The pre-dispatch check reads each name once per attempt (GETS_PER_KIND: four names are
    # four GETs); nothing else reads a pod by name: not the teardown, not the item events.
    named = [r["path"] for r in requests if r["method"] == "GET" and "/pods/" in r["path"]]
    assert _count(requests, "GET", rf"{pods}/budget-\d") == 2 * GANG, named
    assert _count(requests, "DELETE", rf"{pods}/budget-\d") == GANG
    assert _count(requests, "POST", rf"{pods}") == 2 * GANG
    await env.assert_safety()


async def test_a_teardown_deletes_an_item_stripped_of_its_labels(make_env: Any) -> None:
    env = await make_env(pod_run_time=3600.0)
    await env.start_dispatcher()
    await env.create_aw(gang_appwrapper("stripped", env.namespace))
    await env.wait_aw("stripped", phase_is("Dispatched", 1), what="attempt 1 Dispatched")
    first = json.loads(await env.kube.get(PODS, "stripped-0", namespace=env.namespace))
    await env.kube.patch(
        PODS,
        "stripped-0",
        {"metadata": {"labels": {key: None for key in first["metadata"]["labels"]}}},
        namespace=env.namespace,
    )
    await env.wait_event("cycle.redispatched", "stripped", timeout=30)
    history = await env.history(namespace=env.namespace, kind="Pod", name="stripped-0")
    removed = [
        e for e in history if e["uid"] == first["metadata"]["uid"] and e["type"] == "DELETED"
    ]
    assert removed, history
    deletes = [
        r
        for r in await _dispatcher_requests(env)
        if r["method"] == "DELETE" and r["path"].endswith("/pods/stripped-0")
    ]
    assert deletes, "the dispatcher never deleted the stripped pod"


async def test_a_foreign_pod_under_one_of_five_item_names_holds_the_dispatch(
    make_env: Any,
) -> None:
    """Five names are read with one LIST of the pods that belong to no AppWrapper
    (``leftovers.NO_APPWRAPPER``): a foreign pod under one of them is found before any
    create, named in ``Blocked``; the gang is created once it is gone."""
    env = await make_env(pod_run_time=3600.0)
    body = gang_appwrapper("crowded", env.namespace)
    body["spec"]["resources"]["GenericItems"].append(
        {
            "replicas": 1,
            "generictemplate": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "crowded-4"},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        }
    )
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crowded-2"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    await env.kube.create(PODS, foreign, namespace=env.namespace)
    await env.start_dispatcher()
    await env.create_aw(body)
    blocked = await env.wait_aw(
        "crowded",
        lambda aw: (condition(aw, "Blocked") or {}).get("status") == "True",
        what="Blocked by the foreign pod",
    )
    assert "crowded-2" in (condition(blocked, "Blocked") or {}).get("message", "")
    history = await env.history(namespace=env.namespace, kind="Pod")
    created = [
        e["name"] for e in history if e["type"] == "ADDED" and "dispatcher" in e["userAgent"]
    ]
    assert created == [], created
    await env.kube.delete(PODS, "crowded-2", namespace=env.namespace)
    await env.wait_aw("crowded", phase_is("Dispatched", 1), what="dispatched once it is gone")
