"""End to end with the real `clearance-watcher` (issue #4) feeding the real tracker."""

from __future__ import annotations

import asyncio
import json

from tracker_support import (
    CRD_FILE,
    NAMESPACE,
    Stack,
    create_job,
    eventually,
    new_traceparent,
    pods_of,
)

from clearance.events import CycleCleared, CycleDeletionConfirmed, TeardownPolicy
from clearance.kube import JOBS, Resource

APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SLOW = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)


async def _appwrapper(stack: Stack, name: str) -> dict[str, object]:
    import yaml

    from clearance.kube import KubeError

    for body in (
        yaml.safe_load(CRD_FILE.read_text()),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
    ):
        resource = CRDS if body["kind"] == "CustomResourceDefinition" else NAMESPACES
        try:
            await stack.kube.create(resource, body)
        except KubeError as exc:
            if not exc.conflict:
                raise
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "busybox"}]}}},
    }
    aw = {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"resources": {"GenericItems": [{"generictemplate": job, "replicas": 1}]}},
    }

    async def created() -> dict[str, object] | None:
        try:
            return dict(json.loads(await stack.kube.create(APPWRAPPERS, aw, namespace=NAMESPACE)))
        except KubeError:
            return None  # the CRD is being established

    return await eventually(created, timeout=10)  # type: ignore[no-any-return]


async def _running(stack: Stack, aw: str, count: int) -> bool:
    pods = await pods_of(stack, aw)
    return len([p for p in pods if (p.get("status") or {}).get("phase") == "Running"]) >= count


async def test_watcher_and_tracker_clear_a_job_teardown_from_watch_events(stack: Stack) -> None:
    aw = await _appwrapper(stack, "e2e")
    await asyncio.gather(stack.start_watcher(), stack.start_tracker())
    job = await create_job(stack, "e2e", aw="e2e", pods=8)
    await eventually(lambda: _running(stack, "e2e", 8), timeout=10)
    traceparent = new_traceparent()
    await stack.kube.delete(JOBS, "e2e", namespace=NAMESPACE, propagation_policy="Background")
    started = await stack.start_teardown(
        "e2e",
        inventory=[job],
        policy=SLOW,
        aw_uid=aw["metadata"]["uid"],  # type: ignore[index]
        traceparent=traceparent,
    )
    cleared = await stack.cleared("e2e", timeout=15)
    event = cleared.event
    assert isinstance(event, CycleCleared)
    assert len(event.confirmed) == 9
    assert not await pods_of(stack, "e2e")
    hows = {
        c.how
        for r in stack.recorder.of("cycle.deletion.confirmed", aw="e2e")
        if isinstance(r.event, CycleDeletionConfirmed)
        for c in r.event.confirmed
    }
    assert "watch_deleted" in hows, hows
    record = await stack.record(started)
    assert record is not None and record.cleared


async def test_deletions_while_the_real_watcher_is_down_are_confirmed(stack: Stack) -> None:
    await _appwrapper(stack, "down")
    watcher, _ = await asyncio.gather(stack.start_watcher(), stack.start_tracker())
    pods = [await stack.create_pod(f"down-w-{i}", aw="down", grace=1) for i in range(3)]
    await eventually(lambda: _running(stack, "down", 3), timeout=10)
    watcher.kill()
    for pod in pods:
        await stack.delete_pod(pod["metadata"]["name"])
    await stack.start_teardown("down", inventory=pods, policy=SLOW)
    cleared = await stack.cleared("down", timeout=15)
    assert isinstance(cleared.event, CycleCleared)
    assert {o.uid for o in cleared.event.confirmed} == {p["metadata"]["uid"] for p in pods}
