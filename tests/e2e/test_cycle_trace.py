"""One OpenTelemetry trace per requeue cycle, across the three services and a tracker crash.

The spans are what a collector (Jaeger) receives: real OTLP http/protobuf posted by each
service process to ``OTEL_EXPORTER_OTLP_ENDPOINT``, decoded by the stack's receiver. The
cycle's context travels in NATS headers and in the tracker's KV record, so a tracker killed
with SIGKILL mid-teardown and started again must keep adding its spans to the same trace.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Launch,
    appwrapper,
    check_cycle_trace,
    eventually,
    item,
    pod_state,
    pod_template,
    requeuing,
    span_attempt,
)

from clearance import events
from clearance.traces import TraceReceiver

pytestmark = pytest.mark.slow

SERVICES = {"clearance-dispatcher", "clearance-tracker", "clearance-watcher"}


async def test_requeue_cycle_is_one_trace_across_services_and_a_tracker_restart(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    receiver = scenario.stack.receiver
    assert isinstance(receiver, TraceReceiver)
    await scenario.submit(
        appwrapper(
            "traced",
            [item(pod_template("traced-0", grace=30), pods=1)],
            min_available=1,
            requeue=requeuing(wait=2, stuck_alert=1, force=5),
        )
    )

    async def running_node() -> str | None:
        pod = await scenario.pod("traced-0")
        return pod["spec"]["nodeName"] if pod and pod_state(pod) == "Running" else None

    scenario.lose_node(await eventually(running_node, timeout=30, what="the pod to run"))
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)
    await log.wait_for(events.AlertDeletionStuck, attempt=1, timeout=15)
    # SIGKILL loses whatever the tracker had not exported yet; that is not what this test is
    # about, so the crash comes once the stuck-alert step (and its children) reached us.
    await receiver.wait_for("deletion.escalate", timeout=10, **{"clearance.step": "stuck_alert"})

    # Crash mid-teardown: after the stuck alert, before the force-deletion deadline.
    tracker = scenario.stack.services["tracker"]
    tracker.kill()
    restarted_ns = time.time_ns()
    tracker.start()
    assert time.time() < teardown.occurred_at.timestamp() + 5, "restarted after the deadline"
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=30)
    root = await receiver.wait_for("requeue.cycle", timeout=10)
    await receiver.wait_for("redispatch", timeout=10)
    await receiver.wait_for("cleared", timeout=10)

    # One root, every cycle span a direct child, no orphan, nothing of the cycle elsewhere.
    trace = await check_cycle_trace(scenario, "traced", 1)
    assert [s for s in receiver.spans if s.name == "requeue.cycle"] == [root]
    assert span_attempt(root) == 1, root.attributes
    by_id = {s.span_id: s for s in trace}
    # Confirmations hang under deletion.await; cleared links to them.
    confirmations = [s for s in trace if s.name == "deletion.confirmed"]
    assert confirmations
    for span in confirmations:
        assert by_id[span.parent_span_id or ""].name == "deletion.await"
    (cleared,) = [s for s in trace if s.name == "cleared"]
    assert cleared.links
    assert {(link.trace_id, link.span_id) for link in cleared.links} <= {
        (s.trace_id, s.span_id) for s in confirmations
    }
    # The tracker started after the crash kept adding to the same trace.
    after_restart = [
        s for s in trace if s.service == "clearance-tracker" and s.start_ns >= restarted_ns
    ]
    assert {s.name for s in after_restart} >= {"deletion.escalate", "cleared"}

    # DESIGN §6: spans from all three services (the watcher witnesses the deletions).
    assert {s.service for s in trace} == SERVICES


async def test_dispatcher_restart_mid_teardown_keeps_the_cycle_in_one_rooted_trace(
    launch: Launch,
) -> None:
    scenario = await launch()
    log = scenario.log
    receiver = scenario.stack.receiver
    assert isinstance(receiver, TraceReceiver)
    await scenario.submit(
        appwrapper(
            "rerooted",
            [item(pod_template("rerooted-0", grace=30), pods=1)],
            min_available=1,
            requeue=requeuing(wait=2, stuck_alert=2, force=5),
        )
    )

    async def running_node() -> str | None:
        pod = await scenario.pod("rerooted-0")
        return pod["spec"]["nodeName"] if pod and pod_state(pod) == "Running" else None

    scenario.lose_node(await eventually(running_node, timeout=30, what="the pod to run"))
    await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)
    # The dispatcher crashes once its teardown spans were exported; the root is still open.
    await receiver.wait_for("teardown.delete", timeout=10)
    dispatcher = scenario.stack.services["dispatcher"]
    dispatcher.kill()
    dispatcher.start()
    await log.wait_for(events.CycleRedispatched, attempt=2, timeout=40)

    async def second_attempt_running() -> bool:
        pod = await scenario.pod("rerooted-0")
        return (
            pod_state(pod) == "Running"
            and pod is not None
            and pod["metadata"]["labels"].get("clearance.dev/attempt") == "2"
        )

    await eventually(second_attempt_running, timeout=20, what="attempt 2's pod to run")
    # The restarted dispatcher monitors the new attempt like the old one would: its pod runs,
    # so there is no further requeue once the wait (2 s) has passed.
    await asyncio.sleep(3.5)
    assert pod_state(await scenario.pod("rerooted-0")) == "Running"
    assert [e.attempt for e in log.of(events.CycleRequeued)] == [1]
    # The cycle still has its root, and everything (also from the new process) hangs off it.
    await check_cycle_trace(scenario, "rerooted", 1)
