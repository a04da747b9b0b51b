"""One trace per requeue cycle (DESIGN §6): the dispatcher's part of it.

The service runs in-process here (same code as the console script) so that its spans can be
read from an in-memory exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from tests.support.dispatcher_env import job_appwrapper

from clearance import attributes as attr
from clearance.kube import KubeConfig
from clearance_dispatcher.service import Service
from clearance_dispatcher.settings import DispatcherSettings


@contextlib.asynccontextmanager
async def running_dispatcher(env: Any, tracing: Any, **overrides: Any) -> AsyncIterator[Service]:
    """The dispatcher in this process (its spans go to ``tracing``); on exit it is stopped and
    must exit 0."""
    settings = DispatcherSettings(
        **{
            "nats_url": env.nats_url,
            "http_host": "127.0.0.1",
            "http_port": 0,
            "intake": "kube",
            "pause_time": 0.0,
            "queue_scan_interval": 0.5,
            "monitor_interval": 0.3,
            "lease_duration": 3.0,
            "lease_retry_period": 0.5,
            "consumer_ack_wait": 2.0,
            "stuck_alert_time": 1.0,
            **overrides,
        }
    )
    service = Service(
        settings,
        tracer_provider=tracing.provider,
        kube_config=KubeConfig(kubeconfig=str(env.cluster.kubeconfig_path)),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        yield service
    finally:
        stop.set()
        code = await asyncio.wait_for(task, 15)
    assert code == 0


async def _requeue_once(env: Any, name: str) -> None:
    """An AppWrapper whose pods never run: requeued after 1 s, then redispatched."""
    await env.create_aw(
        job_appwrapper(
            name,
            env.namespace,
            unschedulable=True,
            min_available=1,
            completion=False,
            requeuing={"timeInSeconds": 1, "growthType": "none"},
        )
    )
    await env.wait_event("cycle.redispatched", name, timeout=30)


async def test_requeue_cycle_is_one_trace_from_decision_to_redispatch(
    make_env: Any, tracing: Any
) -> None:
    env = await make_env()
    async with running_dispatcher(env, tracing):
        await _requeue_once(env, "traced")
    spans = tracing.exporter.get_finished_spans()
    (root,) = [
        s for s in spans if s.name == "requeue.cycle" and s.attributes.get("clearance.attempt") == 1
    ]
    assert root.parent is None
    assert root.attributes[attr.APPWRAPPER_NAME] == "traced"
    assert root.attributes["clearance.reason"] == "MinPodsNotRunning"
    trace_id = root.context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    assert {"requeue.cycle", "teardown.delete", "redispatch"} <= names, names
    (redispatch,) = [s for s in in_trace if s.name == "redispatch"]
    assert redispatch.parent is not None and redispatch.parent.span_id == root.context.span_id
    assert any(s.name.endswith("teardown.started") for s in in_trace)  # PRODUCER span


async def test_span_attributes_are_semantic_conventions_or_clearance_namespaced(
    make_env: Any, tracing: Any
) -> None:
    env = await make_env()
    async with running_dispatcher(env, tracing):
        await _requeue_once(env, "named")
    spans = tracing.exporter.get_finished_spans()
    names = {name for s in spans for name in (s.attributes or {})}
    assert {
        attr.K8S_NAMESPACE_NAME,
        attr.APPWRAPPER_NAME,
        attr.APPWRAPPER_UID,
        attr.ATTEMPT,
    } <= names, names
    assert {"messaging.system", "messaging.destination.name"} <= names, names
    ours = {v for k, v in vars(attr).items() if k.isupper() and isinstance(v, str)}
    unknown = [n for n in names if n not in ours and not n.startswith(("clearance.", "messaging."))]
    assert unknown == [], unknown
    (root,) = [s for s in spans if s.name == "requeue.cycle"]
    assert root.attributes is not None
    assert root.attributes[attr.K8S_NAMESPACE_NAME] == env.namespace


async def test_root_of_a_cycle_that_ends_failed_is_ended_by_its_cleared(
    make_env: Any, tracing: Any
) -> None:
    """maxNumRequeuings reached → Failed + teardown: no redispatch follows, so the cycle's
    root ends (outcome failed) when that teardown's ``cleared`` is handled, not at shutdown."""
    env = await make_env()

    def failed_roots() -> list[Any]:
        return [
            s
            for s in tracing.exporter.get_finished_spans()
            if s.name == "requeue.cycle" and s.attributes.get("clearance.attempt") == 2
        ]

    async with running_dispatcher(env, tracing):
        await env.create_aw(
            job_appwrapper(
                "limited",
                env.namespace,
                unschedulable=True,
                min_available=1,
                completion=False,
                requeuing={"timeInSeconds": 1, "growthType": "none", "maxNumRequeuings": 1},
            )
        )
        cleared = await env.wait_event("cycle.cleared", "limited", count=2, timeout=40)
        assert [e.attempt for e in cleared] == [1, 2]
        for _ in range(50):  # the dispatcher handles cleared asynchronously
            if failed_roots():
                break
            await asyncio.sleep(0.1)
        (root,) = failed_roots()  # ended while the dispatcher still runs
        assert root.attributes["clearance.outcome"] == "failed"
        assert root.attributes["clearance.reason"] == "MaxNumRequeuingsReached"


async def test_restart_mid_teardown_re_creates_the_cycle_root_from_status(
    make_env: Any, tracing: Any
) -> None:
    """The root lived in a process killed mid-teardown: the new leader emits it at the
    redispatch with the ids of ``cycleTraceparent`` and the start ``cycleStartedAt``."""
    env = await make_env()
    await env.create_aw(
        job_appwrapper(
            "rerooted",
            env.namespace,
            unschedulable=True,
            min_available=1,
            completion=False,
            requeuing={"timeInSeconds": 1, "growthType": "none"},
        )
    )
    crashed = await env.start_dispatcher(
        name="dispatcher-crashing",
        wait=False,
        CLEARANCE_INTAKE="kube",
        CLEARANCE_TEST_CRASH_AT="teardown.published",
        CLEARANCE_LEASE_DURATION="1s",
        CLEARANCE_LEASE_RETRY_PERIOD="200ms",
    )
    for _ in range(300):
        if not crashed.running:
            break
        await asyncio.sleep(0.1)
    assert crashed.process.returncode == -9, crashed.output()
    clearance = (await env.get_aw("rerooted"))["status"]["clearance"]
    _, trace_hex, span_hex, _ = clearance["cycleTraceparent"].split("-")
    assert clearance["cycleStartedAt"]

    def roots() -> list[Any]:
        return [
            s
            for s in tracing.exporter.get_finished_spans()
            if s.name == "requeue.cycle" and s.attributes.get("clearance.attempt") == 1
        ]

    async with running_dispatcher(env, tracing, lease_duration=1.0, lease_retry_period=0.2):
        await env.wait_event("cycle.redispatched", "rerooted", timeout=30)
        for _ in range(50):
            if roots():
                break
            await asyncio.sleep(0.1)
        (root,) = roots()  # exported at the redispatch, not at shutdown
    assert root.parent is None
    assert f"{root.context.trace_id:032x}" == trace_hex
    assert f"{root.context.span_id:016x}" == span_hex
    assert root.attributes["clearance.outcome"] == "redispatched"
    assert root.attributes["clearance.reason"] == "MinPodsNotRunning"
    started = datetime.fromisoformat(clearance["cycleStartedAt"].replace("Z", "+00:00"))
    assert abs(root.start_time - int(started.timestamp() * 1e9)) < 1_000_000  # µs in status
    (redispatch,) = [
        s
        for s in tracing.exporter.get_finished_spans()
        if s.name == "redispatch" and s.context.trace_id == root.context.trace_id
    ]
    assert redispatch.parent is not None and redispatch.parent.span_id == root.context.span_id
    assert len(roots()) == 1  # the root exists once (no second copy at shutdown)


async def test_a_requeue_decision_whose_status_write_fails_exports_no_extra_cycle_root(
    make_env: Any, tracing: Any
) -> None:
    # Found by the chaos harness (seed 8, --short): the root started for a decision whose
    # write failed was ended, so the retried decision made the cycle's second root.
    env = await make_env()
    async with running_dispatcher(env, tracing):
        await env.create_aw(
            job_appwrapper(
                "refused",
                env.namespace,
                unschedulable=True,
                min_available=1,
                completion=False,
                requeuing={"timeInSeconds": 1, "growthType": "none"},
            )
        )
        # Once both pending pods of the Job are counted, the next status write of the
        # AppWrapper is the requeue decision (due 1 s after the dispatch): it fails twice.
        await env.wait_aw(
            "refused", lambda aw: (aw.get("status") or {}).get("pending") == 2, what="pending 2"
        )
        env.cluster.server.faults.add(
            {"path": "/appwrappers/refused/status$", "code": 500, "count": 2}
        )
        await env.wait_event("cycle.redispatched", "refused", timeout=30)
    roots = [
        s
        for s in tracing.exporter.get_finished_spans()
        if s.name == "requeue.cycle" and s.attributes.get("clearance.attempt") == 1
    ]
    assert len(roots) == 1, [(r.context.span_id, r.start_time) for r in roots]
