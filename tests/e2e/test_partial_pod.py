"""Issue 19 acceptance 4: a pod the watcher's snapshot cannot decode still reaches the dispatcher.

The AppWrapper's pod carries an ownerReference whose uid (``urn:uuid:1``) the API server stores
but the event snapshot refuses (uids are Msg-Id tokens). The watcher publishes it as a partial
event (``problem`` set, the odd ownerReference dropped, identity/labels/phase kept) and the
dispatcher counts it: the gang of one forms. With the watcher built to skip such objects
(``CLEARANCE_TEST_FAULT=drop-undecodable``, its behaviour before partial snapshots) the same
check fails: the dispatcher never sees the pod run.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    NAMESPACE,
    Launch,
    Scenario,
    appwrapper,
    condition,
    eventually,
    item,
    pod_state,
    pod_template,
    requeuing,
)

from clearance import events, subjects

pytestmark = pytest.mark.slow

AW, POD = "odd-pod", "odd-pod-0"
UNSERVABLE_OWNER = {
    "apiVersion": "example.com/v1",
    "kind": "Unserved",
    "name": "o",
    "uid": "urn:uuid:1",
}
"""Stored by the API server, refused by the snapshot; its kind is unserved, so no GC acts."""


async def submit_odd_pod(scenario: Scenario) -> None:
    template = pod_template(POD)
    template["metadata"]["ownerReferences"] = [dict(UNSERVABLE_OWNER)]
    await scenario.submit(
        appwrapper(AW, [item(template, pods=1)], min_available=1, requeue=requeuing(wait=30))
    )


async def pod_running(scenario: Scenario) -> dict[str, Any] | None:
    pod = await scenario.pod(POD)
    return pod if pod_state(pod) == "Running" else None


async def counted(scenario: Scenario) -> dict[str, Any] | None:
    status = await scenario.status(AW)
    running = condition(status, "Running")
    ok = status.get("running") == 1 and running is not None and running["status"] == "True"
    return status if ok else None


async def test_a_pod_the_snapshot_cannot_decode_is_counted_by_the_dispatcher(
    launch: Launch,
) -> None:
    scenario = await launch()
    await submit_odd_pod(scenario)
    status = await eventually(lambda: counted(scenario), timeout=30, what="the pod counted")
    assert status["running"] == 1
    js = scenario.nc.jetstream()
    subject = subjects.kube_subject("pod", NAMESPACE, POD)
    last = events.decode((await js.get_last_msg(subjects.KUBE_STREAM, subject)).data)
    assert isinstance(last, events.KubePodEvent)
    assert last.problem is not None, "the pod was expected to be published partial"
    assert last.problem.path == "$.metadata.ownerReferences[0].uid"
    assert last.object.metadata.name == POD and last.object.status.phase == "Running"
    assert not scenario.log.of(events.CycleRequeued)


async def test_a_watcher_that_skips_undecodable_pods_leaves_the_gang_uncounted(
    launch: Launch,
) -> None:
    """The check above fails on the old behaviour: nothing reaches the dispatcher."""
    scenario = await launch(service_env={"watcher": {"CLEARANCE_TEST_FAULT": "drop-undecodable"}})
    await submit_odd_pod(scenario)
    await eventually(lambda: pod_running(scenario), timeout=30, what="the pod to run")
    # Monitor and scan run every 250 ms: 2 s is eight chances to count a pod it had seen.
    await asyncio.sleep(2)
    assert await counted(scenario) is None
    assert (await scenario.status(AW)).get("running", 0) == 0
