"""One OpenTelemetry trace per requeue cycle, across the three services and a tracker crash.

The spans are what a collector (Jaeger) receives: real OTLP http/protobuf posted by each
service process to ``OTEL_EXPORTER_OTLP_ENDPOINT``, decoded by the stack's receiver. The
cycle's context travels in NATS headers and in the tracker's KV record, so a tracker killed
with SIGKILL mid-teardown and started again must keep adding its spans to the same trace.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Launch, appwrapper, eventually, item, pod_state, pod_template, requeuing

from clearance import events
from clearance.traces import ReceivedSpan, TraceReceiver, waterfall

pytestmark = pytest.mark.slow

CYCLE_SPANS = {"teardown.delete", "deletion.await", "deletion.escalate", "cleared", "redispatch"}
"""Direct children of ``requeue.cycle`` (DESIGN §6)."""
SERVICES = {"clearance-dispatcher", "clearance-tracker", "clearance-watcher"}


def attempt_of(span: ReceivedSpan) -> object:
    return span.attributes.get("clearance.attempt", span.attributes.get("attempt"))


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

    roots = [s for s in receiver.spans if s.name == "requeue.cycle"]
    assert len(roots) == 1, roots
    assert root.parent_span_id is None
    assert attempt_of(root) == 1, root.attributes
    trace = receiver.trace(root.trace_id)
    by_id = {s.span_id: s for s in trace}
    print(waterfall(trace))

    # One trace per cycle: every cycle span of every service is in it, none elsewhere.
    strays = [s for s in receiver.spans if s.name in CYCLE_SPANS and s.trace_id != root.trace_id]
    assert strays == []
    assert {s.name for s in trace} >= CYCLE_SPANS
    for span in trace:
        if span.name in CYCLE_SPANS:
            assert span.parent_span_id == root.span_id, (span.name, span.service)
    # No orphan: every parent is part of the trace.
    orphans = [s for s in trace if s.parent_span_id is not None and s.parent_span_id not in by_id]
    assert orphans == [], [(s.name, s.service) for s in orphans]
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

    services = {s.service for s in trace}
    assert {"clearance-dispatcher", "clearance-tracker"} <= services
    if "clearance-watcher" not in services:
        pytest.xfail(
            "the watcher contributes no span to the cycle trace yet (DESIGN §6: spans from all "
            "three services); the lead is adding watcher spans"
        )
    assert services == SERVICES
