"""The OTLP receiver decodes what the real exporter sends; the waterfall shows the tree."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import Link

from clearance.telemetry import setup_tracing
from clearance.traces import ReceivedSpan, TraceReceiver, waterfall


async def test_receiver_collects_spans_posted_by_the_real_otlp_exporter() -> None:
    receiver = await TraceReceiver().start()
    try:
        provider = setup_tracing(
            "clearance-test", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        )
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("requeue.cycle", attributes={"attempt": 2}) as root:
            with tracer.start_as_current_span("deletion.await") as child:
                pass
            tracer.start_span("cleared", links=[Link(child.get_span_context())]).end()
        await asyncio.to_thread(provider.force_flush)
        cleared = await receiver.wait_for("cleared", timeout=5)
        provider.shutdown()
    finally:
        await receiver.stop()
    trace_id = format(root.get_span_context().trace_id, "032x")
    spans = {s.name: s for s in receiver.trace(trace_id)}
    assert set(spans) == {"requeue.cycle", "deletion.await", "cleared"}
    assert spans["requeue.cycle"].service == "clearance-test"
    assert spans["requeue.cycle"].attributes["attempt"] == 2
    assert spans["deletion.await"].parent_span_id == spans["requeue.cycle"].span_id
    assert cleared.parent_span_id == spans["requeue.cycle"].span_id
    assert cleared.links[0].span_id == spans["deletion.await"].span_id


def span(name: str, span_id: str, parent: str | None, start: int, end: int) -> ReceivedSpan:
    return ReceivedSpan("svc", name, "t" * 32, span_id, parent, start, end)


def test_waterfall_indents_children_under_their_parent_in_start_order() -> None:
    text = waterfall(
        [
            span("redispatch", "c", "a", 8_000_000_000, 9_000_000_000),
            span("requeue.cycle", "a", None, 0, 10_000_000_000),
            span("deletion.await", "b", "a", 1_000_000_000, 7_000_000_000),
        ],
        width=10,
    )
    names = [line.split()[0] for line in text.splitlines()]
    assert names == ["requeue.cycle", "deletion.await", "redispatch"]
    lines = text.splitlines()
    assert lines[1].startswith("  deletion.await")
    assert "|" + "█" * 10 + "|" in lines[0]
    assert lines[0].rstrip().endswith("10.0s")
