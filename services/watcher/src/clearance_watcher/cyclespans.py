"""The PRODUCER span of a kube event that joins a requeue cycle's trace, on the pipelined path.

A deletion the tracker waits for is published inside the cycle's trace (DESIGN §6). The span
starts when the event is sent, its context travels as the ``traceparent`` header lines of
the pre-encoded frame (so the tracker's CONSUMER span is its child), and it ends with the
PubAck, or with an error status when the send fails or is withdrawn.
"""

from __future__ import annotations

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

from clearance import attributes, bus, subjects
from clearance.events import KubeEvent
from clearance.telemetry import context_from_traceparent, inject_headers
from clearance_watcher.ackinbox import header_line

__all__ = ["end", "header_lines", "span_name", "start"]


def span_name(event: KubeEvent) -> str:
    """The name of the span of a cycle's kube event, on either publishing path."""
    return f"observe {event.kube_kind} {event.action.lower()}"


def start(tracer: Tracer, event: KubeEvent, *, traceparent: str, subject: str, size: int) -> Span:
    """The span of `event`'s send, a child of the cycle `traceparent` names."""
    return tracer.start_span(
        span_name(event),
        context=context_from_traceparent(traceparent),
        kind=SpanKind.PRODUCER,
        attributes=bus.producer_attributes(
            subject, msg_id=event.msg_id(), size=size, event_type=event.event_type
        ),
    )


def header_lines(span: Span) -> bytes:
    """The W3C trace context of `span` as NATS header lines (through the propagator)."""
    carrier = inject_headers(set_span_in_context(span))
    return b"".join(header_line(name, value) for name, value in carrier.items())


def end(span: Span, *, error: str | None = None, duplicate: bool = False) -> None:
    """End `span`: stored (and whether as a duplicate), or failed with `error`."""
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    else:
        span.set_attribute(attributes.NATS_STREAM, subjects.KUBE_STREAM)
        span.set_attribute(attributes.NATS_DUPLICATE, duplicate)
    span.end()
