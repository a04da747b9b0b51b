"""One trace per requeue cycle (DESIGN §6): the dispatcher's part of it.

The service runs in-process here (same code as the console script) so that its spans can be
read from an in-memory exporter.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.dispatcher.conftest import job_appwrapper

from clearance.kube import KubeConfig
from clearance_dispatcher.service import Service
from clearance_dispatcher.settings import DispatcherSettings


async def test_requeue_cycle_is_one_trace_from_decision_to_redispatch(
    make_env: Any, tracing: Any
) -> None:
    env = await make_env()
    settings = DispatcherSettings(
        nats_url=env.nats_url,
        http_host="127.0.0.1",
        http_port=0,
        intake="kube",
        pause_time=0.0,
        queue_scan_interval=0.5,
        monitor_interval=0.3,
        lease_duration=3.0,
        lease_retry_period=0.5,
        consumer_ack_wait=2.0,
        stuck_alert_time=1.0,
    )
    service = Service(
        settings,
        tracer_provider=tracing.provider,
        kube_config=KubeConfig(kubeconfig=str(env.cluster.kubeconfig_path)),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        await env.create_aw(
            job_appwrapper(
                "traced",
                env.namespace,
                unschedulable=True,
                min_available=1,
                completion=False,
                requeuing={"timeInSeconds": 1, "growthType": "none"},
            )
        )
        await env.wait_event("cycle.redispatched", "traced", timeout=30)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            assert await asyncio.wait_for(task, 15) == 0
    spans = tracing.exporter.get_finished_spans()
    (root,) = [
        s for s in spans if s.name == "requeue.cycle" and s.attributes.get("clearance.attempt") == 1
    ]
    assert root.parent is None
    assert root.attributes["appwrapper.name"] == "traced"
    assert root.attributes["clearance.reason"] == "MinPodsNotRunning"
    trace_id = root.context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    assert {"requeue.cycle", "teardown.delete", "redispatch"} <= names, names
    (redispatch,) = [s for s in in_trace if s.name == "redispatch"]
    assert redispatch.parent is not None and redispatch.parent.span_id == root.context.span_id
    assert any(s.name.endswith("teardown.started") for s in in_trace)  # PRODUCER span
