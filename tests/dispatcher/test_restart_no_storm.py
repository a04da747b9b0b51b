"""DESIGN §5 "No storm" across a restart: a dispatcher SIGKILLed mid-teardown and started again
redispatches after ``cleared`` and then *monitors* the new attempt like the old process would:
its pod runs, so it is never requeued.

The AppWrapper wraps a bare Pod. The watcher publishes such a pod twice, as a ``pod`` and as an
``item`` event. Until the kind joined the ``Nats-Msg-Id``, both copies carried the same id and
JetStream kept whichever came first; when only the ``item`` events survived, a dispatcher that
read pod events alone never saw the pod run (found by tests/e2e/test_cycle_trace.py). Both
copies are stored now, and the dispatcher counts a labelled pod from its pod event; with only
the item copies (the stand-in below) the quorum LIST it runs before any requeue decision finds
the pod running. The periodic re-LIST is pushed out of the test's window so it cannot hide a
regression.

The deterministic test runs a stand-in watcher that publishes the pod *only* as ``item`` events
(the worst case); the second test runs the real watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from tests.support.dispatcher_env import REAL_TRACKER, Env, phase_is
from tests.support.polling import eventually

from clearance import bus, events, labels
from clearance.informing import Change, Informer
from clearance.kube import NODES, PODS, KubeError
from clearance.subjects import KUBE_STREAM

WAIT = 2  # requeuing.timeInSeconds
READY_LABEL = "clearance.test/ready"


def pod_appwrapper(name: str, namespace: str) -> dict[str, Any]:
    """One bare Pod that can only run on a node labelled ``READY_LABEL`` (none at first)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {READY_LABEL: "true"},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                }
            ],
        },
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingSpec": {
                "minAvailable": 1,
                "requeuing": {"timeInSeconds": WAIT, "growthType": "none"},
            },
            "resources": {"GenericItems": [{"replicas": 1, "generictemplate": pod}]},
        },
    }


async def _item_only_watcher(env: Env) -> None:
    """Publishes AppWrapper and node events, and every labelled pod as an ``item`` only."""
    from tests.support.dispatcher_env import AW

    async def publish(event: events.Event) -> None:
        await bus.publish(env.js, event.subject(), events.encode(event), msg_id=event.msg_id())

    def now() -> datetime:
        return datetime.now(UTC)

    async def aw_sink(change: Change) -> None:
        raw = msgspec.json.decode(change.raw)
        await publish(
            events.KubeAppWrapperEvent(
                action=change.action, observed_at=now(), object=events.snapshot_appwrapper(raw)
            )
        )

    async def node_sink(change: Change) -> None:
        raw = msgspec.json.decode(change.raw)
        await publish(
            events.KubeNodeEvent(
                action=change.action, observed_at=now(), object=events.snapshot_node(raw)
            )
        )

    async def pod_sink(change: Change) -> None:
        raw = msgspec.json.decode(change.raw)
        item = events.snapshot_item(raw, kind="Pod", api_version="v1")
        await publish(events.KubeItemEvent(action=change.action, observed_at=now(), object=item))

    await asyncio.gather(
        Informer(env.kube, AW, namespace=env.namespace).run(aw_sink),
        Informer(env.kube, NODES).run(node_sink),
        Informer(
            env.kube, PODS, namespace=env.namespace, label_selector=labels.MCAD_APPWRAPPER
        ).run(pod_sink),
    )


async def _wait_exit(proc: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while proc.running and time.monotonic() < deadline:  # noqa: ASYNC110 - polling a process
        await asyncio.sleep(0.05)
    assert not proc.running, f"dispatcher did not crash\n{proc.output()}"
    assert proc.process.returncode == -9, proc.process.returncode


async def _restart_mid_teardown_no_storm(env: Env) -> None:
    fast = {
        "CLEARANCE_INTAKE": "nats",
        "CLEARANCE_LEASE_DURATION": "1s",
        "CLEARANCE_LEASE_RETRY_PERIOD": "200ms",
        "CLEARANCE_RESYNC_INTERVAL": "600s",
    }
    await env.create_aw(pod_appwrapper("nostorm", env.namespace))
    # Attempt 1 cannot run (no node carries the label): requeued after WAIT, and the
    # dispatcher dies right after publishing teardown.started, before cleared.
    first = await env.start_dispatcher(
        name="dispatcher-1", wait=False, CLEARANCE_TEST_CRASH_AT="teardown.published", **fast
    )
    await _wait_exit(first)
    # The process is gone; its last publish may still be on its way to the test's recorder.
    await eventually(
        lambda: [e.attempt for e in env.cycle_events("cycle.teardown.started", "nostorm")] == [1],
        timeout=5,
        what="the crashed dispatcher's teardown.started of attempt 1 recorded",
    )
    await env.kube.patch(NODES, "node-1", {"metadata": {"labels": {READY_LABEL: "true"}}})
    await env.start_dispatcher(name="dispatcher-2", **fast)
    await env.wait_event("cycle.redispatched", "nostorm", timeout=30)

    async def attempt_two_running() -> bool:
        try:
            raw = await env.kube.get(PODS, "nostorm-0", namespace=env.namespace)
        except KubeError:
            return False
        pod = json.loads(raw)
        return bool(
            pod["metadata"]["labels"].get("clearance.dev/attempt") == "2"
            and pod.get("status", {}).get("phase") == "Running"
        )

    deadline = time.monotonic() + 20
    while not await attempt_two_running():
        assert time.monotonic() < deadline, f"attempt 2's pod never ran\n{env.logs()}"
        await asyncio.sleep(0.1)
    # The restarted dispatcher sees the pod run (Running condition, counts in status) ...
    await env.wait_aw(
        "nostorm",
        lambda aw: phase_is("Dispatched", 2)(aw) and (aw.get("status") or {}).get("running") == 1,
        timeout=10,
        what="attempt 2 Dispatched with running=1",
    )
    # ... and never requeues it: watch for more than twice the requeue wait.
    await asyncio.sleep(2 * WAIT + 1.5)
    requeued = [e.attempt for e in env.cycle_events("cycle.requeued", "nostorm")]
    assert requeued == [1], f"requeued attempts {requeued}\n{env.logs()}"
    aw = await env.get_aw("nostorm")
    assert phase_is("Dispatched", 2)(aw), aw.get("status")
    await env.assert_safety()


@pytest.mark.skipif(not REAL_TRACKER, reason="needs the real clearance-tracker")
async def test_restart_mid_teardown_pod_seen_only_as_item_is_not_requeued(make_env: Any) -> None:
    """Deterministic: the stand-in watcher publishes the pod only as ``item`` events."""
    env = await make_env(pod_run_time=3600.0, watcher=False)
    stand_in = asyncio.create_task(_item_only_watcher(env))
    try:
        await _restart_mid_teardown_no_storm(env)
        pod_events = await env.js.stream_info(
            KUBE_STREAM, subjects_filter="clearance.kube.v1.pod.>"
        )
        assert not pod_events.state.subjects, "the stand-in watcher published pod events"
    finally:
        stand_in.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stand_in


async def test_restart_mid_teardown_then_the_redispatched_attempt_is_not_requeued(
    make_env: Any,
) -> None:
    """The same with the real watcher (whichever copy of the pod events JetStream keeps)."""
    await _restart_mid_teardown_no_storm(await make_env(pod_run_time=3600.0))
